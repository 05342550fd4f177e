"""Opening a serial port (a UART) for raw bytes, on each platform: open_serial().

The broker's serial port (ports/serial.py) opens its lines with it, and so can a
sensor node that drives the link layer itself (the README, "Serial link layer"):
this module needs nothing of the broker.
"""

import os
import sys

MICROPYTHON = sys.implementation.name == "micropython"


def device_name(device):
    """A short name for logs and the connection's peer address."""
    if isinstance(device, dict):
        if "device" in device:
            return str(device["device"])
        return "uart%s" % device.get("uart", "?")
    if isinstance(device, int):
        return "uart%d" % device
    return str(device)


def uart_id(device):
    """The machine.UART number a device names (1, "1", "uart1", "UART1"), or None for a path."""
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        name = device.lower()
        if name.startswith("uart"):
            name = name[4:]
        if name.isdigit():
            return int(name)
    return None


def open_serial(device, baudrate=115200):
    """Open a serial port for raw bytes; returns the platform's port object.

    - CPython: a pyserial Serial (timeout=0): read(n) returns b"" when nothing is
      there, write(data) blocks until written, fileno() works with select.
    - MicroPython on a board: machine.UART(id, baudrate, timeout=0); `device` is
      the UART number (1, "uart1") or a dict {"uart": 1, "tx": 17, "rx": 16,
      "baudrate": 115200, "rxbuf": 1024}. read(n) returns None when nothing is there.
    - MicroPython unix port: a tty path (a USB adapter, or a pty in tests), opened
      with open(path, "r+b", buffering=0) after `stty raw -echo min 0 time 0`,
      so read(n) returns what has arrived (b"" when nothing) instead of waiting
      for all n bytes.

    A board profile's entry (boards/: {"uart": 2, "tx": 17, "rx": 16, "baudrate": n} or
    {"device": "/dev/serial0", "baudrate": n}) can be passed as it is.

    Every kind can be registered with select.poll and wrapped in asyncio.StreamReader
    on MicroPython; raises OSError (pyserial's SerialException is one) if it cannot open.
    """
    if isinstance(device, dict) and "device" in device:
        return open_serial(device["device"], device.get("baudrate", baudrate))
    if not MICROPYTHON:
        if isinstance(device, (dict, int)):
            raise ValueError("a UART number needs MicroPython's machine.UART; give a device path")
        # pyserial, imported by name: a type checker that cannot find pyserial (as in the board's
        # check, tests/typecheck/test_typecheck.py) resolves `import serial` here to this very file.
        pyserial = __import__("serial")
        return pyserial.Serial(device, baudrate, timeout=0, exclusive=True)
    if isinstance(device, dict):  # a board profile's entry: {"uart": 2, "tx": 17, "rx": 16, ...}
        return _open_uart(device, baudrate)
    uart = uart_id(device)
    if uart is not None:
        return _open_uart({"uart": uart}, baudrate)
    if hasattr(os, "system"):
        # No termios on MicroPython: stty sets raw mode. A non-zero status is not fatal:
        # the tty may already be raw (a pty set up by its creator).
        os.system("stty -F %s %d raw -echo min 0 time 0 2>/dev/null" % (device, baudrate))
    return open(device, "r+b", buffering=0)


def _open_uart(profile, baudrate):
    """A machine.UART from {"uart": its number, other UART settings...}, non-blocking (timeout=0)."""
    import machine

    settings = dict(profile)
    uart = settings.pop("uart")
    settings.setdefault("baudrate", baudrate)
    settings["timeout"] = 0
    settings.setdefault("rxbuf", 1024)  # ~90 ms at 115,200 baud: room for a busy event loop
    try:
        return machine.UART(uart, **settings)
    except (TypeError, ValueError):
        settings.pop("rxbuf", None)  # not every port takes rxbuf
        return machine.UART(uart, **settings)
