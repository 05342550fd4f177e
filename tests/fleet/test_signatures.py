"""hutch/fleet/: Ed25519 checked in plain Python against RFC 8032's test vectors and, on
CPython, against cryptography's (OpenSSL's) answers for the same bytes; SHA-512 against FIPS
180-4's constants and hashlib; a signed document's last line. Plain functions: also run under
MicroPython (tests/micropython/test_fleet_micropython.py), where hashlib has no SHA-512 and
cryptography is not there (the comparisons with them are left out)."""

import binascii

from hutch.fleet import document, ed25519, sha512

try:
    import hashlib

    HOST_SHA512 = hashlib.sha512
except (ImportError, AttributeError):
    HOST_SHA512 = None
try:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
except ImportError:  # MicroPython
    Ed25519PrivateKey = None

h = binascii.unhexlify
# RFC 8032, section 7.1: TEST 1, 2 and 3 (public key, message, signature)
RFC_8032 = (
    (
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
        "",
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    ),
    (
        "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
        "72",
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
    ),
    (
        "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025",
        "af82",
        "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a",
    ),
)


def _flipped(data, at, bit=1):
    data = bytearray(data)
    data[at] ^= bit
    return bytes(data)


def test_rfc_8032_s_signatures_check_out_and_a_changed_bit_does_not():
    for key, message, signature in RFC_8032:
        key, message, signature = h(key), h(message), h(signature)
        assert ed25519._verified(key, message, signature)
        assert ed25519.verify(key, message, signature)
        assert not ed25519._verified(key, message + b"x", signature)
        for at in (0, 31, 32, 63):  # R and S, each end
            assert not ed25519._verified(key, message, _flipped(signature, at))
        assert not ed25519._verified(_flipped(key, 0), message, signature)


def test_what_is_not_a_signature_is_refused_not_an_error():
    key, message, signature = (h(x) for x in RFC_8032[0])
    assert not ed25519.verify(key[:31], message, signature)
    assert not ed25519.verify(key, message, signature[:63])
    s_too_big = signature[:32] + (ed25519.L + 1).to_bytes(32, "little")  # S must be below L
    assert not ed25519._verified(key, message, s_too_big)
    not_a_point = (2**255 - 1).to_bytes(32, "little")  # y above the field's prime
    assert not ed25519._verified(not_a_point, message, signature)
    assert not ed25519._verified(key, message, not_a_point + signature[32:])


def test_sha512_s_constants_are_fips_180_4_s():
    """The first 64 bits of the fractional parts of the cube roots of the first 80 primes, and
    of the square roots of the first 8."""
    primes, n = [], 2
    while len(primes) < 80:
        if all(n % p for p in primes):
            primes.append(n)
        n += 1

    def root(x, k):
        low, high = 0, 1
        while high**k <= x:
            high *= 2
        while low < high - 1:
            middle = (low + high) // 2
            if middle**k <= x:
                low = middle
            else:
                high = middle
        return low

    mask = (1 << 64) - 1
    assert sha512.K == tuple(root(p << 192, 3) & mask for p in primes)
    assert sha512.H == tuple(root(p << 128, 2) & mask for p in primes[:8])


def test_sha512_digests():
    abc = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
    assert binascii.hexlify(sha512.sha512(b"abc")).decode() == abc  # FIPS 180-2's example
    if HOST_SHA512 is not None:
        for size in (0, 1, 111, 112, 127, 128, 129, 239, 240, 1000, 5000):  # each side of the padding's turns
            data = bytes((i * 7 + size) % 256 for i in range(size))
            assert sha512.sha512(data) == HOST_SHA512(data).digest(), size
            assert sha512.sha512(data[:5], data[5:130], b"", data[130:]) == HOST_SHA512(data).digest(), size


def test_the_plain_python_check_agrees_with_cryptography_s():
    if Ed25519PrivateKey is None:
        return
    from hutch.fleet.ed25519 import _verified

    raw = serialization.Encoding.Raw, serialization.PublicFormat.Raw
    for i in range(40):
        secret = Ed25519PrivateKey.generate()
        public = secret.public_key().public_bytes(*raw)
        message = bytes((i * 13 + j) % 256 for j in range(i * 37))
        signature = secret.sign(message)
        assert _verified(public, message, signature) and ed25519.verify(public, message, signature)
        for changed in (_flipped(signature, i % 64, 1 << (i % 8)), signature[:32] + signature[:32]):
            assert _verified(public, message, changed) == ed25519.verify(public, message, changed) == False  # noqa: E712


def test_a_signed_document_s_last_line():
    key, message, signature = (h(x) for x in RFC_8032[2])
    body = b'[document]\nversion = 1\ntarget = "node:gw1"\n'
    signed = body + document.signature_line(key, signature)
    assert document.split(signed) == (body, key, signature)
    assert document.split(signed + b"\n\n")[0] == body  # (blank lines after it: an editor's)
    for damaged in (body, signed.replace(b"#signature ed25519:", b"#signature rsa:"), signed[:-20] + b"\n"):
        try:
            document.split(damaged)
            raise AssertionError("split %r" % damaged[-40:])
        except document.Refused as e:
            assert e.reason == "signature"
    assert document.key_bytes(document.key_text(key)) == key
    for text in ("ed25519:AAAA", "rsa:" + document.key_text(key)[8:], None):
        try:
            document.key_bytes(text)
            raise AssertionError(text)
        except ValueError:
            pass
