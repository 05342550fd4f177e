"""The client side of AMQP 1.0, sans-IO: one sending link to a 1.0 broker, the uplink of a
bridge (server/bridges/driver.py drives it as it drives the 0-9-1 client, client/protocol.py).

In the style of h11: no socket and no clock of its own (the time comes in, in milliseconds),
bytes in, events and bytes out.

    p = Protocol(max_frame=65536)
    p.connect(now, user, password, hostname, address)   # queues the SASL header
    loop:
        write every p.data_to_send()
        n = sock.readinto(p.read_buffer()); p.received(n)   # or p.receive_data(data)
        while (event := p.next_event()) is not None: handle it
        p.tick(now) < 0: the peer said nothing for twice our idle time-out (it is gone)
    p.room(): how many messages may go now (the link's credit, the session's window)
    p.forward(exchange, routing_key, header_tail, body_tail, mandatory): one message

The handshake runs by itself, one step at a time (RabbitMQ 3.10 ends a connection whose
attach comes before its begin is answered): the SASL header, sasl-init (PLAIN, ANONYMOUS or
EXTERNAL), the AMQP header and open, begin, and the sending link's attach; p.channel_open is
true once the broker attached it. With `cbs` (the claims-based security of Azure), a link
pair to the node `$cbs` is attached first and a put-token sent on it; the sending link is
attached once the token is taken, and put_token() renews it on the same links.

Each message goes as an unsettled transfer (or pre-settled, `settled=True`), numbered from 1
on each connection as the bridge's outbox numbers what it sends, in as many frames as the
smaller of the two max-frame-sizes needs. What a bridge needs of the outcomes comes out in
the bridge's words (codec/upstream.py), which its machine takes from every protocol
(core/bridge/machine.py, through server/bridges/driver.py): accepted; rejected for
`rejected`, released for `released` or `modified` (why: the outcome and its error), which the
bridge sends again; ended when the link, the session or the connection ended (the reason says
how and why, with the peer's condition: amqp:link:detach-forced, amqp:not-found...), or the
login was refused.

MicroPython-clean: a board's bridge to a 1.0 cloud runs it (imported only by such a bridge).
"""

import struct

from ..codec.upstream import ACCEPTED, ENDED, REJECTED, RELEASED
from ..codec.upstream_client import NO_LIMIT, Upstream
from ..codec.wire import text
from ..core.message import Message
from . import spec
from .delivery import from_message
from .frames import AMQP_FRAME, field, frame, split
from .types import Array, DecodeError, Described, Symbol, Ubyte, Uint, Ulong, Ushort, encode

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"
MASK = 0xFFFFFFFF  # sequence numbers (transfer and delivery ids, delivery counts) are mod 2**32
WINDOW = 0x7FFFFFFF  # our session's windows: our link credit is what bounds what comes in
CBS_CREDIT = 4  # put-token replies we take at once

# The handshake, in order
(SASL_WAIT, MECHANISMS, OUTCOME, AMQP_WAIT, OPENING, BEGINNING, ATTACHING, RUNNING, CLOSED) = range(9)

ACCEPTED_OUTCOME = Described(Ulong(spec.ACCEPTED), [])
OUTCOMES = {spec.REJECTED: "rejected", spec.RELEASED: "released", spec.MODIFIED: "modified"}
SASL_OUTCOMES = ("ok", "auth", "sys", "sys-perm", "sys-temp")

UNRESERVED = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"


def quote(text):
    """text percent-encoded: every octet but the unreserved ones of RFC 3986 (as RabbitMQ 4's
    addresses and Azure's SAS tokens want it; %2F for "/")."""
    raw = text.encode() if isinstance(text, str) else bytes(text)
    out = []
    for octet in raw:
        out.append(chr(octet) if octet in UNRESERVED else "%%%02X" % octet)
    return "".join(out)


def v2_address(exchange, routing_key=None):
    """RabbitMQ 4's (v2) target address of an exchange and routing key: /exchanges/X/RK, or
    /exchanges/X without a key; the default exchange ("") is /queues/RK, the queue of that name
    (RabbitMQ 4 refuses amq.default by name)."""
    exchange = text(exchange)
    if not exchange:
        return "/queues/" + quote(text(routing_key or ""))
    if routing_key is None:
        return "/exchanges/" + quote(exchange)
    return "/exchanges/%s/%s" % (quote(exchange), quote(text(routing_key)))


