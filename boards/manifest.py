# What of hutch.boards goes onto a board (MicroPython's manifest syntax; see core/manifest.py):
# every profile, so one bundle serves any board (only the chosen profile is imported).
package(
    "hutch/boards",
    files=("__init__.py", "esp32.py", "esp32s3_psram.py", "rp2_pico_w.py", "rpi.py", "unix.py"),
)
