"""What the bridge's clients for AMQP 1.0 and MQTT (amqp10/client.py, mqtt/client.py) share
around their protocol, beside the read buffer they both are (codec/readbuffer.py): the output
they queue, the events they read (in the bridge's words, codec/upstream.py) and their idle
clocks. (The 0-9-1 client, client/protocol.py, is a sensor node's, with a send buffer of its
own; a board loads this only with a bridge over 1.0 or MQTT.)
"""

from .readbuffer import ReadBuffer, joined

NO_LIMIT = 1 << 29  # tick(): no time-out to wait for (a small int on every port)

TYPE_CHECKING = False
if TYPE_CHECKING:  # read by type checkers only: MicroPython has no typing module
    from typing import Callable


class Upstream(ReadBuffer):
    """The bridge's AMQP 1.0 and MQTT clients' plumbing. Holds _out (what to write, in order),
    _events (what was read, for next_event), _most (the most bytes a write joins), _spoke and
    _heard (output taken, input come, since the last tick), _sent_at and _heard_at (ms): the
    client sets them, and reads one frame or packet at a time in its _step() (False: not all
    of it has come, or the link is closed)."""

    _out: list
    _events: list
    _step: "Callable[[], bool]"
    _most: int
    _spoke: bool
    _sent_at: int
    _heard_at: int

    def _send(self, data):
        self._out.append(data)

    def data_to_send(self):
        """The next bytes to write (frames or packets joined, up to _most bytes), or None."""
        out = self._out
        if not out:
            return None
        self._spoke = True
        return joined(out, self._most)

    def next_event(self):
        """The next event in what was received, or None until more comes in."""
        events = self._events
        while not events:
            if not self._step():
                break
        return events.pop(0) if events else None

    def _clock(self, now):
        """(At a tick) When output was last taken and input last came: now, if since the last tick."""
        if self._spoke:
            self._spoke = False
            self._sent_at = now
        if self._heard:
            self._heard = False
            self._heard_at = now
