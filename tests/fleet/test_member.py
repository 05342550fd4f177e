"""hutch/fleet/member.py: a member's decisions ("commit confirmed") driven step by step as the
agent drives them, each outcome's steps checked: kept, refused by the config, by the
pre-flight, by the reload, rolled back unconfirmed, a try cut short by a stop and resumed, and
the refusals said once. Plain functions: also run under MicroPython
(tests/micropython/test_fleet_micropython.py)."""

from hutch.fleet.member import CONFIRMING, IDLE, Member, newest

EMPTY = {"applied": {}, "keys": None, "failed": [], "last": None}
RAW = "[document] version 2, signed"


def _doc(version=2, target="group:pumps", keys=None):
    return {"version": version, "target": target, "keys": keys, "sections": {}}


def _words(steps):
    return [step[0] for step in steps]


def _runs_one():
    return dict(EMPTY, applied={"group:pumps": {"version": 1, "body": "b1", "raw": "r1"}})


def test_a_document_tried_then_kept_once_confirmed():
    member = Member(_runs_one(), clock=lambda: 1000.0)
    steps = member.take(_doc(), "b2", RAW)
    assert _words(steps) == ["write-pending", "check"]  # (written down before anything changes)
    pending = steps[0][1]
    assert pending["before"] == _runs_one() and pending["candidate"]["applied"]["group:pumps"]["version"] == 2
    assert steps[1][1]["group:pumps"]["body"] == "b2"
    assert _words(member.checked()) == ["preflight"]
    assert member.state == _runs_one()  # (nothing written yet)
    steps = member.tried()
    assert _words(steps) == ["write", "reload"] and steps[0][1]["applied"]["group:pumps"]["version"] == 2
    steps = member.reloaded()
    assert _words(steps) == ["say", "confirm"] and steps[1][1] == {"target": "group:pumps", "version": 2}
    assert member.phase == CONFIRMING
    steps = member.confirmed()
    assert _words(steps) == ["write", "clear-pending", "say", "changed"]
    assert member.state["last"] == {"target": "group:pumps", "version": 2, "outcome": "applied", "reason": None, "text": "applied and confirmed upstream", "time": 1000.0}  # fmt: skip
    assert member.running() == {"group:pumps": 2} and member.pending is None and member.phase == IDLE


def test_each_failure_goes_back_to_the_state_before_and_marks_the_version():
    for fail in ("checked", "tried", "reloaded", "unconfirmed"):
        member = Member(_runs_one())
        member.take(_doc(), "b2", RAW)
        for step in ("checked", "tried", "reloaded"):
            if step == fail:
                steps = getattr(member, step)("why " + step)
                break
            getattr(member, step)()
        else:
            steps = member.unconfirmed("why unconfirmed")
        reason = {"checked": "config", "tried": "preflight", "reloaded": "reload", "unconfirmed": "rolled back"}[fail]
        assert steps[0] == ("write", member.state) and steps[1] == ("clear-pending",)
        assert member.running() == {"group:pumps": 1} and member.failed() == [("group:pumps", 2)]
        assert member.state["last"]["reason"] == reason and member.state["last"]["text"] == "why " + fail
        assert "not kept (%s)" % reason in steps[2][2]
        if fail == "unconfirmed":  # (applied: the state before is reloaded)
            assert _words(steps)[-1] == "reload"
            assert "back to the configuration before version 2" in member.reloaded()[0][2]
        else:
            assert "reload" not in _words(steps)
        assert member.phase == IDLE and member.pending is None


def test_a_try_a_stop_cut_short_is_tried_again_first():
    member = Member(_runs_one())
    pending = member.take(_doc(), "b2", RAW)[0][1]
    resumed = Member(_runs_one(), pending)  # (the next start: pending.json as written)
    steps = resumed.resume()
    assert _words(steps) == ["say", "check"] and "was being tried when hutch stopped" in steps[0][2]
    assert steps[1][1] == pending["candidate"]["applied"]
    resumed.checked()
    resumed.tried()
    resumed.reloaded()
    resumed.unconfirmed("link down")  # (the uplink still blocked)
    assert resumed.failed() == [("group:pumps", 2)] and resumed.running() == {"group:pumps": 1}
    assert Member(_runs_one()).resume() == []


def test_refusals_are_said_once_and_change_nothing_else():
    member = Member(_runs_one())
    steps = member.refused("key", "signed by a key this gateway does not trust", "raw")
    assert _words(steps) == ["write", "say", "changed"] and member.state["last"]["reason"] == "key"
    assert member.running() == {"group:pumps": 1}
    assert member.refused("stale", "version 1 is not above 1", "r1") == []  # (the one it runs, read again)
    assert member.refused("failed", "failed before", "r9") == []  # (said when it failed)
    assert _words(member.refused("stale", "version 1 is not above 1", "an older one")) == ["write", "say", "changed"]


def test_a_document_that_names_keys_makes_them_the_trusted_ones_once_kept():
    member = Member(_runs_one())
    member.take(_doc(keys=["ed25519:new"]), "b2", RAW)
    assert member.state["keys"] is None
    for step in ("checked", "tried", "reloaded", "confirmed"):
        getattr(member, step)()
    assert member.state["keys"] == ["ed25519:new"]
    try:
        member.take(_doc(3), "b3", RAW)
        member.take(_doc(4), "b4", RAW)  # (one at a time)
        raise AssertionError("two tries at once")
    except ValueError:
        pass


def test_of_documents_read_together_only_each_target_s_newest_is_taken():
    read = [(_doc(3), "b3", "r3"), (_doc(5, "node:gw1"), "n5", "rn5"), (_doc(4), "b4", "r4"), (_doc(2), "b2", "r2")]
    assert newest(read) == [read[1], read[2]]
    assert newest([]) == []
