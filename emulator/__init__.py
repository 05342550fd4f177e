"""MicroPython's unix port run as if it were a board (ROMFS, a serial REPL for mpremote), for
the board tests, `hutch bench --micropython` and `hutch flash` against an emulated board."""
