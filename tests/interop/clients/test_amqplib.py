"""Node's amqplib against `hutch serve`.

Each test runs one script from tests/node with `node`, passing the broker's URL
as its argument. A script prints one JSON line with what it observed and ends
by itself: exit code 0 after a clean connection close, 1 when an operation
failed, 3 when it hung past its own timeout (NODE_SCRIPT_TIMEOUT_MS). The
assertions are here, on that JSON.
"""

import base64
import json
import os
import shutil
import subprocess

from paths import ROOT

NODE_DIR = os.path.join(ROOT, "tests", "node")
SCRIPT_TIMEOUT_MS = 15000


def node():
    path = shutil.which("node")
    assert path, "node is missing: install Node.js (the README's quick start needs it)"
    assert os.path.isdir(os.path.join(NODE_DIR, "node_modules", "amqplib")), (
        "amqplib is missing: run `make setup` (npm ci --prefix tests/node)"
    )
    return path


def run_node(script, url, expect_ok=True):
    env = dict(os.environ, NODE_SCRIPT_TIMEOUT_MS=str(SCRIPT_TIMEOUT_MS))
    try:
        result = subprocess.run(
            [node(), os.path.join(NODE_DIR, script), url],
            cwd=NODE_DIR,
            env=env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_MS / 1000 + 15,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError("%s did not stop by itself:\n%s\n%s" % (script, e.stdout, e.stderr))
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, "%s printed %d lines (exit %s):\n%s\n%s" % (
        script,
        len(lines),
        result.returncode,
        result.stdout,
        result.stderr,
    )
    report = json.loads(lines[0])
    if expect_ok:
        assert report["ok"] and result.returncode == 0, "%s failed (exit %s):\n%s\n%s" % (
            script,
            result.returncode,
            json.dumps(report, indent=1),
            result.stderr,
        )
    return report


def body(i):
    """The bytes of body(i) in tests/node/common.js."""
    return b"msg-%d:" % i + bytes((i * 7 + k) & 0xFF for k in range((i * 37) % 300))


def b64(data):
    return base64.b64encode(data).decode()


CHANNEL_CLOSED = {"on": "channel", "event": "close", "error": None}
CONNECTION_CLOSED = {"on": "connection", "event": "close", "error": None}


def closed_cleanly(report, events=(CHANNEL_CLOSED, CONNECTION_CLOSED)):
    """No 'error' event anywhere; the watched channels, then the connection, closed without an error."""
    assert report["events"] == list(events), report["events"]


def test_roundtrip(broker):
    report = run_node("roundtrip.js", broker.url)
    server = report["server"]
    assert server["product"] == "hutch"
    for capability in (
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "exchange_exchange_bindings",
        "connection.blocked",
        "authentication_failure_close",
        "per_consumer_qos",
    ):
        assert server["capabilities"].get(capability) is True, capability
    assert report["exchange"] == {"exchange": "node.direct"}
    assert report["queue"] == {"queue": "node.work", "messageCount": 0, "consumerCount": 0}
    assert report["bound"]
    named = report["serverNamed"]
    assert named["queue"].startswith("amq.gen-") and named["messageCount"] == 0, named
    assert report["written"]

    received = report["received"]
    assert [m["id"] for m in received] == [str(i) for i in range(200)]
    assert [m["body"] for m in received] == [b64(body(i)) for i in range(200)]
    assert not any(m["redelivered"] for m in received)

    first = report["first"]
    assert first["exchange"] == "node.direct" and first["routingKey"] == "work"
    assert first["deliveryTag"] == 1 and first["consumerTag"] == report["consumerTag"]
    assert first["redelivered"] is False
    props = first["properties"]
    assert props["contentType"] == "application/octet-stream"
    assert props["contentEncoding"] == "binary"
    assert props["headers"] == {
        "source": "amqplib",
        "n": 42,
        "big": 2**40,
        "ratio": 0.5,
        "flag": True,
        "nested": {"a": "b"},
        "list": [1, "two"],
    }
    assert props["correlationId"] == "corr-1" and props["replyTo"] == "reply-q"
    assert props["appId"] == "hutch-tests" and props["type"] == "reading" and props["userId"] == "guest"
    assert props["timestamp"] == 1700000000 and props["messageId"] == "0"
    assert props["deliveryMode"] == 1

    assert report["after"] == {"queue": "node.work", "messageCount": 0, "consumerCount": 0}
    assert report["deleted"] == {"messageCount": 0}
    closed_cleanly(report)
    assert "client closed the socket without connection.close" not in broker.log()


def test_confirm_channel(broker):
    report = run_node("confirms.js", broker.url)
    assert report["errors"] == []
    assert report["confirmed"] == 500 and report["confirmedBeforeWait"] == 500
    assert report["inOrder"]
    assert report["queued"] == 500
    # an unroutable mandatory message comes back first, then is confirmed (ack, not nack)
    assert report["seq"] == [
        {
            "what": "return",
            "replyCode": 312,
            "replyText": "NO_ROUTE",
            "exchange": "",
            "routingKey": "node.nowhere",
            "body": "lost",
        },
        {"what": "ack"},
    ]
    assert report["got"] == [b64(body(i)) for i in range(500)]
    closed_cleanly(report)


def test_prefetch_nack_get(broker):
    report = run_node("flow.js", broker.url)
    # prefetch 5: five deliveries and no more until an ack frees a slot
    assert report["prefetchDelivered"] == 5
    assert report["afterOneAck"] == 6
    assert report["prefetchBodies"] == ["p%d" % i for i in range(20)]
    assert report["prefetchTags"] == list(range(1, 21))
    # nack with requeue: the same message again, now marked redelivered
    assert report["nackRequeue"] == [
        {"body": "again", "redelivered": False, "tag": 21},
        {"body": "again", "redelivered": True, "tag": 22},
    ]
    # get on an empty queue, then get-ok with the count of messages left behind
    assert report["getEmpty"] is False
    assert report["get"] == [
        {"body": "g1", "messageCount": 2, "redelivered": False, "deliveryTag": 23},
        {"body": "g2", "messageCount": 1, "redelivered": False, "deliveryTag": 24},
        {"body": "g2", "messageCount": 1, "redelivered": True, "deliveryTag": 25},  # nacked with requeue
        {"body": "g3", "messageCount": 0, "redelivered": False, "deliveryTag": 26},
    ]
    assert report["getEmptyAfter"] is False
    assert report["afterNackDrop"] == 0
    # unacked deliveries go back to the queue, in order, redelivered, when their channel closes
    assert report["unacked"] == ["u1", "u2", "u3"]
    assert report["backAfterClose"] == [{"body": b, "redelivered": True} for b in ("u1", "u2", "u3")]
    closed_cleanly(report)


def test_topic_and_fanout_routing(broker):
    report = run_node("routing.js", broker.url)
    assert report["topic"] == {
        "node.t.star": ["sensor.kitchen.temp=0", "sensor.attic.temp=1"],
        "node.t.hash": [
            "sensor.kitchen.temp=0",
            "sensor.attic.temp=1",
            "sensor.kitchen.humidity=2",
            "sensor=3",
            "sensor.kitchen.temp.alarm=4",
        ],
        "node.t.alarm": ["sensor.kitchen.temp.alarm=4", "door.alarm=5", "alarm=6"],
        "node.t.exact": ["sensor.kitchen.temp=0"],
        "node.t.all": [
            "sensor.kitchen.temp=0",
            "sensor.attic.temp=1",
            "sensor.kitchen.humidity=2",
            "sensor=3",
            "sensor.kitchen.temp.alarm=4",
            "door.alarm=5",
            "alarm=6",
            "other.thing=7",
            "=8",
        ],
    }
    assert report["afterUnbind"] == {
        "node.t.star": ["sensor.x.temp=after-unbind"],
        "node.t.hash": ["sensor.x.temp=after-unbind"],
        "node.t.alarm": [],
        "node.t.exact": [],
        "node.t.all": [],
    }
    # fanout ignores the routing key, and every bound queue gets every message
    assert report["fanout"] == {"a": ["any.key=f1", "=f2"], "b": ["any.key=f1", "=f2"]}
    closed_cleanly(report)


def test_channel_errors_leave_the_connection_usable(broker):
    report = run_node("errors.js", broker.url)
    expected = {
        # case: (code, reply text, name of the failed operation in amqplib's message, or None: no reply expected)
        "checkQueue": (404, "NOT_FOUND - no queue 'node.missing' in vhost '/'", "QueueDeclare"),
        "checkExchange": (404, "NOT_FOUND - no exchange 'node.missing-ex' in vhost '/'", "ExchangeDeclare"),
        "redeclare": (
            406,
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'node.durable-q' in vhost '/': "
            "received 'false' but current is 'true'",
            "QueueDeclare",
        ),
        "reservedName": (
            403,
            "ACCESS_REFUSED - exchange name 'amq.node' contains reserved prefix 'amq.*'",
            "ExchangeDeclare",
        ),
        "bindMissingQueue": (404, "NOT_FOUND - no queue 'node.missing' in vhost '/'", "QueueBind"),
        "publishToMissingExchange": (404, "NOT_FOUND - no exchange 'node.missing-ex' in vhost '/'", None),
        "unknownDeliveryTag": (406, "PRECONDITION_FAILED - unknown delivery tag 1", None),
    }
    assert set(report["cases"]) == set(expected)
    for name, (code, text, operation) in expected.items():
        case = report["cases"][name]
        assert case["closed"], (name, case)
        assert len(case["errorEvents"]) == 1, (name, case)
        event = case["errorEvents"][0]
        assert event["code"] == code and ('with message "%s"' % text) in event["message"], (name, event)
        if operation is None:
            assert case["rejected"] is None, (name, case)
        else:
            assert case["rejected"]["code"] == code, (name, case)
            assert case["rejected"]["message"].startswith("Operation failed: %s; %d" % (operation, code)), (name, case)
            assert ('with message "%s"' % text) in case["rejected"]["message"], (name, case)
        # the connection survived: a new channel on it round-trips a message
        assert report["usable"][name] == name
    # only channel errors: the connection closed once, by the client, without an error
    closed_cleanly(report, [CONNECTION_CLOSED])
    assert "closing connection" not in broker.log()


def test_login_refused_with_403(broker):
    report = run_node("auth.js", broker.url)
    for attempt in (report["refused"], report["unknown"]):
        assert attempt is not None, report
        assert attempt["message"].startswith("Handshake terminated by server: 403 (ACCESS-REFUSED)"), attempt
        assert "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN" in attempt["message"], attempt
    assert report["events"] == []
