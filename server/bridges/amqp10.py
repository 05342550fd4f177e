"""What a bridge over AMQP 1.0 adds to its driver (server/bridges/driver.py), loaded only by a bridge
whose URIs speak 1.0, so a board whose bridges speak 0-9-1 holds none of it:

    connect(bridge, uri, frame_max, now) -> (protocol, login)

the 1.0 client (amqp10/client.py) connecting, to its target: `address`, else RabbitMQ 4's
address of `exchange` and `routing_key` when both are set, else none (a null target: each
message's `to` is the address of its own exchange and routing key); and for an Azure IoT
Hub device (`sas_key`) its Login, which makes its SAS tokens and renews them at half their
lifetime: on $cbs (`cbs = true`), or by letting what is in flight settle, closing, and
logging in again at once.
"""

from ...amqp10.client import Protocol, v2_address

RENEW_GRACE_MS = 10000  # at most this long for what is in flight to settle before a renewal's close
CLOSE_ANSWER_MS = 5000  # and for upstream to answer the close


def connect(bridge, uri, frame_max, now):
    """(the 1.0 client protocol, connecting; the IoT Hub login or None)."""
    machine = bridge.machine
    settings = machine.settings
    hostname = settings["tls"]["server_name"] or uri["host"]
    address = settings["address"]
    if address is None and settings["exchange"] is not None and settings["routing_key"] is not None:
        address = v2_address(settings["exchange"], settings["routing_key"])
    login = Login(machine, hostname, now) if settings["sas_key"] else None
    user, password, mechanism, cbs = uri["user"], uri["password"], uri["auth_mechanism"], None
    if login is not None:
        user, password = login.user, login.token
        if settings["cbs"]:  # SASL ANONYMOUS, then the token on $cbs
            mechanism, password, cbs = "ANONYMOUS", "", (login.audience, login.sas.TOKEN_TYPE, login.token)
    protocol = Protocol(max_frame=frame_max)
    protocol.connect(
        now,
        user,
        password,
        hostname,
        address,
        idle_ms=uri["heartbeat"] * 1000,
        container="hutch bridge %s/%s" % (bridge.broker.name, machine.name),
        mechanism=mechanism,
        settled=settings["ack_mode"] != "on-confirm",
        cbs=cbs,
    )
    return protocol, login


class Login:
    """An IoT Hub device's login: its user, and SAS tokens made from its key (amqp10/sas.py),
    each valid for token_lifetime seconds and renewed at half of it."""

    def __init__(self, machine, hostname, now):
        from ...amqp10 import sas  # (loaded only by a bridge with a sas_key)

        self.sas = sas
        self.machine = machine
        self.hostname = hostname
        self.make(now)

    def make(self, now):
        """A new token, valid from now by the wall clock (a board's must be set: NTP)."""
        settings = self.machine.settings
        lifetime = settings["token_lifetime"]
        sas = self.sas
        self.user, self.token, self.audience, self.expiry = sas.device_login(
            self.hostname, settings["device_id"], settings["sas_key"], lifetime, sas.epoch_seconds()
        )
        self.renew_at = now + lifetime * 500  # (ms: half the lifetime)

    def renew(self, link, now):
        """(Each tick of link: server/bridges/driver.py _Link) At half the token's lifetime, a new one put
        on $cbs; or (SASL PLAIN) nothing more sent, and once what is in flight is settled (or
        after RENEW_GRACE_MS) the connection closed, to log in again at once (its answer ends
        the link with Renewed). Why the link must be dropped now (upstream did not answer the
        close), or None."""
        protocol = link.protocol
        machine = self.machine
        if link.closed_at:
            if now - link.closed_at > CLOSE_ANSWER_MS:
                return "no answer to the close before logging in with a new SAS token"
            return None
        if not link.renewing:
            if now < self.renew_at:
                return None
            if machine.settings["cbs"]:
                self.make(now)
                protocol.put_token(self.token)
                machine.log("info", "bridge %s: a new SAS token put on $cbs" % machine.name)
                return None
            link.renewing = now
            machine.log("info", "bridge %s: its SAS token is due: logging in again with a new one" % machine.name)
        if protocol.in_flight and now - link.renewing < RENEW_GRACE_MS:
            return None
        protocol.close()
        link.closed_at = now
        link.flush()
        return None
