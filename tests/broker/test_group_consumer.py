"""The KIP-848 consumer group state machine, driven heartbeat by heartbeat.

``Client`` plays a Java consumer: it holds what its last answer assigned, drops revoked
partitions at once and reports what it holds on its next heartbeat. Every result's records
go through the codec and ``replay`` (as the coordinator stores and applies them), and a
second group rebuilt from all records so far must equal the live one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from kio.schema.errors import ErrorCode

from broker.group.assignors import RANGE, UNIFORM, MemberSpec, range_, uniform
from broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupLimits,
    ConsumerGroupState,
    Heartbeat,
    MemberState,
    Result,
)
from broker.group.consumer_records import (
    ConsumerGroupKey,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
LIMITS = ConsumerGroupLimits(session_timeout_ms=45_000, heartbeat_interval_ms=5000)


@dataclass
class Log:
    """Every record stored so far, through the codec, as __consumer_offsets would hold."""

    entries: list[tuple[bytes, bytes | None]] = field(default_factory=list)

    def store(self, result: Result) -> None:
        for key, value in result.records:
            self.entries.append((encode_key(key), None if value is None else encode_value(value)))

    def reload(self) -> ConsumerGroup:
        group = ConsumerGroup("g", LIMITS)
        for key_bytes, value_bytes in self.entries:
            key = decode_key(key_bytes)
            assert isinstance(key, ConsumerGroupKey)
            value = None if value_bytes is None else decode_value(key.kind, value_bytes)
            group.replay(key, value)
        return group


class Harness:
    def __init__(self, topics: dict[str, tuple[uuid.UUID, int]]) -> None:
        self.group = ConsumerGroup("g", LIMITS)
        self.topics = topics
        self.log = Log()
        self.now = 0.0

    def commit(self, result: Result) -> Result:
        if result.error is ErrorCode.none:
            self.log.store(result)
            self.group.apply(result, self.now)
        return result


@dataclass
class Client:
    harness: Harness
    member_id: str
    topics: tuple[str, ...] = ("t1",)
    instance_id: str | None = None
    epoch: int = 0
    held: frozenset[tuple[uuid.UUID, int]] = frozenset()
    full_next: bool = False

    def heartbeat(
        self,
        full: bool = False,
        assignor: str | None = None,
        rejoin: bool = True,
        lose: bool = False,
    ) -> Result:
        joining = self.epoch == 0
        full, self.full_next = full or self.full_next, False
        request = Heartbeat(
            member_id=self.member_id,
            member_epoch=self.epoch,
            client_id="c",
            client_host="/127.0.0.1",
            instance_id=self.instance_id,
            rebalance_timeout_ms=30_000 if joining or full else -1,
            subscribed_topic_names=self.topics if joining or full else None,
            server_assignor=assignor,
            owned=self.held,
        )
        result = self.harness.commit(self.harness.group.heartbeat(request, self.harness.topics))
        if result.error is ErrorCode.fenced_member_epoch and rejoin:
            self.held, self.epoch = frozenset(), 0  # as the Java client: give up all, rejoin
            return self.heartbeat(rejoin=False, lose=lose)
        if result.error is ErrorCode.none and lose:
            # Stored and applied, but the answer never arrives: the client keeps its view
            # and, as the Java client does after a failed heartbeat, sends every field next.
            self.full_next = True
        elif result.error is ErrorCode.none:
            self.epoch = result.member_epoch
            if result.assignment is not None:
                self.held = result.assignment
        return result

    def leave(self, epoch: int = -1) -> Result:
        group = self.harness.group
        result = self.harness.commit(group.leave(self.member_id, self.instance_id, epoch))
        self.held, self.epoch = frozenset(), 0
        return result


def parts(topic: uuid.UUID, *indexes: int) -> frozenset[tuple[uuid.UUID, int]]:
    return frozenset((topic, i) for i in indexes)


def test_first_member_gets_every_partition_at_the_new_epoch() -> None:
    h = Harness({"t1": (T1, 3)})
    a = Client(h, "a")
    result = a.heartbeat()
    assert result.member_epoch == 1 and a.held == parts(T1, 0, 1, 2)
    assert h.group.state is ConsumerGroupState.STABLE
    assert a.heartbeat().assignment is None  # unchanged: not resent


def test_second_member_waits_until_the_first_revokes() -> None:
    h = Harness({"t1": (T1, 3)})
    a, b = Client(h, "a"), Client(h, "b")
    a.heartbeat()
    joined = b.heartbeat()
    assert joined.member_epoch == 2 and b.held == frozenset()  # a still holds them
    assert h.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert h.group.state is ConsumerGroupState.RECONCILING
    revoke = a.heartbeat()
    assert revoke.member_epoch == 1  # stays at its epoch until it acknowledges
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    moving = h.group.members["a"].pending_revocation
    assert moving and not (a.held & moving)
    assert b.heartbeat().assignment is None  # nothing freed yet
    acked = a.heartbeat()
    assert acked.member_epoch == 2
    b.heartbeat()
    assert b.held == moving
    assert a.held | b.held == parts(T1, 0, 1, 2) and not a.held & b.held
    assert h.group.state is ConsumerGroupState.STABLE


def test_leave_gives_the_partitions_to_the_rest() -> None:
    h = Harness({"t1": (T1, 3)})
    a, b = Client(h, "a"), Client(h, "b")
    for _ in range(4):
        a.heartbeat()
        b.heartbeat()
    assert len(a.held) + len(b.held) == 3 and min(len(a.held), len(b.held)) == 1
    epoch = h.group.group_epoch
    assert b.leave().member_epoch == -1
    assert "b" not in h.group.members and h.group.group_epoch == epoch + 1
    a.heartbeat()
    assert a.held == parts(T1, 0, 1, 2)


def test_session_timeout_fences_a_silent_member() -> None:
    h = Harness({"t1": (T1, 2)})
    a, b = Client(h, "a"), Client(h, "b")
    a.heartbeat()
    b.heartbeat()
    h.now = 40.0
    a.heartbeat()
    h.now = 46.0  # b's last heartbeat was at 0
    assert h.group.expired_members(h.now) == ["b"]
    h.commit(h.group.fence("b"))
    assert list(h.group.members) == ["a"]


def test_a_member_that_never_revokes_is_fenced_after_its_rebalance_timeout() -> None:
    h = Harness({"t1": (T1, 2)})
    a, b = Client(h, "a"), Client(h, "b")
    a.heartbeat()
    b.heartbeat()
    h.now = 1.0
    request = Heartbeat("a", a.epoch, "c", "h", owned=None)  # keeps claiming everything
    h.commit(h.group.heartbeat(request, h.topics))
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    for now in (10.0, 20.0, 30.0):  # heartbeats keep the session, not the revocation
        h.now = now
        h.commit(h.group.heartbeat(Heartbeat("a", a.epoch, "c", "h"), h.topics))
    assert h.group.expired_members(30.5) == []
    assert h.group.expired_members(31.0) == ["a"]


def test_stale_and_future_epochs_are_fenced() -> None:
    h = Harness({"t1": (T1, 1)})
    a = Client(h, "a")
    a.heartbeat()
    late = h.group.heartbeat(Heartbeat("a", 7, "c", "h", owned=frozenset()), h.topics)
    assert late.error is ErrorCode.fenced_member_epoch
    unknown = h.group.heartbeat(Heartbeat("zz", 3, "c", "h", owned=frozenset()), h.topics)
    assert unknown.error is ErrorCode.unknown_member_id


def test_previous_epoch_is_accepted_when_the_answer_was_lost() -> None:
    h = Harness({"t1": (T1, 2)})
    a, b = Client(h, "a"), Client(h, "b")
    a.heartbeat()
    b.heartbeat()
    a.heartbeat()  # revoking
    before = a.epoch
    a.heartbeat()  # acknowledged: epoch moves on, pretend this answer is lost
    assert a.epoch == before + 1
    retry = h.group.heartbeat(Heartbeat("a", before, "c", "h", owned=a.held), h.topics)
    assert retry.error is ErrorCode.none and retry.member_epoch == before + 1


def test_partition_count_change_rebalances() -> None:
    h = Harness({"t1": (T1, 2)})
    a = Client(h, "a")
    a.heartbeat()
    epoch = h.group.group_epoch
    h.topics = {"t1": (T1, 4)}
    a.heartbeat()
    assert h.group.group_epoch == epoch + 1 and a.held == parts(T1, 0, 1, 2, 3)


def test_static_member_comes_back_under_a_new_id_without_a_rebalance() -> None:
    h = Harness({"t1": (T1, 2)})
    a = Client(h, "a", instance_id="i-a")
    b = Client(h, "b")
    for _ in range(4):
        a.heartbeat()
        b.heartbeat()
    held, epoch = a.held, h.group.group_epoch
    assert a.leave(-2).member_epoch == -2
    assert h.group.members["a"].member_epoch == -2  # its partitions wait for it
    a2 = Client(h, "a2", instance_id="i-a")
    result = a2.heartbeat()
    assert result.error is ErrorCode.none and a2.held == held
    assert h.group.group_epoch == epoch and "a" not in h.group.members
    busy = Client(h, "a3", instance_id="i-a").heartbeat()
    assert busy.error is ErrorCode.unreleased_instance_id


def test_assignor_is_checked_and_range_is_used_when_asked() -> None:
    h = Harness({"t1": (T1, 4)})
    bad = Client(h, "a").heartbeat(assignor="sticky")
    assert bad.error is ErrorCode.unsupported_assignor
    a, b = Client(h, "a"), Client(h, "b")
    a.heartbeat(assignor=RANGE)
    b.heartbeat(assignor=RANGE)
    assert h.group.target == {"a": parts(T1, 0, 1), "b": parts(T1, 2, 3)}


def test_commit_epoch_validation() -> None:
    h = Harness({"t1": (T1, 1)})
    assert h.group.validate_offset_commit("", -1) is ErrorCode.none  # admin, Empty group
    a = Client(h, "a")
    a.heartbeat()
    assert h.group.validate_offset_commit("", -1) is ErrorCode.unknown_member_id
    assert h.group.validate_offset_commit("a", a.epoch) is ErrorCode.none
    assert h.group.validate_offset_commit("a", a.epoch - 1) is ErrorCode.stale_member_epoch
    assert h.group.validate_offset_commit("a", a.epoch + 1) is ErrorCode.fenced_member_epoch


def test_join_needs_a_subscription_and_no_owned_partitions() -> None:
    h = Harness({"t1": (T1, 1)})
    no_sub = h.group.heartbeat(Heartbeat("a", 0, "c", "h", rebalance_timeout_ms=1), h.topics)
    assert no_sub.error is ErrorCode.invalid_request
    owned = Heartbeat("a", 0, "c", "h", subscribed_topic_names=("t1",), owned=parts(T1, 0))
    assert h.group.heartbeat(owned, h.topics).error is ErrorCode.invalid_request
    regex = Heartbeat("a", 0, "c", "h", subscribed_topic_regex="(")
    assert h.group.heartbeat(regex, h.topics).error is ErrorCode.invalid_regular_expression


def test_regex_subscription_matches_whole_names() -> None:
    h = Harness({"orders": (T1, 1), "orders-dlq": (T2, 1)})
    request = Heartbeat("a", 0, "c", "h", rebalance_timeout_ms=1, subscribed_topic_regex="ord.*s")
    result = h.commit(h.group.heartbeat(request, h.topics))
    assert result.assignment == parts(T1, 0)


@pytest.mark.parametrize("assign", [uniform, range_])
def test_assignors_cover_every_partition_once(assign: object) -> None:
    members = {
        "a": MemberSpec(frozenset({T1, T2}), frozenset()),
        "b": MemberSpec(frozenset({T1}), frozenset()),
        "c": MemberSpec(frozenset({T2}), frozenset()),
    }
    result = assign(members, {T1: 5, T2: 3})  # type: ignore[operator]
    every = [p for ps in result.values() for p in ps]
    assert sorted(every) == sorted([*parts(T1, *range(5)), *parts(T2, *range(3))])
    assert all(p[0] in members[m].subscribed for m, ps in result.items() for p in ps)


def test_uniform_is_sticky_and_balanced() -> None:
    before = {"a": parts(T1, 0, 1, 2, 3), "b": parts(T1, 4, 5)}
    members = {m: MemberSpec(frozenset({T1}), p) for m, p in before.items()}
    members["c"] = MemberSpec(frozenset({T1}), frozenset())
    after = uniform(members, {T1: 6})
    assert sorted(len(p) for p in after.values()) == [2, 2, 2]
    assert after["b"] == before["b"] and after["a"] < before["a"]
    assert UNIFORM == "uniform"


# ---- stateful: no partition held by two members, every partition eventually held -------------
class ConsumerGroupMachine(RuleBasedStateMachine):
    """Members join, heartbeat (sometimes losing the answer), leave, die and come back, and
    topics grow; at every step no partition is held by two clients nor owned twice by the
    coordinator, and the stored records rebuild the same group. Quiescing (every live member
    heartbeating a few rounds) ends with every partition held."""

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness({"t1": (T1, 3), "t2": (T2, 2)})
        self.clients: dict[str, Client] = {}
        self.next_id = 0

    @rule(topics=st.sampled_from([("t1",), ("t2",), ("t1", "t2")]))
    def join(self, topics: tuple[str, ...]) -> None:
        if len(self.clients) >= 5:
            return
        self.next_id += 1
        client = Client(self.h, f"m{self.next_id}", topics=topics)
        self.clients[client.member_id] = client
        client.heartbeat()

    @rule(data=st.data(), lose_answer=st.booleans())
    def heartbeat(self, data: st.DataObject, lose_answer: bool) -> None:
        if not self.clients:
            return
        client = self.clients[data.draw(st.sampled_from(sorted(self.clients)))]
        client.heartbeat(lose=lose_answer)

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        if self.clients:
            self.clients.pop(data.draw(st.sampled_from(sorted(self.clients)))).leave()

    @rule(data=st.data())
    def die(self, data: st.DataObject) -> None:
        """The session timeout fences it; a dead client holds nothing it can use."""
        if self.clients:
            victim = self.clients.pop(data.draw(st.sampled_from(sorted(self.clients))))
            if victim.member_id in self.h.group.members:
                self.h.commit(self.h.group.fence(victim.member_id))

    @rule(count=st.integers(3, 6))
    def grow_t1(self, count: int) -> None:
        current = self.h.topics["t1"][1]
        self.h.topics = {**self.h.topics, "t1": (T1, max(current, count))}

    @invariant()
    def nothing_held_twice(self) -> None:
        seen: set[tuple[uuid.UUID, int]] = set()
        for client in self.clients.values():
            assert not seen & client.held, "a partition is held by two clients"
            seen |= client.held
        owned: set[tuple[uuid.UUID, int]] = set()
        for member in self.h.group.members.values():
            mine = member.assigned | member.pending_revocation
            assert not owned & mine
            owned |= mine

    @invariant()
    def records_rebuild_the_group(self) -> None:
        reloaded = self.h.log.reload()
        group = self.h.group
        assert reloaded.members == group.members
        assert reloaded.target == group.target
        assert (reloaded.group_epoch, reloaded.assignment_epoch) == (
            group.group_epoch,
            group.assignment_epoch,
        )

    def teardown(self) -> None:
        for _ in range(6):
            for client in self.clients.values():
                client.heartbeat()
        held = set().union(*(c.held for c in self.clients.values()))
        for topic, (topic_id, count) in self.h.topics.items():
            subscribers = [c for c in self.clients.values() if topic in c.topics]
            if subscribers:
                assert {(topic_id, i) for i in range(count)} <= held, topic


TestConsumerGroupMachine = ConsumerGroupMachine.TestCase
TestConsumerGroupMachine.settings = settings(max_examples=150, stateful_step_count=30)


def test_a_catastrophic_backtracking_regex_is_answered_at_once() -> None:
    """RE2 runs in linear time: the classic ReDoS pattern against a long name is instant."""
    h = Harness({"a" * 5000 + "b": (T1, 1), "aaa": (T2, 1)})
    request = Heartbeat("m", 0, "c", "h", rebalance_timeout_ms=1, subscribed_topic_regex="(a+)+")
    assert h.commit(h.group.heartbeat(request, h.topics)).assignment == parts(T2, 0)


def test_a_compacted_log_with_only_some_tombstones_left_loads_no_phantom_member() -> None:
    h = Harness({"t1": (T1, 2)})
    a, b = Client(h, "a"), Client(h, "b")
    a.heartbeat()
    b.heartbeat()
    b.leave()
    # The cleaner dropped b's records and all but its CurrentMemberAssignment tombstone.
    h.log.entries = [
        (key, value)
        for key, value in h.log.entries
        if b"\x00\x01b" not in key or (key[:2] == b"\x00\x08" and value is None)
    ]
    reloaded = h.log.reload()
    assert list(reloaded.members) == ["a"]
    assert reloaded.subscribed_topics() == {"t1"}
