"""Raspberry Pi Pico W (RP2040, 264 KiB of RAM, about 160 KiB of heap with Wi-Fi up)."""

HEAP = 160 * 1024
LIMITS = {
    "frame_max": 8192,
    "channel_max": 8,
    "heartbeat": 30,
    "max_connections": 6,
    "max_queues": 32,
    "max_exchanges": 16,
    "max_bindings": 64,
    "max_consumers": 32,
    "max_message_bytes": 16 * 1024,
    "queue_max_messages": 128,
    "queue_max_bytes": 32 * 1024,
    "total_max_messages": 256,
    "total_max_bytes": 64 * 1024,
    "queue_window_messages": 16,  # a durable queue's backlog beyond these waits on flash
    "queue_window_bytes": 4096,
    "page_read_bytes": 2048,
    "output_high_water": 4096,
    "stream_segment_bytes": 32 * 1024,  # a stream's segment file: retention drops one at a time
    # AMQP 1.0, when the config serves it (see boards/esp32.py)
    "amqp10_sessions": 4,
    "amqp10_links": 16,
    "amqp10_session_window": 64,
    "amqp10_link_credit": 32,
    # sensors whose readings are deduplicated (core/dedup.py): ~96 B each on a board
    "max_sensors": 64,
    "sensor_window": 128,
    "low_water_percent": 50,  # unblock publishers only once half the budget is free: fewer flaps
}
# AMQP 1.0 is not served unless the config's [server] amqp10 says so: its front end takes heap
# this board keeps for clients and queued messages (docs/boards.md gives the figures).
AMQP10 = False
READ_SIZE = 2048
STORAGE = {"path": "/data", "max_bytes": 512 * 1024, "segment_bytes": 32 * 1024}
SERIAL = [{"uart": 0, "tx": 0, "rx": 1, "baudrate": 115200}]
