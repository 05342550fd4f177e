"""A polled device's sans-IO parts (devices/): the reads its registers need, what their words
say, its poll numbers through restarts, what a poll publishes as the device comes and goes, and
the Modbus RTU frames a board's own master sends and reads."""

import json
import struct

from hutch.devices.device import BLOCK, MAX_BACKOFF, Device, PollNumbers, iso
from hutch.devices.line import Failed
from hutch.devices.modbus import pdu, rtu
from hutch.devices.modbus.registers import decode, encode, plan, reads_of


def register(name, address, kind="holding", type_="uint16", **more):
    one = {"name": name, "address": address, "kind": kind, "type": type_, "word_order": "big", "byte_order": "big"}
    one["scale"], one["offset"], one["unit"] = 1, 0, None
    one.update(more)
    return one


def words(fmt, value, word_order="big", byte_order="big"):
    octets = struct.pack(">" + fmt, value)
    out = []
    for i in range(0, len(octets), 2):
        pair = octets[i : i + 2] if byte_order == "big" else octets[i + 1 : i + 2] + octets[i : i + 1]
        out.append(struct.unpack(">H", pair)[0])
    return out if word_order == "big" else list(reversed(out))


def test_registers_that_touch_are_read_together_and_a_hole_starts_another_read():
    registers = [
        register("a", 0),
        register("b", 1, type_="float32"),  # 1-2
        register("c", 3),
        register("d", 10),  # a hole at 4-9: another read
        register("e", 0, "input"),
        register("f", 5, "coil", "bool"),
        register("g", 6, "coil", "bool"),
    ]
    reads = [(kind, start, count, [r["name"] for r, _ in members]) for kind, start, count, members in plan(registers)]
    assert reads == [
        ("coil", 5, 2, ["f", "g"]),
        ("holding", 0, 4, ["a", "b", "c"]),
        ("holding", 10, 1, ["d"]),
        ("input", 0, 1, ["e"]),
    ], reads


def test_a_read_asks_for_125_registers_at_most():
    registers = [register("r%d" % i, i * 2, type_="uint32") for i in range(100)]  # 200 touching registers
    reads = plan(registers)
    assert [(start, count) for _, start, count, _ in reads] == [(0, 124), (124, 76)], reads


def test_each_type_and_order_decodes_as_written():
    cases = [
        ("int16", "h", -2),
        ("uint16", "H", 65000),
        ("int32", "i", -70000),
        ("uint32", "I", 4000000000),
        ("float32", "f", 21.5),
        ("float64", "d", -1234.0625),
    ]
    for type_, fmt, value in cases:
        for word_order in ("big", "little"):
            for byte_order in ("big", "little"):
                one = register("x", 0, type_=type_, word_order=word_order, byte_order=byte_order)
                read = plan([one])[0]
                got = decode(read, words(fmt, value, word_order, byte_order))["x"]
                assert got == value, (type_, word_order, byte_order, got)


def test_scale_and_offset_and_bits():
    registers = [register("m", 0, scale=0.1), register("t", 1, type_="int16", scale=0.5, offset=-40), register("w", 2)]
    read = plan(registers)[0]
    values = decode(read, [417, (-20) & 0xFFFF, 7])
    assert abs(values["m"] - 41.7) < 1e-9 and values["t"] == -50.0 and values["w"] == 7, values
    assert isinstance(values["w"], int)
    bits = plan([register("on", 3, "coil", "bool"), register("off", 4, "coil", "bool")])[0]
    assert decode(bits, [True, False]) == {"on": True, "off": False}


def test_poll_numbers_are_reserved_in_blocks_and_a_restart_begins_past_them():
    saved = []
    numbers = PollNumbers(1, saved.append)
    taken = [numbers.take() for _ in range(BLOCK + 1)]
    assert taken == list(range(1, BLOCK + 2)) and saved == [1 + BLOCK, 1 + 2 * BLOCK], saved
    again = PollNumbers(saved[-1], saved.append)  # what the file held when the run ended
    assert again.take() == 1 + 2 * BLOCK  # past everything the first run gave


def test_a_poll_number_is_never_given_before_its_block_is_saved():
    saved = []
    refusing = [True]

    def save(number):
        if refusing[0]:
            raise OSError(28, "No space left on device")
        saved.append(number)

    numbers = PollNumbers(1, save)
    for _ in range(2):  # each poll while the disk is full: refused, no number given
        try:
            numbers.take()
            raise AssertionError("a poll number given with its block unsaved")
        except OSError:
            pass
    refusing[0] = False
    assert numbers.take() == 1 and saved == [1 + BLOCK]
    again = PollNumbers(saved[-1], saved.append)  # a restart
    assert again.take() == 1 + BLOCK


