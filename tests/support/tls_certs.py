"""Certificates the TLS tests make for themselves, with `cryptography`: a CA, a server certificate
for 127.0.0.1 and localhost, client certificates (a device's, an expired one, one from another
CA), written as PEM files into a folder.

    certs = Certificates(folder)             # a CA (certs.ca), the server's (certs.server)
    certs.client("sensor-01")                # Pair(cert, key): CN=sensor-01,OU=gw,O=hutch
    certs.client("old", expired=True)
    Certificates(other_folder).client(...)   # from another CA: a wrong CA for the first

The server certificate is what Mozilla's "intermediate" profile asks of one (sslyze checks it
too): ECDSA P-256, signed with SHA-256, valid 90 days, its subject alternative names not critical.
"""

import datetime
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


class Pair:
    """A certificate and its key, as PEM files (cert, key: their paths)."""

    def __init__(self, cert, key, certificate):
        self.cert = cert
        self.key = key
        self.certificate = certificate  # cryptography's x509.Certificate

    @property
    def subject(self):
        return self.certificate.subject.rfc4514_string()


def _name(common_name, unit=None, organization="hutch"):
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)]
    if unit is not None:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class Certificates:
    def __init__(self, folder, ca_name="hutch test CA"):
        self.folder = str(folder)
        os.makedirs(self.folder, exist_ok=True)
        self.ca_key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        name = _name(ca_name)
        self.ca_certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            )  # keyCertSign, cRLSign
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.ca_key.public_key()), critical=False)
            .sign(self.ca_key, hashes.SHA256())
        )
        self.ca = self._write("ca.pem", self.ca_certificate.public_bytes(serialization.Encoding.PEM))
        self.server = self.issue("server", _name("localhost"), sans=("localhost", "127.0.0.1"), server=True)

    def client(self, common_name, unit="gw", expired=False, sans=(), file_name=None):
        """A client certificate (CN=common_name,OU=unit,O=hutch), valid now or expired yesterday."""
        return self.issue(file_name or common_name, _name(common_name, unit), sans=sans, expired=expired)

    def issue(self, file_name, subject, sans=(), server=False, expired=False, days=90):
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        if expired:
            start, end = now - datetime.timedelta(days=days + 1), now - datetime.timedelta(days=1)
        else:
            start, end = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=days)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self.ca_certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
            )  # digitalSignature
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False)
        )
        if sans:
            names = []
            for san in sans:
                if san.replace(".", "").isdigit():
                    import ipaddress

                    names.append(x509.IPAddress(ipaddress.ip_address(san)))
                else:
                    names.append(x509.DNSName(san))
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.ca_key, hashes.SHA256())
        cert = self._write(file_name + ".pem", certificate.public_bytes(serialization.Encoding.PEM))
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return Pair(cert, self._write(file_name + ".key", key_pem), certificate)

    def _write(self, name, data):
        path = os.path.join(self.folder, name)
        with open(path, "wb") as f:
            f.write(data)
        return path
