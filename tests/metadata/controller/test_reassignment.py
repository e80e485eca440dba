"""KIP-455 reassignment on the controller: start, completion by AlterPartition, cancel, list."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from metadata.controller import reassignment
from metadata.controller.partitions import alter_partition
from metadata.controller.reassignment import (
    alter_partition_reassignments,
    list_partition_reassignments,
    reassigning,
)
from metadata.image import MetadataImage, PartitionRegistration
from metadata.records import TOPIC_RESOURCE, Config, PartitionChange
from tests.metadata.controller.support import (
    apply,
    brokers,
    build,
    context,
    request_module,
    roundtrip,
    with_topic,
)

TID = uuid.UUID(int=45)
APR = request_module(45, 1)
LPR = request_module(46, 0)
AP = request_module(56, 3)


def reassign(targets: dict[tuple[str, int], tuple[int, ...] | None], **options: Any) -> Any:
    topics: dict[str, list[Any]] = {}
    for (topic, index), replicas in targets.items():
        topics.setdefault(topic, []).append(
            APR.ReassignablePartition(partition_index=index, replicas=replicas)
        )
    return APR.AlterPartitionReassignmentsRequest(
        topics=tuple(
            APR.ReassignableTopic(name=name, partitions=tuple(parts))
            for name, parts in topics.items()
        ),
        **options,
    )


def errors(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions
    }


def isr_update(image: MetadataImage, leader: int, isr: tuple[int, ...]) -> Any:
    """What the partition's leader sends when its ISR becomes ``isr``."""
    partition = part(image)
    return AP.AlterPartitionRequest(
        broker_id=leader,
        broker_epoch=100 + leader,
        topics=(
            AP.TopicData(
                topic_id=TID,
                partitions=(
                    AP.PartitionData(
                        partition_index=0,
                        leader_epoch=partition.leader_epoch,
                        new_isr_with_epochs=tuple(
                            AP.BrokerState(broker_id=b, broker_epoch=-1) for b in isr
                        ),
                        partition_epoch=partition.partition_epoch,
                    ),
                ),
            ),
        ),
    )


def part(image: MetadataImage, index: int = 0) -> PartitionRegistration:
    return image.topics.by_id[TID].partitions[index]


def start(replicas: tuple[int, ...], isr: tuple[int, ...], leader: int) -> MetadataImage:
    return with_topic(brokers(1, 2, 3, 4), "t", (replicas, isr, leader), topic_id=TID)


def test_a_move_adds_the_new_replicas_first_and_keeps_leader_and_isr() -> None:
    img = start((1, 2), (1, 2), 1)
    result = alter_partition_reassignments(context(img), reassign({("t", 0): (2, 3)}), 1)
    assert errors(roundtrip(result.response)) == {("t", 0): ErrorCode.none}
    after = part(apply(img, result))
    assert (after.replicas, after.adding_replicas, after.removing_replicas) == (
        (2, 3, 1),
        (3,),
        (1,),
    )
    assert (after.isr, after.leader, after.leader_epoch) == ((1, 2), 1, 0)


def test_the_move_completes_when_every_target_replica_joins_the_isr() -> None:
    img = start((1, 2), (1, 2), 2)
    img = apply(img, alter_partition_reassignments(context(img), reassign({("t", 0): (2, 3)}), 1))
    result = alter_partition(context(img), isr_update(img, 2, (1, 2, 3)), 3)
    (topic,) = roundtrip(result.response).topics
    (answer,) = topic.partitions
    assert (answer.error_code, answer.leader_id, answer.isr) == (ErrorCode.none, 2, (2, 3))
    after = part(apply(img, result))
    assert (after.replicas, after.isr, after.leader) == ((2, 3), (2, 3), 2)
    assert not reassigning(after)
    # Broker 1 was dropped: the epoch moves so its fetches at the old epoch are fenced.
    assert after.leader_epoch == part(img).leader_epoch + 1
    assert answer.leader_epoch == after.leader_epoch


def test_completion_moves_leadership_off_a_removed_leader() -> None:
    img = start((1, 2), (1, 2), 1)
    img = apply(img, alter_partition_reassignments(context(img), reassign({("t", 0): (2, 3)}), 1))
    result = alter_partition(context(img), isr_update(img, 1, (1, 2, 3)), 3)
    (topic,) = result.response.topics
    assert topic.partitions[0].error_code == ErrorCode.new_leader_elected
    after = part(apply(img, result))
    assert (after.replicas, after.isr, after.leader) == ((2, 3), (2, 3), 2)


