"""The `hutch` command: serve, passwd, flash, ctl, pipeline, plot, bench (each imported when it
runs), and the generator of the 0-9-1 spec table (gen_spec.py)."""
