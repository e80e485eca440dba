"""The groups and committed offsets of one ``__consumer_offsets`` partition, in memory.

Sans-I/O: the coordinator replays the partition's records into a Shard when it becomes the
partition's leader, and applies its own writes once they are acknowledged. Every committed
offset remembers the log offset of its record, so a later record always wins whatever order
acknowledgements arrive in.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker.group import consumer_records
from broker.group.classic import ClassicGroup, GroupLimits, GroupState
from broker.group.consumer_group import ConsumerGroup, ConsumerGroupLimits
from broker.group.records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
)
from protocol.turns import Turns

TopicPartition = tuple[str, int]
NO_PRODUCER_ID = -1
MAX_PRODUCER_EPOCHS = 100_000


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    value: OffsetValue
    log_offset: int  # where its record sits: a later record always wins


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One partition's offset in an OffsetCommit request."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


async def offset_commits(topics: Any, turns: Turns) -> list[OffsetCommit]:
    """The partitions of an OffsetCommit or TxnOffsetCommit request, read a slice of the
    loop at a time."""
    commits = []
    for topic in topics:
        for p in topic.partitions:
            commits.append(
                OffsetCommit(
                    topic.name,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata or "",
                )
            )
            await turns.tick()
    return commits


@dataclass(slots=True)
class Shard:
    """The groups and offsets of one ``__consumer_offsets`` partition this broker leads."""

    partition: int
    leader_epoch: int
    limits: GroupLimits
    new_id: Callable[[str], str]  # member ids, from the node's Random
    consumer_limits: ConsumerGroupLimits = field(default_factory=ConsumerGroupLimits)
    loaded: bool = False
    groups: dict[str, ClassicGroup] = field(default_factory=dict)
    # KIP-848 groups; a group id is in at most one of the two maps.
    consumer_groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    # TxnOffsetCommit's offsets, per producer id, until that producer's transaction marker
    # reaches this partition: applied on a commit marker, dropped on an abort.
    pending_txn: dict[int, dict[str, dict[TopicPartition, CommittedOffset]]] = field(
        default_factory=dict
    )
    # The latest epoch of each transactional producer seen here (offsets or markers): an
    # older epoch's TxnOffsetCommit is a fenced zombie's (Kafka's producer state of the
    # partition refuses it). Bounded, the oldest entries without pending offsets go first.
    producer_epochs: dict[int, int] = field(default_factory=dict)

    def group(self, group_id: str) -> ClassicGroup:
        """The group, created Empty if it does not exist (as Kafka creates one on a
        commit or a first JoinGroup)."""
        assert group_id not in self.consumer_groups, group_id
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, self.limits, self.new_id)
        return group

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """The consumer group, created if it does not exist; an Empty classic group of that
        id (one that only holds offsets) becomes it, as Kafka converts one."""
        group = self.consumer_groups.get(group_id)
        if group is None:
            self.groups.pop(group_id, None)  # the coordinator converts only an Empty one
            group = self.consumer_groups[group_id] = ConsumerGroup(group_id, self.consumer_limits)
        return group

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        log_offset: int,
        now: float,
        producer_id: int = NO_PRODUCER_ID,
    ) -> None:
        """Apply one stored record; a CorruptRecordError for one that cannot be read.
        ``producer_id``: the record is in that producer's transaction (TxnOffsetCommit), so
        its offset is pending until the producer's marker."""
        decoded = decode_key(key)
        if decoded is None:
            self._replay_consumer(key, value)
        elif isinstance(decoded, OffsetKey):
            where = (decoded.topic, decoded.partition)
            if producer_id != NO_PRODUCER_ID:
                if value is not None:
                    committed = CommittedOffset(decode_offset_value(value), log_offset)
                    pending = self.pending_txn.setdefault(producer_id, {})
                    pending.setdefault(decoded.group, {})[where] = committed
                return
            if value is None:
                self.offsets.get(decoded.group, {}).pop(where, None)
                return
            committed = CommittedOffset(decode_offset_value(value), log_offset)
            self.offsets.setdefault(decoded.group, {})[where] = committed
            if decoded.group not in self.consumer_groups:
                self.group(decoded.group)
        elif isinstance(decoded, GroupKey):
            if value is None:
                self.groups.pop(decoded.group, None)
                self.offsets.pop(decoded.group, None)
            elif decoded.group not in self.consumer_groups:
                # (A classic group's last write can land after the consumer group that
                # replaced it, Empty, was created: the consumer group stands.)
                self.group(decoded.group).load(decode_group_value(value), now)

    def _replay_consumer(self, key: bytes, value: bytes | None) -> None:
        decoded = consumer_records.decode_key(key)
        if decoded is None:
            return  # another kind of record (share groups, newer versions): not ours
        group = self.consumer_groups.get(decoded.group)
        if group is None and value is None:
            return
        if group is None:
            group = self.consumer_group(decoded.group)
        group.replay(
            decoded, None if value is None else consumer_records.decode_value(decoded.kind, value)
        )
        if group.dead:
            del self.consumer_groups[decoded.group]
            self.offsets.pop(decoded.group, None)

    def store_offsets(
        self, group_id: str, values: list[tuple[TopicPartition, OffsetValue]], base_offset: int
    ) -> None:
        """Commits whose records were acknowledged, the i-th at ``base_offset + i``."""
        offsets = self.offsets.setdefault(group_id, {})
        for delta, (where, value) in enumerate(values):
            current = offsets.get(where)
            if current is None or current.log_offset < base_offset + delta:
                offsets[where] = CommittedOffset(value, base_offset + delta)

    def fenced(self, producer_id: int, epoch: int) -> bool:
        """Whether a newer epoch of the producer was seen here."""
        return epoch < self.producer_epochs.get(producer_id, -1)

    def note_epoch(self, producer_id: int, epoch: int) -> None:
        if epoch <= self.producer_epochs.get(producer_id, -1):
            return
        self.producer_epochs.pop(producer_id, None)  # re-inserted last: the newest
        self.producer_epochs[producer_id] = epoch
        if len(self.producer_epochs) > MAX_PRODUCER_EPOCHS:
            oldest = next((p for p in self.producer_epochs if p not in self.pending_txn), None)
            if oldest is not None:
                del self.producer_epochs[oldest]

    def store_txn_offsets(
        self,
        producer_id: int,
        group_id: str,
        values: list[tuple[TopicPartition, OffsetValue]],
        base_offset: int,
    ) -> None:
        """A TxnOffsetCommit's records were acknowledged, the i-th at ``base_offset + i``:
        pending until the producer's marker."""
        pending = self.pending_txn.setdefault(producer_id, {}).setdefault(group_id, {})
        for delta, (where, value) in enumerate(values):
            pending[where] = CommittedOffset(value, base_offset + delta)

    def complete_txn(self, producer_id: int, committed: bool) -> int:
        """The producer's marker is in the partition: its pending offsets become the
        committed ones (unless a later record committed that partition since, Kafka's rule)
        or are dropped. Returns how many offsets were pending."""
        pending = self.pending_txn.pop(producer_id, {})
        if committed:
            for group_id, offsets in pending.items():
                if group_id not in self.consumer_groups:
                    self.group(group_id)
                current = self.offsets.setdefault(group_id, {})
                for where, offset in offsets.items():
                    existing = current.get(where)
                    if existing is None or existing.log_offset < offset.log_offset:
                        current[where] = offset
        return sum(len(offsets) for offsets in pending.values())

    def pending_offsets(self, group_id: str) -> frozenset[TopicPartition]:
        """The group's partitions whose offset a transaction holds (KIP-447's
        require_stable OffsetFetch then answers UNSTABLE_OFFSET_COMMIT)."""
        return frozenset(
            where for groups in self.pending_txn.values() for where in groups.get(group_id, {})
        )

    def forget_offsets(self, group_id: str, doomed: list[TopicPartition], base_offset: int) -> None:
        """Tombstones that were acknowledged, the i-th at ``base_offset + i``."""
        offsets = self.offsets.get(group_id, {})
        for delta, where in enumerate(doomed):
            current = offsets.get(where)
            if current is not None and current.log_offset < base_offset + delta:
                del offsets[where]

    def drop_group(self, group: ClassicGroup) -> None:
        """The group's tombstones were acknowledged: it is gone (if still Empty)."""
        if self.groups.get(group.group_id) is group and group.state is GroupState.EMPTY:
            group.mark_dead()
            del self.groups[group.group_id]
            self.offsets.pop(group.group_id, None)

    def expired_offsets(
        self, group: ClassicGroup | ConsumerGroup, retention_ms: int, now_ms: int
    ) -> list[TopicPartition]:
        """Kafka's offsets retention: an Empty group's offsets expire ``retention_ms`` after
        the later of their commit and the group becoming empty (KIP-211); a Stable consumer
        group's offsets of topics no member subscribes to any more, ``retention_ms`` after
        their commit (KIP-496). Other groups' offsets are kept. A KIP-848 group's offsets of
        topics no member subscribes to expire ``retention_ms`` after their commit, in any
        state (Kafka's ConsumerGroup rule)."""
        offsets = self.offsets.get(group.group_id, {})
        if isinstance(group, ConsumerGroup):
            since = -1
            keep: frozenset[str] | None = (
                group.subscribed_topics() if group.members else frozenset()
            )
        elif group.state is GroupState.EMPTY:
            since, keep = group.state_timestamp_ms, frozenset()
        elif group.state is GroupState.STABLE:
            since, keep = -1, group.subscribed_topics()
        else:
            return []
        if keep is None:
            return []  # not the consumer protocol, or a subscription we cannot read
        return [
            where
            for where, committed in sorted(offsets.items())
            if where[0] not in keep
            and max(committed.value.commit_timestamp_ms, since) + retention_ms <= now_ms
        ]


def validate_commit(
    group: ClassicGroup | None, member_id: str, instance: str | None, generation: int
) -> ErrorCode:
    """Kafka's checks on a classic group's OffsetCommit; generation -1 with no member is a
    simple (admin or assign()-based) commit, allowed while the group has no members."""
    if group is None or (generation < 0 and group.state is GroupState.EMPTY):
        return ErrorCode.none if generation < 0 else ErrorCode.unknown_member_id
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if group.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.rebalance_in_progress
    if instance is not None and group.static_members.get(instance) not in (None, member_id):
        return ErrorCode.fenced_instance_id
    if member_id not in group.members:
        return ErrorCode.unknown_member_id
    if generation != group.generation:
        return ErrorCode.illegal_generation
    return ErrorCode.none
