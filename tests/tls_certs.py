"""Certificates for the TLS tests, made at test time with `cryptography`.

``make_pki()`` returns a ``Pki``: a CA, a server certificate for
localhost / 127.0.0.1 / ::1 signed by it, client certificates signed by it
(one with several kinds of subject alternative names, one with only a
common name), and a second CA with a client certificate of its own, which
the first CA's servers must refuse. Everything is PEM bytes, as grpcio's
ssl_server_credentials() takes it.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from typing import List, Optional, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclasses.dataclass(frozen=True)
class Issued:
    key: bytes  # PEM private key
    cert: bytes  # PEM certificate
    chain: bytes  # PEM certificate chain (the certificate, then intermediates)


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Issued
    server: Issued
    client: Issued  # CN, and DNS / IP / URI / email SANs
    client_cn_only: Issued  # a common name and no SANs
    other_ca: Issued
    other_client: Issued  # signed by other_ca


def _key(kind: str):
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def name(common_name: Optional[str], **attrs: str) -> x509.Name:
    """An X.509 name: the given attributes (country, state, locality,
    organization, organizational_unit) then the common name."""
    oids = {
        "country": NameOID.COUNTRY_NAME,
        "state": NameOID.STATE_OR_PROVINCE_NAME,
        "locality": NameOID.LOCALITY_NAME,
        "organization": NameOID.ORGANIZATION_NAME,
        "organizational_unit": NameOID.ORGANIZATIONAL_UNIT_NAME,
    }
    parts = [x509.NameAttribute(oids[k], v) for k, v in attrs.items()]
    if common_name is not None:
        parts.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(parts)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def make_ca(common_name: str, key_kind: str = "ec") -> Issued:
    key = _key(key_kind)
    subject = name(common_name, organization="pygrpc-native tests")
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(days=1))
        .not_valid_after(_now() + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, key_cert_sign=True, crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    pem = _pem_cert(cert)
    return Issued(_pem_key(key), pem, pem)


def issue(
    ca: Issued,
    subject: x509.Name,
    *,
    sans: Sequence[x509.GeneralName] = (),
    server: bool = False,
    client: bool = False,
    key_kind: str = "ec",
    is_ca: bool = False,
    other_usages: Sequence[x509.ObjectIdentifier] = (),
) -> Issued:
    ca_key = serialization.load_pem_private_key(ca.key, None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    key = _key(key_kind)
    usages: List[x509.ObjectIdentifier] = list(other_usages)
    if server:
        usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now() - datetime.timedelta(days=1))
        .not_valid_after(_now() + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False
        )
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pem = _pem_cert(cert)
    return Issued(_pem_key(key), pem, pem + (b"" if ca.cert == ca.chain and _is_root(ca_cert) else ca.chain))


def _is_root(cert: x509.Certificate) -> bool:
    return cert.subject == cert.issuer


def make_pki(key_kind: str = "ec") -> Pki:
    ca = make_ca("pygrpc-native test CA", key_kind)
    server = issue(
        ca,
        name("localhost"),
        sans=[
            x509.DNSName("localhost"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            x509.IPAddress(ipaddress.ip_address("::1")),
        ],
        server=True,
        key_kind=key_kind,
    )
    client = issue(
        ca,
        name(
            "test-client",
            country="US",
            state="California",
            locality="San Francisco",
            organization="Example, Inc.",
            organizational_unit="Engineering",
        ),
        sans=[
            x509.DNSName("client.example.com"),
            x509.DNSName("*.clients.example.com"),
            x509.IPAddress(ipaddress.ip_address("10.1.2.3")),
            x509.IPAddress(ipaddress.ip_address("2001:db8::1")),
            x509.UniformResourceIdentifier("spiffe://example.com/ns/default/sa/client"),
            x509.RFC822Name("client@example.com"),
        ],
        client=True,
        key_kind=key_kind,
    )
    client_cn_only = issue(ca, name("cn-only-client"), client=True, key_kind=key_kind)
    other_ca = make_ca("another CA", key_kind)
    other_client = issue(
        other_ca, name("intruder"), sans=[x509.DNSName("client.example.com")], client=True, key_kind=key_kind
    )
    return Pki(ca, server, client, client_cn_only, other_ca, other_client)
