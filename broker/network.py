"""The server side of one Kafka-protocol connection, for any set of APIs.

A connection carries length-prefixed requests; each is decoded against the versions the
listener serves, handed to ``handle`` and answered before the next one is read, so answers go
out in request order as Kafka guarantees (its SocketServer mutes a channel while a request is
in flight). What cannot be served closes the connection, as Kafka does, with one exception
from KIP-511: an ApiVersions request of a version we do not speak is answered, as v0 with
UNSUPPORTED_VERSION and our version list, so a newer client can retry with one we have.

Bytes after a request body are ignored here, as Kafka's broker ignores them (its parser reads
the fields it knows and never looks at what remains): librdkafka 2.16 sends three stray bytes
after a Metadata v12 body that asks for all topics, and a broker that refused them would be
unreachable from every librdkafka-based client.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from raft import wire
from raft.entities import make, response_module

Handler = Callable[[wire.RequestHeader, object], Awaitable[object | None]]
# What a handler returns for a request that gets no response: a Produce with acks=0.
NO_RESPONSE = object()
# The client's address as Kafka shows it ("/127.0.0.1"), for the request being handled: each
# connection runs in its own task, so this is per connection.
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="/")


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Handler,
    supported: Mapping[int, tuple[int, int]],
) -> None:
    """Answer one connection's requests in order until it closes or sends what we cannot
    serve; ``handle`` returns the response entity, None to close the connection, or
    NO_RESPONSE to read the next request without answering this one."""
    peer = writer.get_extra_info("peername")
    CLIENT_HOST.set(f"/{peer[0]}" if isinstance(peer, tuple) and peer else "/")
    try:
        while True:
            frame = await wire.read_frame(reader)
            try:
                header, request = decode_request(frame, supported)
            except wire.FrameError as error:
                if not _is_unsupported_api_versions(error):
                    return
                assert error.header is not None
                header = error.header
                response = api_versions_response(0, supported, wire.UNSUPPORTED_VERSION)
            else:
                response = await handle(header, request)
            if response is None:
                return
            if response is NO_RESPONSE:
                continue
            writer.write(wire.encode_response(header, response))
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError, wire.FrameError):
        return  # the peer went away or sent an unreadable frame: nothing left to answer
    finally:
        writer.transport.abort()


def decode_request(
    frame: bytes, supported: Mapping[int, tuple[int, int]]
) -> tuple[wire.RequestHeader, object]:
    """wire.decode_request, except that bytes after a well-formed body are ignored (as
    Kafka's brokers do: librdkafka 2.16 sends three after an all-topics Metadata v12)."""
    return wire.decode_request(frame, supported, allow_trailing=True)


def _is_unsupported_api_versions(error: wire.FrameError) -> bool:
    header = error.header
    return (
        header is not None
        and header.api_key == wire.API_VERSIONS_KEY
        and error.error_code == wire.UNSUPPORTED_VERSION
    )


def api_versions_response(
    version: int, supported: Mapping[int, tuple[int, int]], error_code: int = 0
) -> object:
    """ApiVersionsResponse (of ``version``) listing ``supported``: api key -> (min, max)."""
    module: Any = response_module(wire.API_VERSIONS_KEY, version)
    keys = tuple(
        make(module.ApiVersion, {"api_key": key, "min_version": low, "max_version": high})
        for key, (low, high) in sorted(supported.items())
    )
    values = {"error_code": ErrorCode(error_code), "api_keys": keys}
    return make(module.ApiVersionsResponse, values)
