"""Outbound Kafka-protocol connections from one quorum member to each peer.

One connection per peer, opened lazily and reopened with jittered exponential backoff; a
request is written as soon as the connection is up and fails (``RequestFailed``) when its
timeout passes or its connection breaks. Responses are matched by correlation id, which is
the core's own request id, so a late answer after a timeout is simply unknown and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable
from dataclasses import dataclass

from protocol import wire
from protocol.connect import Connector
from raft import codec
from raft.messages import Errors, Request, RequestFailed, Response

BACKOFF_MIN_S = 0.05
BACKOFF_MAX_S = 1.0
MAX_PENDING = 1024


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
        if writer is None or writer.is_closing():
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
            opening = (
                self._connector.open(*self.address, self._client_id)
                if self._connector is not None
                else asyncio.open_connection(*self.address)
            )
            try:
                reader, writer = await asyncio.wait_for(opening, timeout=BACKOFF_MAX_S * 2)
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
            try:
                await self._read_responses(reader)
            except (OSError, asyncio.IncompleteReadError, wire.FrameError, ValueError):
                # A broken connection or an answer we cannot use (wrong partition, bad
                # frame): drop the connection; its requests fail and the core retries.
                pass
            finally:
                self._writer = None
                writer.transport.abort()
                self._fail_all(Errors.NETWORK_EXCEPTION)

    async def _read_responses(self, reader: asyncio.StreamReader) -> None:
        while True:
            frame = await wire.read_frame(reader)
            correlation_id = int.from_bytes(frame[:4], "big", signed=True)
            pending = self._pending.pop(correlation_id, None)
            if pending is None:
                continue  # answer to a request that already timed out
            _cid, entity = wire.decode_response(pending.api_key, pending.api_version, frame)
            if self._learn is not None:
                for endpoint in getattr(entity, "node_endpoints", ()):
                    self._learn(int(endpoint.node_id), endpoint.host, int(endpoint.port))
            self._deliver(self.peer_id, correlation_id, codec.decode_raft_response(entity))
