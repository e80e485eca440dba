"""The server side of one Kafka-protocol connection, for any set of APIs.

A connection carries length-prefixed requests; each is decoded against the versions the
listener serves, handed to ``handle`` and answered before the next one is read, so answers go
out in request order as Kafka guarantees (its SocketServer mutes a channel while a request is
in flight): one request in flight per connection. What cannot be served closes the
connection, as Kafka does, with one exception from KIP-511: an ApiVersions request of a
version we do not speak is answered, as v0 with UNSUPPORTED_VERSION and our version list, so
a newer client can retry with one we have.

Limits (NetworkLimits, Kafka's keys): a frame larger than ``socket.request.max.bytes`` closes
the connection before its body is read (logged once a minute per listener); the bytes of all
requests being read or decoded on a listener group share one ``queued.max.request.bytes``
budget (RequestBytesBudget): when it is spent, connections stop reading (TCP back-pressure)
until decoded requests free it. A request gives its bytes back once decoded, not once
answered, so requests parked in a handler (a JoinGroup waiting for its rebalance, a Fetch
waiting for data) hold none of it; small requests have a reserve of their own, so one
client's big requests cannot make everyone's ApiVersions or heartbeats wait. A connection
that sends nothing, or does not finish a frame, within ``connections.max.idle.ms`` is
closed, which also ends a slow-loris that sends a length prefix and never the body.

A request of more than a slice of work (protocol.incremental.SLICE_UNITS array elements,
whatever its bytes) is decoded a slice at a time, the loop served between slices, so no
request holds the loop while it is decoded, however big ``socket.request.max.bytes`` lets
it be; a smaller one (nearly every request) is decoded in one go.

Bytes after a request body are ignored here, as Kafka's broker ignores them (its parser reads
the fields it knows and never looks at what remains): librdkafka 2.16 sends three stray bytes
after a Metadata v12 body that asks for all topics, and a broker that refused them would be
unreachable from every librdkafka-based client.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import io
import logging
import struct
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import NoReturn

from log.fs import FileRegion
from log.rate_limited_log import RateLimitedLog
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import api_versions_response
from protocol.busy import Timed
from protocol.principal import CLIENT_HOST  # set here per connection; read by ServedApis
from protocol.turns import ENCODE_SLICE_ENTITIES

Handler = Callable[[wire.RequestHeader, object], Awaitable[object | None]]
BIG_FRAME_BYTES = 64 * 1024
# Frames this small (ApiVersions, heartbeats, most requests) first use a reserve of their
# own beside queued.max.request.bytes, so big requests cannot starve them.
SMALL_REQUEST_BYTES = BIG_FRAME_BYTES
SMALL_RESERVE_BYTES = 4 * 1024 * 1024
# Records regions smaller than this are read and written with the bytes around them: below
# it a sendfile's dup, system calls and turns of the loop cost more CPU than copying the
# bytes. `bench/bench_fetch.py --send-sizes` on the development machine: sendfile costs
# 4x the CPU of a copy at 64 KiB, 1.2-2.4x at 128 KiB, about the same at 256 KiB, less
# from 1 MiB (the default max.partition.fetch.bytes); above the threshold it also spares
# an allocation of the region's size per fetch.
SENDFILE_MIN_BYTES = 256 * 1024
# What a handler returns for a request that gets no response: a Produce with acks=0.
NO_RESPONSE = object()


@dataclass(frozen=True, slots=True)
class CloseAfter:
    """What a handler returns to send ``response`` and then close the connection (a failed
    SASL login is answered, then the connection ends, as Kafka does)."""

    response: object


class Channel:
    """What a handler may learn of and ask of its connection (``CHANNEL``): the size of the
    request being handled (a Produce quota counts it), and KIP-219's mute: a throttled
    client's response is sent at once, then the connection reads nothing more until
    ``muted_until_s`` (the loop's clock), as Kafka's SocketServer mutes a throttled channel.
    Bytes the client sends meanwhile wait in the socket buffers (TCP back-pressure)."""

    __slots__ = ("busy_clock", "muted_until_s", "network_busy_s", "request_bytes")

    def __init__(self) -> None:
        self.request_bytes = 0
        self.muted_until_s = 0.0
        # Set by a request quota (broker/quotas.py) for a client it times: decoding its
        # requests and encoding and writing their answers are then timed on this clock
        # too, into network_busy_s (Kafka's network thread time). None: nothing timed.
        self.busy_clock: Callable[[], float] | None = None
        self.network_busy_s = 0.0

    def take_network_busy_s(self) -> float:
        """The network time spent on this connection since the last call."""
        busy_s, self.network_busy_s = self.network_busy_s, 0.0
        return busy_s

    def mute_until(self, until_s: float) -> None:
        self.muted_until_s = max(self.muted_until_s, until_s)

    async def wait_unmuted(self) -> None:
        delay_s = self.muted_until_s - asyncio.get_running_loop().time()
        if delay_s > 0:
            await asyncio.sleep(delay_s)


# The channel of the request being handled (per connection, as CLIENT_HOST); None for a
# handler called outside a connection.
CHANNEL: contextvars.ContextVar[Channel | None] = contextvars.ContextVar("channel", default=None)

logger = logging.getLogger("protocol.server")
_limited = RateLimitedLog(logger)
_LENGTH = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class NetworkLimits:
    """The per-listener limits, under Kafka's names; defaults in docs/operations.md."""

    socket_request_max_bytes: int = wire.MAX_FRAME_BYTES
    connections_max_idle_ms: int = 600_000
    listener: str = "listener"


class RequestBytesBudget:
    """Kafka's MemoryPool for requests (``queued.max.request.bytes``): bytes of requests
    read and not yet answered. Kafka's default is -1 (unbounded); ours is
    socket.request.max.bytes, so the largest request always fits and raw request bytes in
    flight never exceed what one such request may be.

    A frame's size is taken from the budget before its body is read and given back once it
    is decoded (what a parked request keeps is the state of its handler, bounded there:
    group.max.size and the group metadata limits). Frames of at most SMALL_REQUEST_BYTES
    are first taken from a reserve of SMALL_RESERVE_BYTES beside the budget, granted
    without waiting behind big ones: a client holding the budget with big requests (one
    per connection, so at most one frame's bytes per connection) cannot starve the small
    requests of other clients. Waiters are served in order, so a large request is not
    starved by small ones; a request larger than the whole budget is let in when nothing
    else holds any (otherwise it could never be served), so the budget may be exceeded by
    one request.
    """

    def __init__(self, max_bytes: int, small_reserve_bytes: int = SMALL_RESERVE_BYTES) -> None:
        assert max_bytes > 0 and small_reserve_bytes >= 0
        self.max_bytes = max_bytes
        self.used_bytes = 0
        self.small_reserve_bytes = small_reserve_bytes
        self.reserve_used_bytes = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    @property
    def waiting(self) -> int:
        """Connections waiting for budget before reading their next request's body."""
        return len(self._waiters)

    async def take(self, size: int) -> Callable[[], None]:
        """Take ``size`` bytes for one frame, from the small-request reserve when it fits
        there, else from the budget (waiting in order); returns what gives them back."""
        if (
            size <= SMALL_REQUEST_BYTES
            and self.reserve_used_bytes + size <= self.small_reserve_bytes
        ):
            self.reserve_used_bytes += size
            return functools.partial(self._release_reserve, size)
        await self.acquire(size)
        return functools.partial(self.release, size)

    def _release_reserve(self, size: int) -> None:
        self.reserve_used_bytes -= size
        assert self.reserve_used_bytes >= 0, self.reserve_used_bytes

    def _fits(self, size: int) -> bool:
        return self.used_bytes == 0 or self.used_bytes + size <= self.max_bytes

    async def acquire(self, size: int) -> None:
        """Take ``size`` bytes, waiting (in order) while the budget is spent."""
        if not self._waiters and self._fits(size):
            self.used_bytes += size
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, future)
        self._waiters.append(entry)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(size)  # granted just as we were cancelled: give it back
            else:
                self._waiters.remove(entry)
                self._grant()
            raise

    def release(self, size: int) -> None:
        self.used_bytes -= size
        assert self.used_bytes >= 0, self.used_bytes
        self._grant()

    def _grant(self) -> None:
        while self._waiters and self._fits(self._waiters[0][0]):
            size, future = self._waiters.popleft()
            if future.done():
                continue
            self.used_bytes += size
            future.set_result(None)


