"""Watching the MicroPython heap: real free memory drives the broker's memory alarm.

The core budgets queued messages by estimate (Limits.total_max_bytes); this
port-side watch looks at the heap itself, because connections, buffers and
fragmentation cost memory too. When free heap runs low the broker blocks
publishers (connection.blocked); when it is nearly gone it refuses new
connections (530); both clear once clients drain. Thresholds are fractions
of the working heap, what is free once the broker has started (the code and
the broker's own objects hold the rest), so they fit any board. It also logs
heap figures, including the high-water mark of live heap, every `interval_ms`.

On CPython (no gc.mem_free) it only logs broker figures.
"""

import gc

ALARM_BELOW = 8  # alarm when free heap < working heap/8 ...
ALARM_CLEAR = 4  # ... cleared when free heap > working heap/4
REFUSE_BELOW = 16  # refuse new connections when free heap < working heap/16
CONNECTION_ROOM = 4096  # heap one client takes: 3.7 KiB measured on the 64-bit unix port
ROOM_FOR = 8  # connections to keep room for, at most (max_connections may be 1000)


class HeapMonitor:
    def __init__(self, broker, log, interval_ms=0):
        self.broker = broker
        self.log = log
        self.interval_ms = interval_ms
        self.measures = hasattr(gc, "mem_free")
        self.total = gc.mem_free() + gc.mem_alloc() if self.measures else 0
        self.working = self.total  # free heap after start: set by fit()
        self.peak_live = 0
        self._next_report = 0
        self._fed = 0  # bytes read since the last look at the heap

    def live(self):
        """Heap in use by live objects (collects garbage first)."""
        gc.collect()
        used = gc.mem_alloc()
        if used > self.peak_live:
            self.peak_live = used
        return used

    def fit(self, limits):
        """At start, with the broker built: size the memory budgets to the heap that is left.

        Queued messages may use 60% of the free heap once room is kept for the allowed
        connections; each client's unsent output 1/32 of it. A board profile's or a config's
        values stay when they are smaller. Garbage is collected every 1/16 of the heap, not
        only when it is full: left to itself MicroPython's first collection comes when the
        heap is exhausted, with the queued messages scattered over it and no hole big enough
        for a growing list; frequent collections keep live objects packed.
        """
        if not self.measures:
            return
        gc.threshold(max(4096, self.total // 16))
        free = self.total - self.live()
        self.working = free
        room = free - min(limits.max_connections, ROOM_FOR) * CONNECTION_ROOM
        budget = max(room * 60 // 100, 4096)
        if budget < limits.total_max_bytes:
            limits.total_max_bytes = budget
        limits.output_high_water = min(limits.output_high_water, max(2048, free // 32))
        self.log(
            "info",
            "heap: %d of %d bytes free after start; queued messages may use %d"
            % (free, self.total, limits.total_max_bytes),
        )

    def sample(self, now):
        if self.measures:
            self.watch()
        if self.interval_ms and now >= self._next_report:
            self._next_report = now + self.interval_ms
            self.report()

    def fed(self, nbytes):
        """After a read: look at the heap once enough bytes came in to use up 1/16 of the
        working heap. gc.mem_free() walks the whole allocation table (27 us on a 128 KiB
        heap, 0.9 ms on 4 MiB), too slow to run after every read of a big heap."""
        self._fed += nbytes
        if self._fed >= max(1024, self.working // 16):
            self._fed = 0
            self.watch()

    def watch(self):
        """Raise or clear the broker's memory alarm."""
        free = gc.mem_free()
        working = self.working
        # Each threshold keeps at least room for one more client, and clears a client's worth
        # above where it was set, so a tiny heap does not flap.
        alarm_below = max(working // ALARM_BELOW, CONNECTION_ROOM)
        # Refuse only when not even one more client fits: memory held by queued messages is
        # freed by a consumer, and a consumer must be able to connect to do it.
        refuse_below = max(working // REFUSE_BELOW, CONNECTION_ROOM)
        if free < max(alarm_below, refuse_below):
            free = self.total - self.live()  # garbage is not shortage: collect before deciding
        flow = self.broker.flow
        if free < alarm_below:
            flow.set_alarm("memory", "low on memory: free heap %d of %d bytes" % (free, self.total))
        elif "memory" in flow.alarms and free > max(working // ALARM_CLEAR, alarm_below + CONNECTION_ROOM):
            flow.set_alarm("memory", None, "memory alarm cleared")
        if free < refuse_below:
            flow.refuse_connections = "hutch is low on memory (%d bytes free)" % free
        elif flow.refuse_connections is not None and free > refuse_below + CONNECTION_ROOM:
            flow.refuse_connections = None

    def report(self):
        broker = self.broker
        text = "stats: %d connections, %d queued messages (%d bytes estimated)" % (
            broker.open_connections,
            broker.flow.held_messages,
            broker.flow.held_bytes,
        )
        if self.measures:
            text += "; heap live %d, peak %d, free %d of %d bytes" % (
                self.live(),
                self.peak_live,
                gc.mem_free(),
                self.total,
            )
        self.log("info", text)
