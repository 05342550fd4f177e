"""A client protocol's read buffer, sans-IO: input is read into one bytearray as large as the
largest frame, and frames are taken from it in place (client/protocol.py for AMQP 0-9-1,
amqp10/client.py for AMQP 1.0, mqtt/client.py for MQTT). On MicroPython the socket reads straight into it
(read_buffer(), then received(n)): no new bytes object per read, which a board's heap cannot
afford; CPython's streams hand over bytes (receive_data).
"""


class ReadBuffer:
    """Holds _rx (the bytearray), _rxm (a memoryview of it), _pos (where the next frame starts),
    _n (how much of it is filled) and _heard (input came since the protocol's last tick): the
    protocol sets them."""

    _rx: bytearray
    _rxm: memoryview
    _pos: int
    _n: int
    _heard: bool

    def read_buffer(self):
        """Where to read the next input into: a view of the free end of the read buffer. Tell
        received(n) how much was read."""
        if self._pos:  # move the start of the next frame to the front
            rest = self._n - self._pos
            self._rx[0:rest] = self._rxm[self._pos : self._n]
            self._pos = 0
            self._n = rest
        return self._rxm[self._n :]

    def received(self, n):
        self._n += n
        if n:
            self._heard = True

    def receive_data(self, data):
        """Take what fits of data into the read buffer: how much that was (take the events with
        next_event(), then feed the rest)."""
        buf = self.read_buffer()
        n = min(len(data), len(buf))
        buf[:n] = data[:n]
        self.received(n)
        return n


def joined(out, most):
    """The next bytes to write of out (a list of frames or packets, taken from it): the first
    and as many after it as fit in most bytes, joined (many small messages: one write, not one
    each); never all at once, so a board's small heap holds no window of large messages twice,
    nor one large block."""
    size = len(out[0])
    n = 1
    while n < len(out) and size + len(out[n]) <= most:
        size += len(out[n])
        n += 1
    data = out[0] if n == 1 else b"".join(out[:n])
    del out[:n]
    return data
