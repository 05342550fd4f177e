"""Modbus RTU as a device's answers reach the master (devices/modbus/rtu.py, pdu.py,
registers.py: what a board and the serial line on CPython read).

rtu: the first octet picks a request the master asked, the rest is what came back on the line;
whether it is complete, and what it says: words, bits, a write's echo, or Failed (an exception,
garbage); then a read's registers decoded as a device's table types them. Never another
exception.
"""

from hutch.devices.line import Failed
from hutch.devices.modbus import registers, rtu

# (the request's kind, register or address, count or value)
REQUESTS = (
    ("read", "holding", 0, 4),
    ("read", "input", 0, 2),
    ("read", "coil", 0, 9),
    ("write", "holding", 7, [1234]),
    ("write", "holding", 7, [1, 2]),
    ("write", "coil", 3, True),
    ("read", "holding", 0, 1),
)
# a device's table, for decoding what a read of holding registers 0-3 brings
TABLE = [
    {"name": "a", "address": 0, "kind": "holding", "type": "uint16", "scale": 0.1},
    {"name": "b", "address": 1, "kind": "holding", "type": "float32"},
    {"name": "c", "address": 3, "kind": "holding", "type": "int16"},
]


def _request(choice):
    how, kind, where, what = REQUESTS[choice % len(REQUESTS)]
    if how == "read":
        return rtu.read_request(1, kind, where, what)
    return rtu.write_request(1, kind, where, what)


def answers(data):
    """The outcome: incomplete, Failed's kind, or what the answer said (a read's registers
    decoded: their names)."""
    if not data:
        return ""
    request = _request(data[0])
    got = data[1:]
    if not rtu.complete(request, got):
        return "incomplete"
    try:
        said = rtu.answer(request, got, "the fuzzed read")
    except Failed as e:
        return "Failed:%s" % e.args[0]
    if request[1] == 3 and isinstance(said, list) and len(said) == 4:
        names = []
        for read in registers.plan([dict(row) for row in TABLE]):
            names += sorted(registers.decode(read, said))
        return "decoded " + " ".join(names)
    return repr(said)
