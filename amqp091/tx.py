"""Transactions (the tx class): publishes and acks held back until tx.commit.

A transactional channel keeps its publishes and its settlements (ack, nack, reject) in
a Transaction; tx.commit applies them in order, and tx.commit-ok waits until the journal
has made durable what the commit wrote (amqp091/confirms.py holds it); tx.rollback drops
them. Each handler takes (channel, decoded argument list) and writes its reply.
"""

from ..codec import spec
from ..codec.errors import PRECONDITION_FAILED, Refused
from .confirms import Confirms


class Transaction:
    def __init__(self):
        self.publishes = []  # (message, mandatory)
        self.settles = []  # (tags, ack, requeue)
        self.pending = {}  # tag -> True: settled inside this transaction, not yet committed

    def stash(self, tags, ack, requeue):
        """A settlement made inside the transaction: applied at commit."""
        for t in tags:
            self.pending[t] = True
        self.settles.append((tags, ack, requeue))


def tx_select(ch, args):
    if ch.confirming:
        raise Refused(PRECONDITION_FAILED, "cannot switch from confirm to tx mode", spec.TX_SELECT)
    if ch.tx is None:
        ch.tx = Transaction()
    ch.reply(spec.TX_SELECT_OK)


def _take(ch, method_id):
    """The channel's transaction, replaced by a new one (a transaction ends at commit or rollback)."""
    if ch.tx is None:
        raise Refused(PRECONDITION_FAILED, "channel is not transactional", method_id)
    tx = ch.tx
    ch.tx = Transaction()
    return tx


def tx_commit(ch, args):
    tx = _take(ch, spec.TX_COMMIT)
    for message, mandatory in tx.publishes:
        ch.publish_now(ch.broker.exchange_for_publish(message.exchange), message, mandatory)
    for tags, ack, requeue in tx.settles:
        ch.apply(tags, ack, requeue)
    if ch.confirms is None:
        ch.confirms = Confirms(ch)
    ch.confirms.committed()


def tx_rollback(ch, args):
    _take(ch, spec.TX_ROLLBACK)
    ch.reply(spec.TX_ROLLBACK_OK)


# The tx class's methods (amqp091/channel.py looks here the first time a client sends one).
HANDLERS = {
    spec.TX_SELECT: tx_select,
    spec.TX_COMMIT: tx_commit,
    spec.TX_ROLLBACK: tx_rollback,
}
