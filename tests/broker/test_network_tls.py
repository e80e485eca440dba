"""Fetch answers over TLS: file regions of any size are copied into the encrypted stream (a
sendfile would bypass the encryption), byte for byte, in request order."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest

from broker.acceptor import start_acceptor
from broker.client import KafkaConnection
from protocol import wire
from protocol.connect import Connector
from protocol.security import ClientSecurity, SecurityProtocol, TlsSettings
from protocol.server import serve_connection
from protocol.tls import server_context
from tests.broker.test_network_sendfile import (
    BIG,
    SMALL,
    SUPPORTED,
    Segment,
    fetch_request,
    fetch_response,
    records_of,
)
from tests.kraft.secured import make_ca


def test_regions_are_copied_not_sendfiled_over_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = make_ca(tmp_path / "certs")
    node = certs.identity("tls-listener", ips=("127.0.0.1",))
    context = server_context(
        TlsSettings(keystore_location=str(node.keystore_pem), keystore_type="PEM")
    )
    client = Connector(
        ClientSecurity(
            SecurityProtocol.SSL,
            TlsSettings(truststore_location=str(certs.ca), truststore_type="PEM"),
        )
    )
    sendfiles: list[int] = []
    real_sendfile = asyncio.BaseEventLoop.sendfile

    async def counting(loop: Any, *args: Any, **kwargs: Any) -> int:
        sendfiles.append(1)
        return await real_sendfile(loop, *args, **kwargs)

    monkeypatch.setattr(asyncio.BaseEventLoop, "sendfile", counting)
    segments = [Segment(tmp_path / f"{i}.log", [BIG + i, SMALL + i]) for i in range(3)]
    answers = iter(segments)

    async def handle(_header: wire.RequestHeader, _request: object) -> object:
        return fetch_response(next(answers).regions)

    async def run() -> list[Any]:
        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve_connection(reader, writer, handle, SUPPORTED)

        server = await asyncio.start_server(on_connection, "127.0.0.1", 0, ssl=context)
        port = server.sockets[0].getsockname()[1]
        connection = KafkaConnection("test", connector=client)
        try:
            await connection.connect("127.0.0.1", port, 10)
            pending = [connection.request(fetch_request(2), timeout_s=10) for _ in segments]
            return list(await asyncio.gather(*pending))
        finally:
            await connection.close()
            server.close()

    responses = asyncio.run(run())
    assert [records_of(r) for r in responses] == [s.expected for s in segments]
    assert sendfiles == []


def _refused_client_reads(tmp_path: Path) -> str:
    """What a TLS 1.3 client without a certificate reads from an Acceptor whose listener
    requires one: the error its first read raises (it has sent a request meanwhile, as the
    Java client does right after its side of a TLS 1.3 handshake)."""
    certs = make_ca(tmp_path / "certs")
    node = certs.identity("mtls-listener", ips=("127.0.0.1",))
    context = server_context(
        TlsSettings(
            keystore_location=str(node.keystore_pem),
            keystore_type="PEM",
            truststore_location=str(certs.ca),
            truststore_type="PEM",
            client_auth="required",
        )
    )
    served: list[int] = []

    async def on_connection(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.append(1)
        writer.close()

    async def run() -> str:
        acceptor = await start_acceptor(on_connection, "127.0.0.1", 0, ssl=context)
        port = acceptor.sockets[0].getsockname()[1]
        client = ssl.create_default_context(cafile=str(certs.ca))
        client.minimum_version = ssl.TLSVersion.TLSv1_3
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"
            )
            writer.write(b"\x00\x00\x00\x01\x00")
            try:
                await asyncio.wait_for(reader.read(1), 10)
            except ssl.SSLError as error:
                return error.reason or str(error)
            finally:
                writer.close()
            return "no error"
        except ssl.SSLError as error:  # refused within the client's handshake
            return error.reason or str(error)
        finally:
            acceptor.close()

    reason = asyncio.run(run())
    assert served == []
    return reason


def test_a_refused_client_certificate_is_told_by_an_alert_not_a_reset(tmp_path: Path) -> None:
    """asyncio closes a failed handshake with OpenSSL's alert unsent; the acceptor sends it,
    as Kafka does, so a client refused after its side of a TLS 1.3 handshake learns why
    (Kafka's Java client: SslAuthenticationException at once, not retries on a reset)."""
    assert _refused_client_reads(tmp_path) == ("TLSV13_ALERT_CERTIFICATE_REQUIRED")
