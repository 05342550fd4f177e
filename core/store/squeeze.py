"""Under the memory alarm, durable queues page to disk (a host's: ports/memory_watch.py).

A durable queue keeps a window of its oldest messages in memory (Limits.queue_window_messages
and queue_window_bytes) and the rest on disk only, as runs (core/store/paging.py). While the
broker's resident memory is above memory_high_watermark, each one keeps SQUEEZED messages in
memory instead: the messages of its window past them, which the journal holds already, go back
to disk as runs ahead of its others (their redelivered marks kept in delivered_before), and
what is read back meanwhile is read a SQUEEZED window at a time. Once the alarm clears, the
windows are their size again and fill as consumers take messages.

A message the journal does not hold (transient, to a queue that was not paging then), a
priority queue's lanes and a stream stay as they are. Loaded with the first alarm.
"""

from ..fifo import Fifo
from ..session import MESSAGE, REDELIVERED
from .paging import Run

SQUEEZED = 16  # messages a durable queue keeps in memory under the alarm


def squeeze(broker, on):
    """The memory alarm raised (on) or cleared: the durable queues' windows shrunk, their
    excess paged to disk; or their windows back to the limits. How many messages went to disk."""
    limits = broker.limits
    paged = 0
    for queue in broker.queues.values():
        if not queue.journalled or queue.is_stream or type(queue.messages) is not Fifo:
            continue
        if not on:
            queue.window_messages = limits.queue_window_messages
            queue.window_bytes = limits.queue_window_bytes
            continue
        queue.window_messages = min(SQUEEZED, limits.queue_window_messages)
        paged += _page_back(queue, queue.window_messages)
    return paged


def _page_back(queue, keep):
    """The entries of queue's window past its first keep go to disk, ahead of its runs: only a
    tail of them the journal holds (an entry it does not hold, and all before it, stay)."""
    entries = queue.messages.clear()
    stay = max(keep, 0)
    i = len(entries)
    while i > stay and entries[i - 1][MESSAGE].journal_id:
        i -= 1
    for entry in entries[:i]:
        queue.messages.push(entry)
    going = entries[i:]
    if not going:
        return 0
    broker = queue.broker
    runs = []
    for entry in going:
        message = entry[MESSAGE]
        if not runs or not runs[-1].add(message):
            run = Run(message.segment, message.journal_id)
            run.add(message)
            runs.append(run)
        if entry[REDELIVERED]:
            if queue.delivered_before is None:
                queue.delivered_before = set()
            queue.delivered_before.add(message.journal_id)
        broker.flow.release(message)
        queue.ready_bytes -= message.body_size
        queue.paged += 1
        queue.paged_bytes += message.body_size
    queue.runs[0:0] = runs
    return len(going)
