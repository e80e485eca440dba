"""Several RaftCores wired through an adversarial message pool, with Raft's invariants.

The pool holds every message in flight; a test (or hypothesis) chooses which to deliver,
drop or duplicate, in any order, and when time passes or a node crashes. A crash keeps only
what the node flushed (the in-memory log is cut back to the flushed offset) and its
persisted quorum state, which is exactly what a real restart keeps.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass

from log.batch import decode_batch, iter_batches
from log.records import Record
from raft.core import (
    HighWatermarkAdvanced,
    NotLeaderError,
    RaftConfig,
    RaftCore,
    Role,
    RoleChanged,
    Truncated,
)
from raft.messages import Inbound
from raft.quorum_state import QuorumState
from raft.replicated_log import MemoryLog
from raft.voters import KRAFT_VERSION_DYNAMIC, Endpoint, Voter, VoterSet


class InvariantViolation(AssertionError):
    """A Raft safety property failed."""


class FixedClock:
    def __init__(self, cluster: CoreCluster) -> None:
        self._cluster = cluster

    def now_ms(self) -> int:
        return 1_767_225_600_000 + self._cluster.now_ms


@dataclass(frozen=True, slots=True)
class InFlight:
    dst: int
    message: Inbound


def log_entries(log: MemoryLog) -> dict[int, tuple[int, bytes | None]]:
    """offset -> (epoch, value) for every record of a log."""
    data = log.read(0, 1 << 40)
    entries: dict[int, tuple[int, bytes | None]] = {}
    for position, _header in iter_batches(data):
        header, records = decode_batch(data, position)
        for record in records:
            entries[header.base_offset + (record.offset_delta or 0)] = (
                header.partition_leader_epoch,
                record.value,
            )
    return entries


class CoreCluster:
    def __init__(
        self,
        voters: int = 3,
        observers: int = 0,
        seed: int = 0,
        bugs: frozenset[str] = frozenset(),
        config: RaftConfig | None = None,
        dynamic: bool = False,
        directories: bool = False,
    ) -> None:
        """``dynamic``: a KIP-853 quorum (kraft.version 1) whose first voter set is the
        voters with their directory ids, as `kraft-server format --initial-controllers`
        writes it; observers can then be added as voters. ``directories``: a static quorum
        whose disks have directory ids (as every `kraft-server format` gives them), so
        that kraft.version can be upgraded to 1."""
        self.dynamic = dynamic
        self.directories = dynamic or directories
        self.disks: dict[int, int] = {}
        self.now_ms = 0
        self.seed = seed
        self.bugs = bugs
        self.config = config or RaftConfig()
        self.voter_ids = tuple(range(1, voters + 1))
        self.node_ids = self.voter_ids + tuple(range(100, 100 + observers))
        self.logs = {n: MemoryLog() for n in self.node_ids}
        self.states = {n: QuorumState() for n in self.node_ids}
        self.flushed = {n: 0 for n in self.node_ids}
        self.incarnation = dict.fromkeys(self.node_ids, 0)
        self.cores: dict[int, RaftCore] = {}
        self.pool: list[InFlight] = []
        self.leaders: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes | None]] = {}
        self.acked: dict[int, bytes] = {}
        self.high_watermarks = dict.fromkeys(self.node_ids, 0)
        self.pending_proposals: dict[int, bytes] = {}
        self._proposal_seq = 0
        self.isolated: set[int] = set()
        # The first voter set (the bootstrap snapshot's, or controller.quorum.voters).
        self.base = (
            VoterSet(tuple(self.voter(v) for v in self.voter_ids))
            if dynamic
            else VoterSet.static(self.voter_ids)
        )
        for node in self.node_ids:
            self._boot(node)

    # ---- lifecycle ---------------------------------------------------------------------
    def _boot(self, node: int) -> None:
        self.incarnation[node] += 1
        rng = random.Random(f"{self.seed}/{node}/{self.incarnation[node]}")
        self.cores[node] = RaftCore(
            node,
            self.base,
            self.logs[node],
            self.states[node],
            rng=rng,
            clock=FixedClock(self),
            now_ms=self.now_ms,
            config=self.config,
            bugs=self.bugs,
            kraft_version=KRAFT_VERSION_DYNAMIC if self.dynamic else 0,
            directory_id=self.directory_id(node) if self.directories else None,
        )
        self.high_watermarks[node] = 0
        self._drain(node)

    def directory_id(self, node: int) -> uuid.UUID:
        """The directory id of the disk ``node`` runs on now (a wipe gives a new one)."""
        return uuid.UUID(int=node << 32 | self.disks.get(node, 0) + 1)

    def voter(self, node: int) -> Voter:
        """``node`` on its current disk, as a voter record names it."""
        return Voter(node, self.directory_id(node), (Endpoint("CONTROLLER", f"n{node}", 9093),))

    def wipe(self, node: int) -> None:
        """Replace ``node``'s disk with an empty one (re-formatted: a new directory id)."""
        self.disks[node] = self.disks.get(node, 0) + 1
        self.logs[node] = MemoryLog()
        self.states[node] = QuorumState()
        self.flushed[node] = 0
        self.pool = [m for m in self.pool if m.dst != node and m.message.src != node]
        self._boot(node)

    def crash(self, node: int) -> None:
        """Lose everything not flushed or persisted, then restart."""
        log = self.logs[node]
        if log.end_offset() > self.flushed[node]:
            log.truncate_now(self.flushed[node])
        self.pool = [m for m in self.pool if m.dst != node and m.message.src != node]
        self._boot(node)

    # ---- driving -----------------------------------------------------------------------
    def _drain(self, node: int) -> None:
        core = self.cores[node]
        for _ in range(100):
            ready = core.ready()
            if ready.empty():
                return
            if ready.state is not None:
                self.states[node] = ready.state
            for event in ready.events:
                self._check_event(node, event)
            for out in ready.messages:
                if out.reply_to is not None:
                    # An answer goes back on the requester's connection, which died with
                    # the incarnation that sent the request.
                    incarnation, correlation = out.reply_to
                    if incarnation != self.incarnation[out.dst]:
                        continue
                    message = Inbound(node, out.body, correlation_id=correlation)
                else:
                    token = (self.incarnation[node], out.correlation_id)
                    message = Inbound(node, out.body, reply_to=token)
                self.pool.append(InFlight(out.dst, message))
            if ready.truncate_to is not None:
                self.logs[node].truncate_now(ready.truncate_to)
                core.truncated(ready.truncate_to)
            if ready.flush or "ack-before-fsync" in self.bugs:
                self.flushed[node] = self.logs[node].end_offset()
                core.flushed(self.flushed[node])
        raise AssertionError("core kept producing work")

    def deliver(self, index: int, *, keep: bool = False) -> None:
        """Deliver pool[index] (and keep a copy in the pool when ``keep``: a duplicate)."""
        item = self.pool[index] if keep else self.pool.pop(index)
        if item.dst not in self.cores:
            return
        self.cores[item.dst].step(item.message)
        self._drain(item.dst)

    def drop(self, index: int) -> None:
        self.pool.pop(index)

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        for node in self.node_ids:
            self.cores[node].tick(self.now_ms)
            self._drain(node)

    def propose(self) -> int | None:
        """Propose a fresh value on the leader; the offset it got, or None without one."""
        for node in self.node_ids:
            core = self.cores[node]
            if core.role is Role.LEADER:
                self._proposal_seq += 1
                value = f"v{self._proposal_seq}".encode()
                try:
                    offset = core.propose([Record(None, value, 0)])
                except NotLeaderError:
                    return None
                self.pending_proposals[offset] = value
                self._drain(node)
                return offset
        return None

    def run(self, steps: int, rng: random.Random) -> None:
        """Deliver everything promptly while time passes: a healthy network."""
        for _ in range(steps):
            for _ in range(10_000):
                self.pool = [
                    m
                    for m in self.pool
                    if m.dst not in self.isolated and m.message.src not in self.isolated
                ]
                if not self.pool:
                    break
                self.deliver(rng.randrange(len(self.pool)))
            self.advance(50)

    def leader(self) -> int | None:
        leaders = [n for n in self.node_ids if self.cores[n].role is Role.LEADER]
        return leaders[0] if len(leaders) == 1 else None

    # ---- invariants ----------------------------------------------------------------------
    def _check_majority(
        self, leader: int, high_watermark: int, entries: dict[int, tuple[int, bytes | None]]
    ) -> None:
        """Committed means durable on a majority of the voter set in force (the latest in
        the leader's log, committed or not: KIP-853), whatever voters it has now."""
        below = [o for o in entries if o < high_watermark]
        if not below:
            return
        offset = max(below)
        voters = self.cores[leader].voters
        holders = [
            v
            for v in voters
            if offset < self.flushed[v] and log_entries(self.logs[v]).get(offset) == entries[offset]
        ]
        if len(holders) < len(voters) // 2 + 1:
            raise InvariantViolation(
                f"commit without a majority: leader {leader} committed offset {offset} held "
                f"by {holders} of voters {voters}"
            )

    def _check_event(self, node: int, event: object) -> None:
        if isinstance(event, RoleChanged) and event.role is Role.LEADER:
            previous = self.leaders.setdefault(event.epoch, node)
            if previous != node:
                raise InvariantViolation(
                    f"election safety: {previous} and {node} both lead epoch {event.epoch}"
                )
            # Leader completeness: the new leader holds every committed entry.
            entries = log_entries(self.logs[node])
            for offset, entry in self.committed.items():
                if entries.get(offset) != entry:
                    raise InvariantViolation(
                        f"leader completeness: leader {node} of epoch {event.epoch} has "
                        f"{entries.get(offset)} at committed offset {offset}, not {entry}"
                    )
        elif isinstance(event, HighWatermarkAdvanced):
            if event.high_watermark < self.high_watermarks[node]:
                raise InvariantViolation(f"high watermark of {node} went backwards")
            self.high_watermarks[node] = event.high_watermark
            entries = log_entries(self.logs[node])
            for offset in range(event.high_watermark):
                entry = entries.get(offset)
                if entry is None:
                    continue  # only leader-change batches may hold several offsets
                known = self.committed.setdefault(offset, entry)
                if known != entry:
                    raise InvariantViolation(
                        f"state machine safety: offset {offset} committed as {known} and "
                        f"as {entry} (on {node})"
                    )
                if offset in self.pending_proposals:
                    self.acked[offset] = self.pending_proposals.pop(offset)
            if self.cores[node].role is Role.LEADER:
                self._check_majority(node, event.high_watermark, entries)
        elif isinstance(event, Truncated) and event.to_offset < self.high_watermarks[node]:
            raise InvariantViolation(
                f"committed entry lost: {node} truncated to {event.to_offset} below its "
                f"high watermark {self.high_watermarks[node]}"
            )
