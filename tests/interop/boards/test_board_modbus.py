"""A board that polls Modbus devices on its UART: the esp32 profile on MicroPython's unix port,
the firmware bundle with the board's RTU master (python -m hutch.firmware.build --modbus) in
ROMFS as on a board, its serial line one end of a socat pty pair, pymodbus's server on the other
as two soil probes and a third whose answers come with a bad CRC (examples/modbus_device.py).

The probes are polled one request at a time, each poll's values its own read's (the scripted
values say which read they came from), numbered without a repeat; the garbled one is down for
an error (said once in the log) and costs the others nothing; the readings reach a pika
consumer as a CPython gateway's do. The heap is printed from the broker's stats lines (live
with the three devices polled, before any client; the peak once one drained the readings): not
asserted, the figures go to docs/boards.md with the command that reproduces them.
"""

import json
import subprocess
import sys
import time

import pytest
from board_heap import heap_figures, stop_board
from brokers import RunningBroker, stop_all, wait_until
from modbus_support import ModbusDevices, PtyPair, bound_queue, check_polls, drain, polls_by_device

from hutch.firmware import build

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("board_memory")]
HEAP = "256k"  # (this port is 64-bit: the 32-bit figures are hutch bench --board wasm32's)
INTERVAL = 0.25  # seconds between a device's polls
BAUD = 19200


def device(name, line, unit):
    return {
        "name": name,
        "uri": "modbus+rtu://%s?baudrate=%d" % (line, BAUD),
        "unit": unit,
        "interval": INTERVAL,
        # (the default second: pymodbus's simulated probes on a run's loaded machine answered
        # after 0.3 s now and then, and a probe that did was down for a timeout; the garbled
        # unit is down for its bad CRC, whatever the timeout)
        "timeout": 1.0,
        "retries": 0,
        "registers": [
            {"name": "moisture", "address": 0, "kind": "holding", "type": "uint16", "scale": 0.1, "unit": "%"},
            {"name": "temp", "address": 0, "kind": "input", "type": "float32", "unit": "°C"},
        ],
    }


def test_an_esp32_board_polls_two_probes_on_its_rs485_line_and_counts_a_garbled_one(tmp_path):
    romfs = build.build(str(tmp_path / "firmware"), bundle_name="broker-modbus")["romfs"]
    line = PtyPair(tmp_path)
    devices = ModbusDevices(None, [1, 2, "garbled=3"], line=line.ends[0])
    config = {
        "device": [device(name, line.ends[1], unit) for name, unit in (("soil-1", 1), ("soil-2", 2), ("noisy", 3))],
    }
    (tmp_path / "board").mkdir()
    path = tmp_path / "board" / "hutch.json"
    path.write_text(json.dumps(config))
    command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=" + HEAP]
    command += ["-m", "hutch.server.serve", "--board", "esp32", "--stats-interval", "1", "--config", str(path)]
    board = RunningBroker(command, tmp_path / "board")
    try:
        board.start()
        wait_until(lambda: board.log().count(": up (modbus+rtu") == 2, 15, what="both probes up")
        wait_until(lambda: "device noisy: down" in board.log(), 15, what="the noisy device down")
        live, _ = heap_figures(board)  # (no client yet: the broker and its three devices)
        bound_queue(board)
        time.sleep(12 * INTERVAL)
        polls, statuses = polls_by_device(drain(board))
        _, peak = heap_figures(board)
        devices.stop()  # (the probes go down: polled after a backoff, the board mostly idle for its Ctrl-C)
        wait_until(lambda: board.log().count(": down (timeout") == 2, 15, what="both probes down")
        stop_board(board)
    finally:
        stop_all(*([board] if board.proc is not None and board.proc.poll() is None else []), devices, line)
    check_polls({name: polls[name] for name in ("soil-1", "soil-2")})
    assert len(polls["soil-1"]) >= 6 and len(polls["soil-2"]) >= 6, {d: sorted(p) for d, p in polls.items()}
    assert "noisy" not in polls and not [s for s in statuses if s["state"] == "down"], statuses
    # (its status message went out before the test's queue was bound: server/devices/polling.py publishes
    # it as on CPython, where tests/interop/devices/test_modbus.py reads it)
    said = [line for line in board.log().splitlines() if "device noisy:" in line]
    assert len(said) == 1 and "down (error: " in said[0], said
    assert "that were no answer (a bad CRC, or noise on the line)" in said[0], said
    assert "MicroPython" in board.log()
    print(
        "\nesp32 profile polling 3 Modbus RTU devices at %d baud, unix heap %s: live %d B, peak %d B with a client"
        % (BAUD, HEAP, live, peak)
    )


def test_a_board_whose_firmware_has_no_modbus_master_says_so_in_one_line(tmp_path):
    """The broker's bundle without --modbus holds none of the devices' code: a config with a
    [[device]] stops the board at start with one line naming the build that has it."""
    romfs = build.build(str(tmp_path / "firmware"), bundle_name="broker")["romfs"]
    path = tmp_path / "hutch.json"
    path.write_text(json.dumps({"device": [device("probe", "uart2", 1)]}))
    command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=" + HEAP]
    command += ["-m", "hutch.server.serve", "--board", "esp32", "--config", str(path), "--data", str(tmp_path / "d")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    lines = [
        line for line in (done.stdout + done.stderr).splitlines() if line and not line.startswith(("|", "\\", "/"))
    ]
    assert done.returncode == 2, done.stdout + done.stderr
    assert lines[-1].endswith(
        "[[device]]: this board's firmware polls no Modbus devices (build it with --modbus; "
        "hutch flash does for a config with a [[device]])"
    ), lines


def test_a_heap_too_small_for_the_devices_says_so_in_one_line(tmp_path):
    """At 140 KiB of the unix port's heap the broker loads, but not with three devices besides
    (tests/interop/boards/test_board_memory.py: the idle broker takes about 117 KiB): the start
    stops with one line saying what the board has, and exit code 1."""
    romfs = build.build(str(tmp_path / "firmware"), bundle_name="broker-modbus")["romfs"]
    line = PtyPair(tmp_path)
    path = tmp_path / "hutch.json"
    path.write_text(json.dumps({"device": [device("probe-%d" % unit, line.ends[1], unit) for unit in (1, 2, 3)]}))
    command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=140k"]
    command += ["-m", "hutch.server.serve", "--board", "esp32", "--config", str(path), "--data", str(tmp_path / "d")]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    finally:
        line.stop()
    said = [line for line in done.stderr.splitlines() if line.startswith("hutch: ")]
    assert done.returncode == 1 and len(said) == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    assert said[0].startswith("hutch: the heap ran out while starting: this board's "), said
    assert said[0].endswith("ask for less, or use a board with more memory"), said
