"""Reading the config again in a running broker: SIGHUP (`systemctl reload hutch`) and `hutch ctl
reload` (server/control.py). CPython only: a board has neither signals nor a control socket.

    reloader = Reloader(runtime, args, opts)     # the options and settings the broker started with
    ok, lines = await reloader.reload()          # (False, [why]): the running config is kept

What takes effect:

- bridges, by name: one the file no longer has stops; a new one starts; one whose table changed
  (upstream, credentials, certificates, its source or destination, its limits) stops and starts
  again with the new table. A stopping up bridge first lets what it has in flight be confirmed
  (at most DRAIN_MS; it sends nothing new meanwhile): nothing is lost, and nothing is sent
  twice unless upstream confirms too slowly (then a hutch upstream drops the copies by their
  numbers, which the new link keeps: same name, same origin);
- users, their tags and permissions ([users], [permissions], a definitions file's users, and
  those `hutch ctl add-user` kept): connections already open get their user's new permissions,
  and those of a removed user are closed (server/open_logins.py);
- [[device]]s, by name: one the file no longer has is no longer polled; a new one is; one
  whose table changed starts again with the new table (server/devices/polling.py; its poll numbers go
  on);
- the [uplink] budget and windows (the bridges read them as they go: a bridge waiting for a
  window asks again at once);
- the TLS listeners' certificate files (ports/tls.py ServerTLS.reload);
- `disk_free_limit` (ports/disk_free.py: the watch's next look applies it), and
  `memory_high_watermark` (ports/memory_watch.py: likewise);
- `name`: what bridges stamp on what they forward from now on, and devices on their readings
  (a bridge's link keeps its connection name until it connects again).

Anything else that changed (listeners, the data folder, [limits], [mqtt]...) needs a restart:
said in one line, the rest applied. A config that does not load (a syntax error, a wrong key, a
certificate file that cannot be read, a bridge whose source exchange is missing) changes
nothing: the broker goes on with the config it runs, and the answer says why in one line.
"""

import asyncio

from ..ports.descriptors import fit_connections
from . import config, options
from .bridges.setup import bridge_tls_files, make_bridges, set_uplink, take_in_left_behind
from .open_logins import apply_users
from .runtime import StartError

DRAIN_MS = 5000  # at most this long for a stopping bridge's messages in flight to be confirmed
APPLIED = (
    "bridges",
    "devices",
    "uplink",
    "users",
    "user_origins",
    "definitions",
    "listeners",
    "disk_free_limit",
    "memory_high_watermark",
    "name",
)  # what a reload applies (listeners: TLS files only)


