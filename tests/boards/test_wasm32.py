"""A 32-bit board in CI: the esp32 profile on MicroPython's WebAssembly port, under Node.

emulator/wasm32.py runs the firmware bundle (`python -m hutch.firmware.build`) in npm's
@micropython/micropython-webassembly-pyscript (tests/node/package.json; `make test` installs
it), a 32-bit MicroPython whose objects are the size they are on an ESP32, with clients in
memory (emulator/board_session.py) and a code census that tells the broker's heap from its
code's (bench/board_wasm32.py, which `hutch bench --board wasm32` prints).

- test_the_esp32_scenarios_fit_a_96_kib_heap: the scenarios of `hutch bench --board wasm32`
  (four clients; an up bridge's 20,000-message backlog held on flash while its uplink is down,
  then forwarded; a stream; MQTT) each keep what a board with hutch frozen into its firmware
  would hold under 96 KiB at every turn of its loop. This port grows its heap rather than
  fail, so the bound is on the peak it measures. The four clients send 2,500 messages here,
  not the benchmark's 10,000: their load's peak is that of their windows, reached within the
  first hundred (the benchmark prints the same peak for both).
- test_the_estimate_of_frozen_code_holds_for_frozen_modules: the "on a board" figures add an
  estimate of what hutch's code takes in a board's heap when frozen into its firmware
  (board_in_memory.frozen_ram); the port's own frozen modules (asyncio, binascii, collections,
  io, os, time) show what it is worth.
- test_the_board_answers_as_cpython_does: the same client octets through the core's in-process
  harness on CPython (tests/portable/harness.py) and through the board give the same replies.
"""

import contextlib
import io
import struct
import sys

import pytest
from paths import PORTABLE_TESTS

from hutch.bench import board_wasm32
from hutch.codec import spec, wire
from hutch.emulator import wasm32
from hutch.emulator.board_session import Session

# One worker runs this module (the firmware bundle is built once for it) and the board tests
# take a worker each for a while: 40 s or so on this machine (see the report they print).
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("wasm32")]

HEAP_BOUND = 96 * 1024

if PORTABLE_TESTS not in sys.path:
    sys.path.insert(0, PORTABLE_TESTS)  # the core's in-process harness, as its tests import it
from harness import Client, content, method  # noqa: E402


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from hutch.firmware import build

    with contextlib.redirect_stdout(io.StringIO()):  # mpremote prints the ROMFS image's tree
        return build.build(str(tmp_path_factory.mktemp("firmware")), bundle_name="broker-mqtt")["bundle"]


def test_the_esp32_scenarios_fit_a_96_kib_heap(tmp_path, bundle):
    runs = dict(
        board_wasm32.RUNS, clients=(board_wasm32.board_config, lambda board: board_wasm32.scenario_clients(board, 2500))
    )
    results, census, seconds = board_wasm32.run_scenarios(
        str(tmp_path), log=lambda line: None, runs=runs, bundle=bundle
    )
    rows = board_wasm32.rows_of(results, census)
    print("\n" + board_wasm32.table(rows))
    print("seconds: %s" % ", ".join("%s %.1f" % item for item in seconds.items()))
    # the MQTT front end is in the bundle: only the board whose config serves MQTT loads it
    for name, result in results.items():
        loaded = set().union(*result["sets"].values())
        assert any(m.startswith("hutch.mqtt") for m in loaded) == (name == "mqtt"), (name, sorted(loaded))
    peaks = board_wasm32.board_peaks(results, census)
    over = {name: peak for name, peak in peaks.items() if peak > HEAP_BOUND}
    assert not over, "on a board these would take more than 96 KiB of heap: %s" % ", ".join(
        "%s %.1f KiB" % (name, peak / 1024) for name, peak in over.items()
    )


FROZEN_IN_THE_PORT = ("asyncio", "binascii", "collections", "io", "os", "time")


