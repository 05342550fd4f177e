"""The control socket's requests (`hutch ctl`'s, or anything a local program writes to
DATA/control.sock): one line read as the socket reads it (ports/control_socket.py
read_request), then answered by the broker's Control (server/control.py) on a broker of its own
with a queue, an exchange and a user to act on. The answer is a JSON object, never an exception;
the broker logs no internal error; and the line's answer is the same when asked again of a
broker in the same state (a request changes nothing it was refused)."""

import asyncio
import json
import os
import shutil
import tempfile

FOLDER = tempfile.mkdtemp(prefix="hutch-fuzz-control-")  # (one per process: emptied before each input)


def _control():
    from hutch.core.topology import declare_exchange, declare_queue
    from hutch.server.control import Control
    from hutch.server.runtime import Runtime

    from .served import Logged

    for entry in os.listdir(FOLDER):
        path = os.path.join(FOLDER, entry)
        shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    logged = Logged()
    broker = logged.broker
    declare_queue(broker, None, b"q", durable=True)
    declare_exchange(broker, None, b"x", b"topic")
    runtime = Runtime(broker, broker.log)
    return logged, Control(runtime, FOLDER, {})


def requests(data):
    from hutch.ports.control_socket import read_request

    request, answer = read_request(data.split(b"\n", 1)[0])
    if request is not None:
        logged, control = _control()
        answer = control.handle(request)
        if hasattr(answer, "send"):  # a command that waits (a reload)
            answer = asyncio.run(answer)
        assert not logged.errors(), logged.errors()
    assert isinstance(answer, dict), answer
    json.dumps(answer)  # (what the socket writes back)
