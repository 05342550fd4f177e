"""Priority queues (x-max-priority, 1..255), loaded only when one is declared: a board
without them does not hold this module, and a queue without the argument pays nothing.

As in RabbitMQ: a higher priority is delivered first, publish order within a priority;
a message without a priority property is priority 0, one above the queue's maximum counts
as the maximum. An unacknowledged message requeued goes back to its place in its
priority. The queue's ready messages are Lanes: a Fifo per priority in use, behind the
interface of the one Fifo a plain queue has, so delivering, expiry and requeue in
core/queue.py work unchanged.

A durable one pages as any durable queue (core/store/paging.py), with runs each of one priority,
highest first: the window in memory holds the oldest of each priority it holds, and a
message is taken from memory only when no run on disk has a higher priority (else the
first run is read first, into a full window if need be). A restart brings the backlog
back as runs in publish order, priorities mixed: before its first use the queue reads them
through once (a window's worth at a time) and notes each message in the run of its
priority, holding none of them.
"""

from ..codec.wire import decode_properties
from .fifo import Fifo
from .queue import Queue
from .session import MESSAGE
from .store.paging import page_out, read_run

FLAG_PRIORITY = 0x08  # the priority property's bit in the property flags' first octet


class PriorityQueue(Queue):
    sorted = False  # are its runs each of one priority? (not yet those a restart brought back)

    def __init__(self, broker, name, durable, owner, auto_delete, arguments):
        Queue.__init__(self, broker, name, durable, owner, auto_delete, arguments)
        self.top = arguments["x-max-priority"]
        self.lanes = self.messages = Lanes(self.top)  # its ready messages (Queue.messages), by priority

    def _page_out(self, message):
        if not self.sorted:
            self._sort_backlog()
        page_out(self, message, priority_of(message, self.top))

    def page_in(self):
        if not self.sorted:  # (expiry may read before anything is taken)
            self._sort_backlog()
        Queue.page_in(self)

    def _pop(self):
        if not self.sorted:
            self._sort_backlog()
        runs = self.runs
        if runs and runs[0].priority > self.lanes.highest():
            self.page_in()  # a run on disk has a higher priority than any message in memory
        return Queue._pop(self)

    def _sort_backlog(self):
        """The runs a restart brought back (publish order) become runs of one priority each:
        their messages are read through a plain Fifo, a window's worth at a time, and paged
        out again by priority (they stay in the journal: only the runs are new)."""
        self.sorted = True
        if not self.runs:
            return
        journal = self.broker.journal
        flow = self.broker.flow
        top = self.top
        unsorted, self.runs = self.runs, []
        self.messages = Fifo()
        damaged = None
        for run in unsorted:
            while run.count and damaged is None:
                _count, damaged = read_run(journal, run, self.window_messages, self)
                for message, _redelivered, _expires_at in self.messages.clear():
                    flow.release(message)
                    self.ready_bytes -= message.body_size
                    page_out(self, message, priority_of(message, top))  # (its redelivered mark: in delivered_before)
            if damaged is not None and run.count:
                self.runs.append(run)  # the rest as it is, last: page_in finds the damage again and logs the loss
        self.messages = self.lanes


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

    def _lane(self, priority):
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
        self._lane(priority_of(entry[MESSAGE], self.top)).push(entry)
        self.length += 1

    def put_back(self, items, key):
        groups = {}  # priority -> its items: each lane's put back in one go (one walk of it)
        for item in items:
            priority = priority_of(item[0], self.top)
            if priority in groups:
                groups[priority].append(item)
            else:
                groups[priority] = [item]
        for priority in groups:
            self._lane(priority).put_back(groups[priority], key)
        self.length += len(items)

    def highest(self):
        """The highest priority of the messages held, -1 if none."""
        for priority in self.levels:
            if self.lanes[priority].length:
                return priority
        return -1

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