def test_the_move_waits_for_every_target_replica_not_just_the_added_ones() -> None:
    # Replica 2 (kept) is out of the ISR: the new replica 3 catching up is not enough, or the
    # partition would end with 2 as a replica that may lack committed writes ...
    img = start((1, 2), (1,), 1)
    img = apply(img, alter_partition_reassignments(context(img), reassign({("t", 0): (2, 3)}), 1))
    img = apply(img, alter_partition(context(img), isr_update(img, 1, (1, 3)), 3))
    assert reassigning(part(img)) and part(img).isr == (1, 3)
    # ... and it completes only once 2 is back.
    img = apply(img, alter_partition(context(img), isr_update(img, 1, (1, 3, 2)), 3))
    assert (part(img).replicas, part(img).isr, part(img).leader) == ((2, 3), (3, 2), 2)


def test_a_reorder_or_a_shrink_within_the_isr_completes_at_once() -> None:
    img = start((1, 2, 3), (1, 2, 3), 1)
    result = alter_partition_reassignments(
        context(img), reassign({("t", 0): (2, 1)}, allow_replication_factor_change=True), 1
    )
    after = part(apply(img, result))
    assert (after.replicas, after.isr, after.leader, after.leader_epoch) == ((2, 1), (1, 2), 1, 1)
    assert not reassigning(after)


def test_invalid_targets_are_refused_with_kafkas_codes() -> None:
    img = start((1, 2), (1, 2), 1)
    targets: dict[tuple[str, int], tuple[int, ...] | None] = {
        ("t", 0): (2, 2),
        ("t", 1): (1, 2),
        ("u", 0): (1, 2),
    }
    result = alter_partition_reassignments(context(img), reassign(targets), 1)
    assert errors(result.response) == {
        ("t", 0): ErrorCode.invalid_replica_assignment,
        ("t", 1): ErrorCode.unknown_topic_or_partition,
        ("u", 0): ErrorCode.unknown_topic_or_partition,
    }
    for target, code in [
        ((), ErrorCode.invalid_replica_assignment),
        ((2, 9), ErrorCode.invalid_replica_assignment),  # broker 9 is not registered
        (None, ErrorCode.no_reassignment_in_progress),
    ]:
        result = alter_partition_reassignments(context(img), reassign({("t", 0): target}), 1)
        assert errors(result.response) == {("t", 0): code}, target
        assert result.records == ()
    result = alter_partition_reassignments(
        context(img),
        reassign({("t", 0): (2, 3, 4)}, allow_replication_factor_change=False),
        1,
    )
    assert errors(result.response) == {("t", 0): ErrorCode.invalid_replication_factor}


def test_one_request_changes_at_most_max_records_per_user_op_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(reassignment, "MAX_RECORDS_PER_USER_OP", 2)
    img = with_topic(brokers(1, 2, 3), "t", *[((1,), (1,), 1)] * 4, topic_id=TID)
    targets: dict[tuple[str, int], tuple[int, ...] | None] = {("t", i): (2,) for i in range(4)}
    result = alter_partition_reassignments(context(img), reassign(targets), 1)
    assert (
        list(errors(result.response).values())
        == [ErrorCode.none] * 2 + [ErrorCode.policy_violation] * 2
    )
    assert len(result.records) == 2


def test_cancel_reverts_to_the_original_replicas() -> None:
    img = start((1, 2), (1, 2), 1)
    img = apply(img, alter_partition_reassignments(context(img), reassign({("t", 0): (2, 3)}), 1))
    result = alter_partition_reassignments(context(img), reassign({("t", 0): None}), 1)
    assert errors(result.response) == {("t", 0): ErrorCode.none}
    after = part(apply(img, result))
    assert (after.replicas, after.isr, after.leader) == ((2, 1), (1, 2), 1)
    assert not reassigning(after)
    assert after.leader_epoch == part(img).leader_epoch + 1  # replica 3 dropped


def test_a_cancel_that_needs_an_unclean_election_needs_it_enabled() -> None:
    img = start((1, 2), (1, 2), 1)
    img = apply(img, alter_partition_reassignments(context(img), reassign({("t", 0): (3, 4)}), 1))
    img = apply(img, alter_partition(context(img), isr_update(img, 1, (1, 3)), 3))
    # Leadership passes to 3 and the ISR shrinks to it: every ISR member is an adding replica.
    img = build(PartitionChange(TID, 0, isr=(3,), leader=3), image=img)
    result = alter_partition_reassignments(context(img), reassign({("t", 0): None}), 1)
    assert errors(result.response) == {("t", 0): ErrorCode.invalid_replica_assignment}
    assert result.records == ()
    img = build(Config(TOPIC_RESOURCE, "t", "unclean.leader.election.enable", "true"), image=img)
    result = alter_partition_reassignments(context(img), reassign({("t", 0): None}), 1)
    assert errors(result.response) == {("t", 0): ErrorCode.none}
    after = part(apply(img, result))
    assert (after.replicas, after.isr, after.leader) == ((1, 2), (1,), 1)


