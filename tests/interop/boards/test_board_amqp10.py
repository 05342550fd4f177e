"""A board that serves AMQP 1.0 ([server] amqp10 = true): the esp32 profile on MicroPython's
unix port, the firmware bundle with the 1.0 front end (python -m hutch.firmware.build
--amqp10) in ROMFS as on a board. A Qpid Proton client sends and receives through it, and the
heap the front end takes is printed from the broker's own stats lines: idle with 1.0 served,
with one 1.0 connection, and per link (not asserted: the figures go to docs/boards.md with
the command that reproduces them). A board whose config does not ask serves 0-9-1 alone and
loads none of it.
"""

import json
import socket
import sys

import pika
import pytest
from board_heap import heap_figures
from brokers import RunningBroker, interrupt_between_collections, wait_until
from proton import Message
from proton.utils import BlockingConnection

from hutch.firmware import build

pytestmark = [pytest.mark.timeout(240), pytest.mark.xdist_group("board_memory")]
HEAP = "256k"
LINKS = 6  # (with the sender: 7 of the esp32 profile's 8 links a session)


@pytest.fixture(scope="module")
def romfs(tmp_path_factory):
    return build.build(str(tmp_path_factory.mktemp("firmware")), bundle_name="broker-amqp10")["romfs"]


def start_board(romfs, tmp_path, server):
    config = tmp_path / "hutch.json"
    config.write_text(json.dumps({"server": server}))
    command = [sys.executable, "-m", "hutch.emulator.unixboard", "--romfs", romfs, "-X", "heapsize=" + HEAP]
    command += ["-m", "hutch.server.serve", "--board", "esp32", "--stats-interval", "1", "--config", str(config)]
    return RunningBroker(command, tmp_path).start()


def test_an_esp32_board_serves_amqp_1_0_when_its_config_says_so(romfs, tmp_path):
    board = start_board(romfs, tmp_path, {"amqp10": True})
    try:
        assert "listening for AMQP 0-9-1 and 1.0 on" in board.log()
        idle, _ = heap_figures(board)
        conn = BlockingConnection("amqp://guest:guest@127.0.0.1:%d" % board.port, timeout=20, max_frame_size=4096)
        setup = pika.BlockingConnection(pika.ConnectionParameters(board.host, board.port))
        setup.channel().queue_declare("readings")
        setup.close()
        sender = conn.create_sender("/queues/readings")
        for i in range(20):
            sender.send(Message(body=b"reading %d" % i, inferred=True))
        connected, _ = heap_figures(board)
        receivers = [conn.create_receiver("/queues/readings", name="r%d" % i, credit=1) for i in range(LINKS)]
        with_links, _ = heap_figures(board)
        got = []
        for receiver in receivers:
            message = receiver.receive(20)
            got.append(bytes(message.body))
            receiver.accept()
        conn.close()
        assert len(set(got)) == LINKS and set(got) <= {b"reading %d" % i for i in range(20)}
        print(
            "esp32 profile, %s unix heap, ROMFS with the 1.0 front end: idle serving 1.0 %d B live; "
            "one 1.0 connection with a sender (20 sent) %d B; %d receiving links more %d B (%d B a link)"
            % (HEAP, idle, connected, LINKS, with_links, (with_links - connected) // LINKS)
        )
    finally:
        try:
            exit_code = interrupt_between_collections(board)
        finally:
            board.stop()
    assert not board.errors() and "MemoryError" not in board.log(), board.log()[-3000:]
    assert exit_code == 0, board.log()[-3000:]


def test_a_board_that_does_not_ask_serves_0_9_1_alone(romfs, tmp_path):
    board = start_board(romfs, tmp_path, {})
    try:
        assert "listening for AMQP 0-9-1 on" in board.log()
        with socket.create_connection((board.host, board.port), timeout=10) as s:
            s.sendall(b"AMQP\x03\x01\x00\x00")
            answer = s.recv(8)
        assert answer == b"AMQP\x00\x00\x09\x01"  # 0-9-1's header back: 1.0 is not served here
        wait_until(lambda: "unsupported protocol header" in board.log(), what="the refusal in the log")
    finally:
        interrupt_between_collections(board)
        board.stop()
