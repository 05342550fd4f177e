"""The esp32 profile's fixed memory budget, on MicroPython's unix port run as a board.

The broker runs from the firmware bundle's ROMFS image (tools/unixboard.py maps it
like a board's flash, so bytecode stays out of the heap) with `-X heapsize=N` and
`--board esp32`. The unix port is 64-bit: the same objects take roughly 1.7x the
heap they take on a 32-bit ESP32, so the heap sizes here are larger than the board's
~110 KiB for the same load. Heap figures come from the broker's own stats lines
(ports/heap.py) and are printed, not asserted.

Shown: four pika clients publishing (with confirms) and consuming (with acks)
10,000 messages of 256 bytes; on a heap too small for them all, the clients that
do not fit are refused or closed in AMQP terms (530/506) and the broker goes on;
a flood ends in backpressure (connection.blocked, basic.nack for a full queue)
and recovers with nothing lost.
"""
import re
import sys
import threading
import time

import pika
import pytest
from pika.exceptions import AMQPConnectionError, ChannelClosedByBroker, ConnectionClosedByBroker, NackError

from conftest import RunningBroker, blocked_notices, drain

from hutch.firmware import build

pytestmark = pytest.mark.timeout(240)

BODY = 256
TOTAL = 10000
CLIENTS = 4


@pytest.fixture(scope="module")
def romfs(tmp_path_factory):
    return build.build(str(tmp_path_factory.mktemp("firmware")))["romfs"]


def start_board(romfs, tmp_path, heap):
    command = [sys.executable, "-m", "hutch.tools.unixboard", "--romfs", romfs, "-X", "heapsize=" + heap,
               "-m", "hutch.tools.serve", "--board", "esp32", "--stats-interval", "1"]
    return RunningBroker(command, tmp_path).start()


def stop_board(board):
    board.proc.send_signal(2)  # Ctrl-C: MicroPython has no signal module, SIGINT is its clean stop
    try:
        board.proc.wait(15)
    finally:
        board.stop()
    assert not board.errors(), "broker logged errors:\n" + board.log()[-5000:]
    assert "MemoryError" not in board.log(), board.log()[-5000:]


def heap_figures(board):
    """(live, peak) from the newest stats line, after the next one is written."""
    time.sleep(1.2)
    line = [l for l in board.log().splitlines() if "heap live" in l][-1]
    return int(re.search(r"heap live (\d+)", line).group(1)), int(re.search(r"peak (\d+)", line).group(1))


def connect(board):
    return pika.BlockingConnection(pika.ConnectionParameters(
        board.host, board.port, heartbeat=30, blocked_connection_timeout=60, connection_attempts=1))


def body(client, n):
    return (b"%d:%06d:" % (client, n)).ljust(BODY, b"x")


def run_client(board, index, count, results):
    """Publish `count` messages with confirms to an own queue and consume them with acks."""
    try:
        conn = connect(board)
        pub = conn.channel()
        pub.confirm_delivery()
        queue = "load-%d" % index
        pub.queue_declare(queue)
        sub = conn.channel()
        sub.basic_qos(prefetch_count=4)
        got = []

        def on_message(channel, method, properties, payload):
            got.append(payload)
            channel.basic_ack(method.delivery_tag)
        sub.basic_consume(queue, on_message)
        nacks = 0
        for n in range(count):
            while True:
                try:
                    pub.basic_publish("", queue, body(index, n))
                    break
                except NackError:  # refused for lack of memory: retry once acks free some
                    nacks += 1
                    conn.process_data_events(time_limit=0.005)
            conn.process_data_events(time_limit=0)
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            conn.process_data_events(time_limit=0.1)
        intact = got == [body(index, n) for n in range(count)]
        conn.close()
        results[index] = ("done", len(got), intact, nacks)
    except (ConnectionClosedByBroker, AMQPConnectionError) as e:
        results[index] = ("refused", str(e))


