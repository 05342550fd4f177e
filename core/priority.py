"""Priority queues (x-max-priority, 1..255), loaded only when one is declared: a board
without them does not hold this module, and a queue without the argument pays nothing.

As in RabbitMQ: a higher priority is delivered first, publish order within a priority;
a message without a priority property is priority 0, one above the queue's maximum counts
as the maximum. An unacknowledged message requeued goes back to its place in its
priority. The queue's ready messages are Lanes: a Fifo per priority in use, behind the
interface of the one Fifo a plain queue has, so delivering, expiry and requeue in
core/queue.py work unchanged.

Such a queue holds its backlog in memory (up to the board's per-queue budget, as any
queue in memory): paging runs keep only ids in publish order, not priorities. After a
restart, the backlog the journal brings back is read back whole before the first
delivery, and until then new messages go to disk behind it, so priority order holds
across the restart.
"""

from .fifo import Fifo
from .queue import Queue
from .wire import decode_properties

NO_WINDOW = 1 << 30  # a window no backlog fills: a restart's backlog is read back at once

FLAG_PRIORITY = 0x08  # the priority property's bit in the property flags' first octet


class PriorityQueue(Queue):
    def __init__(self, broker, name, durable, owner, auto_delete, arguments):
        Queue.__init__(self, broker, name, durable, owner, auto_delete, arguments)
        self.messages = Lanes(arguments["x-max-priority"])
        self.window_messages = self.window_bytes = NO_WINDOW

    def pages(self):
        """Only behind a backlog the journal brought back, until it is read (page_in reads it
        whole): so new messages come after it, and are sorted with it by priority."""
        return self.journalled and self.paged


class Lanes:
    """A Fifo per priority: push, pop, peek, put_back, clear and iteration as core/fifo.py's,
    highest priority first."""

    def __init__(self, top):
        self.top = top
        self.lanes = {}  # priority -> Fifo, made on first use
        self.levels = []  # the priorities in lanes, highest first
        self.length = 0

    def __len__(self):
        return self.length

    def _lane(self, entry):
        priority = priority_of(entry[0], self.top)
        lane = self.lanes.get(priority)
        if lane is None:
            lane = self.lanes[priority] = Fifo()
            levels = self.levels
            i = 0
            while i < len(levels) and levels[i] > priority:
                i += 1
            levels.insert(i, priority)
        return lane

    def push(self, entry):
        self._lane(entry).push(entry)
        self.length += 1

    def put_back(self, items, key):
        for item in items:  # (a requeue is a few messages: one at a time is cheap enough)
            self._lane(item).put_back([item], key)
        self.length += len(items)

    def _first(self):
        for priority in self.levels:
            lane = self.lanes[priority]
            if lane.length:
                return lane
        return None

    def peek(self):
        lane = self._first()
        return None if lane is None else lane.peek()

    def pop(self):
        lane = self._first()
        if lane is None:
            return None
        self.length -= 1
        return lane.pop()

    def clear(self):
        items = []
        for priority in self.levels:
            items += self.lanes[priority].clear()
        self.length = 0
        return items

    def __iter__(self):
        for priority in self.levels:
            for item in self.lanes[priority]:
                yield item


def priority_of(message, top):
    """A message's priority in a queue whose maximum is top: 0 without the property."""
    tail = message.header_tail  # (size(4), class, weight, body size, then the property flags)
    high = tail[16]
    if not high & FLAG_PRIORITY:
        return 0
    if not high & 0xE0:  # no content type, encoding or headers before it: read it in place
        priority = tail[19 if high & 0x10 else 18]  # (after the delivery mode, when set)
    else:
        priority = decode_properties(message.header()).get("priority", 0)  # not kept: heap
    return top if priority > top else priority
