"""One KIP-848 consumer-protocol group as a sans-I/O state machine (Kafka's ConsumerGroup).

Three epochs drive it, as in Kafka. The *group epoch* counts changes of what the group wants
(a member joins, leaves or changes its subscription, a subscribed topic's partition count
changes). The *assignment epoch* is the group epoch the target assignment was computed for:
when the group epoch is ahead, the next heartbeat runs the assignor. Each member's *member
epoch* says which target it has caught up with; a member moves toward the target in steps
(Kafka's CurrentAssignmentBuilder): it first gives up (revokes) the partitions it must lose
and stays at its old epoch until it acknowledges that (its heartbeat no longer lists them);
then it takes the epoch of the target and receives the partitions of its target that no
other member still holds; the rest follow on later heartbeats, once their previous owners
have revoked them. So a partition is never held by two members at once.

Every input is pure: ``heartbeat``, ``leave``, ``fence`` compute a ``Result`` (records and
the answer) without changing the group; the coordinator writes the records and, once they
are acknowledged, ``apply`` replays them (the same ``replay`` that loads a group from
``__consumer_offsets``, so memory and log cannot disagree). Deadlines (session timeouts, the
rebalance timeout a member has to revoke) are kept in memory, as in Kafka, and restarted
when a group is loaded.
"""

from __future__ import annotations

import enum
import functools
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

import re2
from kio.schema.errors import ErrorCode

from broker.bugs import ASSIGN_BEFORE_REVOKE
from broker.group.assignors import ASSIGNORS, MemberSpec, assignor_name
from broker.group.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    AssignmentEpochValue,
    ConsumerGroupKey,
    ConsumerGroupValue,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    Partitions,
    TargetMemberValue,
    TopicIdPartition,
    TopicMetadata,
)

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
MAX_REGEX_LENGTH = 1000
# RE2's max_mem for a subscription regex: a pattern whose compiled program needs more is
# refused with INVALID_REGULAR_EXPRESSION. RE2 splits it between the program and its DFA
# cache; at 1 MiB a program of ~20,000 instructions compiles (in ~20 ms) and matches a
# 249-character name in at most ~5 ms, while `(d{0,1000})` x 100 (900 bytes, 200,000
# instructions: 0.2 s to compile, 0.1 s per name matched, 52 s of loop on main) is refused.
REGEX_MAX_MEM_BYTES = 1 << 20
COMPILED_REGEX_CACHE = 32  # compiled patterns kept (LRU): at most ~32 MiB of programs
NO_PARTITIONS: Partitions = frozenset()

Record = tuple[ConsumerGroupKey, ConsumerGroupValue | None]
TopicsView = Mapping[str, tuple[uuid.UUID, int]]  # topic name -> (id, partition count)


@runtime_checkable
class RegexTopics(Protocol):
    """A topics view that answers which topics a regex matches from what it resolved
    beforehand (the coordinator resolves a group's regexes in slices, off the loop's long
    steps, before the heartbeat runs): the heartbeat itself then matches nothing."""

    def matching(self, regex: str) -> frozenset[str]: ...


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MemberState(enum.IntEnum):
    """Kafka's MemberState, with its stored byte values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


@dataclass(frozen=True, slots=True)
class ConsumerGroupLimits:
    """The broker's group.consumer.* settings."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5000
    max_size: int = 1000
    assignors: tuple[str, ...] = ("uniform", "range")  # the first is the default
    bugs: frozenset[str] = frozenset()  # planted (broker/bugs.py); simulator only


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    metadata: MemberMetadataValue
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = NO_PARTITIONS
    pending_revocation: Partitions = NO_PARTITIONS

    def current_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            self.member_epoch,
            self.previous_member_epoch,
            int(self.state),
            self.assigned,
            self.pending_revocation,
        )


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """A ConsumerGroupHeartbeat's fields; None means "unchanged since the last one"."""

    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Partitions | None = None


