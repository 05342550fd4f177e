"""ESP32 without PSRAM (ESP32-WROOM-32 and the like): about 110 KiB of heap for Python.

hutch's code must run from flash here (a ROMFS partition or a frozen firmware,
see firmware/): loaded as .mpy into the heap it would take most of it. What is
left holds 4 clients and a few dozen queued messages; past that, publishers
get connection.blocked or basic.nack, never a MemoryError.
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
    "total_max_messages": 96,
    "total_max_bytes": 40 * 1024,  # estimated heap held by queued messages (body + ~600 B each)
    # A durable queue keeps one message in memory once it has a backlog; the rest waits on flash
    # and is read back one at a time (a message in memory takes ~0.7 KiB: a window of 8 was most
    # of what a 20,000-message backlog cost the heap).
    "queue_window_messages": 1,
    "queue_window_bytes": 2048,
    "page_read_bytes": 1024,
    "output_high_water": 2048,
    "stream_segment_bytes": 16 * 1024,  # a stream's segment file: retention drops one at a time
    "low_water_percent": 50,  # unblock publishers only once half the budget is free: fewer flaps
}
# AMQP 1.0 is not served unless the config's [server] amqp10 says so: its front end takes heap
# this board keeps for clients and queued messages (docs/boards.md gives the figures).
AMQP10 = False
READ_SIZE = 1024
STORAGE = {"path": "/data", "max_bytes": 256 * 1024, "segment_bytes": 16 * 1024}
SERIAL = [{"uart": 2, "tx": 17, "rx": 16, "baudrate": 115200}]