def settings(**more):
    one = {
        "name": "probe-1",
        "uri": "modbus+tcp://10.0.0.5:502",
        "unit": 1,
        "interval": 2.0,
        "routing_key": "sensors.{device}",
        "registers": [register("moisture", 0, scale=0.1, unit="%"), register("temp", 0, "input", "int16")],
    }
    one.update(more)
    return one


def decoded(device, answers):
    """What a line's poll gives the device: its reads' answers (words or bits), decoded."""
    values = {}
    for read, answer in zip(reads_of(device), answers):
        values.update(decode(read, answer))
    return values


def test_a_poll_publishes_a_flat_reading_per_register_numbered_by_the_poll():
    device = Device(settings(), PollNumbers(41, lambda number: None))
    out, line = device.answered(decoded(device, [[417], [(-3) & 0xFFFF]]), 1795800000.25, 0.01)
    assert line == "device probe-1: up (modbus+tcp://10.0.0.5:502)", line
    readings, status = out[:2], out[2]
    key, headers, body = readings[0]
    assert key == "sensors.probe-1" and headers == {"x-sensor-id": "probe-1.moisture", "x-sensor-seq": 41}
    body = json.loads(body)
    assert body["sensor"] == "probe-1.moisture" and body["poll"] == 41 and body["unit"] == "%"
    assert abs(body["value"] - 41.7) < 1e-9 and body["ts"] == iso(1795800000.25) == "2026-11-27T17:20:00.250Z"
    assert json.loads(readings[1][2])["value"] == -3 and "unit" not in json.loads(readings[1][2])
    assert status[0] == "status.probe-1" and json.loads(status[2])["state"] == "up"
    out, line = device.answered(decoded(device, [[418], [0]]), 1795800002.25)
    assert line is None and len(out) == 2 and out[0][1]["x-sensor-seq"] == 42  # up already: no status


def test_a_device_that_fails_is_said_down_once_backs_off_and_is_said_back_up():
    device = Device(settings(), PollNumbers(1, lambda number: None))
    device.answered(decoded(device, [[1], [1]]), 100.0)
    status, line = device.failed("timeout", "no answer", 102.0)
    assert line == "device probe-1: down (timeout: no answer); polled again after a backoff", line
    assert json.loads(status[2]) == {
        "device": "probe-1",
        "state": "down",
        "reason": "timeout: no answer",
        "ts": iso(102.0),
    }
    delays = []
    for at in range(10):
        assert device.failed("gone", "cannot connect", 104.0 + at) == (None, None)  # said once
        delays.append(device.delay())
    assert delays[:3] == [4.0, 8.0, 16.0] and delays[-1] == MAX_BACKOFF, delays
    assert device.counts == {"ok": 1, "timeout": 1, "exception": 0, "error": 0, "gone": 10}
    out, line = device.answered(decoded(device, [[2], [2]]), 200.0)
    assert line == "device probe-1: back up after 98 s down (timeout: no answer)", line
    assert json.loads(out[-1][2])["state"] == "up" and device.delay() == 2.0


def test_a_value_written_reads_back_the_same_and_one_its_type_cannot_hold_is_refused():
    cases = [
        ("int16", -2),
        ("uint16", 65000),
        ("int32", -70000),
        ("uint32", 4000000000),
        ("float32", 21.5),
        ("float64", -0.125),
    ]
    for type_, value in cases:
        for word_order in ("big", "little"):
            for byte_order in ("big", "little"):
                one = register("x", 0, type_=type_, word_order=word_order, byte_order=byte_order)
                assert decode(plan([one])[0], encode(one, value))["x"] == value, (type_, word_order, byte_order)
    scaled = register("level", 0, type_="int16", scale=0.5, offset=10)
    assert encode(scaled, 8.5) == [(-3) & 0xFFFF] and decode(plan([scaled])[0], [(-3) & 0xFFFF])["level"] == 8.5
    assert encode(register("pump", 3, "coil", "bool"), True) is True
    for one, value, said in (
        (register("u", 0), 65536, "u is uint16: 65536 is out of its range"),
        (register("u", 0), -1, "u is uint16: -1 is out of its range"),
        (register("u", 0), 1.5, "u is uint16: 1.5 is not a whole number of its steps"),
        (register("u", 0), "7", "u is uint16: it takes a number, not '7'"),
        (register("u", 0), True, "u is uint16: it takes a number, not True"),
        (register("f", 0, type_="float32"), 1e39, "f is float32: 1e+39 does not fit"),
        (register("pump", 3, "coil", "bool"), 1, "pump is a bool: it takes true or false, not 1"),
    ):
        try:
            encode(one, value)
        except ValueError as e:
            assert str(e) == said, (str(e), said)
            continue
        raise AssertionError("%r taken for %s" % (value, one["name"]))


