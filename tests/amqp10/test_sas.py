"""amqp10/sas.py: Azure's SAS tokens as Azure's own Python sample makes them (urllib's
quote_plus and urlencode, hmac), and the HMAC written out for MicroPython (which has no hmac
module) against RFC 4231's test vectors. Plain functions: also run under MicroPython
(tests/micropython/test_amqp10_micropython.py), where the comparison with urllib is skipped
for want of urllib."""

import binascii

from hutch.amqp10 import sas

KEY = "a2tra2tra2tra2tra2tra2tra2tra2tra2tra2tra2s="  # base64 of 32 octets, as Azure shows a device key


def test_hmac_sha256_is_rfc_4231_s():
    cases = [
        (b"\x0b" * 20, b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (
            b"\xaa" * 131,  # a key longer than the block: hashed first
            b"Test Using Larger Than Block-Size Key - Hash Key First",
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        ),
    ]
    for key, message, digest in cases:
        assert binascii.hexlify(sas.hmac_sha256(key, message)).decode() == digest


def test_an_iot_hub_device_s_login_and_token():
    user, token, audience, expiry = sas.device_login("my-hub.azure-devices.net", "gw 7", KEY, 3600, 1700000000)
    assert user == "gw 7@sas.my-hub" and audience == "my-hub.azure-devices.net/devices/gw 7" and expiry == 1700003600
    assert token.startswith("SharedAccessSignature sr=my-hub.azure-devices.net%2Fdevices%2Fgw%207&sig=")
    assert token.endswith("&se=1700003600")
    try:
        from urllib.parse import quote_plus, urlencode
    except ImportError:
        return  # (MicroPython: the RFC vectors above hold its HMAC to CPython's)
    import base64
    import hashlib
    import hmac

    # Azure's Python sample (IoT Hub security docs), the device key base64-decoded
    resource = "my-hub.azure-devices.net/devices/gw7"
    signed = ("%s\n%d" % (quote_plus(resource), 1700000000)).encode()
    signature = base64.b64encode(hmac.new(base64.b64decode(KEY), signed, hashlib.sha256).digest())
    expected = "SharedAccessSignature " + urlencode({"sr": resource, "sig": signature, "se": "1700000000"})
    assert sas.token(resource, KEY, 1700000000) == expected


def test_epoch_seconds_counts_from_1970():
    assert sas.epoch_seconds() > 1700000000
