"""The client side of one Kafka-protocol connection: pipelined requests, matched answers.

Requests are written as they come, each with the next correlation id, and answers are
matched to them by that id (a Kafka server answers one connection's requests in order, but
matching by id catches a server that does not). Any failure, a reset, an unreadable or
unexpected answer, or a request timing out, closes the whole connection and fails every
request still waiting, as Kafka's NetworkClient does: after a timeout the connection's
position in the response stream is unknown, so it cannot be trusted for the next answer.

A connection logged in with SASL to a listener with ``connections.max.reauth.ms`` logs in
again on the same connection before its session ends (KIP-368), at 90% of the session
lifetime the server gave: new requests wait, those in flight are answered, the SASL
exchange runs, then the waiting requests go. A refused re-authentication closes the
connection, as any failure.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from protocol import wire
from protocol.connect import REAUTHENTICATE_AT, Connector
from protocol.turns import ENCODE_SLICE_ENTITIES

MAX_IN_FLIGHT = 100
REAUTH_STEP_TIMEOUT_S = 30.0  # one request of a re-authentication (KIP-368)
_CORRELATION_ID_LIMIT = 2**31


class ConnectionClosed(ConnectionError):
    """The connection is closed; a request sent on it has no answer and may or may not have
    been processed by the server."""


@dataclass(slots=True)
class _InFlight:
    api_key: int
    api_version: int
    answer: asyncio.Future[object]
    slot: bool = True  # holds one of max_in_flight (a re-authentication's requests do not)


class KafkaConnection:
    """One connection to a Kafka-protocol server; ``connect`` then ``request``."""

    def __init__(
        self,
        client_id: str | None,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        connector: Connector | None = None,
    ) -> None:
        self.client_id = client_id
        # How the peer's listener is secured (TLS, SASL login); None: plaintext.
        self._connector = connector
        self._slots = asyncio.Semaphore(max_in_flight)
        self._in_flight: dict[int, _InFlight] = {}
        self._next_correlation_id = 0
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._closed = False
        # KIP-368: cleared while the connection re-authenticates (requests wait), and set
        # when nothing is in flight (the re-authentication waits for it).
        self._open = asyncio.Event()
        self._open.set()
        self._drained = asyncio.Event()
        self._drained.set()
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task[None] | None = None
        self.reauthentications = 0  # how many times this connection logged in again

    @property
    def closed(self) -> bool:
        """Whether the connection can no longer carry requests (or never connected)."""
        return self._closed or self._writer is None

    async def connect(self, host: str, port: int, timeout_s: float) -> None:
        """Open the connection (TLS and the SASL login included, when the connector asks
        for them); OSError (TimeoutError, and a refused login, included) when that fails."""
        assert self._writer is None and not self._closed, "connect once per KafkaConnection"
        try:
            reader, writer, lifetime_s = await asyncio.wait_for(
                self._open_session(host, port), timeout=timeout_s
            )
        except OSError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # Python 3.11's wait_for can report a cancellation as the connect error;
                # the caller asked to stop, not to retry.
                raise asyncio.CancelledError from None
            raise
        if self._closed:  # closed while connecting
            writer.transport.abort()
            raise ConnectionClosed("closed while connecting")
        self._writer = writer
        self._reader_task = asyncio.get_running_loop().create_task(self._read_answers(reader))
        self._schedule_reauthentication(lifetime_s)

    async def _open_session(
        self, host: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float | None]:
        if self._connector is None:
            reader, writer = await asyncio.open_connection(host, port)
            return reader, writer, None
        return await self._connector.open_session(host, port, self.client_id)

    def _schedule_reauthentication(self, lifetime_s: float | None) -> None:
        if lifetime_s is None or self._closed:
            return
        loop = asyncio.get_running_loop()
        self._reauth_timer = loop.call_later(lifetime_s * REAUTHENTICATE_AT, self._reauth_due)

    def _reauth_due(self) -> None:
        self._reauth_timer = None
        if not self._closed:
            self._reauth_task = asyncio.get_running_loop().create_task(self._reauthenticate())

    async def _reauthenticate(self) -> None:
        """Log in again on this connection: hold new requests, let those in flight be
        answered, run the SASL exchange, let the held requests go."""
        assert self._connector is not None
        self._open.clear()
        try:
            await self._drained.wait()
            lifetime_s = await self._connector.reauthenticate(self._call_alone)
        except (OSError, TimeoutError) as error:
            self._fail(f"re-authentication failed: {error!r}")
            return
        finally:
            self._open.set()
        self.reauthentications += 1
        self._schedule_reauthentication(lifetime_s)

    async def _call_alone(self, entity: object) -> object:
        """One request of a re-authentication: nothing else is in flight."""
        body: Any = entity
        async with asyncio.timeout(REAUTH_STEP_TIMEOUT_S):
            answer = self._send(int(body.__api_key__), int(body.__version__), entity, slot=False)
            if self._writer is not None:
                await self._writer.drain()
            return await answer

    async def request(self, entity: object, timeout_s: float) -> object:
        """The response entity answering ``entity`` (a kio request of any API and version).

        ConnectionClosed when the connection fails first; TimeoutError (the connection is
        then closed) when no answer comes within ``timeout_s``.
        """
        body: Any = entity
        api_key, api_version = int(body.__api_key__), int(body.__version__)
        encoded = await encoded_in_slices(entity)
        try:
            async with asyncio.timeout(timeout_s):
                await self._slots.acquire()
                if not self._open.is_set():
                    try:
                        await self._open.wait()  # a re-authentication is under way
                    except BaseException:
                        self._slots.release()
                        raise
                answer = self._send(api_key, api_version, entity, encoded)
                if self._writer is not None:
                    await self._writer.drain()
                return await answer
        except TimeoutError:
            self._fail(f"api {api_key} v{api_version} request timed out after {timeout_s}s")
            raise TimeoutError(
                f"no answer to api {api_key} v{api_version} in {timeout_s}s"
            ) from None
        except ConnectionClosed:
            raise
        except OSError as error:
            self._fail(f"write failed: {error!r}")
            raise ConnectionClosed(f"write failed: {error!r}") from error

    def _send(
        self,
        api_key: int,
        api_version: int,
        entity: object,
        encoded: bytes | None = None,
        *,
        slot: bool = True,
    ) -> asyncio.Future[object]:
        """Write one request (a slot already taken, unless ``slot`` is False) and return the
        future of its answer."""
        if self.closed:
            if slot:
                self._slots.release()
            raise ConnectionClosed("connection is closed")
        assert self._writer is not None
        correlation_id = self._next_correlation_id
        header = wire.RequestHeader(api_key, api_version, correlation_id, self.client_id)
        try:
            frame = wire.encode_request(header, entity, encoded)
        except Exception:
            if slot:
                self._slots.release()
            raise
        self._next_correlation_id = (correlation_id + 1) % _CORRELATION_ID_LIMIT
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._in_flight[correlation_id] = _InFlight(api_key, api_version, answer, slot)
        self._drained.clear()
        self._writer.write(frame)
        return answer

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                frame = await wire.read_frame(reader)
                correlation_id = int.from_bytes(frame[:4], "big", signed=True)
                in_flight = self._in_flight.get(correlation_id)
                if in_flight is None:
                    self._fail(f"answer with unknown correlation id {correlation_id}")
                    return
                # Decoded before it leaves the table, so an unreadable answer fails its
                # request together with the rest; in slices, so a big answer (to a
                # forwarded CreateTopics of 200,000 topics) does not hold the loop.
                steps = wire.decode_response_steps(in_flight.api_key, in_flight.api_version, frame)
                del frame
                while True:
                    try:
                        next(steps)
                    except StopIteration as done:
                        _cid, response = done.value
                        break
                    await asyncio.sleep(0)
                if self._in_flight.pop(correlation_id, None) is not in_flight:
                    return  # closed while it was decoded: every waiter was failed
                if in_flight.slot:
                    self._slots.release()
                if not self._in_flight:
                    self._drained.set()
                if not in_flight.answer.done():  # its caller may have been cancelled
                    in_flight.answer.set_result(response)
        except (OSError, asyncio.IncompleteReadError, wire.FrameError, ValueError) as error:
            self._fail(f"read failed: {error!r}")

    def _fail(self, reason: str) -> None:
        """Close the connection and fail every request still waiting for an answer."""
        self._closed = True
        if self._writer is not None:
            self._writer.transport.abort()
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        self._drained.set()
        self._open.set()  # waiting requests go on to find the connection closed
        in_flight, self._in_flight = self._in_flight, {}
        for item in in_flight.values():
            if item.slot:
                self._slots.release()
            if not item.answer.done():
                item.answer.set_exception(ConnectionClosed(reason))
                # A request whose caller already gave up would log "exception never
                # retrieved"; mark it seen.
                item.answer.exception()

    async def close(self) -> None:
        """Close the connection; waiting requests fail with ConnectionClosed."""
        self._fail("closed by the client")
        for task in (self._reader_task, self._reauth_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


async def encoded_in_slices(entity: object) -> bytes | None:
    """A big request body's bytes, encoded a slice at a time; None for a small one (it is
    encoded with its header in one piece)."""
    parts = wire.request_body_parts(entity, ENCODE_SLICE_ENTITIES)
    if parts is None:
        return None
    chunks = []
    for chunk in parts:
        chunks.append(chunk)
        await asyncio.sleep(0)
    return b"".join(chunks)
