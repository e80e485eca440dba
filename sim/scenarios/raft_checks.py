"""The raft scenario's invariants, checked online over every node incarnation of a run.

``Checker`` holds what the cluster as a whole has done (committed records, leaders per epoch,
acknowledged proposals); each node incarnation reports to it through a ``NodeListener``, the
RaftListener the node's driver calls. Both take only narrow views of a process and of a log
(``ProcessView``, ``LogView``), so tests feed them crafted histories without running a
cluster (tests/sim/test_raft_invariants.py fires each invariant and shows a clean run quiet).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from log.batch import decode_batch, iter_batches
from log.records import Record
from raft.core import HighWatermarkAdvanced, Role, RoleChanged, Truncated
from raft.disk_log import DiskLog
from raft.driver import CommittedBatch
from raft.snapshot import SnapshotId
from sim.analysis.quorum_rules import (
    CutOffWatch,
    resign_violation,
    snapshot_load_violation,
    truncation_violation,
)
from sim.scenarios.dual_leader import DualLeaderWatch
from sim.trace import Trace

Entry = tuple[int, bytes | None]  # (epoch, value) of the record at one offset
Replica = tuple[str, uuid.UUID | None]  # (node name, directory id): one replica (KIP-853)


class ProcessView(Protocol):
    """What the checker reads of a simulated process."""

    name: str
    alive: bool
    paused: bool
    incarnation: int


class NodeView(Protocol):
    """What the checker reads of a running node."""

    @property
    def high_watermark(self) -> int: ...


class LogView(Protocol):
    """What the checker reads of a node's log."""

    def start_offset(self) -> int: ...
    def end_offset(self) -> int: ...
    def epoch_for_offset(self, offset: int) -> int: ...
    def entries(self) -> dict[int, Entry]: ...
    def cut_entry_epoch(self, offset: int) -> int | None: ...


def read_entries(log: DiskLog) -> dict[int, Entry]:
    """offset -> (epoch, value) of every record a node holds: its snapshot, then its log."""
    entries: dict[int, Entry] = {}
    snapshot = log.latest_snapshot()
    if snapshot is not None:
        for record in log.load_snapshot(snapshot):
            offset_text, _, epoch_text = (record.key or b"").decode().partition(":")
            entries[int(offset_text)] = (int(epoch_text), record.value)
    offset = log.start_offset()
    for _ in range(100_000):
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for position, _header in iter_batches(data):
            header, records = decode_batch(data, position)
            for record in records:
                entries[header.base_offset + (record.offset_delta or 0)] = (
                    header.partition_leader_epoch,
                    record.value,
                )
            offset = header.next_offset
    return entries


def own_epoch_violation(
    leader: str, epoch: int, log: LogView | DiskLog, high_watermark: int
) -> str | None:
    """KIP-595's rule (Raft's figure 8): a leader advances its high watermark only over an
    entry of its own epoch; entries of earlier epochs commit only together with one."""
    entry_epoch = log.epoch_for_offset(high_watermark - 1)
    if entry_epoch == epoch:
        return None
    return (
        f"commit-own-epoch: {leader} (leader of epoch {epoch}) advanced its high "
        f"watermark to {high_watermark} over an entry of epoch {entry_epoch}"
    )


class WatchedDiskLog(DiskLog):
    """A node's DiskLog that remembers the epoch of the first record each truncation cut,
    so the checker can tell a committed record dropped from a stale suffix removed."""

    _cut: tuple[int, int] | None = None

    async def truncate_to(self, offset: int) -> None:
        if offset < self.end_offset():
            self._cut = (offset, self.epoch_for_offset(offset))
        await super().truncate_to(offset)

    def cut_entry_epoch(self, offset: int) -> int | None:
        """The epoch the record at ``offset`` had before the latest truncation to it."""
        return self._cut[1] if self._cut is not None and self._cut[0] == offset else None

    def entries(self) -> dict[int, Entry]:
        return read_entries(self)


# A leader resigns in the step that commits its removal; the watch looks every 0.1 s.
REMOVED_LEADER_BOUND_S = 1.0


