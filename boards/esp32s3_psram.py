"""ESP32-S3 with 8 MiB of PSRAM (ESP32-S3-DevKitC-1 N8R8 and the like): a few MiB of heap."""

HEAP = 4 * 1024 * 1024
LIMITS = {
    "frame_max": 32768,
    "channel_max": 16,
    "heartbeat": 30,
    "max_connections": 16,
    "max_queues": 128,
    "max_exchanges": 32,
    "max_bindings": 512,
    "max_consumers": 128,
    "max_message_bytes": 256 * 1024,
    "queue_max_messages": 5000,
    "queue_max_bytes": 1024 * 1024,
    "total_max_messages": 10000,
    "total_max_bytes": 2 * 1024 * 1024,
    "queue_window_messages": 64,  # a durable queue's backlog beyond these waits on flash
    "queue_window_bytes": 32768,
    "page_read_bytes": 8192,
    "output_high_water": 16 * 1024,
    "stream_segment_bytes": 64 * 1024,  # a stream's segment file: retention drops one at a time
    # sensors whose readings are deduplicated (core/dedup.py): ~208 B each on a board
    "max_sensors": 1000,
    "sensor_window": 1024,
}
READ_SIZE = 8192
STORAGE = {"path": "/data", "max_bytes": 2 * 1024 * 1024, "segment_bytes": 64 * 1024}
SERIAL = [{"uart": 1, "tx": 17, "rx": 18, "baudrate": 115200}]
