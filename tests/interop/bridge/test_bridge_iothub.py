"""A bridge to Azure IoT Hub's shape: its device uplink over AMQP 1.0, against a hub written here
with hutch's own AMQP 1.0 codec (amqp10/types.py, frames.py) on a real TLS socket, its
certificate made by the test (tests/support/tls_certs.py). There is no IoT Hub to run here:
this one checks what the research (and Azure's documentation) says IoT Hub checks of a
device: SASL PLAIN with the user `{device}@sas.{hub}` and a SAS token as the password (its
form, its resource, its HMAC-SHA256 signature with the device key, its expiry), the open's
hostname (the hub's host), the sending link's target `/devices/{device}/messages/events`;
or SASL ANONYMOUS and the token put on `$cbs` (request and response links). It answers each
message `accepted`, and force-detaches the link (amqp:link:detach-forced) when the token it
was given expires.
"""

import base64
import hashlib
import hmac
import os
import socket
import ssl
import threading
import time
from urllib.parse import quote

import pytest
from amqp10_sections import sections
from bridging import edge_with_bridge, first_copies, publish_confirmed
from brokers import failed_attempts, wait_until
from cryptography import x509
from cryptography.x509.oid import NameOID
from tls_certs import Certificates

from hutch.amqp10 import spec
from hutch.amqp10.frames import field, frame, split
from hutch.amqp10.types import Array, Described, Symbol, Ubyte, Uint, Ulong, Ushort, encode

pytestmark = [pytest.mark.timeout(120)]

HUB = "edge-test-hub"
HOST = HUB + ".azure-devices.net"
DEVICE = "gateway-7"
KEY = base64.b64encode(os.urandom(32)).decode()
SASL_HEADER = b"AMQP\x03\x01\x00\x00"
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
TOKEN_TYPE = "servicebus.windows.net:sastoken"
CREDIT = 100


def described(code, fields):
    return Described(Ulong(code), fields)


def error(condition, text):
    return described(spec.ERROR, [Symbol(condition), text])


