"""TLS listeners (amqps) and SASL EXTERNAL, with real clients and certificates the test makes.

One broker (`hutch serve` with a config of five listeners on 127.0.0.1) serves the matrix:
plain AMQP; TLS that checks a client certificate when one is sent (EXTERNAL by common name);
TLS that requires one (mutual TLS); and two more whose EXTERNAL takes the whole subject or the
first subject alternative name. Every client (pika, aio-pika, kombu, amqplib) logs in over
TLS with a password and with its certificate; then each refusal (a wrong CA, an expired
certificate, none where one is required, EXTERNAL without one, plain AMQP on the TLS port,
TLS on the plain port, TLS 1.1) is tried with each, and must be refused with a reason the
client shows and the broker logs; a pika round trip afterwards shows the broker still serves.
sslyze checks the TLS listener against Mozilla's "intermediate" profile.

A second broker, started with the command line's short form (--tls-port ...), has its
certificate replaced and reloaded with a real SIGHUP.
"""

import asyncio
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import pika
import pytest
from brokers import BIN, RunningBroker, interrupt, says_listening, wait_until
from micropython_env import micropython, serve_env
from paths import NODE_DIR
from tls_certs import Certificates

from hutch.bench.brokers import free_port
from hutch.core.auth import hash_password

HUTCH = os.path.join(BIN, "hutch")

# The tests that share the module's broker run on one worker (pytest-xdist), which starts it
# once; the refusals (24: every case with every client) in a group of their own beside them,
# with a broker of their own where they run elsewhere. Those against the run's RabbitMQ use
# their worker's (tests/interop/conftest.py rabbitmq); those against the RabbitMQ with TLS
# made here run on one worker, which starts it once.
shared_broker = pytest.mark.xdist_group("tls")
refusals = pytest.mark.xdist_group("tls-refusals")
with_rabbitmq_tls = pytest.mark.xdist_group("rabbitmq-tls")

# The users: guest logs in with its password from anywhere; the devices by certificate (their
# passwords are never used: EXTERNAL takes none).
USERS = {
    "guest": "guest",
    "sensor-01": "unused-1",  # CN, on the listeners that take the common name
    "CN=sensor-02,OU=gw,O=hutch": "unused-2",  # the whole subject (distinguished_name)
    "sensor-03.devices.example": "unused-3",  # its first subject alternative name
}


def _config(certs, ports):
    tls = 'certfile = "%s", keyfile = "%s", cacertfile = "%s"' % (certs.server.cert, certs.server.key, certs.ca)
    lines = []
    for name, password in USERS.items():
        lines += ['[users."%s"]' % name, 'password_hash = "%s"' % hash_password(password, os.urandom(4)), ""]
    lines += ["[auth]", "loopback_users = []", ""]
    listeners = (
        (ports["plain"], None),
        (ports["tls"], "verify_peer = true"),
        (ports["mtls"], "verify_peer = true, fail_if_no_peer_cert = true"),
        (ports["dn"], 'verify_peer = true, fail_if_no_peer_cert = true, login_from = "distinguished_name"'),
        (ports["san"], 'verify_peer = true, fail_if_no_peer_cert = true, login_from = "subject_alternative_name"'),
    )
    for port, options in listeners:
        lines += ["[[listener]]", 'bind = "127.0.0.1"', "port = %d" % port]
        if options is not None:
            lines.append("tls = {%s, %s}" % (tls, options))
        lines.append("")
    return "\n".join(lines)


class TLSBroker(RunningBroker):
    """`hutch serve --config` with the five listeners of _config(): self.ports by kind."""

    def __init__(self, tmp_path, certs):
        self.certs = certs
        self.config_path = str(tmp_path / "hutch.toml")
        super().__init__([HUTCH, "serve"], tmp_path)

    def _take_port(self, port):
        self.port = port
        self.ports = {"plain": port}
        for kind in ("tls", "mtls", "dn", "san"):
            while True:
                other = free_port()
                if other not in self.ports.values():
                    break
            self.ports[kind] = other
        with open(self.config_path, "w") as f:
            f.write(_config(self.certs, self.ports))
        self.command = self.base_command + ["--config", self.config_path, "--data", self.data]

    def _wait_listening(self, offset):
        listening = [(self.ports["plain"], False)] + [(self.ports[k], True) for k in ("tls", "mtls", "dn", "san")]
        wait_until(
            lambda: (
                self.proc.poll() is not None
                or all(says_listening(self.log_since(offset), port, tls) for port, tls in listening)
            ),
            30,
            what=lambda: "every listener in the broker's log:\n%s" % self.log_since(offset),
        )
        if self.proc.poll() is not None:
            raise AssertionError("broker exited with %s:\n%s" % (self.proc.returncode, self.log()))


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    made = Certificates(tmp_path_factory.mktemp("certs"))
    made.devices = {
        "sensor-01": made.client("sensor-01"),
        "sensor-02": made.client("sensor-02"),
        "sensor-03": made.client("sensor-03", sans=("sensor-03.devices.example", "gw.devices.example")),
        "expired": made.client("sensor-01", expired=True, file_name="expired"),
        # the same name from a CA the broker does not trust
        "rogue": Certificates(tmp_path_factory.mktemp("rogue"), "rogue CA").client("sensor-01"),
    }
    return made


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, certs):
    running = TLSBroker(tmp_path_factory.mktemp("tls-broker"), certs).start()
    yield running
    code = running.stop()
    assert not running.errors(), "broker logged errors:\n" + running.log()[-5000:]
    assert code == 0, running.log()[-3000:]


# ---------------------------------------------------------------- the clients


def client_context(certs, device=None, ca=None):
    context = ssl.create_default_context(cafile=ca or certs.ca)
    if device is not None:
        context.load_cert_chain(device.cert, device.key)
    return context


def pika_connect(port, certs=None, device=None, external=False, tls=True):
    credentials = pika.credentials.ExternalCredentials() if external else pika.PlainCredentials("guest", "guest")
    options = pika.SSLOptions(client_context(certs, device), "localhost") if tls else None
    params = pika.ConnectionParameters(
        "127.0.0.1",
        port,
        credentials=credentials,
        ssl_options=options,
        socket_timeout=10,
        stack_timeout=15,
        connection_attempts=1,
    )
    return pika.BlockingConnection(params)


def pika_round_trip(port, certs=None, device=None, external=False, tls=True):
    """Connect, send a message to a queue of its own and get it back; the body."""
    connection = pika_connect(port, certs, device, external, tls)
    try:
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"over tls")
        method, _props, body = channel.basic_get(queue, auto_ack=True)
        assert method is not None
        return body
    finally:
        connection.close()


def aio_pika_round_trip(port, certs=None, device=None, external=False, tls=True):
    import aio_pika

    async def run():
        scheme = "amqps" if tls else "amqp"
        user = "" if external else "guest:guest@"
        query = "?auth=external" if external else ""
        url = "%s://%s127.0.0.1:%d/%s" % (scheme, user, port, query)
        context = client_context(certs, device) if tls else None
        connection = await asyncio.wait_for(aio_pika.connect(url, ssl_context=context, timeout=10), 15)
        try:
            channel = await connection.channel()
            queue = await channel.declare_queue("", exclusive=True)
            await channel.default_exchange.publish(aio_pika.Message(b"over tls"), routing_key=queue.name)
            message = await queue.get(timeout=5)
            await message.ack()
            return message.body
        finally:
            await connection.close()

    return asyncio.run(run())


def kombu_round_trip(port, certs=None, device=None, external=False, tls=True):
    import kombu

    options = None
    if tls:
        options = {"ca_certs": certs.ca, "cert_reqs": ssl.CERT_REQUIRED, "server_hostname": "localhost"}
        if device is not None:
            options.update(certfile=device.cert, keyfile=device.key)
    login = {"login_method": "EXTERNAL", "userid": "", "password": ""} if external else {}
    with kombu.Connection(
        "amqp://guest:guest@127.0.0.1:%d//" % port, ssl=options or False, connect_timeout=10, **login
    ) as connection:
        connection.connect()
        queue = kombu.Queue("kombu-tls-%d" % os.getpid(), exclusive=True)
        with connection.Producer() as producer:
            producer.publish(b"over tls", routing_key=queue.name, declare=[queue], content_type="application/data")
        message = connection.SimpleQueue(queue).get(timeout=5)
        message.ack()
        return message.body


def amqplib_round_trip(port, certs=None, device=None, external=False, tls=True):
    node = shutil.which("node")
    assert node, "node is missing"
    env = dict(os.environ, NODE_SCRIPT_TIMEOUT_MS="15000", TLS_CA=certs.ca if certs else "")
    if device is not None:
        env.update(TLS_CERT=device.cert, TLS_KEY=device.key)
    if external:
        env["TLS_EXTERNAL"] = "1"
    url = "%s://%s127.0.0.1:%d/" % ("amqps" if tls else "amqp", "" if external else "guest:guest@", port)
    result = subprocess.run(
        [node, os.path.join(NODE_DIR, "amqps.js"), url],
        cwd=NODE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=40,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    if not report["ok"]:
        raise ConnectionError("amqplib: %s" % report["error"].splitlines()[0])
    return report["body"].encode()


CLIENTS = {
    "pika": pika_round_trip,
    "aio-pika": aio_pika_round_trip,
    "kombu": kombu_round_trip,
    "amqplib": amqplib_round_trip,
}


def still_serving(broker):
    """A pika round trip over TLS: whatever came before, the broker serves."""
    assert pika_round_trip(broker.ports["tls"], broker.certs) == b"over tls"


def log_grew(broker, offset, text):
    return wait_until(lambda: text in broker.log_since(offset), what="%r in the broker's log" % text)


# ---------------------------------------------------------------- logins that work


@shared_broker
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_server_only_tls_with_a_password(tls_broker, client):
    """TLS with no client certificate, PLAIN (or AMQPLAIN) over it: on the listener that checks a
    certificate if one is sent, and is content without."""
    assert CLIENTS[client](tls_broker.ports["tls"], tls_broker.certs) == b"over tls"


@shared_broker
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_mutual_tls_with_external(tls_broker, client):
    """A device's certificate names its user: EXTERNAL logs in as its common name, on the
    listener that requires a certificate."""
    offset = len(tls_broker.log().encode())
    device = tls_broker.certs.devices["sensor-01"]
    assert CLIENTS[client](tls_broker.ports["mtls"], tls_broker.certs, device, external=True) == b"over tls"
    log_grew(tls_broker, offset, "connection open (user 'sensor-01'")


@shared_broker
def test_hutch_publish_and_get_over_tls_with_a_device_certificate(tls_broker):
    """The quick-test commands take the TLS options of the rest of the CLI: the broker's CA, a
    device's certificate, and EXTERNAL."""
    certs, device = tls_broker.certs, tls_broker.certs.devices["sensor-01"]
    tls = ["--tls", "--port", str(tls_broker.ports["mtls"]), "--cacertfile", certs.ca]
    device_login = ["--certfile", device.cert, "--keyfile", device.key, "--external"]
    pika_connect(tls_broker.ports["plain"], tls=False).channel().queue_declare("quick-tls")
    offset = len(tls_broker.log().encode())
    for command in (
        ["publish", *tls, *device_login, "--routing-key", "quick-tls", "over tls"],
        ["get", *tls, *device_login, "--ack", "quick-tls"],
    ):
        done = subprocess.run([HUTCH, *command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    assert done.stdout == "over tls\n"
    log_grew(tls_broker, offset, "connection open (user 'sensor-01', client hutch.client")
    done = subprocess.run([HUTCH, "get", *tls, "quick-tls"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "hutch get: cannot connect to 127.0.0.1" in done.stderr, done.stderr


@shared_broker
def test_external_names_the_user_by_subject_or_alternative_name(tls_broker):
    """login_from = "distinguished_name": the whole subject, as RFC 4514 writes it (cryptography's
    rfc4514_string(), RabbitMQ's form); "subject_alternative_name": the first of them."""
    certs = tls_broker.certs
    device = certs.devices["sensor-02"]
    assert device.subject == "CN=sensor-02,OU=gw,O=hutch"
    offset = len(tls_broker.log().encode())
    assert pika_round_trip(tls_broker.ports["dn"], certs, device, external=True) == b"over tls"
    log_grew(tls_broker, offset, "connection open (user 'CN=sensor-02,OU=gw,O=hutch'")
    assert pika_round_trip(tls_broker.ports["san"], certs, certs.devices["sensor-03"], external=True) == b"over tls"
    log_grew(tls_broker, offset, "connection open (user 'sensor-03.devices.example'")


@shared_broker
def test_mechanisms_offered(tls_broker):
    """EXTERNAL is offered on TLS (with a certificate or without, as RabbitMQ does), never on
    plain TCP; ANONYMOUS is not offered unless configured."""

    def offered(port, tls):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        if tls:
            sock = client_context(tls_broker.certs).wrap_socket(sock, server_hostname="localhost")
        with sock:
            sock.sendall(b"AMQP\x00\x00\x09\x01")
            data = b""
            while b"en_US" not in data:
                chunk = sock.recv(4096)
                assert chunk, data
                data += chunk
        return data

    assert b"EXTERNAL PLAIN AMQPLAIN\x00\x00\x00\x05en_US" in offered(tls_broker.ports["tls"], True)
    plain = offered(tls_broker.ports["plain"], False)
    assert b"\x00\x00\x00\x0ePLAIN AMQPLAIN\x00\x00\x00\x05en_US" in plain
    assert b"EXTERNAL" not in plain and b"ANONYMOUS" not in plain


# ---------------------------------------------------------------- refusals

# case: (the listener tried, the device certificate, EXTERNAL, TLS, what the client's error says
# (one of them, any case), what the broker logs)
REFUSALS = {
    "wrong CA": (
        "mtls",
        "rogue",
        True,
        True,
        ("unknown ca", "unknown_ca"),
        "TLS handshake failed: CERTIFICATE_VERIFY_FAILED",
    ),
    "expired certificate": (
        "mtls",
        "expired",
        True,
        True,
        ("certificate expired", "certificate_expired"),
        "TLS handshake failed: CERTIFICATE_VERIFY_FAILED (certificate has expired)",
    ),
    "no certificate where one is required": (
        "mtls",
        None,
        False,
        True,
        ("certificate required", "certificate_required"),
        "TLS handshake failed: PEER_DID_NOT_RETURN_A_CERTIFICATE",
    ),
    "EXTERNAL without a certificate": (
        "tls",
        None,
        True,
        True,
        ("ACCESS_REFUSED - Login was refused using authentication mechanism EXTERNAL", "access-refused", "403"),
        "EXTERNAL login refused: connection peer presented no TLS (x.509) certificate",
    ),
    "plain AMQP on the TLS port": (
        "tls",
        None,
        False,
        False,
        ("",),  # each client words a socket that answered with a TLS alert its own way
        "sent to a TLS port",
    ),
    "TLS on the plain port": (
        "plain",
        None,
        False,
        True,
        ("wrong version number", "wrong_version_number"),
        "unsupported protocol header b'\\x16\\x03",
    ),
}


@refusals
@pytest.mark.parametrize("case", list(REFUSALS))
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_refused(tls_broker, case, client):
    kind, device_name, external, tls, says, logged = REFUSALS[case]
    certs = tls_broker.certs
    device = certs.devices[device_name] if device_name else None
    offset = len(tls_broker.log().encode())
    with pytest.raises(Exception) as refused:
        CLIENTS[client](tls_broker.ports[kind], certs, device, external, tls)
    message = "%s: %s" % (refused.type.__name__, refused.value)
    print("%-38s %-9s refused: %s" % (case, client, message[:200]))
    assert any(word.lower() in message.lower() for word in says), message
    log_grew(tls_broker, offset, logged)
    still_serving(tls_broker)


@shared_broker
def test_a_client_that_refuses_the_broker_s_certificate_is_logged_as_that(tls_broker, tmp_path):
    """The alert a client sends about the broker's certificate is the client's refusal, not a
    bad certificate of the broker's (OpenSSL's own words: SSLV3_ALERT_BAD_CERTIFICATE)."""
    stranger = Certificates(str(tmp_path), "a CA the broker's certificate is not from").ca
    for ca, server_hostname, alert in (
        (stranger, "localhost", "unknown ca, TLSV1_ALERT_UNKNOWN_CA"),  # signed by a CA it does not know
        (tls_broker.certs.ca, "gateway.example", "bad certificate, SSLV3_ALERT_BAD_CERTIFICATE"),  # not its name
    ):
        offset = len(tls_broker.log().encode())
        context = ssl.create_default_context(cafile=ca)
        with socket.create_connection(("127.0.0.1", tls_broker.ports["tls"]), timeout=10) as sock:
            with pytest.raises(ssl.SSLCertVerificationError):
                context.wrap_socket(sock, server_hostname=server_hostname)
        log_grew(
            tls_broker,
            offset,
            "TLS handshake failed: the client refused the broker's certificate (its alert: %s)" % alert,
        )
    still_serving(tls_broker)


@shared_broker
def test_tls_1_1_is_refused(tls_broker):
    """openssl s_client offering TLS 1.1 only gets the protocol_version alert."""
    offset = len(tls_broker.log().encode())
    result = subprocess.run(
        [
            "openssl",
            "s_client",
            "-tls1_1",
            "-cipher",
            "DEFAULT@SECLEVEL=0",  # (else this OpenSSL will not even offer it)
            "-connect",
            "127.0.0.1:%d" % tls_broker.ports["tls"],
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=30,
    )
    print(result.stderr.strip().splitlines()[0])
    assert result.returncode != 0
    assert "alert protocol version" in result.stderr, result.stdout + result.stderr
    log_grew(tls_broker, offset, "TLS handshake failed: UNSUPPORTED_PROTOCOL")
    still_serving(tls_broker)


@shared_broker
def test_silent_client_is_closed_after_5_s(tls_broker):
    """A client that opens the TLS port and sends nothing holds the socket 5 s, as RabbitMQ's
    ssl_handshake_timeout has it (asyncio's own default is 60 s)."""
    offset = len(tls_broker.log().encode())
    sock = socket.create_connection(("127.0.0.1", tls_broker.ports["tls"]), timeout=20)
    started = time.monotonic()
    assert sock.recv(10) == b""
    waited = time.monotonic() - started
    sock.close()
    assert 4.5 <= waited < 8, waited
    log_grew(tls_broker, offset, "TLS handshake failed: not done within 5 s")
    still_serving(tls_broker)


@shared_broker
def test_sslyze_mozilla_intermediate(tls_broker):
    """sslyze's check against Mozilla's "intermediate" profile passes: TLS 1.2 and 1.3 only, AEAD
    suites with forward secrecy, the curves X25519, P-256 and P-384 (and the certificate the
    test made checked against its CA)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sslyze",
            "--mozilla_config=intermediate",
            "--certinfo_ca_file",
            tls_broker.certs.ca,
            "127.0.0.1:%d" % tls_broker.ports["tls"],
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = result.stdout + result.stderr
    verdict = output[output.find("COMPLIANCE AGAINST") :]
    print(verdict.strip())
    for section in ("Supported curves:", "Accepted:"):
        print("\n".join(line.strip() for line in output.splitlines() if section in line))
    assert result.returncode == 0 and "OK - Compliant" in output, output[-4000:]
    assert "Supported curves:                  X25519, secp256r1, secp384r1" in output, output[-4000:]
    still_serving(tls_broker)


# ---------------------------------------------------------------- the short form, SIGHUP


def test_command_line_tls_listener_and_certificate_reload_on_sighup(tmp_path):
    """`hutch serve --tls-port P --certfile F --keyfile F --cacertfile F --verify-peer
    --fail-if-no-peer-cert` beside --port; the certificate replaced on disk and SIGHUP sent: a
    connection opened before goes on with the old one, a new one sees the new certificate. A
    reload that cannot read its files keeps the certificate it has."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    certs = Certificates(tmp_path / "certs")
    device = certs.client("sensor-01")
    live_cert, live_key = str(tmp_path / "live.pem"), str(tmp_path / "live.key")
    shutil.copy(certs.server.cert, live_cert)
    shutil.copy(certs.server.key, live_key)
    config = tmp_path / "users.toml"
    config.write_text('[users.sensor-01]\npassword_hash = "%s"\n' % hash_password("x", b"salt"))
    tls_port = free_port()
    options = ["--tls-port", str(tls_port), "--certfile", live_cert, "--keyfile", live_key]
    options += ["--cacertfile", certs.ca, "--verify-peer", "--fail-if-no-peer-cert", "--config", str(config)]
    broker = RunningBroker([HUTCH, "serve"] + options, tmp_path)
    broker.start()
    try:
        wait_until(lambda: "over TLS on 127.0.0.1:%d" % tls_port in broker.log(), what="the TLS listener")
        first = certs.server.certificate.public_bytes(Encoding.DER)
        assert shown_certificate(tls_port, certs, device) == first
        before = pika_connect(tls_port, certs, device, external=True)
        channel = before.channel()
        channel.queue_declare("kept")

        renewed = certs.issue(
            "renewed", x509.Name.from_rfc4514_string("CN=localhost"), sans=("localhost",), server=True
        )
        shutil.copy(renewed.cert, live_cert)
        shutil.copy(renewed.key, live_key)
        broker.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "reloaded: new connections see it" in broker.log(), what="the reload in the log")

        channel.basic_publish("", "kept", b"after the reload")  # the connection made before goes on
        assert channel.basic_get("kept", auto_ack=True)[2] == b"after the reload"
        assert shown_certificate(tls_port, certs, device) == renewed.certificate.public_bytes(Encoding.DER)
        assert pika_round_trip(tls_port, certs, device, external=True) == b"over tls"

        with open(live_key, "w") as f:
            f.write("not a key\n")
        broker.proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "not reloaded, the old certificate stays" in broker.log(), what="the failed reload")
        assert shown_certificate(tls_port, certs, device) == renewed.certificate.public_bytes(Encoding.DER)
        channel.basic_publish("", "kept", b"still")
        assert channel.basic_get("kept", auto_ack=True)[2] == b"still"
        before.close()
    finally:
        code = broker.stop()
    assert code == 0, broker.log()[-3000:]
    assert not broker.errors(), broker.log()[-3000:]
    print("\n".join(line for line in broker.log().splitlines() if "TLS" in line))


def shown_certificate(port, certs, device):
    """The DER of the certificate a new client of the mutual-TLS listener on port is shown."""
    context = client_context(certs, device)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        with context.wrap_socket(sock, server_hostname="localhost") as tls:
            return tls.getpeercert(binary_form=True)


# ---------------------------------------------------------------- config mistakes


@pytest.mark.parametrize(
    "listener, says",
    [
        ('tls = {certfile = "%(cert)s", keyfile = "%(key)s", verify = true}', "unknown key 'verify' in tls"),
        ('tls = {certfile = "%(dir)s/missing.pem", keyfile = "%(key)s"}', "cannot read certfile %(dir)s/missing.pem"),
        ('tls = {certfile = "%(cert)s"}', "tls needs keyfile"),
        ('tls = {certfile = "%(cert)s", keyfile = "%(key)s", verify_peer = true}', "verify_peer needs cacertfile"),
        ('tls = {certfile = "%(cert)s", keyfile = "%(key)s", login_from = "cn"}', "login_from must be one of"),
        ('tls = {certfile = "%(cert)s", keyfile = "%(ca)s"}', "cannot use the certificate files"),
    ],
)
def test_config_mistakes_are_one_line(tmp_path, listener, says):
    certs = Certificates(tmp_path / "certs")
    values = {"cert": certs.server.cert, "key": certs.server.key, "ca": certs.ca, "dir": str(tmp_path)}
    config = tmp_path / "hutch.toml"
    config.write_text('[[listener]]\nbind = "127.0.0.1"\nport = %d\n%s\n' % (free_port(), listener % values))
    result = subprocess.run(
        [HUTCH, "serve", "--config", str(config), "--data", str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    print(result.stderr.strip())
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and (says % values) in result.stderr, result.stderr


def test_command_line_tls_options_need_each_other(tmp_path):
    for options, says in (
        (["--tls-port", "5671"], "--tls-port needs --certfile and --keyfile"),
        (["--certfile", "x.pem"], "--certfile is an option of --tls-port"),
    ):
        result = subprocess.run(
            [HUTCH, "serve", "--data", str(tmp_path / "data")] + options, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2 and says in result.stderr, result.stderr


# ---------------------------------------------------------------- on MicroPython


class MicroPythonTLSBroker(RunningBroker):
    """`micropython -m hutch.server.serve` with a JSON config (no TOML parser there): a plain
    listener and a mutual-TLS one (a board's TLS can require a certificate, not read it)."""

    def __init__(self, tmp_path, certs, tls_options):
        self.certs = certs
        self.tls_options = tls_options
        self.config_path = str(tmp_path / "hutch.json")
        super().__init__([micropython(), "-m", "hutch.server.serve"], tmp_path, env=serve_env(tmp_path))

    def _take_port(self, port):
        self.port = port
        self.tls_port = port
        while self.tls_port == port:
            self.tls_port = free_port()
        tls = {"certfile": self.certs.server.cert, "keyfile": self.certs.server.key, "cacertfile": self.certs.ca}
        tls.update(self.tls_options)
        config = {
            "users": {
                "sensor-01": {"password_hash": hash_password("pw", b"salt")},
                "guest": {"password_hash": hash_password("guest", b"salt")},
            },
            "auth": {"loopback_users": []},
            "listener": [
                {"bind": "127.0.0.1", "port": port},
                {"bind": "127.0.0.1", "port": self.tls_port, "tls": tls},
            ],
        }
        with open(self.config_path, "w") as f:
            json.dump(config, f)
        self.command = self.base_command + ["--config", self.config_path, "--data", self.data]

    def _wait_listening(self, offset):
        wait_until(
            lambda: self.proc.poll() is not None or says_listening(self.log_since(offset), self.tls_port, True),
            30,
            what="listening over TLS on %d" % self.tls_port,
        )
        if self.proc.poll() is not None:
            raise AssertionError("broker exited with %s:\n%s" % (self.proc.returncode, self.log()))


def test_mutual_tls_on_micropython(tmp_path):
    """The stream port (ports/tcp.py) as a board runs it, on the unix port's Mbed TLS: a device
    with a certificate from the CA logs in with its password; one without a certificate is
    refused in the handshake, with the reason in the log; EXTERNAL is not offered (MicroPython's
    TLS socket does not show the certificate)."""
    certs = Certificates(tmp_path / "certs")
    device = certs.client("sensor-01")
    broker = MicroPythonTLSBroker(tmp_path, certs, {"verify_peer": True, "fail_if_no_peer_cert": True}).start()
    try:

        def connect(with_certificate, credentials=None):
            context = client_context(certs, device if with_certificate else None)
            params = pika.ConnectionParameters(
                "127.0.0.1",
                broker.tls_port,
                credentials=credentials or pika.PlainCredentials("sensor-01", "pw"),
                ssl_options=pika.SSLOptions(context, "localhost"),
                socket_timeout=10,
                stack_timeout=15,
                connection_attempts=1,
            )
            return pika.BlockingConnection(params)

        with socket.create_connection(("127.0.0.1", broker.tls_port), timeout=10) as sock:
            with client_context(certs, device).wrap_socket(sock, server_hostname="localhost") as tls:
                assert tls.version() == "TLSv1.2"  # (this Mbed TLS has no 1.3)
        connection = connect(True)
        channel = connection.channel()
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.basic_publish("", queue, b"over tls")
        assert channel.basic_get(queue, auto_ack=True)[2] == b"over tls"
        connection.close()

        offset = len(broker.log().encode())
        with pytest.raises(Exception) as refused:
            connect(False)
        print("no certificate: %s" % refused.value)
        assert "handshake failure" in str(refused.value).lower()
        log_grew(broker, offset, "TLS handshake failed: OSError(-29824, 'MBEDTLS_ERR_SSL_NO_CLIENT_CERTIFICATE')")

        with pytest.raises(pika.exceptions.AMQPConnectionError) as refused:
            connect(True, pika.credentials.ExternalCredentials())  # pika finds EXTERNAL not offered
        print("EXTERNAL: %r" % refused.value)
        assert pika_round_trip(broker.port, tls=False) == b"over tls"  # (the plain listener beside it)
        assert interrupt(broker) == 0, broker.log()[-3000:]
    finally:
        if broker.proc.poll() is None:
            broker.proc.kill()
        broker.stop()
    assert not broker.errors(), broker.log()[-3000:]


def test_micropython_refuses_optional_peer_verification(tmp_path):
    """Mbed TLS's optional verification lets a client whose certificate failed it through: on
    MicroPython verify_peer needs fail_if_no_peer_cert, said in one line."""
    certs = Certificates(tmp_path / "certs")
    broker = MicroPythonTLSBroker(tmp_path, certs, {"verify_peer": True})
    broker.proc = subprocess.run(broker.command, env=broker.env, capture_output=True, text=True, timeout=60)
    output = broker.proc.stdout + broker.proc.stderr
    assert broker.proc.returncode == 2, output
    assert "verify_peer needs fail_if_no_peer_cert = true on MicroPython" in output, output


# ---------------------------------------------------------------- the uplink's side (the bridge)


def uplink_round_trip(port, context, mechanism, user="", password=""):
    """What the bridge's amqps:// uplink does: ports/tls.py's client_context (the same policy as
    the listeners), the sensor client's protocol (client/protocol.py, which the bridge drives)
    over it, logging in with EXTERNAL or PLAIN; then a message through a queue and back. The
    body, and the name of the TLS protocol spoken."""
    from hutch.client.protocol import AMQPError, Message, Protocol
    from hutch.codec import spec

    protocol = Protocol(frame_max=131072)
    protocol.connect(0, user, password, "/", heartbeat=0, name="tls uplink test", mechanism=mechanism)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as sock:

            def until(done):
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:
                    event = protocol.next_event()
                    while event is not None:
                        if isinstance(event, AMQPError):
                            raise ConnectionError("%s" % (event,))
                        if done(event):
                            return event
                        event = protocol.next_event()
                    data = protocol.data_to_send()  # (what reading made it answer: start-ok...)
                    while data is not None:
                        sock.sendall(bytes(data))
                        data = protocol.data_to_send()
                    if done(None):
                        return None
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise ConnectionError("the broker closed the connection")
                    protocol.receive_data(chunk)
                raise AssertionError("the broker did not answer in time")

            until(lambda event: protocol.awaiting == 0 and protocol.channel_open)
            protocol.call(spec.QUEUE_DECLARE, (0, "tls-uplink", False, False, False, True, False, None))
            until(lambda event: protocol.awaiting == 0)
            protocol.publish("", "tls-uplink", b"over the uplink")
            protocol.call(spec.BASIC_GET, (0, "tls-uplink", True))
            message = until(lambda event: isinstance(event, Message))
            return bytes(message.body), sock.version()


@shared_broker
def test_uplink_tls_and_external_against_hutch(tls_broker):
    """The client side of the shared TLS code, against hutch's mutual-TLS listener: the broker's
    certificate checked (CA and name), the device's presented, EXTERNAL logs in as its CN."""
    from hutch.ports.tls import client_context

    certs = tls_broker.certs
    device = certs.devices["sensor-01"]
    context = client_context(certs.ca, device.cert, device.key)
    assert uplink_round_trip(tls_broker.ports["mtls"], context, "EXTERNAL") == (b"over the uplink", "TLSv1.3")
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2  # the listeners' policy
    with pytest.raises(ssl.SSLCertVerificationError):  # a broker the given CA did not sign: refused
        uplink_round_trip(tls_broker.ports["mtls"], client_context(certs.devices["rogue"].cert), "EXTERNAL")


@pytest.fixture(scope="module")
def rabbitmq_tls(tmp_path_factory):
    """Debian's RabbitMQ with a mutual-TLS listener and EXTERNAL (rabbitmq_auth_mechanism_ssl,
    the user from the certificate's CN), and the user hutch-edge; MQTT over secure WebSocket
    (rabbitmq_web_mqtt, web_mqtts_port); its certificates from the test's CA."""
    from hutch.bench.brokers import RabbitMQ

    certs = Certificates(tmp_path_factory.mktemp("rabbitmq-certs"))
    certs.edge = certs.client("hutch-edge")
    web_mqtts_port = free_port()
    conf = (
        "ssl_options.cacertfile = %s" % certs.ca,
        "ssl_options.verify = verify_peer",
        "ssl_options.fail_if_no_peer_cert = true",
        "auth_mechanisms.1 = PLAIN",
        "auth_mechanisms.2 = AMQPLAIN",
        "auth_mechanisms.3 = EXTERNAL",
        "ssl_cert_login_from = common_name",
        # MQTT over secure WebSocket (rabbitmq_web_mqtt, path /ws), without client certificates;
        # its plain listeners on free ports of 127.0.0.1 (1883 and 15675 are not this run's)
        "web_mqtt.ssl.ip = 127.0.0.1",
        "web_mqtt.ssl.port = %d" % web_mqtts_port,
        "web_mqtt.ssl.certfile = %s" % certs.server.cert,
        "web_mqtt.ssl.keyfile = %s" % certs.server.key,
        "web_mqtt.ssl.cacertfile = %s" % certs.ca,
        "web_mqtt.tcp.ip = 127.0.0.1",
        "web_mqtt.tcp.port = %d" % free_port(),
        "mqtt.listeners.tcp.1 = 127.0.0.1:%d" % free_port(),
    )
    server = RabbitMQ(
        str(tmp_path_factory.mktemp("rabbitmq-tls")),
        tls=(certs.server.cert, certs.server.key),
        conf=conf,
        plugins=("rabbitmq_auth_mechanism_ssl", "rabbitmq_mqtt", "rabbitmq_web_mqtt"),
    )
    server.web_mqtts_port = web_mqtts_port
    try:
        server.start()
        for command in (
            ["add_user", "hutch-edge", "unused"],
            ["set_permissions", "-p", "/", "hutch-edge", ".*", ".*", ".*"],
        ):
            subprocess.run([server.CTL] + command, env=server.env, capture_output=True, check=True, timeout=60)
    except BaseException:
        server.stop()
        raise
    server.certs = certs
    yield server
    server.stop()


@with_rabbitmq_tls
def test_uplink_tls_and_external_against_rabbitmq(rabbitmq_tls):
    """The same client context and login against RabbitMQ 3.10 with TLS: what an amqps:// bridge
    with a client certificate and EXTERNAL does upstream."""
    from hutch.ports.tls import client_context

    certs = rabbitmq_tls.certs
    context = client_context(certs.ca, certs.edge.cert, certs.edge.key)
    assert uplink_round_trip(rabbitmq_tls.tls_port, context, "EXTERNAL") == (b"over the uplink", "TLSv1.3")
    # Without one: refused in the handshake (the client reads the certificate_required alert, or,
    # when Erlang has closed the socket first, its end)
    with pytest.raises((ssl.SSLError, ConnectionError), match="CERTIFICATE_REQUIRED|EOF|closed"):
        uplink_round_trip(rabbitmq_tls.tls_port, client_context(certs.ca), "EXTERNAL")


@with_rabbitmq_tls
def test_mqtt_over_secure_websocket_as_rabbitmq_s_web_mqtt_answers_it(rabbitmq_tls, tmp_path):
    """wss:// with Paho and MQTT.js checking the broker's certificate, on hutch (a listener with
    websocket and tls) and on RabbitMQ's web-mqtt over TLS: Paho's scenario gives the same (QoS 0
    and 1 in order, a retained message, a will, a persistent session), MQTT.js's alike."""
    from mqtt_brokers import (
        MqttBroker,
        assert_mqtt_js_sees_rabbitmq_alike,
        assert_websocket_scenarios_alike,
        run_mqtt_js,
        served_from_config,
        websocket_scenario,
        wss_listener,
    )

    certs = rabbitmq_tls.certs
    node_ca = {"NODE_EXTRA_CA_CERTS": str(certs.ca)}  # (MQTT.js, under Node, trusting the test's CA)
    wss_port = free_port()
    with served_from_config(tmp_path, wss_listener(wss_port, certs)):
        ours = websocket_scenario(MqttBroker("hutch", wss_port), ca=str(certs.ca))
        ours_js = run_mqtt_js(None, 4, "wss://guest:guest@127.0.0.1:%d/mqtt" % wss_port, node_ca, "js/status/node-1")
    theirs = websocket_scenario(MqttBroker("rabbitmq", rabbitmq_tls.web_mqtts_port), ca=str(certs.ca))
    url = "wss://guest:guest@127.0.0.1:%d/ws" % rabbitmq_tls.web_mqtts_port
    assert_mqtt_js_sees_rabbitmq_alike(ours_js, run_mqtt_js(None, 4, url, node_ca, "js/status/node-1"))
    assert_websocket_scenarios_alike(ours, theirs)


@with_rabbitmq_tls
def test_bridge_forwards_over_tls_with_external_to_rabbitmq(rabbitmq_tls, tmp_path):
    """A hutch [[bridge]] whose uplink is amqps:// with ?auth_mechanism=external: it checks
    RabbitMQ's certificate against ca_file, presents hutch-edge's and logs in as its CN; what
    is published to the local queue arrives in RabbitMQ's."""
    certs = rabbitmq_tls.certs
    config = tmp_path / "edge.toml"
    config.write_text(
        "\n".join(
            (
                "[[bridge]]",
                'name = "cloud"',
                'uri = "amqps://127.0.0.1:%d/?auth_mechanism=external"' % rabbitmq_tls.tls_port,
                'queue = "readings"',
                'exchange = ""',
                'routing_key = "edge-readings"',
                'declare = { queue = "edge-readings" }',
                'ca_file = "%s"' % certs.ca,
                'cert_file = "%s"' % certs.edge.cert,
                'key_file = "%s"' % certs.edge.key,
                'server_name = "localhost"',
            )
        )
    )
    edge = RunningBroker([HUTCH, "serve", "--config", str(config)], tmp_path).start()
    try:
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", edge.port)) as local:
            channel = local.channel()
            channel.queue_declare("readings", durable=True)
            channel.confirm_delivery()
            for n in range(100):
                channel.basic_publish("", "readings", b"reading %d" % n, pika.BasicProperties(delivery_mode=2))
        with pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", rabbitmq_tls.port)) as upstream:
            channel = upstream.channel()
            wait_until(
                lambda: channel.queue_declare("edge-readings", passive=True).method.message_count == 100,
                what=lambda: "100 messages upstream; the edge's log:\n" + edge.log()[-3000:],
            )
            bodies = [channel.basic_get("edge-readings", auto_ack=True)[2] for _ in range(100)]
        assert bodies == [b"reading %d" % n for n in range(100)]
        listed = subprocess.run(
            [rabbitmq_tls.CTL, "list_connections", "user", "auth_mechanism", "ssl", "--no-table-headers", "-q"],
            env=rabbitmq_tls.env,
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
        assert "hutch-edge\tEXTERNAL\ttrue" in listed, listed  # the bridge, by its certificate
    finally:
        edge.stop()
    assert not edge.errors(), edge.log()[-3000:]


@pytest.mark.xdist_group("bench")  # (tests/interop/bench/test_bench.py: the benchmarks, one at a time)
def test_bench_tls_rows_against_hutch_and_rabbitmq(tmp_path):
    """`hutch bench --tls --start-rabbitmq`: throughput and latency over TLS beside the plain
    rows, for hutch and for RabbitMQ with TLS in the same run, and what TLS costs each."""
    done = subprocess.run(
        [HUTCH, "bench", "--tls", "--start-rabbitmq", "--no-pure", "--scenarios", "no-ack,latency-p50"]
        + ["--count", "4000", "--repeat", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    for row in ("throughput 16 B, no-ack consumer, over TLS", "latency p50 over TLS, one in flight"):
        cells = [line for line in lines if line.startswith(row + "  ")][0][len(row) :].split()[1:]
        assert float(cells[0].replace(",", "")) > 0 and float(cells[1].replace(",", "")) > 0, cells
    assert any(line.startswith("Over TLS, hutch C keeps") for line in lines), done.stdout
    assert any(line.startswith("Over TLS, RabbitMQ keeps") for line in lines), done.stdout


@shared_broker
def test_an_amqp_1_0_client_logs_in_with_external_by_its_certificate(tls_broker):
    """rhea over TLS with a device's certificate: SASL EXTERNAL, offered to a 1.0 client whose
    certificate was verified, logs it in as the certificate's user (and PLAIN still works)."""
    conn = pika_connect(tls_broker.port, tls=False)
    conn.channel().queue_declare("over-tls")
    conn.close()
    certs = tls_broker.certs
    device = certs.devices["sensor-01"]
    offset = len(tls_broker.log().encode())

    def rhea_tls(kind, *args):
        done = subprocess.run(
            ["node", os.path.join(NODE_DIR, "amqp10_tls.js"), str(tls_broker.ports[kind]), certs.ca, *args],
            capture_output=True, text=True, timeout=60, cwd=NODE_DIR,
        )  # fmt: skip
        return json.loads(done.stdout.splitlines()[-1]) if done.stdout else done.stderr

    assert rhea_tls("mtls", device.cert, device.key) == {"outcome": "accepted"}
    log_grew(tls_broker, offset, "AMQP 1.0 connection open (user 'sensor-01')")
    assert rhea_tls("tls") == {"outcome": "accepted"}  # no certificate: PLAIN, over TLS
    log_grew(tls_broker, offset, "AMQP 1.0 connection open (user 'guest')")
