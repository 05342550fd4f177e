"""The fuzz targets: one per parser a front door has, each a function of the bytes a peer (or a
file) could hold, that returns quietly for any input the parser takes or refuses in its own
words, and raises for anything else (an exception of another kind, an internal error in the
broker's log, two paths that should agree and do not). tests/fuzz/run.py runs one under
atheris (libFuzzer, coverage-guided); tests/fuzz/test_replay.py runs each kept input through
its target (tests/fuzz/corpus/NAME/, tests/fuzz/findings/NAME/), and the portable ones under
MicroPython too.

    TARGETS[name] = "module:function"   (a module of this package per front door)
    PORTABLE: the targets whose code a board runs
"""

TARGETS = {
    "amqp091-frames": "amqp091:frames",
    "amqp091-session": "amqp091:session",
    "amqp10-types": "amqp10:types",
    "amqp10-session": "amqp10:session",
    "mqtt-packets": "mqtt:packet_readers",
    "mqtt-session": "mqtt:session",
    "websocket-frames": "websocket:frame_reader",
    "websocket-session": "websocket:session",
    "modbus-rtu": "modbus:answers",
    "config": "loaders:config",
    "definitions": "loaders:definitions",
    "pem": "loaders:pem",
    "http-request": "loaders:http_request",
    "upstream-clients": "upstream:clients",
    "control": "control:requests",
}

# whose code a board runs: their inputs replayed under MicroPython too
PORTABLE = ("amqp091-frames", "amqp10-types", "mqtt-packets", "modbus-rtu")
WARM_UP = b"\x01AMQP\x00\x00\x09\x01"  # an input every target takes (its first run imports what it needs)


def target(name):
    """The function of a target's name (its module imported now: under atheris, instrumented)."""
    module, function = TARGETS[name].split(":")
    imported = __import__("fuzz_targets." + module, None, None, [function])
    return getattr(imported, function)