class FakeIotHub:
    """The hub's side of device uplinks, one thread per connection. What it finds wrong goes to
    `problems` (a test asserts there are none) and the connection is refused or ended as IoT
    Hub would. expire_after: seconds after which it takes a token for expired, whatever the
    token says (a hub whose clock runs ahead of the device's), and force-detaches the link."""

    def __init__(self, certificate, key=KEY, cbs=False, expire_after=None):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(certificate.cert, certificate.key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.key = key
        self.cbs = cbs
        self.expire_after = expire_after
        self.problems = []
        self.logins = []  # (mechanism, the token's expiry or None), one per connection
        self.tokens = []  # the expiry of each token put on $cbs
        self.bodies = []  # every message's body, in the order they came
        self.detached = 0  # links force-detached for an expired token
        self.stopped = False

    def start(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def stop(self):
        self.stopped = True
        self.listener.close()

    def _accept(self):
        while not self.stopped:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock):
        try:
            tls = self.context.wrap_socket(sock, server_side=True)
        except ssl.SSLEOFError:  # the bridge gave up on a handshake it found slow (a loaded CI): it retries
            sock.close()
            return
        except (OSError, ssl.SSLError) as e:
            self.problems.append("TLS: %s" % e)
            sock.close()
            return
        try:
            _Connection(self, tls).run()
        except (OSError, ConnectionError):
            pass  # the bridge hung up
        finally:
            tls.close()

    def check_token(self, token, now):
        """The token's expiry if it is a valid SAS token for the device, else None (a problem)."""
        prefix = "SharedAccessSignature "
        if not token.startswith(prefix):
            self.problems.append("not a SAS token: %r" % token[:40])
            return None
        fields = dict(part.split("=", 1) for part in token[len(prefix) :].split("&"))
        resource = quote("%s/devices/%s" % (HOST, DEVICE), safe="")
        if set(fields) != {"sr", "sig", "se"} or fields["sr"] != resource:
            self.problems.append("a token for the wrong resource or with other fields: %r" % fields)
            return None
        signed = ("%s\n%s" % (fields["sr"], fields["se"])).encode()
        signature = base64.b64encode(hmac.new(base64.b64decode(self.key), signed, hashlib.sha256).digest())
        if fields["sig"] != quote(signature, safe=""):
            self.problems.append("a token whose signature is not the key's")
            return None
        expiry = int(fields["se"])
        if not now < expiry <= now + 3600 + 5:
            self.problems.append("a token that expires at %d, now %d" % (expiry, now))
            return None
        return expiry


class _Connection:
    def __init__(self, hub, sock):
        self.hub = hub
        self.sock = sock
        sock.settimeout(0.2)
        self.buf = b""
        self.expires_at = None  # (time.time()) when the hub takes the token for expired
        self.links = {}  # the device's handle -> [role, our handle, address, transfer parts]
        self.data_handle = None  # our handle of the telemetry link
        self.cbs_reply = None  # [our handle of the $cbs replies' link, the device's handle, its credit]
        self.delivered = 0  # messages on the telemetry link (its delivery count, as the hub saw it)
        self.incoming = 0  # transfer frames received (the session's next-incoming-id)
        self.outgoing = 0  # delivery ids of the $cbs replies
        self.open = True

    # -- octets --------------------------------------------------------------------------

    def recv_until(self, ready):
        while not ready():
            if self.hub.stopped:
                raise ConnectionError("stopped")
            self.tick()
            try:
                data = self.sock.recv(65536)
            except (socket.timeout, TimeoutError):
                continue
            if not data:
                raise ConnectionError("closed")
            self.buf += data

    def header(self):
        self.recv_until(lambda: len(self.buf) >= 8)
        header, self.buf = self.buf[:8], self.buf[8:]
        return header

    def frame(self):
        while True:
            found, end = split(self.buf, 0, 1 << 20)
            if found is not None:
                self.buf = self.buf[end:]
                if found.code is not None:  # (an empty frame: the device is alive)
                    return found
                continue
            self.recv_until(lambda: split(self.buf, 0, 1 << 20)[0] is not None)

    def send(self, code, fields, payload=b"", sasl=False):
        self.sock.sendall(frame(0, code, fields, payload, sasl))

    def tick(self):
        """The token expired (by the hub's clock): the link is force-detached, as IoT Hub does."""
        if self.expires_at is not None and time.time() >= self.expires_at and self.data_handle is not None:
            self.expires_at = None
            self.hub.detached += 1
            self.send(spec.DETACH, [Uint(self.data_handle), True, error("amqp:link:detach-forced", "token expired")])
            self.data_handle = None

    def expiring(self, expiry):
        after = self.hub.expire_after
        self.expires_at = min(expiry, time.time() + after) if after is not None else expiry

    # -- the connection ------------------------------------------------------------------

    def run(self):
        hub = self.hub
        if self.header() != SASL_HEADER:
            hub.problems.append("no SASL header")
            return
        mechanisms = [Symbol("MSSBCBS"), Symbol("PLAIN"), Symbol("ANONYMOUS"), Symbol("EXTERNAL")]
        self.sock.sendall(SASL_HEADER + frame(0, spec.SASL_MECHANISMS, [Array(0xA3, mechanisms)], sasl=True))
        init = self.frame()
        mechanism = field(init, 0).value
        if field(init, 2) != HOST:
            hub.problems.append("sasl-init's hostname is %r" % field(init, 2))
        expiry = None
        if mechanism == "PLAIN" and not hub.cbs:
            _authzid, user, password = field(init, 1).split(b"\x00")
            if user.decode() != "%s@sas.%s" % (DEVICE, HUB):
                hub.problems.append("user %r" % user)
            expiry = hub.check_token(password.decode(), int(time.time()))
            hub.logins.append(("PLAIN", expiry))
            if expiry is None:
                self.send(spec.SASL_OUTCOME, [Ubyte(1)], sasl=True)
                return
            self.expiring(expiry)
        elif mechanism == "ANONYMOUS" and hub.cbs:
            hub.logins.append(("ANONYMOUS", None))
        else:
            hub.problems.append("SASL %s" % mechanism)
            self.send(spec.SASL_OUTCOME, [Ubyte(1)], sasl=True)
            return
        self.send(spec.SASL_OUTCOME, [Ubyte(0)], sasl=True)
        if self.header() != AMQP_HEADER:
            hub.problems.append("no AMQP header after SASL")
            return
        self.sock.sendall(AMQP_HEADER)
        opened = self.frame()
        if opened.code != spec.OPEN or field(opened, 1) != HOST:
            hub.problems.append("open with hostname %r" % field(opened, 1))
        self.send(spec.OPEN, ["iothub", None, Uint(65536), Ushort(0), Uint(240000)])
        begin = self.frame()
        self.incoming = field(begin, 1, Uint(0)).value
        self.send(spec.BEGIN, [Ushort(0), Uint(0), Uint(5000), Uint(5000), Uint(255)])
        while self.open:
            self.handle(self.frame())

    def handle(self, f):
        hub = self.hub
        if f.code == spec.ATTACH:
            self.attach(f)
        elif f.code == spec.TRANSFER:
            self.incoming += 1
            self.transfer(f)
        elif f.code == spec.FLOW:
            handle = field(f, 4)
            if self.cbs_reply is not None and handle is not None and handle.value == self.cbs_reply[1]:
                self.cbs_reply[2] = field(f, 5, Uint(0)).value + field(f, 6, Uint(0)).value - self.outgoing
        elif f.code == spec.DISPOSITION:
            pass  # (the device settles our $cbs replies)
        elif f.code == spec.DETACH:
            self.send(spec.DETACH, [Uint(self.links.get(field(f, 0).value, [0, 0])[1]), True])
        elif f.code == spec.END:
            self.send(spec.END, [])
        elif f.code == spec.CLOSE:
            self.send(spec.CLOSE, [])
            self.open = False
        else:
            hub.problems.append("unexpected %s" % spec.TYPES[f.code][0])

    def attach(self, f):
        hub = self.hub
        name, handle, role = field(f, 0), field(f, 1).value, field(f, 2)
        ours = len(self.links)
        source, target = field(f, 5), field(f, 6)
        if role is False:  # the device sends: to $cbs, or its telemetry
            address = target.value[0] if target is not None and target.value else None
            self.links[handle] = [role, ours, address, None]
            if address == "$cbs" and hub.cbs:
                pass
            elif address == "/devices/%s/messages/events" % DEVICE and not (hub.cbs and not hub.tokens):
                self.data_handle = ours
            else:
                hub.problems.append("a sending link to %r" % address)
                self.send(spec.ATTACH, [name, Uint(ours), True, None, None, source, None])
                self.send(spec.DETACH, [Uint(ours), True, error("amqp:not-found", "no such node")])
                return
            self.send(spec.ATTACH, [name, Uint(ours), True, None, None, source, target])
            self.send(spec.FLOW, [Uint(self.incoming), Uint(5000), Uint(self.outgoing), Uint(5000), Uint(ours),
                                  Uint(0), Uint(CREDIT)])  # fmt: skip
        else:  # the device receives: the replies of $cbs
            address = source.value[0] if source is not None and source.value else None
            if address != "$cbs" or not hub.cbs:
                hub.problems.append("a receiving link from %r" % address)
                return
            self.links[handle] = [role, ours, address, None]
            self.cbs_reply = [ours, handle, 0]
            self.send(spec.ATTACH, [name, Uint(ours), False, Ubyte(1), None, source, target, None, None, Uint(0)])

    def transfer(self, f):
        link = self.links[field(f, 0).value]
        if link[3] is None:
            link[3] = [field(f, 1).value, []]
        link[3][1].append(f.payload)
        if field(f, 5, False):
            return
        delivery_id, parts = link[3]
        link[3] = None
        found = sections(b"".join(parts))
        if link[2] == "$cbs":
            self.put_token(found)
        else:
            self.hub.bodies.append(b"".join(bytes(part) for part in found.get(spec.DATA, [])))
        self.send(spec.DISPOSITION, [True, Uint(delivery_id), None, True, described(spec.ACCEPTED, [])])
        if link[2] == "$cbs":
            return
        self.delivered += 1
        if self.delivered % (CREDIT // 2) == 0 and self.data_handle is not None:
            # more credit, counted from what came (and the session's window with it)
            self.send(spec.FLOW, [Uint(self.incoming), Uint(5000), Uint(self.outgoing), Uint(5000),
                                  Uint(self.data_handle), Uint(self.delivered), Uint(CREDIT)])  # fmt: skip

    def put_token(self, found):
        hub = self.hub
        application = found.get(spec.APPLICATION_PROPERTIES) or {}
        wanted = {"operation": "put-token", "type": TOKEN_TYPE, "name": "%s/devices/%s" % (HOST, DEVICE)}
        status = 200
        if application != wanted:
            hub.problems.append("put-token's application properties: %r" % application)
            status = 400
        expiry = hub.check_token(found.get(spec.AMQP_VALUE, ""), int(time.time()))
        if expiry is None:
            status = 401
        else:
            hub.tokens.append(expiry)
            self.expiring(expiry)
        properties = found.get(spec.PROPERTIES) or []
        if self.cbs_reply is None or self.cbs_reply[2] <= 0:
            hub.problems.append("a put-token with no credit for its reply")
            return
        reply = [None, None, None, None, None, properties[0] if properties else None]
        payload = (
            encode(described(spec.PROPERTIES, reply))
            + encode(described(spec.APPLICATION_PROPERTIES, {"status-code": status, "status-description": "OK"}))
            + encode(described(spec.AMQP_VALUE, None))
        )
        self.send(spec.TRANSFER, [Uint(self.cbs_reply[0]), Uint(self.outgoing), b"%d" % self.outgoing, Uint(0), True],
                  payload)  # fmt: skip
        self.outgoing += 1
        self.cbs_reply[2] -= 1


@pytest.fixture
def certificate(tmp_path):
    """(the CA file, the hub's certificate for its host name)."""
    certs = Certificates(tmp_path / "certs")
    hub = certs.issue("hub", x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)]), sans=(HOST,), server=True)
    return certs.ca, hub


