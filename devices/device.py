"""One polled device as the broker sees it: its polls numbered, what each publishes, whether it
is up or down, and what is counted.

A poll reads every register (its line's poll(): devices/line.py) and publishes one reading per
register, flat JSON that `hutch pipeline` reads as it is:

    routing key   the device's routing_key with {device} and {register} filled in
                  (sensors.{device} unless the config says otherwise)
    headers       x-sensor-id "DEVICE.REGISTER", x-sensor-seq the poll's number,
                  x-hutch-gateway the gateway's name
    body          {"sensor": "probe-1.moisture", "ts": "2026-11-27T18:00:00.000Z", "value": 41.7,
                   "unit": "%", "device": "probe-1", "register": "moisture", "poll": 17,
                   "gateway": "greenhouse"}

so that each (device, register, poll) is taken once however often it is sent again: by the
broker's sensor dedup, a bridge's, and the pipeline's. A poll's number is never given twice,
through restarts too: PollNumbers reserves them in blocks in the data folder.

A poll either answers (every read returned its values) or fails: "timeout" (no answer after the
retries), "exception" (the device answered with its protocol's exception), "error" (an answer
that was none: a bad CRC, garbage on the line) or "gone" (no connection to it). Each is
counted. The device is "up" after a poll that answered and "down" after one that failed;
each change is logged once and published as a status message on status.{device}:

    {"device": "probe-1", "state": "down", "reason": "timeout: no answer", "ts": "..."}

While down it is polled again after a backoff (its interval doubled each time, up to
MAX_BACKOFF seconds), so a dead device costs its bus little and the others keep their turns.

Sans-IO and MicroPython-clean: the driver (server/devices/polling.py) does the reads and publishes
what this returns.
"""

import json
import time

from .line import RESULTS

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Any

MAX_BACKOFF = 60.0  # seconds between the polls of a device that is down, at most
BLOCK = 1000  # poll numbers reserved at a time (one write of the data folder per BLOCK polls)


def iso(wall):
    """Epoch seconds as ISO 8601 in UTC with milliseconds ("2026-11-27T18:00:00.123Z")."""
    whole = int(wall)
    t = time.gmtime(whole)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (t[0], t[1], t[2], t[3], t[4], t[5], int((wall - whole) * 1000))


class PollNumbers:
    """A device's poll numbers, never given twice: the first number not yet reserved is kept
    (by save(number), the driver's: a file in the data folder) before any number below it is
    given; a restart begins there, skipping what the last run reserved and did not use."""

    def __init__(self, first, save):
        self.next = max(1, first)
        self.reserved = self.next  # numbers below this may be given without saving
        self.save = save

    def take(self):
        if self.next >= self.reserved:
            reserved = self.next + BLOCK
            self.save(reserved)  # (raises if the disk refuses: no number is given unsaved)
            self.reserved = reserved
        number = self.next
        self.next += 1
        return number


class Device:
    # set by the driver (server/devices/polling.py): the line it is polled on, and whether it still is
    # (an annotation alone costs nothing at run time)
    line: "Any"
    polling: bool
    gateway = None  # the gateway's name ([server] name), as the driver last set it: on each reading

    def __init__(self, settings, numbers):
        self.settings = settings
        self.name = settings["name"]
        self.plan = None  # the reads a poll makes, as its line's protocol plans them (its line's)
        self.numbers = numbers
        self.state = "unknown"  # then "up" or "down"
        self.since = None  # wall seconds of the last change of state
        self.reason = None  # why it is down
        self.counts = {}
        for result in RESULTS:
            self.counts[result] = 0
        self.polls = 0  # the polls that answered, this run
        self.last_poll = None  # wall seconds of the last poll that answered
        self.last_poll_number = None
        self.backoff = settings["interval"]
        self.latency_total = 0.0  # seconds the polls that answered took, summed (their mean: /polls)
        self.refused = 0  # readings the broker refused (a full queue, the memory or disk alarm)
        self.refusing = 0  # polls in a row whose readings it refused (the driver says a burst once)

    def delay(self):
        """Seconds to the next poll: the interval while up, the backoff while down."""
        return self.settings["interval"] if self.state != "down" else self.backoff

    def answered(self, values, wall, seconds=0.0):
        """A poll whose every read answered (values: {register name: value}, its line's poll()):
        [(routing key, headers, body)] to publish, its readings and, if it was not up, a status
        message; and the line to log (or None)."""
        poll = self.numbers.take()
        self.counts["ok"] += 1
        self.polls += 1
        self.latency_total += seconds
        self.last_poll = wall
        self.last_poll_number = poll
        self.backoff = self.settings["interval"]
        out = [self._reading(register, values[register["name"]], poll, wall) for register in self.settings["registers"]]
        line = None
        if self.state != "up":
            line = "device %s: up (%s)" % (self.name, self.settings["uri"])
            if self.state == "down":
                line = "device %s: back up after %d s down (%s)" % (self.name, wall - self.since, self.reason)
            self._change("up", None, wall)
            out.append(self._status(wall))
        return out, line

    def failed(self, result, why, wall):
        """A poll that failed (result: one of RESULTS but "ok"; why: what the driver saw): the
        status message to publish if the device just went down (or None), and the line to log
        (or None: said once per change of state)."""
        self.counts[result] += 1
        reason = "%s: %s" % (result, why)
        if self.state == "down":
            self.backoff = min(MAX_BACKOFF, max(self.backoff * 2, self.settings["interval"]))
            return None, None
        self.backoff = self.settings["interval"]
        self._change("down", reason, wall)
        return self._status(wall), "device %s: down (%s); polled again after a backoff" % (self.name, reason)

    def _change(self, state, reason, wall):
        self.state = state
        self.reason = reason
        self.since = wall

    def _reading(self, register, value, poll, wall):
        settings = self.settings
        sensor = "%s.%s" % (self.name, register["name"])
        body = {
            "sensor": sensor,
            "ts": iso(wall),
            "value": value,
            "device": self.name,
            "register": register["name"],
            "poll": poll,
        }
        if register.get("unit") is not None:
            body["unit"] = register["unit"]
        headers = {"x-sensor-id": sensor, "x-sensor-seq": poll}
        if self.gateway is not None:
            body["gateway"] = headers["x-hutch-gateway"] = self.gateway
        key = settings["routing_key"].replace("{device}", self.name).replace("{register}", register["name"])
        return key, headers, json.dumps(body).encode()

    def _status(self, wall):
        body = {"device": self.name, "state": self.state, "ts": iso(wall)}
        if self.reason is not None:
            body["reason"] = self.reason
        return "status.%s" % self.name, {}, json.dumps(body).encode()

    def snapshot(self):
        """What `hutch ctl devices` and the status page show of it."""
        return {
            "name": self.name,
            "uri": self.settings["uri"],
            "unit": self.settings["unit"],
            "state": self.state,
            "since": self.since,
            "reason": self.reason,
            "last_poll": self.last_poll,
            "last_poll_number": self.last_poll_number,
            "polls": dict(self.counts),
            "poll_seconds": self.latency_total,
            "refused": self.refused,
        }
