"""The classic group state machine, driven input by input with explicit time."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from broker.group.classic import (
    ClassicGroup,
    GroupLimits,
    GroupState,
    IllegalStateTransition,
    JoinReply,
    JoinRequest,
    Outcome,
    SyncReply,
)

SESSION_MS = 10_000
REBALANCE_MS = 30_000


def new_group(delay_ms: int = 0, max_size: int = 1000) -> ClassicGroup:
    counter = itertools.count(1)
    return ClassicGroup(
        "g",
        GroupLimits(
            min_session_timeout_ms=1000,
            max_session_timeout_ms=60_000,
            max_size=max_size,
            initial_rebalance_delay_ms=delay_ms,
        ),
        lambda prefix: f"{prefix}-{next(counter)}",
    )


def request(
    member_id: str = "",
    *,
    client: str = "c",
    instance: str | None = None,
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"sub"),),
    session_ms: int = SESSION_MS,
    version: int = 9,
) -> JoinRequest:
    return JoinRequest(
        member_id=member_id,
        group_instance_id=instance,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        protocol_type="consumer",
        protocols=protocols,
        require_known_member_id=version >= 4,
        supports_skip_assignment=version >= 9,
    )


def joins(out: Outcome) -> dict[str, JoinReply]:
    return {r.member_id: r for r in out.replies if isinstance(r, JoinReply)}


def syncs(out: Outcome) -> dict[str, SyncReply]:
    return {r.member_id: r for r in out.replies if isinstance(r, SyncReply)}


def join_new(group: ClassicGroup, now: float, client: str = "c") -> tuple[str, Outcome]:
    """The KIP-394 two-step join: MEMBER_ID_REQUIRED, then the join with that id."""
    member_id, out = group.join(request(client=client), now)
    assert joins(out)[member_id].error is ErrorCode.member_id_required
    return group.join(request(member_id, client=client), now)


def stabilize(
    group: ClassicGroup, leader: str, now: float, assignment: dict[str, bytes]
) -> Outcome:
    out = group.sync(leader, None, group.generation, None, None, assignment, now)
    assert out.persist is not None and out.persist.generation == group.generation
    return group.persisted(group.generation, ErrorCode.none, now)


def test_a_first_member_gets_an_id_then_leads_generation_one_and_its_assignment() -> None:
    group = new_group()
    member, out = join_new(group, 0.0)
    reply = joins(out)[member]
    assert (reply.error, reply.generation, reply.leader) == (ErrorCode.none, 1, member)
    assert reply.protocol_name == "range"
    assert [m.metadata for m in reply.members] == [b"sub"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    out = stabilize(group, member, 0.1, {member: b"all"})
    assert syncs(out)[member].assignment == b"all"
    assert group.state is GroupState.STABLE
    assert group.to_value(5).members[0].assignment == b"all"


def test_a_second_member_rebalances_the_group_and_both_get_their_share() -> None:
    group = new_group()
    first, _ = join_new(group, 0.0)
    stabilize(group, first, 0.0, {first: b"all"})
    second, out = join_new(group, 1.0, client="d")
    assert out.replies == []  # waits for the first member to rejoin
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.heartbeat(first, None, 1, 1.5) is ErrorCode.rebalance_in_progress
    _, out = group.join(request(first), 2.0)
    replies = joins(out)
    assert {r.generation for r in replies.values()} == {2}
    assert len(replies[first].members) == 2 and replies[second].members == ()
    follower = group.sync(second, None, 2, "consumer", "range", {}, 2.1)
    assert follower.replies == [] and follower.persist is None  # waits for the leader
    out = stabilize(group, first, 2.2, {first: b"p0", second: b"p1p2"})
    assert {m: r.assignment for m, r in syncs(out).items()} == {first: b"p0", second: b"p1p2"}


def test_a_silent_member_is_removed_after_its_session_timeout() -> None:
    group = new_group()
    first, _ = join_new(group, 0.0)
    stabilize(group, first, 0.0, {first: b""})
    second, _ = join_new(group, 1.0)
    group.join(request(first), 1.0)
    stabilize(group, first, 1.0, {})
    group.sync(second, None, 2, None, None, {}, 1.0)
    assert group.next_deadline() == pytest.approx(1.0 + SESSION_MS / 1000)
    assert group.heartbeat(first, None, 2, 9.0) is ErrorCode.none
    group.tick(11.5)  # the second member never heartbeat: out, and a rebalance starts
    assert second not in group.members and group.state is GroupState.PREPARING_REBALANCE
    assert group.heartbeat(second, None, 2, 11.6) is ErrorCode.unknown_member_id
    group.join(request(first), 12.0)
    assert group.state is GroupState.COMPLETING_REBALANCE and group.generation == 3


def test_a_member_that_does_not_rejoin_within_the_rebalance_timeout_is_dropped() -> None:
    group = new_group()
    first, _ = join_new(group, 0.0)
    stabilize(group, first, 0.0, {})
    second, _ = join_new(group, 1.0)
    for now in (5.0, 10.0, 15.0, 20.0, 25.0, 30.0):  # the first keeps heartbeating only
        group.heartbeat(first, None, 1, now)
    assert group.state is GroupState.PREPARING_REBALANCE
    out = group.tick(1.0 + REBALANCE_MS / 1000)
    assert list(group.members) == [second]
    assert joins(out)[second].leader == second and group.generation == 2


def test_leaving_members_rebalance_the_rest_and_the_last_one_empties_the_group() -> None:
    group = new_group()
    first, _ = join_new(group, 0.0)
    stabilize(group, first, 0.0, {})
    second, _ = join_new(group, 1.0)
    group.join(request(first), 1.0)
    stabilize(group, first, 1.0, {})
    error, out = group.leave(first, None, 2.0)
    assert error is ErrorCode.none and group.state is GroupState.PREPARING_REBALANCE
    _, out = group.join(request(second), 2.1)
    assert joins(out)[second].leader == second and group.generation == 3
    stabilize(group, second, 2.2, {})
    error, out = group.leave(second, None, 3.0)
    assert group.state is GroupState.EMPTY and group.generation == 4
    assert out.persist is not None and out.persist.value.members == ()
    assert group.leave(second, None, 3.1)[0] is ErrorCode.unknown_member_id


def test_a_static_member_rejoining_a_stable_group_gets_its_assignment_without_a_rebalance() -> None:
    group = new_group()
    first, _ = group.join(request(instance="a"), 0.0)  # static members skip KIP-394
    second, out = group.join(request(instance="b"), 0.0)
    _, out = group.join(request(first, instance="a"), 0.0)
    stabilize(group, first, 0.0, {first: b"x", second: b"y"})
    generation = group.generation
    # "b" restarts: same instance id, new process (member id "")
    rejoined, out = group.join(request(instance="b"), 5.0)
    reply = joins(out)[rejoined]
    assert rejoined != second and reply.error is ErrorCode.none
    assert group.generation == generation and group.state is GroupState.STABLE
    assert group.sync(rejoined, "b", generation, None, None, {}, 5.1).replies[0].assignment == b"y"
    # the old process is fenced
    assert group.heartbeat(second, "b", generation, 5.2) is ErrorCode.fenced_instance_id


def test_a_static_leader_rejoining_is_told_to_skip_assignment_from_v9_and_rebalances_before() -> (
    None
):
    group = new_group()
    leader, _ = group.join(request(instance="a"), 0.0)
    stabilize(group, leader, 0.0, {leader: b"x"})
    new_id, out = group.join(request(instance="a"), 1.0)
    reply = joins(out)[new_id]
    assert reply.skip_assignment and reply.leader == new_id and len(reply.members) == 1
    assert group.state is GroupState.STABLE and group.generation == 1
    old_client, out = group.join(request(instance="a", version=8), 2.0)
    assert group.state is GroupState.COMPLETING_REBALANCE and group.generation == 2
    assert not joins(out)[old_client].skip_assignment


def test_the_initial_rebalance_delay_waits_for_more_members_up_to_the_rebalance_timeout() -> None:
    group = new_group(delay_ms=3000)
    first, out = join_new(group, 0.0)
    assert out.replies == [] and group.next_deadline() == pytest.approx(3.0)
    second, out = join_new(group, 2.0)  # extends the wait to 5.0
    assert group.tick(4.0).replies == []
    out = group.tick(5.0)
    assert set(joins(out)) == {first, second} and group.generation == 1


def test_joins_the_group_cannot_accept_are_refused_with_kafka_errors() -> None:
    group = new_group(max_size=1)
    _, out = group.join(request(session_ms=100), 0.0)
    assert out.replies[0].error is ErrorCode.invalid_session_timeout
    join_new(group, 0.0)
    _, out = group.join(request(protocols=(("sticky", b""),)), 0.0)
    assert out.replies[0].error is ErrorCode.inconsistent_group_protocol
    _, out = group.join(request(), 0.0)
    assert out.replies[0].error is ErrorCode.group_max_size_reached
    _, out = group.join(request("nobody"), 0.0)
    assert out.replies[0].error is ErrorCode.unknown_member_id


def test_the_protocol_most_members_prefer_among_those_all_support_wins() -> None:
    group = new_group(delay_ms=1000)
    both = (("sticky", b"s"), ("range", b"r"))
    a, _ = group.join(request(instance="a", protocols=both), 0.0)
    group.join(request(instance="b", protocols=(("range", b"r"), ("sticky", b"s"))), 0.0)
    group.join(request(instance="c", protocols=both), 0.0)
    out = group.tick(1.0)
    assert joins(out)[a].protocol_name == "sticky"
    assert [m.metadata for m in joins(out)[a].members] == [b"s", b"s", b"s"]


def test_a_failed_assignment_write_answers_the_syncs_and_rebalances() -> None:
    group = new_group()
    first, _ = join_new(group, 0.0)
    out = group.sync(first, None, 1, None, None, {first: b"x"}, 0.0)
    assert out.persist is not None
    out = group.persisted(1, ErrorCode.not_coordinator, 0.1)
    assert syncs(out)[first].error is ErrorCode.not_coordinator
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.members[first].assignment == b""


def test_a_loaded_group_is_stable_with_its_members_or_empty() -> None:
    group = new_group()
    first, _ = join_new(group, 0.0)
    stabilize(group, first, 0.0, {first: b"x"})
    value = group.to_value(123)
    copy = new_group()
    copy.load(value, 50.0)
    assert copy.state is GroupState.STABLE and copy.generation == 1
    assert copy.heartbeat(first, None, 1, 51.0) is ErrorCode.none
    assert copy.sync(first, None, 1, None, None, {}, 51.0).replies[0].assignment == b"x"


def test_transitions_kafka_forbids_are_refused() -> None:
    group = new_group()
    with pytest.raises(IllegalStateTransition):
        group._transition(GroupState.STABLE)  # Empty -> Stable skips a rebalance
    group.mark_dead()
    _, out = group.join(request(), 0.0)
    assert out.replies[0].error is ErrorCode.coordinator_not_available


def test_a_loaded_member_that_never_returns_expires_while_a_newcomer_waits_to_join() -> None:
    """The coordinator failover case: the new coordinator restores the group with its old
    member id, the consumer rejoins under a new id, and the old id must time out by its
    session (not the 300 s rebalance timeout) for the rebalance to complete."""
    group = new_group()
    old, _ = join_new(group, 0.0)
    stabilize(group, old, 0.0, {old: b"x"})
    restored = new_group()
    restored.load(group.to_value(1), 100.0)  # session deadline: 100 + 10 s
    newcomer, out = join_new(restored, 101.0, client="d")
    assert out.replies == [] and restored.state is GroupState.PREPARING_REBALANCE
    deadline = restored.next_deadline()
    assert deadline == pytest.approx(100.0 + SESSION_MS / 1000)
    out = restored.tick(deadline)
    assert list(restored.members) == [newcomer] and joins(out)[newcomer].leader == newcomer
    after = restored.next_deadline()
    assert after is None or after > deadline  # nothing overdue is left behind
