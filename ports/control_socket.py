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
            line = await reader.readline()
            try:
                request = json.loads(line)
                if not isinstance(request, dict) or not isinstance(request.get("command"), str):
                    raise ValueError("a request is a JSON object with a command")
            except ValueError as e:
                answer = {"error": "not a control request: %s" % e}
            else:
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
