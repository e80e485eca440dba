"""One classic-protocol consumer group as a sans-I/O state machine (Kafka's ClassicGroup).

States and their legal predecessors are Kafka's:

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> PreparingRebalance ...
    any -> Dead (deleted, or its coordinator partition moved away)

A rebalance: members (re)send JoinGroup; once every known member has rejoined (or the
rebalance timeout passes, dropping those that did not) the generation increments, a protocol
every member supports is chosen by vote, and every member gets its JoinGroup answer, the
leader with the members' subscriptions. The leader's SyncGroup carries the assignment; once
the group's metadata record is stored (the coordinator's job, ``Persist``) every member gets
its share and the group is Stable. Members heartbeat within their session timeout or are
removed, which starts another rebalance. Static members (``group.instance.id``, KIP-345)
keep their place across restarts: a rejoin with the same instance id replaces the member id
and, when the group is Stable and the member was not the leader, needs no rebalance.

Nothing here does I/O or reads a clock: every input carries ``now`` (the event loop's
seconds) and every output is a value: ``Reply`` objects to hand to waiting requests, and a
``Persist`` when the group's metadata must be written before answering.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.group.consumer_protocol import subscribed_topics
from broker.group.records import GroupValue, MemberValue


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class IllegalStateTransition(AssertionError):
    """A transition Kafka's table forbids: a coordinator bug, never a client's fault."""


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """The broker's group.* settings that bound a classic group."""

    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 1000
    initial_rebalance_delay_ms: int = 3000


