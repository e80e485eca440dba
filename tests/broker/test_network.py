"""protocol/server.py and broker/client.py over real loopback sockets."""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.describe_cluster.v0.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest

from broker.client import ConnectionClosed, KafkaConnection
from log.rate_limited_log import RateLimitedLog
from protocol import server as network
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import api_versions_response
from protocol.server import decode_request, serve_connection

SUPPORTED = {ApiKey.API_VERSIONS: (0, 3), 60: (0, 0)}
API_VERSIONS = ApiVersionsRequest(client_software_name="test", client_software_version="1")
Handler = Callable[[wire.RequestHeader, object], Awaitable[object | None]]


async def answer_api_versions(header: wire.RequestHeader, _request: object) -> object | None:
    return api_versions_response(header.api_version, SUPPORTED)


@asynccontextmanager
async def serving(
    handle: Handler, supported: dict[int, tuple[int, int]] = SUPPORTED
) -> AsyncIterator[int]:
    """A listener on 127.0.0.1 serving ``handle`` for ``supported``; yields its port."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_connection(reader, writer, handle, supported)

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def connected(port: int) -> KafkaConnection:
    connection = KafkaConnection("test")
    await connection.connect("127.0.0.1", port, timeout_s=5)
    return connection


def raw_frame(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """A request header v1 with no body: enough for a version the server cannot parse."""
    client_id = b"raw"
    payload = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id))
    payload += client_id
    return struct.pack(">i", len(payload)) + payload


def test_api_versions_lists_the_served_versions() -> None:
    async def run() -> Any:
        async with serving(answer_api_versions) as port:
            connection = await connected(port)
            try:
                return await connection.request(API_VERSIONS, timeout_s=5)
            finally:
                await connection.close()

    response = asyncio.run(run())
    assert response.error_code == ErrorCode.none
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (18, 0, 3),
        (60, 0, 0),
    ]


def test_unknown_api_versions_version_gets_a_v0_answer_listing_ours() -> None:
    async def run() -> tuple[int, Any]:
        async with serving(answer_api_versions) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(raw_frame(ApiKey.API_VERSIONS, 99, correlation_id=7))
            frame = await wire.read_frame(reader)
            writer.close()
            return wire.decode_response(ApiKey.API_VERSIONS, 0, frame)

    correlation_id, response = asyncio.run(run())
    assert correlation_id == 7
    assert response.error_code == ErrorCode.unsupported_version
    assert {k.api_key for k in response.api_keys} == {18, 60}


@pytest.mark.parametrize(
    "frame",
    [
        raw_frame(60, 7, correlation_id=1),  # DescribeCluster of a version we do not serve
        raw_frame(3, 0, correlation_id=1),  # Metadata: not served by this listener
        struct.pack(">i", 3) + b"\x00\x12\x00",  # header cut short
    ],
)
def test_requests_that_cannot_be_served_close_the_connection(frame: bytes) -> None:
    async def run() -> bytes:
        async with serving(answer_api_versions) as port:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(frame)
            data = await reader.read()
            writer.close()
            return data

    assert asyncio.run(run()) == b""


def test_handler_returning_none_closes_the_connection_and_fails_the_request() -> None:
    async def refuse(_header: wire.RequestHeader, _request: object) -> object | None:
        return None

    async def run() -> None:
        async with serving(refuse) as port:
            connection = await connected(port)
            with pytest.raises(ConnectionClosed):
                await connection.request(API_VERSIONS, timeout_s=5)
            assert connection.closed

    asyncio.run(run())


def test_pipelined_requests_are_handled_one_at_a_time_and_answered_in_order() -> None:
    started: list[int] = []
    first_started = asyncio.Event()
    release_first = asyncio.Event()

    async def handle(header: wire.RequestHeader, _request: object) -> object | None:
        started.append(header.correlation_id)
        first_started.set()
        if header.correlation_id == 0:
            await release_first.wait()
        return api_versions_response(header.api_version, SUPPORTED)

    async def run() -> list[Any]:
        async with serving(handle) as port:
            connection = await connected(port)
            requests = [
                asyncio.ensure_future(connection.request(API_VERSIONS, timeout_s=5))
                for _ in range(3)
            ]
            await first_started.wait()
            # The first request holds the connection: the others wait behind it.
            for _ in range(20):
                await asyncio.sleep(0)
            assert started == [0]
            release_first.set()
            responses = await asyncio.gather(*requests)
            await connection.close()
            return responses

    responses = asyncio.run(run())
    assert started == [0, 1, 2]
    assert all(r.error_code == ErrorCode.none for r in responses)


def test_a_timed_out_request_closes_the_connection_and_fails_the_others() -> None:
    never = asyncio.Event()

    async def stall(_header: wire.RequestHeader, _request: object) -> object | None:
        await never.wait()
        return None

    async def run() -> None:
        async with serving(stall) as port:
            connection = await connected(port)
            other = asyncio.ensure_future(connection.request(API_VERSIONS, timeout_s=60))
            with pytest.raises(TimeoutError):
                await connection.request(
                    DescribeClusterRequest(include_cluster_authorized_operations=False),
                    timeout_s=0.05,
                )
            assert connection.closed
            with pytest.raises(ConnectionClosed):
                await other
            with pytest.raises(ConnectionClosed):
                await connection.request(API_VERSIONS, timeout_s=5)

    asyncio.run(run())


def test_connect_to_a_closed_port_raises_oserror() -> None:
    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(OSError):
            await connected(port)

    asyncio.run(run())


def test_bytes_after_a_request_body_are_ignored_as_kafka_does() -> None:
    # librdkafka 2.16's Metadata v12 "all topics" request, three stray bytes at the end.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    header, request = decode_request(frame, {3: (0, 12)})
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 12, 3)
    assert request == MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )


def test_a_body_cut_short_is_still_refused() -> None:
    frame = bytes.fromhex("0003000c00000003000772646b61666b610005")  # 4 topics promised
    with pytest.raises(wire.FrameError):
        decode_request(frame, {3: (0, 12)})


def test_a_failing_handler_closes_its_connection_and_is_reported_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler bug (the fuzzer's ListOffsets with null topics raised TypeError) used to
    escape serve_connection: asyncio logged 'Unhandled exception in client_connected_cb'
    with a traceback for every such request. Now the connection closes, the listener keeps
    serving, and one ERROR line (with the traceback) reports it per interval."""

    monkeypatch.setattr(network, "_limited", RateLimitedLog(network.logger))  # none yet

    async def broken(header: wire.RequestHeader, request: object) -> object | None:
        if header.api_key == 60:
            raise TypeError("'NoneType' object is not iterable")
        return await answer_api_versions(header, request)

    async def run() -> None:
        async with serving(broken) as port:
            for _ in range(3):
                connection = await connected(port)
                with pytest.raises(ConnectionClosed):
                    await connection.request(
                        DescribeClusterRequest(include_cluster_authorized_operations=False),
                        timeout_s=5,
                    )
            healthy = await connected(port)
            answer: Any = await healthy.request(API_VERSIONS, timeout_s=5)
            assert answer.error_code == ErrorCode.none
            await healthy.close()

    with caplog.at_level(logging.ERROR):
        asyncio.run(run())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].name == "protocol.server", errors
    assert "Traceback" in errors[0].getMessage()
