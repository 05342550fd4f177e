"""A board's bridge to a 1.0 cloud: the esp32 profile on MicroPython's unix port, the code in
the firmware bundle's ROMFS as on a board (emulator/unixboard.py), forwarding to a hutch over
AMQP 1.0; and the same bridge over AMQP 0-9-1 for comparison. The heap each takes, idle with
the link running and after forwarding, is printed from the broker's own stats lines (not
asserted: measured figures go to docs/performance.md with the command that reproduces them).
"""

import json
import os
import sys

import pytest
from board_heap import heap_figures
from bridging import consume_all, publish_confirmed, upstream_queue
from brokers import BIN, RunningBroker, interrupt_between_collections, wait_until

from hutch.firmware import build

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("board_memory")]
# (256k: at its peak the 1.0 bridge's board held 204-209 KB, and under CI's parallel load a
# collection late enough left a client's connection below the board's floor: 506, in two of
# four runs. The figures printed are the same whatever the heap's size.)
HEAP = "288k"


def bridge_lines(board):
    """What the board's log says of its bridge: why it stopped or sent again, if it did."""
    return "\n".join(line for line in board.log().splitlines() if "bridge" in line or "Error" in line)


@pytest.fixture(scope="module")
def romfs(tmp_path_factory):
    return build.build(str(tmp_path_factory.mktemp("firmware")))["romfs"]


@pytest.mark.parametrize("protocol", ["0-9-1", "1.0"])
def test_an_esp32_board_bridges_to_hutch_over_each_protocol(romfs, tmp_path, protocol):
    up_folder = tmp_path / "up"
    up_folder.mkdir()
    upstream = RunningBroker([os.path.join(BIN, "hutch"), "serve"], up_folder).start()
    upstream_queue(upstream.url, "from-board")
    scheme = "amqp10" if protocol == "1.0" else "amqp"
    bridge = {"name": "board-up", "uri": "%s://guest:guest@127.0.0.1:%d" % (scheme, upstream.port)}
    bridge.update(queue="board-out", exchange="", routing_key="from-board")
    config = tmp_path / "hutch.json"
    config.write_text(json.dumps({"bridge": [bridge]}))
    board_folder = tmp_path / "board"
    board_folder.mkdir()
    command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=" + HEAP]
    command += ["-m", "hutch.server.serve", "--board", "esp32", "--stats-interval", "1", "--config", str(config)]
    board = RunningBroker(command, board_folder).start()
    try:
        wait_until(lambda: "bridge board-up: running" in board.log(), timeout=30, what="the bridge running")
        idle, _ = heap_figures(board)
        bodies = [b"board-%04d" % i + b"y" * (i % 200) for i in range(1000)]
        # One unconfirmed at a time, as a board's sensor publishes: a window of 200 in flight
        # holds some 20 KB more of the board's heap at its peak, and the figures below are a board's.
        publish_confirmed(board, "board-out", bodies, window=1)
        got = consume_all(upstream.url, "from-board", len(bodies))
        assert [body for body, _h, _m in got] == bodies, bridge_lines(board)
        after, peak = heap_figures(board)
        print(
            "esp32 profile, %s unix heap, ROMFS: a bridge over AMQP %s running: heap live %d B; "
            "after forwarding 1000: %d B live, peak %d B" % (HEAP, protocol, idle, after, peak)
        )
    finally:
        try:
            exit_code = interrupt_between_collections(board)
        finally:
            board.stop()
            upstream.stop()
    assert not board.errors() and "MemoryError" not in board.log(), board.log()[-3000:]
    assert exit_code == 0 and "bridge board-up: stopped" in board.log(), board.log()[-3000:]
