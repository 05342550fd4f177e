"""hutch's C accelerator (CPython on Linux only): see README.md and loader.py."""
