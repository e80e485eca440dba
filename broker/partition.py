"""One partition replica on this broker: its local state machine and, while it leads, the
followers' progress, the high watermark and the ISR changes it asks the controller for
(Kafka's Partition and Replica). No I/O beyond the log object it is handed: the
ReplicaManager drives it from metadata images and requests, the fetcher from responses.

Local replica states (ARCHITECTURE.md, "Partition and replica state machines")::

    NONE ──▶ LEADER ◀──▶ FOLLOWER ◀── NONE
               │            │
               └──▶ STOPPED ◀┘          (topic deleted, or replica moved away)

LEADER -> LEADER and FOLLOWER -> FOLLOWER are legal for a newer leader or partition epoch
(an ISR change, or a new leader elsewhere). Any other transition, or one to an older epoch,
raises IllegalReplicaTransition: a bug the simulator must report, never a silent overwrite.

Leader facts kept here (Kafka's Partition.scala, KIP-101/279/320/841/966):
- each follower's log end offset (its last fetch offset), and the last time it was caught up
  with the leader's log end (``last_caught_up_time_ms``), as Kafka's Replica tracks them;
- the high watermark is the least log end offset over the *maximal* ISR (the committed ISR
  plus a replica being added while that AlterPartition is in flight; a replica being
  removed counts until the removal commits) and over caught-up followers eligible to join;
  it never moves backwards, and never stops short of the leader's own epoch start offset
  once it reaches there, since every ISR member has the leader's log up to that offset
  (their fetches are checked against the leader's epochs before they count);
- ISR shrink: members other than the leader not caught up within replica.lag.time.max.ms;
  ISR expand: a follower whose log end reached the high watermark and this epoch's start
  offset, on a broker the controller still lets into ISRs (KIP-966: unfenced, not shutting
  down). One AlterPartition at a time per partition; until it commits, ``pending_isr`` is
  the proposal and no other is made.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from broker.bugs import IDEMPOTENT_STALE_DUPLICATE, NO_EPOCH_BUMP, TXN_LSO_IGNORES_OPEN
from broker.producer_snapshot import put_snapshot, remove_snapshots_after
from broker.producer_state import ProducerState
from log.batch import BatchHeader, iter_batches
from log.end_txn_marker import EndTransactionMarker, decode_marker
from log.log import Log, LogAppendInfo
from log.rate_limited_log import RateLimitedLog
from log.validator import ValidatedBatch
from metadata.image import PartitionRegistration
from metadata.records import NO_LEADER

logger = logging.getLogger(__name__)
_limited = RateLimitedLog(logger)

UNKNOWN_OFFSET = -1
# Producer-state checkpoints kept in memory, at the latest segment boundaries: a truncation
# (nearly always within the last segment or two) replays the log from the latest one below
# its target instead of from the log start (Kafka keeps a snapshot file per segment).
CHECKPOINTS_KEPT = 3


class ReplicaState(enum.Enum):
    NONE = "None"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    STOPPED = "Stopped"


REPLICA_TRANSITIONS: frozenset[tuple[ReplicaState, ReplicaState]] = frozenset(
    {
        (ReplicaState.NONE, ReplicaState.LEADER),
        (ReplicaState.NONE, ReplicaState.FOLLOWER),
        (ReplicaState.LEADER, ReplicaState.LEADER),
        (ReplicaState.LEADER, ReplicaState.FOLLOWER),
        (ReplicaState.FOLLOWER, ReplicaState.FOLLOWER),
        (ReplicaState.FOLLOWER, ReplicaState.LEADER),
        (ReplicaState.NONE, ReplicaState.STOPPED),
        (ReplicaState.LEADER, ReplicaState.STOPPED),
        (ReplicaState.FOLLOWER, ReplicaState.STOPPED),
    }
)


class IllegalReplicaTransition(Exception):
    """A metadata change that no legal replica transition explains."""


@dataclass(slots=True)
class ReplicaProgress:
    """What a leader knows of one follower (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_caught_up_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0

    def is_caught_up(self, leader_end: int, now_ms: int, lag_time_max_ms: int) -> bool:
        return self.log_end_offset == leader_end or (
            now_ms - self.last_caught_up_time_ms <= lag_time_max_ms
        )


@dataclass(frozen=True, slots=True)
class Transition:
    """What applying a registration did: the states before and after, and whether it began
    a new leader epoch (a follower must refetch; a leader records its epoch start)."""

    before: ReplicaState
    after: ReplicaState
    new_epoch: bool


@dataclass(slots=True)
class Partition:
    """One replica hosted here, as of the latest reconciled image."""

    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    producers: ProducerState
    node_id: int
    state: ReplicaState = ReplicaState.NONE
    leader: int = NO_LEADER
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()  # as the controller last committed it
    pending_isr: tuple[int, ...] | None = None  # an AlterPartition in flight
    high_watermark: int = 0
    leader_epoch_start_offset: int = UNKNOWN_OFFSET
    remote: dict[int, ReplicaProgress] = field(default_factory=dict)
    bugs: frozenset[str] = frozenset()  # planted (broker/bugs.py); simulator only
    # (segment base offset, producer state there), oldest first; see CHECKPOINTS_KEPT.
    checkpoints: list[tuple[int, ProducerState]] = field(default_factory=list)
    checkpointed_base: int = UNKNOWN_OFFSET  # the active segment base last looked at

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    @property
    def is_leader(self) -> bool:
        return self.state is ReplicaState.LEADER

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the high watermark, or the first offset of the earliest transaction
        still open or not yet replicated below it (where read_committed reads stop), but
        never below the log start (Kafka's maybeIncrementFirstUnstableOffset: records
        deleted by retention or DeleteRecords cannot hold consumers back)."""
        high_watermark = self.high_watermark
        if TXN_LSO_IGNORES_OPEN in self.bugs:
            return high_watermark
        stable = self.producers.last_stable_offset(high_watermark)
        return max(stable, min(self.log.log_start_offset, high_watermark))

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR the high watermark must wait for: committed plus any pending addition."""
        pending = self.pending_isr
        if pending is None:
            return self.isr
        return self.isr + tuple(r for r in pending if r not in self.isr)

    # ---- the local state machine ------------------------------------------------------
    def _transition(self, to: ReplicaState) -> ReplicaState:
        before = self.state
        if (before, to) not in REPLICA_TRANSITIONS:
            raise IllegalReplicaTransition(
                f"{self.topic}-{self.index} on broker {self.node_id}: {before.value} -> {to.value}"
            )
        self.state = to
        return before

    def _is_stale(self, registration: PartitionRegistration) -> bool:
        """Whether ``registration`` is older than what this replica already knows, in the
        same leader epoch: a leader learns a partition epoch from its AlterPartition answer,
        which can overtake the metadata replay of an earlier change (Kafka's makeLeader and
        makeFollower skip such a state, as here)."""
        return (
            self.state is not ReplicaState.NONE
            and registration.leader_epoch == self.leader_epoch
            and registration.partition_epoch < self.partition_epoch
        )

    def _check_epochs(self, registration: PartitionRegistration) -> bool:
        """Whether ``registration`` starts a new leader epoch; raises if it is older (the
        images replay the metadata log in order, so only a bug brings an older one)."""
        if self.state is ReplicaState.NONE:
            return True
        if registration.leader_epoch < self.leader_epoch:
            raise IllegalReplicaTransition(
                f"{self.topic}-{self.index} on broker {self.node_id}: epochs went back from "
                f"leader {self.leader_epoch}/partition {self.partition_epoch} to "
                f"{registration.leader_epoch}/{registration.partition_epoch}"
            )
        return registration.leader_epoch > self.leader_epoch

    def apply(self, registration: PartitionRegistration, now_ms: int) -> Transition:
        """Become (or stay) leader or follower as ``registration`` says (Kafka's makeLeader
        / makeFollower). A new leader epoch on a leader records the epoch's start offset in
        the leader-epoch cache and restarts the followers' progress."""
        assert self.node_id in registration.replicas, (self.key, registration)
        if self._is_stale(registration):
            return Transition(self.state, self.state, False)
        to = ReplicaState.LEADER if registration.leader == self.node_id else ReplicaState.FOLLOWER
        new_epoch = self._check_epochs(registration)
        before = self._transition(to)
        became = before is not to
        self.leader = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.replicas = registration.replicas
        self.isr = registration.isr
        self.pending_isr = None  # the image is newer than any answer still in flight
        log = self.log
        self.high_watermark = min(self.high_watermark, log.log_end_offset)
        if to is ReplicaState.LEADER:
            if became or new_epoch:
                self.leader_epoch_start_offset = log.log_end_offset
                if NO_EPOCH_BUMP not in self.bugs:
                    log.leader_epoch_cache.assign(self.leader_epoch, log.log_end_offset)
                self.remote = {
                    r: ReplicaProgress(last_caught_up_time_ms=now_ms if r in self.isr else 0)
                    for r in self.replicas
                    if r != self.node_id
                }
            else:  # an ISR or replica change in the same epoch: keep what is known
                for r in self.replicas:
                    if r != self.node_id and r not in self.remote:
                        self.remote[r] = ReplicaProgress()
                for r in [r for r in self.remote if r not in self.replicas]:
                    del self.remote[r]
        else:
            self.leader_epoch_start_offset = UNKNOWN_OFFSET
            self.remote = {}
        return Transition(before, to, became or new_epoch)

    def stop(self) -> ReplicaState:
        """The replica is deleted or moved away: nothing is served or fetched for it."""
        before = self._transition(ReplicaState.STOPPED)
        self.remote = {}
        self.pending_isr = None
        return before

    # ---- leader: followers, high watermark, ISR ----------------------------------------
    def update_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetched at ``fetch_offset`` (its log end), already checked against
        this leader's epochs (Kafka's Replica.updateFetchStateOrThrow)."""
        progress = self.remote.get(replica_id)
        if progress is None:
            return
        leader_end = self.log.log_end_offset
        if fetch_offset >= leader_end:
            progress.last_caught_up_time_ms = max(progress.last_caught_up_time_ms, now_ms)
        elif fetch_offset >= progress.last_fetch_leader_log_end_offset:
            progress.last_caught_up_time_ms = max(
                progress.last_caught_up_time_ms, progress.last_fetch_time_ms
            )
        progress.log_end_offset = fetch_offset
        progress.last_fetch_leader_log_end_offset = leader_end
        progress.last_fetch_time_ms = now_ms

    def maybe_increment_high_watermark(
        self, now_ms: int, lag_time_max_ms: int, eligible: Callable[[int], bool]
    ) -> bool:
        """Advance the high watermark to the least log end over the maximal ISR (and
        caught-up eligible followers); True if it moved."""
        if self.state is not ReplicaState.LEADER:
            return False
        leader_end = self.log.log_end_offset
        candidate = leader_end
        maximal = self.maximal_isr
        for replica_id, progress in self.remote.items():
            counts = replica_id in maximal or (
                progress.is_caught_up(leader_end, now_ms, lag_time_max_ms) and eligible(replica_id)
            )
            if counts and progress.log_end_offset < candidate:
                candidate = progress.log_end_offset  # UNKNOWN (-1) holds it where it is
        if candidate <= self.high_watermark or candidate < self.leader_epoch_start_offset:
            return False
        self.high_watermark = candidate
        self.producers.on_high_watermark(candidate)
        return True

    def isr_to_expand(
        self, replica_id: int, eligible: Callable[[int], bool]
    ) -> tuple[int, ...] | None:
        """The ISR with ``replica_id`` added, if it should join now (Kafka's
        maybeExpandIsr: caught up to the high watermark and this epoch's start)."""
        if self.state is not ReplicaState.LEADER or self.pending_isr is not None:
            return None
        progress = self.remote.get(replica_id)
        if progress is None or replica_id in self.isr or not eligible(replica_id):
            return None
        end = progress.log_end_offset
        if end < self.high_watermark or end < self.leader_epoch_start_offset:
            return None
        return tuple(r for r in self.replicas if r in self.isr or r == replica_id)

    def isr_to_shrink(self, now_ms: int, lag_time_max_ms: int) -> tuple[int, ...] | None:
        """The ISR without members that have not caught up within the lag time, if any
        (Kafka's maybeShrinkIsr); never without the leader."""
        if self.state is not ReplicaState.LEADER or self.pending_isr is not None:
            return None
        leader_end = self.log.log_end_offset
        lagging = {
            r
            for r in self.isr
            if r != self.node_id
            and not self.remote.get(r, ReplicaProgress()).is_caught_up(
                leader_end, now_ms, lag_time_max_ms
            )
        }
        if not lagging:
            return None
        return tuple(r for r in self.isr if r not in lagging)

    def isr_committed(self, leader_epoch: int, partition_epoch: int, isr: tuple[int, ...]) -> bool:
        """The controller's answer to our AlterPartition; applied only if it is newer than
        what the images have told us (an image may have overtaken it). True if applied."""
        self.pending_isr = None
        if (
            self.state is not ReplicaState.LEADER
            or leader_epoch != self.leader_epoch
            or partition_epoch <= self.partition_epoch
        ):
            return False
        self.isr = isr
        self.partition_epoch = partition_epoch
        return True

    # ---- follower ------------------------------------------------------------------------
    def append_as_follower(self, records: memoryview | bytes, now_ms: int) -> int:
        """Append the leader's batches with their offsets and epochs; remember their
        producers, so this replica deduplicates as leader. Returns the new log end."""
        log_end = self.log.log_end_offset
        info = self.log.append_as_follower(records)
        if info.first_offset >= 0:
            self.checkpoint_if_rolled(log_end)
            for position, header in iter_batches(records):
                marker = decode_marker(records, position, header)
                self.record_append(header, header.base_offset, now_ms, marker)
        return self.log.log_end_offset

    def append_records_to_leader(
        self,
        validated: ValidatedBatch,
        leader_epoch: int,
        now_ms: int,
    ) -> LogAppendInfo:
        """Kafka's Partition.appendRecordsToLeader once the batch is validated and the producer
        state has let it in: stamp and append it at ``leader_epoch``, checkpoint the producer
        state at a segment roll, and record the batch into the producer state (its header as
        stored, so the producer's last timestamp is the LogAppendTime where the topic gives
        one). The caller then moves the high watermark. RecordError or OSError from the log:
        nothing stored."""
        log_end = self.log.log_end_offset
        info = self.log.append_validated(validated, leader_epoch)
        self.checkpoint_if_rolled(log_end)
        self.record_append(validated.header, info.first_offset, now_ms)
        return info

    def record_append(
        self,
        header: BatchHeader,
        first_offset: int,
        now_ms: int,
        marker: EndTransactionMarker | None = None,
    ) -> None:
        """An appended batch into the producer state, and an abort's ``.txnindex`` entry."""
        aborted = self.producers.record(header, first_offset, now_ms, marker)
        if aborted is not None:
            self.log.append_aborted_txn(aborted)

    def checkpoint_if_rolled(self, log_end_before: int) -> None:
        """After an append, before its batches are recorded: if it rolled a segment, the
        producer state as it is now is the state at the new segment's base offset, kept in
        memory (for truncations) and in a snapshot file (for an unclean start), as Kafka
        snapshots at every roll."""
        log = self.log
        base = log.active_segment.base_offset
        if base == self.checkpointed_base:
            return
        self.checkpointed_base = base
        if base >= log_end_before:  # nothing was appended between the old log end and it
            self.checkpoints.append((base, self.producers.copy()))
            del self.checkpoints[:-CHECKPOINTS_KEPT]
            if base <= log.log_start_offset:
                return  # it would spare no read: a start reads from there anyway
            try:
                entries = self.producers.snapshot_entries()
                put_snapshot(log.fs, log.dir_path, base, entries, log.log_start_offset)
            except OSError as exc:  # only costs an unclean start a longer read of the log
                _limited.log(
                    "producer-snapshot-failed",
                    logging.WARNING,
                    "%s-%d: no producer snapshot at %d: %s",
                    self.topic,
                    self.index,
                    base,
                    exc,
                )

    def follower_high_watermark(self, leader_high_watermark: int) -> None:
        """A follower's high watermark: the leader's, but never past its own log end."""
        self.high_watermark = max(0, min(leader_high_watermark, self.log.log_end_offset))
        self.producers.on_high_watermark(self.high_watermark)

    # ---- truncation ----------------------------------------------------------------------
    async def truncate_to(self, offset: int) -> bool:
        """Cut the log at ``offset`` and rebuild the producer state from what is left, as
        Kafka's truncateTo does (the cut may have removed batches, transactions' first
        batches or their markers). True if anything was removed. The snapshots above
        ``offset`` go first: the cut's directory fsync makes their removal durable."""
        if offset < self.log.log_end_offset:
            remove_snapshots_after(self.log.fs, self.log.dir_path, offset)
        removed = await self.log.truncate_to(offset)
        if removed:
            self._rebuild_producers()
        return removed

    async def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log, restarting at ``offset``; no producer is known any more (nor
        snapshotted)."""
        remove_snapshots_after(self.log.fs, self.log.dir_path, -1)
        await self.log.truncate_fully_and_start_at(offset)
        self.checkpoints = []
        self._rebuild_producers()

    def _rebuild_producers(self) -> None:
        """From the latest checkpoint at or below the new log end whose high watermark is
        not above ours (it forgot the closed transactions below its own), else from the log
        start."""
        log = self.log
        self.high_watermark = min(self.high_watermark, log.log_end_offset)
        self.checkpoints = [c for c in self.checkpoints if c[0] <= log.log_end_offset]
        if IDEMPOTENT_STALE_DUPLICATE in self.bugs:  # planted: the state of before the cut
            return
        usable = [c for c in self.checkpoints if c[1].high_watermark <= self.high_watermark]
        self.producers = ProducerState.from_log(
            log,
            self.producers.expiration_ms,
            self.high_watermark,
            checkpoint=usable[-1] if usable else None,
        )
        self.checkpointed_base = log.active_segment.base_offset
