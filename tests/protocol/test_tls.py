"""TLS contexts from ssl.* settings, and the principal a client certificate maps to, over a
real loopback TLS handshake (asyncio, as the listeners use it)."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from protocol.security import TlsSettings, map_principal, parse_principal_rules
from protocol.tls import TlsConfigError, client_context, peer_principal, server_context
from tests.kraft.secured import STORE_PASSWORD, Certs, make_ca


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_ca(tmp_path_factory.mktemp("tls-certs"))


def test_default_rule_is_the_whole_dn_and_rules_apply_in_order() -> None:
    dn = "CN=Alice,OU=eng,O=acme"
    assert map_principal(dn, parse_principal_rules("DEFAULT")) == dn
    rules = parse_principal_rules(
        "RULE:^CN=([^,]*),OU=ops.*$/ops-$1/U, RULE:^CN=([^,]*),.*$/$1/L, DEFAULT"
    )
    assert map_principal("CN=Bob,OU=ops,O=acme", rules) == "OPS-BOB"
    assert map_principal(dn, rules) == "alice"
    assert map_principal("O=acme", rules) == "O=acme"
    with pytest.raises(ValueError, match=r"no ssl\.principal\.mapping\.rules rule"):
        map_principal("O=acme", parse_principal_rules("RULE:^CN=(.*)$/$1/"))
    with pytest.raises(ValueError, match="invalid rule"):
        parse_principal_rules("RULE:broken")


async def _principal_over_tls(server: ssl.SSLContext, client: ssl.SSLContext, rules: str) -> str:
    seen: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.set_result(
            peer_principal(writer.get_extra_info("ssl_object"), parse_principal_rules(rules))
        )
        writer.close()

    listener = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server)
    port = listener.sockets[0].getsockname()[1]
    try:
        _reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
        )
        principal = await asyncio.wait_for(seen, 10)
        writer.close()
        return principal
    finally:
        listener.close()


def test_pkcs12_and_pem_keystores_and_the_client_certificate_principal(certs: Certs) -> None:
    node = certs.identity("tls-node", ips=("127.0.0.1",))
    alice = certs.identity("tls-alice", cn="alice")
    server = server_context(
        TlsSettings(
            keystore_location=str(node.keystore_p12),
            keystore_type="PKCS12",
            keystore_password=STORE_PASSWORD,
            truststore_location=str(certs.ca_p12),
            truststore_type="PKCS12",
            truststore_password=STORE_PASSWORD,
            client_auth="required",
        )
    )
    client = client_context(
        TlsSettings(
            keystore_location=str(alice.keystore_pem),
            keystore_type="PEM",
            truststore_location=str(certs.ca),
            truststore_type="PEM",
        )
    )
    principal = asyncio.run(_principal_over_tls(server, client, "DEFAULT"))
    assert principal == "User:CN=alice,O=kraft-py"
    mapped = asyncio.run(_principal_over_tls(server, client, "RULE:^CN=([^,]*),.*$/$1/U"))
    assert mapped == "User:ALICE"


def test_without_a_client_certificate_the_principal_is_anonymous(certs: Certs) -> None:
    node = certs.identity("tls-node2", ips=("127.0.0.1",))
    server = server_context(
        TlsSettings(keystore_location=str(node.keystore_pem), keystore_type="PEM")
    )
    client = client_context(TlsSettings(truststore_location=str(certs.ca), truststore_type="PEM"))
    assert asyncio.run(_principal_over_tls(server, client, "DEFAULT")) == "User:ANONYMOUS"


def test_a_server_not_named_in_its_certificate_is_refused(certs: Certs) -> None:
    node = certs.identity("tls-elsewhere", ips=("127.0.0.9",))
    server = server_context(
        TlsSettings(keystore_location=str(node.keystore_pem), keystore_type="PEM")
    )
    client = client_context(TlsSettings(truststore_location=str(certs.ca), truststore_type="PEM"))
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        asyncio.run(_principal_over_tls(server, client, "DEFAULT"))


def test_unreadable_stores_and_cipher_lists_are_one_clear_error(
    certs: Certs, tmp_path: Path
) -> None:
    node = certs.identity("tls-node3", ips=("127.0.0.1",))
    with pytest.raises(TlsConfigError, match=r"wrong ssl\.keystore\.password"):
        server_context(
            TlsSettings(
                keystore_location=str(node.keystore_p12),
                keystore_type="PKCS12",
                keystore_password="nope",
            )
        )
    with pytest.raises(TlsConfigError, match="truststore, and none is set"):
        server_context(
            TlsSettings(
                keystore_location=str(node.keystore_pem),
                keystore_type="PEM",
                client_auth="requested",
            )
        )
    garbage = tmp_path / "garbage.p12"
    garbage.write_bytes(b"not pkcs12")
    with pytest.raises(TlsConfigError, match="cannot load PKCS12 truststore"):
        client_context(TlsSettings(truststore_location=str(garbage), truststore_type="PKCS12"))
    pem = {"keystore_location": str(node.keystore_pem), "keystore_type": "PEM"}
    with pytest.raises(TlsConfigError, match=r"cannot restrict TLS 1\.3 suites"):
        server_context(
            TlsSettings(**pem, cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",))
        )
    context = server_context(
        TlsSettings(
            **pem,
            enabled_protocols=("TLSv1.2",),
            cipher_suites=("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",),
        )
    )
    assert [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES256-GCM-SHA384"
    ]
    with pytest.raises(TlsConfigError, match="OpenSSL knows none of"):
        server_context(TlsSettings(**pem, enabled_protocols=("TLSv1.2",), cipher_suites=("X",)))
