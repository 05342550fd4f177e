# What of hutch.server goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# all of it, the broker's entry point that firmware/main.py starts.
package("hutch/server", files=("__init__.py", "config.py", "options.py", "serve.py"))
