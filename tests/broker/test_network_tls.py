"""Fetch answers over TLS: file regions of any size are copied into the encrypted stream (a
sendfile would bypass the encryption), byte for byte, in request order."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

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
