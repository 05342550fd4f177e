"""A gateway's health, from its snapshot (core/snapshot.py): ok, degraded or failing, and why.
What `hutch ctl health`, the status page and /metrics (hutch_health) say, for a person, a script
or an alert watching a fleet.

failing: what the gateway takes in is refused, or stays here:
  - publishers blocked (memory, the disk budget, the disk: core/flow.py);
  - a bridge with no link running, or no confirm from any node, for longer than its alarm_age
    (DOWN_S without one);
degraded: it works, and something needs a look:
  - a bridge with no link running, for less than that, or whose upstream blocks it;
  - a bridge's alarm raised (its backlog, oldest message or bytes past its thresholds);
  - a device down (it does not answer its polls);
  - the journal at JOURNAL_NEAR of its disk budget or more (publishers are blocked at 90 %).

A bridge waiting for its [uplink]'s window is as it should be. Sans-IO and MicroPython-clean:
loaded by what asks.
"""

OK, DEGRADED, FAILING = "ok", "degraded", "failing"
STATES = (OK, DEGRADED, FAILING)
DOWN_S = 300  # a bridge down this long, without an alarm_age of its own, is failing
JOURNAL_NEAR = 75  # percent of journal_max_bytes


def verdict(snap):
    """(state, [reasons]) of a snapshot: the failing reasons first."""
    failing, degraded = [], []
    if snap.get("blocked"):
        failing.append("publishers blocked: %s" % snap["blocked"])
    said = set()  # (a bridge's classes share its link: its state is said once)
    for bridge in snap.get("bridges", ()):
        name = bridge["name"].split(".")[0]
        down = bridge.get("down_s")
        if down is not None and name not in said:
            said.add(name)
            most = bridge.get("alarm_age") or DOWN_S
            state = bridge["state"]
            if state == "unconfirmed":
                state = "no confirms from any node"
            why = "bridge %s: %s for %s (last error: %s)" % (
                name, state, _duration(down), bridge.get("last_error") or "none",
            )  # fmt: skip
            (failing if down >= most else degraded).append(why)
        elif bridge["state"] == "blocked" and name not in said:
            said.add(name)
            degraded.append("bridge %s: blocked by upstream (its flow control)" % name)
        if bridge.get("alarm"):
            degraded.append("bridge %s: alarm: %s" % (bridge["name"], bridge["alarm"]))
    at = snap.get("at")
    for device in snap.get("devices", ()):
        if device["state"] == "down":
            since = ""
            if at is not None and device.get("since") is not None:
                since = " for %s" % _duration(max(0, at - device["since"]))
            degraded.append("device %s: down%s (%s)" % (device["name"], since, device.get("reason")))
    journal = snap.get("journal")
    if journal and journal.get("max_bytes") and journal["bytes"] * 100 >= journal["max_bytes"] * JOURNAL_NEAR:
        degraded.append(
            "journal: %d%% of its disk budget (%d of %d bytes, journal_max_bytes)"
            % (journal["bytes"] * 100 // journal["max_bytes"], journal["bytes"], journal["max_bytes"])
        )
    if failing:
        return FAILING, failing + degraded
    if degraded:
        return DEGRADED, degraded
    return OK, []


def _duration(seconds):
    if seconds < 120:
        return "%d s" % seconds
    if seconds < 7200:
        return "%d min" % (seconds // 60)
    return "%.1f h" % (seconds / 3600)
