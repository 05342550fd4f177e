"""One client connection, sans-IO: bytes in with feed(), bytes out with take_output().

The port owns the socket (or UART) and the clock:

    conn = Connection(broker, {"address": "127.0.0.1", "port": 50123, "transport": "tcp"})
    conn.wake = callback      # called when output appears outside feed() (deliveries
                              # caused by other connections, a resume after a block)
    conn.feed(data)           # process every complete frame in data
    data = conn.take_output() # everything to write, as one bytes object (b"" if none)
    broker.tick(now_ms)       # heartbeats, timeouts, TTLs; call it a few times a second
    conn.want_read            # False while the broker holds this publisher back
    conn.closed               # write what take_output() gives, then close the transport
    conn.lost()               # the transport went away

The connection finds the frames in what it is fed with a frame reader, a function
read(conn, data, pos) -> where it stopped, which hands each whole frame to the
connection's method_frame and content_frame (amqp091/batch.py handle_frame; inlined here): by
default read_frames below, frame by frame; on CPython with the C accelerator, one
from amqp091/batch.py that scans a buffer's frames in one call (amqp091/batch.py install).
Channel 0's methods (the handshake) are amqp091/handshake.py's; channels are amqp091/channel.py.
"""

import struct

from ..codec import spec
from ..codec.errors import (
    CHANNEL_ERROR,
    CONNECTION_FORCED,
    FRAME_ERROR,
    INTERNAL_ERROR,
    NOT_ALLOWED,
    RESOURCE_ERROR,
    SYNTAX_ERROR,
    UNEXPECTED_FRAME,
    DecodeError,
    Refused,
)
from ..codec.wire import HEARTBEAT_FRAME, decode_args, method_frame
from ..core import counters
from ..core.connections import PortConnection
from .channel import CLOSING as CHANNEL_CLOSING
from .channel import WANTS_BLOCKED, Channel
from .handshake import (
    AUTH_FAILED,
    AWAIT_HEADER,
    AWAIT_OPEN,
    CLOSED,
    CLOSING,
    OPEN,
    STATE_NAMES,
    connection_method,
    read_header,
    refuse_header,
    refuse_login,
)


class Serving:
    """What the 0-9-1 front end keeps once per broker, beside the neutral core, in
    broker.front_ends["amqp091"] (the broker holds it without knowing what is in it): how its
    connections find frames and make a stream's deliveries (the C accelerator's, installed by
    amqp091/batch.py install on CPython), what it announces in connection.start, and the live
    direct reply-to names. (Here, not in a module of its own: on a board each module costs
    heap.)"""

    # (Class-level defaults: an instance holds only what was set, and a board pays no method.)
    # frame_reader() gives each new connection its frame reader (amqp091/batch.py with the C
    # scanner); None: read_frames below, frame by frame.
    frame_reader = None
    stream_deliveries = None  # amqp091/output.py stream_records' C twin (c_accel/streams.py)
    reply_channels = None  # each live reply name -> its channel (amqp091/replyto.py)
    properties = None  # connection.start's server properties (amqp091/handshake.py)


def serving_of(broker):
    """The broker's 0-9-1 share (made with the first connection when nothing was installed)."""
    serving = broker.front_ends.get("amqp091")
    if serving is None:
        serving = broker.front_ends["amqp091"] = Serving()
    return serving


def read_frames(conn, data, pos):
    """The default frame reader: each frame header read here, in Python (MicroPython, or CPython
    without the C accelerator, where a batch scan in Python costs more than it saves: framing.py
    says why). Returns where the next unread frame starts (len(data) after a framing error)."""
    n = len(data)
    while n - pos >= 7:
        if conn.paused or conn.closed:
            break
        size = (data[pos + 3] << 24) | (data[pos + 4] << 16) | (data[pos + 5] << 8) | data[pos + 6]
        if size > conn.accept_payload:
            conn.oversize_frame(size)
            return n
        end = pos + 7 + size
        if end >= n:
            break
        if data[end] != 0xCE:
            conn.bad_frame_end(data[end])
            return n
        # amqp091/batch.py handle_frame, written out: on MicroPython the call costs ~10% of feed.
        ftype = data[pos]
        number = (data[pos + 1] << 8) | data[pos + 2]
        if conn.state == CLOSING:
            conn.closing_frame(ftype, number, data, pos, end)
        elif ftype == 1:
            conn.method_frame(number, data, pos + 7, end)
        elif ftype == 2 or ftype == 3:
            conn.content_frame(ftype, number, data, pos, end)
        elif ftype == 8:
            if number != 0:
                raise Refused(UNEXPECTED_FRAME, "heartbeat frame on channel %d" % number)
        else:
            conn.frame_error("unknown frame type %d" % ftype)
            return n
        pos = end + 1
    return pos


