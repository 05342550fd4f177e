"""The metrics port (`--metrics-port P`, `[metrics] bind, port`): Prometheus metrics and the
status page, read-only, from one snapshot of the broker (core/snapshot.py) taken per request.

    GET /                    the status page (ports/status_page.py): no external assets
    GET /api/overview        what the page shows, as JSON: the snapshot, the process, the health
    GET /metrics             RabbitMQ's series, aggregated (ports/metrics.py)
    GET /metrics/per-object  ... with each queue's {vhost, queue} labels, and hutch's per stream

When the broker's users come from its config (a [users] table or a definitions file), every
request needs HTTP basic auth as a user tagged `monitoring` or `administrator`, as RabbitMQ's
management and Prometheus plugins ask; with no users configured (guest alone) it needs none.
Loaded only when the port is configured, on a board as on a host.
"""

import binascii
import json
import os
import sys

from ..core import snapshot as broker_snapshot
from ..ports import metrics
from ..ports.http import HttpListener
from .runtime import StartError

TAGS = ("monitoring", "administrator")
TEXT = "text/plain; version=0.0.4; charset=utf-8"
JSON = "application/json"
CHALLENGE = ('WWW-Authenticate: Basic realm="hutch"',)


class Monitoring:
    def __init__(self, broker, auth_required, runtime=None):
        self.broker = broker
        self.auth_required = auth_required
        self.runtime = runtime  # (its disk watch's figures, if it has one)

    def handle(self, path, headers):
        """(status, content type, body, extra header lines) for a GET of path."""
        if self.auth_required:
            refusal = self._refused(headers.get("authorization"))
            if refusal is not None:
                return 401, "text/plain; charset=utf-8", refusal.encode() + b"\n", CHALLENGE
        path = path.split("?", 1)[0]
        if path == "/":
            from ..ports.status_page import PAGE

            return 200, "text/html; charset=utf-8", PAGE, ()
        # (each connection's record for the page's table; /metrics counts them only)
        snap = broker_snapshot.snapshot(self.broker, each_connection=path == "/api/overview")
        if path == "/metrics" or path == "/metrics/per-object":
            body = metrics.render(snap, process_figures(self.runtime), per_object=path.endswith("per-object"))
            return 200, TEXT, body.encode(), ()
        if path == "/api/overview":
            # at_ms: the wall clock (epoch ms) the snapshot was taken at, as the snapshot's own
            # times are (a device's since, a message's arrival): the page's ages and rates read it
            from ..core.health import verdict

            broker = self.broker
            state, reasons = verdict(snap)
            overview = {
                "broker": snap,
                "process": process_figures(self.runtime),
                "node": self.node(),
                "at_ms": broker.now + broker.wall_offset,
                "health": {"state": state, "reasons": reasons},  # (core/health.py: hutch ctl health's)
            }
            return 200, JSON, json.dumps(overview).encode(), ()
        return 404, "text/plain; charset=utf-8", b"not found\n", ()

    def node(self):
        """What the page's heading says: the machine's name, hutch's version, the uptime."""
        from ..core.broker import VERSION

        try:
            host = os.uname().nodename
        except AttributeError:  # (a board: no uname)
            host = sys.platform
        broker = self.broker  # (its uptime on the monotonic clock: a wall clock set moves it not)
        return {"host": host, "version": VERSION, "uptime_s": (broker.now - broker.started) // 1000}

    def _refused(self, authorization):
        """None for a user who may look, else why not (said to the client, who knows the user)."""
        if not authorization or not authorization.startswith("Basic "):
            return "log in as a user tagged monitoring or administrator"
        try:
            user, _, password = binascii.a2b_base64(authorization[6:].strip()).decode().partition(":")
        except (ValueError, UnicodeError):
            return "malformed basic credentials"
        users = self.broker.users
        if users.check(user, password, True) is not None:
            return "wrong user name or password"
        if not any(tag in TAGS for tag in users.tags.get(user, ())):
            return "user '%s' is not tagged monitoring or administrator" % user
        return None


def process_figures(runtime=None):
    """What the snapshot cannot know: the process's memory and descriptors (Linux), or a board's
    heap (MicroPython); and the data folder's free disk, where it is watched (ports/disk_free.py)."""
    disk = getattr(runtime, "disk_free", None)
    figures = {} if disk is None else disk.figures()
    memory = getattr(runtime, "memory_watch", None)
    if memory is not None:
        figures.update(memory.figures())
    if sys.implementation.name == "micropython":
        import gc

        figures["heap_free_bytes"] = gc.mem_free()
        figures["heap_used_bytes"] = gc.mem_alloc()
        return figures
    import os

    from ..ports.memory_watch import resident_bytes  # pyright: ignore[reportMissingImports] (host only)

    try:
        figures["resident_memory_bytes"] = resident_bytes()
        figures["open_fds"] = len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        pass  # not Linux: the figures are left out
    return figures


def users_configured(users):
    """Whether the config names users ([users], a definitions file): then a request logs in.
    The built-in guest alone (no users in the config) needs no login, as it needs none for AMQP
    from this machine."""
    from ..core.auth import hash_password

    default_guest = hash_password("guest", b"hutc")  # core/auth.py Users' own, without a config
    return set(users.hashes) != {"guest"} or users.hashes["guest"] != default_guest


async def start(runtime, bind, port):
    """The metrics port (server/options.py checked bind and port): a listener among the others
    (ports/http.py), stopped with them. StartError (exit 1) if its port cannot be had."""
    handle = Monitoring(runtime.broker, users_configured(runtime.broker.users), runtime).handle
    listener = HttpListener(runtime, handle, bind, port)
    try:
        await listener.start()
    except OSError as e:
        for opened in runtime.listeners:
            opened.close()
            await opened.abort()
        raise StartError("cannot listen on %s:%d: %s" % (bind, port, getattr(e, "strerror", None) or e), 1)
    runtime.listeners.append(listener)
    runtime.log("info", "serving metrics and the status page on http://%s:%d/" % (bind, port))