class _FrameTooLarge(Exception):
    pass


async def serve_connection(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    handle: Handler,
    supported: Mapping[int, tuple[int, int]],
    *,
    limits: NetworkLimits | None = None,
    budget: RequestBytesBudget | None = None,
    frame_limit: Callable[[], int] | None = None,
) -> None:
    """Answer one connection's requests in order until it closes, idles out or sends what we
    cannot serve; ``handle`` returns the response entity, None to close the connection, or
    NO_RESPONSE to read the next request without answering this one. ``frame_limit``, when
    given, is the largest frame accepted now, instead of socket.request.max.bytes (a SASL
    listener takes only small frames before the client has logged in)."""
    peer = writer.get_extra_info("peername")
    CLIENT_HOST.set(f"/{peer[0]}" if isinstance(peer, tuple) and peer else "/")
    channel = Channel()
    CHANNEL.set(channel)
    limits = limits or NetworkLimits()
    idle = _IdleTimer(writer.transport, limits.connections_max_idle_ms / 1000)
    try:
        while True:
            (size,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
            largest = limits.socket_request_max_bytes if frame_limit is None else frame_limit()
            if size < 0 or size > largest:
                name = (
                    "socket.request.max.bytes"
                    if largest == limits.socket_request_max_bytes
                    else "sasl.server.max.receive.size"
                )
                raise _FrameTooLarge(size, name, largest)
            give_back = _Once(_nothing if budget is None else await budget.take(size))
            try:
                # No local keeps the frame: once decoded, a parked request holds its
                # decoded entity, not its bytes as well.
                body = [await reader.readexactly(size)]
                idle.busy = True
                channel.request_bytes = size  # header and body, as Kafka counts a request
                await _answer(body, writer, handle, supported, give_back, channel)
            finally:
                give_back()
            await channel.wait_unmuted()  # a throttled client's next request waits (KIP-219)
            idle.answered()
    except _FrameTooLarge as error:
        _limited.log(
            f"frame-size/{limits.listener}",
            logging.WARNING,
            "[SocketServer listener=%s] Closing connection from %s: request size %d is "
            "outside [0, %s %d]",
            limits.listener,
            _peer(writer),
            *error.args,
        )
    except _ClosingAfterAnswer:
        await _close_after_answer(reader, writer)
    except (OSError, asyncio.IncompleteReadError, wire.FrameError, _Close):
        return  # the peer went away, idled out, or sent an unreadable frame
    finally:
        idle.cancel()
        writer.transport.abort()


def _nothing() -> None:
    """No budget: nothing to give back."""


class _Once:
    """Calls ``action`` the first time it is called, never again: a frame's budget is given
    back once decoded, and the connection's clean-up calls it again harmlessly."""

    __slots__ = ("_action",)

    def __init__(self, action: Callable[[], None]) -> None:
        self._action: Callable[[], None] | None = action

    def __call__(self) -> None:
        action, self._action = self._action, None
        if action is not None:
            action()


class _IdleTimer:
    """connections.max.idle.ms: aborts the connection when no whole request has arrived
    for that long since the last answer (or since it opened), which also ends a connection
    stuck mid-frame or waiting that long for request budget. One timer per connection,
    re-armed only when it fires, so a request costs two attribute writes, not a timer."""

    __slots__ = ("_handle", "_idle_s", "_loop", "_transport", "active_s", "busy")

    def __init__(self, transport: asyncio.WriteTransport, idle_s: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._transport = transport
        self._idle_s = idle_s
        self.active_s = self._loop.time()
        self.busy = False  # a request is being handled: never idle meanwhile
        self._handle = self._loop.call_at(self.active_s + idle_s, self._check)

    def answered(self) -> None:
        self.busy = False
        self.active_s = self._loop.time()

    def _check(self) -> None:
        now_s = self._loop.time()
        deadline_s = now_s + self._idle_s if self.busy else self.active_s + self._idle_s
        if deadline_s <= now_s:
            self._transport.abort()  # the pending read fails; serve_connection returns
            return
        self._handle = self._loop.call_at(deadline_s, self._check)

    def cancel(self) -> None:
        self._handle.cancel()


# How long a connection closed after its last answer (CloseAfter) waits at each of two
# steps: for the peer to close, then for that answer to leave before the connection is
# aborted (docs/operations.md).
CLOSE_FLUSH_S = 1.0
# What one read takes of the bytes a peer sends after its connection's last answer: they
# are dropped unread, so a peer that keeps sending costs no memory, only CLOSE_FLUSH_S.
_DISCARD_BYTES = 64 * 1024


class _Close(Exception):
    """The request cannot be served: close the connection."""


class _ClosingAfterAnswer(Exception):
    """The last answer is written (CloseAfter): close once the peer had it."""


async def _answer(
    body: list[bytes],
    writer: asyncio.StreamWriter,
    handle: Handler,
    supported: Mapping[int, tuple[int, int]],
    decoded: Callable[[], None],
    channel: Channel,
) -> None:
    """Decode, handle and answer the frame ``body`` holds (taken out of it, so it is freed
    once decoded); ``decoded`` gives the frame's budget back as soon as it is decoded (or
    refused), before the handler may park it. With the channel's ``busy_clock`` set, the
    decoding and the encoding and writing of the answer are timed into its
    ``network_busy_s``."""
    frame = body.pop()
    size = len(frame)
    clock = channel.busy_clock
    try:
        if clock is None:
            header, request = await decode_request_in_slices(frame, supported)
        else:
            timed = Timed(decode_request_in_slices(frame, supported), clock)
            try:
                header, request = await timed
            finally:
                channel.network_busy_s += timed.busy_s
    except wire.FrameError as error:
        decoded()
        if not _is_unsupported_api_versions(error):
            # Kafka closes the channel of a request it cannot parse and logs why; so do we,
            # once a minute (a client retrying the same request cannot flood the log).
            _limited.log(
                "malformed-request",
                logging.WARNING,
                "Closing connection from %s: %s",
                _peer(writer),
                error,
            )
            raise _Close from None
        assert error.header is not None
        header = error.header
        response = api_versions_response(0, supported, wire.UNSUPPORTED_VERSION)
    else:
        del frame
        decoded()
        if size > BIG_FRAME_BYTES:
            await asyncio.sleep(0)  # the handler starts a step of its own
        try:
            response = await handle(header, request)
        except Exception:
            # A handler bug: this connection ends (as Kafka closes a channel whose request
            # failed unexpectedly), the node goes on, the bug is reported.
            _report_handler_failure(header)
            raise _Close from None
    if response is None:
        raise _Close
    if response is NO_RESPONSE:
        return
    close = isinstance(response, CloseAfter)
    if isinstance(response, CloseAfter):
        response = response.response
    clock = channel.busy_clock
    if clock is None:
        try:
            parts = await _encode_response(header, response)
        except Exception:  # an answer its version cannot carry: the handler's bug too
            _report_handler_failure(header)
            raise _Close from None
        await _send(writer, parts)
    else:
        sending = Timed(_encode_and_send(writer, header, response), clock)
        try:
            await sending
        finally:
            channel.network_busy_s += sending.busy_s
    if close:
        raise _ClosingAfterAnswer


async def _close_after_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """End a connection after its last answer (a refused SASL login's
    SASL_AUTHENTICATION_FAILED) so that the client reads that answer:

    - The peer closes first: the connection waits up to CLOSE_FLUSH_S for the end of its
      stream, reading nothing it would act on. A client that read the answer closes; one
      that reads the answer and the end of the stream in one wake-up may drop the answer
      (kafka-python 3.0 aborts on the end of the stream with the bytes it just read unread:
      under load, 7 of 10 refused logins in one run saw only "socket disconnected").
    - Then close() flushes what the transport still holds (for TLS, then close_notify);
      the caller's final abort() would discard it. A peer that does not read gets that
      abort after CLOSE_FLUSH_S more."""

    async def peer_closed() -> None:
        while await reader.read(_DISCARD_BYTES):
            pass

    with contextlib.suppress(TimeoutError, OSError, ConnectionError):
        await asyncio.wait_for(peer_closed(), CLOSE_FLUSH_S)
    writer.close()
    with contextlib.suppress(TimeoutError, OSError, ConnectionError):
        await asyncio.wait_for(writer.wait_closed(), CLOSE_FLUSH_S)


async def _encode_and_send(
    writer: asyncio.StreamWriter, header: wire.RequestHeader, response: object
) -> None:
    try:
        parts = await _encode_response(header, response)
    except Exception:  # an answer its version cannot carry: the handler's bug too
        _report_handler_failure(header)
        raise _Close from None
    await _send(writer, parts)


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


async def _encode_response(header: wire.RequestHeader, response: object) -> list[wire.Part]:
    """wire.response_parts behind its length prefix, serving the event loop between slices
    of a big answer."""
    parts: list[wire.Part] = []
    for number, piece in enumerate(wire.response_parts(header, response, ENCODE_SLICE_ENTITIES)):
        parts.extend(piece)
        if number:
            await asyncio.sleep(0)
    return [_LENGTH.pack(sum(len(part) for part in parts)), *parts]


async def _send(writer: asyncio.StreamWriter, parts: list[wire.Part]) -> None:
    """Write a response's parts in order: bytes, and regions read through the filesystem
    seam, joined into one write; but each region of a real file of SENDFILE_MIN_BYTES or
    more is sent from the file by sendfile(2), with no copy through user space (Kafka's
    FileRecords.writeTo). The connection reads no other request meanwhile, so answers
    stay in request order. The simulator's files have no descriptor: their regions are
    read and written in the one write, exactly as before regions existed. Nor can a TLS
    connection take a sendfile (the bytes must be encrypted in user space): its regions
    are copied too."""
    pending: list[bytes] = []
    copy_all = writer.get_extra_info("ssl_object") is not None
    for part in parts:
        if isinstance(part, bytes):
            pending.append(part)
        elif copy_all or part.size < SENDFILE_MIN_BYTES or not hasattr(part.handle, "fileno"):
            pending.append(_read_region(writer, part))
        else:
            writer.write(b"".join(pending))
            pending.clear()
            await _send_file_region(writer, part)
    writer.write(b"".join(pending))
    await writer.drain()


async def _send_file_region(writer: asyncio.StreamWriter, region: FileRegion) -> None:
    """sendfile(2) of ``region``. The file is held open (a dup) for the send, so a segment
    deleted meanwhile is still read whole, as Kafka keeps its channel; a file truncated
    below the region cannot fill the promised length, and the connection is closed rather
    than framed wrong."""
    try:
        handle = region.handle.dup()
    except OSError:
        _short_send(writer, region, 0)  # closed since it was read: the segment is gone
    try:
        file = io.FileIO(handle.fileno(), "rb", closefd=False)  # type: ignore[attr-defined]
        loop = asyncio.get_running_loop()
        sent = await loop.sendfile(writer.transport, file, region.position, region.size)
    finally:
        handle.close()
    if sent != region.size:
        _short_send(writer, region, sent)


def _read_region(writer: asyncio.StreamWriter, region: FileRegion) -> bytes:
    """A small region's bytes, read through the seam (cheaper than a sendfile of them)."""
    try:
        data = region.read()
    except OSError:
        data = b""
    if len(data) != region.size:
        _short_send(writer, region, len(data))
    return data


def _short_send(writer: asyncio.StreamWriter, region: FileRegion, sent: int) -> NoReturn:
    """The records promised in a response's length prefixes cannot all be sent (the segment
    was truncated or closed under the fetch): close the connection, so the client retries
    the fetch, rather than send a wrongly framed answer."""
    _limited.log(
        "short-send",
        logging.WARNING,
        "Closing connection to %s: %s held %d of the %d bytes at %d promised in a fetch "
        "response (the segment was truncated or deleted while being served)",
        _peer(writer),
        region.handle.path,
        sent,
        region.size,
        region.position,
    )
    raise _Close


def _report_handler_failure(header: wire.RequestHeader) -> None:
    """Log the exception being handled, with its traceback, at most once a minute (a
    client repeating the request cannot flood the log)."""
    _limited.log(
        "handler-failure",
        logging.ERROR,
        "Request api %d v%d (correlation id %d) from %r failed; its connection is closed\n%s",
        header.api_key,
        header.api_version,
        header.correlation_id,
        header.client_id,
        traceback.format_exc().rstrip(),
    )


def decode_request(
    frame: bytes, supported: Mapping[int, tuple[int, int]]
) -> tuple[wire.RequestHeader, object]:
    """wire.decode_request, except that bytes after a well-formed body are ignored (as
    Kafka's brokers do: librdkafka 2.16 sends three after an all-topics Metadata v12)."""
    return wire.decode_request(frame, supported, allow_trailing=True)


async def decode_request_in_slices(
    frame: bytes, supported: Mapping[int, tuple[int, int]]
) -> tuple[wire.RequestHeader, object]:
    """decode_request, a step of protocol.incremental.SLICE_UNITS units of work at a time,
    the loop served between steps: a request of 200,000 partitions is 400 steps of about
    1-2 ms, not one of 0.3-0.5 s (issue 22); one of at most a slice is one step."""
    steps = wire.decode_request_steps(frame, supported, allow_trailing=True)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            result: tuple[wire.RequestHeader, object] = done.value
            return result
        await asyncio.sleep(0)


def _is_unsupported_api_versions(error: wire.FrameError) -> bool:
    header = error.header
    return (
        header is not None
        and header.api_key == ApiKey.API_VERSIONS
        and error.error_code == wire.UNSUPPORTED_VERSION
    )
