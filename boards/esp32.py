"""ESP32 without PSRAM (ESP32-WROOM-32 and the like): about 110 KiB of heap for Python.

hutch's code must run from flash here (a ROMFS partition or a frozen firmware,
see firmware/): loaded as .mpy into the heap it would take most of it. What is
left holds 4 clients and a few dozen queued messages; past that, publishers
get connection.blocked or basic.nack, never a MemoryError.

The limits that bound the heap are chosen from `hutch bench --board wasm32` (docs/boards.md,
"The memory budget on MicroPython"): on a 32-bit MicroPython, every scenario it runs keeps what
a board with hutch frozen into its firmware holds under 90 % of 96 KiB (86.4 KiB), a tenth
kept for what no scenario does at once and for its estimate of the code's heap.
tests/boards/test_wasm32.py fails when one needs more than 96 KiB.
"""

HEAP = 110 * 1024
LIMITS = {
    "frame_max": 4096,  # the protocol minimum: one read buffer, small frames
    "channel_max": 4,
    "heartbeat": 30,
    "max_connections": 4,
    "max_queues": 16,
    "max_exchanges": 8,
    "max_bindings": 32,
    "max_consumers": 16,
    "max_message_bytes": 8192,
    "queue_max_messages": 64,
    "queue_max_bytes": 16 * 1024,
    # An up bridge forwards a quarter of this at a time (core/bridge/machine.py): draining a
    # 20,000-message backlog peaked (on a board, hutch bench --board wasm32) at 87.6 KiB with
    # 12 in flight, 86.5 with 10, 85.6 with 9 (this value's), under the 86.4 (90 % of 96 KiB)
    # the profile keeps every scenario below (docs/boards.md).
    "total_max_messages": 36,
    "total_max_bytes": 40 * 1024,  # estimated heap held by queued messages (body + ~600 B each)
    # A durable queue keeps one message in memory once it has a backlog; the rest waits on flash
    # and is read back one at a time (a message in memory takes ~0.7 KiB: a window of 8 was most
    # of what a 20,000-message backlog cost the heap).
    "queue_window_messages": 1,
    "queue_window_bytes": 2048,
    "page_read_bytes": 1024,
    "output_high_water": 2048,
    "stream_segment_bytes": 16 * 1024,  # a stream's segment file: retention drops one at a time
    # AMQP 1.0, when the config serves it: a session or two per client, a few links each, and a
    # sender's unconfirmed messages and frames bounded as the 0-9-1 publishers' are
    "amqp10_sessions": 2,
    "amqp10_links": 8,
    "amqp10_session_window": 32,
    "amqp10_link_credit": 16,
    # sensors whose readings are deduplicated (core/dedup.py): ~96 B each on a board
    "max_sensors": 32,
    "sensor_window": 128,
    "low_water_percent": 50,  # unblock publishers only once half the budget is free: fewer flaps
}
# AMQP 1.0 is not served unless the config's [server] amqp10 says so: its front end takes heap
# this board keeps for clients and queued messages (docs/boards.md gives the figures).
AMQP10 = False
READ_SIZE = 1024
# Segments are not grown past 16 KiB when journal_max_bytes is raised for a backlog: while a
# backlog drains, the segment being written keeps a copy of its acks in memory, and the 639 KiB
# segments of a 10 MB budget took the drain of 20,000 messages to 1,072 KiB of heap (with 12
# in flight, 32 KiB segments: 109.4; 16 KiB: 87.6; 8 KiB: 81.7, but the 20,000 held then took
# 54.5 KiB, not 47.1).
STORAGE = {"path": "/data", "max_bytes": 256 * 1024, "segment_bytes": 16 * 1024, "max_segment_bytes": 16 * 1024}
SERIAL = [{"uart": 2, "tx": 17, "rx": 16, "baudrate": 115200}]
