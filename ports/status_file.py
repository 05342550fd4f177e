"""What a running broker holds, written to DATA/status.json for `hutch ctl status` to read.

CPython only (a board has no one to read it, and its flash no writes to spare): every
STATUS_EVERY_MS and once more at a clean stop, the broker's queues and streams as one JSON
object, written to a temporary file and renamed over the last one, so a reader never sees
half of one. Per queue: messages ready (in memory: the window at its head; on disk: the
backlog, core/store/paging.py), their body bytes on disk, deliveries not yet settled, consumers
and the oldest ready message's age; per stream: its first and last offsets, segments,
bytes and retention.
"""

import asyncio
import json
import os
import time

STATUS_FILE = "status.json"
STATUS_EVERY_MS = 2000


def snapshot(broker, running=True, extra=None):
    """The broker's queues and streams as a dict (what status.json holds); extra: more
    sections, name -> a function giving what JSON shows (the bridges' status)."""
    now = broker.now + broker.wall_offset  # wall clock ms, as messages are stamped (Broker.publish)
    unacked = {}
    for conn in broker.connections:
        for queue, _entry in conn.unsettled():
            unacked[queue] = unacked.get(queue, 0) + 1
    queues = []
    streams = []
    for queue in broker.queues.values():
        if queue.is_stream:
            streams.append(_stream(queue, unacked.get(queue, 0)))
        else:
            queues.append(_queue(queue, now, unacked.get(queue, 0)))
    out = {
        "pid": os.getpid(),
        "running": running,
        "written_at": time.time(),
        "connections": len(broker.connections),
        # messages bridges sent again that this broker had taken already (core/dedup.py)
        "duplicates_dropped": broker.dedup.dropped if broker.dedup is not None else 0,
        "queues": queues,
        "streams": streams,
    }
    for name, section in (extra or {}).items():
        out[name] = section()
    return out


def _queue(queue, now, unacked):
    head = _head(queue)
    return {
        "name": as_text(queue.name),
        "durable": queue.durable,
        "exclusive": queue.owner is not None,
        "messages": queue.message_count(),
        "in_memory": queue.messages.length,
        "on_disk": queue.paged,
        "bytes_in_memory": queue.ready_bytes,
        "bytes_on_disk": queue.paged_bytes,
        "unacked": unacked,
        "consumers": len(queue.consumers),
        "oldest_age_s": None if head is None or not head.arrived else max(0, now - head.arrived) / 1000,
    }


def _head(queue):
    """The oldest ready message, or None. A queue whose window is empty with a backlog on disk
    reads its head in first, as its next delivery would (just after a restart, say)."""
    if not queue.messages.length and queue.paged:
        from ..core.store.paging import page_in

        page_in(queue)
    if not queue.messages.length:
        return None
    return queue.messages.peek()[0]


def _stream(stream, unacked):
    return {
        "name": as_text(stream.name),
        "first": stream.first,
        "last": stream.visible - 1 if stream.visible > stream.first else None,
        "next": stream.next,
        "segments": len(stream.segments),
        "bytes": stream.bytes,
        "max_length_bytes": stream.max_bytes,
        "max_age": as_text(stream.arguments.get("x-max-age")),
        "segment_bytes": stream.segment_bytes,
        "consumers": len(stream.consumers),
        "unacked": unacked,
    }


def as_text(value):
    """A name or argument as the JSON shows it: bytes decoded, anything else as it is."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    return value


def write(folder, broker, running=True, extra=None):
    """status.json in folder, replaced whole."""
    path = os.path.join(folder, STATUS_FILE)
    with open(path + ".tmp", "w") as f:
        json.dump(snapshot(broker, running, extra), f)
    os.replace(path + ".tmp", path)


class StatusWriter:
    """Writes status.json every STATUS_EVERY_MS while the broker runs, and at its stop."""

    def __init__(self, folder, broker, log, extra=None):
        self.folder, self.broker, self.log = folder, broker, log
        self.extra = extra  # more sections (snapshot's extra)
        self.task = None
        self.failed = False

    def start(self):
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self):
        while True:
            self._write(True)
            await asyncio.sleep(STATUS_EVERY_MS / 1000)

    def _write(self, running):
        try:
            write(self.folder, self.broker, running, self.extra)
            self.failed = False
        except OSError as e:
            if not self.failed:  # said once, not every two seconds
                self.log("warning", "cannot write %s: %s" % (STATUS_FILE, e))
            self.failed = True

    def stop(self):
        if self.task is not None:
            self.task.cancel()
        self._write(False)
