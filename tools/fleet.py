"""`hutch fleet`: the fleet's side of hutch's fleet management (the gateways' side is
server/fleet/). Keys, signed documents, pushing them, and the fleet's status.

    hutch fleet keygen --out fleet.key       # prints the public key for [fleet] keys, last
    hutch fleet sign --key fleet.key --version 3 --target group:site7 site7.toml --out site7.signed
    hutch fleet push --uri amqp://admin:...@central site7.signed [--wave 2 --abort-after 1]
    hutch fleet status --uri amqp://admin:...@central [--json]
    hutch fleet history --uri amqp://admin:...@central pump-house-2

A document is checked here as a gateway would check it (its header, the sections it may set, no
passwords, its size) before it is signed. Signing needs `cryptography` (the fleet extra:
pip install '.[fleet]' in hutch's checkout); a gateway checks signatures with it too where it
is installed, in plain Python where it is not.
"""

import json
import sys
import time

from ..fleet.document import MOST_BYTES, Refused, checked, key_text, signature_line, split


class FleetError(Exception):
    """One line for the user, exit 1."""


def add_options(parser):
    commands = parser.add_subparsers(dest="fleet_command", metavar="COMMAND")
    commands.required = True
    keygen = commands.add_parser("keygen", help="make a signing key; print its public key ([fleet] keys)")
    keygen.add_argument("--out", required=True, metavar="FILE", help="where the private key goes (PEM, mode 600)")
    keygen.set_defaults(run=_run(cmd_keygen))
    sign = commands.add_parser("sign", help="check a configuration fragment and write it signed, as a document")
    sign.add_argument("document", help="the fragment of a gateway's config (TOML) it sets")
    sign.add_argument("--key", required=True, metavar="KEY", help="the private key (hutch fleet keygen)")
    sign.add_argument("--version", required=True, type=int, metavar="V", help="its version: above what the gateways run")  # fmt: skip
    sign.add_argument("--target", required=True, metavar="group:G|node:N", help="the gateways it is for")
    sign.add_argument("--expires", metavar="TIME", help="refused after this instant (2026-12-31T00:00:00Z)")
    sign.add_argument("--trust", action="append", metavar="ed25519:KEY", help="the keys trusted from then on (repeat)")  # fmt: skip
    sign.add_argument("--out", metavar="SIGNED", help="write it there (default: standard output)")
    sign.set_defaults(run=_run(cmd_sign))
    push = commands.add_parser("push", help="send a signed document to the gateways of its target")
    push.add_argument("document", help="the signed document (hutch fleet sign)")
    _upstream_options(push)
    push.add_argument("--wave", type=int, metavar="N", help="a group's gateways N at a time, each wave once the one before applied it")  # fmt: skip
    push.add_argument("--abort-after", type=int, default=1, metavar="K", help="with --wave: stop after K gateways failed (1)")  # fmt: skip
    push.add_argument("--wave-timeout", type=float, default=300, metavar="S", help="with --wave: a gateway silent this long about it failed (300)")  # fmt: skip
    push.set_defaults(run=_run(cmd_push))
    status = commands.add_parser("status", help="the newest status of each gateway, and which are silent")
    _upstream_options(status)
    status.add_argument("--json", action="store_true", help="print each gateway's newest status as JSON")
    status.set_defaults(run=_run(cmd_status))
    history = commands.add_parser("history", help="what one gateway said over time: versions, refusals, state")
    history.add_argument("node", help="the gateway's node name")
    _upstream_options(history)
    history.set_defaults(run=_run(cmd_history))


def _upstream_options(parser):
    parser.add_argument("--uri", required=True, help="the fleet's upstream: amqp://user:password@host:port/vhost")
    parser.add_argument("--ca-file", help="for amqps://: the CA of its certificate")
    parser.add_argument("--quiet", type=float, default=1.0, metavar="S", help="stop reading statuses after S s of quiet (1)")  # fmt: skip


def _run(command):
    def run(args):
        try:
            return command(args)
        except FleetError as e:
            print("hutch fleet %s: %s" % (args.fleet_command, e), file=sys.stderr)
            return 1

    return run


def _ed25519():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise FleetError("signing needs cryptography: pip install '.[fleet]' in hutch's checkout")
    return serialization, ed25519


def cmd_keygen(args):
    import os

    serialization, ed25519 = _ed25519()
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as e:
        raise FleetError("cannot write %s: %s" % (args.out, e.strerror or e))
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    print(key_text(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)))
    return 0


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FleetError("cannot read %s: %s" % (path, e.strerror or e))


def checked_document(body, path):
    """The document, checked as a gateway of its target checks it; FleetError."""
    try:
        import tomllib

        target = tomllib.loads(body.decode()).get("document", {}).get("target", "")
    except (UnicodeError, ValueError, RecursionError, AttributeError):
        target = ""
    kind, _, name = target.partition(":") if isinstance(target, str) else ("", "", "")
    try:
        from ..server.config import SECTIONS

        return checked(body, name if kind == "node" else "", [name] if kind == "group" else [], {}, [], time.time(), SECTIONS)  # fmt: skip
    except Refused as e:
        raise FleetError("%s: %s" % (path, e.text))