class Reloader:
    def __init__(self, runtime, args, opts):
        self.runtime = runtime
        self.args = args
        self.opts = opts
        self.lock = asyncio.Lock()

    def settings(self, fleet_documents=None):
        """The config file read again, as it would be reloaded (fleet_documents: a fleet
        member's documents in place of those it runs: server/fleet/agent.py); ConfigError."""
        return options.settings(self.args, fleet_documents)

    async def reload(self):
        """(True, [what changed, one line each]) or (False, [why nothing did])."""
        async with self.lock:
            try:
                new = options.settings(self.args)
                fit_connections(new["limits"])  # (as the start did: server/host.py)
                for bridge in new["bridges"]:
                    bridge_tls_files(bridge)
                self._check_bridges(new["bridges"])
                if new["devices"] and getattr(self.runtime, "devices", None) is None:
                    from .devices.polling import Devices  # (pymodbus missing: StartError, nothing changed)

                    self.runtime.devices = Devices(self.runtime, self.opts["data"])
            except (config.ConfigError, StartError, RecursionError) as e:
                line = "reload refused, the running config is kept: %s" % (
                    too_deep(e) if isinstance(e, RecursionError) else e.args[0]
                )
                self.runtime.log("error", line)
                return False, [line]
            said = []
            for listener in self.runtime.listeners:
                if listener.tls is not None:
                    listener.tls.reload()
            self._users(new, said)
            if new["uplink"] != self.opts.get("uplink"):  # (each bridge reads it as it goes)
                set_uplink(self.runtime, new["uplink"])
                said.append("uplink: budget and windows %s" % ("applied" if new["uplink"] else "removed"))
            await self._bridges(new["bridges"], said)
            said += take_in_left_behind(self.runtime, new["bridges"])
            devices = getattr(self.runtime, "devices", None)  # (None: no device ever configured)
            if devices is not None:
                said += await devices.apply(new["devices"])
            said += self._disk_free_limit(new["disk_free_limit"])
            said += self._memory_high_watermark(new["memory_high_watermark"])
            if new["name"] != self.runtime.broker.name:  # (what bridges and devices stamp from now on)
                said.append("name: %s (was %s)" % (new["name"], self.runtime.broker.name))
                self.runtime.broker.name = new["name"]
            restart = [
                key for key in sorted(new) if key not in APPLIED and _value(new[key]) != _value(self.opts.get(key))
            ]
            if _listening(new) != _listening(self.opts):
                restart.append("listeners")
            if restart:
                said.append("changed, applied at the next start: %s" % ", ".join(restart))
            self.opts = dict(new, args=self.opts.get("args"))
            if not said:
                said.append("nothing changed")
            for line in said:
                self.runtime.log("info", "reload: %s" % line)
            return True, said

    def _check_bridges(self, bridges):
        """StartError if a new or changed bridge cannot be set up here (what Bridge() would
        refuse once the old one is stopped)."""
        from ..core.bridge.machine import BridgeError
        from .bridges.driver import fits

        running = {bridge.machine.name: bridge.machine.settings for bridge in self.runtime.bridges}
        for settings in bridges:
            if running.get(settings["name"]) != settings:
                try:
                    fits(self.runtime.broker, settings)
                except BridgeError as e:
                    raise StartError(str(e), 2)

    def _disk_free_limit(self, limit):
        """The new disk_free_limit: the running watch's, a watch started, or the watch stopped
        (and publishers no longer blocked for it). What changed, as a line."""
        if limit == self.opts.get("disk_free_limit"):
            return []
        runtime = self.runtime
        watch = getattr(runtime, "disk_free", None)
        if watch is not None and limit:
            watch.limit = limit
        elif limit:
            from ..ports.disk_free import start_watch

            flow = runtime.broker.flow
            runtime.disk_free = start_watch(self.opts["data"], limit, flow, runtime.stop_event, runtime.log)
        elif watch is not None:
            watch.stop()
            runtime.disk_free = None
        return ["disk_free_limit: %s" % ("%d bytes" % limit if limit else "none")]

    def _memory_high_watermark(self, watermark):
        """The new memory_high_watermark: the running watch's, a watch started, or it stopped."""
        if watermark == self.opts.get("memory_high_watermark"):
            return []
        runtime = self.runtime
        watch = getattr(runtime, "memory_watch", None)
        if watch is not None:
            watch.stop()
            runtime.memory_watch = None
        if watermark:
            from ..ports.memory_watch import start_watch

            runtime.memory_watch = start_watch(watermark, runtime.broker.flow, runtime.stop_event, runtime.log)
        return ["memory_high_watermark: %s" % (runtime.memory_watch.limit if watermark else "none")]

    def _users(self, new, said):
        broker = self.runtime.broker
        old = broker.users
        users = new["users"]
        from .host import add_imported_users

        add_imported_users(self.runtime.status.folder, users, lambda *a: None)  # (said at start)
        if _users_key(users) == _users_key(old):
            return
        broker.users = users
        self.runtime.status.controller.config_users = new["user_origins"]  # (what hutch ctl may not change)
        closed = apply_users(broker)
        added = sorted(set(users.hashes) - set(old.hashes))
        removed = sorted(set(old.hashes) - set(users.hashes))
        said.append(
            "users: %d (%s)"
            % (
                len(users.hashes),
                ", ".join(
                    ["added " + ", ".join(added)] * bool(added)
                    + ["removed " + ", ".join(removed)] * bool(removed)
                    + ["permissions or passwords changed"] * (not added and not removed)
                    + ["%d connection%s of removed users closed" % (closed, "s" * (closed != 1))] * bool(closed)
                ),
            )
        )

    async def _bridges(self, wanted, said):
        runtime = self.runtime
        running = {bridge.machine.name: bridge for bridge in runtime.bridges}
        by_name = {settings["name"]: settings for settings in wanted}
        stopped, started, changed = [], [], []
        going = [bridge for name, bridge in running.items() if by_name.get(name) != bridge.machine.settings]
        await asyncio.gather(*(bridge.stop(DRAIN_MS) for bridge in going))  # (each drains at once)
        for bridge in going:
            name = bridge.machine.name
            runtime.broker.bridges.remove(bridge.machine)
            runtime.bridges.remove(bridge)
            (changed if name in by_name else stopped).append(name)
        fresh = [settings for settings in wanted if settings["name"] not in running or settings["name"] in changed]
        for settings in fresh:  # (one at a time: one that cannot start leaves the others running)
            try:
                bridge = make_bridges([settings], runtime, self.opts["data"])[0]
            except StartError as e:  # (what _check_bridges could not foresee)
                said.append("bridge %s not started: %s" % (settings["name"], e.args[0]))
                runtime.log("error", "reload: bridge %s not started: %s" % (settings["name"], e.args[0]))
                continue
            runtime.bridges.append(bridge)
            bridge.start()
            if bridge.machine.name not in changed:
                started.append(bridge.machine.name)
        for verb, names in (("stopped", stopped), ("started", started)):
            for name in names:
                said.append("bridge %s %s" % (name, verb))
        for name in changed:
            keys = _changed(running[name].machine.settings, by_name[name])
            said.append("bridge %s restarted with its new table (%s changed)" % (name, ", ".join(keys)))


