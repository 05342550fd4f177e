"""A fleet member's agent: the I/O of hutch/fleet/member.py's decisions. It takes a document the
link read, checks it (hutch/fleet/document.py), and does each step the member says ("commit
confirmed"): the try written down as pending (fleet/pending.json, synced), the whole config it
makes read and checked, the upstreams it changes tried with second connections
(server/fleet/preflight.py), the reload (server/reload.py), a status saying it is applied sent
and its confirm awaited for confirm_within at most; then kept, or the state before reloaded and
the version marked failed. A start that finds a try pending does it again first. Status goes up
every status_interval, and a moment after each change.
"""

import asyncio
import json
import time

from ...core.broker import VERSION
from ...fleet.document import Refused, checked, key_bytes, key_text, verified
from ...fleet.member import Member, newest
from ..config import SECTIONS, ConfigError
from .state import State

SETTLE = 1.0  # seconds a change waits before its status goes (changes close together: one status)
OFFLINE_WAIT = 2.0  # seconds a stopping member waits for its "offline" status to be confirmed


class Agent:
    def __init__(self, runtime, settings, data_folder):
        self.runtime = runtime
        self.settings = settings
        self.state = State(data_folder)
        self.log = runtime.log
        self.link = None
        self.link_up = False
        self.link_said = None
        self.inbox = asyncio.Queue()
        self.seq = 0  # the newest status built
        self.confirmed = 0  # the newest status upstream confirmed
        self.confirmed_event = asyncio.Event()
        self.changed = asyncio.Event()
        self.started = time.monotonic()  # (its uptime: a wall clock set moves it not)
        self.tasks = []
        self.member = None  # (hutch/fleet/member.py's: what it runs and tries, once started)
        self.candidate = None  # the settings a document being tried makes

    # -- the link's side (called on the loop, through call_soon_threadsafe)

    def document(self, raw):
        self.inbox.put_nowait(raw)

    def link_changed(self, up, said):
        if up != self.link_up or (not up and said != self.link_said):
            self.log("info" if up else "warning", "fleet: link %s (%s)" % ("up" if up else "down", said))
        self.link_up, self.link_said = up, said
        if up:
            self.changed.set()

    def status_confirmed(self, seq):
        self.confirmed = max(self.confirmed, seq)
        self.confirmed_event.set()

    # -- running

    async def start(self):
        from .link import Link

        loop = asyncio.get_running_loop()
        self.link = Link(self.settings, loop, self, self.log)
        self.link.start()
        self.tasks = [asyncio.ensure_future(self._documents()), asyncio.ensure_future(self._status_loop())]

    async def stop(self):
        """Its last word, offline (given a moment to be confirmed), then the link closed. (A try
        under way stays pending: the next start does it again.)"""
        for task in self.tasks:  # (first: no periodic status may follow the last word)
            task.cancel()
        if self.link is not None:
            if self.link_up:
                seq = self._status_now(state="offline")
                await self._confirmed(seq, OFFLINE_WAIT)
            self.link.stop()

    async def _documents(self):
        current = self.state.read()
        self.member = Member(current, self.state.pending(), time.time)
        await self._do(self.member.resume())  # (a try a stop cut short: again, first)
        while True:
            raws = [await self.inbox.get()]
            while not self.inbox.empty():  # (read together, as at a connect: each target's newest only)
                raws.append(self.inbox.get_nowait())
            try:
                found = []
                for raw in raws:
                    taken = self._checked(raw)
                    if isinstance(taken, list):
                        await self._do(taken)  # (a refusal, said)
                    else:
                        found.append(taken)
                for doc, body, raw in newest(found):
                    await self._do(self.member.take(doc, body, raw))
            except Exception as e:  # (one document's trouble never ends the agent)
                self.log("error", "fleet: a document could not be handled: %r" % (e,))

    def _checked(self, raw):
        """(document, body, signed text) of a document that passes fleet/document.py's checks,
        or the member's steps for one refused."""
        member = self.member
        keys = member.state["keys"]
        trusted = [key_bytes(key) for key in keys] if keys is not None else self.settings["keys"]
        try:
            body = verified(raw, trusted)
            doc = checked(body, self.settings["node"], self.settings["groups"], member.running(), member.failed(), time.time(), SECTIONS)  # fmt: skip
        except Refused as e:
            return member.refused(e.reason, e.text, raw.decode(errors="replace"))
        return doc, body.decode(), raw.decode()

    async def _do(self, steps):
        """The member's steps done, in order, each answer's steps after them."""
        steps = list(steps)
        while steps:
            step = steps.pop(0)
            steps += await getattr(self, "_" + step[0].replace("-", "_"))(*step[1:]) or []

    async def _write(self, state):
        self.state.write(state)

    async def _write_pending(self, pending):
        self.state.set_pending(pending)  # (synced before anything changes)

    async def _clear_pending(self):
        self.state.clear_pending()

    async def _say(self, level, text):
        self.log(level, text)

    async def _changed(self):
        self.changed.set()

    async def _check(self, applied):
        try:
            self.candidate = self.runtime.reloader.settings(applied)  # (the whole config it makes)
        except ConfigError as e:  # (in the reload's words)
            return self.member.checked(e.args[0])
        return self.member.checked()

    async def _preflight(self):
        from .preflight import PreflightError, preflight

        try:
            await preflight(self.runtime, self.candidate)
        except PreflightError as e:
            return self.member.tried(e.args[0])
        return self.member.tried()

    async def _reload(self):
        ok, lines = await self.runtime.reloader.reload()
        return self.member.reloaded(None if ok else lines[0])

    async def _confirm(self, pending):
        within = self.settings["confirm_within"]
        if await self._confirmed(self._status_now(pending=pending), within):
            return self.member.confirmed()
        link = "up" if self.link_up else "down: %s" % self.link_said
        return self.member.unconfirmed("no status confirmed upstream within %d s (link %s)" % (within, link))

    async def _confirmed(self, seq, within):
        deadline = time.monotonic() + within
        while not (self.link_up and self.confirmed >= seq):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.confirmed_event.clear()
            try:  # (a status the link could not send waits in it, and goes when it is up)
                await asyncio.wait_for(self.confirmed_event.wait(), min(left, 1.0))
            except asyncio.TimeoutError:
                pass
        return True

    # -- status

    def status(self, pending=None, state="online"):
        """The status that goes up: who this member is, what it runs, and how it is."""
        import shutil

        current = self.member.state if self.member is not None else self.state.read()
        from ...core.snapshot import snapshot

        now = snapshot(self.runtime.broker, each_connection=False)
        bridges = [
            {key: bridge.get(key) for key in ("name", "direction", "state", "backlog", "oldest_age_s", "last_error")}
            for bridge in now["bridges"]
        ]
        try:
            disk_free = shutil.disk_usage(self.state.folder.rsplit("/", 1)[0]).free
        except OSError:
            disk_free = None
        last = current["last"]
        errors = [bridge["last_error"] for bridge in bridges if bridge["last_error"] and bridge["state"] != "running"]
        return {
            "node": self.settings["node"],
            "groups": self.settings["groups"],
            "hutch": VERSION,
            "state": state,  # online; offline: the last word of a member that stops
            "time": time.time(),
            "uptime": round(time.monotonic() - self.started),
            "interval": self.settings["status_interval"],
            "config": {
                "applied": {target: entry["version"] for target, entry in current["applied"].items()},
                "pending": pending,
                "failed": current["failed"],
                "last": last,
                "keys": current["keys"] or [key_text(key) for key in self.settings["keys"]],
            },
            "bridges": bridges,
            "devices": {
                "answering": sorted(d["name"] for d in now["devices"] if d["state"] == "up"),
                "silent": sorted(d["name"] for d in now["devices"] if d["state"] != "up"),
            },
            "disk_free": disk_free,
            "blocked": now["blocked"],
            "last_error": errors[0] if errors else last["text"] if last and last["outcome"] != "applied" else None,
        }

    def _status_now(self, pending=None, state="online"):
        self.seq += 1
        body = json.dumps(self.status(pending, state), sort_keys=True).encode()
        self.link.send_status(self.seq, body)
        return self.seq

    async def _status_loop(self):
        interval = self.settings["status_interval"]
        while True:
            try:
                await asyncio.wait_for(self.changed.wait(), interval)
                await asyncio.sleep(SETTLE)  # (what changes together goes up together)
            except asyncio.TimeoutError:
                pass
            self.changed.clear()
            if self.member is not None and self.member.pending is None:  # (a try sends its own)
                self._status_now()
