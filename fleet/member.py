"""A fleet member's decisions, sans-IO: "commit confirmed" as a state machine. It holds what the
member runs (fleet/state.json's state) and what it is trying (pending.json's); fed what came of
each step, it says the next ones, which server/fleet/agent.py does (the files, the reload, the
second connections, the status) and answers. Runs under MicroPython too: its tests do.

    member = Member(state, pending)            # pending: a try a stop cut short, or None
    steps = member.resume()                    # at a start (nothing if none was pending)
    steps = member.take(doc, body, raw)        # a document fleet/document.py checked
    steps = member.refused(reason, text, raw)  # or one it refused
    steps = member.checked(why)                # then: the whole config it makes (why: None, or
    steps = member.tried(why)                  # what was wrong), the pre-flight, the reload,
    steps = member.reloaded(why)               # and whether its status was confirmed upstream
    steps = member.confirmed() / member.unconfirmed(why)

The steps, in order, each a tuple:

    ("write-pending", pending)   write down the try (synced) before anything changes
    ("check", applied)           read the whole config with these documents; answer checked()
    ("preflight",)               try the upstreams it changes; answer tried()
    ("write", state)             the state the member runs now (synced)
    ("reload",)                  apply it; answer reloaded()
    ("confirm", pending)         send a status saying it is applied and wait for upstream's
                                 confirm, confirm_within at most; answer confirmed() or
                                 unconfirmed()
    ("clear-pending",)           the try is over
    ("say", level, text)         one log line
    ("changed",)                 what a status says changed: one goes soon
"""

IDLE, CHECKING, TRYING, RELOADING, CONFIRMING = "idle", "checking", "trying", "reloading", "confirming"


def newest(found):
    """Of documents read together ((document, body, signed text), as a connect reads each
    target's last ones), the newest of each target, in the order they came: an older one is
    never applied after it, nor instead of it."""
    best = {}
    for item in found:
        target = item[0]["target"]
        if target not in best or item[0]["version"] > best[target][0]["version"]:
            best[target] = item
    return [item for item in found if best[item[0]["target"]] is item]


def event(target, version, outcome, reason, text, now=None):
    """What the member last did with a document (a status's `last`)."""
    return {"target": target, "version": version, "outcome": outcome, "reason": reason, "text": text, "time": now}


class Member:
    def __init__(self, state, pending=None, clock=None):
        self.state = state  # {"applied": {target: {version, body, raw}}, "keys", "failed", "last"}
        self.pending = pending  # {"target", "version", "candidate": state, "before": state}, or None
        self.phase = IDLE
        self.clock = clock  # (a function: seconds since the epoch, for the events' time)
        self.rolling_back = None  # the version whose state before is being reloaded

    def running(self):
        """{target: the version it runs}."""
        return {target: entry["version"] for target, entry in self.state["applied"].items()}

    def failed(self):
        return [tuple(pair) for pair in self.state["failed"]]

    def _event(self, *args):
        return event(*args, now=self.clock() if self.clock is not None else None)

    def resume(self):
        """A start: the try a stop cut short, tried again first."""
        if self.pending is None:
            return []
        self.phase = CHECKING
        pending = self.pending
        return [
            (
                "say",
                "warning",
                "fleet: version %d for %s was being tried when hutch stopped: trying it again"
                % (pending["version"], pending["target"]),
            ),  # fmt: skip
            ("check", pending["candidate"]["applied"]),
        ]

    def refused(self, reason, text, raw):
        """A document not taken: said once (the one it runs, or one that failed here, read
        again: said before)."""
        runs = any(entry.get("raw") == raw for entry in self.state["applied"].values())
        if (reason == "stale" and runs) or reason == "failed":
            return []
        self.state = dict(self.state, last=self._event(None, None, "refused", reason, text))
        return [("write", self.state), ("say", "warning", "fleet: document refused (%s): %s" % (reason, text)), ("changed",)]  # fmt: skip

    def take(self, doc, body, raw):
        """A checked document (fleet/document.py checked()'s), its body and its signed text:
        written down as pending, then its whole config read."""
        if self.phase != IDLE:
            raise ValueError("a document while another is being tried (%s)" % self.phase)
        before = self.state
        applied = dict(before["applied"])
        applied[doc["target"]] = {"version": doc["version"], "body": body, "raw": raw}
        candidate = dict(before, applied=applied)
        if doc["keys"] is not None:
            candidate["keys"] = doc["keys"]
        self.pending = {"target": doc["target"], "version": doc["version"], "candidate": candidate, "before": before}
        self.phase = CHECKING
        return [("write-pending", self.pending), ("check", applied)]

    def checked(self, why=None):
        if why is not None:
            return self._fail("config", why)
        self.phase = TRYING
        return [("preflight",)]

    def tried(self, why=None):
        if why is not None:
            return self._fail("preflight", why)
        self.phase = RELOADING
        self.state = self.pending["candidate"]
        return [("write", self.state), ("reload",)]

    def reloaded(self, why=None):
        if self.rolling_back is not None:  # (the state before, back)
            version, self.rolling_back = self.rolling_back, None
            if why is None:
                return [("say", "warning", "fleet: back to the configuration before version %d" % version)]
            return [("say", "error", "fleet: the configuration before version %d was not reloaded: %s" % (version, why))]  # fmt: skip
        if why is not None:  # (the reload refused it: the running config is kept)
            return self._fail("reload", why)
        pending = self.pending
        self.phase = CONFIRMING
        return [
            (
                "say",
                "info",
                "fleet: version %d for %s applied; kept once confirmed upstream"
                % (pending["version"], pending["target"]),
            ),  # fmt: skip
            ("confirm", {"target": pending["target"], "version": pending["version"]}),
        ]

    def confirmed(self):
        pending = self.pending
        target, version = pending["target"], pending["version"]
        self.state = dict(pending["candidate"], last=self._event(target, version, "applied", None, "applied and confirmed upstream"))  # fmt: skip
        self.pending, self.phase = None, IDLE
        return [
            ("write", self.state),
            ("clear-pending",),
            ("say", "info", "fleet: version %d for %s confirmed upstream: kept" % (version, target)),
            ("changed",),
        ]

    def unconfirmed(self, why):
        version = self.pending["version"]
        steps = self._fail("rolled back", why)
        self.rolling_back = version
        return steps + [("reload",)]

    def _fail(self, reason, text):
        """Back to the state before, the version marked failed (never applied again), said."""
        pending = self.pending
        target, version, before = pending["target"], pending["version"], pending["before"]
        self.state = dict(before, failed=before["failed"] + [[target, version]])
        self.state["last"] = self._event(target, version, "failed", reason, text)
        self.pending, self.phase = None, IDLE
        return [
            ("write", self.state),
            ("clear-pending",),
            ("say", "error", "fleet: version %d for %s not kept (%s): %s" % (version, target, reason, text)),
            ("changed",),
        ]
