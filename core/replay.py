"""Replaying the journal at start (core/journal.py writes it): the records of every segment,
in order, into plain data; then the broker's exchanges, queues, bindings and queued
messages, built in one go. A queue's messages come back in publish order; those that had
been delivered come back redelivered.

Only needed while the broker starts: a board drops this module afterwards (ports/recovery.py),
so its heap does not keep it. Sans-IO and MicroPython-clean.
"""

import struct

from . import spec, topology
from .errors import ChannelException
from .exchange import freeze
from .journal import (
    BINDING,
    DELIVERED,
    EXCHANGE,
    EXCHANGE_GONE,
    MESSAGE,
    QUEUE,
    QUEUE_GONE,
    REMOVED,
    SEGMENTS_GONE,
    SNAPSHOT,
    SNAPSHOT_END,
    UNBINDING,
)
from .message import FLAG_EXPIRATION, Message
from .wire import decode_table, text

# A message read back, as queued in one queue: a list (a million may come back, so no
# object each) read at these indices.
AT_SEGMENT = 0
AT_EXCHANGE = 1
AT_ROUTING_KEY = 2
AT_ROUTE = 3
AT_HEADER_TAIL = 4
AT_BODY_TAIL = 5
AT_REDELIVERED = 6


class RecoveredQueue:
    def __init__(self, auto_delete, arguments):
        self.auto_delete = auto_delete
        self.arguments = arguments
        self.messages = {}  # journal id -> the message as a list (AT_... above)


