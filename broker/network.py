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
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from raft import wire
from raft.entities import make, response_module

Handler = Callable[[wire.RequestHeader, object], Awaitable[object | None]]
HANDLER_FAILURE_LOG_INTERVAL_S = 60.0
BIG_FRAME_BYTES = 64 * 1024
ENCODE_SLICE_ITEMS = 2000  # entities of one big array encoded between turns of the loop
_handler_failures = [0, float("-inf")]  # failures since the last report, its loop time
logger = logging.getLogger("broker.network")
# What a handler returns for a request that gets no response: a Produce with acks=0.
NO_RESPONSE = object()


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Handler,
    supported: Mapping[int, tuple[int, int]],
) -> None:
    """Answer one connection's requests in order until it closes or sends what we cannot
    serve; ``handle`` returns the response entity, None to close the connection, or
    NO_RESPONSE to read the next request without answering this one."""
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
                if len(frame) > BIG_FRAME_BYTES:
                    await asyncio.sleep(0)  # its decoding was one long step: let others run
                try:
                    response = await handle(header, request)
                except Exception:
                    # A handler bug: this connection ends (as Kafka closes a channel whose
                    # request failed unexpectedly), the node goes on, the bug is reported.
                    _report_handler_failure(header)
                    return
            if response is None:
                return
            if response is NO_RESPONSE:
                continue
            try:
                encoded = await _encode_response(header, response)
            except Exception:  # an answer its version cannot carry: the handler's bug too
                _report_handler_failure(header)
                return
            writer.write(encoded)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError, wire.FrameError):
        return  # the peer went away or sent an unreadable frame: nothing left to answer
    finally:
        writer.transport.abort()


async def _encode_response(header: wire.RequestHeader, response: object) -> bytes:
    """wire.encode_response, serving the event loop between slices of a big answer."""
    parts = []
    for part in wire.response_parts(header, response, ENCODE_SLICE_ITEMS):
        parts.append(part)
        if len(parts) > 1:
            await asyncio.sleep(0)
    size = sum(len(part) for part in parts)
    return b"".join([size.to_bytes(4, "big"), *parts])


def _report_handler_failure(header: wire.RequestHeader) -> None:
    """Log a handler's exception with its traceback, at most once per
    HANDLER_FAILURE_LOG_INTERVAL_S (a client repeating the request cannot flood the log)."""
    now = asyncio.get_running_loop().time()
    _handler_failures[0] += 1
    if 0 <= now - _handler_failures[1] < HANDLER_FAILURE_LOG_INTERVAL_S:  # (another loop: log)
        return
    logger.exception(
        "Request api %d v%d (correlation id %d) from %r failed; its connection is closed "
        "(%d such failure(s) since the last report)",
        header.api_key,
        header.api_version,
        header.correlation_id,
        header.client_id,
        _handler_failures[0],
    )
    _handler_failures[:] = [0, now]


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