def run_clients(board, stagger=0.0):
    results = {}
    threads = [threading.Thread(target=run_client, args=(board, i, TOTAL // CLIENTS, results))
               for i in range(CLIENTS)]
    started = time.monotonic()
    for t in threads:
        t.start()
        time.sleep(stagger)
    for t in threads:
        t.join(200)
    return results, time.monotonic() - started


def test_four_clients_10000_messages(romfs, tmp_path):
    board = start_board(romfs, tmp_path, "128k")
    try:
        idle, _ = heap_figures(board)
        conns = [connect(board) for _ in range(CLIENTS)]
        for c in conns:
            c.channel()
        with_idle, _ = heap_figures(board)
        for c in conns:
            c.close()
        results, elapsed = run_clients(board)
        _, peak = heap_figures(board)
    finally:
        stop_board(board)
    assert sorted(results) == list(range(CLIENTS))
    for index, result in results.items():
        assert result[:3] == ("done", TOTAL // CLIENTS, True), (index, result)
    print("\nesp32 profile, 128k unix heap: idle broker %d B live, %d B per idle connection, "
          "peak %d B under load; %d messages in %.1f s" % (
              idle, (with_idle - idle) // CLIENTS, peak, TOTAL, elapsed))


def test_too_small_a_heap_refuses_in_protocol_terms(romfs, tmp_path):
    """96k on this 64-bit port leaves ~15 KiB once the broker runs: not enough for four
    pika clients (one fits on a good day). Every client is answered in AMQP terms: it
    finishes with its messages intact, or it is refused at connection.open (530) or
    closed when memory runs out mid-stream (506). The broker never dies. (Recovery with
    room to spare is test_flood_blocks_then_recovers, at 128k.)"""
    board = start_board(romfs, tmp_path, "96k")
    try:
        results, _ = run_clients(board, stagger=0.3)  # clients arriving one after another
        done = [r for r in results.values() if r[0] == "done"]
        refused = [r for r in results.values() if r[0] == "refused"]
        assert len(done) + len(refused) == CLIENTS, results
        for result in done:
            assert result[1:3] == (TOTAL // CLIENTS, True), result
        for result in refused:  # pika words it "(530) '...'" or "(506, '...')" by where it happened
            assert re.search(r"\((530|506)\b", result[1]), result
        # Still alive, and still answering in AMQP terms (a client may or may not fit now:
        # the queues the clients declared stay, with ~9 KiB free around them).
        try:
            conn = connect(board)
            conn.channel().queue_declare("after")
            conn.close()
        except (ConnectionClosedByBroker, AMQPConnectionError) as e:
            assert re.search(r"\((530|506)\b", str(e)), e
        assert board.proc.poll() is None, "the broker died"
    finally:
        stop_board(board)
    print("\nesp32 profile, 96k unix heap: %d of %d clients finished, the rest refused: %s"
          % (len(done), CLIENTS, sorted(r[1][:60] for r in refused)))


def test_flood_blocks_then_recovers(romfs, tmp_path):
    board = start_board(romfs, tmp_path, "128k")
    try:
        # a publisher without confirms, faster than anyone consumes: blocked, not dropped
        publisher = connect(board)
        notices = blocked_notices(publisher)
        pub = publisher.channel()
        pub.queue_declare("flood")
        for n in range(300):
            pub.basic_publish("", "flood", body(9, n))
        publisher.process_data_events(time_limit=1)
        assert notices == ["blocked"], notices
        consumer = connect(board)
        sub = consumer.channel()
        received = drain(sub, "flood", 300, publisher, timeout=60)
        assert received == [body(9, n) for n in range(300)]
        publisher.process_data_events(time_limit=0.5)
        assert notices[-1] == "unblocked"

        # a queue filled to the profile's queue_max_messages (64): confirms say no, then yes
        confirming = publisher.channel()
        confirming.confirm_delivery()
        confirming.queue_declare("full")
        accepted = refused = 0
        for n in range(100):
            try:
                confirming.basic_publish("", "full", b"%d" % n)
                accepted += 1
            except NackError:
                refused += 1
        assert refused > 0 and accepted + refused == 100
        assert sub.queue_purge("full").method.message_count == accepted
        confirming.basic_publish("", "full", b"room again")  # raises NackError if still refused
        publisher.close()
        consumer.close()
    except ChannelClosedByBroker as e:
        raise AssertionError("unexpected channel close: %s\n%s" % (e, board.log()[-3000:]))
    finally:
        stop_board(board)
    print("\nflood: 300 blocked-then-delivered; full queue accepted %d, refused %d" % (accepted, refused))