@dataclass(frozen=True, slots=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool  # JoinGroup v4+ (KIP-394)
    supports_skip_assignment: bool  # JoinGroup v9+ (KIP-814)


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinReply:
    member_id: str  # whose pending JoinGroup this answers
    error: ErrorCode
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncReply:
    member_id: str  # whose pending SyncGroup this answers
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


Reply = JoinReply | SyncReply


@dataclass(frozen=True, slots=True)
class Persist:
    """Write this group metadata record, then call ``ClassicGroup.persisted``."""

    generation: int
    value: GroupValue


@dataclass(slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    heartbeat_deadline: float
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    supports_skip_assignment: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""


@dataclass(slots=True)
class Outcome:
    """What one input produced: replies to deliver now, and perhaps a record to write."""

    replies: list[Reply] = field(default_factory=list)
    persist: Persist | None = None


class ClassicGroup:
    """A group's members, generation and state; every method is one input."""

    def __init__(self, group_id: str, limits: GroupLimits, new_id: Callable[[str], str]) -> None:
        self.group_id = group_id
        self.limits = limits
        self._new_id = new_id  # member ids: prefix plus a UUID from the node's Random
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = -1
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}  # insertion order: the first is leader-elect
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, float] = {}  # KIP-394 ids issued -> join deadline
        self.join_deadline = 0.0  # PreparingRebalance: the rebalance timeout
        self.initial_delay_until = 0.0  # group.initial.rebalance.delay.ms from Empty
        self.initial_delay_cap = 0.0
        self.sync_deadline = 0.0  # CompletingRebalance: members must SyncGroup by then
        self._persisting: int | None = None  # generation whose metadata is being written

    # ---- state -------------------------------------------------------------------------
    def _transition(self, to: GroupState) -> None:
        if self.state not in _PREVIOUS[to]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state.value} -> {to.value}")
        self.state = to

    def subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members subscribe to (consumer protocol), None if not knowable."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            found = subscribed_topics(member.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return frozenset(topics)

    def next_deadline(self) -> float | None:
        """The earliest ``now`` at which ``tick`` has work, None if none is scheduled."""
        deadlines = [m.heartbeat_deadline for m in self.members.values() if not _kept_alive(m)]
        deadlines += self.pending_members.values()
        if self.state is GroupState.PREPARING_REBALANCE:
            deadlines.append(self.join_deadline)
            if self.initial_delay_until:
                deadlines.append(self.initial_delay_until)
        if self.state is GroupState.COMPLETING_REBALANCE:
            deadlines.append(self.sync_deadline)
        return min(deadlines) if deadlines else None

    # ---- inputs ------------------------------------------------------------------------
    def join(self, request: JoinRequest, now: float) -> tuple[str, Outcome]:
        """A JoinGroup; returns the member id it concerns (new ones are assigned here) and
        the replies, which may or may not include that member's own."""
        out = Outcome()
        if self.state is GroupState.DEAD:
            out.replies.append(JoinReply(request.member_id, ErrorCode.coordinator_not_available))
            return request.member_id, out
        if not (
            self.limits.min_session_timeout_ms
            <= request.session_timeout_ms
            <= self.limits.max_session_timeout_ms
        ):
            out.replies.append(JoinReply(request.member_id, ErrorCode.invalid_session_timeout))
            return request.member_id, out
        if not request.protocol_type or not request.protocols or not self._supports(request):
            out.replies.append(JoinReply(request.member_id, ErrorCode.inconsistent_group_protocol))
            return request.member_id, out
        if request.member_id == "":
            return self._join_unknown(request, now, out)
        return request.member_id, self._join_known(request, now, out)

    def _supports(self, request: JoinRequest) -> bool:
        if not self.members:
            return True
        if request.protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in request.protocols}
        return bool(self._candidates() & names)

    def _candidates(self) -> set[str]:
        members = list(self.members.values())
        common = {name for name, _ in members[0].protocols}
        for member in members[1:]:
            common &= {name for name, _ in member.protocols}
        return common

    def _join_unknown(self, request: JoinRequest, now: float, out: Outcome) -> tuple[str, Outcome]:
        instance = request.group_instance_id
        if instance is not None and instance in self.static_members:
            return self._rejoin_static(request, now, out)
        if instance is None and self._full():
            out.replies.append(JoinReply("", ErrorCode.group_max_size_reached))
            return "", out
        member_id = self._new_id(instance if instance is not None else request.client_id)
        if instance is None and request.require_known_member_id:
            # KIP-394: hand out the id first, so a client that retries after a lost answer
            # does not leave orphan members behind.
            self.pending_members[member_id] = now + request.session_timeout_ms / 1000
            out.replies.append(JoinReply(member_id, ErrorCode.member_id_required))
            return member_id, out
        self._add_member(member_id, request, now, out)
        return member_id, out

    def _full(self) -> bool:
        return len(self.members) + len(self.pending_members) >= self.limits.max_size

    def _rejoin_static(self, request: JoinRequest, now: float, out: Outcome) -> tuple[str, Outcome]:
        """A static member back under a new member id: the old id is fenced."""
        assert request.group_instance_id is not None
        old_id = self.static_members[request.group_instance_id]
        old = self.members.pop(old_id)
        if old.awaiting_join:
            out.replies.append(JoinReply(old_id, ErrorCode.fenced_instance_id))
        if old.awaiting_sync:
            out.replies.append(SyncReply(old_id, ErrorCode.fenced_instance_id))
        new_id = self._new_id(request.group_instance_id)
        was_leader = self.leader == old_id
        member = self._member(new_id, request, now)
        member.assignment = old.assignment
        self.members[new_id] = member
        self.static_members[request.group_instance_id] = new_id
        if was_leader:
            self.leader = new_id
        unchanged = old.protocols == request.protocols and old.protocol_type == (
            request.protocol_type
        )
        if (
            self.state is GroupState.STABLE
            and unchanged
            and (not was_leader or request.supports_skip_assignment)
        ):
            # KIP-345: the same subscription needs no rebalance; the leader (v9+) is told
            # to skip assigning (KIP-814) and gets the members to know who is who.
            members = self._joined_members() if was_leader else ()
            out.replies.append(self._join_reply(new_id, members, skip=was_leader))
            return new_id, out
        member.awaiting_join = True
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(now, out)
        else:
            self._maybe_complete_join(now, out)
        return new_id, out

    def _join_known(self, request: JoinRequest, now: float, out: Outcome) -> Outcome:
        member_id = request.member_id
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            self._add_member(member_id, request, now, out)
            return out
        error = self._check_member(member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            out.replies.append(JoinReply(member_id, error))
            return out
        member = self.members[member_id]
        unchanged = member.protocols == request.protocols
        member.heartbeat_deadline = now + request.session_timeout_ms / 1000
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update(member, request)
            member.awaiting_join = True
            self._maybe_complete_join(now, out)
        elif self.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # A repeated JoinGroup (its answer was lost): the same answer again.
            members = self._joined_members() if member_id == self.leader else ()
            out.replies.append(self._join_reply(member_id, members))
        elif self.state is GroupState.STABLE and unchanged and member_id != self.leader:
            out.replies.append(self._join_reply(member_id, ()))
        else:
            self._update(member, request)
            member.awaiting_join = True
            self._prepare_rebalance(now, out)
        return out

    def _check_member(self, member_id: str, instance: str | None) -> ErrorCode:
        """Kafka's member validation: unknown member, or a static member's fenced id."""
        if instance is not None:
            known = self.static_members.get(instance)
            if known is not None and known != member_id:
                return ErrorCode.fenced_instance_id
        if self.state in (GroupState.EMPTY, GroupState.DEAD) or member_id not in self.members:
            return ErrorCode.unknown_member_id
        return ErrorCode.none

    def _member(self, member_id: str, request: JoinRequest, now: float) -> Member:
        return Member(
            member_id,
            request.group_instance_id,
            request.client_id,
            request.client_host,
            request.session_timeout_ms,
            request.rebalance_timeout_ms,
            request.protocol_type,
            request.protocols,
            now + request.session_timeout_ms / 1000,
            supports_skip_assignment=request.supports_skip_assignment,
        )

    def _update(self, member: Member, request: JoinRequest) -> None:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        member.supports_skip_assignment = request.supports_skip_assignment

    def _add_member(self, member_id: str, request: JoinRequest, now: float, out: Outcome) -> None:
        if self._full() and member_id not in self.pending_members:
            out.replies.append(JoinReply(member_id, ErrorCode.group_max_size_reached))
            return
        member = self._member(member_id, request, now)
        member.awaiting_join = True
        if not self.members:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if request.group_instance_id is not None:
            self.static_members[request.group_instance_id] = member_id
        if self.state is GroupState.PREPARING_REBALANCE:
            if now < self.initial_delay_until:
                # Kafka's InitialDelayedJoin: each newcomer extends the wait, up to a cap.
                delay = self.limits.initial_rebalance_delay_ms / 1000
                self.initial_delay_until = min(now + delay, self.initial_delay_cap)
            self._maybe_complete_join(now, out)
        else:
            self._prepare_rebalance(now, out)

    def sync(
        self,
        member_id: str,
        instance: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
        now: float,
    ) -> Outcome:
        """A SyncGroup; its own reply comes now, or after the leader's assignment is stored."""
        out = Outcome()
        error = self._check_member(member_id, instance)
        if error is ErrorCode.none and generation != self.generation:
            error = ErrorCode.illegal_generation
        if error is ErrorCode.none and (
            (protocol_type is not None and protocol_type != self.protocol_type)
            or (protocol_name is not None and protocol_name != self.protocol_name)
        ):
            error = ErrorCode.inconsistent_group_protocol
        if error is ErrorCode.none and self.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is not ErrorCode.none:
            out.replies.append(SyncReply(member_id, error))
            return out
        member = self.members[member_id]
        member.heartbeat_deadline = now + member.session_timeout_ms / 1000
        if self.state is GroupState.STABLE:
            out.replies.append(self._sync_reply(member))
            return out
        member.awaiting_sync = True
        if member_id == self.leader and self._persisting is None:
            for each in self.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            self._persisting = self.generation
            out.persist = Persist(self.generation, self.to_value(self.state_timestamp_ms))
        return out

    def persisted(self, generation: int, error: ErrorCode, now: float) -> Outcome:
        """The leader's assignment record was written (or failed to be): answer the syncs."""
        out = Outcome()
        if self._persisting != generation:
            return out
        self._persisting = None
        if self.state is not GroupState.COMPLETING_REBALANCE or generation != self.generation:
            return out
        if error is not ErrorCode.none:
            # Kafka resets the assignment and rebalances; waiting members see the error.
            for member in self.members.values():
                member.assignment = b""
                if member.awaiting_sync:
                    member.awaiting_sync = False
                    out.replies.append(SyncReply(member.member_id, error))
            self._prepare_rebalance(now, out)
            return out
        self._transition(GroupState.STABLE)
        for member in self.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                member.heartbeat_deadline = now + member.session_timeout_ms / 1000
                out.replies.append(self._sync_reply(member))
        return out

    def heartbeat(
        self, member_id: str, instance: str | None, generation: int, now: float
    ) -> ErrorCode:
        error = self._check_member(member_id, instance)
        if error is not ErrorCode.none:
            return error
        if generation != self.generation:
            return ErrorCode.illegal_generation
        member = self.members[member_id]
        member.heartbeat_deadline = now + member.session_timeout_ms / 1000
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, member_id: str, instance: str | None, now: float) -> tuple[ErrorCode, Outcome]:
        """LeaveGroup of one member (by member id, or by instance id for a static one)."""
        out = Outcome()
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available, out
        if instance is not None:
            known = self.static_members.get(instance)
            if known is None:
                return ErrorCode.unknown_member_id, out
            if member_id not in ("", known):
                return ErrorCode.fenced_instance_id, out
            member_id = known
        elif member_id in self.pending_members:
            del self.pending_members[member_id]
            self._maybe_complete_join(now, out)
            return ErrorCode.none, out
        if member_id not in self.members:
            return ErrorCode.unknown_member_id, out
        self._remove_member(member_id, now, out)
        return ErrorCode.none, out

    def tick(self, now: float) -> Outcome:
        """Expire what is due: silent members and pending ids, and the join and sync waits."""
        out = Outcome()
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now:
                del self.pending_members[member_id]
                self._maybe_complete_join(now, out)
        for member in list(self.members.values()):
            if member.heartbeat_deadline <= now and not _kept_alive(member):
                self._remove_member(member.member_id, now, out)
        if self.state is GroupState.PREPARING_REBALANCE and self.join_deadline <= now:
            # The rebalance timeout: whoever has not rejoined is out.
            for member in list(self.members.values()):
                if not member.awaiting_join:
                    self._drop(member.member_id)
            self.pending_members.clear()
            self._complete_join(now, out)
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now, out)
        if self.state is GroupState.COMPLETING_REBALANCE and self.sync_deadline <= now:
            # Kafka's pending-sync timeout: members that never sent SyncGroup are removed.
            laggards = [m.member_id for m in self.members.values() if not m.awaiting_sync]
            if self.leader not in laggards and self._persisting is not None:
                return out  # the assignment is being written: it decides
            for member_id in laggards:
                self._drop(member_id)
            self._prepare_rebalance(now, out)
        return out

    def mark_dead(self) -> Outcome:
        """The group is deleted or its partition moved away: waiting requests are told so."""
        out = Outcome()
        for member in self.members.values():
            if member.awaiting_join:
                out.replies.append(JoinReply(member.member_id, ErrorCode.not_coordinator))
            if member.awaiting_sync:
                out.replies.append(SyncReply(member.member_id, ErrorCode.not_coordinator))
        self._transition(GroupState.DEAD)
        return out

    # ---- rebalance -----------------------------------------------------------------------
    def _remove_member(self, member_id: str, now: float, out: Outcome) -> None:
        member = self._drop(member_id)
        if member.awaiting_join:
            out.replies.append(JoinReply(member_id, ErrorCode.unknown_member_id))
        if member.awaiting_sync:
            out.replies.append(SyncReply(member_id, ErrorCode.unknown_member_id))
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(now, out)
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join(now, out)

    def _drop(self, member_id: str) -> Member:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        return member

    def _prepare_rebalance(self, now: float, out: Outcome) -> None:
        if self.state is GroupState.COMPLETING_REBALANCE:
            for member in self.members.values():
                member.assignment = b""
                if member.awaiting_sync:
                    member.awaiting_sync = False
                    out.replies.append(SyncReply(member.member_id, ErrorCode.rebalance_in_progress))
        from_empty = self.state is GroupState.EMPTY
        self._transition(GroupState.PREPARING_REBALANCE)
        self._persisting = None
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0) / 1000
        self.join_deadline = now + timeout
        if from_empty and self.limits.initial_rebalance_delay_ms > 0:
            delay = self.limits.initial_rebalance_delay_ms / 1000
            self.initial_delay_until = now + min(delay, timeout)
            self.initial_delay_cap = now + timeout
        else:
            self.initial_delay_until = 0.0
        self._maybe_complete_join(now, out)

    def _maybe_complete_join(self, now: float, out: Outcome) -> None:
        if self.state is not GroupState.PREPARING_REBALANCE or now < self.initial_delay_until:
            return
        self.initial_delay_until = 0.0  # the initial delay, if any, is over
        if self.pending_members or any(not m.awaiting_join for m in self.members.values()):
            return
        self._complete_join(now, out)

    def _complete_join(self, now: float, out: Outcome) -> None:
        self.generation += 1
        self.initial_delay_until = 0.0
        if not self.members:
            self.protocol_name = None
            self.leader = None
            self._transition(GroupState.EMPTY)
            out.persist = Persist(self.generation, self.to_value(self.state_timestamp_ms))
            return
        self.protocol_name = self._select_protocol()
        if self.leader not in self.members:
            self.leader = next(iter(self.members))
        self._transition(GroupState.COMPLETING_REBALANCE)
        self.sync_deadline = now + max(m.rebalance_timeout_ms for m in self.members.values()) / 1000
        everyone = self._joined_members()
        for member in self.members.values():
            member.awaiting_join = False
            member.heartbeat_deadline = now + member.session_timeout_ms / 1000
            members = everyone if member.member_id == self.leader else ()
            out.replies.append(self._join_reply(member.member_id, members))

    def _select_protocol(self) -> str:
        """Each member votes for its most preferred protocol all members support."""
        candidates = self._candidates()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = next(name for name, _ in member.protocols if name in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        return max(votes, key=lambda name: votes[name])  # ties: the first voted for

    def _joined_members(self) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    def _join_reply(
        self, member_id: str, members: tuple[JoinedMember, ...], *, skip: bool = False
    ) -> JoinReply:
        return JoinReply(
            member_id,
            ErrorCode.none,
            self.generation,
            self.protocol_type,
            self.protocol_name,
            self.leader or "",
            skip,
            members,
        )

    def _sync_reply(self, member: Member) -> SyncReply:
        return SyncReply(
            member.member_id,
            ErrorCode.none,
            self.protocol_type,
            self.protocol_name,
            member.assignment,
        )

    # ---- storage -------------------------------------------------------------------------
    def to_value(self, timestamp_ms: int) -> GroupValue:
        """The GroupMetadataValue Kafka stores for this group."""
        return GroupValue(
            self.protocol_type or "",
            self.generation,
            self.protocol_name,
            self.leader,
            timestamp_ms,
            tuple(
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(self.protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    def load(self, value: GroupValue, now: float) -> None:
        """Restore from the stored record: Stable with its members (each given a fresh
        session, as Kafka does), or Empty."""
        self.generation = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol
        self.leader = value.leader
        self.state_timestamp_ms = value.current_state_timestamp_ms
        self.members.clear()
        self.static_members.clear()
        for stored in value.members:
            self.members[stored.member_id] = Member(
                stored.member_id,
                stored.group_instance_id,
                stored.client_id,
                stored.client_host,
                stored.session_timeout_ms,
                stored.rebalance_timeout_ms,
                value.protocol_type,
                ((value.protocol or "", stored.subscription),),
                now + stored.session_timeout_ms / 1000,
                stored.assignment,
            )
            if stored.group_instance_id is not None:
                self.static_members[stored.group_instance_id] = stored.member_id
        self.state = GroupState.STABLE if self.members else GroupState.EMPTY


def _kept_alive(member: Member) -> bool:
    """Kafka keeps a member that waits on a JoinGroup or SyncGroup answer alive."""
    return member.awaiting_join or member.awaiting_sync
