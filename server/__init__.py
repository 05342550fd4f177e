"""The broker as a program, on a board and on a host: options and the config file
(config.py), and wiring the core to its ports and running it (serve.py).

`hutch serve` (tools/cli.py) and a board's main.py (firmware/) both start here.
"""
