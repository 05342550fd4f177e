"""The broker as a program, on a board and on a host: the config file (config.py), the
settings made of it and the command line (options.py), and wiring the core to its ports
and running it (serve.py).

`hutch serve` (tools/cli.py) and a board's main.py (firmware/) both start here.
"""
