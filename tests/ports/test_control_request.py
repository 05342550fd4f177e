"""`hutch ctl`'s connect to the control socket (ports/control_request.py connected): a listener
whose backlog is full, a broker too busy to accept yet, is waited for up to the timeout, as a
blocking connect waits; Linux answers a connect with a timeout set at once with EAGAIN (a
control door's soak, eight clients at once beside a busy broker, failed so)."""

import os
import socket
import threading

import pytest

from hutch.ports.control_request import connected


@pytest.fixture
def full_listener(tmp_path):
    """A Unix socket listening with a backlog of 1, filled, that accepts nothing by itself."""
    path = os.path.join(str(tmp_path), "control.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    waiting = []
    while True:  # (Linux takes backlog + 1 before it answers EAGAIN)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except BlockingIOError:
            sock.close()
            break
        waiting.append(sock)
    yield path, listener
    for sock in waiting:
        sock.close()
    listener.close()


def test_a_full_backlog_is_waited_for_until_the_listener_accepts(full_listener):
    path, listener = full_listener
    accepted = []
    timer = threading.Timer(0.3, lambda: accepted.append(listener.accept()[0]))
    timer.start()
    try:
        with connected(path, 5) as sock:
            assert sock.gettimeout() == 5
    finally:
        timer.join()
        for sock in accepted:
            sock.close()


def test_a_full_backlog_past_the_timeout_is_the_connect_s_error(full_listener):
    path, _listener = full_listener
    with pytest.raises(BlockingIOError):
        connected(path, 0.2)


def test_no_listener_is_refused_at_once(tmp_path):
    with pytest.raises(FileNotFoundError):
        connected(str(tmp_path / "none.sock"), 5)