def iot_bridge(tmp_path, hub, ca, **more):
    bridge = {
        "name": "iot",
        "uri": "amqps10://127.0.0.1:%d" % hub.port,
        "server_name": HOST,  # (the hub's name: the certificate's, the open's, the token's)
        "ca_file": ca,
        "queue": "telemetry",
        "device_id": DEVICE,
        "sas_key": KEY,
        "reconnect_delay": 0.2,
        "max_reconnect_delay": 1.0,
    }
    bridge.update(more)
    return edge_with_bridge(tmp_path, bridge)


def publish_for(edge, seconds, per_batch=100):
    """Batches published at the edge (confirmed) for about seconds: the bodies, in order."""
    bodies = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        batch = [b"t%06d" % i for i in range(len(bodies), len(bodies) + per_batch)]
        publish_confirmed(edge, "telemetry", batch)
        bodies += batch
        time.sleep(0.5)
    return bodies


def forward_to(hub, tmp_path, ca, seconds, **more):
    """An edge whose bridge forwards to hub, messages published at it for about seconds: (the
    edge, stopped; the bodies published), once every one of them has reached the hub."""
    edge = iot_bridge(tmp_path, hub, ca, **more)
    try:
        wait_until(lambda: "bridge iot: running" in edge.log(), timeout=30, what="the bridge running")
        bodies = publish_for(edge, seconds)
        wait_until(lambda: set(hub.bodies) >= set(bodies), timeout=30, what="every message at the hub")
    finally:
        edge.stop()
        hub.stop()
    return edge, bodies


