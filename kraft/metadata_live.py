"""Reading ``__cluster_metadata-0`` from a running controller quorum, for
``kraft-server metadata-shell --bootstrap-controller HOST:PORT[,HOST:PORT...]``.

It reads the way an observer replica does, over the controller listener with the quorum's
own RPCs (raft/codec.py): Fetch from offset 0 (replica id -1, as a consumer's fetch, so the
leader neither tracks nor long-polls it); when the leader answers with a snapshot id (the log
start is past the offset asked), FetchSnapshot in chunks, then Fetch on from the snapshot's
end. The first answer's high watermark is the target: only whole batches below it (committed
records) are kept, so the image is a state the quorum committed, however much is written
meanwhile.

Which controller to ask: the bootstrap addresses in turn, then wherever an answer says the
leader is (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH carry the leader's epoch,
NOT_LEADER_OR_FOLLOWER its id, and Fetch v17's NodeEndpoints its address, KIP-853). Every
step is bounded: ``max_bytes`` per Fetch or FetchSnapshot answer (a Fetch answer still
carries one whole batch larger than that, as Kafka's leader sends), one deadline for the whole
read, and a pass over the bootstrap list in which no address accepts a connection ends the
read at once. Any failure is a :class:`LiveReadError` with one line for the operator.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

from log.batch import iter_batches
from log.errors import RecordError
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.connect import Connector
from protocol.sasl import SaslError
from raft import codec
from raft.core import SNAPSHOT_NOT_FOUND
from raft.messages import (
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    RequestFailed,
)
from raft.snapshot import SnapshotId

CLIENT_ID = "kraft-metadata-shell"
NOT_A_REPLICA = -1  # Kafka's consumer replica id: the leader answers at once, tracks nothing
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_FETCH_MAX_BYTES = 1024 * 1024
# Between tries when no controller knows a leader (an election in progress).
RETRY_BACKOFF_S = 0.2

Address = tuple[str, int]


class LiveReadError(Exception):
    """The quorum could not be read (one line for the operator)."""


@dataclass(slots=True)
class LiveLog:
    """What was read: the leader's snapshot (if the log starts past 0), then the committed
    batches after it, byte for byte as the leader stores them."""

    leader_id: int
    leader: Address
    epoch: int
    high_watermark: int
    snapshot: SnapshotId | None = None
    snapshot_data: bytes = b""
    log: bytearray = field(default_factory=bytearray)


def parse_addresses(text: str) -> list[Address]:
    """``HOST:PORT[,HOST:PORT...]``; ValueError naming the item that is not one."""
    addresses = []
    for item in text.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item.strip()!r} is not HOST:PORT")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def read_quorum_log(
    bootstrap: list[Address],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
    connector: Connector | None = None,
) -> LiveLog:
    """The committed metadata log of the quorum some of ``bootstrap`` belong to, read over
    connections ``connector`` opens (TLS, SASL: ``--command-config``; plain TCP without)."""
    if not bootstrap:
        raise LiveReadError("no controller address given")
    reader = _QuorumReader(bootstrap, max_bytes, connector or Connector())
    try:
        return asyncio.run(asyncio.wait_for(reader.run(), timeout_s))
    except TimeoutError:
        raise LiveReadError(
            f"no complete read within {timeout_s:g}s ({reader.summary()})"
        ) from None


class _Redirect(Exception):
    """Ask another controller (or this one again on a new connection)."""


@dataclass(slots=True)
class _Connection:
    address: Address
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    correlation: int = 0


class _QuorumReader:
    def __init__(self, bootstrap: list[Address], max_bytes: int, connector: Connector) -> None:
        self.bootstrap = bootstrap
        self.connector = connector
        self.max_bytes = max_bytes
        self.problems: dict[Address, str] = {}
        self.epoch = 0  # the leader epoch to fetch at; learnt from the first answer
        self.hint: Address | None = None  # where the last answer said the leader is
        self.target: int | None = None  # the high watermark to read up to
        self.answered = False  # some controller gave a quorum answer
        self._reset()

    def _reset(self) -> None:
        self.snapshot: SnapshotId | None = None
        self.snapshot_data = b""
        self.log = bytearray()
        self.fetch_offset = 0
        self.last_epoch = 0

    def summary(self) -> str:
        if not self.problems:
            return "no answer yet"
        return "; ".join(
            f"{host}:{port} {problem}" for (host, port), problem in self.problems.items()
        )

    async def run(self) -> LiveLog:
        """Read, moving between controllers as the answers say. A pass over as many
        addresses as were given in which none accepts a connection, or (before any
        controller ever answered) none gives a quorum answer, ends the read at once: the
        operator gave wrong addresses or the quorum is down. After an answer, a failed
        connection is a leader change under way and is retried until the deadline."""
        turn = 0
        refused_in_a_row = failed_in_a_row = 0
        while True:
            if self.hint is not None:
                address, self.hint = self.hint, None
            else:
                address = self.bootstrap[turn % len(self.bootstrap)]
                turn += 1
            try:
                reader, writer = await self.connector.open(*address, CLIENT_ID)
            except OSError as error:  # a refused SASL login (SaslError) counts as unreachable
                if isinstance(error, SaslError):
                    self.problems[address] = f"refused the login ({error})"
                else:
                    reason = os.strerror(error.errno) if error.errno else str(error)
                    self.problems[address] = f"unreachable ({reason})"
                refused_in_a_row += 1
                failed_in_a_row += 1
                if refused_in_a_row >= len(self.bootstrap) or (
                    failed_in_a_row >= len(self.bootstrap) and not self.answered
                ):
                    raise LiveReadError(f"no controller answered: {self.summary()}") from None
                continue
            refused_in_a_row = 0
            connection = _Connection(address, reader, writer)
            try:
                return await self._read(connection)
            except _Redirect:
                failed_in_a_row = 0
                continue
            except (EOFError, OSError, wire.FrameError, ValueError) as error:
                self.problems[address] = _unusable(error)
                failed_in_a_row += 1
                if failed_in_a_row >= len(self.bootstrap) and not self.answered:
                    raise LiveReadError(f"no controller answered: {self.summary()}") from None
                await asyncio.sleep(RETRY_BACKOFF_S)
            finally:
                writer.close()

    async def _read(self, connection: _Connection) -> LiveLog:
        while True:
            request = FetchRequest(
                replica_id=NOT_A_REPLICA,
                current_leader_epoch=self.epoch,
                fetch_offset=self.fetch_offset,
                last_fetched_epoch=self.last_epoch,
                max_wait_ms=0,
                max_bytes=self.max_bytes,
            )
            response = await self._call(connection, request)
            assert isinstance(response, FetchResponse)
            if response.diverging_epoch >= 0:
                # Only committed batches are kept, and those no leader truncates; a
                # divergence means this is not the quorum it was: start over.
                self.problems[connection.address] = "said the log diverged; read again"
                self._reset()
                continue
            if response.snapshot_end_offset >= 0:
                snapshot = SnapshotId(response.snapshot_end_offset, response.snapshot_epoch)
                await self._read_snapshot(connection, snapshot)
                continue
            if self.target is None:
                if response.high_watermark < 0:  # a new leader that has not committed yet
                    self.problems[connection.address] = "leads but knows no high watermark yet"
                    await asyncio.sleep(RETRY_BACKOFF_S)
                    continue
                self.target = response.high_watermark
            if self.fetch_offset < self.target and not self._take(response.records):
                host, port = connection.address
                raise LiveReadError(
                    f"{host}:{port} sent no whole batch at offset {self.fetch_offset}, below "
                    f"its high watermark {self.target}"
                )
            if self.fetch_offset >= self.target:
                return LiveLog(
                    leader_id=response.leader_id,
                    leader=connection.address,
                    epoch=self.epoch,
                    # A snapshot taken after the first answer may end past the target.
                    high_watermark=max(self.target, self.fetch_offset),
                    snapshot=self.snapshot,
                    snapshot_data=self.snapshot_data,
                    log=self.log,
                )

    def _take(self, records: bytes) -> bool:
        """Keep the whole batches of ``records`` below the target; True if any was new."""
        assert self.target is not None
        took = False
        try:
            for position, header in iter_batches(records):
                if header.last_offset < self.fetch_offset:
                    continue
                if header.base_offset != self.fetch_offset:
                    raise LiveReadError(
                        f"the leader sent offset {header.base_offset} for {self.fetch_offset}"
                    )
                if header.last_offset >= self.target:
                    break
                self.log += records[position : position + header.size]
                self.fetch_offset = header.last_offset + 1
                self.last_epoch = header.partition_leader_epoch
                took = True
        except RecordError as error:
            raise LiveReadError(f"a bad batch at offset {self.fetch_offset}: {error}") from None
        return took

    async def _read_snapshot(self, connection: _Connection, snapshot: SnapshotId) -> None:
        data = bytearray()
        while True:
            request = FetchSnapshotRequest(
                replica_id=NOT_A_REPLICA,
                current_leader_epoch=self.epoch,
                snapshot_end_offset=snapshot.end_offset,
                snapshot_epoch=snapshot.epoch,
                position=len(data),
                max_bytes=self.max_bytes,
            )
            response = await self._call(connection, request)
            assert isinstance(response, FetchSnapshotResponse)
            if response.position != len(data) or (
                not response.unaligned_records and len(data) < response.size
            ):
                raise LiveReadError(
                    f"snapshot {snapshot.file_name}: the leader sent position "
                    f"{response.position} ({len(response.unaligned_records)} bytes) for "
                    f"{len(data)} of {response.size}"
                )
            data += response.unaligned_records
            if len(data) >= response.size:
                break
        self._reset()
        self.snapshot, self.snapshot_data = snapshot, bytes(data)
        self.fetch_offset, self.last_epoch = snapshot.end_offset, snapshot.epoch

    async def _call(
        self, connection: _Connection, request: FetchRequest | FetchSnapshotRequest
    ) -> FetchResponse | FetchSnapshotResponse:
        """One request and its answer; _Redirect when the answer says to ask elsewhere."""
        api_key, version, entity = codec.encode_raft_request(
            request, cluster_id=None, src_id=NOT_A_REPLICA, dst_id=-1
        )
        connection.correlation += 1
        header = wire.RequestHeader(api_key, version, connection.correlation, CLIENT_ID)
        connection.writer.write(wire.encode_request(header, entity))
        # The answer holds about max_bytes of records, but at least one whole batch however
        # large (as Kafka's leader sends): bounded by the protocol's frame limit, not ours.
        frame = await wire.read_frame(connection.reader)
        correlation, answer = wire.decode_response(api_key, version, frame)
        if correlation != connection.correlation:
            raise ValueError(f"answer {correlation} to request {connection.correlation}")
        response = codec.decode_raft_response(answer)
        self.answered = True
        address = connection.address
        if isinstance(response, RequestFailed):
            self.problems[address] = f"refused Fetch (error {response.error_code})"
            await asyncio.sleep(RETRY_BACKOFF_S)
            raise _Redirect
        assert isinstance(response, FetchResponse | FetchSnapshotResponse)
        code = response.error_code
        if code == Errors.NONE:
            if api_key == ApiKey.FETCH:
                self.problems.pop(address, None)
            return response
        leader = _leader_address(answer, response.leader_id)
        stale = code in (Errors.FENCED_LEADER_EPOCH, Errors.UNKNOWN_LEADER_EPOCH)
        if stale and response.leader_epoch != self.epoch:
            self.epoch = response.leader_epoch  # ask again at the quorum's epoch
            self.hint = leader if leader not in (None, address) else address
            raise _Redirect
        if code == SNAPSHOT_NOT_FOUND:
            # The leader replaced the snapshot with a newer one: fetch from 0 again to learn it.
            self._reset()
            self.hint = address
            raise _Redirect
        if code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.FENCED_LEADER_EPOCH):
            self.epoch = max(self.epoch, response.leader_epoch)
            if leader is not None and leader != address:
                self.problems[address] = f"is not the leader (it says {response.leader_id} is)"
                self.hint = leader
                raise _Redirect
            self.problems[address] = "is not the leader and knows none"
        else:
            self.problems[address] = f"answered error {code}"
        await asyncio.sleep(RETRY_BACKOFF_S)
        raise _Redirect


def _unusable(error: Exception) -> str:
    """Why an address gave no quorum answer, for the operator."""
    if isinstance(error, EOFError):  # asyncio.IncompleteReadError: the peer hung up
        return "closed the connection on Fetch (not a controller listener?)"
    if isinstance(error, wire.FrameError | ValueError):
        return f"answered Fetch with something else (not a controller listener?): {error}"
    return f"broke the connection ({error})"


def _leader_address(answer: object, leader_id: int) -> Address | None:
    """Where the answer's NodeEndpoints (Fetch v17, FetchSnapshot v1) say the leader is."""
    for endpoint in getattr(answer, "node_endpoints", ()):
        if int(endpoint.node_id) == leader_id >= 0:
            return str(endpoint.host), int(endpoint.port)
    return None
