"""The broker's counters (core/counters.py), bumped where things happen, and their names in the
snapshot (core/snapshot.py)."""

from harness import names, opened

from hutch.codec import spec
from hutch.core import counters
from hutch.core.snapshot import NAMES, snapshot


def test_each_counter_has_its_name_in_the_snapshot():
    constants = {}
    for name in dir(counters):
        if name.isupper() and name != "COUNT":
            constants[name] = getattr(counters, name)
    assert sorted(constants.values()) == list(range(counters.COUNT)) == list(range(len(NAMES)))
    for name, value in constants.items():
        assert NAMES[value] == name.lower(), name


def test_a_client_s_work_is_counted():
    client = opened()
    client.queue(1, b"q")
    client.call(1, spec.CONFIRM_SELECT, (False,))
    for _ in range(3):
        client.publish(1, b"", b"q", b"x")
    client.publish(1, b"", b"nowhere", b"x", mandatory=True)  # unroutable: returned
    client.get(1, b"q", no_ack=True)
    events = client.get(1, b"q")
    assert names(events) == ["basic.get-ok"]
    client.ack(1, events[0].args[0])
    client.get(1, b"q", no_ack=False)  # left unacked
    client.queue(1, b"empty")
    assert names(client.get(1, b"empty", no_ack=True)) == ["basic.get-empty"]
    counted = snapshot(client.broker)["counters"]
    assert counted["received"] == 4 and counted["received_confirm"] == 4
    assert (counted["routed"], counted["unroutable"], counted["returned"]) == (3, 1, 1)
    assert counted["confirmed"] == 4
    assert (counted["delivered_get_auto_ack"], counted["delivered_get_manual_ack"]) == (1, 2)
    assert (counted["acknowledged"], counted["get_empty"]) == (1, 1)
    assert (counted["channels_opened"], counted["connections_opened"]) == (1, 1)
    queue = {q["name"]: q for q in snapshot(client.broker)["queues"]}["q"]
    assert (queue["published"], queue["delivered"], queue["acknowledged"]) == (3, 3, 1)


def test_the_broker_s_own_counters_are_labelled_as_its_0_9_1_connections_are():
    from hutch.amqp091.connection import Connection
    from hutch.core.snapshot import BROKER_LABEL

    assert Connection.metrics_label == BROKER_LABEL
