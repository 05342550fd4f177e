"""hutch.client.robust: the simple client plus recovery, as micropython-lib's umqtt.robust.

What hutch.client.Client is. On top of client/simple.py it records what it declared (queues,
exchanges, bindings), confirm mode, qos and consumers, and keeps every message not acked:

Confirms: messages not acked - nacked, or in flight when the channel or connection was
lost - wait in `c.unconfirmed` as (exchange, routing_key, body, properties, mandatory)
until republish() sends them again (so does reconnect(republish=True)) or the caller
clears the list. So do mandatory messages that came back (Returned: no queue took them).

reconnect(republish=False): after an OSError or AMQPError, connect again - or only reopen
the channel after a channel error, or nothing when both are still open (after Returned) -
and restore the queues, exchanges and bindings this client declared, confirm mode, qos and
consumers. declare_queue, declare_exchange and bind take record=True (record=False: not
restored).
"""

from ..codec import spec
from .simple import Client as Simple


class Client(Simple):
    @property
    def unconfirmed(self):
        return self.protocol.unconfirmed

    @unconfirmed.setter
    def unconfirmed(self, value):
        self.protocol.unconfirmed = value

    def reconnect(self, republish=False):
        """Connect again - or only reopen the channel after a channel error - and restore the
        declarations, confirm mode and consumers. Messages in flight move to `unconfirmed`;
        republish=True sends them again. Raises like connect() if that fails; what to restore
        is kept for the next attempt."""
        p = self.protocol
        if p.state == "open" and p.channel_open:  # nothing was lost (a Returned message, say)
            if republish:
                self.republish()
            return
        saved = topology, consumers, confirming = self._topology, self._consumers, self._confirming
        p.channel_lost()
        try:
            renamed = {}
            if p.state == "open":  # the connection is fine: only the channel is lost
                self._call(spec.CHANNEL_OPEN, ("",))
                self._consumers = {}
            else:
                self.close()
                self.connect()
                for d in topology:
                    if d[0] == "q":
                        name = self.declare_queue(*d[2:], record=False)[0]
                        if name != d[1]:  # server-named: it has a new name now
                            renamed[d[1]] = d[1] = name
                    elif d[0] == "x":
                        self.declare_exchange(*d[1:], record=False)
                    else:
                        d[1] = renamed.get(d[1], d[1])
                        self.bind(*d[1:], record=False)
            self._topology = topology
            if confirming:
                self.confirm()
            for c in consumers.values():
                c[0] = renamed.get(c[0], c[0])
                self.consume(*c)
        except Exception:
            self._topology, self._consumers, self._confirming = saved
            raise
        if republish:
            self.republish()

    def _record(self, d):
        if d not in self._topology:
            self._topology.append(d)

    def delete_queue(self, name):
        """queue.delete: the number of messages deleted with it."""
        n = super().delete_queue(name)
        self._topology = [d for d in self._topology if d[0] == "x" or d[1] != name]
        return n

    def _keep(self, exchange, routing_key, body, properties, mandatory):
        """The message itself, for `unconfirmed` and republish()."""
        if self.protocol.confirming:
            return (exchange, routing_key, body, properties, mandatory)
        return None

    def _returned(self, message):
        """A mandatory message came back: kept in `unconfirmed`, for republish() once a queue
        takes it (its confirm, which follows, settles nothing more)."""
        self.unconfirmed.append((message.exchange, message.routing_key, message.body, message.properties, True))

    def republish(self):
        """Publish the messages in `unconfirmed` again (with new sequence numbers)."""
        todo = self.unconfirmed
        self.unconfirmed = []
        for i in range(len(todo)):
            try:
                self.publish(*todo[i])
            except Exception:
                self.unconfirmed += todo[i:]
                raise