class Connection(PortConnection):
    """One 0-9-1 client (see the module's docstring); its port's side is core/connections.py's."""

    protocol = "AMQP 0-9-1"
    metrics_label = "amqp091"
    # What many connections never change, class-level until one does (each attribute an
    # instance holds costs a board's heap, per connection):
    heartbeat_ms = 0
    # The client capabilities (start-ok) the broker acts on, as bits (channel.py WANTS_*); the
    # rest of the client-properties table is not kept: on a board it would cost ~1 KiB per client.
    wants = 0
    product = b"?"  # its client library's product name, for the log line of its open
    provided_name = b""  # the name its client gave it (connection_name): `hutch ctl list connections`
    auth_mechanism = b""

    def __init__(self, broker, peer):
        PortConnection.__init__(self, broker, peer)
        limits = broker.limits
        self.state = AWAIT_HEADER
        self.serving = serving = serving_of(broker)  # what every 0-9-1 connection of the broker shares
        self.read_frames = serving.frame_reader() if serving.frame_reader else read_frames  # see the docstring
        self.channels = {}
        self.frame_max = limits.frame_max
        self.max_payload = limits.frame_max - 8  # the most a frame we send carries
        # the most a client's frame may carry: RabbitMQ takes frame_max + 8 octets in all,
        # for clients (AMQPStorm, rabbitpy) that fill a body frame's payload to frame_max
        # Before tune-ok a frame may carry no more than the smallest frame_max (RabbitMQ: 4096
        # in all): a client that has not logged in cannot make the broker buffer more.
        self.accept_payload = spec.FRAME_MIN_SIZE - 8
        self.channel_max = limits.channel_max
        self.confirm_channels = []

    @property
    def want_read(self):
        return not self.paused and not self.closed

    # ------------------------------------------------------------ bytes in

    def parse(self, data):
        """(PortConnection.feed) The protocol header, then every whole frame: where the rest begins."""
        pos = 0
        if self.state == AWAIT_HEADER:
            pos = read_header(self, data)
            if pos < 0:
                return pos
        return self.read_frames(self, data, pos)

    protocol_errors = (Refused, DecodeError)

    def close_for(self, e):
        """(PortConnection) connection.close with the code that says e: a refusal's, a frame that
        does not decode (501, 502), out of memory (506), an internal error (541; a frame that
        cannot even be made for want of memory: hung up on)."""
        if isinstance(e, DecodeError):
            e = Refused(FRAME_ERROR if e.code == spec.FRAME_ERROR else SYNTAX_ERROR, str(e))
        elif isinstance(e, MemoryError):
            e = Refused(RESOURCE_ERROR, "broker out of memory")
        elif not isinstance(e, Refused):
            try:
                self.close_with(Refused(INTERNAL_ERROR, "%r" % (e,)))
            except Exception:
                self.dropped()
            return
        self.close_with(e)

    def read_wanted(self):
        """How many more octets complete the frame whose start is pending (0: none is): the
        CPython port reads a large frame whole at once (ports/tcp_cpython.py), taking its start
        from pending."""
        pending = self.pending
        if len(pending) < 7 or self.paused or self.state == AWAIT_HEADER:
            return 0
        return (pending[3] << 24 | pending[4] << 16 | pending[5] << 8 | pending[6]) + 8 - len(pending)

    def unsettled(self):
        """(queue, entry) of every delivery its channels still wait to settle (compaction
        looks for the messages an old segment holds)."""
        out = []
        for channel in self.channels.values():
            for queue, entry, _consumer in channel.unacked.values():
                out.append((queue, entry))
        return out

    def eof(self):
        """The peer closed its sending side."""
        if self.state == AWAIT_HEADER and not self.closed:
            refuse_header(self, self.pending)
            return
        self.lost()

    def oversize_frame(self, size):
        limit = self.accept_payload + 8 if self.state < AWAIT_OPEN else self.frame_max  # (before tune-ok: the smallest)
        self.frame_error("frame size %d exceeds frame_max %d" % (size + 8, limit))

    def bad_frame_end(self, octet):
        self.frame_error("invalid frame end marker 0x%02x" % octet)

    def frame_error(self, text):
        # The byte stream cannot be trusted past a framing error: say why, then hang up.
        self.close_with(Refused(FRAME_ERROR, text))
        self.end()

    def method_frame(self, number, buf, pos, end):
        if end - pos < 4:
            raise Refused(FRAME_ERROR, "method frame shorter than 4 octets")
        method_id = (buf[pos] << 24) | (buf[pos + 1] << 16) | (buf[pos + 2] << 8) | buf[pos + 3]
        pos += 4
        if number == 0:
            connection_method(self, method_id, buf, pos, end)
            return
        if self.state != OPEN:
            raise Refused(CHANNEL_ERROR, "channel %d used before the connection is open" % number, method_id)
        channel = self.channels.get(number)
        if channel is None:
            if method_id != spec.CHANNEL_OPEN:
                raise Refused(CHANNEL_ERROR, "expected 'channel.open' on channel %d" % number, method_id)
            self._open_channel(number, buf, pos, end)
            return
        try:
            channel.on_method(method_id, buf, pos, end)
        except Refused as e:
            self.channel_error(channel, e)

    def content_frame(self, ftype, number, buf, start, end):
        if number == 0:
            raise Refused(CHANNEL_ERROR, "content frame on channel 0")
        channel = self.channels.get(number) if self.state == OPEN else None
        if channel is None:
            raise Refused(CHANNEL_ERROR, "content frame on channel %d, which is not open" % number)
        try:
            if ftype == 2:
                channel.on_header(buf, start, end)
            else:
                channel.on_body(buf, start, end)
        except Refused as e:
            self.channel_error(channel, e)

    def closing_frame(self, ftype, number, buf, start, end):
        """After our connection.close, only close and close-ok matter (requirements R086)."""
        if ftype != 1 or number != 0 or end - start < 11:
            return
        method_id = struct.unpack_from(">I", buf, start + 7)[0]
        if method_id == spec.CONNECTION_CLOSE_OK:
            self.end()
        elif method_id == spec.CONNECTION_CLOSE:
            self.send_method(0, spec.CONNECTION_CLOSE_OK)
            self.end()

    def _open_channel(self, number, buf, pos, end):
        decode_args("s", buf, pos, end)
        # What a board's heap needs bounded is how many channels are open, not their numbers:
        # any number the wire carries (1-65535) is taken, as RabbitMQ does, and channel_max
        # caps the count, with RabbitMQ's words (and no method: 0, 0).
        if len(self.channels) >= self.channel_max:
            raise Refused(
                NOT_ALLOWED,
                "number of channels opened (%d) has reached the negotiated channel_max (%d)"
                % (len(self.channels), self.channel_max),
            )
        self.channels[number] = Channel(self, number)
        self.broker.stats[counters.CHANNELS_OPENED] += 1
        self.send_method(number, spec.CHANNEL_OPEN_OK, (b"",))

    def forget_channel(self, channel):
        if self.channels.get(channel.number) is channel:
            del self.channels[channel.number]
            self.broker.stats[counters.CHANNELS_CLOSED] += 1
        if channel in self.confirm_channels:
            self.confirm_channels.remove(channel)

    # ------------------------------------------------------------ errors and closing

    def channel_error(self, channel, e):
        """A refusal (core/session.py Refused) while serving channel: a soft error closes the
        channel, a hard one the connection (amqp091/replies.py words both)."""
        from .replies import closes_connection, closing_arguments

        if closes_connection(e):
            raise e
        arguments = closing_arguments(e)
        self.broker.log("warning", "%s: channel %d closed: %s" % (self.name, channel.number, arguments[1]))
        channel.flush_confirms()
        channel.cleanup()
        channel.state = CHANNEL_CLOSING
        if channel in self.confirm_channels:
            self.confirm_channels.remove(channel)
        self.send_method(channel.number, spec.CHANNEL_CLOSE, arguments)

    def close_with(self, e):
        """Send connection.close for a refusal (core/session.py Refused); wait for close-ok."""
        if self.state >= CLOSING:
            return
        from .replies import closing_arguments

        arguments = closing_arguments(e)
        self.broker.log("warning", "%s: closing connection: %s" % (self.name, arguments[1]))
        self.give_back()  # (now: what it holds goes back before its close-ok comes)
        self.send_method(0, spec.CONNECTION_CLOSE, arguments)
        self.state = CLOSING
        self.deadline = self.broker.now + self.broker.limits.close_timeout_ms

    def close(self, reason="broker shutdown"):
        """Close from the broker side (shutdown, operator): 320 CONNECTION_FORCED, the reason its text."""
        if self.state == OPEN:
            self.close_with(Refused(CONNECTION_FORCED, reason))
        else:
            self.end()

    def lost(self):
        """The transport is gone; nothing more can be sent."""
        if not self.closed and self.state == OPEN:
            try:
                self.broker.log("warning", "%s: client closed the socket without connection.close" % self.name)
            except MemoryError:  # (a board's heap full: the end matters, the line does not)
                pass
        self.end()
        self.out = []

    def give_back(self):
        """(PortConnection.end, and a close's start) Everything the connection holds, given
        back: channels, consumers, exclusive queues; its state closed (a close then says
        closing)."""
        channels = self.channels
        self.channels = {}
        self.confirm_channels = []
        self.broker.stats[counters.CHANNELS_CLOSED] += len(channels)
        for number in channels:
            channels[number].cleanup()
        self.broker.connection_gone(self)
        self.state = CLOSED

    # ------------------------------------------------------------ time

    def tick(self, now):
        state = self.state
        if state == CLOSED:
            return
        if state < OPEN and state != AUTH_FAILED and now >= self.deadline:
            self.broker.log("warning", "%s: handshake timed out while %s" % (self.name, STATE_NAMES[state]))
            if state == AWAIT_HEADER:
                refuse_header(self, self.pending)  # a short header still learns what we speak
            else:
                self.end()
        elif state == AUTH_FAILED and now >= self.deadline:
            refuse_login(self)
        elif state == CLOSING and now >= self.deadline:
            self.end()
        elif self.heartbeat_ms and state >= AWAIT_OPEN:
            if not self.paused and now - self.last_recv > 2 * self.heartbeat_ms:
                self.broker.log(
                    "warning",
                    "%s: missed heartbeats from client, timeout: %ds" % (self.name, self.heartbeat_ms // 1000),
                )
                self.end()
                return
            if now - self.last_send >= self.heartbeat_ms // 2 and not self.out:
                self.out.append(HEARTBEAT_FRAME)
                self.output_added(8)

    # ------------------------------------------------------------ bytes out

    def send_method(self, channel, method_id, args=()):
        data = method_frame(channel, method_id, args)
        self.out.append(data)
        self.output_added(len(data) - 8)

    def caught_up(self):
        if self.state == OPEN:  # the client caught up: let its queues deliver again (the next take gets it)
            for channel in list(self.channels.values()):
                channel.redispatch([c.queue for c in channel.consumers.values()])

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
        if self.broker.flow.blocked:
            self.pause()

    def notify_blocked(self, reason):
        if self.state == OPEN and self.wants & WANTS_BLOCKED:
            self.send_method(0, spec.CONNECTION_BLOCKED, (reason,))

    def notify_unblocked(self):
        if self.state == OPEN and self.wants & WANTS_BLOCKED:
            self.send_method(0, spec.CONNECTION_UNBLOCKED)
