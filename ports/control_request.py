"""`hutch ctl`'s side of the control socket (ports/control_socket.py is the broker's): one JSON
request on one line to DATA/control.sock, one JSON answer on one line back.

CPython only. Plain sockets, not asyncio: importing asyncio is most of what a `hutch ctl`
command would cost to start.
"""

import json
import os
import socket
import time

SOCKET_FILE = "control.sock"


def socket_path(folder):
    return os.path.join(folder, SOCKET_FILE)


def connected(path, timeout):
    """A stream socket connected to the Unix socket at path, its timeout set. A listener whose
    backlog is full (a busy broker not accepting yet) is waited for, as a blocking connect
    waits, up to timeout: with a timeout set, Linux answers such a connect at once with EAGAIN."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while True:
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:
            if time.monotonic() >= deadline:
                sock.close()
                raise
            time.sleep(0.01)  # (the polling interval)
        except BaseException:
            sock.close()
            raise


def request(folder, command, timeout=30, **arguments):
    """Send one request to the broker running on folder; its answer (a dict). OSError when no
    broker answers there (no socket: none runs; refused: a killed one's)."""
    message = dict(arguments, command=command)
    with connected(socket_path(folder), timeout) as sock:
        sock.sendall(json.dumps(message).encode() + b"\n")
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    data = b"".join(chunks)
    if not data.endswith(b"\n"):
        raise ConnectionError("the broker closed the control socket without an answer")
    return json.loads(data)
