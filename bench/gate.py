"""A gate in front of an upstream broker, for `hutch bench --bridge` (bench/bridges.py):
the upstream seen as away, then back, without stopping it (it may be a RabbitMQ someone else
runs, given with --rabbitmq).

    gate = Gate(("127.0.0.1", 5672))   # shut: a connect to gate.port is refused
    ...                                 # the edge's bridge retries meanwhile
    gate.open()                         # from now on each connection is relayed upstream
    gate.accepted_at                    # when the first one came (time.perf_counter())
    gate.close()

While shut, the gate's socket is bound but not listening: the port stays ours, and the kernel
answers a connect with a reset, exactly as for a broker that is down ("connection refused").
Once open, each connection is relayed to the target by two threads, one per direction,
with os.splice: the bytes go from socket to socket inside the kernel, so the relay, which
sits in the path being measured, costs next to no CPU (the Python side only loops per
chunk of up to a megabyte).
"""

import fcntl
import os
import socket
import threading
import time

CHUNK = 1 << 20  # bytes moved per splice call at most (the pipe is made this large)


class Gate:
    def __init__(self, target, host="127.0.0.1"):
        self.target = target
        self.listener = socket.socket()
        self.listener.bind((host, 0))
        self.port = self.listener.getsockname()[1]
        self.accepted_at = None
        self.accepted = 0
        self.sockets = []
        self.closed = False

    def open(self):
        """Let connections through from now on."""
        self.listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.accepted_at is None:
                self.accepted_at = time.perf_counter()
            self.accepted += 1
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the bridge sees the link end, and retries
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sockets += [client, upstream]
            threading.Thread(target=_relay, args=(client, upstream), daemon=True).start()
            threading.Thread(target=_relay, args=(upstream, client), daemon=True).start()

    def close(self):
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already gone
            sock.close()


def _relay(source, sink):
    """source's bytes to sink until source ends, then the end passed on (FIN)."""
    pipe_out, pipe_in = os.pipe()
    try:
        fcntl.fcntl(pipe_in, fcntl.F_SETPIPE_SZ, CHUNK)
    except OSError:
        pass  # above the system's pipe-max-size: the default (64 KiB) works too, in smaller steps
    try:
        while True:
            n = os.splice(source.fileno(), pipe_in, CHUNK)
            if not n:
                break
            while n:
                n -= os.splice(pipe_out, sink.fileno(), n)
    except OSError:
        pass  # a socket closed under us: the other side sees the end below
    finally:
        os.close(pipe_out)
        os.close(pipe_in)
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass
