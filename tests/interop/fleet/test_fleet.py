"""A fleet of hutch gateways with the run's RabbitMQ as its upstream, as a farm runs one: signed
documents pushed with `hutch fleet push`, each member taking the newest of its targets (also
one that was away when they were pushed), refusing what it must not take and saying why,
trying a document's upstreams before applying it, keeping it only once its status is confirmed
upstream, and trying a document again after a SIGKILL cut its try short."""

import json
import os
import random
import subprocess
import threading
import time

import pika
import pytest
from bridging import consume_all, consume_every, first_copies, publish_confirmed, rabbitmq_url, upstream_queue
from brokers import BIN, sigkill, wait_until
from fleet_members import (
    Signer,
    applied,
    bridge_to,
    document,
    fleet_status,
    member,
    push,
    started,
    state,
    stop_members,
    user_who_cannot_report,
    wait_applied,
    wait_said,
)
from tcp_proxy import TcpProxy

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]


@pytest.fixture(autouse=True)
def _members_stopped():
    """Whatever a test leaves running (it failed midway) is stopped after it."""
    yield
    stop_members()


def _unique(word):
    return "%s-%06d" % (word, random.randrange(10**6))


def _publish(gateway, queue, body):
    connection = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", gateway.port))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)
    connection.close()


class SensorLoad:
    """Readings published to each gateway's local queue, confirmed, for as long as it runs: what
    its bridge forwards upstream while documents change the bridge under it."""

    def __init__(self, gateways, queue):
        self.gateways, self.queue = gateways, queue
        self.sent = []
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        i = 0
        while self.running:
            for gateway in self.gateways:
                bodies = [b"%s %d" % (gateway.node.encode(), i + n) for n in range(20)]
                publish_confirmed(gateway, self.queue, bodies, rate=200)
                self.sent += bodies
            i += 20

    def stop(self):
        self.running = False
        self.thread.join(60)
        return self.sent


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
def test_five_gateways_take_their_group_s_documents_in_waves_with_readings_flowing(rabbitmq, tmp_path):
    """Five gateways of one group, each bridging readings up to RabbitMQ while documents change
    that bridge under it: version 1 reaches all five; one cut off from the fleet's upstream (a
    fault proxy) through versions 2 and 3 takes 3 only once it is back; version 4 goes in waves
    of two; version 5, whose canary fails, stops after the first wave. Every reading published
    meanwhile arrives upstream; the config files stay what the person wrote; `hutch fleet
    status` and `history` show each gateway."""
    signer, group = Signer(), _unique("site")
    target = "group:" + group
    url = rabbitmq_url(rabbitmq)
    upstream = _unique("fleet-in")
    upstream_queue(url, upstream)
    proxy = TcpProxy(rabbitmq.port).start()
    gateways = [member(tmp_path, rabbitmq, "gw%d-%s" % (i, group), [group], [signer.key]) for i in range(5)]
    cut_off = gateways[4]
    config = cut_off.base_command[-1]  # (its fleet link through the proxy, its bridge not)
    text = open(config).read().replace("@127.0.0.1:%d" % rabbitmq.port, "@127.0.0.1:%d" % proxy.port, 1)
    with open(config, "w") as f:
        f.write(text)
    written = [open(g.base_command[-1], "rb").read() for g in gateways]
    for gateway in gateways:
        started(gateway)

    def bridge(version):  # (each version restarts the bridge with a new table: its max_rate)
        return bridge_to(rabbitmq, upstream).replace('queue = "%s"' % upstream, 'queue = "readings"', 1) + "max_rate = %d\n" % (10000 + version)  # fmt: skip

    began = time.monotonic()
    code, said = push(rabbitmq, signer.sign(document(1, target, bridge(1))), tmp_path)
    assert code == 0 and "version 1 for %s pushed" % target in said, said
    for gateway in gateways:
        wait_applied(gateway, target, 1)
    print("version 1 applied and confirmed by 5 gateways in %.1f s" % (time.monotonic() - began))

    def all_say(version):
        found = fleet_status(rabbitmq)
        return all((found.get(g.node) or {}).get("config", {}).get("applied") == {target: version} for g in gateways)

    wait_until(lambda: all_say(1), 30, what="five statuses saying version 1")
    print("`hutch fleet status` shows all 5 at version 1 %.1f s after the push" % (time.monotonic() - began))
    load = SensorLoad(gateways, "readings")
    load.thread.start()
    proxy.down()
    for version in (2, 3):
        push(rabbitmq, signer.sign(document(version, target, bridge(version))), tmp_path)
        for gateway in gateways[:4]:
            wait_applied(gateway, target, version)
    proxy.heal()
    wait_applied(cut_off, target, 3, timeout=60)
    assert "version 2 for" not in cut_off.log(), cut_off.log()
    # waves: two at a time, each wave once the one before applied it
    signed = tmp_path / "v4.signed"
    signed.write_bytes(signer.sign(document(4, target, bridge(4))))
    began = time.monotonic()
    waves = _fleet(rabbitmq, "push", str(signed), "--wave", "2")
    assert waves.returncode == 0 and "applied by 5 gateways in 3 waves" in waves.stdout, waves.stdout + waves.stderr
    print("version 4 in 3 waves of 2: %.1f s" % (time.monotonic() - began))
    for gateway in gateways:
        wait_applied(gateway, target, 4)
    # a canary that fails: its upstream does not answer; the next waves never get it
    signed.write_bytes(signer.sign(document(5, target, bridge(5).replace(":%d" % rabbitmq.port, ":1"))))
    canary = _fleet(rabbitmq, "push", str(signed), "--wave", "1", "--abort-after", "1")
    assert canary.returncode == 1 and "stopped after 1 failed" in canary.stderr, canary.stdout + canary.stderr
    first = sorted(gateways, key=lambda g: g.node)[0]
    assert "preflight" in canary.stderr and first.node in canary.stderr
    assert all("version 5 for" not in g.log() for g in gateways if g is not first)
    sent = load.stop()
    received = [body for body, _, _ in consume_every(url, upstream, sent, timeout=120)]
    once, repeats = first_copies(received)
    assert set(once) == set(sent), "%d readings sent, %d arrived" % (len(sent), len(set(once) & set(sent)))
    print("%d readings through 5 bridges restarted by 4 versions: all arrived, %d repeats" % (len(sent), repeats))
    for gateway, text in zip(gateways, written):
        assert open(gateway.base_command[-1], "rb").read() == text
    table = _fleet(rabbitmq, "status")
    assert table.returncode == 0 and all(g.node in table.stdout for g in gateways), table.stdout
    assert table.stdout.split("\n")[0].split()[:7] == [
        "node",
        "groups",
        "version",
        "state",
        "last_seen_s",
        "backlog",
        "last_error",
    ]
    history = _fleet(rabbitmq, "history", first.node)
    assert history.returncode == 0 and "failed %s=5 (preflight)" % target in history.stdout, history.stdout
    for gateway in gateways:
        gateway.stop()
    proxy.stop()
    said = _fleet(rabbitmq, "status", "--json")
    assert all(json.loads(said.stdout)[g.node]["state"] == "offline" for g in gateways), said.stdout


