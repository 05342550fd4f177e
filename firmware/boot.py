"""hutch's boot.py: what a board runs first at every reset, before main.py.

hutch needs nothing here. By now MicroPython has mounted the board's filesystem
(and a ROMFS partition, if the firmware has one, at /rom with /rom and
/rom/lib on sys.path), and main.py starts the broker. Keep this file short: a
mistake in boot.py runs before anything else at every reset.
"""
