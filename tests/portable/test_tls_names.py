"""The user name EXTERNAL takes from a certificate (ports/certname.py), from getpeercert()'s dict:
the common name, the whole subject as RFC 4514 writes it, or the first alternative name."""

from hutch.ports.certname import distinguished_name, login_name

# What CPython's getpeercert() gives for a certificate O=hutch, OU=gw, CN=sensor-01 (in the
# certificate's order) with two DNS alternative names.
CERT = {
    "subject": ((("organizationName", "hutch"),), (("organizationalUnitName", "gw"),), (("commonName", "sensor-01"),)),
    "subjectAltName": (("DNS", "sensor-01.devices.example"), ("DNS", "gw.devices.example")),
}


def test_common_name_is_the_default():
    assert login_name(CERT, "common_name") == "sensor-01"


def test_distinguished_name_is_rfc_4514_last_rdn_first():
    """As cryptography's Name.rfc4514_string() and `openssl x509 -nameopt RFC2253` print it: the
    form RabbitMQ's ssl_cert_login_from = distinguished_name gives."""
    assert distinguished_name(CERT) == "CN=sensor-01,OU=gw,O=hutch"
    assert login_name(CERT, "distinguished_name") == "CN=sensor-01,OU=gw,O=hutch"


def test_subject_alternative_name_is_the_first():
    assert login_name(CERT, "subject_alternative_name") == "sensor-01.devices.example"
    assert login_name({"subject": CERT["subject"]}, "subject_alternative_name") is None


def test_no_common_name_gives_no_user():
    assert login_name({"subject": ((("organizationName", "hutch"),),)}, "common_name") is None


def test_several_common_names_are_joined_as_rabbitmq_joins_them():
    cert = {"subject": ((("commonName", "a"),), (("commonName", "b"),))}
    assert login_name(cert, "common_name") == "a,b"


def test_special_characters_are_escaped():
    cert = {
        "subject": (
            (("countryName", "DE"),),
            (("organizationName", "Hutch, Inc."),),
            (("commonName", " #lead+trail "),),
            (("emailAddress", "a@b.example"),),
        )
    }
    assert distinguished_name(cert) == "1.2.840.113549.1.9.1=a@b.example,CN=\\ #lead\\+trail\\ ,O=Hutch\\, Inc.,C=DE"


def test_multi_valued_rdn():
    cert = {"subject": ((("commonName", "x"), ("userId", "42")), (("domainComponent", "example"),))}
    assert distinguished_name(cert) == "DC=example,CN=x+UID=42"