def test_the_estimate_of_frozen_code_holds_for_frozen_modules(tmp_path, bundle):
    board_dir, harness_dir = wasm32.make_board_dir(str(tmp_path), board_wasm32.board_config(), bundle)
    with wasm32.Wasm32Board(board_dir, harness_dir) as board:  # (not started: a fresh interpreter)
        fresh, fresh_names = board.imported(())
        live, names = board.imported(FROZEN_IN_THE_PORT)
    with wasm32.Wasm32Board(board_dir, harness_dir) as board:  # (the estimate's walk keeps heap)
        estimate = board.frozen_ram(FROZEN_IN_THE_PORT)
    taken = (live - fresh) - (names - fresh_names)  # their bytecode is in the port's firmware
    print(
        "\nthe port's frozen modules take %d bytes of heap; estimated: %d (%d %%)"
        % (taken, estimate, 100 * estimate // taken)
    )
    assert 0.75 * taken <= estimate <= 1.1 * taken, (taken, estimate)


# ---------------------------------------------------------------- the differential check


class Recording:
    """The harness's connection, fed at most one board read (read_size octets) at a time, each
    read's octets and the broker's answer to it kept: the steps to play to the board."""

    def __init__(self, conn, read_size):
        self.conn = conn
        self.read_size = read_size
        self.steps = []  # [octets sent, octets answered]
        self.out = b""

    def feed(self, data):
        data = bytes(data)
        for at in range(0, len(data), self.read_size):
            chunk = data[at : at + self.read_size]
            self.conn.feed(chunk)
            answer = self.conn.take_output()
            self.steps.append([chunk, answer])
            self.out += answer

    def take_output(self):
        out, self.out = self.out, b""
        return out


def esp32_settings(tmp_path):
    from hutch.server.options import Options, settings

    return settings(Options(board="esp32", data=str(tmp_path / "cpython-data")))


def scenario(client):
    """A client's session with the broker, in the core tests' calls: most of what a board's
    clients do, each reply checked where the core tests check it."""
    assert client.open() and client.events[-1].name == "connection.open-ok"
    client.channel(1)
    client.channel(2)
    client.queue(1, b"plain")
    client.queue(1, b"kept", durable=True)
    client.declare_exchange(1, b"sensors", b"topic")
    client.bind(1, b"plain", b"sensors", b"site.*.temp")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    # 30 publishes at once, three to a read (board_wasm32.READ_SIZE): reads end inside frames
    client.send(
        b"".join(
            method(1, spec.BASIC_PUBLISH, (0, b"sensors", b"site.%d.temp" % n, False, False))
            + content(1, b"%02d:" % n + b"t" * 300)
            for n in range(30)
        )
    )
    client.read()
    client.publish(1, b"", b"kept", b"persistent", {"delivery-mode": 2, "content-type": "text/plain"})
    client.publish(1, b"sensors", b"nowhere", b"unroutable", mandatory=True)
    client.call(2, spec.BASIC_QOS, (0, 5, False))
    client.consume(2, b"plain", b"reader")
    for tag in range(1, 31):
        client.ack(2, tag)
    client.get(1, b"kept")
    client.call(1, spec.BASIC_REJECT, (1, False))
    client.declare_queue(1, b"missing", passive=True)  # 404: the channel closes
    client.reopen(1)
    client.queue(1, b"", exclusive=True)  # a name the broker makes
    client.declare_queue(1, b"kept", durable=False)  # 406: redeclared otherwise
    client.send(method(1, spec.CHANNEL_CLOSE_OK))
    client.call(0, spec.CONNECTION_CLOSE, (200, b"bye", 0, 0))


def comparable(octets):
    """The frames of octets, connection.start's server properties without "platform" (the
    board's says MicroPython, the harness's nothing): the rest as sent."""
    out = []
    pos = 0
    while pos < len(octets):
        if octets[pos : pos + 4] == b"AMQP":
            out.append(octets[pos : pos + 8])
            pos += 8
            continue
        found = wire.frame_at(octets, pos, len(octets))
        assert found is not None, "a frame cut short in %r" % octets[pos : pos + 40]
        ftype, channel, start, end = found
        payload = bytes(octets[start:end])
        if ftype == 1 and struct.unpack_from(">I", payload)[0] == spec.CONNECTION_START:
            args = wire.decode_args(wire.signature(spec.CONNECTION_START), payload, 4, len(payload))
            args[2].pop("platform", None)
            out.append(("connection.start", args))
        else:
            out.append((ftype, channel, payload))
        pos = end + 1
    return out


def test_the_board_answers_as_cpython_does(tmp_path, bundle):
    opts = esp32_settings(tmp_path)
    client = Client(limits=opts["limits"])
    client.broker.users = opts["users"]
    recording = client.conn = Recording(client.conn, board_wasm32.READ_SIZE)
    scenario(client)
    steps = recording.steps
    assert len(steps) > 40 and any(len(sent) == board_wasm32.READ_SIZE for sent, _ in steps)

    board_dir, harness_dir = wasm32.make_board_dir(str(tmp_path), board_wasm32.board_config(), bundle)
    with wasm32.Wasm32Board(board_dir, harness_dir) as board:
        board.start()
        assert board.read_size == board_wasm32.READ_SIZE
        session = Session(board)
        index = board.open()
        for number, (sent, answered) in enumerate(steps):
            session.now += 1
            got = board.steps([(index, sent, session.now)])["out"].get(index, b"")
            assert comparable(got) == comparable(answered), "step %d: sent %r" % (number, sent[:60])
    print(
        "\n%d reads, %d octets in, %d out: the same replies from CPython and the wasm32 board"
        % (len(steps), sum(len(s) for s, _ in steps), sum(len(a) for _, a in steps))
    )
