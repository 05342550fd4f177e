"""Permissions, hutch against the run's RabbitMQ (3.10.8): one definitions file loaded into both
(`hutch serve --definitions`, `rabbitmqctl import_definitions`), every row of RabbitMQ's
method/permission table done by the same users on both, and a few hundred seeded random
(pattern, name) pairs; each observation is (reply code, reply text), and they must be equal."""

import json
import os
import random
import re
import subprocess

import pika
import pytest
from brokers import BIN, RunningBroker, delete_users, wait_until
from differential import MARKS, fresh, same_on_both
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAccessDeniedError,
    ProbableAuthenticationError,
)

pytestmark = MARKS

HUTCH = os.path.join(BIN, "hutch")
PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
SEED = 20261124


def definitions(prefix, fuzz):
    """alice: her own names only (and the default exchange); bob: everything, with topic
    permissions on amq.topic; carol: no permissions at all; fuzz users: one random pattern each,
    for configure, write and read alike."""
    p = re.escape(prefix)
    users = [{"name": prefix + name, "password": PASSWORDS[name], "tags": []} for name in PASSWORDS]
    permissions = [
        {"user": prefix + "alice", "vhost": "/", "configure": "^%salice-.*" % p,
         "write": "^(%salice-.*|amq\\.default)$" % p, "read": "^%salice-.*" % p},
        {"user": prefix + "bob", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"},
    ]  # fmt: skip
    for index, pattern in enumerate(fuzz):
        name = "%sfuzz-%d" % (prefix, index)
        users.append({"name": name, "password": "fuzz", "tags": []})
        permissions.append({"user": name, "vhost": "/", "configure": pattern, "write": pattern, "read": pattern})
    return {
        "users": users,
        "vhosts": [{"name": "/"}],
        "permissions": permissions,
        "topic_permissions": [
            {
                "user": prefix + "bob",
                "vhost": "/",
                "exchange": "amq.topic",
                "write": "^sensors\\.bob\\..*",
                "read": "^sensors\\..*",
            },
        ],  # fmt: skip
        "exchanges": [
            {
                "name": prefix + "ex.sensors",
                "vhost": "/",
                "type": "topic",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            },
            {
                "name": prefix + "alice-x",
                "vhost": "/",
                "type": "fanout",
                "durable": True,
                "auto_delete": False,
                "internal": False,
                "arguments": {},
            },
        ],  # fmt: skip
        "queues": [
            {"name": prefix + "q.readings", "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}},
        ],
        "bindings": [
            {
                "source": prefix + "ex.sensors",
                "vhost": "/",
                "destination": prefix + "q.readings",
                "destination_type": "queue",
                "routing_key": "sensors.#",
                "arguments": {},
            },
        ],  # fmt: skip
    }


def patterns_and_names(prefix, count=30, names_each=10):
    """Seeded random permission patterns, and names to try each on: literals, classes,
    alternatives, anchors, dots and stars over a small alphabet, all under the run's prefix."""
    rng = random.Random(SEED)
    atoms = ["a", "b", "-", "\\.", ".", ".*", "[ab]", "[^a]", "(a|b)", "b+", "a?", "x"]
    patterns = []
    for _ in range(count):
        body = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 4)))
        shape = rng.choice(["%s", "^%s", "%s$", "^%s$", "^" + re.escape(prefix) + "%s"])
        patterns.append("" if rng.random() < 0.08 else shape % body)
    alphabet = "ab-.x"
    names = [
        [prefix + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(names_each)]
        for _ in range(count)
    ]
    return patterns, names


def url(target, user, password):
    return pika.ConnectionParameters(
        target.host, target.port, credentials=pika.PlainCredentials(user, password), socket_timeout=10
    )


def outcome(error):
    code = getattr(error, "reply_code", None)
    text = getattr(error, "reply_text", None)
    if code is None and error.args:
        code, text = error.args[0], error.args[1] if len(error.args) > 1 else None
    if isinstance(text, str):
        text = re.sub(r"amq\.gen-[\w-]+", "amq.gen-*", text)  # server-named queues differ
    return (code, text)


def attempt(target, user, password, action):
    """action(channel) on a fresh connection as user: ("ok",) or (code, text) of what closed."""
    try:
        connection = pika.BlockingConnection(url(target, user, password))
    except ConnectionClosedByBroker as e:
        return outcome(e)
    except ProbableAccessDeniedError as e:
        return ("refused at login", str(e))
    try:
        channel = connection.channel()
        action(channel)
        return ("ok",)
    except (ChannelClosedByBroker, ConnectionClosedByBroker) as e:
        return outcome(e)
    finally:
        if connection.is_open:
            connection.close()


