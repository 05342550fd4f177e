"""The board backlog row's figures with no connection in play: runs inside MicroPython.

bench/board_backlog.py runs this module through the unixboard launcher (hutch in ROMFS, as a
board runs it), after its served broker: the same broker (`--board esp32`, the same data
folder layout and disk budget) is built here as startup.py builds it, and the backlog goes in
through Broker.publish, the way every front end publishes, with no socket, task or client.
So its figures hold only what the queue and its backlog take: a served broker's stats now and
then also count a finished connection that some stale word in the interpreter keeps alive
(MicroPython's collector takes any word that looks like a pointer for one), and these do not.

    main([DATA, CONFIG, N...]) prints one line, `heap NONE N...`: the live heap after a full
    collection with the queue empty, then with N messages queued, for each N.

Not imported on the host: bench/board_backlog.py copies it next to the data folder and runs it
there (`-m board_backlog_core`). Written for MicroPython only.
"""

import gc
import struct

from hutch.core.message import Message

QUEUE = b"bench-board-backlog"
SIZE = 100


def live():
    gc.collect()
    return gc.mem_alloc()


def publish(broker, n):
    """Message n, persistent, to the queue (in a function of its own: nothing of it stays in
    main's frame, where the collector would take it for alive)."""
    route = bytes((0, len(QUEUE))) + QUEUE
    # the content header frame's tail, as a channel keeps it: payload size, class, weight, body
    # size, property flags (delivery-mode), delivery-mode 2, frame-end
    header = struct.pack(">IHHQHB", 15, 60, 0, SIZE, 0x1000, 2) + b"\xce"
    body = struct.pack(">I", SIZE) + b"%08d" % n + b"." * (SIZE - 8) + b"\xce"
    broker.publish(broker.default_exchange, Message(b"", QUEUE, route, header, body, SIZE))


def main(argv):
    data, config, counts = argv[0], argv[1], [int(n) for n in argv[2:]]
    from hutch.core.broker import Broker
    from hutch.core.topology import declare_queue
    from hutch.server import startup
    from hutch.server.options import parse
    from hutch.server.runtime import forget

    opts = parse(["--board", "esp32", "--config", config, "--data", data])
    forget("hutch.server.options", "hutch.server.config")
    parse = None
    broker = Broker(opts["limits"], opts["users"], lambda level, text, exc=None: None)
    writer = startup.recover_journal(opts, broker, broker.log)
    gc.threshold(max(4096, (gc.mem_free() + gc.mem_alloc()) // 16))  # as ports/heap.py sets it
    declare_queue(broker, None, QUEUE, durable=True)
    writer.commit()
    clock = [0]

    def tick():  # a second of the broker's clock: compaction looks at most this often
        clock[0] += 1000
        broker.tick(clock[0], 1700000000 + clock[0] // 1000)

    tick()
    figures = [live()]
    done = 0
    for count in counts:
        while done < count:
            publish(broker, done)
            done += 1
            if done % 16 == 0:
                writer.write()  # what the writer task does each turn of a served broker's loop
                if done % 1024 == 0:
                    tick()
        writer.commit()
        tick()
        figures.append(live())
    print("heap " + " ".join(str(n) for n in figures))