def refused(call):
    """The Failed a call raised: (result, why)."""
    try:
        call()
    except Failed as e:
        return e.args
    raise AssertionError("not refused")


def test_rtu_frames_carry_modbus_s_crc_and_requests_fix_their_answer_s_length():
    # a read of 10 holding registers from 0 at unit 1: the CRC of Modbus's own example, C5 CD
    request = rtu.read_request(1, "holding", 0, 10)
    assert request == bytes((1, 3, 0, 0, 0, 10, 0xC5, 0xCD))
    assert rtu.answer_size(request) == 25
    assert rtu.answer_size(rtu.read_request(1, "coil", 0, 9)) == 7  # 9 bits: 2 octets
    assert rtu.answer_size(rtu.write_request(1, "holding", 4, [7])) == 8
    assert rtu.write_request(1, "coil", 3, True)[:6] == bytes((1, 5, 0, 3, 0xFF, 0))
    several = rtu.write_request(2, "holding", 40, [0x4229, 0])  # float32 42.25: function 16
    assert several[:7] == bytes((2, 16, 0, 40, 0, 2, 4)) and several[7:11] == bytes((0x42, 0x29, 0, 0))
    assert rtu.crc16(several[:-2]) == struct.unpack("<H", several[-2:])[0]


def test_an_rtu_answer_gives_words_or_bits_and_anything_else_is_an_exception_or_noise():
    read = rtu.read_request(3, "holding", 0, 2)
    answer = rtu.framed(3, bytes((3, 4, 0, 170, 0x41, 0xA0)))
    assert rtu.complete(read, answer[:-1]) is False and rtu.complete(read, answer) is True
    assert rtu.answer(read, answer, "a read") == [170, 0x41A0]
    bits = rtu.read_request(3, "coil", 0, 10)
    assert rtu.answer(bits, rtu.framed(3, bytes((1, 2, 0b00000101, 0b10))), "a read") == [
        True, False, True, False, False, False, False, False, False, True,
    ]  # fmt: skip
    exception = rtu.framed(3, bytes((0x83, 2)))  # ILLEGAL DATA ADDRESS
    assert rtu.complete(read, exception) is True
    assert refused(lambda: rtu.answer(read, exception, "a read of 2 holding at 0")) == (
        "exception", "exception code 2 to a read of 2 holding at 0",
    )  # fmt: skip
    flipped = answer[:-1] + bytes((answer[-1] ^ 0xFF,))
    result, why = refused(lambda: rtu.answer(read, flipped, "a read"))
    assert result == "error" and why.startswith("9 octets to a read that were no answer"), why
    another_unit = rtu.framed(4, answer[1:-2])
    assert refused(lambda: rtu.answer(read, another_unit, "a read"))[0] == "error"
    write = rtu.write_request(3, "holding", 4, [7])
    assert rtu.answer(write, write, "a write") is None  # (a single write's answer echoes it)
    assert refused(lambda: rtu.answer(write, rtu.write_request(3, "holding", 4, [8]), "a write"))[0] == "error"


def test_a_pdu_is_the_same_whatever_frames_it():
    # what RTU frames and what Modbus TCP would: the function and its data, nothing else
    read = pdu.read_request("holding", 0, 2)
    assert read == bytes((3, 0, 0, 0, 2)) and rtu.read_request(3, "holding", 0, 2)[1:-2] == read
    assert pdu.answer_size(read) == 6 and pdu.answer(read, bytes((3, 4, 0, 170, 0x41, 0xA0)), "a read") == [170, 0x41A0]
    assert refused(lambda: pdu.answer(read, bytes((0x83, 2)), "a read")) == ("exception", "exception code 2 to a read")
    assert (
        refused(lambda: pdu.answer(read, bytes((4, 4, 0, 170, 0x41, 0xA0)), "a read"))[0] == "error"
    )  # another function
    assert pdu.write_request("holding", 4, [7]) == bytes((6, 0, 4, 0, 7))


def test_the_line_s_own_limit_counts_eleven_bits_a_character_and_the_silences():
    # one read of 2 holding registers: 8 octets out, 9 back, 3.5 characters of quiet after each
    at_9600 = rtu.line_limit(9600, [("holding", 2)])
    assert abs(1 / at_9600 - (17 * 11 / 9600 + 2 * 38.5 / 9600)) < 1e-9
    assert rtu.silence(115200) == 0.00175  # the spec's fixed silence above 19,200 baud