class Replay:
    """A journal read back: the segments' records, in order, into plain data; then apply()."""

    def __init__(self):
        self.exchanges = {}  # name -> (kind, auto_delete, internal, arguments)
        self.queues = {}  # name -> RecoveredQueue
        self.bindings = {}  # (source, to_queue, destination, key, frozen arguments) -> arguments
        self.refers = {}  # segment -> [older segments its records name]
        self.next_id = 1
        self.expected = []  # segments that should be on disk, by the last snapshot and since
        self.snapshot = None  # names seen since a SNAPSHOT record, until its SNAPSHOT_END
        self.skipped = 0  # records that could not be decoded (reported, never fatal)

    def segment(self, number, records):
        self.snapshot = None  # a snapshot cut short by the end of its segment resets nothing
        if number not in self.expected:
            self.expected.append(number)
        for kind, payload in records:
            try:
                self.record(number, kind, payload)
            except Exception:
                # A record that passed its CRC but does not decode: a bug or a newer format.
                # Skip it rather than refuse to boot.
                self.skipped += 1

    def record(self, segment, kind, p):
        if kind == MESSAGE:
            self._message(segment, p)
        elif kind == REMOVED or kind == DELIVERED:
            n = p[0]
            queue = self.queues.get(bytes(p[1 : 1 + n]))
            refers = self.refers.get(segment)
            if refers is None:
                refers = self.refers[segment] = []
            for pos in range(1 + n, len(p), 8):
                journal_id = struct.unpack_from(">Q", p, pos)[0]
                message = queue.messages.get(journal_id) if queue is not None else None
                if message is None:
                    continue
                written_in = message[AT_SEGMENT]
                if written_in != segment and written_in not in refers:
                    refers.append(written_in)
                if kind == REMOVED:
                    del queue.messages[journal_id]
                else:
                    message[AT_REDELIVERED] = True
        elif kind == SNAPSHOT:
            self.next_id = max(self.next_id, struct.unpack_from(">Q", p, 0)[0])
            self.expected = [segment]
            for pos in range(8, len(p), 4):
                self.expected.append(struct.unpack_from(">I", p, pos)[0])
            self.snapshot = ([], [], [])
        elif kind == SEGMENTS_GONE:
            for pos in range(0, len(p), 4):
                gone = struct.unpack_from(">I", p, pos)[0]
                if gone in self.expected:
                    self.expected.remove(gone)
        elif kind == SNAPSHOT_END:
            if self.snapshot is not None:
                self._keep_only(*self.snapshot)
            self.snapshot = None
        elif kind == EXCHANGE:
            name, pos = _shortstr(p, 0)
            kind_name, pos = _shortstr(p, pos)
            flags = p[pos]
            arguments = decode_table(p, pos + 1, len(p))[0]
            self.exchanges[name] = (kind_name, bool(flags & 1), bool(flags & 2), arguments)
            if self.snapshot is not None:
                self.snapshot[0].append(name)
        elif kind == EXCHANGE_GONE:
            name = _shortstr(p, 0)[0]
            self.exchanges.pop(name, None)
            self._drop_bindings(name, False)
        elif kind == QUEUE:
            name, pos = _shortstr(p, 0)
            flags = p[pos]
            arguments = decode_table(p, pos + 1, len(p))[0]
            queue = self.queues.get(name)
            if queue is None:
                self.queues[name] = RecoveredQueue(bool(flags & 1), arguments)
            else:  # a later snapshot names it again: its messages stay
                queue.auto_delete = bool(flags & 1)
                queue.arguments = arguments
            if self.snapshot is not None:
                self.snapshot[1].append(name)
        elif kind == QUEUE_GONE:
            name = _shortstr(p, 0)[0]
            self.queues.pop(name, None)
            self._drop_bindings(name, True)
        elif kind == BINDING or kind == UNBINDING:
            source, pos = _shortstr(p, 0)
            to_queue = p[pos] == 1
            destination, pos = _shortstr(p, pos + 1)
            key, pos = _shortstr(p, pos)
            arguments = decode_table(p, pos, len(p))[0]
            identity = (source, to_queue, destination, key, freeze(arguments))
            if kind == BINDING:
                self.bindings[identity] = arguments
                if self.snapshot is not None:
                    self.snapshot[2].append(identity)
            else:
                self.bindings.pop(identity, None)
        # unknown kinds: written by a newer hutch; nothing to do with them here

    def _message(self, segment, p):
        journal_id = struct.unpack_from(">Q", p, 0)[0]
        redelivered = bool(p[8] & 1)
        pos = 9
        n = p[pos]
        exchange = bytes(p[pos + 1 : pos + 1 + n])
        k = pos + 1 + n
        m = p[k]
        routing_key = bytes(p[k + 1 : k + 1 + m])
        route = bytes(p[pos : k + 1 + m])
        pos = k + 1 + m
        count = (p[pos] << 8) | p[pos + 1]
        pos += 2
        names = []
        for _ in range(count):
            name, pos = _shortstr(p, pos)
            names.append(name)
        size = struct.unpack_from(">I", p, pos)[0]
        pos += 4
        header_tail = bytes(p[pos : pos + size])
        body_tail = bytes(p[pos + size :]) or None
        for name in names:
            queue = self.queues.get(name)
            if queue is not None:
                queue.messages[journal_id] = [
                    segment,
                    exchange,
                    routing_key,
                    route,
                    header_tail,
                    body_tail,
                    redelivered,
                ]
        if journal_id >= self.next_id:
            self.next_id = journal_id + 1

    def _keep_only(self, exchanges, queues, bindings):
        """A complete snapshot lists every durable definition of its moment: drop the rest."""
        for name in list(self.exchanges):
            if name not in exchanges:
                del self.exchanges[name]
        for name in list(self.queues):
            if name not in queues:
                del self.queues[name]
        for identity in list(self.bindings):
            if identity not in bindings:
                del self.bindings[identity]

    def _drop_bindings(self, name, to_queue):
        for identity in list(self.bindings):
            source, binds_queue, destination = identity[:3]
            if source == name and not to_queue or (destination == name and binds_queue == to_queue):
                del self.bindings[identity]

    def message_count(self):
        count = 0
        for name in self.queues:
            count += len(self.queues[name].messages)
        return count

    # ------------------------------------------------------------ into the broker

    def apply(self, broker, journal, log):
        """Build the definitions and queued messages in broker; give journal the bookkeeping
        (live messages per segment, what refers to what, the next id). The journal is attached
        afterwards, so nothing here is written again."""
        for name in self.exchanges:
            kind, auto_delete, internal, arguments = self.exchanges[name]
            args = (broker, name, kind, False, True, auto_delete, internal, arguments)
            _quietly(log, "exchange", name, topology.declare_exchange, *args)
        for name in self.queues:
            recovered = self.queues[name]
            args = (broker, None, name, False, True, False, recovered.auto_delete, recovered.arguments)
            _quietly(log, "queue", name, topology.declare_queue, *args)
        for identity in self.bindings:
            source, to_queue, destination_name, key = identity[:4]
            destination = broker.queues.get(destination_name) if to_queue else broker.exchange(destination_name)
            if destination is not None:
                args = (broker, source, destination, key, self.bindings[identity], spec.QUEUE_BIND)
                _quietly(log, "binding from", source, topology.bind, *args)
        made = {}  # id -> Message: one object for a message kept in several queues
        live = journal.live
        for name in self.queues:
            queue = broker.queues.get(name)
            if queue is None:
                continue
            recovered = self.queues[name].messages
            # in publish order (ids grow with it); sorted, as MicroPython's dicts keep no order
            for journal_id in sorted(recovered):
                read_back = recovered[journal_id]
                message = made.get(journal_id)
                if message is None:
                    message = made[journal_id] = _message(journal_id, read_back)
                queue.restore(message, read_back[AT_REDELIVERED])
                segment = read_back[AT_SEGMENT]
                live[segment] = live.get(segment, 0) + 1
        for segment in self.refers:
            journal.refers[segment] = self.refers[segment]
        journal.next_id = max(journal.next_id, self.next_id)


def _message(journal_id, read_back):
    segment, exchange, routing_key, route, header_tail, body_tail = read_back[:AT_REDELIVERED]
    body_size = len(body_tail) - 5 if body_tail is not None else 0
    message = Message(exchange, routing_key, route, header_tail, body_tail, body_size)
    message.journal_id = journal_id
    message.segment = segment
    if message.flags() & FLAG_EXPIRATION:
        expiration = message.properties().get("expiration")
        if expiration and expiration.isdigit():
            message.ttl = int(expiration)
    return message


def _shortstr(p, pos):
    n = p[pos]
    return bytes(p[pos + 1 : pos + 1 + n]), pos + 1 + n


def _quietly(log, what, name, operation, *args):
    """Recreate one definition; one that the broker now refuses (a limit lowered since) is
    reported and left out, never a reason not to boot."""
    try:
        operation(*args)
    except ChannelException as e:
        log("error", "journal: %s '%s' not restored: %s" % (what, text(name), e.text))
