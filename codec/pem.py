"""PEM files as DER bytes, for MicroPython's TLS: its Mbed TLS is built without a PEM parser, so a
certificate, a key or a CA that a host reads as PEM is handed to it as DER. The broker's TLS
(ports/tls.py) and the sensor client's (client/tls.py) read their files through this."""


def der(path, kind=b"CERTIFICATE"):
    """The first block of this kind ("CERTIFICATE", "PRIVATE KEY": also "EC PRIVATE KEY" and
    "RSA PRIVATE KEY") of a PEM file as DER bytes, or a DER file as it is."""
    import binascii

    with open(path, "rb") as f:
        data = f.read()
    if b"-----BEGIN" not in data:
        return data
    body = []
    inside = False
    for line in data.split(b"\n"):
        line = line.strip()
        if line.startswith(b"-----BEGIN"):
            inside = kind in line
        elif line.startswith(b"-----END"):
            if body:
                break
            inside = False
        elif inside and line and b":" not in line:  # (an encrypted PEM's headers have a colon)
            body.append(line)
    return binascii.a2b_base64(b"".join(body))
