"""`hutch ctl`'s way into a running broker: a Unix socket in its data folder, the broker's side
(ports/control_request.py is hutch ctl's).

CPython only. DATA/control.sock, readable and writable by the broker's user alone (no network:
whoever may use it may already read the data folder). One request per connection: a client
writes one JSON object on one line and reads one JSON object on one line back, then both close.

    control = ControlSocket(folder, handle, log)   # handle(request dict) -> answer dict
    await control.start()
    control.stop()

The broker holds the folder's lock (ports/folder_lock.py) before this starts, so a socket file
already there was left by a broker that was killed: it is replaced.
"""

import asyncio
import json
import os

from .control_request import socket_path

MAX_REQUEST = 64 * 1024 * 1024  # a definitions file to import, as one line of JSON


def read_request(line):
    """(the request, None), or (None, the answer that refuses it): a line that is no JSON object
    with a command in it. (RecursionError: arrays or objects nested deeper than Python's
    recursion limit, which json.loads does not take: a line of 5,000 "[" raised out of the
    socket's reading, a traceback in the log; found by the control target's fuzzing.)"""
    try:
        request = json.loads(line)
        if not isinstance(request, dict) or not isinstance(request.get("command"), str):
            raise ValueError("a request is a JSON object with a command")
    except (ValueError, RecursionError) as e:  # (UnicodeDecodeError too: octets that are no UTF-8)
        return None, {"error": "not a control request: %s" % e}
    return request, None


class ControlSocket:
    def __init__(self, folder, handle, log):
        self.path = socket_path(folder)
        self.handle = handle
        self.log = log
        self.server = None

    async def start(self):
        try:
            os.unlink(self.path)  # a killed broker's (this one holds the folder's lock)
        except FileNotFoundError:
            pass
        old_mask = os.umask(0o177)  # the socket is made 0600: no moment when others may connect
        try:
            self.server = await asyncio.start_unix_server(self._serve, self.path, limit=MAX_REQUEST)
        finally:
            os.umask(old_mask)

    async def _serve(self, reader, writer):
        try:
            request, answer = read_request(await reader.readline())
            if request is not None:
                answer = self.handle(request)
                if hasattr(answer, "send"):  # a coroutine: a command that waits (a reload)
                    answer = await answer
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as e:
            self.log("warning", "control socket: a request not answered: %s" % e)
        finally:
            writer.close()

    def stop(self):
        if self.server is not None:
            self.server.close()
            self.server = None
        try:
            os.unlink(self.path)
        except OSError:
            pass
