"""One client connection, sans-IO: bytes in with feed(), bytes out with take_output().

The port owns the socket (or UART) and the clock:

    conn = broker.connect({"address": "127.0.0.1", "port": 50123, "transport": "tcp"})
    conn.wake = callback      # called when output appears outside feed() (deliveries
                              # caused by other connections, a resume after a block)
    conn.feed(data)           # process every complete frame in data
    data = conn.take_output() # everything to write, as one bytes object (b"" if none)
    broker.tick(now_ms)       # heartbeats, timeouts, TTLs; call it a few times a second
    conn.want_read            # False while the broker holds this publisher back
    conn.closed               # write what take_output() gives, then close the transport
    conn.lost()               # the transport went away

States follow the 0-9-1 handshake (requirements.md R093): protocol header,
start/start-ok, tune/tune-ok, open/open-ok; then channels; then the close
handshake in either direction.
"""

import struct

from . import spec
from .auth import MECHANISMS, credentials, is_loopback
from .channel import CLOSING as CHANNEL_CLOSING
from .channel import Channel, raise_unexpected
from .errors import ChannelException, ConnectionException, DecodeError
from .spec import (
    ACCESS_REFUSED,
    CHANNEL_ERROR,
    COMMAND_INVALID,
    FRAME_ERROR,
    INTERNAL_ERROR,
    NOT_ALLOWED,
    RESOURCE_ERROR,
    UNEXPECTED_FRAME,
)
from .wire import (
    HEARTBEAT_FRAME,
    PROTOCOL_HEADER,
    PROTOCOL_HEADER_0_9,
    decode_args,
    method_frame,
    method_name,
    signature,
    text,
)

# The batch frame reading connections use: installed on CPython by framing.use_scanner (the C
# scanner, from hutch.c_accel.loader) as (scan, new_records, read_batch); see core/batch.py.
# None, and always on MicroPython: each connection reads frame headers in its own loop
# (_read_frames). Nothing of the batch path is imported here, so a board's heap never holds it.
frame_scanner = None

AWAIT_HEADER = 0
AWAIT_START_OK = 1
AUTH_FAILED = 2  # login refused: waiting out the delay before we say so
AWAIT_TUNE_OK = 3
AWAIT_OPEN = 4
OPEN = 5
CLOSING = 6  # we sent connection.close and wait for close-ok
CLOSED = 7

STATE_NAMES = (
    "awaiting protocol header",
    "starting",
    "refusing login",
    "tuning",
    "opening",
    "open",
    "closing",
    "closed",
)
EXPECTED = {
    AWAIT_START_OK: spec.CONNECTION_START_OK,
    AWAIT_TUNE_OK: spec.CONNECTION_TUNE_OK,
    AWAIT_OPEN: spec.CONNECTION_OPEN,
}


