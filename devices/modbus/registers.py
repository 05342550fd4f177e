"""A Modbus device's registers: which reads fetch them, and what their words say.

A register of the config (server/devices/config.py) is a dict:

    name         what its value is called in the readings ("moisture")
    address      its first address, as the device's manual numbers them from 0
    kind         "holding" (function 3), "input" (4), "coil" (1) or "discrete" (2)
    type         int16, uint16, int32, uint32, float32, float64 (words) or bool
    word_order   "big": the first register holds the high word (Modbus's own order); "little"
    byte_order   "big": each register's high byte first (Modbus's own order); "little"
    scale        the value is raw * scale + offset (1 and 0: the raw value as it is)
    offset
    unit         what the value is measured in, said with it ("%", "°C"); may be None
    writable     (holding registers and coils) a command may set it (encode())

plan() groups them into reads: registers of one kind whose addresses touch or overlap are read
together, up to what one request may ask for (125 registers, 2,000 bits); a hole between two
addresses starts another read, as devices answer a read across an address they do not have with
an exception (ILLEGAL DATA ADDRESS). decode() turns what a read returned into values.

Sans-IO and MicroPython-clean: the CPython driver (server/devices/polling.py, through pymodbus) and a
board's RTU master give it the words or bits their reads returned.
"""

import struct

# kind -> the function code that reads it
FUNCTIONS = {"coil": 1, "discrete": 2, "holding": 3, "input": 4}
BITS = ("coil", "discrete")  # the kinds read as bits
MOST_WORDS = 125  # the most registers one read may ask for (Modbus: function codes 3 and 4)
MOST_BITS = 2000  # the most coils or discrete inputs one read may ask for (1 and 2)

# type -> (registers it takes, struct format of its bytes in big-endian order)
TYPES = {
    "int16": (1, "h"),
    "uint16": (1, "H"),
    "int32": (2, "i"),
    "uint32": (2, "I"),
    "float32": (2, "f"),
    "float64": (4, "d"),
    "bool": (1, None),
}
ORDERS = ("big", "little")


def width(register):
    """How many addresses the register takes (a bit: 1)."""
    if register["kind"] in BITS:
        return 1
    return TYPES[register["type"]][0]


def plan(registers):
    """The reads that fetch registers: a list of (kind, first address, count, [(register,
    where in the read)]), in the order the registers' kinds and addresses sort."""
    reads = []
    order = sorted(registers, key=lambda r: (FUNCTIONS[r["kind"]], r["address"]))
    current = None
    for register in order:
        kind = register["kind"]
        start = register["address"]
        end = start + width(register)
        most = MOST_BITS if kind in BITS else MOST_WORDS
        if current is not None and current[0] == kind and start <= current[1] + current[2] and end - current[1] <= most:
            current[2] = max(current[2], end - current[1])
            current[3].append((register, start - current[1]))
            continue
        current = [kind, start, end - start, [(register, 0)]]
        reads.append(current)
    return [tuple(read) for read in reads]


def decode(read, answer):
    """{name: value} of one read's registers from what the device answered: a list of words
    (holding, input) or of bits (coil, discrete) from the read's first address."""
    kind = read[0]
    values = {}
    for register, at in read[3]:
        if kind in BITS:
            values[register["name"]] = bool(answer[at])
            continue
        words = answer[at : at + width(register)]
        values[register["name"]] = scaled(register, raw(register, words))
    return values


def raw(register, words):
    """The number (or bool) the register's words hold, as its type and orders say."""
    kind = register["type"]
    if kind == "bool":
        return words[0] != 0
    if register.get("word_order", "big") == "little":
        words = list(reversed(words))
    word = ">H" if register.get("byte_order", "big") == "big" else "<H"
    octets = b"".join(struct.pack(word, w & 0xFFFF) for w in words)
    return struct.unpack(">" + TYPES[kind][1], octets)[0]


def scaled(register, value):
    """value * scale + offset; a whole number stays whole when nothing scales it."""
    scale = register.get("scale", 1)
    offset = register.get("offset", 0)
    if isinstance(value, bool) or (scale == 1 and offset == 0):
        return value
    return value * scale + offset


FLOAT32_MOST = 3.4028234663852886e38


def encode(register, value):
    """What writes value to a register: a list of words (a holding register), or a bool (a
    coil); the inverse of decode(), its scale and offset undone. ValueError, naming the register
    and its type, for a value its type cannot hold."""
    name = register["name"]
    if register["kind"] == "coil" or register["type"] == "bool":
        if not isinstance(value, bool):
            raise ValueError("%s is a bool: it takes true or false, not %r" % (name, value))
        return value if register["kind"] == "coil" else [1 if value else 0]
    kind = register["type"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("%s is %s: it takes a number, not %r" % (name, kind, value))
    raw = (value - register.get("offset", 0)) / register.get("scale", 1)
    fmt = TYPES[kind][1]
    if fmt in ("f", "d"):
        if fmt == "f" and abs(raw) > FLOAT32_MOST:
            raise ValueError("%s is float32: %r does not fit" % (name, value))
    else:
        whole = int(round(raw))
        if abs(whole - raw) > 1e-6:
            raise ValueError("%s is %s: %r is not a whole number of its steps" % (name, kind, value))
        bits = 16 * TYPES[kind][0]
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if fmt in ("h", "i") else (0, (1 << bits) - 1)
        if not low <= whole <= high:
            raise ValueError("%s is %s: %r is out of its range" % (name, kind, value))
        raw = whole
    octets = struct.pack(">" + fmt, raw)
    word = ">H" if register.get("byte_order", "big") == "big" else "<H"
    words = [struct.unpack(word, octets[i : i + 2])[0] for i in range(0, len(octets), 2)]
    if register.get("word_order", "big") == "little":
        words.reverse()
    return words


def reads_of(device):
    """The reads a poll of the device makes (plan()), planned at its first poll and kept on it."""
    if device.plan is None:
        device.plan = plan(device.settings["registers"])
    return device.plan


def described(read):
    """How a failure names a read: "a read of 2 holding at 0"."""
    return "a read of %d %s at %d" % (read[2], read[0], read[1])
