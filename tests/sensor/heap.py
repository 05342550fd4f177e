"""Heap footprint of hutch.client under MicroPython: `micropython heap.py PORT [FRAME_MAX]`
(or main() of it, as emulator/unixboard.py's launcher runs a module).

Prints `heap NAME BYTES` lines: gc.mem_alloc() deltas after a full collection, for
importing the client, creating a Client, one open connection (confirm mode, one
consumer), and the bytes allocated per publish and per delivery (gc disabled while
counting, so nothing is collected in between).
"""

import gc
import sys


def used():
    gc.collect()
    return gc.mem_alloc()


def say(name, value):
    print("heap", name, value)


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    port = int(args[0])
    frame_max = int(args[1]) if len(args) > 1 else 4096
    base = used()
    from hutch.client import Client

    after_import = used()
    say("import", after_import - base)
    c = Client("127.0.0.1", port, heartbeat=30, frame_max=frame_max)
    after_client = used()
    say("client", after_client - after_import)
    c.connect()
    after_connect = used()
    say("connect", after_connect - after_client)
    c.declare_queue("heap-q")
    c.confirm()
    got = []
    c.consume("heap-q", lambda m: got.append(len(m.body)), no_ack=True)
    c.cancel(c.consume("heap-q", lambda m: None))
    say("open", used() - after_import)

    N = 100
    payload = b"x" * 200
    props = {"delivery_mode": 2}
    c.publish("", "heap-q", payload, props)  # warm up
    c.wait_confirms(5000)
    c.wait_msg(5000)
    got.clear()
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    for _i in range(N):
        c.publish("", "heap-q", payload, props)
    b = gc.mem_alloc()
    gc.enable()
    say("per_publish", (b - a) // N)
    assert c.wait_confirms(5000)
    while len(got) < N:
        assert c.wait_msg(5000)
    # deliveries: a message of 200 bytes, decoded as it is handed to the callback
    gc.collect()
    c.publish("", "heap-q", payload)
    c.wait_confirms(5000)
    gc.collect()
    gc.disable()
    a = gc.mem_alloc()
    c.wait_msg(5000)
    b = gc.mem_alloc()
    gc.enable()
    say("per_delivery_and_confirm", b - a)
    c.close()
    say("after_close", used() - after_import)


if __name__ == "__main__":
    main()