def header(args):
    """The [document] table the options make."""
    lines = ["[document]", "version = %d" % args.version, "target = %s" % json.dumps(args.target)]
    if args.expires:
        lines.append("expires = %s" % json.dumps(args.expires))
    if args.trust:
        lines.append("keys = %s" % json.dumps(args.trust))
    return ("\n".join(lines) + "\n\n").encode()


def signed(fragment, args):
    """The fragment, its header put before it, checked and signed with the private key --key."""
    serialization, ed25519 = _ed25519()
    path = args.document
    try:
        import tomllib

        sections = tomllib.loads(fragment.decode())
        if "document" in sections:
            raise FleetError("%s has a [document] table: its version and target are --version and --target" % path)
        loose = [key for key, value in sections.items() if not isinstance(value, (dict, list))]
        if loose:
            raise FleetError("%s: '%s' is outside any section: a fragment holds sections ([server], [[bridge]], ...)" % (path, loose[0]))  # fmt: skip
    except (UnicodeError, ValueError, RecursionError) as e:
        raise FleetError("%s is not TOML: %s" % (path, e))
    body = header(args) + fragment + (b"" if fragment.endswith(b"\n") else b"\n")
    if len(body) > MOST_BYTES:
        raise FleetError("%s: %d bytes, more than a document may hold (%d)" % (path, len(body), MOST_BYTES))
    checked_document(body, path)
    try:
        key = serialization.load_pem_private_key(_read(args.key), None)
    except ValueError as e:
        raise FleetError("%s is not a private key (PEM, as hutch fleet keygen writes it): %s" % (args.key, e))
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise FleetError("%s is not an Ed25519 key (hutch fleet keygen makes one)" % args.key)
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return body + signature_line(public, key.sign(body))


def cmd_sign(args):
    out = signed(_read(args.document), args)
    if args.out:
        try:
            with open(args.out, "wb") as f:
                f.write(out)
        except OSError as e:
            raise FleetError("cannot write %s: %s" % (args.out, e.strerror or e))
    else:
        sys.stdout.buffer.write(out)
    return 0


def _connect(args):
    from ..client.protocol import AMQPError
    from ..server.bridges.config import parse_uri
    from ..server.config import ConfigError
    from ..server.fleet.upstream import connect

    try:
        uri = parse_uri(args.uri, "--uri")
    except ConfigError as e:
        raise FleetError(str(e))
    if uri["protocol"] is not None:
        raise FleetError("--uri: a fleet's upstream speaks AMQP 0-9-1 (amqp:// or amqps://)")
    try:
        return connect(uri, "hutch fleet", {"ca_file": args.ca_file})
    except AMQPError as e:
        raise FleetError("%s: %s %s" % (uri["uri"], e.code, e.text))
    except OSError as e:
        raise FleetError("%s: %s" % (uri["uri"], e.strerror or e))


def _publish(client, target, raw):
    from ..server.fleet import upstream

    upstream.declare_documents(client, target)
    client.publish(upstream.DOCUMENTS, upstream.routing_key(target), raw, {"delivery_mode": 2, "content_type": "application/toml"})  # fmt: skip
    if not client.wait_confirms(10000):
        raise FleetError("the upstream did not confirm the document for %s (nack, or no answer)" % target)


def cmd_push(args):
    from ..client.protocol import AMQPError

    raw = _read(args.document)
    try:
        body = split(raw)[0]
    except Refused as e:
        raise FleetError("%s: %s (hutch fleet sign writes a signed document)" % (args.document, e.text))
    doc = checked_document(body, args.document)
    if args.wave is not None and (args.wave < 1 or not doc["target"].startswith("group:")):
        raise FleetError("--wave N (N from 1) sends a group's document, not %s's" % doc["target"])
    client = _connect(args)
    try:
        client.confirm()
        if args.wave is not None:
            return _in_waves(client, args, raw, doc)
        _publish(client, doc["target"], raw)
    except AMQPError as e:
        raise FleetError("%s %s" % (e.code, e.text))
    finally:
        client.close()
    print("version %d for %s pushed: its gateways apply it when they read it" % (doc["version"], doc["target"]))
    return 0


def _in_waves(client, args, raw, doc):
    """A group's document to its members (those whose status names the group) N at a time, each
    as its node's: the next wave once each of this one applied it, or stopped once K failed.
    Once every wave applied it, it goes to the group itself (members that join later)."""
    target, version = doc["target"], doc["version"]
    group = target.split(":", 1)[1]
    statuses = Statuses(client, args.quiet)
    members = sorted(node for node, status in statuses.newest.items() if group in (status.get("groups") or []))
    if not members:
        raise FleetError("no gateway of %s has sent a status: there is no one to send a wave to" % target)
    failed = []
    waves = [members[i : i + args.wave] for i in range(0, len(members), args.wave)]
    for number, wave in enumerate(waves, 1):
        for node in wave:
            _publish(client, "node:" + node, raw)
        outcome = statuses.wait(wave, target, version, args.wave_timeout)
        failed += [(node, why) for node, why in outcome.items() if why is not None]
        print("wave %d of %d: %s" % (number, len(waves), ", ".join("%s %s" % (node, why or "applied") for node, why in sorted(outcome.items()))))  # fmt: skip
        if len(failed) >= args.abort_after:
            left = sum(len(w) for w in waves[number:])
            print(
                "hutch fleet push: stopped after %d failed (%s): %d gateway%s of %s not sent version %d"
                % (len(failed), "; ".join("%s: %s" % f for f in failed), left, "s" * (left != 1), target, version),
                file=sys.stderr,
            )
            return 1
    _publish(client, target, raw)
    print("version %d for %s applied by %d gateway%s in %d wave%s" % (version, target, len(members), "s" * (len(members) != 1), len(waves), "s" * (len(waves) != 1)))  # fmt: skip
    return 0


