"""The asyncio driver of the Raft core: the only place consensus touches time, disk and network.

It feeds the core (requests from the listener, responses from peers, ticks, proposals, flush
completions) and carries out its Ready in order: persist the quorum state, then send, then
flush. Flushes are group commits: appends made while an fsync is running go out together in
the next one. Proposals are group-appended the same way: those made within one event-loop
turn become one record batch (see ``batch_accumulator``). Committed batches are delivered to
listeners in order, exactly once per process incarnation.

Latency is mostly loop turns, so work that needs no awaiting (sending, asking for a flush,
delivering events) is carried out where the core produced it (a peer's answer, a request, a
flush completion, the appended proposals) rather than by waking the main loop; the main
loop keeps time, and whatever must await (the quorum state, truncation, snapshots).

Requests reach it through ``apis``: its entries in the controller listener's API table,
served by the same connection loop as every listener (protocol/server.py), in production
and in the simulator alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from log.batch import decode_batch, iter_batches, validate_batch
from log.rate_limited_log import RateLimitedLog
from log.records import Record
from log.runtime import Runtime
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import (
    CLUSTER_ACTION,
    CLUSTER_ALTER,
    CLUSTER_DESCRIBE,
    CONTROLLER,
    Api,
    ApiRequest,
)
from protocol.connect import Connector
from raft import codec, quorum_state
from raft.batch_accumulator import BatchAccumulator
from raft.core import (
    CORE_BUGS,
    MAX_PROPOSAL_RECORDS,
    MEMBER_BUGS,
    OBSERVER_BUGS,
    EpochRaiseLimited,
    Event,
    HighWatermarkAdvanced,
    NotLeaderError,
    RaftConfig,
    RaftCore,
    Role,
    RoleChanged,
)
from raft.disk_log import LOG_BUGS
from raft.messages import Errors, Inbound, Outbound, Request, Response
from raft.progress import ReplicaProgress
from raft.replicated_log import DurableLog
from raft.snapshot import SnapshotId, encode_snapshot
from raft.transport import PeerConnection
from raft.voters import (
    CONTROLLER_LISTENER,
    KRAFT_VERSION_DYNAMIC,
    KRAFT_VERSION_STATIC,
    MAX_ENDPOINTS,
    Endpoint,
    Voter,
    VoterSet,
    kraft_version_record,
    voters_record,
)

logger = logging.getLogger("raft.driver")
_limited = RateLimitedLog(logger)

LAZY_FLUSH_S = 1.0  # the data-log habit the ack-before-fsync bug brings to the metadata log
DRIVER_BUGS = {
    "state-not-fsynced": "the quorum state (epoch, vote) is written but not fsynced before "
    "the vote it records is sent",
}
BUGS = {**CORE_BUGS, **DRIVER_BUGS, **LOG_BUGS}  # the raft scenario's planted bugs
NODE_BUGS = {**BUGS, **OBSERVER_BUGS, **MEMBER_BUGS}  # every planted bug a RaftNode takes
MAX_READ_BYTES = 8 * 1024 * 1024
MAX_LEARNED_ENDPOINTS = 64  # leader endpoints heard from peers (bounded: peers may lie)
# Half of max.message.bytes (1 MiB): accumulated proposals stay well inside what the log takes.
MAX_BATCH_BYTES = 512 * 1024


class ProposalLost(Exception):
    """A proposal's offset was committed with another leader's record: it did not happen."""


class LeadershipLost(NotLeaderError):
    """This node stopped leading before the proposal committed: it may or may not commit
    under the next leader (the outcome is unknown, as for Kafka's NOT_CONTROLLER)."""


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """A batch of the replicated log below the high watermark."""

    base_offset: int
    epoch: int
    is_control: bool
    records: tuple[Record, ...]


class RaftListener(Protocol):
    """What the state machine above the quorum hears."""

    def handle_commit(self, batch: CommittedBatch) -> None:
        """A batch became committed; batches come in offset order, each once."""

    def handle_event(self, event: Event) -> None:
        """The core changed role, advanced its high watermark, or truncated its log."""

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        """Replace the state with a snapshot's; commits resume at ``snapshot.end_offset``."""


@dataclass(frozen=True, slots=True)
class RaftNodeConfig:
    """Who we are and who the voters are (controller.quorum.voters)."""

    node_id: int
    voters: dict[int, tuple[str, int]]
    cluster_id: str
    metadata_dir: str
    raft: RaftConfig = field(default_factory=RaftConfig)
    # This node's metadata directory id (meta.properties directory.id), checked against the
    # voter key a Vote or BeginQuorumEpoch v1 names; None when unknown (then only the id is).
    directory_id: uuid.UUID | None = None
    bugs: frozenset[str] = frozenset()
    # A dynamic quorum's first kraft.version and voter set (the bootstrap checkpoint that
    # `kraft-server format` wrote); None/0 for a static quorum (``voters``).
    initial_voters: VoterSet | None = None
    initial_kraft_version: int = KRAFT_VERSION_STATIC
    # controller.quorum.bootstrap.servers: asked who leads by a node that knows no voter
    # (a controller formatted with --no-initial-controllers, waiting to be added).
    bootstrap_servers: tuple[tuple[str, int], ...] = ()
    # The listener name voters' endpoints are looked up by (controller.listener.names[0]).
    controller_listener: str = CONTROLLER_LISTENER
    # How the voters' controller listener is secured (TLS, SASL); None: plaintext.
    connector: Connector | None = None


class RaftNode:
    """One quorum member (or observer) running on asyncio."""

    def __init__(self, runtime: Runtime, config: RaftNodeConfig, log: DurableLog) -> None:
        unknown = config.bugs - NODE_BUGS.keys()
        assert not unknown, f"unknown planted bugs {sorted(unknown)}"
        self.runtime = runtime
        self.config = config
        self.log = log
        self.core: RaftCore | None = None
        self._listeners: list[RaftListener] = []
        self._peers: dict[int, PeerConnection] = {}
        self._closing_peers: set[asyncio.Task[None]] = set()
        self._learned: dict[int, tuple[str, int]] = {}
        self._wake = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._applied = 0
        self._asks: dict[asyncio.Future[Response], None] = {}  # requests the core holds
        self._waiters: dict[int, tuple[int, asyncio.Future]] = {}
        self._accumulator = BatchAccumulator(
            max_batch_records=MAX_PROPOSAL_RECORDS, max_batch_bytes=MAX_BATCH_BYTES
        )
        self._drain_scheduled = False
        # Readies being carried out (the main loop, or resign, may be awaiting inside one):
        # while any is, later work waits for the main loop, so the order of Readies holds.
        self._processing = 0
        self._failure: BaseException | None = None
        self._wake_at_ms = 0  # when the main loop next ticks the core, unless woken
        self._closing = False

    # ---- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        """Load persisted state, make the recovered log durable, and start the loops."""
        fs = self.runtime.fs
        fs.mkdir(self.config.metadata_dir)
        state = quorum_state.load(fs, self.config.metadata_dir)
        flushed = await self.log.flush()
        loop = asyncio.get_running_loop()
        # The voter set the log starts with: the latest snapshot's (a dynamic quorum's, or
        # the bootstrap snapshot `kraft-server format` wrote), else controller.quorum.voters.
        base = VoterSet.static(self.config.voters, self.config.controller_listener)
        kraft_version = KRAFT_VERSION_STATIC
        if self.config.initial_kraft_version >= KRAFT_VERSION_DYNAMIC:
            base = self.config.initial_voters or VoterSet()
            kraft_version = self.config.initial_kraft_version
        latest = self.log.latest_snapshot()
        if latest is not None:
            control = self.log.load_snapshot_control(latest)
            if control.voters is not None:
                base = control.voters
            if control.kraft_version is not None:
                kraft_version = control.kraft_version
        self.core = RaftCore(
            self.config.node_id,
            base,
            self.log,
            state,
            rng=self.runtime.rng,
            clock=self.runtime.clock,
            now_ms=self._now_ms(),
            config=self.config.raft,
            bugs=self.config.bugs & (CORE_BUGS.keys() | OBSERVER_BUGS.keys() | MEMBER_BUGS.keys()),
            kraft_version=kraft_version,
            directory_id=self.config.directory_id,
            bootstrap=tuple(-2 - i for i in range(len(self.config.bootstrap_servers))),
        )
        self.core.flushed(flushed)
        snapshot = self.log.latest_snapshot()
        if snapshot is not None:
            self._load_snapshot(snapshot, self.log.load_snapshot(snapshot))
        for peer_id in sorted(self.config.voters):
            self._peer(peer_id)
        self._tasks = [loop.create_task(self._run()), loop.create_task(self._flusher())]

    async def wait(self) -> None:
        """Run until closed; re-raises whatever killed the node's loops (a bug, or a disk
        that went offline), so the process fails loudly instead of going quiet."""
        await asyncio.gather(*self._tasks)

    async def close(self) -> None:
        """Stop the loops and connections (a leader resigns first: see ``resign``)."""
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for peer in self._peers.values():
            await peer.close()
        # A request the core still holds (a long-polled Fetch) is answered by nobody now:
        # its connection's handler ends (the listener closes the connection) instead of
        # waiting until the loop goes.
        for future in list(self._asks):
            if not future.done():
                future.set_exception(ConnectionAbortedError("node closing"))

    async def resign(self) -> None:
        """Graceful leader shutdown: send EndQuorumEpoch to hand leadership over."""
        assert self.core is not None
        self._drain()
        self.core.resign()
        await self._process_ready()

    def add_listener(self, listener: RaftListener) -> None:
        self._listeners.append(listener)

    # ---- views ---------------------------------------------------------------------------
    @property
    def role(self) -> Role:
        assert self.core is not None
        return self.core.role

    @property
    def epoch(self) -> int:
        assert self.core is not None
        return self.core.epoch

    @property
    def leader_id(self) -> int:
        assert self.core is not None
        return self.core.leader_id

    @property
    def high_watermark(self) -> int:
        assert self.core is not None
        return self.core.high_watermark

    # ---- snapshots ----------------------------------------------------------------------
    async def snapshot(self, end_offset: int, records: Sequence[Record]) -> SnapshotId:
        """Store the state machine's state as of ``end_offset`` (all it has applied) as a
        snapshot; the log before it may then be deleted."""
        latest = self.log.latest_snapshot()
        if end_offset > self._applied or (latest is not None and end_offset <= latest.end_offset):
            raise ValueError(
                f"snapshot end {end_offset} must be above {latest} and at most the applied "
                f"offset {self._applied}"
            )
        snapshot = SnapshotId(end_offset, self.log.epoch_for_offset(end_offset - 1))
        assert self.core is not None
        kraft_version, voters = self.core.history.at(end_offset)
        now_ms = self.runtime.clock.now_ms()
        control = []
        if kraft_version >= KRAFT_VERSION_DYNAMIC:
            # A dynamic quorum's voter set must outlive the log it was in.
            control = [kraft_version_record(kraft_version, now_ms), voters_record(voters, now_ms)]
        data = encode_snapshot(records, now_ms, control)
        await self.log.save_snapshot(snapshot, data)
        return snapshot

    def _load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        for listener in self._listeners:
            listener.handle_load_snapshot(snapshot, records)
        self._applied = snapshot.end_offset

    # ---- proposals ---------------------------------------------------------------------
    def propose(self, records: Sequence[Record]) -> int:
        """Append records as leader; the offset of the last one. NotLeaderError otherwise.

        The records join the batch appended at the end of this event-loop turn; their
        offsets are fixed now. If leadership is lost before then they are dropped, and
        anyone waiting for them gets LeadershipLost, as for records appended and then lost.
        """
        core = self.core
        assert core is not None
        if core.role is not Role.LEADER:
            raise NotLeaderError(core.leader_id, core.epoch)
        if self._failure is not None:
            # The log failed an append (a disk error) and the node is stopping: the records
            # accepted before that are gone, so offsets counted from the log's end would be
            # theirs again. A failed node leads nothing (the controller answers
            # NOT_CONTROLLER instead of tripping over the reused offsets).
            raise NotLeaderError(-1, core.epoch)
        assert 0 < len(records) <= MAX_PROPOSAL_RECORDS
        accumulator = self._accumulator
        if not accumulator.empty() and accumulator.epoch != core.epoch:
            # Leadership was lost and won again since: those records are dropped. (Within
            # one epoch only draining appends on a leader, so the log end is still the base.)
            self._drain()
        offset = accumulator.add(records, core.epoch, self.log.end_offset)
        if offset is None:  # this proposal must be its own batch: append it now, in order
            self._drain()
            offset = core.propose(records)
            self._pump()
            return offset
        if not self._drain_scheduled:
            self._drain_scheduled = True
            asyncio.get_running_loop().call_soon(self._drain_at_turn_end)
        return offset

    def _drain_at_turn_end(self) -> None:
        self._drain_scheduled = False
        if self._closing or self._failure is not None:
            return
        try:
            self._drain()
        except Exception as exc:  # a disk that failed the append: the node stops, loudly
            self._fail(exc)
            return
        self._pump()

    def _drain(self) -> None:
        """Append the accumulated proposals, if this node still leads the epoch and log they
        were accepted for; otherwise drop them and fail their waiters."""
        accumulator = self._accumulator
        if accumulator.empty():
            return
        core = self.core
        assert core is not None
        epoch, base, end = accumulator.epoch, accumulator.base, accumulator.end
        batches = accumulator.take()
        if core.role is not Role.LEADER or core.epoch != epoch or self.log.end_offset() != base:
            lost = LeadershipLost(core.leader_id, core.epoch)
            for offset in [o for o in self._waiters if base <= o < end]:
                proposed_epoch, future = self._waiters[offset]
                if proposed_epoch == epoch:
                    del self._waiters[offset]
                    if not future.done():
                        future.set_exception(lost)
            return
        for batch in batches:
            core.propose(batch)

    async def propose_and_wait(self, records: Sequence[Record]) -> int:
        """Propose and wait until committed; ProposalLost if another leader's record won."""
        offset = self.propose(records)
        assert self.core is not None
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters[offset] = (self.core.epoch, future)
        try:
            return await future
        finally:
            self._waiters.pop(offset, None)

    # ---- the loop ----------------------------------------------------------------------
    def _now_ms(self) -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    async def _run(self) -> None:
        core = self.core
        assert core is not None
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        while True:
            if task.cancelling():
                # Python 3.11's wait_for (below) can swallow a cancellation that races with
                # a wake-up; without this the loop would outlive close() and hang shutdown.
                raise asyncio.CancelledError
            if self._failure is not None:
                raise self._failure
            core.tick(self._now_ms())
            now = loop.time()
            for peer in list(self._peers.values()):  # an expiry may connect a new peer
                peer.expire(now)
            await self._process_ready()
            self._wake_at_ms = core.next_deadline_ms()
            delay_s = (self._wake_at_ms - self._now_ms()) / 1000
            self._wake.clear()
            if self._has_work():
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=max(delay_s, 0.001))

    def _has_work(self) -> bool:
        assert self.core is not None
        return self.core.has_ready()

    def _fail(self, exc: BaseException) -> None:
        """Work carried out outside the main loop failed: the main loop re-raises it, so
        ``wait`` reports it as it would any failure of the loop itself."""
        if self._failure is None:
            self._failure = exc
        self._wake.set()

    def _pump(self) -> None:
        """Carry out the core's new work at once if none of it needs awaiting and no other
        Ready is being carried out; otherwise leave it to the main loop."""
        core = self.core
        assert core is not None
        if self._closing:
            return  # the loops are gone: nothing is carried out any more
        if self._processing > 0 or core.has_ready_io():
            self._wake.set()
            return
        if core.has_ready():
            self._processing += 1
            try:
                ready = core.ready()
                for message in ready.messages:
                    self._send(message)
                if ready.flush:
                    self._flush_wanted.set()
                for event in ready.events:
                    self._on_event(event)
            except Exception as exc:
                self._fail(exc)
                return
            finally:
                self._processing -= 1
        if core.next_deadline_ms() < self._wake_at_ms:
            self._wake.set()  # the core wants a tick sooner than the main loop planned

    async def _process_ready(self) -> None:
        core = self.core
        assert core is not None
        self._processing += 1
        try:
            ready = core.ready()
            if ready.state is not None:
                sync = "state-not-fsynced" not in self.config.bugs
                await quorum_state.store(
                    self.runtime.fs, self.config.metadata_dir, ready.state, sync=sync
                )
            for message in ready.messages:
                self._send(message)
            if ready.truncate_to is not None:
                await self.log.truncate_to(ready.truncate_to)
                core.truncated(ready.truncate_to)
            for snapshot, position, data in ready.snapshot_chunks:
                self.log.write_snapshot_chunk(snapshot, position, data)
            if ready.install_snapshot is not None:
                records = await self.log.install_snapshot(ready.install_snapshot)
                control = self.log.load_snapshot_control(ready.install_snapshot)
                core.snapshot_installed(ready.install_snapshot, control)
                self._load_snapshot(ready.install_snapshot, records)
            if ready.flush:
                self._flush_wanted.set()
            for event in ready.events:
                self._on_event(event)
        finally:
            self._processing -= 1

    def _send(self, message: Outbound) -> None:
        reply = message.reply_to
        if reply is not None:
            if not reply.done():
                reply.set_result(message.body)
            return
        peer = self._peer(message.dst)
        if peer is None:
            return
        peer.send(
            message.correlation_id,
            message.body,  # type: ignore[arg-type]
            cluster_id=self.config.cluster_id,
            src_id=self.config.node_id,
            timeout_s=self.config.raft.request_timeout_ms / 1000,
        )

    def _address(self, peer_id: int) -> tuple[str, int] | None:
        """Where a peer listens: a bootstrap server (negative ids), the voter set in force
        (its endpoint on the controller listener), else controller.quorum.voters."""
        if peer_id < -1:
            servers = self.config.bootstrap_servers
            index = -2 - peer_id
            return servers[index] if index < len(servers) else None
        if self.core is not None:
            voter = self.core.voter_set().get(peer_id)
            if voter is not None:
                address = voter.address(self.config.controller_listener)
                if address is not None:
                    return address
        return self.config.voters.get(peer_id) or self._learned.get(peer_id)

    def _learn_endpoint(self, node_id: int, host: str, port: int) -> None:
        """A peer told us where a leader listens (NodeEndpoints): kept for one entry per
        id, for a leader this replica cannot find in its voter set yet."""
        if node_id < 0 or node_id == self.config.node_id or not 0 < port < 65536:
            return
        if len(self._learned) < MAX_LEARNED_ENDPOINTS or node_id in self._learned:
            self._learned[node_id] = (host, port)

    def _peer(self, peer_id: int) -> PeerConnection | None:
        """The connection to ``peer_id``, made on first use, and made again when the voter
        set moved the peer to another address (UpdateRaftVoter)."""
        if peer_id == self.config.node_id:
            return None
        address = self._address(peer_id)
        peer = self._peers.get(peer_id)
        if peer is not None and (address is None or peer.address == address):
            return peer
        if address is None:
            return None
        if peer is not None:
            stale = asyncio.get_running_loop().create_task(peer.close())
            self._closing_peers.add(stale)
            stale.add_done_callback(self._closing_peers.discard)
        peer = PeerConnection(
            peer_id,
            address,
            deliver=self._deliver_response,
            rng=self.runtime.rng,
            client_id=f"raft-client-{self.config.node_id}",
            learn=self._learn_endpoint,
            connector=self.config.connector,
        )
        peer.start()
        self._peers[peer_id] = peer
        return peer

    def _deliver_response(self, peer_id: int, correlation_id: int, body: Response) -> None:
        core = self.core
        assert core is not None
        core.tick(self._now_ms())
        core.step(Inbound(peer_id, body, correlation_id=correlation_id))
        self._pump()

    async def _flusher(self) -> None:
        core = self.core
        assert core is not None
        while True:
            await self._flush_wanted.wait()
            if "ack-before-fsync" in self.config.bugs:
                await asyncio.sleep(LAZY_FLUSH_S)
            self._flush_wanted.clear()
            flushed = await self.log.flush()
            core.flushed(flushed)
            self._pump()

    def _on_event(self, event: Event) -> None:
        for listener in self._listeners:
            listener.handle_event(event)
        if isinstance(event, HighWatermarkAdvanced):
            self._deliver_committed(event.high_watermark)
        elif isinstance(event, EpochRaiseLimited):
            _limited.log(
                "epoch-raise",
                logging.WARNING,
                "[RaftManager nodeId=%d] Node %d asked for epoch %d from epoch %d, further or "
                'faster than peers may raise it (docs/raft.md, "Epoch cliff"): moving there '
                "in steps",
                self.config.node_id,
                event.src,
                event.wanted,
                event.epoch,
            )
        elif isinstance(event, RoleChanged) and event.role is not Role.LEADER:
            for offset, (_epoch, future) in list(self._waiters.items()):
                if not future.done():
                    future.set_exception(LeadershipLost(event.leader_id, event.epoch))
                del self._waiters[offset]

    def _deliver_committed(self, high_watermark: int) -> None:
        while self._applied < high_watermark:
            data = self.log.read(self._applied, MAX_READ_BYTES)
            if not data:
                return
            for position, header in iter_batches(data):
                if header.base_offset >= high_watermark:
                    return  # not committed yet: judged by the header, before any decoding
                if self._listeners:
                    header, records = decode_batch(data, position)
                    batch = CommittedBatch(
                        header.base_offset,
                        header.partition_leader_epoch,
                        header.is_control,
                        tuple(records),
                    )
                    for listener in self._listeners:
                        listener.handle_commit(batch)
                else:  # nobody to hand records to: the CRC check is all that is owed
                    validate_batch(data, position)
                self._settle_waiters(
                    header.base_offset, header.next_offset, header.partition_leader_epoch
                )
                self._applied = header.next_offset

    def _settle_waiters(self, base: int, end: int, epoch: int) -> None:
        if not self._waiters:
            return
        for offset in range(base, end):
            entry = self._waiters.pop(offset, None)
            if entry is None:
                continue
            proposed_epoch, future = entry
            if future.done():
                continue
            if proposed_epoch == epoch:
                future.set_result(offset)
            else:
                future.set_exception(ProposalLost(f"offset {offset} holds epoch {epoch}"))

    # ---- the server side ---------------------------------------------------------------
    def apis(self) -> list[Api]:
        """The quorum's entries in the controller listener's table: the Raft RPCs, answered
        by the core, and DescribeQuorum, answered from its progress."""
        quorum, versions = self._quorum_api, codec.API_VERSIONS
        return [
            Api(ApiKey.FETCH, versions[ApiKey.FETCH], quorum, CONTROLLER, (CLUSTER_ACTION,)),
            Api(ApiKey.VOTE, versions[ApiKey.VOTE], quorum, CONTROLLER, (CLUSTER_ACTION,)),
            Api(
                ApiKey.BEGIN_QUORUM_EPOCH,
                versions[ApiKey.BEGIN_QUORUM_EPOCH],
                quorum,
                CONTROLLER,
                (CLUSTER_ACTION,),
            ),
            Api(
                ApiKey.END_QUORUM_EPOCH,
                versions[ApiKey.END_QUORUM_EPOCH],
                quorum,
                CONTROLLER,
                (CLUSTER_ACTION,),
            ),
            Api(
                ApiKey.FETCH_SNAPSHOT,
                versions[ApiKey.FETCH_SNAPSHOT],
                quorum,
                CONTROLLER,
                (CLUSTER_ACTION,),
            ),
            Api(ApiKey.ADD_RAFT_VOTER, (0, 1), self._voters_api, CONTROLLER, (CLUSTER_ALTER,)),
            Api(ApiKey.REMOVE_RAFT_VOTER, (0, 0), self._voters_api, CONTROLLER, (CLUSTER_ALTER,)),
            Api(ApiKey.UPDATE_RAFT_VOTER, (0, 0), self._voters_api, CONTROLLER, (CLUSTER_ACTION,)),
            Api(
                ApiKey.DESCRIBE_QUORUM,
                versions[ApiKey.DESCRIBE_QUORUM],
                self._describe_quorum_api,
                CONTROLLER,
                (CLUSTER_DESCRIBE,),
            ),
        ]

    async def _quorum_api(self, request: ApiRequest) -> object | None:
        try:
            return await self._answer(request.header, request.body)
        except ConnectionAbortedError:
            return None  # the node is closing (see ``close``): its connections go with it

    async def _voters_api(self, request: ApiRequest) -> object:
        """AddRaftVoter, RemoveRaftVoter, UpdateRaftVoter (KIP-853): the leader appends the
        new voter set and answers once it is committed (or at once for AddRaftVoter v1 with
        ack_when_committed false)."""
        key, version, body = request.header.api_key, request.api_version, request.body
        code = self._voter_change_error(body)
        if code is None:
            code = await self._change_voters(key, body)
        return codec.error_response(key, version, code)

    def _voter_change_error(self, body: Any) -> int | None:
        if body.cluster_id is not None and body.cluster_id != self.config.cluster_id:
            return Errors.INCONSISTENT_CLUSTER_ID
        directory = body.voter_directory_id
        if body.voter_id < 0 or directory is None or directory.int == 0:
            return Errors.INVALID_REQUEST  # a dynamic voter is always (id, directory id)
        if len(getattr(body, "listeners", ())) > MAX_ENDPOINTS:
            return Errors.INVALID_REQUEST
        return None

    async def _change_voters(self, key: int, body: Any) -> int:
        core = self.core
        assert core is not None
        endpoints = tuple(
            Endpoint(item.name, item.host, int(item.port))
            for item in getattr(body, "listeners", ())
        )
        voter = Voter(int(body.voter_id), body.voter_directory_id, endpoints)
        if key == ApiKey.UPDATE_RAFT_VOTER:
            feature = body.k_raft_version_feature
            voter = Voter(
                voter.voter_id,
                voter.directory_id,
                endpoints,
                int(feature.min_supported_version),
                int(feature.max_supported_version),
            )
            if not voter.endpoints or voter.min_kraft_version > voter.max_kraft_version:
                return Errors.INVALID_REQUEST
        elif key == ApiKey.ADD_RAFT_VOTER and not endpoints:
            return Errors.INVALID_REQUEST  # nobody could reach the new voter
        change = {
            ApiKey.ADD_RAFT_VOTER: "add",
            ApiKey.REMOVE_RAFT_VOTER: "remove",
            ApiKey.UPDATE_RAFT_VOTER: "update",
        }[ApiKey(key)]
        timeout = getattr(body, "timeout", None)
        timeout_s = timeout.total_seconds() if timeout else _default_timeout(self)
        wait = key != ApiKey.ADD_RAFT_VOTER or getattr(body, "ack_when_committed", True)
        return await self.change_voters(change, voter, timeout_s, wait=wait)

    async def change_voters(
        self, change: str, voter: Voter, timeout_s: float, *, wait: bool = True
    ) -> int:
        """Append a voter change as leader (``RaftCore.change_voters``) and, with ``wait``,
        wait until it is committed; a Kafka error code (REQUEST_TIMED_OUT after
        ``timeout_s``, NOT_LEADER_OR_FOLLOWER if leadership is lost first)."""
        core = self.core
        assert core is not None
        self._drain()  # proposals of this turn keep their offsets ahead of the change
        code, offset = core.change_voters(change, voter)
        if code != Errors.NONE:
            return code
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiters[offset] = (core.epoch, future)
        self._pump()
        if not wait:
            self._waiters.pop(offset, None)
            return Errors.NONE
        try:
            await asyncio.wait_for(future, max(timeout_s, 0.001))
        except TimeoutError:
            return Errors.REQUEST_TIMED_OUT
        except (NotLeaderError, ProposalLost):
            return Errors.NOT_LEADER_OR_FOLLOWER
        finally:
            self._waiters.pop(offset, None)
        return Errors.NONE

    def next_offset(self) -> int:
        """The offset the next proposal's first record gets: past the log and the proposals
        of this turn. The raft layer appends control records of its own (voter changes, a
        kraft.version upgrade), so the state machine above cannot count offsets alone."""
        if not self._accumulator.empty():
            return self._accumulator.end
        return self.log.end_offset()

    def kraft_version(self) -> int:
        """kraft.version in force: the latest in the log, committed or not (before start:
        the level the node was formatted with)."""
        if self.core is None:
            return self.config.initial_kraft_version
        return self.core.history.kraft_version()

    def upgrade_kraft_version(
        self, version: int, *, validate_only: bool = False
    ) -> tuple[int, str | None, int]:
        """UpdateFeatures ``kraft.version`` on the leader (``RaftCore.upgrade_kraft_version``):
        (error code, message, offset of the appended batch's last record or -1). The caller
        answers once that offset is committed."""
        core = self.core
        assert core is not None
        self._drain()  # proposals of this turn keep their offsets ahead of the upgrade
        code, message, offset = core.upgrade_kraft_version(version, validate_only=validate_only)
        self._pump()
        return code, message, offset

    async def _describe_quorum_api(self, request: ApiRequest) -> object:
        return self._describe_quorum(request.api_version)

    async def _answer(self, header: wire.RequestHeader, entity: object) -> object:
        """A quorum request's answer, once the core gives it (a Fetch may be long-polled)."""
        api_key, version = header.api_key, header.api_version
        try:
            src, body, cluster_id = codec.decode_raft_request(entity)
        except ValueError:
            return codec.error_response(api_key, version, Errors.INVALID_REQUEST)
        if cluster_id is not None and cluster_id != self.config.cluster_id:
            return codec.error_response(api_key, version, Errors.INCONSISTENT_CLUSTER_ID)
        if not self._is_own_voter_key(codec.request_voter_key(entity)):
            # Meant for another replica (a stale address, a replaced disk): KIP-853's answer.
            assert self.core is not None
            refusal = self.core.refusal(body, Errors.INVALID_VOTER_KEY)
            return codec.encode_raft_response(refusal, api_key=api_key, api_version=version)
        answer = await self.ask(src, body)
        response = codec.encode_raft_response(answer, api_key=api_key, api_version=version)
        leader = getattr(answer, "leader_id", -1)
        address = self._address(leader) if leader >= 0 else None
        if address is not None:
            # KIP-853: say where the leader listens, for replicas that do not know it yet.
            response = codec.with_node_endpoint(response, leader, address)
        return response

    def _is_own_voter_key(self, key: tuple[int, uuid.UUID] | None) -> bool:
        if key is None:
            return True
        voter_id, directory_id = key
        if voter_id != self.config.node_id:
            return False
        own = self.config.directory_id
        return directory_id == codec.ZERO_DIRECTORY_ID or own is None or directory_id == own

    async def ask(self, src: int, body: Request) -> Response:
        """Hand a request to the core and wait for its answer (which may be long-polled)."""
        core = self.core
        assert core is not None
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._asks[future] = None
        try:
            core.tick(self._now_ms())
            core.step(Inbound(src, body, reply_to=future))
            self._pump()
            return await future
        finally:
            self._asks.pop(future, None)

    def voter_addresses(self) -> dict[int, tuple[str, int]]:
        """Each voter in force and where its controller listener is (DescribeCluster for
        clients bootstrapped from controllers, KIP-919)."""
        assert self.core is not None
        addresses = {}
        for voter_id in self.core.voters:
            address = self._address(voter_id)
            if address is not None:
                addresses[voter_id] = address
        return addresses

    def _describe_quorum(self, version: int) -> object:
        core = self.core
        assert core is not None
        if core.role is not Role.LEADER:
            return codec.error_response(
                ApiKey.DESCRIBE_QUORUM, version, Errors.NOT_LEADER_OR_FOLLOWER
            )
        now_ms, wall_ms = self._now_ms(), self.runtime.clock.now_ms()

        def on_wall_clock(progress: ReplicaProgress) -> ReplicaProgress:
            # The core keeps loop-clock times; DescribeQuorum speaks epoch milliseconds.
            if progress.replica_id == core.node_id:
                return ReplicaProgress(
                    progress.replica_id,
                    self.log.end_offset(),
                    wall_ms,
                    wall_ms,
                    directory_id=self.config.directory_id,
                )
            return ReplicaProgress(
                progress.replica_id,
                progress.end_offset,
                -1 if progress.last_fetch_ms < 0 else wall_ms - (now_ms - progress.last_fetch_ms),
                -1
                if progress.last_caught_up_ms < 0
                else wall_ms - (now_ms - progress.last_caught_up_ms),
                directory_id=progress.directory_id,
            )

        voter_set = core.history.latest()
        voters, observers = split_replicas(
            [on_wall_clock(p) for _, p in sorted(core.describe().items())], voter_set
        )
        nodes = [
            (v.voter_id, [(e.name, e.host, e.port) for e in v.endpoints]) for v in voter_set.voters
        ]
        return codec.describe_quorum_response(
            leader_id=core.leader_id,
            leader_epoch=core.epoch,
            high_watermark=core.high_watermark,
            voters=voters,
            observers=observers,
            now_ms=self.runtime.clock.now_ms(),
            api_version=version,
            nodes=nodes,
        )


def split_replicas(
    progress: list[ReplicaProgress], voter_set: VoterSet
) -> tuple[list[ReplicaProgress], list[ReplicaProgress]]:
    """(voters, observers) of a leader's replica progress, as DescribeQuorum lists them:
    a voter under its directory id from the voter set; a replica of a voter's id on another
    directory (a re-formatted disk) is an observer, and the voter itself then has not been
    heard from, as Kafka's LeaderState keys replicas (KIP-853)."""
    voters, observers = [], []
    for state in progress:
        voter = voter_set.get(state.replica_id)
        if voter is None:
            observers.append(state)
        elif voter.directory_id is None or state.directory_id == voter.directory_id:
            voters.append(replace(state, directory_id=voter.directory_id))
        else:
            observers.append(state)
            voters.append(ReplicaProgress(state.replica_id, directory_id=voter.directory_id))
    return voters, observers


def _default_timeout(node: RaftNode) -> float:
    return node.config.raft.request_timeout_ms / 1000 * 5


__all__ = [
    "BUGS",
    "MEMBER_BUGS",
    "NODE_BUGS",
    "CommittedBatch",
    "NotLeaderError",
    "ProposalLost",
    "RaftListener",
    "RaftNode",
    "RaftNodeConfig",
]