@dataclass(slots=True)
class Checker:
    """Raft's invariants over every node incarnation of one run."""

    trace: Trace
    voters: int = 3
    violation: str | None = None
    leaders: dict[int, str] = field(default_factory=dict)
    committed: dict[int, Entry] = field(default_factory=dict)
    acked: dict[int, bytes] = field(default_factory=dict)
    leading: dict[str, int] = field(default_factory=dict)
    dual: DualLeaderWatch = field(default_factory=DualLeaderWatch)
    cut_off: CutOffWatch = field(default_factory=CutOffWatch)
    max_commit: int = 0
    # The largest epoch each node has acted in (every role change carries a persisted epoch).
    epochs: dict[str, int] = field(default_factory=dict)
    # Each voter's log as of its latest incarnation, and whether that incarnation runs.
    voter_logs: dict[str, LogView] = field(default_factory=dict)
    voter_alive: dict[str, ProcessView] = field(default_factory=dict)
    # A dynamic quorum (KIP-853): the voter set in force at a leader, as (node name,
    # directory id) replicas; the checks judge commits and resignations against it. None:
    # the static voter set.
    voters_of: Callable[[str], tuple[Replica, ...]] | None = None
    # Each node's directory id (its current disk's), and the last log of each replica whose
    # disk was wiped, by (name, directory id): a voter is a replica, not a name, so a voter
    # entry naming the old directory is judged by what that replica held when its disk
    # went, never by its successor's log (nor the successor's by it).
    directories: dict[str, uuid.UUID | None] = field(default_factory=dict)
    retired_logs: dict[Replica, LogView] = field(default_factory=dict)
    # Leaders whose own removal is committed, since when (virtual seconds).
    removed_since: dict[str, float] = field(default_factory=dict)

    def voter_count(self, node: str) -> int:
        """How many voters make ``node``'s majority: the static count, or the size of the
        voter set in force at it (0 when it is not in it: a removed leader resigns)."""
        if self.voters_of is None:
            return self.voters
        voters = self.voters_of(node)
        return len(voters) if node in (name for name, _ in voters) else 0

    def retire(self, name: str) -> None:
        """``name``'s disk is wiped: its replica (current directory) keeps its last log."""
        if name in self.voter_logs:
            self.retired_logs[(name, self.directories.get(name))] = self.voter_logs[name]

    def max_epoch(self, node: str) -> int:
        return self.epochs.get(node, 0)

    def fail(self, message: str) -> None:
        if self.violation is None:
            self.violation = message
            self.trace.event("violation", detail=message)

    def check_own_epoch(self, leader: str, log: LogView, high_watermark: int) -> None:
        """A leader's new high watermark must sit just above an entry of its own epoch."""
        found = own_epoch_violation(leader, self.leading[leader], log, high_watermark)
        if found is not None:
            self.fail(found)

    def check_majority(self, leader: str, high_watermark: int) -> None:
        """The entry just below a leader's new high watermark must sit on a majority (a voter
        that is down cannot be read and counts in the leader's favour)."""
        offset = high_watermark - 1
        if offset < 0 or leader not in self.voter_logs:
            return
        epoch = self.voter_logs[leader].epoch_for_offset(offset)
        holding = unknown = 0
        # Each voter: its label, its log, and whether that log can be read now.
        logs: dict[str, tuple[LogView, bool]] = {
            name: (log, self.voter_alive[name].alive) for name, log in self.voter_logs.items()
        }
        if self.voters_of is not None:
            logs = {}
            for name, directory in self.voters_of(leader):
                if directory is None or directory == self.directories.get(name):
                    if name in self.voter_logs:
                        logs[name] = (self.voter_logs[name], self.voter_alive[name].alive)
                elif (name, directory) in self.retired_logs:
                    # Its disk is gone: what it acknowledged before is its last log.
                    logs[f"{name} (wiped)"] = (self.retired_logs[(name, directory)], True)
        for log, readable in logs.values():
            if not readable:
                unknown += 1
            elif log.end_offset() > offset and (
                log.start_offset() > offset or log.epoch_for_offset(offset) == epoch
            ):
                holding += 1
        if holding + unknown <= len(logs) // 2:
            self.fail(
                f"committed-majority: {leader} advanced its high watermark to {high_watermark} "
                f"but offset {offset} (epoch {epoch}) is on only {holding} of "
                f"{len(logs)} voters ({', '.join(sorted(logs))})"
            )

    def check_truncation(self, node: str, log: LogView, to_offset: int, hw: int) -> None:
        """A truncation may cut only records the cluster has not committed: by log matching,
        if the first record cut has the epoch committed at its offset it *is* that record."""
        if to_offset < hw:
            self.fail(
                f"committed-lost: {node} truncated to {to_offset} below its high watermark {hw}"
            )
            return
        committed = self.committed.get(to_offset)
        found = truncation_violation(
            node,
            to_offset,
            log.cut_entry_epoch(to_offset),
            committed[0] if committed is not None else None,
        )
        if found is not None:
            self.fail(found)

    def check_dual_leadership(self, now_s: float, processes: Mapping[str, ProcessView]) -> None:
        """Called periodically: how long has a stale leader kept running beside a newer one?"""
        running = {
            name: epoch
            for name, epoch in self.leading.items()
            if processes[name].alive and not processes[name].paused
        }
        found = self.dual.observe(now_s, running)
        if found is not None:
            self.fail(found)

    def check_cut_off(self, now_s: float, cut_off: set[str]) -> None:
        """Called periodically with the running leaders cut off from a majority of voters
        (the simulator knows the network): each must resign within CUT_OFF_BOUND_S. The
        start and end of each spell are traced, so kraft-analyze judges the same spells."""
        leaders = {name: self.leading[name] for name in cut_off if name in self.leading}
        for name in sorted(leaders.keys() - self.cut_off.since.keys()):
            self.trace.event("quorum-cut-off", node=name, epoch=leaders[name])
        for name in sorted(self.cut_off.since.keys() - leaders.keys()):
            epoch = self.cut_off.since[name][1]
            self.trace.event("quorum-cut-off-end", node=name, epoch=epoch)
        found = self.cut_off.observe(now_s, leaders)
        if found is not None:
            self.fail(found)

    def check_removed_leaders(self, now_s: float, removed: set[str]) -> None:
        """Called periodically with the running leaders whose removal from the voter set
        is committed (KIP-853): each must resign within REMOVED_LEADER_BOUND_S."""
        for name in list(self.removed_since):
            if name not in removed:
                del self.removed_since[name]
        for name in sorted(removed):
            since = self.removed_since.setdefault(name, now_s)
            if now_s - since > REMOVED_LEADER_BOUND_S:
                self.fail(
                    f"removed-leader: {name} still leads {now_s - since:.1f}s after its "
                    "removal from the voter set committed"
                )

    def check_acked(self) -> None:
        """At the end: every acknowledged proposal is committed at the offset it was given."""
        for offset, value in sorted(self.acked.items()):
            if self.committed.get(offset, (None, None))[1] != value:
                self.fail(
                    f"acked-lost: acknowledged {value!r} at offset {offset} is not committed there"
                )
                return

    def listener(self, process: ProcessView, log: LogView, node: NodeView) -> NodeListener:
        return NodeListener(self, process, process.incarnation, log, node)


