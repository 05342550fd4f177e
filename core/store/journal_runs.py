"""Journal.add_message for a whole run (core/runs.py): persistent messages alike but for their
bodies (one route, the same properties), journalled for the same queues.

The records are those add_message makes for each message in turn, byte for byte, and so is the
bookkeeping: ids in order, the segment's live and written counts, each queue's members. What a
run spares is the work that is the same for every message: the route and the queue names are
joined once, so each record is made from five parts instead of seven or more, and the records
go into the journal's chunk, and the counts move, once for the run.

A run that would roll the segment over, or whose queue's members in this segment are not one
range of ids that it continues, goes message by message (add_message): those cases are rare
and add_message is their one implementation.

Never on a board: only core/runs.py imports it.
"""

from .journal import MESSAGE, message_parts
from .records import record_parts


def add_run(journal, messages, queues):
    """Journal messages (persistent, alike but for their bodies) for queues, as add_message
    would one after the other. False, with nothing changed, where the run must go message by
    message (see the module's docstring) or no queue is journalled."""
    journalled = [queue for queue in queues if queue.journalled]
    if not journalled:
        return False
    first_id = journal.next_id
    members = journal.members
    for queue in journalled:
        entry = members.get(queue.name)
        if entry is not None and (entry[3] is not None or first_id != entry[0] + entry[1]):
            return False  # (its ids in this segment are a bitmap, or become one)
    names = [queue.name_shortstr for queue in journalled]
    # A record's parts (message_parts): its id and arrival, its route, the queues' count and
    # names, its content header (whose body size differs) and its body. The route and the
    # queues' are the same for the whole run: joined once, they take the place of the route and
    # of an empty list of queues in each message's parts.
    route_and_names = b"".join(message_parts(messages[0], first_id, 0, 0, names)[1 : 3 + len(names)])
    records = []
    size = 0
    body_size = 0
    journal_id = first_id
    for message in messages:
        parts = message_parts(message, journal_id, 0, message.arrived, ())
        parts[1:3] = (route_and_names,)
        for part in record_parts(MESSAGE, parts):
            records.append(part)
            size += len(part)
        body_size += message.body_size
        journal_id += 1
    segment = journal.segment
    if journal.sizes[segment] + size > journal.segment_bytes:
        return False  # (one of them rolls the segment over: add_message does, at the right one)
    chunks = journal.chunks
    if chunks and chunks[-1][0] == segment and len(chunks[-1]) == 2:
        chunks[-1][1].extend(records)
    else:
        chunks.append([segment, records])
    count = len(messages)
    journal.sizes[segment] += size
    journal.total += size
    journal.appended += size
    journal.seq += count
    journal.next_id = journal_id
    for i in range(count):
        message = messages[i]
        message.journal_id = first_id + i
        message.segment = segment
    journal.live[segment] = journal.live.get(segment, 0) + count * len(names)
    journal.written[segment] = journal.written.get(segment, 0) + count
    for queue in journalled:
        entry = members.get(queue.name)
        if entry is None:
            entry = members[queue.name] = [first_id, 0, 0, None]
        entry[1] += count
        entry[2] += body_size
    journal._wake()
    return True