def _fleet(rabbitmq, *args):
    """`hutch fleet COMMAND ...` against the run's RabbitMQ."""
    command = [os.path.join(BIN, "hutch"), "fleet", args[0], "--uri", rabbitmq_url(rabbitmq), "--quiet", "0.5"]
    return subprocess.run(command + list(args[1:]), capture_output=True, text=True, timeout=600)


def _deliver(rabbitmq, routing_key, raw):
    """Bytes published where a document goes (hutch.fleet), as anyone with a connection could:
    what `hutch fleet push` would not send (it checks what it signs) reaches the member."""
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url(rabbitmq)))
    channel = connection.channel()
    channel.confirm_delivery()
    channel.basic_publish("hutch.fleet", routing_key, raw, pika.BasicProperties(delivery_mode=2))
    connection.close()


def test_what_a_member_refuses_and_why(rabbitmq, tmp_path):
    """Each document a member must not take is refused in one log line naming why and in its
    status, and changes nothing: an unknown key, a changed byte, a replay, another node's, an
    expired one, one that needs a restart, one that sets [fleet], a password; a document
    whose bridge's upstream does not answer is refused before anything changes, and never
    tried again. A document that rotates the keys is taken from a trusted key only."""
    signer, other = Signer(), Signer()
    gateway = started(member(tmp_path, rabbitmq, _unique("gw"), [], [signer.key]))
    node = "node:" + gateway.node
    key = "node." + gateway.node
    url = rabbitmq_url(rabbitmq)
    queue = _unique("fleet-in")
    upstream_queue(url, queue)
    good = document(5, node, bridge_to(rabbitmq, queue))
    _deliver(rabbitmq, key, signer.sign(good))
    wait_applied(gateway, node, 5)
    changed = bytearray(signer.sign(document(6, node, bridge_to(rabbitmq, queue))))
    changed[changed.index(b"version = 6")] ^= 1
    expired = document(6, node, header="expires = 2020-01-01T00:00:00Z")
    refusals = [
        ("key", other.sign(document(6, node))),
        ("signature", bytes(changed)),
        ("stale", signer.sign(document(3, node, bridge_to(rabbitmq, queue)))),
        ("target", signer.sign(document(6, "node:" + _unique("elsewhere")))),
        ("expired", signer.sign(expired)),
        ("restart", signer.sign(document(6, node, "[limits]\nframe_max = 8192\n"))),
        ("restart", signer.sign(document(6, node, "[server]\nport = 5999\n"))),
        ("forbidden", signer.sign(document(6, node, '[fleet]\nuri = "amqp://evil:5672"\n'))),
        ("password", signer.sign(document(6, node, '[users.ops]\npassword = "hunter2"\n'))),
        ("password", signer.sign(document(6, node, bridge_to(rabbitmq, queue).replace("${secret:rabbit}", "guest")))),
        (
            "password",
            signer.sign(document(6, node, bridge_to(rabbitmq, queue).replace("${secret:rabbit}", "${secret:..}"))),
        ),
        ("format", signer.sign(b"version = 6\n")),
        ("format", signer.sign(document(6, node, "[nonsense]\nkey = 1\n"))),
        ("format", signer.sign(document(6, node) + "#" * 70000 + "\n")),
    ]
    for reason, raw in refusals:
        at = len(gateway.log())
        _deliver(rabbitmq, key, raw)
        wait_said(gateway, "fleet: document refused (%s)" % reason, after=at)
        assert applied(gateway) == {node: 5} and state(gateway)["last"]["reason"] == reason
    # `hutch fleet sign` refuses the same mistakes before anything is sent, in one line
    secret = tmp_path / "fleet.key"
    keygen = subprocess.run([os.path.join(BIN, "hutch"), "fleet", "keygen", "--out", str(secret)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert keygen.returncode == 0 and keygen.stdout.startswith("ed25519:"), keygen.stderr
    unsigned = tmp_path / "bad.toml"
    unsigned.write_text("[limits]\nframe_max = 8192\n")
    sign = subprocess.run([os.path.join(BIN, "hutch"), "fleet", "sign", "--key", str(secret), "--version", "6", "--target", node, str(unsigned), "--out", str(tmp_path / "bad.signed")], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert sign.returncode == 1 and sign.stderr.count("\n") == 1 and "[limits] is applied only at a start" in sign.stderr, sign.stderr  # fmt: skip
    unsigned.write_text("frame_max = 8192\n")  # (outside any section)
    sign = subprocess.run([os.path.join(BIN, "hutch"), "fleet", "sign", "--key", str(secret), "--version", "6", "--target", node, str(unsigned)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert sign.returncode == 1 and "'frame_max' is outside any section" in sign.stderr, sign.stderr
    not_a_key = tmp_path / "public.txt"
    not_a_key.write_text(keygen.stdout)
    unsigned.write_text(bridge_to(rabbitmq, queue))
    sign = subprocess.run([os.path.join(BIN, "hutch"), "fleet", "sign", "--key", str(not_a_key), "--version", "6", "--target", node, str(unsigned)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert sign.returncode == 1 and "is not a private key" in sign.stderr and sign.stderr.count("\n") == 1, sign.stderr
    # a fleet upstream that refuses the login: one line, said once, nothing applied
    locked_out = member(tmp_path, rabbitmq, _unique("gw"), [], [signer.key], user="guest:wrong").start()
    wait_said(locked_out, "fleet: link down")
    assert "ACCESS_REFUSED" in locked_out.log() and state(locked_out) == {}
    locked_out.stop()
    assert locked_out.log().count("fleet: link down") == 1, locked_out.log()
    # a key the config does not know: refused in the reload's words, nothing changed
    at = len(gateway.log())
    _deliver(rabbitmq, key, signer.sign(document(6, node, bridge_to(rabbitmq, queue) + "colour = 1\n")))
    wait_said(gateway, "fleet: version 6 for %s not kept (config)" % node, after=at)
    assert "unknown key 'colour'" in gateway.log()[at:] and applied(gateway) == {node: 5}
    # an upstream that does not answer: refused before anything changes, and never tried again
    at = len(gateway.log())
    closed = bridge_to(rabbitmq, queue).replace(":%d" % rabbitmq.port, ":1")
    _deliver(rabbitmq, key, signer.sign(document(7, node, closed)))
    wait_said(gateway, "fleet: version 7 for %s not kept (preflight)" % node, after=at)
    assert applied(gateway) == {node: 5} and state(gateway)["failed"] == [[node, 6], [node, 7]]
    assert "bridge cloud stopped" not in gateway.log() and "restarted" not in gateway.log()[at:]
    _deliver(rabbitmq, key, signer.sign(document(7, node, closed)))  # (the same again: said once)
    _deliver(rabbitmq, key, signer.sign(document(8, node, bridge_to(rabbitmq, queue), 'keys = ["%s"]' % other.key)))
    wait_applied(gateway, node, 8)
    assert gateway.log()[at:].count("not kept (preflight)") == 1
    at = len(gateway.log())
    _deliver(rabbitmq, key, signer.sign(document(9, node)))  # (the old key: no longer trusted)
    wait_said(gateway, "fleet: document refused (key)", after=at)
    _deliver(rabbitmq, key, other.sign(document(9, node, bridge_to(rabbitmq, queue))))
    wait_applied(gateway, node, 9)
    status = wait_until(lambda: (fleet_status(rabbitmq).get(gateway.node) or {}).get("config", {}).get("applied") == {node: 9} and fleet_status(rabbitmq)[gateway.node], 20)  # fmt: skip
    assert status["config"]["failed"] == [[node, 6], [node, 7]] and status["config"]["keys"] == [other.key]
    # the configuration in effect, each value with its origin
    shown = subprocess.run([os.path.join(BIN, "hutch"), "ctl", "config", "--config", gateway.base_command[-1], "--data", gateway.data, "--json"], capture_output=True, text=True, timeout=60)  # fmt: skip
    rows = {key: (value, origin) for key, value, origin in json.loads(shown.stdout)["rows"]}
    assert rows["bridge[0].uri"] == (
        "amqp://guest:${secret:rabbit}@127.0.0.1:%d" % rabbitmq.port,
        "fleet %s version 9" % node,
    )
    assert rows["server.name"] == (gateway.node, "file %s" % gateway.base_command[-1]), rows
    assert all("not kept (" in line for line in gateway.errors()), gateway.errors()
    gateway.stop()


@pytest.mark.long  # mostly waits: started early (tests/conftest.py)
def test_a_document_not_confirmed_upstream_is_rolled_back_and_a_kill_retries_it(rabbitmq, tmp_path):
    """A member whose status cannot be confirmed upstream (its user may not publish it) applies
    a document, then goes back to the configuration before it once confirm_within has passed,
    and marks it failed. A SIGKILL while a document is being tried: the next start tries it
    again first, rolled back again while the status still cannot go up, kept once it can."""
    signer = Signer()
    user = _unique("fleet-mute")
    user_who_cannot_report(rabbitmq, user)
    node_name = _unique("gw")
    gateway = started(member(tmp_path, rabbitmq, node_name, [], [signer.key], user=user + ":pw", confirm_within=4))
    node, key = "node:" + node_name, "node." + node_name
    url = rabbitmq_url(rabbitmq)
    queue = _unique("fleet-in")
    upstream_queue(url, queue)
    _deliver(rabbitmq, key, signer.sign(document(1, node, bridge_to(rabbitmq, queue))))
    wait_said(gateway, "fleet: version 1 for %s applied" % node)
    wait_said(gateway, "fleet: version 1 for %s not kept (rolled back)" % node)
    wait_said(gateway, "bridge cloud stopped")  # (the configuration before it: no bridge)
    assert applied(gateway) == {} and state(gateway)["failed"] == [[node, 1]]
    pending = os.path.join(gateway.data, "fleet", "pending.json")
    for version in (2, 3):
        at = len(gateway.log())
        _deliver(rabbitmq, key, signer.sign(document(version, node, bridge_to(rabbitmq, queue))))
        wait_said(gateway, "fleet: version %d for %s applied" % (version, node), after=at)
        sigkill(gateway)  # (within the 4 s it has to confirm it)
        assert os.path.exists(pending)
        if version == 3:  # the fleet link's user may report now
            config = gateway.base_command[-1]
            text = open(config).read().replace(user + ":pw", "guest:guest")
            with open(config, "w") as f:
                f.write(text)
        at = len(gateway.log())
        gateway.start()
        wait_said(gateway, "version %d for %s was being tried when hutch stopped" % (version, node), after=at)
        if version == 2:
            wait_said(gateway, "fleet: version 2 for %s not kept (rolled back)" % node, after=at)
            assert applied(gateway) == {} and state(gateway)["failed"] == [[node, 1], [node, 2]]
        else:
            wait_applied(gateway, node, 3)
            assert state(gateway)["failed"] == [[node, 1], [node, 2]]
    _publish(gateway, queue, b"kept")
    assert [got[0] for got in consume_all(url, queue, 1)] == [b"kept"]
    gateway.stop()
    at = len(gateway.log())  # the applied configuration survives a restart, nothing tried again
    started(gateway)
    wait_said(gateway, "bridge cloud: running", after=at)
    assert applied(gateway) == {node: 3} and "applied" not in gateway.log()[at:].replace("applied by", "")
    gateway.stop()


def test_a_document_whose_status_cannot_go_up_once_applied_is_rolled_back(rabbitmq, tmp_path):
    """The fleet link is cut (a fault proxy: the upstream gone) while a document's pre-flight
    runs (its new bridge's upstream answers slowly, through a second proxy): the document is
    applied, its status cannot be confirmed, and within confirm_within it is rolled back and
    marked failed; when the link is back, the same document, read again, is not applied again."""
    signer = Signer()
    fleet_link = TcpProxy(rabbitmq.port).start()
    slow = TcpProxy(rabbitmq.port).start()
    slow.byte_rate = 300  # (the pre-flight's handshake takes seconds)
    node_name = _unique("gw")
    gateway = member(tmp_path, rabbitmq, node_name, [], [signer.key], confirm_within=4)
    config = gateway.base_command[-1]
    with open(config) as f:
        text = f.read().replace("@127.0.0.1:%d" % rabbitmq.port, "@127.0.0.1:%d" % fleet_link.port)
    with open(config, "w") as f:
        f.write(text)
    started(gateway)
    node, key = "node:" + node_name, "node." + node_name
    queue = _unique("fleet-in")
    upstream_queue(rabbitmq_url(rabbitmq), queue)
    through_slow = bridge_to(rabbitmq, queue).replace(":%d" % rabbitmq.port, ":%d" % slow.port)
    at = len(gateway.log())
    _deliver(rabbitmq, key, signer.sign(document(1, node, through_slow)))
    wait_until(lambda: slow.accepted, 30, what="the pre-flight's connection")  # (the document is in)
    fleet_link.down()
    cut = time.monotonic()
    wait_said(gateway, "fleet: version 1 for %s applied" % node, after=at)
    wait_said(gateway, "fleet: version 1 for %s not kept (rolled back)" % node, after=at)
    print("applied with the fleet link cut: rolled back %.1f s after the cut (confirm_within 4 s)" % (time.monotonic() - cut))  # fmt: skip
    wait_said(gateway, "bridge cloud stopped", after=at)
    assert applied(gateway) == {} and state(gateway)["failed"] == [[node, 1]]
    fleet_link.heal()
    wait_said(gateway, "fleet: link up", after=len(gateway.log()))
    time.sleep(1)  # (the document, read again at the connect, goes nowhere)
    assert gateway.log()[at:].count("version 1 for %s applied" % node) == 1 and applied(gateway) == {}
    gateway.stop()
    fleet_link.stop()
    slow.stop()
