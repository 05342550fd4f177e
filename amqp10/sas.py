"""Azure's shared access signatures (SAS tokens), made from a device key: the password of an
IoT Hub device's SASL PLAIN login, or the token a bridge puts on `$cbs`.

    device_login(hostname, device_id, key, lifetime, now) -> (user, token, audience, expiry)
    token(resource, key, expiry) -> "SharedAccessSignature sr=...&sig=...&se=..."

A token grants `resource` (for a device: "{hub host}/devices/{device id}") until `expiry`
(seconds since 1970). Its signature is HMAC-SHA256, keyed with the device key base64-decoded
(the key as the Azure portal shows it), over the url-encoded resource, a newline and the
expiry; the token carries the three url-encoded, as Azure's device SDKs write them.

MicroPython has hashlib.sha256 but no hmac module: there HMAC (RFC 2104) is written out over
hashlib; CPython uses its hmac module. Loaded only by a bridge with a `sas_key`.
"""

import binascii
import hashlib

from .client import quote

TOKEN_TYPE = "servicebus.windows.net:sastoken"  # what a put-token on $cbs says a SAS token is
UNIX_2000 = 946684800  # 2000-01-01 in seconds since 1970: the epoch of some MicroPython ports


def device_login(hostname, device_id, key, lifetime, now):
    """(user, token, audience, expiry) of an IoT Hub device: user `{device}@sas.{hub}` (the hub
    is the first label of its host name), a token for `{host}/devices/{device}` valid for
    lifetime seconds from now (seconds since 1970)."""
    audience = "%s/devices/%s" % (hostname, device_id)
    expiry = now + lifetime
    return "%s@sas.%s" % (device_id, hostname.split(".")[0]), token(audience, key, expiry), audience, expiry


def token(resource, key, expiry):
    """A SAS token for resource, signed with key (base64 text), valid until expiry."""
    encoded = quote(resource)
    signature = hmac_sha256(binascii.a2b_base64(key), ("%s\n%d" % (encoded, expiry)).encode())
    return "SharedAccessSignature sr=%s&sig=%s&se=%d" % (
        encoded,
        quote(binascii.b2a_base64(signature).strip()),
        expiry,
    )


def hmac_sha256(key, message):
    try:
        import hmac
    except ImportError:  # MicroPython: RFC 2104 over hashlib
        if len(key) > 64:
            key = hashlib.sha256(key).digest()
        key = key + bytes(64 - len(key))
        inner = hashlib.sha256(bytes(octet ^ 0x36 for octet in key))
        inner.update(message)
        outer = hashlib.sha256(bytes(octet ^ 0x5C for octet in key))
        outer.update(inner.digest())
        return outer.digest()
    return hmac.new(key, message, "sha256").digest()


def epoch_seconds():
    """Seconds since 1970 by this machine's clock (a board's must be set: NTP), on the ports
    whose time() counts from 2000 too."""
    import time

    now = int(time.time())
    if time.gmtime(0)[0] == 2000:
        now += UNIX_2000
    return now
