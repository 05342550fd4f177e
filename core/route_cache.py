"""A topic exchange that remembers each routing key's queues, for a broker on CPython
(server/startup.py hands `routers()` to the broker before it makes an exchange; a board keeps
the plain walk of core/exchange.py's trie: its heap is worth more than the walk, and this module
is not in its bundle).

Sensors publish to a few topics each, again and again: a look-up costs less than a walk of the
trie, a third of an MQTT publish's routing. What a routing key found is forgotten with any
change of the exchange's bindings, and all of it when KEPT keys are remembered.
"""

from . import exchange

KEPT = 4096


class RememberingTopicRouter(exchange.TopicRouter):
    def __init__(self):
        exchange.TopicRouter.__init__(self)
        self.cache = {}  # routing key -> its destinations, as the walk found them

    def add(self, binding):
        self.cache = {}
        exchange.TopicRouter.add(self, binding)

    def remove(self, binding):
        self.cache = {}
        exchange.TopicRouter.remove(self, binding)

    def match(self, message, out):
        key = message.routing_key
        found = self.cache.get(key)
        if found is None:
            found = []
            exchange.TopicRouter.match(self, message, found)
            if len(self.cache) >= KEPT:
                self.cache.clear()
            self.cache[key] = found
        out.extend(found)


def routers():
    """Each exchange type's router class, the topic exchanges' remembering their routes: for
    Broker.routers."""
    out = dict(exchange.ROUTERS)
    out[b"topic"] = RememberingTopicRouter
    return out
