"""Test certificates and secured node configurations (TLS, SASL) for end-to-end tests.

Certificates are made with ``cryptography`` into a test's tmp_path: one CA, a server
certificate per address (IP SANs, so host name checks pass on 127.0.0.x), and client
certificates. Keystores are written as Kafka's PEM type (key and chain in one file) and as
PKCS12.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import NameOID

from jepsen.servers import KRAFT_PY, KraftServer

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"
STORE_PASSWORD = "store-secret"


@dataclass(frozen=True, slots=True)
class Certs:
    """Paths of the CA and of one identity's key material."""

    ca: Path  # the CA certificate, PEM (the truststore)
    ca_p12: Path  # the CA certificate as a PKCS12 truststore (STORE_PASSWORD)
    root: Path

    def identity(self, name: str, *, ips: tuple[str, ...] = (), cn: str | None = None) -> Identity:
        return _issue(self, name, ips, cn or name)


@dataclass(frozen=True, slots=True)
class Identity:
    key_pem: Path  # the private key alone (for clients that want it apart)
    cert_pem: Path  # the certificate alone
    keystore_pem: Path  # Kafka's PEM keystore: key and certificate chain in one file
    keystore_p12: Path  # PKCS12 keystore (STORE_PASSWORD)


def make_ca(root: Path) -> Certs:
    root.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kraft-py test CA")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (root / "ca.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    ca = root / "ca.pem"
    ca.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_p12 = root / "truststore.p12"
    ca_p12.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(cert, b"ca")],
            serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    return Certs(ca, ca_p12, root)


def _issue(certs: Certs, name: str, ips: tuple[str, ...], cn: str) -> Identity:
    ca_key = serialization.load_pem_private_key((certs.root / "ca.key").read_bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(certs.ca.read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kraft-py"),
                    x509.NameAttribute(NameOID.COMMON_NAME, cn),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
    )
    if ips:
        sans: list[x509.GeneralName] = [x509.DNSName("localhost")]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    cert_bytes = cert.public_bytes(serialization.Encoding.PEM)
    base = certs.root / name
    paths = Identity(
        Path(f"{base}.key"), Path(f"{base}.crt"), Path(f"{base}-keystore.pem"), Path(f"{base}.p12")
    )
    paths.key_pem.write_bytes(key_bytes)
    paths.cert_pem.write_bytes(cert_bytes)
    paths.keystore_pem.write_bytes(key_bytes + cert_bytes + certs.ca.read_bytes())
    paths.keystore_p12.write_bytes(
        pkcs12.serialize_key_and_certificates(
            name.encode(),
            key,
            cert,
            [ca_cert],
            serialization.BestAvailableEncryption(STORE_PASSWORD.encode()),
        )
    )
    return paths


def scram_jaas(user: str, password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";'
    )


@dataclass(frozen=True, slots=True)
class ScramFormat(KraftServer):
    """kraft-server, formatted with ``--add-scram`` credentials (as kafka-storage)."""

    scram: tuple[str, ...] = ()

    def format_argv(self, cluster_id: str, config: Path) -> list[str]:
        argv = KRAFT_PY.format_argv(cluster_id, config)
        for item in self.scram:
            argv += ["--add-scram", item]
        return argv


def sasl_ssl_props(identity: Identity, certs: Certs, listeners: list[str]) -> dict[str, str]:
    """Every listener in ``listeners`` as SASL_SSL, the node logging in to its peers as
    ADMIN: SCRAM-SHA-512, but PLAIN on the CONTROLLER listener (SCRAM credentials are in the
    metadata log the controllers serve, so Kafka's controllers take PLAIN or mTLS); a PKCS12
    keystore and truststore."""
    props = {
        "listener.security.protocol.map": ",".join(f"{name}:SASL_SSL" for name in listeners),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN}" password="{ADMIN_PASSWORD}" user_{ADMIN}="{ADMIN_PASSWORD}";'
        ),
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(identity.keystore_p12),
        "ssl.keystore.password": STORE_PASSWORD,
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": str(certs.ca_p12),
        "ssl.truststore.password": STORE_PASSWORD,
    }
    for name in listeners:
        if name == "CONTROLLER":
            continue
        props[f"listener.name.{name.lower()}.scram-sha-512.sasl.jaas.config"] = scram_jaas(
            ADMIN, ADMIN_PASSWORD
        )
    return props


ADD_SCRAM = (
    f"SCRAM-SHA-512=[name={ADMIN},password={ADMIN_PASSWORD}]",
    f"SCRAM-SHA-512=[name={ALICE},password={ALICE_PASSWORD}]",
)
