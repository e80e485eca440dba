"""Outbound Kafka-protocol connections from one quorum member to each peer.

One connection per peer, opened lazily and reopened with jittered exponential backoff; a
request is written as soon as the connection is up and fails (``RequestFailed``) when its
timeout passes or its connection breaks. Responses are matched by correlation id, which is
the core's own request id, so a late answer after a timeout is simply unknown and dropped.

A connection logged in with SASL to a listener with ``connections.max.reauth.ms`` logs in
again on the same connection at 90% of the session lifetime (KIP-368): requests queued
meanwhile are held, the SASL exchange is written behind those already sent (the server
answers in order), and the held requests go once it succeeds. A refused re-authentication
drops the connection like any failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocol import wire
from protocol.connect import REAUTHENTICATE_AT, Connector
from raft import codec
from raft.messages import Errors, Request, RequestFailed, Response

BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 1.0
MAX_PENDING = 1024
REAUTH_STEP_TIMEOUT_S = 30.0  # one request of a re-authentication (KIP-368)
# Correlation ids of re-authentication requests: negative, never a core request id.
_REAUTH_CORRELATION_IDS = -2000


@dataclass(slots=True)
class _Pending:
    api_key: int
    api_version: int
    frame: bytes
    deadline: float
    written: bool = False


class PeerConnection:
    """The client side of the link to one peer."""

    def __init__(
        self,
        peer_id: int,
        address: tuple[str, int],
        *,
        deliver: Callable[[int, int, Response], None],
        rng: random.Random,
        client_id: str,
        learn: Callable[[int, str, int], None] | None = None,
        connector: Connector | None = None,
    ) -> None:
        """``learn`` hears the leader endpoints an answer carries (KIP-853's NodeEndpoints
        in Fetch and Vote responses): how a replica that knows no voter yet finds the
        leader its bootstrap server named."""
        self._learn = learn
        self.peer_id = peer_id
        self._connector = connector  # the controller listener's TLS/SASL (None: plaintext)
        self.address = address
        self._deliver = deliver
        self._rng = rng
        self._client_id = client_id
        self._pending: dict[int, _Pending] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closing = False
        # KIP-368: while True, queued requests are not written (a re-authentication is on
        # the wire); its answers go to these futures by correlation id.
        self._reauthenticating = False
        self._auth_answers: dict[int, tuple[int, int, asyncio.Future[object]]] = {}
        self._auth_ids = itertools.count()
        self.reauthentications = 0  # how many times a connection logged in again

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        # Python 3.11's wait_for can turn a cancellation into the inner connect error; the
        # flag makes the loop stop anyway.
        self._closing = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._fail_all(Errors.NETWORK_EXCEPTION)

    def send(
        self, correlation_id: int, body: Request, *, cluster_id: str, src_id: int, timeout_s: float
    ) -> None:
        """Queue a request; its answer (or failure) comes back through ``deliver``."""
        if len(self._pending) >= MAX_PENDING:
            self._deliver(self.peer_id, correlation_id, RequestFailed(Errors.REQUEST_TIMED_OUT))
            return
        api_key, version, entity = codec.encode_raft_request(
            body, cluster_id=cluster_id, src_id=src_id, dst_id=self.peer_id
        )
        header = wire.RequestHeader(api_key, version, correlation_id, self._client_id)
        loop = asyncio.get_running_loop()
        self._pending[correlation_id] = _Pending(
            api_key, version, wire.encode_request(header, entity), loop.time() + timeout_s
        )
        self._flush_writes()
        self._wake.set()

    def expire(self, now: float) -> None:
        """Fail every request whose timeout has passed."""
        for correlation_id, pending in list(self._pending.items()):
            if pending.deadline <= now:
                del self._pending[correlation_id]
                self._deliver(self.peer_id, correlation_id, RequestFailed(Errors.REQUEST_TIMED_OUT))

    def _flush_writes(self) -> None:
        writer = self._writer
        if writer is None or writer.is_closing() or self._reauthenticating:
            return
        for pending in self._pending.values():
            if not pending.written:
                writer.write(pending.frame)
                pending.written = True

    def _fail_all(self, code: int) -> None:
        pending, self._pending = self._pending, {}
        for correlation_id in pending:
            self._deliver(self.peer_id, correlation_id, RequestFailed(code))

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._closing:
            if not self._pending:
                self._wake.clear()
                await self._wake.wait()
            try:
                reader, writer, lifetime_s = await asyncio.wait_for(
                    self._open(), timeout=BACKOFF_MAX_S * 2
                )
            except OSError:
                self._fail_all(Errors.BROKER_NOT_AVAILABLE)
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    # Python 3.11's wait_for can report a cancellation as the inner connect
                    # error; swallowing it here would leave this loop running forever.
                    raise asyncio.CancelledError from None
                if self._closing:
                    return
                await asyncio.sleep(backoff * (0.8 + 0.4 * self._rng.random()))
                backoff = min(backoff * 2, BACKOFF_MAX_S)
                continue
            if self._closing:  # connected just as close() cancelled us
                writer.transport.abort()
                return
            backoff = BACKOFF_MIN_S
            self._writer = writer
            self._flush_writes()
            reauthenticating: list[asyncio.Task[None]] = []
            timer = self._schedule_reauthentication(writer, lifetime_s, reauthenticating)
            try:
                await self._read_responses(reader)
            except (OSError, asyncio.IncompleteReadError, wire.FrameError, ValueError):
                # A broken connection or an answer we cannot use (wrong partition, bad
                # frame): drop the connection; its requests fail and the core retries.
                pass
            finally:
                self._writer = None
                writer.transport.abort()
                if timer[0] is not None:
                    timer[0].cancel()
                for task in reauthenticating:
                    task.cancel()
                self._reauthenticating = False
                self._fail_auth_answers()
                self._fail_all(Errors.NETWORK_EXCEPTION)

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float | None]:
        if self._connector is None:
            reader, writer = await asyncio.open_connection(*self.address)
            return reader, writer, None
        return await self._connector.open_session(*self.address, self._client_id)

    def _schedule_reauthentication(
        self,
        writer: asyncio.StreamWriter,
        lifetime_s: float | None,
        tasks: list[asyncio.Task[None]],
    ) -> list[asyncio.TimerHandle | None]:
        """Re-authenticate this connection at REAUTHENTICATE_AT of each session lifetime;
        the timer is kept in the returned cell (re-armed after each re-authentication)."""
        cell: list[asyncio.TimerHandle | None] = [None]
        loop = asyncio.get_running_loop()

        def arm(seconds: float | None) -> None:
            cell[0] = None if seconds is None else loop.call_later(seconds * REAUTHENTICATE_AT, due)

        def due() -> None:
            cell[0] = None
            task = loop.create_task(self._reauthenticate(writer, arm))
            tasks.append(task)
            task.add_done_callback(tasks.remove)

        arm(lifetime_s)
        return cell

    async def _reauthenticate(
        self, writer: asyncio.StreamWriter, arm: Callable[[float | None], None]
    ) -> None:
        assert self._connector is not None
        self._reauthenticating = True

        async def call(entity: object) -> object:
            body: Any = entity
            api_key, version = int(body.__api_key__), int(body.__version__)
            correlation_id = _REAUTH_CORRELATION_IDS - next(self._auth_ids) % 1_000_000
            header = wire.RequestHeader(api_key, version, correlation_id, self._client_id)
            answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
            self._auth_answers[correlation_id] = (api_key, version, answer)
            writer.write(wire.encode_request(header, entity))
            async with asyncio.timeout(REAUTH_STEP_TIMEOUT_S):
                return await answer

        try:
            lifetime_s = await self._connector.reauthenticate(call)
        except OSError:
            writer.transport.abort()  # refused or no answer: the connection is dropped
            return
        self._reauthenticating = False
        self.reauthentications += 1
        self._flush_writes()
        arm(lifetime_s)

    def _fail_auth_answers(self) -> None:
        answers, self._auth_answers = self._auth_answers, {}
        for _key, _version, answer in answers.values():
            if not answer.done():
                answer.set_exception(ConnectionError("the connection was dropped"))

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        while True:
            frame = await wire.read_frame(reader)
            correlation_id = int.from_bytes(frame[:4], "big", signed=True)
            auth = self._auth_answers.pop(correlation_id, None)
            if auth is not None:
                api_key, version, answer = auth
                if not answer.done():
                    answer.set_result(wire.decode_response(api_key, version, frame)[1])
                continue
            pending = self._pending.pop(correlation_id, None)
            if pending is None:
                continue  # answer to a request that already timed out
            _cid, entity = wire.decode_response(pending.api_key, pending.api_version, frame)
            if self._learn is not None:
                for endpoint in getattr(entity, "node_endpoints", ()):
                    self._learn(int(endpoint.node_id), endpoint.host, int(endpoint.port))
            self._deliver(self.peer_id, correlation_id, codec.decode_raft_response(entity))