def test_an_iot_hub_uplink_logs_in_with_sas_tokens_and_renews_them_before_they_expire(tmp_path, certificate):
    """SASL PLAIN: `{device}@sas.{hub}` and a token valid for token_lifetime seconds; at half of
    it the bridge lets what is in flight be accepted, closes, and logs in at once with a new
    token. Nothing is lost or sent twice."""
    ca, cert = certificate
    hub = FakeIotHub(cert).start()
    edge, bodies = forward_to(hub, tmp_path, ca, 12, token_lifetime=10)
    print("%d logins, %d messages" % (len(hub.logins), len(hub.bodies)))
    assert hub.problems == []
    assert len(hub.logins) >= 3 and all(m == "PLAIN" and expiry for m, expiry in hub.logins), hub.logins
    assert hub.bodies == bodies, "each once, in order"
    log = edge.log()
    assert log.count("its SAS token is due: logging in again with a new one") >= 2, log[-3000:]
    assert "backoff" not in log, "a renewal is no failure"
    assert KEY not in log and "SharedAccessSignature" not in log, "no secret in the log"
    assert not edge.errors(), log[-3000:]


def test_a_link_detached_when_the_hub_takes_the_token_for_expired_goes_on_with_a_new_one(tmp_path, certificate):
    """The hub's clock runs ahead: 3 s after each login it force-detaches the link
    (amqp:link:detach-forced). The bridge logs it, logs in again with a new token and goes on;
    nothing is lost (what was in flight at the detach goes again)."""
    ca, cert = certificate
    hub = FakeIotHub(cert, expire_after=3).start()
    edge, bodies = forward_to(hub, tmp_path, ca, 10)
    print(
        "%d logins, %d detached, %d received for %d sent"
        % (len(hub.logins), hub.detached, len(hub.bodies), len(bodies))
    )
    assert hub.problems == []
    assert hub.detached >= 2 and len(hub.logins) >= 3
    assert first_copies(hub.bodies)[0] == bodies, "every message, first copies in order"
    log = edge.log()
    assert "upstream detached the link to '/devices/gateway-7/messages/events': amqp:link:detach-forced" in log


