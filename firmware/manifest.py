# Freeze hutch into a MicroPython firmware: its bytecode then runs from flash
# and boots without any file on the board but hutch.json. See firmware/README.md:
#
#   python -m hutch.firmware.build     # stages build/firmware/source/hutch/, what is frozen here
#   cd micropython/ports/esp32         # or ports/rp2, ...
#   make BOARD=ESP32_GENERIC FROZEN_MANIFEST=/path/to/hutch/firmware/manifest.py
#
# MicroPython's build runs this file with include(), package() and module()
# defined, from this folder: relative paths start here.
import os

# What the board freezes anyway (asyncio, ...): its own manifest when it has one
# (RPI_PICO_W adds networking), otherwise its port's.
try:
    include("$(BOARD_DIR)/manifest.py")
except Exception as e:
    if not isinstance(e.__context__, FileNotFoundError):  # a board manifest that exists but fails
        raise
    include("$(PORT_DIR)/boards/manifest.py")

# hutch's board-side packages as the firmware build stages them: the spec constants
# folded into literals (12 KiB of heap less), host-only tools left out.
SOURCE = "../build/firmware/source"
if not os.path.isdir(os.path.join(SOURCE, "hutch")):
    raise Exception("hutch is not staged: run `python -m hutch.firmware.build` in the hutch checkout first")
package("hutch", base_path=SOURCE, opt=2)

# main.py frozen runs at every boot (a main.py on the board's filesystem, if any,
# is ignored). boot.py is not frozen: the board's own stays in charge.
module("main.py")