def _error_text(error):
    """An error's condition and description as one line ("amqp:not-found: no queue 'q'")."""
    if type(error) is not Described or type(error.value) is not list or not error.value:
        return "no error given"
    condition = error.value[0]
    text = condition.value if isinstance(condition, Symbol) else str(condition)
    if len(error.value) > 1 and error.value[1]:
        text += ": " + str(error.value[1])
    return text


class _Link:
    """One link of ours: the sending link that carries the messages, or the $cbs pair."""

    def __init__(self, handle, name, sender):
        self.handle = handle
        self.name = name
        self.sender = sender
        self.attached = False
        self.credit = 0  # (a sender) transfers the peer lets us send
        self.delivery_count = 0
        self.partial = None  # (a receiver) a message's parts while it comes in frames


class Protocol(Upstream):
    def __init__(self, max_frame=65536):
        self.max_frame = self._most = max(512, max_frame)  # ours: the largest frame we take (and send)
        self._rx = bytearray(self.max_frame)
        self._rxm = memoryview(self._rx)
        self._pos = self._n = 0
        self._out = []
        self._events = []
        self.state = CLOSED
        self.channel_open = False
        self.awaiting = 0  # (what the bridge's driver asks of a protocol: no reply is awaited)
        self.in_flight = []  # seqs sent unsettled, in order

    # -- the connection ---------------------------------------------------------------------

    def connect(self, now, user, password, hostname, address, idle_ms=60000, container="hutch",
                mechanism="PLAIN", settled=False, cbs=None):  # fmt: skip
        """Start a connection (the SASL header is queued). address: the target (None: a null
        target, each message's `to` says where); idle_ms: our idle time-out (0: none); settled:
        transfers pre-settled (at most once) rather than unsettled; cbs: (audience, token type,
        token) to put on $cbs before the link is attached (then mechanism ANONYMOUS)."""
        self._pos = self._n = 0
        self._out = [SASL_HEADER]
        self._events = []
        self.state = SASL_WAIT
        self.channel_open = False
        self.in_flight = []
        self._ids = {}  # delivery id -> seq of the messages in flight (a put-token's: 0)
        self.seq = 0
        self._login = (mechanism, user, password)
        self.hostname = hostname
        self.address = address
        self.container = container
        self.settled = settled
        self.cbs = cbs
        self.idle_ms = idle_ms
        self.peer_idle_ms = 0
        self.send_max = 512  # the frames we send, until open says the peer's
        self._heard_at = self._sent_at = now
        self._heard = self._spoke = False
        self.next_transfer_id = 0  # the session's next outgoing transfer id (of the next frame sent)
        self.next_delivery_id = 0
        self.next_incoming_id = 0
        self.remote_window = 0  # transfer frames the peer takes before it sends a flow
        self._held = []  # transfer frames beyond the peer's window, sent as it opens
        self.links = {}  # our handle -> _Link
        self.peer_links = {}  # the peer's handle -> _Link
        self.link = _Link(2 if cbs else 0, "%s-%s" % (container, address or "null"), True)
        self.token_seq = 0  # put-tokens sent
        self._token_due = cbs is not None  # a token to put on $cbs once its links can take it

    def close(self, why=None):
        """Close the connection (the peer answers with its close: an "ended" event)."""
        if self.state >= OPENING and self.state != CLOSED:
            self._send(frame(0, spec.CLOSE, [why] if why is not None else []))
        self.channel_open = False

    # -- output ---------------------------------------------------------------------------

    def data_to_send(self):
        """The next bytes to write (codec/readbuffer.py Upstream), the transfer frames that
        waited for the session's window among them as it opens, or None."""
        held = self._held
        while held and self.remote_window > 0:
            self._out.append(held.pop(0))
            self.remote_window -= 1
            self.next_transfer_id = (self.next_transfer_id + 1) & MASK
        return Upstream.data_to_send(self)

    def tick(self, now):
        """An empty frame when we sent nothing for half the peer's idle time-out. How long (ms)
        the caller may wait before calling again; -1 when nothing came from the peer for twice
        ours (it is gone)."""
        self._clock(now)
        wait = NO_LIMIT
        peer = self.peer_idle_ms
        if peer and self.state >= BEGINNING and self.state != CLOSED:
            half = peer // 2
            if now - self._sent_at >= half:
                self._send(EMPTY_FRAME)
                self._sent_at = now
            wait = half - (now - self._sent_at)
        if self.idle_ms and self.state != CLOSED:
            if now - self._heard_at > 2 * self.idle_ms:
                return -1
            wait = min(wait, self.idle_ms)
        return wait

    # -- sending messages ---------------------------------------------------------------------

    def room(self):
        """How many messages may go now: the link's credit, none while transfer frames wait for
        the session's window (or before the link is attached)."""
        if not self.channel_open or self._held or self.remote_window <= 0:
            return 0
        return min(self.link.credit, self.remote_window)

    def forward(self, exchange, routing_key, header_tail, body_tail, mandatory=False):
        """One message, as a broker keeps it (core/message.py: its 0-9-1 content header and body
        as frame tails), converted to 1.0 sections as the broker converts for its own 1.0
        consumers (amqp10/delivery.py from_message); to exchange and routing_key when the link
        has a null target (its `to`), else to the link's target. Its number (seq)."""
        size = len(body_tail) - 5 if body_tail is not None else 0
        message = Message(exchange, routing_key, None, header_tail, body_tail, size)
        to = v2_address(exchange, routing_key) if self.address is None else None
        self.seq += 1
        delivery_id = self._transfer(self.link, from_message(message, False, to), self.settled)
        if not self.settled:
            self.in_flight.append(self.seq)
            self._ids[delivery_id] = self.seq
        return self.seq

    def _transfer(self, link, payload, settled):
        """A message on link, in as many frames as the peer's max-frame-size needs."""
        delivery_id = self.next_delivery_id
        self.next_delivery_id = (delivery_id + 1) & MASK
        link.credit -= 1
        link.delivery_count = (link.delivery_count + 1) & MASK
        handle = Uint(link.handle)
        fields = [handle, Uint(delivery_id), struct.pack(">I", delivery_id), Uint(0), settled]
        whole = frame(0, spec.TRANSFER, fields, payload)
        if len(whole) <= self.send_max:
            self._frames([whole])
            return delivery_id
        fields.append(True)  # more: parts follow
        room = self.send_max - len(frame(0, spec.TRANSFER, fields))
        parts = [frame(0, spec.TRANSFER, fields, payload[:room])]
        at = room
        fields = [handle, None, None, None, None, True]  # the parts after the first: the handle alone
        room = self.send_max - len(frame(0, spec.TRANSFER, fields))
        while len(payload) - at > room:
            parts.append(frame(0, spec.TRANSFER, fields, payload[at : at + room]))
            at += room
        parts.append(frame(0, spec.TRANSFER, [handle], payload[at:]))
        self._frames(parts)
        return delivery_id

    def _frames(self, frames):
        """Transfer frames: sent while the peer's session window has room, the rest held (their
        transfer ids are given as they go)."""
        for data in frames:
            if self._held or self.remote_window <= 0:
                self._held.append(data)
            else:
                self.remote_window -= 1
                self.next_transfer_id = (self.next_transfer_id + 1) & MASK
                self._out.append(data)

    def put_token(self, token):
        """Put a (new) token on $cbs, for the audience and type given to connect(): sent as soon
        as the $cbs links are attached and the peer gives credit."""
        self.cbs = (self.cbs[0], self.cbs[1], token)
        self._token_due = True
        self._send_token()

    def _send_token(self):
        links = self.links
        sender = links.get(0)
        cbs = self.cbs
        if not self._token_due or cbs is None or sender is None or not (sender.attached and links[1].attached):
            return
        if sender.credit <= 0:
            return
        self._token_due = False
        self.token_seq += 1
        audience, kind, token = cbs
        properties = Described(Ulong(spec.PROPERTIES), ["put-token-%d" % self.token_seq, None, "$cbs", None, "cbs"])
        application = Described(
            Ulong(spec.APPLICATION_PROPERTIES), {"operation": "put-token", "type": kind, "name": audience}
        )
        body = Described(Ulong(spec.AMQP_VALUE), token)
        payload = encode(properties) + encode(application) + encode(body)
        self._ids[self._transfer(sender, payload, False)] = 0

    # -- input ----------------------------------------------------------------------------

    def _step(self):
        """Read one protocol header or frame (codec/readbuffer.py Upstream): False when it has
        not all arrived."""
        if self.state == CLOSED:
            return False
        try:
            if self.state == SASL_WAIT or self.state == AMQP_WAIT:
                return self._header()
            found, end = split(self._rxm[: self._n], self._pos, self.max_frame)
            if found is None:
                return False
            self._pos = end
            if found.code is not None:  # (an empty frame: the peer is alive)
                self._frame(found)
        except DecodeError as e:
            self.close(Described(Ulong(spec.ERROR), [Symbol("amqp:decode-error"), str(e)]))
            self._end("upstream sent what is not AMQP 1.0: %s" % e, "amqp:decode-error")
        return True

    def _header(self):
        if self._n - self._pos < 8:
            return False
        header = bytes(self._rxm[self._pos : self._pos + 8])
        self._pos += 8
        wanted = SASL_HEADER if self.state == SASL_WAIT else AMQP_HEADER
        if header != wanted:
            self._end("upstream does not speak AMQP 1.0 (its protocol header is %r)" % header)
        else:
            self.state += 1
        return True

    def _end(self, reason, condition=None):
        self._events.append((ENDED, reason, condition))
        self.state = CLOSED
        self.channel_open = False

    def _frame(self, f):
        code = f.code
        state = self.state
        if state == MECHANISMS and code == spec.SASL_MECHANISMS:
            self._mechanisms(f)
        elif state == OUTCOME and code == spec.SASL_OUTCOME:
            self._outcome(f)
        elif f.kind != AMQP_FRAME or state < OPENING:
            raise DecodeError("a frame out of place (performative 0x%02x)" % (code or 0))
        elif code == spec.TRANSFER:
            self._transfer_in(f)
        elif code == spec.DISPOSITION:
            self._disposition(f)
        elif code == spec.FLOW:
            self._flow(f)
        elif code == spec.OPEN and state == OPENING:
            self._open(f)
        elif code == spec.BEGIN and state == BEGINNING:
            self._begin(f)
        elif code == spec.ATTACH:
            self._attach(f)
        elif code == spec.DETACH:
            link = self.peer_links.get(field(f, 0, Uint(0)).value)
            what = "the link to '%s'" % self.address if link is self.link or link is None else "the $cbs link"
            self._ended("upstream detached " + what, field(f, 2))
        elif code == spec.END:
            self._ended("upstream ended the session", field(f, 0))
        elif code == spec.CLOSE:
            self._send(frame(0, spec.CLOSE, []))
            self._ended("upstream closed the connection", field(f, 0))
        else:
            raise DecodeError("a frame out of place (performative 0x%02x)" % (code or 0))

    def _ended(self, what, error):
        condition = error.value[0] if type(error) is Described and type(error.value) is list and error.value else None
        condition = condition.value if isinstance(condition, Symbol) else condition
        self._end("%s: %s" % (what, _error_text(error)) if error is not None else what, condition)

    # -- the handshake ---------------------------------------------------------------------

    def _mechanisms(self, f):
        offered = field(f, 0)
        # (symbols, one or an array of them: what else is there names no mechanism)
        names = [str(m.value) for m in (offered.value if isinstance(offered, Array) else [offered]) if isinstance(m, Symbol)]  # fmt: skip
        mechanism, user, password = self._login
        if mechanism not in names:
            self._end("login refused: upstream offers SASL %s, not %s" % (", ".join(names), mechanism))
            return
        if mechanism == "PLAIN":
            response = b"\x00" + user.encode() + b"\x00" + password.encode()
        else:
            response = b""  # ANONYMOUS (no trace), EXTERNAL (the TLS certificate names the user)
        self._send(frame(0, spec.SASL_INIT, [Symbol(mechanism), response, self.hostname], sasl=True))
        self.state = OUTCOME

    def _outcome(self, f):
        code = field(f, 0).value
        if code:
            name = SASL_OUTCOMES[code] if code < len(SASL_OUTCOMES) else "?"
            self._end("login refused: SASL outcome %d (%s)" % (code, name), "amqp:unauthorized-access")
            return
        self.state = AMQP_WAIT
        open_fields = [self.container, self.hostname, Uint(self.max_frame), Ushort(0)]
        if self.idle_ms:
            open_fields.append(Uint(self.idle_ms))
        self._send(AMQP_HEADER + frame(0, spec.OPEN, open_fields))

    def _open(self, f):
        self.send_max = min(self.max_frame, max(512, field(f, 2, Uint(MASK)).value))
        self.peer_idle_ms = field(f, 4, Uint(0)).value
        self.state = BEGINNING
        # remote-channel (none: we begin), next-outgoing-id, incoming-window, outgoing-window
        self._send(frame(0, spec.BEGIN, [None, Uint(0), Uint(WINDOW), Uint(WINDOW)]))

    def _begin(self, f):
        self.next_incoming_id = field(f, 1, Uint(0)).value
        self.remote_window = field(f, 2, Uint(0)).value
        self.state = ATTACHING
        if self.cbs is None:
            self._attach_link(self.link, self.address)
        else:  # the $cbs pair: put-token requests go out on one, the replies come back on the other
            self.links[0] = _Link(0, self.container + "-cbs-sender", True)
            self.links[1] = _Link(1, self.container + "-cbs-receiver", False)
            self._attach_link(self.links[0], "$cbs")
            self._attach_link(self.links[1], "$cbs")

    def _attach_link(self, link, address):
        """attach: a sending link to address (its target), or a receiving one from it (its
        source); unsettled transfers are settled by the receiver first (rcv-settle-mode first)."""
        self.links[link.handle] = link
        if link.sender:
            source = Described(Ulong(spec.SOURCE), [link.name])
            target = Described(Ulong(spec.TARGET), [address] if address is not None else [])
            mode = Ubyte(1) if link is self.link and self.settled else Ubyte(0)
        else:
            source = Described(Ulong(spec.SOURCE), [address])
            target = Described(Ulong(spec.TARGET), ["cbs"])
            mode = Ubyte(0)
        fields = [link.name, Uint(link.handle), not link.sender, mode, Ubyte(0), source, target]
        if link.sender:
            fields += [None, None, Uint(0)]  # (unsettled, incomplete-unsettled,) initial-delivery-count
        self._send(frame(0, spec.ATTACH, fields))

    def _attach(self, f):
        name = field(f, 0)
        link = None
        for mine in self.links.values():
            if mine.name == name:
                link = mine
        if link is None:
            raise DecodeError("an attach for a link we did not ask for ('%s')" % name)
        self.peer_links[field(f, 1).value] = link
        terminus = field(f, 6 if link.sender else 5)
        if terminus is None:
            return  # refused: the detach that follows says why
        link.attached = True
        if not link.sender:  # the $cbs replies: credit for them
            self._send(
                frame(0, spec.FLOW, [Uint(self.next_incoming_id), Uint(WINDOW), Uint(self.next_transfer_id),
                                     Uint(WINDOW), Uint(link.handle), Uint(link.delivery_count), Uint(CBS_CREDIT)])
            )  # fmt: skip
            link.credit = CBS_CREDIT
        if link is self.link:
            self.state = RUNNING
            self.channel_open = True
        else:
            self._send_token()

    # -- running --------------------------------------------------------------------------

    def _flow(self, f):
        """The peer's session window, and the credit of one of our sending links."""
        next_incoming = field(f, 0)
        start = next_incoming.value if next_incoming is not None else 0
        self.remote_window = (start + field(f, 1, Uint(0)).value - self.next_transfer_id) & MASK
        if self.remote_window > WINDOW:  # (negative: a flow that crossed our transfers)
            self.remote_window = 0
        handle = field(f, 4)
        link = self.peer_links.get(handle.value) if handle is not None else None
        if link is not None and link.sender:
            # the credit counts from the delivery count the peer has seen (2.6.7)
            count = field(f, 5, Uint(link.delivery_count)).value
            link.credit = (count + field(f, 6, Uint(0)).value - link.delivery_count) & MASK
            if link.credit > WINDOW:
                link.credit = 0
            if field(f, 8, False) and link.credit:  # drain: the credit we do not use now is given back
                link.delivery_count = (link.delivery_count + link.credit) & MASK
                link.credit = 0
                self._flow_out(link, True)
                return
        if field(f, 9, False):  # echo: our state, asked for
            self._flow_out(link, False)
        if self._token_due:
            self._send_token()

    def _flow_out(self, link, drain):
        fields = [Uint(self.next_incoming_id), Uint(WINDOW), Uint(self.next_transfer_id), Uint(WINDOW)]
        if link is not None:
            fields += [Uint(link.handle), Uint(link.delivery_count), Uint(link.credit), None, drain]
        self._send(frame(0, spec.FLOW, fields))

    def _disposition(self, f):
        """The peer settles what we sent (role receiver): accepted is a confirm, any other
        outcome a refusal that the bridge sends again."""
        if field(f, 0) is not True:
            return  # (about the $cbs replies we received: we settle those ourselves)
        first = field(f, 1).value
        last = field(f, 2, Uint(first)).value
        state = field(f, 4)
        code = state.descriptor.value if type(state) is Described else None
        if code == spec.RECEIVED:
            return  # (not an outcome: where a resumed transfer stands)
        if not field(f, 3, False):  # the receiver wants us to settle (as rcv-settle-mode second asks)
            self._send(frame(0, spec.DISPOSITION, [False, Uint(first), Uint(last), True, state]))
        settled = self._settled(first, last)
        if not settled:
            return
        if code == spec.ACCEPTED:
            in_flight = self.in_flight
            if in_flight[: len(settled)] == settled:  # the oldest ones: one event for them all
                del in_flight[: len(settled)]
                self._events.append((ACCEPTED, settled[-1], True))
                return
            for seq in settled:
                in_flight.remove(seq)
                self._events.append((ACCEPTED, seq, False))
            return
        why = OUTCOMES.get(code or 0, "settled without an outcome")
        if code == spec.REJECTED and state.value:
            why += " (%s)" % _error_text(state.value[0])
        elif code == spec.MODIFIED and len(state.value) > 1 and state.value[1] is True:
            why += " (undeliverable here)"
        said = REJECTED if code == spec.REJECTED else RELEASED
        for seq in settled:
            self.in_flight.remove(seq)
            self._events.append((said, seq, False, why))

    def _settled(self, first, last):
        """The seqs of our messages with delivery ids first to last, in order, forgotten (a
        put-token's id among them is only forgotten)."""
        ids = self._ids
        count = ((last - first) & MASK) + 1
        if count <= len(ids):
            wanted = [(first + i) & MASK for i in range(count)]
        else:
            wanted = [i for i in ids if (i - first) & MASK < count]
            wanted.sort(key=lambda i: (i - first) & MASK)
        out = []
        for delivery_id in wanted:
            seq = ids.pop(delivery_id, None)
            if seq:
                out.append(seq)
        return out

    def _transfer_in(self, f):
        """A message on our receiving link: a reply of $cbs."""
        self.next_incoming_id = (self.next_incoming_id + 1) & MASK
        link = self.peer_links.get(field(f, 0, Uint(0)).value)
        if link is None or link.sender:
            raise DecodeError("a transfer on a link that does not send to us")
        if link.partial is None:
            link.partial = [field(f, 1, Uint(0)).value, field(f, 4, False), []]
        link.partial[2].append(f.payload)
        if field(f, 5, False):
            return
        delivery_id, settled, parts = link.partial
        link.partial = None
        link.delivery_count = (link.delivery_count + 1) & MASK
        link.credit -= 1
        if not settled:
            self._send(frame(0, spec.DISPOSITION, [True, Uint(delivery_id), None, True, ACCEPTED_OUTCOME]))
        if link.credit <= CBS_CREDIT // 2:
            link.credit = CBS_CREDIT
            self._flow_out(link, False)
        from .sections import Sections  # ($cbs only: a put-token's reply)

        self._token_reply(Sections(b"".join(parts)))

    def _token_reply(self, found):
        """put-token's answer: status-code 200 or 202 (then the sending link is attached, the
        first time), else the connection is of no use (the token was refused)."""
        application = found.application or {}
        status = application.get("status-code")
        status = status.value if hasattr(status, "value") else status
        if status not in (200, 202):
            text = application.get("status-description") or ""
            self._end("upstream refused the token on $cbs: status %s %s" % (status, text), "amqp:unauthorized-access")
            return
        if self.state == ATTACHING and self.link.handle not in self.links:
            self._attach_link(self.link, self.address)
