"""A gateway's health (core/health.py) from its snapshot: its rules one by one, on the snapshot of
a broker driven in-process (no socket, no clock), and on the parts of a snapshot each rule
reads."""

from harness import opened

from hutch.core.health import DEGRADED, FAILING, OK, verdict
from hutch.core.snapshot import snapshot


def bridge(name="up", state="running", down_s=None, alarm=None, alarm_age=None, last_error=None):
    return {
        "name": name,
        "state": state,
        "down_s": down_s,
        "alarm": alarm,
        "alarm_age": alarm_age,
        "last_error": last_error,
    }


def test_a_quiet_broker_is_ok():
    client = opened()
    client.queue(1, b"q")
    assert verdict(snapshot(client.broker)) == (OK, [])


def test_publishers_blocked_is_failing_with_the_reason_of_now():
    client = opened()
    client.broker.flow.set_alarm("disk free", "low on disk: 1000 bytes free for the data folder")
    state, reasons = verdict(snapshot(client.broker))
    assert state == FAILING
    assert reasons == ["publishers blocked: low on disk: 1000 bytes free for the data folder"]


def test_a_bridge_down_is_degraded_then_failing_past_its_alarm_age():
    down = bridge(state="backoff", down_s=42, last_error="amqp://up/: connection refused")
    assert verdict({"bridges": [down]}) == (
        DEGRADED,
        ["bridge up: backoff for 42 s (last error: amqp://up/: connection refused)"],
    )
    down["down_s"] = 301  # past the default of 300 s
    assert verdict({"bridges": [down]})[0] == FAILING
    down["alarm_age"] = 600  # its own alarm_age: failing from then
    assert verdict({"bridges": [down]})[0] == DEGRADED
    down["down_s"] = 7200
    assert verdict({"bridges": [down]}) == (
        FAILING,
        ["bridge up: backoff for 2.0 h (last error: amqp://up/: connection refused)"],
    )


def test_a_bridge_s_classes_say_their_link_once_and_each_its_alarm():
    classes = [
        bridge("cloud.alarms", "connecting", 10),
        bridge("cloud.telemetry", "connecting", 10, alarm="backlog 5000 messages (alarm_backlog 1000)"),
    ]
    assert verdict({"bridges": classes}) == (
        DEGRADED,
        [
            "bridge cloud: connecting for 10 s (last error: none)",
            "bridge cloud.telemetry: alarm: backlog 5000 messages (alarm_backlog 1000)",
        ],
    )
    assert verdict({"bridges": [bridge(state="running"), bridge("w", "waiting")]}) == (OK, [])
    assert verdict({"bridges": [bridge(state="blocked")]}) == (
        DEGRADED,
        ["bridge up: blocked by upstream (its flow control)"],
    )


def test_a_device_down_and_a_journal_near_its_budget_are_degraded():
    snap = {
        "at": 1000.0,
        "devices": [
            {"name": "meter-1", "state": "down", "since": 700.0, "reason": "timeout: no answer"},
            {"name": "meter-2", "state": "up", "since": 10.0, "reason": None},
        ],
        "journal": {"bytes": 800, "max_bytes": 1000},
    }
    assert verdict(snap) == (
        DEGRADED,
        [
            "device meter-1: down for 5 min (timeout: no answer)",
            "journal: 80% of its disk budget (800 of 1000 bytes, journal_max_bytes)",
        ],
    )
    snap["journal"]["bytes"] = 700
    snap["devices"] = snap["devices"][1:]
    assert verdict(snap) == (OK, [])
    # failing first, then what is degraded
    snap["blocked"] = "low on memory"
    snap["bridges"] = [bridge(state="backoff", down_s=5)]
    assert verdict(snap) == (
        FAILING,
        ["publishers blocked: low on memory", "bridge up: backoff for 5 s (last error: none)"],
    )