def _users_key(users):
    """What a reload compares of two reads of the users: names, hashes, tags, the permissions as
    written (their compiled patterns are new objects each read), the anonymous login."""
    permissions = users.permissions
    if permissions is not None:
        permissions = {
            name: None if one is None else (one.patterns, sorted(one.topic_patterns.items()))
            for name, one in permissions.items()
        }
    return (users.hashes, users.tags, permissions, getattr(users, "anonymous", None))


def _changed(was, now):
    """The keys of a bridge's table that changed, by the config's names (uris: uri; tls: its
    certificates), but for its queue where it is the bridge's own (from a source exchange: its
    name follows from the bridge's and its classes)."""
    keys = sorted(key for key in set(was) | set(now) if was.get(key) != now.get(key))
    if was.get("source_exchange") is not None and now.get("source_exchange") is not None and "queue" in keys:
        keys.remove("queue")
    return ["uri" if key == "uris" else "certificates" if key == "tls" else key for key in keys]


def _value(setting):
    """A setting as compared between two reads of the config (Limits and the like by their fields)."""
    return vars(setting) if hasattr(setting, "__dict__") else setting


def _listening(opts):
    """What of the listeners a reload cannot change (their TLS files it re-reads)."""
    return [(one["bind"], one["port"], one.get("protocol"), one.get("tls") is not None) for one in opts["listeners"]]


def too_deep(e):
    """What a RecursionError out of the config's or the definitions' reader (server/config.py
    read, server/definitions.py read_file) says, in their words for a file that is not valid:
    one nested deeper than Python's recursion limit. Said by their CPython callers (`hutch
    serve`, a reload): those readers go onto boards, where MicroPython has no RecursionError."""
    said = "a file read is not valid"
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        path = tb.tb_frame.f_locals.get("path")
        if code.co_name == "read" and code.co_filename.endswith("/server/config.py"):
            said = "config file %s is not valid" % path
        elif code.co_name == "read_file" and code.co_filename.endswith("/server/definitions.py"):
            said = "definitions file %s is not JSON" % path
        tb = tb.tb_next
    return "%s: %s" % (said, e)