class Statuses:
    """The members' statuses, read from the status stream from its start and as they come."""

    def __init__(self, client, quiet_s):
        from ..server.fleet import upstream

        self.client = client
        self.newest = {}
        self.all = []
        upstream.declare_status(client)
        client.consume(upstream.STATUS, self._take, prefetch=500, arguments={"x-stream-offset": "first"})
        while client.wait_msg(int(quiet_s * 1000)):
            pass

    def _take(self, message):
        try:
            status = json.loads(bytes(message.body))
            node = status["node"]
        except (ValueError, RecursionError, KeyError, TypeError):
            status, node = None, None
        if node is not None:
            self.all.append(status)
            if status.get("time", 0) >= self.newest.get(node, {}).get("time", 0):
                self.newest[node] = status
        self.client.ack(message.delivery_tag)

    def wait(self, nodes, target, version, timeout):
        """{node: None (it applied version of target and confirmed it) or why not}."""
        deadline = time.monotonic() + timeout
        since = time.time()  # (a refusal said after this is about what was just sent)
        outcome = {}
        while True:
            for node in nodes:
                config = (self.newest.get(node) or {}).get("config") or {}
                last = config.get("last") or {}
                if config.get("applied", {}).get(target) == version and not config.get("pending"):
                    outcome[node] = None
                elif [target, version] in config.get("failed", []) or (last.get("outcome") == "refused" and last.get("time", 0) >= since):  # fmt: skip
                    outcome[node] = "%s: %s" % (last.get("reason"), last.get("text"))
            if len(outcome) == len(nodes):
                return outcome
            if time.monotonic() > deadline:
                return dict({node: "no word within %d s" % timeout for node in nodes}, **outcome)
            self.client.wait_msg(200)


SILENT_AFTER = 3  # status intervals without a word: a gateway shown silent


def cmd_status(args):
    client = _connect(args)
    try:
        newest = Statuses(client, args.quiet).newest
    finally:
        client.close()
    if args.json:
        print(json.dumps(newest, indent=2, sort_keys=True))
        return 0
    if not newest:
        print("no gateway has sent a status yet")
        return 0
    now = time.time()
    print(ROW % COLUMNS)
    for node in sorted(newest):
        print(ROW % status_row(newest[node], now))
    return 0


COLUMNS = ("node", "groups", "version", "state", "last_seen_s", "backlog", "last_error")
ROW = "%-20s %-16s %-24s %-10s %11s %8s  %s"


def status_row(status, now):
    """A status as `hutch fleet status` shows it: silent after three intervals without a word."""
    seen = now - status.get("time", 0)
    config = status.get("config") or {}
    version = ",".join("%s=%s" % (t, v) for t, v in sorted((config.get("applied") or {}).items())) or "-"
    state = status.get("state", "online")
    if state == "online" and seen > SILENT_AFTER * status.get("interval", 60):
        state = "SILENT"
    elif config.get("pending"):
        state = "trying %s" % config["pending"]["version"]
    backlog = sum(
        bridge.get("backlog") or 0 for bridge in status.get("bridges") or [] if bridge.get("direction") == "up"
    )
    groups = ",".join(status.get("groups") or []) or "-"
    return (status["node"], groups, version, state, "%.0f" % seen, backlog, status.get("last_error") or "-")


def cmd_history(args):
    client = _connect(args)
    try:
        said = [status for status in Statuses(client, args.quiet).all if status["node"] == args.node]
    finally:
        client.close()
    if not said:
        raise FleetError("no status from %s on this upstream" % args.node)
    before = None
    for status in sorted(said, key=lambda s: s.get("time", 0)):
        config = status.get("config") or {}
        line = "%s  %-8s %s" % (
            ",".join("%s=%s" % (t, v) for t, v in sorted((config.get("applied") or {}).items())) or "-",
            status.get("state", "online"),
            _outcome(config.get("last")),
        )
        if line != before:  # (what changed, not each status)
            stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(status.get("time", 0)))
            print("%sZ  %s" % (stamp, line))
            before = line
    return 0


def _outcome(last):
    if not last:
        return ""
    return "%s %s=%s%s: %s" % (last.get("outcome"), last.get("target"), last.get("version"), " (%s)" % last["reason"] if last.get("reason") else "", last.get("text"))  # fmt: skip