@dataclass(slots=True)
class NodeListener:
    """One incarnation of one node, reporting to the checker."""

    checker: Checker
    process: ProcessView
    incarnation: int
    log: LogView
    node: NodeView
    high_watermark: int = 0
    led_epoch: int | None = None  # the epoch this incarnation led, while it leads
    applied: int = 0
    # The replicated state: every committed record (offset, epoch, value), in order.
    state: list[tuple[int, int, bytes | None]] = field(default_factory=list)
    snapshots_loaded: int = 0

    def live(self) -> bool:
        """False for a crashed incarnation whose tasks are still unwinding."""
        return self.process.alive and self.process.incarnation == self.incarnation

    def handle_event(self, event: object) -> None:
        checker, name = self.checker, self.process.name
        if not self.live():
            return
        if isinstance(event, RoleChanged):
            if event.epoch < checker.max_epoch(name):
                checker.fail(
                    f"epoch-durable: {name} is back at epoch {event.epoch} after acting in "
                    f"epoch {checker.max_epoch(name)} (its quorum-state was lost)"
                )
            checker.epochs[name] = max(event.epoch, checker.max_epoch(name))
            if event.role is Role.LEADER:
                checker.leading[name] = event.epoch
            else:
                checker.leading.pop(name, None)
            # A leader's log end lets kraft-analyze check leader completeness on its own;
            # the voter count, whether a resignation was allowed at all.
            extra: dict[str, int] = {}
            if event.role is Role.LEADER:
                extra["end_offset"] = self.log.end_offset()
            elif event.role is Role.RESIGNED:
                extra["voters"] = checker.voter_count(name)
            checker.trace.event(
                f"became-{event.role.value}",
                node=name,
                epoch=event.epoch,
                leader=event.leader_id,
                **extra,
            )
            led, self.led_epoch = self.led_epoch, None
            if event.role is Role.RESIGNED and led is not None:
                found = resign_violation(name, led, checker.voter_count(name))
                if found is not None:
                    checker.fail(found)
            if event.role is Role.LEADER:
                self.led_epoch = event.epoch
                self._became_leader(event.epoch)
        elif isinstance(event, HighWatermarkAdvanced):
            if event.high_watermark < self.high_watermark:
                checker.fail(
                    f"hw-monotone: {name} went from {self.high_watermark} back to "
                    f"{event.high_watermark}"
                )
            self.high_watermark = event.high_watermark
            checker.trace.event(
                "high-watermark",
                node=name,
                high_watermark=event.high_watermark,
                epoch=checker.max_epoch(name),
            )
            if name in checker.leading:
                checker.check_own_epoch(name, self.log, event.high_watermark)
                checker.check_majority(name, event.high_watermark)
        elif isinstance(event, Truncated):
            # The epoch of the first record cut lets kraft-analyze tell a committed record
            # cut from a stale one at a committed offset, as check_truncation does.
            checker.trace.event(
                "truncation",
                node=name,
                from_offset=event.from_offset,
                to_offset=event.to_offset,
                cut_epoch=self.log.cut_entry_epoch(event.to_offset),
            )
            checker.check_truncation(name, self.log, event.to_offset, self.high_watermark)

    def _became_leader(self, epoch: int) -> None:
        checker, name = self.checker, self.process.name
        previous = checker.leaders.setdefault(epoch, name)
        if previous != name:
            checker.fail(f"election-safety: {previous} and {name} both led epoch {epoch}")
            return
        entries = self.log.entries()
        for offset in sorted(checker.committed):
            if entries.get(offset) != checker.committed[offset]:
                checker.fail(
                    f"leader-completeness: {name} leads epoch {epoch} without committed "
                    f"offset {offset} ({checker.committed[offset]} vs {entries.get(offset)})"
                )
                return

    def handle_commit(self, batch: CommittedBatch) -> None:
        checker, name = self.checker, self.process.name
        if not self.live():
            return
        if batch.base_offset != self.applied:
            checker.fail(
                f"apply-order: {name} applied offset {batch.base_offset} after {self.applied}"
            )
        for index, record in enumerate(batch.records):
            offset = batch.base_offset + (record.offset_delta or index)
            entry = (batch.epoch, record.value)
            known = checker.committed.setdefault(offset, entry)
            if known != entry:
                checker.fail(
                    f"state-machine-safety: offset {offset} committed as {known} and as "
                    f"{entry} on {name}"
                )
            self.applied = offset + 1
            self.state.append((offset, batch.epoch, record.value))
            checker.max_commit = max(checker.max_commit, offset)
        # What this node applied, as a digest kraft-analyze can compare across nodes.
        hasher = hashlib.blake2b(digest_size=8)
        for record in batch.records:
            hasher.update(record.value or b"")
            hasher.update(b"\0")
        checker.trace.event(
            "commit",
            node=name,
            from_offset=batch.base_offset,
            to_offset=self.applied,
            epoch=batch.epoch,
            records=hasher.hexdigest(),
        )

    def snapshot_records(self) -> list[Record]:
        """The state as snapshot records: key "offset:epoch", the record's value."""
        return [Record(f"{o}:{e}".encode(), v, 0) for o, e, v in self.state]

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        checker, name = self.checker, self.process.name
        if not self.live():
            return
        state = []
        for record in records:
            offset_text, _, epoch_text = (record.key or b"").decode().partition(":")
            state.append((int(offset_text), int(epoch_text), record.value))
        if [o for o, _, _ in state] != list(range(snapshot.end_offset)):
            checker.fail(f"snapshot: {name} loaded {snapshot} without every offset below its end")
            return
        for offset, epoch, value in state:
            known = checker.committed.setdefault(offset, (epoch, value))
            if known != (epoch, value):
                checker.fail(
                    f"snapshot: {name} loaded {snapshot} with {(epoch, value)} at offset {offset}, "
                    f"committed as {known}"
                )
                return
        self.state = state
        self.applied = snapshot.end_offset
        self.snapshots_loaded += 1
        high_watermark, log_start = self.node.high_watermark, self.log.start_offset()
        checker.trace.event(
            "snapshot-loaded",
            node=name,
            end_offset=snapshot.end_offset,
            epoch=snapshot.epoch,
            high_watermark=high_watermark,
            log_start=log_start,
        )
        found = snapshot_load_violation(name, snapshot.end_offset, high_watermark, log_start)
        if found is not None:
            checker.fail(found)
