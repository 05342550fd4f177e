"""A growable FIFO that takes items back to their places, the same on MicroPython and CPython.

MicroPython's collections.deque preallocates its maximum length, which a
queue of unknown size cannot afford on a board; two plain lists grow only
as needed: items are pushed onto `_tail` and taken from `_head` by index.
`length` is kept as items come and go: queues ask for it on every publish and
delivery, and reading an attribute costs far less than a call to __len__.
"""


class Fifo:
    def __init__(self):
        self._head = []
        self._pos = 0
        self._tail = []
        self.length = 0

    def __len__(self):
        return self.length

    def push(self, item):
        self._tail.append(item)
        self.length += 1

    def put_back(self, items, key):
        """Put items back where key (a number for each item) places them: the items here are
        in key order already (pushed in that order), and each of items goes before the first
        that has a greater key. A queue takes back its unacknowledged messages so, each at its
        first place (RabbitMQ's requeue order); only the items ahead of the last of them are
        looked at."""
        if not items:
            return
        items = sorted(items, key=key)
        last = key(items[-1])
        head, pos, tail = self._head, self._pos, self._tail
        i = pos
        n = len(head)
        while i < n and key(head[i]) < last:
            i += 1
        if i < n:
            ahead, behind = head[pos:i], head[i:]
        else:  # all of the head comes first: the tail's first items may too
            j = 0
            while j < len(tail) and key(tail[j]) < last:
                j += 1
            ahead, behind = head[pos:] + tail[:j], tail[j:]
            self._tail = []
        merged = []
        k = 0
        for item in items:
            mine = key(item)
            while k < len(ahead) and key(ahead[k]) < mine:
                merged.append(ahead[k])
                k += 1
            merged.append(item)
        self._head = merged + ahead[k:] + behind
        self._pos = 0
        self.length += len(items)

    def _refill(self):
        if self._pos >= len(self._head):
            self._head = self._tail
            self._tail = []
            self._pos = 0
        return self._pos < len(self._head)

    def peek(self):
        if self._pos >= len(self._head) and not self._refill():
            return None
        return self._head[self._pos]

    def pop(self):
        if self._pos >= len(self._head) and not self._refill():
            return None
        item = self._head[self._pos]
        self._head[self._pos] = None  # let the message go as soon as it is delivered
        self._pos += 1
        self.length -= 1
        return item

    def clear(self):
        items = self._head[self._pos :] + self._tail
        self._head = []
        self._pos = 0
        self._tail = []
        self.length = 0
        return items

    def __iter__(self):
        for i in range(self._pos, len(self._head)):
            yield self._head[i]
        for item in self._tail:
            yield item
