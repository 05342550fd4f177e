"""Ed25519 signatures checked (RFC 8032, section 5.1.7), verify only: a gateway holds public
keys, never a secret one. `cryptography` checks them where it is installed (OpenSSL's Ed25519,
thousands a second); this module's plain-Python arithmetic does where it is not, and on boards.

    verify(public_key, message, signature)   # True or False; 32, any and 64 bytes

The arithmetic is RFC 8032's own: the twisted Edwards curve in extended coordinates, scalars
by double-and-add. Not constant-time, which a check of public data needs not be.
"""

try:
    from hashlib import sha512 as _sha512

    def _digest(*parts):
        hashed = _sha512()
        for part in parts:
            hashed.update(part)
        return hashed.digest()

except ImportError:  # a MicroPython firmware: SHA-256 and SHA-1 only
    from .sha512 import sha512 as _digest

P = 2**255 - 19  # the field's prime
L = 2**252 + 27742317777372353535851937790883648493  # the order of the base point
D = -121665 * pow(121666, P - 2, P) % P  # the curve's constant d
SQRT_M1 = pow(2, (P - 1) // 4, P)  # a square root of -1


def _x_of(y, sign):
    """The x of the point with this y and x's lowest bit, or None (RFC 8032, 5.1.3)."""
    if y >= P:
        return None
    xx = (y * y - 1) * pow(D * y * y + 1, P - 2, P)
    if xx == 0:
        return None if sign else 0
    x = pow(xx, (P + 3) // 8, P)
    if (x * x - xx) % P:
        x = x * SQRT_M1 % P
    if (x * x - xx) % P:
        return None
    return P - x if x & 1 != sign else x


def _point(encoded):
    """The point 32 bytes encode, in extended coordinates (X, Y, Z, T), or None."""
    y = int.from_bytes(encoded, "little")
    x = _x_of(y & ((1 << 255) - 1), y >> 255)
    if x is None:
        return None
    y &= (1 << 255) - 1
    return (x, y, 1, x * y % P)


def _add(p, q):
    a = (p[1] - p[0]) * (q[1] - q[0]) % P
    b = (p[1] + p[0]) * (q[1] + q[0]) % P
    c = 2 * p[3] * q[3] * D % P
    d = 2 * p[2] * q[2] % P
    e, f, g, h = b - a, d - c, d + c, b + a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _times(n, p):
    out = (0, 1, 1, 0)  # the neutral point
    while n:
        if n & 1:
            out = _add(out, p)
        p = _add(p, p)
        n >>= 1
    return out


def _same(p, q):
    return (p[0] * q[2] - q[0] * p[2]) % P == 0 and (p[1] * q[2] - q[1] * p[2]) % P == 0


BASE = _point((4 * pow(5, P - 2, P) % P).to_bytes(32, "little"))


def verify(public_key, message, signature):
    """Whether signature (64 bytes) is public_key's (32 bytes) of message (bytes)."""
    if len(public_key) != 32 or len(signature) != 64:
        return False
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        return _verified(public_key, message, signature)
    try:
        Ed25519PublicKey.from_public_bytes(bytes(public_key)).verify(bytes(signature), bytes(message))
    except (InvalidSignature, ValueError):
        return False
    return True


def _verified(public_key, message, signature):
    """verify() in plain Python."""
    a = _point(public_key)
    r = _point(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if a is None or r is None or s >= L:
        return False
    h = int.from_bytes(_digest(signature[:32], public_key, message), "little") % L
    return _same(_times(s, BASE), _add(r, _times(h, a)))
