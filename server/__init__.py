"""The broker as a program, on a board and on a host: the config file (config.py), the
settings made of it and the command line (options.py), starting the broker from them
(startup.py: its journal, bridges, listeners and serial links), the protocol front ends its
listeners hand clients to (frontends.py), the runtime that ticks and stops it (runtime.py),
and the program that runs it (serve.py).

`hutch serve` (tools/cli.py) and a board's main.py (firmware/) both start here.
"""