def publish(exchange, key):
    def action(channel):
        channel.confirm_delivery()
        channel.basic_publish(exchange, key, b"x")

    return action


def rows(prefix):
    """The method/permission table of RabbitMQ's access-control guide, and its edges."""
    a = prefix + "alice-"
    alice, bob, carol = prefix + "alice", prefix + "bob", prefix + "carol"
    readings, sensors = prefix + "q.readings", prefix + "ex.sensors"
    return [
        ("alice declares her queue", alice, lambda ch: ch.queue_declare(a + "q")),
        ("alice declares bob's queue", alice, lambda ch: ch.queue_declare(prefix + "bob-q")),
        ("alice declares a server-named queue", alice, lambda ch: ch.queue_declare("")),
        ("alice passively declares a queue", alice, lambda ch: ch.queue_declare(readings, passive=True)),
        ("alice passively declares an exchange", alice, lambda ch: ch.exchange_declare(sensors, passive=True)),
        ("alice publishes to the default exchange", alice, publish("", readings)),
        ("alice publishes to amq.topic", alice, publish("amq.topic", "k")),
        ("alice publishes to her missing exchange", alice, publish(a + "nx", "k")),
        ("alice publishes to a missing exchange not hers", alice, publish(prefix + "zz-nx", "k")),
        ("alice binds her queue to amq.direct", alice, lambda ch: ch.queue_declare(a + "q") and ch.queue_bind(a + "q", "amq.direct", "k")),
        ("alice unbinds her queue from amq.direct", alice, lambda ch: ch.queue_unbind(a + "q", "amq.direct", "k")),
        ("alice gets from readings", alice, lambda ch: ch.basic_get(readings)),
        ("alice consumes readings", alice, lambda ch: ch.basic_consume(readings, lambda *_: None)),
        ("alice purges readings", alice, lambda ch: ch.queue_purge(readings)),
        ("alice deletes readings", alice, lambda ch: ch.queue_delete(readings)),
        ("alice deletes the sensors exchange", alice, lambda ch: ch.exchange_delete(sensors)),
        ("alice gets from her missing queue", alice, lambda ch: ch.basic_get(a + "missing")),
        ("alice gets from a missing queue not hers", alice, lambda ch: ch.basic_get(prefix + "zz-missing")),
        ("alice purges a missing queue not hers", alice, lambda ch: ch.queue_purge(prefix + "zz-missing")),
        ("alice deletes a missing queue not hers", alice, lambda ch: ch.queue_delete(prefix + "zz-missing")),
        ("alice declares an exchange with an AE", alice, lambda ch: ch.exchange_declare(a + "aex", "fanout", arguments={"alternate-exchange": "amq.fanout"})),
        ("alice declares a queue with a DLX not hers", alice, lambda ch: ch.queue_declare(a + "dq", arguments={"x-dead-letter-exchange": "amq.direct"})),
        ("alice declares a queue with her DLX", alice, lambda ch: ch.queue_declare(a + "dq2", arguments={"x-dead-letter-exchange": a + "x"})),
        ("alice binds her exchange to amq.fanout", alice, lambda ch: ch.exchange_bind(a + "x", "amq.fanout")),
        ("alice binds amq.fanout to her exchange", alice, lambda ch: ch.exchange_bind("amq.fanout", a + "x")),
        ("alice declares amq.foo", alice, lambda ch: ch.exchange_declare("amq.foo", "direct")),
        ("bob declares amq.foo", bob, lambda ch: ch.exchange_declare("amq.foo", "direct")),
        ("bob publishes to amq.topic on his key", bob, publish("amq.topic", "sensors.bob.t")),
        ("bob publishes to amq.topic on alice's key", bob, publish("amq.topic", "sensors.alice.t")),
        ("bob publishes to a topic exchange without topic permissions", bob, publish(sensors, "other.k")),
        ("bob binds to amq.topic on another key", bob, lambda ch: ch.queue_declare(prefix + "bob-tq") and ch.queue_bind(prefix + "bob-tq", "amq.topic", "other.#")),
        ("bob binds to amq.topic on a sensors key", bob, lambda ch: ch.queue_declare(prefix + "bob-tq") and ch.queue_bind(prefix + "bob-tq", "amq.topic", "sensors.#")),
        ("bob unbinds from amq.topic on another key", bob, lambda ch: ch.queue_unbind(prefix + "bob-tq", "amq.topic", "other.#")),
        ("carol opens the virtual host", carol, lambda ch: None),
    ]  # fmt: skip