@dataclass(frozen=True, slots=True)
class Result:
    """What an input decided: records to store (then ``apply``), and the answer."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str = ""
    member_epoch: int = 0
    assignment: Partitions | None = None  # sent only when it changed or on a full request
    records: tuple[Record, ...] = ()


def _error(code: ErrorCode, message: str, member_id: str = "", epoch: int = 0) -> Result:
    return Result(code, message, member_id, epoch)


@dataclass(slots=True)
class ConsumerGroup:
    """A consumer group's state, rebuilt only by ``replay`` of its records."""

    group_id: str
    limits: ConsumerGroupLimits
    group_epoch: int = 0
    assignment_epoch: int = 0
    subscription_metadata: tuple[TopicMetadata, ...] = ()
    members: dict[str, Member] = field(default_factory=dict)
    target: dict[str, Partitions] = field(default_factory=dict)
    owners: dict[TopicIdPartition, str] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    # How many members subscribe to each name and regex: a heartbeat's subscription check
    # costs the topics subscribed, not the members.
    topic_names: Counter[str] = field(default_factory=Counter)
    regexes: Counter[str] = field(default_factory=Counter)
    session_deadlines: dict[str, float] = field(default_factory=dict)
    revocation_deadlines: dict[str, float] = field(default_factory=dict)
    dead: bool = False

    # ---- state ---------------------------------------------------------------------------
    @property
    def state(self) -> ConsumerGroupState:
        if self.dead:
            return ConsumerGroupState.DEAD
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(m.member_epoch != self.assignment_epoch for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def subscribed_topics(self) -> frozenset[str]:
        """Topics some member subscribes to: by name, or matched by a regex at the last
        subscription change."""
        return frozenset(self.topic_names) | {t.name for t in self.subscription_metadata}

    def next_deadline(self) -> float | None:
        deadlines = [*self.session_deadlines.values(), *self.revocation_deadlines.values()]
        return min(deadlines) if deadlines else None

    def expired_members(self, now: float) -> list[str]:
        """Members whose session or revocation deadline has passed: to be fenced."""
        late = {m for m, at in self.session_deadlines.items() if at <= now}
        late |= {m for m, at in self.revocation_deadlines.items() if at <= now}
        return sorted(late)

    # ---- replay (loading, and applying acknowledged records) -----------------------------
    def replay(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        """Apply one stored record; the group's invariants are asserted after each."""
        member_id = key.member_id
        if key.kind == GROUP_METADATA:
            if value is None:
                self.dead = True
            else:
                assert isinstance(value, GroupEpochValue)
                self.group_epoch = value.epoch
        elif key.kind == PARTITION_METADATA:
            assert value is None or isinstance(value, PartitionMetadataValue)
            self.subscription_metadata = () if value is None else value.topics
        elif key.kind == TARGET_ASSIGNMENT_METADATA:
            assert value is None or isinstance(value, AssignmentEpochValue)
            self.assignment_epoch = 0 if value is None else value.assignment_epoch
        elif key.kind == TARGET_ASSIGNMENT_MEMBER:
            assert member_id is not None
            if value is None:
                self.target.pop(member_id, None)
            else:
                assert isinstance(value, TargetMemberValue)
                self.target[member_id] = value.partitions
        elif key.kind == MEMBER_METADATA:
            assert member_id is not None
            old = self.members.get(member_id)
            if old is not None:
                self._count(old.metadata, -1)
                if old.metadata.instance_id is not None:
                    self.static_members.pop(old.metadata.instance_id, None)
            if value is None:
                if old is not None:
                    self._set_owned(old, NO_PARTITIONS)
                    del self.members[member_id]
                self.session_deadlines.pop(member_id, None)
                self.revocation_deadlines.pop(member_id, None)
                return
            assert isinstance(value, MemberMetadataValue)
            member = Member(member_id, value) if old is None else replace(old, metadata=value)
            self.members[member_id] = member
            self._count(value, 1)
            if value.instance_id is not None:
                self.static_members[value.instance_id] = member_id
        elif key.kind == CURRENT_MEMBER_ASSIGNMENT:
            assert member_id is not None
            old = self.members.get(member_id)
            if old is None and value is None:
                return  # a removed member's tombstone that compaction left behind
            if old is None:  # its metadata record comes first; tolerate another order
                old = Member(member_id, MemberMetadataValue(None, None, "", "", (), None, -1, None))
            self._set_owned(old, NO_PARTITIONS)
            if value is None:
                member = replace(
                    old,
                    member_epoch=0,
                    previous_member_epoch=-1,
                    state=MemberState.STABLE,
                    assigned=NO_PARTITIONS,
                    pending_revocation=NO_PARTITIONS,
                )
            else:
                assert isinstance(value, CurrentAssignmentValue)
                member = replace(
                    old,
                    member_epoch=value.member_epoch,
                    previous_member_epoch=value.previous_member_epoch,
                    state=MemberState(value.state),
                    assigned=value.assigned,
                    pending_revocation=value.pending_revocation,
                )
            self.members[member_id] = member
            owned = member.assigned | member.pending_revocation
            if ASSIGN_BEFORE_REVOKE in self.limits.bugs:
                owned = member.assigned  # the planted assign-before-revoke
            self._set_owned(member, owned)

    def _count(self, metadata: MemberMetadataValue, delta: int) -> None:
        for name in metadata.subscribed_topic_names:
            self.topic_names[name] += delta
        if metadata.subscribed_topic_regex is not None:
            self.regexes[metadata.subscribed_topic_regex] += delta
        self.topic_names = +self.topic_names  # drops the names nobody subscribes to
        self.regexes = +self.regexes

    def _subscription_after(
        self, gone: list[Member], joined: Member, topics: TopicsView
    ) -> tuple[TopicMetadata, ...]:
        """The subscribed topics once ``gone`` members' metadata is replaced by ``joined``'s."""
        names, regexes = Counter(self.topic_names), Counter(self.regexes)
        for metadata, delta in [*((g.metadata, -1) for g in gone), (joined.metadata, 1)]:
            for name in metadata.subscribed_topic_names:
                names[name] += delta
            if metadata.subscribed_topic_regex is not None:
                regexes[metadata.subscribed_topic_regex] += delta
        return _resolve(+names, +regexes, topics)

    def _set_owned(self, member: Member, owned: Partitions) -> None:
        """Moves ``owners`` to say the member holds exactly ``owned``."""
        for where in member.assigned | member.pending_revocation:
            if self.owners.get(where) == member.member_id:
                del self.owners[where]
        for where in owned:
            holder = self.owners.setdefault(where, member.member_id)
            assert holder == member.member_id, f"{where} held by {holder} and {member.member_id}"

    def apply(self, result: Result, now: float) -> None:
        """The result's records were stored: replay them, restart the member's deadlines."""
        for key, value in result.records:
            self.replay(key, value)
        member = self.members.get(result.member_id)
        if result.error is not ErrorCode.none or member is None or member.member_epoch < 0:
            if member is not None and member.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                self.revocation_deadlines.pop(member.member_id, None)
            return
        self.session_deadlines[member.member_id] = now + self.limits.session_timeout_ms / 1000
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            timeout_s = max(member.metadata.rebalance_timeout_ms, 0) / 1000
            self.revocation_deadlines.setdefault(member.member_id, now + timeout_s)
        else:
            self.revocation_deadlines.pop(member.member_id, None)

    def start_deadlines(self, now: float) -> None:
        """After loading: every member gets a fresh session, as Kafka does."""
        for member_id in self.members:
            self.session_deadlines[member_id] = now + self.limits.session_timeout_ms / 1000

    # ---- heartbeat -----------------------------------------------------------------------
    def heartbeat(self, request: Heartbeat, topics: TopicsView) -> Result:
        """A ConsumerGroupHeartbeat with member epoch >= 0 (join or stay)."""
        key = self.group_id
        joining = request.member_epoch == 0
        if request.server_assignor is not None and (
            assignor_name(request.server_assignor) not in self.limits.assignors
        ):
            return _error(
                ErrorCode.unsupported_assignor,
                f"Assignor {request.server_assignor} is not one of {self.limits.assignors}",
            )
        if request.subscribed_topic_regex is not None:
            regex_error = _check_regex(request.subscribed_topic_regex)
            if regex_error is not None:
                return _error(ErrorCode.invalid_regular_expression, regex_error)
        if joining and request.owned:
            return _error(
                ErrorCode.invalid_request,
                "TopicPartitions must be empty when (re-)joining",
                request.member_id,
            )
        if (
            joining
            and request.subscribed_topic_names is None
            and (request.subscribed_topic_regex is None)
        ):
            return _error(
                ErrorCode.invalid_request,
                "SubscribedTopicNames or SubscribedTopicRegex must be set when joining",
            )
        records: list[Record] = []
        member = self.members.get(request.member_id)
        replaced: Member | None = None
        if request.instance_id is not None:
            holder = self.static_members.get(request.instance_id)
            if holder is not None and holder != request.member_id:
                old = self.members[holder]
                if not joining:
                    return _error(
                        ErrorCode.fenced_instance_id,
                        "instance id is used by another member",
                        request.member_id,
                    )
                if old.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    return _error(
                        ErrorCode.unreleased_instance_id,
                        f"Static member {request.instance_id} is still in the group",
                        request.member_id,
                    )
                replaced = old
        if member is None and not joining:
            return _error(ErrorCode.unknown_member_id, "unknown member", request.member_id)
        if member is None and replaced is None and len(self.members) >= self.limits.max_size:
            return _error(
                ErrorCode.group_max_size_reached,
                f"The group has reached its maximum size {self.limits.max_size}",
            )
        if member is not None and not joining:
            fenced = _check_epoch(member, request)
            if fenced is not None:
                return fenced
        if replaced is not None:
            # The static member is back under a new member id: it takes over the old one's
            # epoch and partitions (Kafka's static member replacement; no rebalance).
            records += self._removal_records(replaced.member_id)
            records.append(
                (
                    self._member_key(TARGET_ASSIGNMENT_MEMBER, request.member_id),
                    TargetMemberValue(self.target.get(replaced.member_id, NO_PARTITIONS)),
                )
            )
            member = replace(
                replaced,
                member_id=request.member_id,
                member_epoch=replaced.previous_member_epoch
                if replaced.member_epoch < 0
                else replaced.member_epoch,
            )
            if member.member_epoch < 0:
                member = replace(member, member_epoch=0)
        if member is None:
            blank = MemberMetadataValue(None, None, "", "", (), None, -1, None)
            member = Member(request.member_id, blank)
        metadata = _merged(member.metadata, request)
        bump = (
            (request.member_id not in self.members and replaced is None)
            or metadata.subscribed_topic_names != member.metadata.subscribed_topic_names
            or metadata.subscribed_topic_regex != member.metadata.subscribed_topic_regex
            or metadata.server_assignor != member.metadata.server_assignor
        )
        if metadata != member.metadata or replaced is not None:
            records.append((self._member_key(MEMBER_METADATA, request.member_id), metadata))
        member = replace(member, metadata=metadata)
        gone = [m for m in (self.members.get(request.member_id), replaced) if m is not None]
        subscription = self._subscription_after(gone, member, topics)
        if subscription != self.subscription_metadata:
            records.append(
                (ConsumerGroupKey(PARTITION_METADATA, key), PartitionMetadataValue(subscription))
            )
            bump = True
        group_epoch = self.group_epoch + 1 if bump else self.group_epoch
        if bump:
            records.append((ConsumerGroupKey(GROUP_METADATA, key), GroupEpochValue(group_epoch)))
        target: Mapping[str, Partitions] = self.target
        if replaced is not None:
            target = {m: p for m, p in self.target.items() if m != replaced.member_id}
            target[member.member_id] = self.target.get(replaced.member_id, NO_PARTITIONS)
        assignment_epoch = self.assignment_epoch
        if group_epoch > assignment_epoch:
            others = {m: v for m, v in self.members.items() if m not in {g.member_id for g in gone}}
            others[member.member_id] = member
            specs = {
                m: MemberSpec(
                    _subscribed_ids(v.metadata, subscription, topics),
                    target.get(m, NO_PARTITIONS),
                )
                for m, v in sorted(others.items())
            }
            counts = {t.topic_id: t.num_partitions for t in subscription}
            computed = ASSIGNORS[self.assignor_for(others)](specs, counts)
            for m, partitions in sorted(computed.items()):
                if target.get(m) != partitions:
                    records.append(
                        (
                            self._member_key(TARGET_ASSIGNMENT_MEMBER, m),
                            TargetMemberValue(partitions),
                        )
                    )
            target, assignment_epoch = computed, group_epoch
            records.append(
                (
                    ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, key),
                    AssignmentEpochValue(assignment_epoch),
                )
            )
        mine = {member.member_id, *(g.member_id for g in gone)}

        def held_elsewhere(where: TopicIdPartition) -> bool:
            holder = self.owners.get(where)
            return holder is not None and holder not in mine

        reconciled = reconcile(
            member,
            assignment_epoch,
            target.get(member.member_id, NO_PARTITIONS),
            held_elsewhere,
            request.owned,
        )
        if reconciled != member or (replaced is not None):
            records.append(
                (
                    self._member_key(CURRENT_MEMBER_ASSIGNMENT, member.member_id),
                    reconciled.current_value(),
                )
            )
        full = joining or (
            request.rebalance_timeout_ms != -1
            and request.subscribed_topic_names is not None
            and request.owned is not None
        )
        before = self.members.get(request.member_id)
        # Also resent when the member asks at an older epoch: its last answer was lost.
        changed = (
            before is None
            or before.assigned != reconciled.assigned
            or request.member_epoch != reconciled.member_epoch
        )
        return Result(
            member_id=member.member_id,
            member_epoch=reconciled.member_epoch,
            assignment=reconciled.assigned if full or changed else None,
            records=tuple(records),
        )

    def assignor_for(self, members: Mapping[str, Member]) -> str:
        """The assignor most members ask for (ties: the first configured), as in Kafka."""
        votes = Counter(
            name
            for m in members.values()
            if m.metadata.server_assignor is not None
            and (name := assignor_name(m.metadata.server_assignor)) in self.limits.assignors
        )
        if not votes:
            return self.limits.assignors[0]
        best = max(votes.values())
        return next(a for a in self.limits.assignors if votes.get(a) == best)

    # ---- leaving and fencing -------------------------------------------------------------
    def leave(self, member_id: str, instance_id: str | None, member_epoch: int) -> Result:
        """A heartbeat with epoch -1 (leave) or -2 (a static member leaving for a while)."""
        if instance_id is not None:
            holder = self.static_members.get(instance_id)
            if holder is None:
                return _error(
                    ErrorCode.unknown_member_id,
                    f"no static member {instance_id}",
                    member_id,
                    member_epoch,
                )
            if holder != member_id:
                return _error(
                    ErrorCode.fenced_instance_id,
                    "instance id is used by another member",
                    member_id,
                    member_epoch,
                )
            if member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                member = self.members[holder]
                kept = replace(
                    member,
                    previous_member_epoch=max(member.member_epoch, 0),
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                    pending_revocation=NO_PARTITIONS,
                )
                record = (self._member_key(CURRENT_MEMBER_ASSIGNMENT, holder), kept.current_value())
                return Result(member_id=holder, member_epoch=member_epoch, records=(record,))
        if member_id not in self.members:
            return _error(ErrorCode.unknown_member_id, "unknown member", member_id, member_epoch)
        return replace(self.fence(member_id), member_epoch=member_epoch)

    def fence(self, member_id: str) -> Result:
        """Remove a member (left, or missed its session or revocation deadline): its
        records get tombstones and the group epoch moves so the rest rebalance."""
        records = self._removal_records(member_id)
        # The subscribed topics' metadata is brought up to date by the next heartbeat.
        records.append(
            (ConsumerGroupKey(GROUP_METADATA, self.group_id), GroupEpochValue(self.group_epoch + 1))
        )
        return Result(
            member_id=member_id, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, records=tuple(records)
        )

    def _removal_records(self, member_id: str) -> list[Record]:
        """Kafka's removeMember: tombstones for its assignment, target and metadata."""
        return [
            (self._member_key(CURRENT_MEMBER_ASSIGNMENT, member_id), None),
            (self._member_key(TARGET_ASSIGNMENT_MEMBER, member_id), None),
            (self._member_key(MEMBER_METADATA, member_id), None),
        ]

    def deletion_records(self) -> list[Record]:
        """An Empty group's own records' tombstones (DeleteGroups, expiry); the group
        metadata tombstone comes last, so a reload never sees a half-deleted group alive."""
        assert not self.members, "only an Empty group is deleted"
        return [
            (ConsumerGroupKey(TARGET_ASSIGNMENT_METADATA, self.group_id), None),
            (ConsumerGroupKey(PARTITION_METADATA, self.group_id), None),
            (ConsumerGroupKey(GROUP_METADATA, self.group_id), None),
        ]

    def _member_key(self, kind: int, member_id: str) -> ConsumerGroupKey:
        return ConsumerGroupKey(kind, self.group_id, member_id)

    # ---- offsets -------------------------------------------------------------------------
    def validate_offset_commit(self, member_id: str, member_epoch: int) -> ErrorCode:
        """Kafka's checks on an OffsetCommit (v9+) to a consumer group: an admin commit
        (epoch < 0) only while Empty; a member's commit at its current epoch."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch > member.member_epoch:
            return ErrorCode.fenced_member_epoch
        if member_epoch < member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ from a member must name it at its current epoch."""
        if member_epoch < 0 and not member_id:
            return ErrorCode.none
        member = self.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none


def reconcile(
    member: Member,
    target_epoch: int,
    target: Partitions,
    held_elsewhere: Callable[[TopicIdPartition], bool],
    owned: Partitions | None,
) -> Member:
    """Kafka's CurrentAssignmentBuilder: one step of a member toward its target. ``held_elsewhere``
    says whether another member still holds a partition; ``owned`` is what the member's
    heartbeat says it holds (None: unchanged, assume it still holds everything)."""
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if owned is None or owned & member.pending_revocation:
            return member  # still revoking
        return _next_assignment(
            member, member.member_epoch + 1, target_epoch, target, held_elsewhere, owned
        )
    if member.state is MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    return _next_assignment(
        member, member.member_epoch, target_epoch, target, held_elsewhere, owned
    )


def _next_assignment(
    member: Member,
    epoch: int,
    target_epoch: int,
    target: Partitions,
    held_elsewhere: Callable[[TopicIdPartition], bool],
    owned: Partitions | None,
) -> Member:
    kept = member.assigned & target
    revoking = member.assigned - kept
    pending = target - kept
    free = frozenset(p for p in pending if not held_elsewhere(p))
    unreleased = len(free) < len(pending)
    if revoking and (owned is None or owned & revoking):
        return _moved(member, epoch, MemberState.UNREVOKED_PARTITIONS, kept, revoking)
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _moved(member, target_epoch, state, kept | free, NO_PARTITIONS)


def _moved(
    member: Member, epoch: int, state: MemberState, assigned: Partitions, revoking: Partitions
) -> Member:
    previous = member.member_epoch if epoch != member.member_epoch else member.previous_member_epoch
    return replace(
        member,
        member_epoch=epoch,
        previous_member_epoch=previous,
        state=state,
        assigned=assigned,
        pending_revocation=revoking,
    )


def _check_epoch(member: Member, request: Heartbeat) -> Result | None:
    """Kafka's epoch check: the current epoch, or the previous one when the member's last
    answer was lost and it holds nothing it has not been given; else FENCED_MEMBER_EPOCH."""
    received = request.member_epoch
    if received == member.member_epoch:
        return None
    if (
        received < member.member_epoch
        and received == member.previous_member_epoch
        and request.owned is not None
        and request.owned <= member.assigned
    ):
        return None
    return _error(
        ErrorCode.fenced_member_epoch,
        f"The member epoch {received} is not the current one ({member.member_epoch})",
        member.member_id,
        received,
    )


@functools.lru_cache(maxsize=COMPILED_REGEX_CACHE)
def compile_regex(regex: str) -> re2._Regexp:
    """A subscription regex in RE2, Kafka's engine (RE2/J): linear time in the name
    whatever the pattern, and a program no larger than REGEX_MAX_MEM_BYTES allows (the
    cost of compiling it and of each match is bounded too). Compiled once per pattern
    while it stays among the last COMPILED_REGEX_CACHE used (a pure function's cache: the
    same for every node, so the simulator's runs do not depend on it); re2.error if it is
    invalid or too large."""
    return re2.compile(regex, _RE2_OPTIONS)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a bad pattern is the client's error, answered as such
_RE2_OPTIONS.max_mem = REGEX_MAX_MEM_BYTES


def _check_regex(regex: str) -> str | None:
    if len(regex) > MAX_REGEX_LENGTH:
        return f"SubscribedTopicRegex is longer than {MAX_REGEX_LENGTH} characters"
    try:
        compile_regex(regex)
    except re2.error as error:
        reason = error.args[0] if error.args else ""
        reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        return f"SubscribedTopicRegex {regex!r} is invalid: {reason}"
    return None


def _merged(metadata: MemberMetadataValue, request: Heartbeat) -> MemberMetadataValue:
    """The member's metadata with the request's changed fields."""
    names = request.subscribed_topic_names
    return MemberMetadataValue(
        request.instance_id if request.instance_id is not None else metadata.instance_id,
        request.rack_id if request.rack_id is not None else metadata.rack_id,
        request.client_id,
        request.client_host,
        tuple(sorted(set(names))) if names is not None else metadata.subscribed_topic_names,
        request.subscribed_topic_regex
        if request.subscribed_topic_regex is not None
        else metadata.subscribed_topic_regex,
        request.rebalance_timeout_ms
        if request.rebalance_timeout_ms != -1
        else metadata.rebalance_timeout_ms,
        request.server_assignor
        if request.server_assignor is not None
        else metadata.server_assignor,
    )


def _resolve(
    names: Iterable[str], regexes: Iterable[str], topics: TopicsView
) -> tuple[TopicMetadata, ...]:
    """The subscribed topics that exist, sorted by name: what the assignment depends on.
    A regex matches whole names, never internal topics."""
    wanted = set(names)
    for regex in regexes:
        wanted |= matching(regex, topics)
    found = []
    for name in sorted(wanted):
        described = topics.get(name)
        if described is not None:
            found.append(TopicMetadata(described[0], name, described[1]))
    return tuple(found)


def matching(regex: str, topics: TopicsView) -> frozenset[str]:
    """The topics ``regex`` matches (whole names, never internal topics): resolved
    beforehand when ``topics`` is a RegexTopics, else matched here, one name at a time."""
    if isinstance(topics, RegexTopics):
        return topics.matching(regex)
    return match_names(compile_regex(regex), topics)


def match_names(pattern: re2._Regexp, names: Iterable[str]) -> frozenset[str]:
    """The names of ``names`` that ``pattern`` matches whole, internal topics left out."""
    return frozenset(t for t in names if not t.startswith("__") and pattern.fullmatch(t))


def _subscribed_ids(
    metadata: MemberMetadataValue, subscription: tuple[TopicMetadata, ...], topics: TopicsView
) -> frozenset[uuid.UUID]:
    names = set(metadata.subscribed_topic_names)
    regex = metadata.subscribed_topic_regex
    matched = matching(regex, topics) if regex else frozenset()
    return frozenset(t.topic_id for t in subscription if t.name in names or t.name in matched)
