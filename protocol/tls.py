"""TLS contexts from a listener's ``ssl.*`` settings, with Python's ssl (OpenSSL); no crypto
of our own.

Keystores: PEM (the private key and certificate chain in one file, Kafka's
``ssl.keystore.type=PEM``) is handed to OpenSSL as is; PKCS12 is opened with ``cryptography``
and handed over as PEM through an in-memory file (memfd), since ``ssl`` loads a certificate
chain only from a path and the key must not touch the disk. Truststores are PEM files or
PKCS12 files whose certificates are the trusted ones.

``ssl.cipher.suites`` takes OpenSSL names or Kafka's (IANA) names of the TLS 1.2 ECDHE/DHE
suites; Python cannot restrict TLS 1.3's suites, so a list naming only TLS 1.2 suites while
TLSv1.3 is enabled is refused rather than silently widened.
"""

from __future__ import annotations

import os
import ssl
from pathlib import Path

from protocol.security import PrincipalRule, TlsSettings, map_principal

TLS13_SUITES = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(ValueError):
    """A keystore or truststore that cannot be read, or settings OpenSSL refuses."""


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context a TLS listener accepts with: our key and chain, the client
    authentication of ``ssl.client.auth`` against the truststore."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _common(context, settings)
    _load_keystore(context, settings)
    if settings.client_auth != "none":
        _load_truststore(context, settings)
        context.verify_mode = (
            ssl.CERT_REQUIRED if settings.client_auth == "required" else ssl.CERT_OPTIONAL
        )
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """The context a peer connects to a TLS listener with: trusting the truststore (or the
    system's CAs without one), checking the host name unless
    ``ssl.endpoint.identification.algorithm`` is empty, presenting our keystore for mutual
    TLS."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _common(context, settings)
    context.check_hostname = settings.endpoint_identification
    if settings.truststore_location:
        _load_truststore(context, settings)
    else:
        context.load_default_certs()
    if settings.keystore_location:
        _load_keystore(context, settings)
    return context


def peer_principal(ssl_object: ssl.SSLObject | None, rules: tuple[PrincipalRule, ...]) -> str:
    """``User:<name>`` for a TLS connection: the client certificate's subject DN (RFC 2253,
    as Java's X500Principal prints it) mapped by ssl.principal.mapping.rules;
    ``User:ANONYMOUS`` without a client certificate, as Kafka."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return "User:ANONYMOUS"
    from cryptography import x509

    subject = x509.load_der_x509_certificate(der).subject.rfc4514_string()
    return f"User:{map_principal(subject, rules)}"


def _common(context: ssl.SSLContext, settings: TlsSettings) -> None:
    versions = sorted(_VERSIONS[v] for v in settings.enabled_protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    if settings.cipher_suites:
        tls12 = [_openssl_name(s) for s in settings.cipher_suites if s not in TLS13_SUITES]
        tls13 = {s for s in settings.cipher_suites if s in TLS13_SUITES}
        if ssl.TLSVersion.TLSv1_3 in versions and tls13 != TLS13_SUITES:
            raise TlsConfigError(
                "ssl.cipher.suites: Python's ssl cannot restrict TLS 1.3 suites; name all of "
                f"{', '.join(sorted(TLS13_SUITES))} or disable TLSv1.3 in ssl.enabled.protocols"
            )
        if ssl.TLSVersion.TLSv1_2 in versions:
            try:
                context.set_ciphers(":".join(tls12))
            except ssl.SSLError:
                raise TlsConfigError(
                    f"ssl.cipher.suites: OpenSSL knows none of {', '.join(tls12)}"
                ) from None


def _openssl_name(suite: str) -> str:
    """OpenSSL's name of a TLS 1.2 suite given by its IANA name (what Kafka's Java config
    uses), e.g. TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 -> ECDHE-RSA-AES256-GCM-SHA384; other
    names pass through (OpenSSL names)."""
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return suite
    exchange, cipher = suite.removeprefix("TLS_").split("_WITH_")
    cipher = cipher.replace("AES_128", "AES128").replace("AES_256", "AES256")
    cipher = cipher.replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305")
    exchange = exchange.replace("DHE_RSA", "DHE-RSA").replace("ECDHE_", "ECDHE-")
    return f"{exchange}-{cipher.replace('_', '-')}"


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    location = settings.keystore_location
    assert location is not None
    try:
        if settings.keystore_type == "PEM":
            # Kafka's PEM keystore: the key is encrypted with ssl.key.password, if any.
            context.load_cert_chain(location, password=settings.key_password)
            return
        pem = _pkcs12_key_and_chain(location, settings.keystore_password, settings.key_password)
        with _memory_file(pem) as path:
            context.load_cert_chain(path)
    except (OSError, ssl.SSLError, ValueError) as error:
        raise TlsConfigError(
            f"ssl.keystore.location: cannot load {settings.keystore_type} keystore {location}: "
            f"{_reason(error)}"
        ) from None


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    location = settings.truststore_location
    if not location:
        raise TlsConfigError(
            "ssl.truststore.location: client certificates are checked (ssl.client.auth="
            f"{settings.client_auth}) against a truststore, and none is set"
        )
    try:
        if settings.truststore_type == "PEM":
            context.load_verify_locations(cafile=location)
            return
        context.load_verify_locations(
            cadata=_pkcs12_certificates(location, settings.truststore_password)
        )
    except (OSError, ssl.SSLError, ValueError) as error:
        raise TlsConfigError(
            f"ssl.truststore.location: cannot load {settings.truststore_type} truststore "
            f"{location}: {_reason(error)}"
        ) from None


def _reason(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _pkcs12_key_and_chain(path: str, password: str | None, key_password: str | None) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    data = Path(path).read_bytes()
    secret = (password or "").encode() or None
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, secret)
    except ValueError:
        if key_password is None or key_password == password:
            raise ValueError("wrong ssl.keystore.password or not a PKCS12 file") from None
        key, cert, extra = pkcs12.load_key_and_certificates(data, key_password.encode())
    if key is None or cert is None:
        raise ValueError("the PKCS12 keystore holds no private key with its certificate")
    parts = [
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
        cert.public_bytes(serialization.Encoding.PEM),
        *(c.public_bytes(serialization.Encoding.PEM) for c in extra),
    ]
    return b"".join(parts).decode()


def _pkcs12_certificates(path: str, password: str | None) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    secret = (password or "").encode() or None
    try:
        store = pkcs12.load_pkcs12(Path(path).read_bytes(), secret)
    except ValueError:
        raise ValueError("wrong ssl.truststore.password or not a PKCS12 file") from None
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    if not certificates:
        raise ValueError("the PKCS12 truststore holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)


class _memory_file:
    """A file that lives only in memory (memfd), readable by path while open."""

    def __init__(self, text: str) -> None:
        self._fd = os.memfd_create("kraft-keystore", os.MFD_CLOEXEC)
        os.write(self._fd, text.encode())

    def __enter__(self) -> str:
        return f"/proc/self/fd/{self._fd}"

    def __exit__(self, *_: object) -> None:
        os.close(self._fd)
