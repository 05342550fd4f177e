"""Development on a PC (CPython or MicroPython's unix port): the core's default limits."""

HEAP = None  # the machine's memory; on MicroPython's unix port, whatever -X heapsize gives
LIMITS = {}
READ_SIZE = 65536
STORAGE = {
    "path": "hutch-data",
    "max_bytes": 1024 * 1024 * 1024,
    "segment_bytes": 8 * 1024 * 1024,
    "disk_free_limit": 50 * 1000 * 1000,
}
SERIAL = []