def test_a_partition_named_twice_changes_from_its_first_change() -> None:
    img = start((1, 2), (1, 2), 1)
    request = APR.AlterPartitionReassignmentsRequest(
        topics=(
            APR.ReassignableTopic(
                name="t",
                partitions=(
                    APR.ReassignablePartition(partition_index=0, replicas=(2, 3)),
                    APR.ReassignablePartition(partition_index=0, replicas=None),
                ),
            ),
        )
    )
    result = alter_partition_reassignments(context(img), request, 1)
    after = part(apply(img, result))  # each record replays legally on the one before
    assert (after.replicas, after.isr) == ((2, 1), (1, 2)) and not reassigning(after)


def test_list_shows_only_partitions_being_reassigned() -> None:
    img = with_topic(start((1, 2), (1, 2), 1), "u", ((1,), (1,), 1), ((2,), (2,), 2))
    img = apply(img, alter_partition_reassignments(context(img), reassign({("u", 1): (2, 3)}), 1))

    def listed(topics: Any) -> dict[tuple[str, int], tuple[tuple[int, ...], ...]]:
        result = list_partition_reassignments(
            context(img), LPR.ListPartitionReassignmentsRequest(topics=topics), 0
        )
        response = roundtrip(result.response)
        return {
            (t.name, p.partition_index): (p.replicas, p.adding_replicas, p.removing_replicas)
            for t in response.topics
            for p in t.partitions
        }

    assert listed(None) == {("u", 1): ((2, 3), (3,), ())}
    named = (
        LPR.ListPartitionReassignmentsTopics(name="u", partition_indexes=(0, 1, 5)),
        LPR.ListPartitionReassignmentsTopics(name="nope", partition_indexes=(0,)),
    )
    assert listed(named) == {("u", 1): ((2, 3), (3,), ())}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("reassign"), st.permutations([1, 2, 3, 4]), st.integers(1, 4)),
            st.tuples(st.just("cancel"), st.just([]), st.just(0)),
            st.tuples(st.just("isr"), st.permutations([1, 2, 3, 4]), st.integers(1, 4)),
        ),
        max_size=12,
    )
)
def test_no_replica_reaches_the_isr_without_the_leader_and_completion_keeps_data(
    steps: list[tuple[str, list[int], int]],
) -> None:
    """Whatever mix of reassignments, cancels and leader ISR updates: a replica joins the ISR
    only when the leader's AlterPartition puts it there, the ISR is never emptied, and every
    state is legal (replayed by MetadataDelta, which checks the registration invariants). A
    new target naming a replica still being added keeps it as an ordinary, maybe out-of-sync,
    replica: Kafka computes a new target from the current replica list."""
    img = start((1, 2), (1, 2), 1)
    for kind, order, size in steps:
        before = part(img)
        if kind == "reassign":
            result = alter_partition_reassignments(
                context(img), reassign({("t", 0): tuple(order[:size])}), 1
            )
        elif kind == "cancel":
            result = alter_partition_reassignments(context(img), reassign({("t", 0): None}), 1)
        else:
            if before.leader < 0:
                continue
            grown = tuple(dict.fromkeys([before.leader, *order[:size]]))
            isr = tuple(r for r in grown if r in before.replicas)
            result = alter_partition(context(img), isr_update(img, before.leader, isr), 3)
        img = apply(img, result)
        after = part(img)
        if kind == "isr":
            (answer,) = result.response.topics[0].partitions
            if answer.error_code == ErrorCode.none:  # the answer is the replayed state
                assert (answer.leader_id, answer.leader_epoch, answer.isr) == (
                    after.leader,
                    after.leader_epoch,
                    after.isr,
                )
                assert answer.partition_epoch == after.partition_epoch
            else:
                assert answer.error_code == ErrorCode.new_leader_elected
                assert after.leader != before.leader
        else:  # only the leader's AlterPartition adds to the ISR
            assert set(after.isr) <= set(before.isr), (before, after)
        assert after.isr, (before, after)  # someone always holds every committed write
        if kind == "isr" and reassigning(before) and not reassigning(after):
            # Completed by the leader's report: every remaining replica is in sync.
            assert set(after.replicas) <= set(after.isr)


@pytest.mark.parametrize("version", [0, 1])
def test_both_versions_encode(version: int) -> None:
    module = request_module(45, version)
    request = module.AlterPartitionReassignmentsRequest(
        topics=(
            module.ReassignableTopic(
                name="t",
                partitions=(module.ReassignablePartition(partition_index=0, replicas=(3,)),),
            ),
        )
    )
    img = start((1, 2), (1, 2), 1)
    result = alter_partition_reassignments(context(img), request, version)
    assert errors(roundtrip(result.response)) == {("t", 0): ErrorCode.none}
