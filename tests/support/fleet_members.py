"""What the fleet tests share: a signing key, documents signed as `hutch fleet sign` signs them
(cryptography's Ed25519) or damaged on purpose, pushed as `hutch fleet push` pushes them, and
gateways that are members of a fleet whose upstream is the run's RabbitMQ."""

import json
import os
import subprocess
import time

from brokers import BIN, hutch_serve, wait_until
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from hutch.fleet.document import key_text, signature_line

RAW = serialization.Encoding.Raw, serialization.PublicFormat.Raw
MEMBERS = []  # every gateway member() made: stop_members() ends those still running


def stop_members():
    """Each member still running stopped (SIGTERM; a test that failed midway left it)."""
    while MEMBERS:
        gateway = MEMBERS.pop()
        if gateway.proc is not None and gateway.proc.poll() is None:
            gateway.stop()


class Signer:
    def __init__(self):
        self.secret = Ed25519PrivateKey.generate()
        self.public = self.secret.public_key().public_bytes(*RAW)
        self.key = key_text(self.public)

    def sign(self, body):
        """body signed with no check of what it says (a gateway's checks are what is tested)."""
        body = body.encode() if isinstance(body, str) else body
        return body + signature_line(self.public, self.secret.sign(body))


def document(version, target, sections="", header=""):
    return '[document]\nversion = %d\ntarget = "%s"\n%s\n%s' % (version, target, header, sections)


def bridge_to(rabbitmq, queue, name="cloud"):
    """A [[bridge]] up to the run's RabbitMQ, its password a secret's reference."""
    return (
        '[[bridge]]\nname = "%s"\nuri = "amqp://guest:${secret:rabbit}@127.0.0.1:%d"\nqueue = "%s"\n'
        'exchange = ""\nrouting_key = "%s"\n' % (name, rabbitmq.port, queue, queue)
    )


def member(tmp_path, rabbitmq, node, groups, keys, user="guest:guest", extra="", confirm_within=20):
    """A gateway in the fleet (not started), the secret its documents' bridges name in place."""
    folder = tmp_path / node
    folder.mkdir()
    config = (
        '[server]\nname = "%s"\n[fleet]\nuri = "amqp://%s@127.0.0.1:%d"\ngroups = %s\nkeys = %s\n'
        "status_interval = 2\nconfirm_within = %d\n%s"
        % (node, user, rabbitmq.port, json.dumps(groups), json.dumps(keys), confirm_within, extra)
    )
    gateway = hutch_serve(folder, config)
    gateway.node = node
    MEMBERS.append(gateway)
    secrets = os.path.join(gateway.data, "fleet", "secrets")
    os.makedirs(secrets)
    with open(os.path.join(secrets, "rabbit"), "w") as f:
        f.write("guest\n")
    return gateway


def started(gateway):
    """A member started, its fleet link up: its targets' streams there to publish to."""
    at = len(gateway.log()) if os.path.exists(gateway.log_path) else 0
    gateway.start()
    wait_said(gateway, "fleet: link up", after=at)
    return gateway


def push(rabbitmq, raw, tmp_path):
    """`hutch fleet push` of a signed document: its exit code and what it said."""
    path = tmp_path / ("pushed-%d.toml" % time.monotonic_ns())
    path.write_bytes(raw)
    done = subprocess.run(
        [
            os.path.join(BIN, "hutch"),
            "fleet",
            "push",
            "--uri",
            "amqp://guest:guest@127.0.0.1:%d" % rabbitmq.port,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def state(gateway):
    """fleet/state.json of a gateway's data folder, or {} before it has one."""
    try:
        with open(os.path.join(gateway.data, "fleet", "state.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def applied(gateway):
    return {target: entry["version"] for target, entry in state(gateway).get("applied", {}).items()}


def wait_applied(gateway, target, version, timeout=30):
    """Until the gateway runs version of target's document, kept (confirmed upstream)."""
    wait_until(
        lambda: (
            applied(gateway).get(target) == version
            and not os.path.exists(os.path.join(gateway.data, "fleet", "pending.json"))
        ),
        timeout,
        what=lambda: "%s runs %s=%d: %s\n%s" % (gateway.data, target, version, state(gateway), gateway.log()[-3000:]),
    )


def wait_said(gateway, text, timeout=30, after=0):
    """Until the gateway's log (from offset after) says text; the log."""
    return wait_until(
        lambda: text in gateway.log()[after:] and gateway.log(),
        timeout,
        what=lambda: "%r in:\n%s" % (text, gateway.log()[-3000:]),
    )


def fleet_status(rabbitmq):
    """`hutch fleet status --json`: each node's newest status."""
    done = subprocess.run(
        [
            os.path.join(BIN, "hutch"),
            "fleet",
            "status",
            "--json",
            "--quiet",
            "0.5",
            "--uri",
            "amqp://guest:guest@127.0.0.1:%d" % rabbitmq.port,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def user_who_cannot_report(rabbitmq, name):
    """A RabbitMQ user (password "pw") that may do all a member does but publish its status (no
    write permission on hutch.fleet.status): a fleet link whose status is never confirmed, as
    an upstream that revoked it would have it. One rabbitmqctl call (each starts an Erlang node)."""
    expression = (
        'rabbit_auth_backend_internal:add_user(<<"%s">>, <<"pw">>, <<"tests">>), '
        'rabbit_auth_backend_internal:set_permissions(<<"%s">>, <<"/">>, <<".*">>, '
        '<<"^(?!hutch\\\\.fleet\\\\.status$).*">>, <<".*">>, <<"tests">>), ok.' % (name, name)
    )
    done = subprocess.run([rabbitmq.CTL, "eval", expression], env=rabbitmq.env, capture_output=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == b"ok", (done.stdout, done.stderr)