@pytest.fixture
def loaded(rabbitmq, tmp_path):
    """The run's RabbitMQ and a hutch broker, each with the same definitions loaded."""
    prefix = fresh("perm") + "-"
    fuzz, names = patterns_and_names(prefix)
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(definitions(prefix, fuzz)))
    done = subprocess.run(
        [rabbitmq.CTL, "import_definitions", str(path)], env=rabbitmq.env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    hutch = RunningBroker([HUTCH, "serve", "--definitions", str(path)], tmp_path).start()
    try:
        yield hutch, prefix, fuzz, names
    finally:
        hutch.stop()
        delete_users(rabbitmq, [prefix + user for user in list(PASSWORDS) + ["fuzz-%d" % i for i in range(len(fuzz))]])


def test_every_row_of_the_permission_table(loaded, rabbitmq):
    hutch, prefix, _, _ = loaded

    def scenario(target):
        return [
            (name, attempt(target, user, PASSWORDS[user[len(prefix) :]], action)) for name, user, action in rows(prefix)
        ]

    observed = dict(same_on_both(scenario, hutch, rabbitmq))
    assert observed["alice declares her queue"] == ("ok",)
    assert observed["alice declares bob's queue"] == (
        403,
        "ACCESS_REFUSED - access to queue '%sbob-q' in vhost '/' refused for user '%salice'" % (prefix, prefix),
    )
    assert observed["alice publishes to her missing exchange"][0] == 404  # the permission before existence
    assert observed["alice publishes to a missing exchange not hers"][0] == 403
    assert observed["bob publishes to amq.topic on alice's key"] == (
        403,
        "ACCESS_REFUSED - access to topic 'sensors.alice.t' in exchange 'amq.topic' in vhost '/' "
        "refused for user '%sbob'" % prefix,
    )
    refused, text = observed["carol opens the virtual host"]  # (pika words it as it likes)
    assert (
        refused == "refused at login"
        and "(530) \"NOT_ALLOWED - access to vhost '/' refused for user '%scarol'\"" % prefix in text
    ), text


def test_random_patterns_and_names(loaded, rabbitmq):
    """Each fuzz user declares its names (configure): allowed exactly where RabbitMQ allows."""
    hutch, prefix, fuzz, names = loaded

    def scenario(target):
        seen = []
        for index, tried in enumerate(names):
            user = "%sfuzz-%d" % (prefix, index)
            connection = pika.BlockingConnection(url(target, user, "fuzz"))
            channel = connection.channel()
            for name in tried:
                try:
                    channel.queue_declare(name, auto_delete=True)
                    seen.append((fuzz[index], name, "ok"))
                except ChannelClosedByBroker as e:
                    seen.append((fuzz[index], name) + outcome(e))
                    channel = connection.channel()
            connection.close()
        return seen

    observed = same_on_both(scenario, hutch, rabbitmq)
    assert len(observed) == sum(len(tried) for tried in names) >= 300
    allowed = sum(1 for row in observed if row[2] == "ok")
    print(
        "\n%d (pattern, name) pairs: %d allowed, %d refused, the same on both"
        % (len(observed), allowed, len(observed) - allowed)
    )
    assert 0 < allowed < len(observed)  # the seed tries both answers


def rabbitmqctl(rabbitmq, *args):
    done = subprocess.run(
        [rabbitmq.CTL, *map(str, args)], env=rabbitmq.env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def hutch_ctl(broker, *args):
    return subprocess.run(
        [HUTCH, "ctl", *map(str, args), "--data", broker.data], capture_output=True, text=True, timeout=60
    )


def test_definitions_round_trip_through_hutch_ctl(rabbitmq, tmp_path):
    """Users born in RabbitMQ (rabbitmqctl import_definitions, then export_definitions) go into a
    running hutch with `hutch ctl import`; users born in hutch (its --definitions file, passwords
    hashed by hutch) go into RabbitMQ with `hutch ctl export` and rabbitmqctl import_definitions.
    Every user then logs in with its original password on the other broker and meets the same
    answers there, row by row of the permission table; the imported users survive hutch's
    restart (DATA/users.json)."""
    in_rabbitmq, in_hutch = fresh("rabbit-born") + "-", fresh("hutch-born") + "-"
    born = tmp_path / "rabbit-born.json"
    rabbit_born = definitions(in_rabbitmq, [])
    policy = {"vhost": "/", "name": in_rabbitmq + "cap", "pattern": "^" + re.escape(in_rabbitmq) + "capped$",
              "apply-to": "queues", "definition": {"max-length": 10}, "priority": 0}  # fmt: skip
    rabbit_born["policies"] = [policy]
    born.write_text(json.dumps(rabbit_born))
    rabbitmqctl(rabbitmq, "import_definitions", born)
    from_rabbitmq = tmp_path / "from-rabbitmq.json"
    rabbitmqctl(rabbitmq, "export_definitions", from_rabbitmq)
    hutch_file = tmp_path / "hutch-born.json"
    hutch_file.write_text(json.dumps(definitions(in_hutch, [])))
    hutch = RunningBroker([HUTCH, "serve", "--definitions", str(hutch_file)], tmp_path).start()
    try:
        loaded = hutch_ctl(hutch, "import", from_rabbitmq)
        # what hutch has no counterpart for (a policy) is named, and the import says it was partial
        assert loaded.returncode == 3, loaded.stdout + loaded.stderr
        assert "left out: policy '%scap'" % in_rabbitmq in loaded.stdout, loaded.stdout
        assert re.search(r"imported \d+ users", loaded.stdout), loaded.stdout
        from_hutch = tmp_path / "from-hutch.json"
        exported = hutch_ctl(hutch, "export", from_hutch)
        assert exported.returncode == 0 and exported.stdout == "", exported.stderr
        rabbitmqctl(rabbitmq, "import_definitions", from_hutch)

        for prefix in (in_rabbitmq, in_hutch):

            def scenario(target, prefix=prefix):
                return [
                    (name, attempt(target, user, PASSWORDS[user[len(prefix) :]], action))
                    for name, user, action in rows(prefix)
                ]

            observed = dict(same_on_both(scenario, hutch, rabbitmq))
            assert observed["alice declares her queue"] == ("ok",), prefix
            assert observed["alice declares bob's queue"][0] == 403, prefix

        hutch.stop()
        hutch.start()
        alice = in_rabbitmq + "alice"
        assert attempt(hutch, alice, PASSWORDS["alice"], lambda ch: ch.queue_declare(in_rabbitmq + "alice-q")) == (
            "ok",
        )
    finally:
        hutch.stop()
        subprocess.run(
            [rabbitmq.CTL, "clear_policy", policy["name"]], env=rabbitmq.env, capture_output=True, timeout=60
        )
        delete_users(rabbitmq, [prefix + user for prefix in (in_rabbitmq, in_hutch) for user in PASSWORDS])


def test_hutch_ctl_import_names_what_is_wrong(tmp_path):
    """A file that is not there, not JSON or not definitions, and a broker that is not running:
    one line each, naming it, and a non-zero exit; a user of the config file is not replaced."""
    broker = RunningBroker([HUTCH, "serve"], tmp_path).start()
    try:
        missing = hutch_ctl(broker, "import", tmp_path / "nope.json")
        assert missing.returncode == 2 and "cannot read %s" % (tmp_path / "nope.json") in missing.stderr
        garbage = tmp_path / "garbage.json"
        garbage.write_text("{not json")
        assert "is not JSON" in hutch_ctl(broker, "import", garbage).stderr
        wrong = tmp_path / "wrong.json"
        wrong.write_text(json.dumps({"users": "alice"}))
        done = hutch_ctl(broker, "import", wrong)
        assert done.returncode == 1 and "users must be a list of objects" in done.stderr, done.stderr
        guest = tmp_path / "guest.json"
        guest.write_text(json.dumps({"users": [{"name": "guest", "password": "other", "tags": []}]}))
        done = hutch_ctl(broker, "import", guest)
        assert done.returncode == 3 and "left out: user 'guest'" in done.stdout, done.stdout
        assert attempt(broker, "guest", "guest", lambda ch: None) == ("ok",)  # still its password
    finally:
        broker.stop()
    stopped = hutch_ctl(broker, "export")
    assert stopped.returncode == 1 and "no broker runs there" in stopped.stderr, stopped.stderr


def login(target, user, password):
    """("ok",), ("wrong password",), or ("no access", what pika says of the refused vhost)."""
    try:
        pika.BlockingConnection(url(target, user, password)).close()
        return ("ok",)
    except ProbableAccessDeniedError as e:
        return ("no access", str(e))
    except ProbableAuthenticationError:
        return ("wrong password",)


def test_changed_and_deleted_users_reach_the_connections_already_open(rabbitmq, tmp_path):
    """A user's connections stay open while its permissions change (set, cleared) and its
    password changes, and each change applies to their next operation and login; deleting the
    user closes them (320), and another user's stay open.
    hutch's users come from `hutch ctl add-user` (those of its config file are changed in the
    file), RabbitMQ's from rabbitmqctl: the same steps, the same answers."""
    prefix = fresh("open") + "-"
    alice, bob = prefix + "alice", prefix + "bob"
    password = PASSWORDS["alice"]
    hutch = RunningBroker([HUTCH, "serve"], tmp_path).start()
    hutch_said = []  # what hutch ctl printed for delete-user

    def change(target, command, *args):
        if target is rabbitmq:
            rabbitmqctl(rabbitmq, command.replace("-", "_"), *args)
            return
        done = hutch_ctl(hutch, command, *args)
        assert done.returncode == 0, done.stdout + done.stderr
        if command == "delete-user":
            hutch_said.append(done.stdout.strip())

    def scenario(target):
        if target is rabbitmq:  # (one rabbitmqctl call: each starts an Erlang node, 2 s of CPU)
            users = [dict(name=user, password=password, tags=[]) for user in (alice, bob)]
            every = [dict(user=user, vhost="/", configure=".*", write=".*", read=".*") for user in (alice, bob)]
            path = tmp_path / "users.json"
            path.write_text(json.dumps({"users": users, "permissions": every}))
            rabbitmqctl(rabbitmq, "import_definitions", path)
        else:
            for user in (alice, bob):
                change(target, "add-user", user, password)
                change(target, "set-permissions", user, ".*", ".*", ".*")
        connections = {user: pika.BlockingConnection(url(target, user, password)) for user in (alice, bob)}
        seen = []

        def declare(user, queue):
            try:
                connections[user].channel().queue_declare(queue, auto_delete=True)
                seen.append((user, queue, "ok"))
            except ChannelClosedByBroker as e:
                seen.append((user, queue) + outcome(e))

        declare(alice, alice + "-1")
        change(target, "set-permissions", alice, "^%s-x" % re.escape(alice), ".*", ".*")
        declare(alice, alice + "-2")  # refused now
        declare(alice, alice + "-x2")  # allowed by the new pattern
        change(target, "clear-permissions", alice)
        declare(alice, alice + "-x3")
        seen.append((alice, "logs in") + login(target, alice, password))
        change(target, "change-password", bob, "new-" + password)
        declare(bob, bob + "-0")  # its connection stays open
        seen.append((bob, "logs in with the old password") + login(target, bob, password))
        seen.append((bob, "logs in with the new one") + login(target, bob, "new-" + password))
        change(target, "delete-user", alice)
        try:
            wait_until(
                lambda: connections[alice].process_data_events(0.05) or not connections[alice].is_open,
                15,
                what="the deleted user's connection closed",
            )
        except ConnectionClosedByBroker as e:
            seen.append((alice, "closed") + outcome(e))
        declare(bob, bob + "-1")  # another user's connection goes on
        for connection in connections.values():
            if connection.is_open:
                connection.close()
        return seen

    try:
        rows = same_on_both(scenario, hutch, rabbitmq)
    finally:
        hutch.stop()
        delete_users(rabbitmq, [bob])
    refused = "ACCESS_REFUSED - access to queue '%s' in vhost '/' refused for user '%s'"
    assert rows == [
        (alice, alice + "-1", "ok"),
        (alice, alice + "-2", 403, refused % (alice + "-2", alice)),
        (alice, alice + "-x2", "ok"),
        (alice, alice + "-x3", 403, refused % (alice + "-x3", alice)),
        (alice, "logs in", "no access", rows[4][3]),
        (bob, bob + "-0", "ok"),
        (bob, "logs in with the old password", "wrong password"),
        (bob, "logs in with the new one", "ok"),
        (alice, "closed", 320, "CONNECTION_FORCED - user '%s' is deleted" % alice),
        (bob, bob + "-1", "ok"),
    ], rows
    assert "(530) \"NOT_ALLOWED - access to vhost '/' refused for user '%s'\"" % alice in rows[4][3], rows[4]
    assert hutch_said == ["deleted user '%s'; closed its 1 connection" % alice], hutch_said
