"""A growable FIFO with push-to-front, the same on MicroPython and CPython.

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

    def push_front(self, items):
        """Put items (in their order) before everything else."""
        items = list(items)
        self._head = items + self._head[self._pos :]
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
