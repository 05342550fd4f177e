"""The wall clock set while the broker runs: NTP's first answer after a boot without a real-time
clock (a board at 2000-01-01, a Raspberry Pi at its last shutdown or at 1970), a hand, a year's
jump either way. Loaded on the first jump only (a board keeps the heap until then).

Durations never read the wall clock (TTLs, x-expires, heartbeats, will delays, session expiry,
backoffs, budgets: the port's monotonic clock). What does is a moment: when a message arrived
(its age, and its TTL after a restart), x-death times, a stream's timestamps, the [uplink]'s
windows. A message's arrival was stamped on the clock as it was then; the stamps of the
messages held move with the clock, so their ages stay what really elapsed. The [uplink]'s
windows are read again (server/bridges/driver.py watches `clock_jumps`). A stream's segments
are aged for x-max-age on the clock after the jump: none is dropped for a year it never lived."""

from .session import MESSAGE


def clock_moved(broker, delta_ms):
    """The wall clock moved delta_ms (beyond the tick's tolerance). One line in the log."""
    broker.clock_jumps += 1
    seen = set()  # a message in a queue and in an outbox is moved once

    def move(message):
        if message.arrived and id(message) not in seen:
            seen.add(id(message))
            message.arrived += delta_ms

    for queue in broker.queues.values():
        for entry in queue.messages:
            move(entry[MESSAGE])
        if queue.is_stream:  # (its records keep their stamps; retention ages its segments on the new clock)
            queue.stamp_moves = list(queue.stamp_moves) + [(queue.next, delta_ms)]
    for machine in broker.bridges:
        for one in getattr(machine, "classes", ()):  # (an up bridge's outboxes)
            outbox = one.outbox
            for entry in outbox.waiting:
                move(entry[MESSAGE])
            for pairs in (outbox.held, outbox.in_flight):
                for pair in pairs:
                    move(pair[1][MESSAGE])
    journal = broker.journal
    if journal is not None:  # paged out: moved when paged in (core/store/paging.py)
        broker.stamp_moves = list(broker.stamp_moves) + [(journal.next_id, delta_ms)]
    broker.log(
        "warning",
        "clock: the wall clock moved %+.0f s; durations run on the monotonic clock, the ages of "
        "the %d messages held follow the wall clock, the [uplink]'s windows are read again"
        % (delta_ms / 1000, len(seen)),
    )
