"""Publisher confirms (the confirm class), and what a channel owes its publisher.

In confirm mode every publish gets a basic.ack, or a basic.nack when a queue refused it,
in publish order and coalesced with `multiple`; a tx.commit gets its tx.commit-ok. Either
is held until the journal has made durable what it promises (a persistent message in a
durable queue, what the commit wrote): the storage port says so through
Broker.journal_synced, which calls flush() again.
"""

import struct

from ..codec import spec
from ..codec.errors import PRECONDITION_FAILED, Refused
from ..core import counters
from ..core.broker import JOURNALLED, REFUSED


class Confirms:
    def __init__(self, channel):
        self.channel = channel
        self.seq = 0  # publishes so far in confirm mode
        self.ready = 0  # every publish up to this one can be acked
        self.sent = 0  # ... and up to this one has been confirmed
        self.waits = []  # (publish seq, journal seq it needs, refused), in publish order
        self.commits = []  # the journal seq each waiting tx.commit-ok needs

    def published(self, result, count=1):
        """A publish in confirm mode, with what Broker.publish said of it (or count of them
        alike, none refused: a run into a stream, amqp091/batch.py)."""
        channel = self.channel
        self.seq = seq = self.seq + count
        journalled = result & JOURNALLED
        if journalled or self.waits:
            # confirmed once the journal has it on disk (and after those before it)
            self.waits.append((seq, channel.broker.journal.seq if journalled else 0, result & REFUSED))
            channel.conn.confirm_pending(channel)
        elif result & REFUSED:
            self.flush()
            self.send(spec.BASIC_NACK, seq, False)
            self.sent = seq
        else:
            self.ready = seq
            channel.conn.confirm_pending(channel)

    def committed(self):
        """tx.commit applied its publishes and acks: commit-ok once what it wrote is on disk."""
        channel = self.channel
        journal = channel.broker.journal
        if journal is not None and (journal.unsynced() or self.commits):
            self.commits.append(journal.seq)
            channel.conn.confirm_pending(channel)
            return
        channel.reply(spec.TX_COMMIT_OK)

    def flush(self):
        """Send the confirms that are due; True if some still wait for the journal."""
        if not self.waits and not self.commits:
            self._send_acks()
            return False
        channel = self.channel
        synced = channel.broker.journal.synced
        waits = self.waits
        done = 0
        for seq, needed, refused in waits:
            if needed > synced:
                break
            done += 1
            if refused:
                self._send_acks()
                self.send(spec.BASIC_NACK, seq, False)
                self.sent = seq
            else:
                self.ready = seq
        if done:
            del waits[:done]
        self._send_acks()
        commits = self.commits
        while commits and commits[0] <= synced:
            commits.pop(0)
            channel.reply(spec.TX_COMMIT_OK)
        return bool(waits or commits)

    def send(self, method_id, tag, multiple):
        """basic.ack (or basic.nack, not requeued) of the publishes up to tag, packed at once: a
        sensor with confirms is sent one for most publishes, and the codec's encoder looks the
        method's signature up each time (codec/wire.py method_frame makes the same bytes)."""
        channel = self.channel
        conn = channel.conn
        conn.out.append(struct.pack(">BHIIQBB", 1, channel.number, 13, method_id, tag, 1 if multiple else 0, 0xCE))
        conn.output_added(13)

    def _send_acks(self):
        if self.ready > self.sent:
            multiple = self.ready - self.sent > 1
            channel = self.channel
            channel.broker.stats[counters.CONFIRMED] += self.ready - self.sent
            self.send(spec.BASIC_ACK, self.ready, multiple)
            self.sent = self.ready


def confirm_select(ch, args):
    if ch.tx is not None:
        raise Refused(PRECONDITION_FAILED, "cannot switch from tx to confirm mode", spec.CONFIRM_SELECT)
    ch.confirming = True
    if ch.confirms is None:
        ch.confirms = Confirms(ch)
    if not args[0]:
        ch.reply(spec.CONFIRM_SELECT_OK)