def test_with_cbs_the_token_goes_on_cbs_and_is_renewed_on_the_same_connection(tmp_path, certificate):
    """cbs = true: SASL ANONYMOUS, the token put on $cbs (request and response links) before the
    telemetry link is attached, and a new one put there at half its lifetime: one connection."""
    ca, cert = certificate
    hub = FakeIotHub(cert, cbs=True).start()
    edge, bodies = forward_to(hub, tmp_path, ca, 12, token_lifetime=10, cbs=True)
    print("%d logins, %d tokens, %d messages" % (len(hub.logins), len(hub.tokens), len(hub.bodies)))
    assert hub.problems == []
    assert hub.logins == [("ANONYMOUS", None)], "one connection"
    assert len(hub.tokens) >= 3 and hub.tokens == sorted(hub.tokens), hub.tokens
    assert hub.bodies == bodies
    assert edge.log().count("a new SAS token put on $cbs") >= 2


def test_a_token_made_from_the_wrong_key_is_refused_and_retried(tmp_path, certificate):
    ca, cert = certificate
    hub = FakeIotHub(cert, key=base64.b64encode(os.urandom(32)).decode()).start()
    edge = iot_bridge(tmp_path, hub, ca)
    try:
        wait_until(lambda: failed_attempts(edge, "iot") >= 2, timeout=30, what="two attempts")
        assert "login refused: SASL outcome 1 (auth)" in edge.log()
        assert len(hub.logins) >= 2 and hub.problems[0] == "a token whose signature is not the key's"
    finally:
        edge.stop()
        hub.stop()
