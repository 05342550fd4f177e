"""MicroPython's unix port run as if it were a board (ROMFS, a serial REPL for mpremote), for
the board tests, `hutch bench --micropython` and `hutch flash` against an emulated board; and its
WebAssembly port, a 32-bit board under Node with clients in memory (wasm32.py), for
`hutch bench --board wasm32` and tests/boards."""
