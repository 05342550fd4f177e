"""The user name SASL EXTERNAL takes from a client's verified certificate (CPython only: a
board's TLS socket shows no certificate), as RabbitMQ's ssl_cert_login_from has it.

    login_name(cert, "common_name")            # "sensor-01"
    login_name(cert, "distinguished_name")     # "CN=sensor-01,OU=gw,O=hutch"
    login_name(cert, "subject_alternative_name")   # the first one: "sensor-01.devices.example"

cert is getpeercert()'s dict. The subject is written as RFC 4514 writes it, last RDN first, the
string cryptography's Name.rfc4514_string() gives (and RabbitMQ's distinguished_name mode).
"""

# The names RFC 4514 gives attribute types (cryptography's rfc4514_string() uses these and no
# other), by OpenSSL's long names, which getpeercert() gives.
SHORT_NAMES = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
# Every other type OpenSSL names is written as its OID, as cryptography writes it (a type
# OpenSSL does not know comes as its OID already).
OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
    "surname": "2.5.4.4",
    "title": "2.5.4.12",
    "description": "2.5.4.13",
    "businessCategory": "2.5.4.15",
    "postalCode": "2.5.4.17",
    "postOfficeBox": "2.5.4.18",
    "name": "2.5.4.41",
    "givenName": "2.5.4.42",
    "initials": "2.5.4.43",
    "generationQualifier": "2.5.4.44",
    "x500UniqueIdentifier": "2.5.4.45",
    "dnQualifier": "2.5.4.46",
    "pseudonym": "2.5.4.65",
    "organizationIdentifier": "2.5.4.97",
    "jurisdictionLocalityName": "1.3.6.1.4.1.311.60.2.1.1",
    "jurisdictionStateOrProvinceName": "1.3.6.1.4.1.311.60.2.1.2",
    "jurisdictionCountryName": "1.3.6.1.4.1.311.60.2.1.3",
}


def login_name(cert, login_from):
    """The user name EXTERNAL logs in as: the subject's common name (several are joined with ",",
    as RabbitMQ joins them), the whole subject (distinguished_name), or the first subject
    alternative name, whatever its type; None if the certificate has none."""
    if login_from == "distinguished_name":
        return distinguished_name(cert)
    if login_from == "subject_alternative_name":
        names = cert.get("subjectAltName", ())
        return names[0][1] if names else None
    names = [value for rdn in cert.get("subject", ()) for kind, value in rdn if kind == "commonName"]
    return ",".join(names) if names else None


def distinguished_name(cert):
    """The subject of a certificate as RFC 4514 writes it, last RDN first."""
    rdns = []
    for rdn in cert.get("subject", ()):
        rdns.append("+".join("%s=%s" % (_type(kind), _escape(value)) for kind, value in rdn))
    rdns.reverse()
    return ",".join(rdns)


def _type(kind):
    return SHORT_NAMES.get(kind) or OIDS.get(kind) or kind


def _escape(value):
    """RFC 4514's escapes in an attribute value."""
    out = []
    last = len(value) - 1
    for i, c in enumerate(value):
        if c in ',+"\\<>;' or (i == 0 and c in "# ") or (i == last and c == " "):
            out.append("\\" + c)
        elif c == "\x00":
            out.append("\\00")
        else:
            out.append(c)
    return "".join(out)
