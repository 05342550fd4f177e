"""`hutch ctl` asking the running broker over its control socket: `list` beside `rabbitmqctl
list_*` for the same topology made by the same pika script on both brokers; purge, delete,
close-connection and users, each seen by a client; the health checks; and one line with exit 1
for whatever cannot be done."""

import json
import os
import socket
import subprocess

import pika
import pytest
from brokers import BIN, RunningBroker, delete_users, pika_connection, pump_until, wait_until
from differential import fresh

from hutch.core.auth import hash_password

HUTCH = os.path.join(BIN, "hutch")


def ctl(broker, *args):
    return subprocess.run([HUTCH, "ctl", *args, "--data", broker.data], capture_output=True, text=True, timeout=60)


def hutch_list(broker, kind, *columns):
    done = ctl(broker, "list", kind, *columns, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def rabbitmq_list(rabbitmq, kind, *columns):
    done = subprocess.run(
        [rabbitmq.CTL, "list_" + kind, *columns, "--formatter", "json"],
        env=rabbitmq.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def topology(target, prefix):
    """The same on both brokers: two queues, one with 3 ready and 2 unacked to a consumer with a
    prefetch of 2, a topic exchange bound to one of them. (No heartbeats: the test does not
    pump this connection while rabbitmqctl runs, which on a loaded machine took longer than
    two intervals, and hutch rightly dropped the silent client and its consumer.)"""
    connection = pika_connection(target, heartbeat=0)
    channel = connection.channel()
    channel.confirm_delivery()
    channel.queue_declare(prefix + "work", durable=True)
    channel.queue_declare(prefix + "idle")
    channel.exchange_declare(prefix + "sensors", "topic", durable=True)
    channel.queue_bind(prefix + "work", prefix + "sensors", "site.#")
    for n in range(5):
        channel.basic_publish("", prefix + "work", b"%d" % n)
    consumer = connection.channel()
    consumer.basic_qos(prefetch_count=2)
    got = []
    consumer.basic_consume(prefix + "work", lambda ch, method, props, body: got.append(method.delivery_tag))
    pump_until(connection, lambda: len(got) == 2)
    return connection


def test_list_shows_what_rabbitmqctl_shows(broker, rabbitmq):
    prefix = fresh("ctl") + "-"
    connections = [topology(target, prefix) for target in (broker, rabbitmq)]
    try:

        def mine(rows, key):
            return sorted((row for row in rows if str(row[key]).startswith(prefix)), key=json.dumps)

        def both(kind, key, *columns):
            ours = mine(hutch_list(broker, kind, *columns), key)
            theirs = mine(rabbitmq_list(rabbitmq, kind, *columns), key)
            return ours, theirs

        columns = ("name", "messages_ready", "messages_unacknowledged", "messages", "consumers", "durable")
        queues = wait_until(lambda: (lambda o, t: o == t and o)(*both("queues", "name", *columns)), what="queues")
        assert [q["messages_ready"] for q in queues] == [0, 3]  # idle, work
        exchanges = both("exchanges", "name", "name", "type", "durable", "auto_delete", "internal")
        assert exchanges[0] == exchanges[1] and exchanges[0][0]["type"] == "topic"
        keys = ("source_name", "source_kind", "destination_name", "destination_kind", "routing_key")
        bindings = both("bindings", "destination_name", *keys)
        assert bindings[0] == bindings[1] and len(bindings[0]) == 3  # two default, one topic
        consumers = both("consumers", "queue_name", "queue_name", "ack_required", "prefetch_count", "active")
        assert consumers[0] == consumers[1] and consumers[0][0]["prefetch_count"] == 2
    finally:
        for connection in connections:
            connection.close()


def test_list_permissions_shows_what_rabbitmqctl_shows(broker, rabbitmq, tmp_path):
    """The same definitions imported into both; `list permissions` and `list user_permissions
    USER` print rabbitmqctl's rows for them (list_permissions, list_user_permissions)."""
    user = fresh("perm")
    definitions = {
        "users": [
            {
                "name": user,
                "password_hash": hash_password("pw", b"salt"),
                "hashing_algorithm": "rabbit_password_hashing_sha256",
                "tags": [],
            }
        ],
        "permissions": [
            {"user": user, "vhost": "/", "configure": "^$", "write": "^amq\\.topic$", "read": "^%s-" % user}
        ],
        "topic_permissions": [
            {"user": user, "vhost": "/", "exchange": "amq.topic", "write": "^site\\.7\\.", "read": ".*"}
        ],
    }
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps(definitions))
    assert ctl(broker, "import", str(path)).returncode == 0
    done = subprocess.run(
        [rabbitmq.CTL, "import_definitions", str(path)], env=rabbitmq.env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        ours = [row for row in hutch_list(broker, "permissions") if row["user"] == user]
        theirs = [row for row in rabbitmq_list(rabbitmq, "permissions") if row["user"] == user]
        assert ours == theirs == [{"user": user, "configure": "^$", "write": "^amq\\.topic$", "read": "^%s-" % user}]
        ours = hutch_list(broker, "user_permissions", user)
        assert ours == rabbitmq_list(rabbitmq, "user_permissions", user), ours
        assert [list(row) for row in ours] == [["vhost", "configure", "write", "read"]]
        topics = [row for row in hutch_list(broker, "topic_permissions") if row["user"] == user]
        assert topics == [{"user": user, "exchange": "amq.topic", "write": "^site\\.7\\.", "read": ".*"}]
        # a new password and new patterns on "/" leave the topic permissions as they are
        for args in (("change-password", user, "pw2"), ("set-permissions", user, "^x$", ".*", ".*")):
            assert ctl(broker, *args).returncode == 0
            rabbitmqctl = subprocess.run(
                [rabbitmq.CTL, args[0].replace("-", "_"), *args[1:]], env=rabbitmq.env, capture_output=True, timeout=120
            )
            assert rabbitmqctl.returncode == 0, rabbitmqctl.stderr
        ours = [row for row in hutch_list(broker, "topic_permissions") if row["user"] == user]
        theirs = [row for row in rabbitmq_list(rabbitmq, "topic_permissions") if row["user"] == user]
        assert ours == theirs == topics, (ours, theirs)
        ours = [row for row in hutch_list(broker, "permissions") if row["user"] == user]
        assert ours == [{"user": user, "configure": "^x$", "write": ".*", "read": ".*"}], ours
        done = ctl(broker, "list", "user_permissions", "nobody-" + user)
        assert done.returncode == 1 and done.stderr == "hutch ctl list: no user 'nobody-%s'\n" % user, done.stderr
        done = ctl(broker, "list", "user_permissions")
        assert done.returncode == 1 and "needs the user" in done.stderr
    finally:
        delete_users(rabbitmq, [user])
        ctl(broker, "delete-user", user)


def test_changes_a_client_sees_and_users_that_stay(tmp_path):
    broker = RunningBroker([HUTCH, "serve"], tmp_path).start()
    try:
        client = pika_connection(broker)
        channel = client.channel()
        channel.confirm_delivery()
        channel.queue_declare("jobs")
        for _ in range(4):
            channel.basic_publish("", "jobs", b"j")
        done = ctl(broker, "purge", "jobs")
        assert done.returncode == 0 and done.stdout == "purged 4 messages from queue 'jobs'\n", done
        assert channel.queue_declare("jobs", passive=True).method.message_count == 0
        assert ctl(broker, "delete", "queue", "jobs").returncode == 0
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            channel.queue_declare("jobs", passive=True)
        name = hutch_list(broker, "connections", "name")[0]["name"]
        assert ctl(broker, "close-connection", name, "maintenance window").returncode == 0
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker) as closed:
            pump_until(client, lambda: False, timeout=10)
        assert (closed.value.reply_code, closed.value.reply_text) == (320, "CONNECTION_FORCED - maintenance window")

        assert ctl(broker, "add-user", "dana", "d-pw", "--tags", "monitoring").returncode == 0
        assert ctl(broker, "set-permissions", "dana", "^dana-", "^dana-", "^dana-").returncode == 0
        as_dana = pika.ConnectionParameters("127.0.0.1", broker.port, credentials=pika.PlainCredentials("dana", "d-pw"))
        dana = pika.BlockingConnection(as_dana)
        dana.channel().queue_declare("dana-q")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            dana.channel().queue_declare("other")
        assert refused.value.reply_code == 403
        dana.close()
        assert {"user": "dana", "tags": ["monitoring"]} in hutch_list(broker, "users")

        broker.stop()
        broker.start()  # dana was kept in DATA/users.json
        pika.BlockingConnection(as_dana).close()
        assert ctl(broker, "delete-user", "dana").returncode == 0
        with pytest.raises(pika.exceptions.ProbableAuthenticationError):
            pika.BlockingConnection(as_dana)

        for args, line in (
            (("purge", "nope"), "hutch ctl purge: no queue 'nope' in vhost '/'"),
            (("delete", "exchange", "amq.direct"), "deletion of system exchange 'amq.direct' in vhost '/' not allowed"),
            (("delete", "queue", "nope"), "hutch ctl delete: no queue 'nope' in vhost '/'"),
            (("close-connection", "1.2.3.4:5", "x"), "hutch ctl close-connection: no connection '1.2.3.4:5'"),
            (
                ("add-user", "guest", "x"),
                "user 'guest' is the broker's built-in user (its config has no [users] table)",
            ),
            (("set-permissions", "nobody", ".*", ".*", ".*"), "hutch ctl set-permissions: no user 'nobody'"),
            (("clear-permissions", "nobody"), "hutch ctl clear-permissions: no user 'nobody'"),
            (("change-password", "nobody", "x"), "hutch ctl change-password: no user 'nobody'"),
            (("list", "queues", "bogus"), "hutch ctl list: no such column for queues: bogus"),
        ):
            done = ctl(broker, *args)
            assert done.returncode == 1 and line in done.stderr and done.stderr.count("\n") == 1, (args, done)
        for check in ("ping", "check-running", "check-port-connectivity"):
            assert ctl(broker, check).returncode == 0
    finally:
        broker.stop()
    for check in ("ping", "check-running", "check-port-connectivity"):
        done = ctl(broker, check)
        assert done.returncode == 1 and "no broker runs there" in done.stderr, done.stderr


SENSOR_HASH = "3yPudymwzH7quov3AvyvH2fdr5gddkKIOXfQzjjaM2n2kg6k"  # hutch passwd --password greenhouse


def test_a_user_of_the_config_file_is_changed_there_and_the_refusal_names_the_key(tmp_path):
    config = tmp_path / "hutch.toml"
    config.write_text('[users.sensor]\npassword_hash = "%s"\n' % SENSOR_HASH)
    broker = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
    try:
        for args, line in (
            (
                ("set-permissions", "sensor", "^$", ".*", ".*"),
                "user 'sensor' is defined in the config file %s: change permissions (and topic_permissions) "
                "in [users.sensor] there, then hutch ctl reload" % config,
            ),
            (
                ("add-user", "sensor", "x"),
                "user 'sensor' is defined in the config file %s: change password_hash or tags in [users.sensor] "
                "there, then hutch ctl reload" % config,
            ),
            (
                ("change-password", "sensor", "x"),
                "user 'sensor' is defined in the config file %s: change password_hash in [users.sensor] there, "
                "then hutch ctl reload" % config,
            ),
            (
                ("clear-permissions", "sensor"),
                "user 'sensor' is defined in the config file %s: change permissions (and topic_permissions) "
                "in [users.sensor] there, then hutch ctl reload" % config,
            ),
            (
                ("delete-user", "sensor"),
                "user 'sensor' is defined in the config file %s: remove [users.sensor] there, then hutch ctl "
                "reload" % config,
            ),
        ):
            done = ctl(broker, *args)
            assert done.returncode == 1 and done.stderr.count("\n") == 1, (args, done)
            assert line in done.stderr, done.stderr
    finally:
        broker.stop()


def test_a_request_that_does_not_fit_its_command_is_answered_with_what_is_wrong(tmp_path):
    """The control socket is a door too: a request with an argument missing or of another JSON
    type is answered with an error naming it (server/control.py ARGUMENTS), never raised into
    the log, and the broker answers the next one; so is a line that is no request (arrays nested
    5,000 deep raised out of the socket's reading)."""
    from hutch.ports.control_request import request

    broker = RunningBroker([HUTCH, "serve"], tmp_path).start()
    try:
        said = [
            request(broker.data, "purge"),
            request(broker.data, "purge", name=["a", "list"]),
            request(broker.data, "add-user", name="x", password=7),
            request(broker.data, "set-permissions", name="x", configure=".*", write=".*"),
            request(broker.data, "list", kind="queues", columns=[1, 2]),
            request(broker.data, "import", definitions=[]),
        ]
        assert [answer["error"] for answer in said] == [
            "purge needs 'name'",
            'purge: \'name\' must be a string, not ["a", "list"]',
            "add-user: 'password' must be a string, not 7",
            "set-permissions needs 'read'",
            "list: 'columns' must be an array of strings, not [1, 2]",
            "import: 'definitions' must be an object, not []",
        ], said
        # arrays nested deeper than Python's recursion limit: no JSON json.loads takes
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(os.path.join(broker.data, "control.sock"))
            s.sendall(b"[" * 5000 + b"\n")
            answer = json.loads(s.makefile("rb").readline())
        assert answer["error"].startswith("not a control request: maximum recursion depth exceeded"), answer
        assert "pid" in request(broker.data, "ping")
        assert not broker.errors() and "Traceback" not in broker.log(), broker.log()[-3000:]
    finally:
        broker.stop()
