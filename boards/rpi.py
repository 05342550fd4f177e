"""Raspberry Pi (3/4/5, Zero 2 W) on CPython: a Linux gateway with hundreds of MiB to spare."""

HEAP = 256 * 1024 * 1024
LIMITS = {
    "frame_max": 131072,
    "channel_max": 256,
    "heartbeat": 60,
    "max_connections": 256,
    "max_queues": 2000,
    "max_exchanges": 200,
    "max_bindings": 10000,
    "max_consumers": 2000,
    "max_message_bytes": 16 * 1024 * 1024,
    "queue_max_messages": 500000,
    "queue_max_bytes": 64 * 1024 * 1024,
    "total_max_messages": 1000000,
    "total_max_bytes": 128 * 1024 * 1024,
    "output_high_water": 256 * 1024,
}
READ_SIZE = 65536
STORAGE = {
    "path": "hutch-data",
    "max_bytes": 4 * 1024 * 1024 * 1024,
    "segment_bytes": 8 * 1024 * 1024,
    "disk_free_limit": 50 * 1000 * 1000,
}
SERIAL = [{"device": "/dev/serial0", "baudrate": 115200}]
