"""Exchanges and their routing: direct, fanout, topic (a word trie) and headers.

A binding joins a source exchange to a destination, which is a queue or (the
exchange.bind extension) another exchange. Each exchange type keeps its
bindings in the structure that makes routing cheap: a dict for direct (O(1)
per message), a counted set for fanout, a trie of words for topic (no scan of
every binding), and a list for headers, which must look at every binding.
"""

from ..codec.errors import PRECONDITION_FAILED, Refused


def freeze(value):
    """A hashable, order-independent form of a field-table value."""
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(value[k])) for k in value))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


class Binding:
    def __init__(self, source, destination, key, arguments):
        self.source = source
        self.destination = destination
        self.key = key
        self.arguments = arguments
        self.identity = (destination, key, freeze(arguments))


class CountedSet:
    """Destinations with a count of the bindings that lead to each."""

    def __init__(self):
        self.counts = {}

    def add(self, destination):
        self.counts[destination] = self.counts.get(destination, 0) + 1

    def remove(self, destination):
        left = self.counts[destination] - 1
        if left:
            self.counts[destination] = left
        else:
            del self.counts[destination]
        return not self.counts


class DirectRouter:
    def __init__(self):
        self.table = {}

    def add(self, binding):
        dests = self.table.get(binding.key)
        if dests is None:
            dests = self.table[binding.key] = CountedSet()
        dests.add(binding.destination)

    def remove(self, binding):
        if self.table[binding.key].remove(binding.destination):
            del self.table[binding.key]

    def match(self, message, out):
        dests = self.table.get(message.routing_key)
        if dests is not None:
            out.extend(dests.counts)


class FanoutRouter:
    def __init__(self):
        self.dests = CountedSet()

    def add(self, binding):
        self.dests.add(binding.destination)

    def remove(self, binding):
        self.dests.remove(binding.destination)

    def match(self, message, out):
        out.extend(self.dests.counts)


def topic_words(key):
    # An empty key has no words, so "#" matches it and "*" does not (as RabbitMQ).
    return key.split(b".") if key else []


class TopicNode:
    def __init__(self):
        self.children = {}
        self.dests = None  # CountedSet of bindings whose pattern ends here, made on first use

    def add(self, destination):
        if self.dests is None:
            self.dests = CountedSet()
        self.dests.add(destination)

    def remove(self, destination):
        if self.dests is not None and self.dests.remove(destination):
            self.dests = None  # no binding ends here any more


class TopicRouter:
    def __init__(self):
        self.root = TopicNode()

    def add(self, binding):
        node = self.root
        for word in topic_words(binding.key):
            child = node.children.get(word)
            if child is None:
                child = node.children[word] = TopicNode()
            node = child
        node.add(binding.destination)

    def remove(self, binding):
        path = [self.root]
        words = topic_words(binding.key)
        for word in words:
            path.append(path[-1].children[word])
        path[-1].remove(binding.destination)
        # prune nodes that lead nowhere, so a board's heap does not fill with dead words
        for i in range(len(words) - 1, -1, -1):
            child = path[i + 1]
            if child.dests is None and not child.children:
                del path[i].children[words[i]]
            else:
                break

    def match(self, message, out):
        self._walk(self.root, topic_words(message.routing_key), 0, out)

    def _walk(self, node, words, i, out):
        hash_node = node.children.get(b"#")
        if hash_node is not None:
            # "#" takes zero or more words
            for j in range(i, len(words) + 1):
                self._walk(hash_node, words, j, out)
        if i == len(words):
            if node.dests is not None:
                out.extend(node.dests.counts)
            return
        child = node.children.get(words[i])
        if child is not None:
            self._walk(child, words, i + 1, out)
        star = node.children.get(b"*")
        if star is not None:
            self._walk(star, words, i + 1, out)


X_MATCH_MODES = (b"all", b"any", b"all-with-x", b"any-with-x")


def headers_mode(arguments):
    mode = arguments.get("x-match", b"all")
    if isinstance(mode, str):
        mode = mode.encode()
    if mode not in X_MATCH_MODES:
        raise Refused(
            PRECONDITION_FAILED,
            "invalid x-match field value %r; expected one of all, any, all-with-x, any-with-x" % (mode,),
        )
    return mode


def headers_match(mode, arguments, headers):
    want_all = mode[:3] == b"all"
    with_x = mode.endswith(b"-with-x")
    for key in arguments:
        if key == "x-match" or (not with_x and key[:2] == "x-"):
            continue
        if arguments[key] is None:  # a void value matches on presence alone
            ok = key in headers
        else:
            ok = key in headers and headers[key] == arguments[key]
        if want_all and not ok:
            return False
        if ok and not want_all:
            return True
    return want_all


class HeadersRouter:
    def __init__(self):
        self.bindings = []

    def add(self, binding):
        binding.mode = headers_mode(binding.arguments)
        self.bindings.append(binding)

    def remove(self, binding):
        self.bindings.remove(binding)

    def match(self, message, out):
        if not self.bindings:
            return
        headers = message.properties().get("headers") or {}
        for binding in self.bindings:
            if headers_match(binding.mode, binding.arguments, headers):
                out.append(binding.destination)


ROUTERS = {
    b"direct": DirectRouter,
    b"fanout": FanoutRouter,
    b"topic": TopicRouter,
    b"headers": HeadersRouter,
}


class Exchange:
    is_queue = False

    def __init__(self, name, kind, durable=True, auto_delete=False, internal=False, arguments=None, routers=ROUTERS):
        """routers: each type's router class (the broker's: Broker.routers)."""
        self.name = name
        self.kind = kind
        self.durable = durable
        self.auto_delete = auto_delete
        self.internal = internal
        self.arguments = arguments or {}
        self.router = routers[kind]()
        self.bindings = {}  # identity -> Binding, where this exchange is the source
        self.inbound = []  # Bindings where this exchange is the destination
        self.routes_to_exchanges = 0
        # where unroutable messages go (the alternate-exchange argument), as a name
        alternate = self.arguments.get("alternate-exchange")
        self.alternate = alternate.encode() if isinstance(alternate, str) else alternate

    def bind(self, destination, key, arguments):
        """Add a binding; returns it, or None when an equal one exists (a no-op)."""
        binding = Binding(self, destination, key, arguments)
        if binding.identity in self.bindings:
            return None
        self.router.add(binding)  # validates headers arguments before anything changes
        self.bindings[binding.identity] = binding
        destination.inbound.append(binding)
        if not destination.is_queue:
            self.routes_to_exchanges += 1
        return binding

    def find(self, destination, key, arguments):
        return self.bindings.get((destination, key, freeze(arguments)))

    def unbind(self, binding):
        del self.bindings[binding.identity]
        self.router.remove(binding)
        binding.destination.inbound.remove(binding)
        if not binding.destination.is_queue:
            self.routes_to_exchanges -= 1

    def route(self, message, out, visited=None):
        """Append every destination queue for message to out (may repeat)."""
        if not self.routes_to_exchanges:
            self.router.match(message, out)
            return
        found = []
        self.router.match(message, found)
        for dest in found:
            if dest.is_queue:
                out.append(dest)
            else:
                if visited is None:
                    visited = [self]
                if dest not in visited:  # exchange-to-exchange cycles are legal; route each once
                    visited.append(dest)
                    dest.route(message, out, visited)