class Connection:
    def __init__(self, broker, peer):
        limits = broker.limits
        self.broker = broker
        self.name = "%s:%s" % (peer.get("address", "?"), peer.get("port", "?"))
        # A serial link is a wire to this device, as local as a loopback socket.
        self.loopback = peer.get("transport") in ("local", "serial") or is_loopback(peer.get("address"))
        self.state = AWAIT_HEADER
        self.closed = False
        self.wake = None
        self.out = []
        self.out_bytes = 0
        self.high_water = limits.output_high_water
        self._pending = b""
        # The batch frame scanner (C) if one is installed, and the records it fills: each
        # connection has its own, as one may be fed while another's batch is being handled.
        scanner = frame_scanner
        self._scan = scanner[0] if scanner is not None else None
        self._records = scanner[1]() if scanner is not None else None
        self._read_batch = scanner[2] if scanner is not None else None
        self._woken = False
        self.channels = {}
        self.frame_max = limits.frame_max
        self.max_payload = limits.frame_max - 8
        self.channel_max = limits.channel_max
        self.heartbeat_ms = 0
        self.user = None
        # The three client capabilities (start-ok) the broker acts on; the rest of the
        # client-properties table is not kept: on a board it would cost ~1 KiB per client.
        self.wants_blocked = False  # connection.blocked / unblocked
        self.wants_cancel = False  # consumer_cancel_notify: basic.cancel when a queue goes
        self.wants_auth_close = False  # authentication_failure_close: 403 instead of a hang-up
        self.client = b"?"  # its product name, for the log
        self.last_recv = broker.now
        self.last_send = broker.now
        self.deadline = broker.now + limits.handshake_timeout_ms
        self.paused = False
        self.confirm_channels = []
        self.counted = False
        self._auth_mechanism = b""

    def __repr__(self):
        return "<Connection %s>" % self.name

    @property
    def want_read(self):
        return not self.paused and not self.closed

    # ------------------------------------------------------------ bytes in

    def feed(self, data):
        """Process every complete frame in data (bytes, or a memoryview of the port's read
        buffer: whatever the broker keeps is copied out before feed returns)."""
        if self.closed:
            return
        self.last_recv = self.broker.now
        if self._pending:
            data = self._pending + data
            self._pending = b""
        if self.paused or self.state == AUTH_FAILED:
            self._pending = bytes(data)
            return
        pos = 0
        try:
            if self.state == AWAIT_HEADER:
                pos = self._read_header(data)
                if pos < 0:
                    return
            pos = self._read_frames(data, pos)
        except ConnectionException as e:
            self.close_with(e)
            pos = len(data)
        except DecodeError as e:
            self.close_with(
                ConnectionException(e.code, "%s - %s" % ("FRAME_ERROR" if e.code == FRAME_ERROR else "SYNTAX_ERROR", e))
            )
            pos = len(data)
        except MemoryError:
            self.out_of_memory()
            pos = len(data)
        except Exception as e:  # a bug must cost one connection, never the broker
            self.broker.log("error", "%s: internal error: %r" % (self.name, e), e)
            self._close_or_drop(ConnectionException(INTERNAL_ERROR, "INTERNAL_ERROR - %r" % (e,)))
            pos = len(data)
        if pos < len(data) and not self.closed:
            self._pending = bytes(data[pos:])
        self.flush_confirms()

    def out_of_memory(self):
        """The heap ran out while serving this client (in the core or in its port): say so in
        AMQP terms (506) and give back everything the connection holds."""
        self.broker.log("warning", "%s: out of memory, closing the connection" % self.name)
        self._close_or_drop(ConnectionException(RESOURCE_ERROR, "RESOURCE_ERROR - broker out of memory"))

    def _close_or_drop(self, e):
        try:
            self.close_with(e)
        except Exception:  # cannot even say why (no memory to build the frame): hang up
            self._finish()

    def eof(self):
        """The peer closed its sending side."""
        if self.state == AWAIT_HEADER and not self.closed:
            self._refuse_header(self._pending)
            return
        self.lost()

    def _read_header(self, data):
        n = len(data)
        if n < 8:
            if bytes(data[: min(n, 4)]) != PROTOCOL_HEADER[: min(n, 4)]:
                self._refuse_header(data)
            else:
                self._pending = bytes(data)
            return -1
        header = bytes(data[:8])
        if header != PROTOCOL_HEADER and header != PROTOCOL_HEADER_0_9:
            self._refuse_header(header)
            return -1
        self.state = AWAIT_START_OK
        self.send_method(0, spec.CONNECTION_START, (0, 9, self.broker.server_properties(), MECHANISMS, b"en_US"))
        return 8

    def _refuse_header(self, header):
        self.broker.log(
            "warning", "%s: unsupported protocol header %r, answered with AMQP 0-9-1" % (self.name, bytes(header))
        )
        self.out.append(PROTOCOL_HEADER)
        self._finish()

    def _read_frames(self, data, pos):
        if self._scan is not None:
            return self._read_batch(self, data, pos)
        # Pure Python (MicroPython, or CPython without the C scanner): read each header here.
        # A batch scan in Python costs more than it saves (framing.py says why).
        n = len(data)
        while n - pos >= 7:
            if self.paused or self.closed:
                break
            size = (data[pos + 3] << 24) | (data[pos + 4] << 16) | (data[pos + 5] << 8) | data[pos + 6]
            if size > self.max_payload:
                self._oversize_frame(size)
                return n
            end = pos + 7 + size
            if end >= n:
                break
            if data[end] != 0xCE:
                self._bad_frame_end(data[end])
                return n
            # The same as batch.handle_frame, written out: on MicroPython the call costs ~10% of feed.
            ftype = data[pos]
            number = (data[pos + 1] << 8) | data[pos + 2]
            if self.state == CLOSING:
                self._closing_frame(ftype, number, data, pos, end)
            elif ftype == 1:
                self._method_frame(number, data, pos + 7, end)
            elif ftype == 2 or ftype == 3:
                self._content_frame(ftype, number, data, pos, end)
            elif ftype == 8:
                if number != 0:
                    raise ConnectionException(
                        UNEXPECTED_FRAME, "UNEXPECTED_FRAME - heartbeat frame on channel %d" % number
                    )
            else:
                self._frame_error("FRAME_ERROR - unknown frame type %d" % ftype)
                return n
            pos = end + 1
        return pos

    def _oversize_frame(self, size):
        self._frame_error("FRAME_ERROR - frame size %d exceeds frame_max %d" % (size + 8, self.frame_max))

    def _bad_frame_end(self, octet):
        self._frame_error("FRAME_ERROR - invalid frame end marker 0x%02x" % octet)

    def _frame_error(self, reply_text):
        # The byte stream cannot be trusted past a framing error: say why, then hang up.
        self.close_with(ConnectionException(FRAME_ERROR, reply_text))
        self._finish()

    def _method_frame(self, number, buf, pos, end):
        if end - pos < 4:
            raise ConnectionException(FRAME_ERROR, "FRAME_ERROR - method frame shorter than 4 octets")
        method_id = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]
        pos += 4
        if number == 0:
            self._connection_method(method_id, buf, pos, end)
            return
        if self.state != OPEN:
            raise ConnectionException(
                CHANNEL_ERROR, "CHANNEL_ERROR - channel %d used before the connection is open" % number, method_id
            )
        channel = self.channels.get(number)
        if channel is None:
            if method_id != spec.CHANNEL_OPEN:
                raise ConnectionException(
                    CHANNEL_ERROR, "CHANNEL_ERROR - expected 'channel.open' on channel %d" % number, method_id
                )
            self._open_channel(number, buf, pos, end)
            return
        try:
            channel.on_method(method_id, buf, pos, end)
        except ChannelException as e:
            self.channel_error(channel, e)

    def _content_frame(self, ftype, number, buf, start, end):
        if number == 0:
            raise ConnectionException(CHANNEL_ERROR, "CHANNEL_ERROR - content frame on channel 0")
        channel = self.channels.get(number) if self.state == OPEN else None
        if channel is None:
            raise ConnectionException(
                CHANNEL_ERROR, "CHANNEL_ERROR - content frame on channel %d, which is not open" % number
            )
        try:
            if ftype == 2:
                channel.on_header(buf, start, end)
            else:
                channel.on_body(buf, start, end)
        except ChannelException as e:
            self.channel_error(channel, e)

    def _closing_frame(self, ftype, number, buf, start, end):
        """After our connection.close, only close and close-ok matter (requirements R086)."""
        if ftype != 1 or number != 0 or end - start < 11:
            return
        method_id = struct.unpack_from(">I", buf, start + 7)[0]
        if method_id == spec.CONNECTION_CLOSE_OK:
            self._finish()
        elif method_id == spec.CONNECTION_CLOSE:
            self.send_method(0, spec.CONNECTION_CLOSE_OK)
            self._finish()

    # ------------------------------------------------------------ connection class

    def _connection_method(self, method_id, buf, pos, end):
        if method_id >> 16 != spec.CLASS_CONNECTION:
            raise ConnectionException(
                CHANNEL_ERROR, "CHANNEL_ERROR - unexpected method %s on channel 0" % method_name(method_id), method_id
            )
        sig = signature(method_id)
        if sig is None:
            raise_unexpected(method_id)
        args = decode_args(sig, buf, pos, end)
        if method_id == spec.CONNECTION_CLOSE:
            code, reply_text = args[0], args[1]
            if code not in (0, spec.REPLY_SUCCESS):  # py-amqp closes with 0 by default: not a problem
                self.broker.log(
                    "warning", "%s: client closed the connection: %d %s" % (self.name, code, text(reply_text))
                )
            self.send_method(0, spec.CONNECTION_CLOSE_OK)
            self._finish()
            return
        expected = EXPECTED.get(self.state)
        if method_id != expected:
            raise ConnectionException(
                COMMAND_INVALID,
                "COMMAND_INVALID - %s is not allowed while the connection is %s"
                % (method_name(method_id), STATE_NAMES[self.state]),
                method_id,
            )
        if method_id == spec.CONNECTION_START_OK:
            self._start_ok(*args)
        elif method_id == spec.CONNECTION_TUNE_OK:
            self._tune_ok(*args)
        elif method_id == spec.CONNECTION_OPEN:
            self._open(args[0])

    def _start_ok(self, client_properties, mechanism, response, _locale):
        caps = client_properties.get("capabilities")
        if isinstance(caps, dict):
            self.wants_blocked = caps.get("connection.blocked") is True
            self.wants_cancel = caps.get("consumer_cancel_notify") is True
            self.wants_auth_close = caps.get("authentication_failure_close") is True
        product = client_properties.get("product")
        if isinstance(product, bytes):
            self.client = product
        if mechanism not in (b"PLAIN", b"AMQPLAIN"):
            raise ConnectionException(
                COMMAND_INVALID,
                "COMMAND_INVALID - unknown authentication mechanism '%s'" % text(mechanism),
                spec.CONNECTION_START_OK,
            )
        self._auth_mechanism = mechanism
        try:
            user, password = credentials(mechanism, response)
        except DecodeError as e:
            user, reason = "?", "malformed %s response: %s" % (text(mechanism), e)
        else:
            reason = self.broker.users.check(user, password, self.loopback)
        if reason is not None:
            # Hold the answer back a moment: a guessing client gets few tries (requirements R147).
            self.broker.log("warning", "%s: login refused: %s" % (self.name, reason))
            self.state = AUTH_FAILED
            self.deadline = self.broker.now + self.broker.limits.auth_failure_delay_ms
            return
        self.user = user.encode()
        limits = self.broker.limits
        self.send_method(0, spec.CONNECTION_TUNE, (limits.channel_max, limits.frame_max, limits.heartbeat))
        self.state = AWAIT_TUNE_OK

    def _refuse_login(self):
        if self.wants_auth_close:
            self.close_with(
                ConnectionException(
                    ACCESS_REFUSED,
                    "ACCESS_REFUSED - Login was refused using authentication mechanism %s. "
                    "For details see the broker logfile." % text(self._auth_mechanism),
                    spec.CONNECTION_START_OK,
                )
            )
        else:
            self._finish()  # older clients expect the socket to close (as RabbitMQ does)

    def _tune_ok(self, channel_max, frame_max, heartbeat):
        limits = self.broker.limits
        if frame_max and frame_max < spec.FRAME_MIN_SIZE:
            raise ConnectionException(
                NOT_ALLOWED,
                "NOT_ALLOWED - frame_max=%d < %d min size" % (frame_max, spec.FRAME_MIN_SIZE),
                spec.CONNECTION_TUNE_OK,
            )
        if frame_max == 0 or frame_max > limits.frame_max:
            raise ConnectionException(
                NOT_ALLOWED,
                "NOT_ALLOWED - negotiated frame_max = %d is higher than the maximum allowed value (%d)"
                % (frame_max, limits.frame_max),
                spec.CONNECTION_TUNE_OK,
            )
        if channel_max == 0 or channel_max > limits.channel_max:
            raise ConnectionException(
                NOT_ALLOWED,
                "NOT_ALLOWED - negotiated channel_max = %d is higher than the maximum allowed value (%d)"
                % (channel_max, limits.channel_max),
                spec.CONNECTION_TUNE_OK,
            )
        self.frame_max = frame_max
        self.max_payload = frame_max - 8
        self.channel_max = channel_max
        self.heartbeat_ms = heartbeat * 1000
        self.state = AWAIT_OPEN

    def _open(self, vhost):
        broker = self.broker
        if vhost != b"/":
            raise ConnectionException(
                NOT_ALLOWED, "NOT_ALLOWED - vhost %s not found" % text(vhost), spec.CONNECTION_OPEN
            )
        if broker.refuse_connections is not None:
            raise ConnectionException(
                NOT_ALLOWED, "NOT_ALLOWED - connection refused: " + broker.refuse_connections, spec.CONNECTION_OPEN
            )
        limit = broker.limits.max_connections
        if broker.open_connections >= limit:
            raise ConnectionException(
                NOT_ALLOWED,
                "NOT_ALLOWED - access to vhost '/' refused for user '%s': "
                "connection limit (%d) is reached" % (text(self.user), limit),
                spec.CONNECTION_OPEN,
            )
        broker.open_connections += 1
        self.counted = True
        self.send_method(0, spec.CONNECTION_OPEN_OK, (b"",))
        self.state = OPEN
        broker.log(
            "info", "%s: connection open (user '%s', client %s)" % (self.name, text(self.user), text(self.client))
        )
        if broker.blocked:
            self.notify_blocked(broker.block_reason)

    def _open_channel(self, number, buf, pos, end):
        decode_args("s", buf, pos, end)
        if number > self.channel_max:
            raise ConnectionException(
                NOT_ALLOWED,
                "NOT_ALLOWED - channel number %d is above the negotiated channel_max (%d)" % (number, self.channel_max),
                spec.CHANNEL_OPEN,
            )
        self.channels[number] = Channel(self, number)
        self.send_method(number, spec.CHANNEL_OPEN_OK, (b"",))

    def forget_channel(self, channel):
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]
        if channel in self.confirm_channels:
            self.confirm_channels.remove(channel)

    # ------------------------------------------------------------ errors and closing

    def channel_error(self, channel, e):
        self.broker.log("warning", "%s: channel %d closed: %s" % (self.name, channel.number, e.text))
        channel.flush_confirms()
        channel.cleanup()
        channel.state = CHANNEL_CLOSING
        if channel in self.confirm_channels:
            self.confirm_channels.remove(channel)
        self.send_method(channel.number, spec.CHANNEL_CLOSE, (e.code, e.text, e.method_id >> 16, e.method_id & 0xFFFF))

    def close_with(self, e):
        """Send connection.close for a connection exception; wait for close-ok."""
        if self.state >= CLOSING:
            return
        self.broker.log("warning", "%s: closing connection: %s" % (self.name, e.text))
        self._release()
        self.send_method(0, spec.CONNECTION_CLOSE, (e.code, e.text, e.method_id >> 16, e.method_id & 0xFFFF))
        self.state = CLOSING
        self.deadline = self.broker.now + self.broker.limits.close_timeout_ms

    def close(self, code=spec.CONNECTION_FORCED, reply_text="CONNECTION_FORCED - broker shutdown"):
        """Close from the broker side (shutdown, operator)."""
        if self.state == OPEN:
            self.close_with(ConnectionException(code, reply_text))
        else:
            self._finish()

    def _finish(self):
        self.state = CLOSED
        self.closed = True
        self._pending = b""
        try:
            self._release()
        finally:  # even if giving back failed (MemoryError), the port must learn we are closed
            self.broker.forget(self)
            if self.wake is not None:
                self.wake()

    def lost(self):
        """The transport is gone; nothing more can be sent."""
        if not self.closed and self.state == OPEN:
            self.broker.log("warning", "%s: client closed the socket without connection.close" % self.name)
        self._finish()
        self.out = []

    def _release(self):
        """Give back everything the connection holds: channels, consumers, exclusive queues."""
        channels = self.channels
        self.channels = {}
        self.confirm_channels = []
        for number in channels:
            channels[number].cleanup()
        self.broker.connection_gone(self)

    # ------------------------------------------------------------ time

    def tick(self, now):
        state = self.state
        if state == CLOSED:
            return
        if state < OPEN and state != AUTH_FAILED and now >= self.deadline:
            self.broker.log("warning", "%s: handshake timed out while %s" % (self.name, STATE_NAMES[state]))
            if state == AWAIT_HEADER:
                self._refuse_header(self._pending)  # a short header still learns what we speak
            else:
                self._finish()
        elif state == AUTH_FAILED and now >= self.deadline:
            self._refuse_login()
        elif state == CLOSING and now >= self.deadline:
            self._finish()
        elif self.heartbeat_ms and state >= AWAIT_OPEN:
            if not self.paused and now - self.last_recv > 2 * self.heartbeat_ms:
                self.broker.log(
                    "warning",
                    "%s: missed heartbeats from client, timeout: %ds" % (self.name, self.heartbeat_ms // 1000),
                )
                self._finish()
                return
            if now - self.last_send >= self.heartbeat_ms // 2 and not self.out:
                self.out.append(HEARTBEAT_FRAME)
                self.output_added(8)

    # ------------------------------------------------------------ bytes out

    def send_method(self, channel, method_id, args=()):
        data = method_frame(channel, method_id, args)
        self.out.append(data)
        self.output_added(len(data) - 8)

    def output_added(self, nbytes):
        self.out_bytes += nbytes
        if not self._woken:
            self._woken = True
            if self.wake is not None:
                self.wake()

    def saturated(self):
        return self.out_bytes >= self.high_water

    def take_output(self):
        """Everything to send, as one bytes object (b"" if nothing)."""
        parts = self.take_parts()
        return b"".join(parts) if parts else b""

    def take_parts(self):
        """Everything to send, as the list of buffers it was built from. A port on a small heap
        writes them one by one rather than joining them into one large (fragmenting) buffer."""
        if not self.out:
            return None
        parts = self.out
        self.out = []
        was_saturated = self.out_bytes >= self.high_water
        self.out_bytes = 0
        self._woken = False
        self.last_send = self.broker.now
        if was_saturated and self.state == OPEN:
            # the client caught up: let its queues deliver again (the next take gets it)
            for channel in list(self.channels.values()):
                channel._redispatch([c.queue for c in channel.consumers.values()])
        return parts

    # ------------------------------------------------------------ confirms and flow control

    def confirm_pending(self, channel):
        if channel not in self.confirm_channels:
            self.confirm_channels.append(channel)

    def flush_confirms(self):
        """The confirms every channel has due; channels whose confirms wait for the journal
        stay listed, and the broker calls this again once the journal has synced."""
        if self.confirm_channels:
            waiting = None
            for channel in self.confirm_channels:
                if channel.flush_confirms():
                    if waiting is None:
                        waiting = []
                    waiting.append(channel)
            self.confirm_channels = waiting or []
            if waiting:
                self.broker.wait_for_journal(self)

    def after_publish(self):
        if self.broker.blocked:
            self.pause()

    def wait_for(self, queue):
        if self not in queue.waiting:
            queue.waiting.append(self)
        self.pause()

    def pause(self):
        if not self.paused:
            self.paused = True
            self.broker.paused.append(self)

    def resume_reading(self):
        if not self.paused or self.closed or self.broker.blocked:
            return
        self.paused = False
        if self in self.broker.paused:
            self.broker.paused.remove(self)
        pending = self._pending
        self._pending = b""
        if pending:
            self.feed(pending)
        if self.wake is not None:
            self.wake()

    def notify_blocked(self, reason):
        if self.state == OPEN and self.wants_blocked:
            self.send_method(0, spec.CONNECTION_BLOCKED, (reason,))

    def notify_unblocked(self):
        if self.state == OPEN and self.wants_blocked:
            self.send_method(0, spec.CONNECTION_UNBLOCKED)
