"""ElectLeaders and AlterPartition: who may lead, and who may change an ISR."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.controller.partitions import PREFERRED, UNCLEAN, alter_partition, elect_leaders
from metadata.image import MetadataImage
from metadata.records import NO_LEADER, FenceBroker, PartitionChange
from tests.metadata.controller.support import (
    apply,
    brokers,
    build,
    context,
    request_module,
    roundtrip,
    with_topic,
)

TID = uuid.UUID(int=42)
EL = request_module(43, 2)


def elect(election_type: int, partitions: dict[str, tuple[int, ...]] | None) -> Any:
    return EL.ElectLeadersRequest(
        election_type=election_type,
        topic_partitions=None
        if partitions is None
        else tuple(EL.TopicPartitions(topic=t, partitions=p) for t, p in partitions.items()),
    )


def outcome(response: Any) -> dict[tuple[str, int], ErrorCode]:
    return {
        (r.topic, p.partition_id): p.error_code
        for r in response.replica_election_results
        for p in r.partition_result
    }


def image() -> MetadataImage:
    # p0 led by its preferred replica; p1 led by 2 though 1 is preferred; p2 offline, ISR [3]
    # with 3 fenced; p3 offline with its only ISR member fenced and another replica alive.
    base = brokers(1, 2, 3)
    img = with_topic(
        base,
        "t",
        ((1, 2), (1, 2), 1),
        ((1, 2), (1, 2), 2),
        ((3, 2), (3,), 3),
        ((3, 1), (3,), 3),
        topic_id=TID,
    )
    return build(
        FenceBroker(3, 103),
        PartitionChange(TID, 2, leader=NO_LEADER),
        PartitionChange(TID, 3, leader=NO_LEADER),
        image=img,
    )


def test_preferred_election() -> None:
    img = image()
    result = elect_leaders(context(img), elect(PREFERRED, {"t": (0, 1, 2), "u": (0,)}), 2)
    assert outcome(roundtrip(result.response)) == {
        ("t", 0): ErrorCode.election_not_needed,
        ("t", 1): ErrorCode.none,
        ("t", 2): ErrorCode.preferred_leader_not_available,
        ("u", 0): ErrorCode.unknown_topic_or_partition,
    }
    after = apply(img, result).topics.by_id[TID].partitions[1]
    assert (after.leader, after.leader_epoch) == (1, 1)


def test_unclean_election_picks_a_live_replica_outside_the_isr() -> None:
    img = image()
    result = elect_leaders(context(img), elect(UNCLEAN, {"t": (0, 2, 3)}), 2)
    assert outcome(result.response) == {
        ("t", 0): ErrorCode.election_not_needed,
        ("t", 2): ErrorCode.none,
        ("t", 3): ErrorCode.none,
    }
    partitions = apply(img, result).topics.by_id[TID].partitions
    assert (partitions[2].leader, partitions[2].isr) == (2, (2,))
    assert (partitions[3].leader, partitions[3].isr) == (1, (1,))


def test_unclean_election_without_any_live_replica() -> None:
    img = build(FenceBroker(2, 102), image=image())
    result = elect_leaders(context(img), elect(UNCLEAN, {"t": (2,)}), 2)
    assert outcome(result.response) == {("t", 2): ErrorCode.eligible_leaders_not_available}


def test_electing_everything_lists_only_partitions_that_needed_it() -> None:
    result = elect_leaders(context(image()), elect(PREFERRED, None), 2)
    assert outcome(result.response) == {
        ("t", 1): ErrorCode.none,
        ("t", 2): ErrorCode.preferred_leader_not_available,
        ("t", 3): ErrorCode.preferred_leader_not_available,
    }


def test_elect_leaders_v0_is_preferred_only() -> None:
    module = request_module(43, 0)
    request = module.ElectLeadersRequest(
        topic_partitions=(module.TopicPartitions(topic="t", partitions=(1,)),)
    )
    result = elect_leaders(context(image()), request, 0)
    assert outcome(roundtrip(result.response)) == {("t", 1): ErrorCode.none}


# ---- AlterPartition ----------------------------------------------------------------------------

AP = request_module(56, 3)


def alter(
    broker_id: int,
    broker_epoch: int,
    isr: tuple[int, ...],
    *,
    leader_epoch: int = 0,
    partition_epoch: int = 0,
    partition: int = 0,
    topic_id: uuid.UUID = TID,
    member_epochs: dict[int, int] | None = None,
) -> Any:
    return AP.AlterPartitionRequest(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topics=(
            AP.TopicData(
                topic_id=topic_id,
                partitions=(
                    AP.PartitionData(
                        partition_index=partition,
                        leader_epoch=leader_epoch,
                        new_isr_with_epochs=tuple(
                            AP.BrokerState(
                                broker_id=b, broker_epoch=(member_epochs or {}).get(b, -1)
                            )
                            for b in isr
                        ),
                        partition_epoch=partition_epoch,
                    ),
                ),
            ),
        ),
    )


def isr_image() -> MetadataImage:
    return with_topic(brokers(1, 2, 3), "t", ((1, 2, 3), (1, 2), 1), topic_id=TID)


def partition_answer(response: Any) -> Any:
    (topic,) = response.topics
    (partition,) = topic.partitions
    return partition


def test_leader_grows_and_shrinks_its_isr() -> None:
    img = isr_image()
    result = alter_partition(context(img), alter(1, 101, (1, 2, 3)), 3)
    answer = partition_answer(roundtrip(result.response))
    assert (answer.error_code, answer.leader_id, answer.isr, answer.partition_epoch) == (
        ErrorCode.none,
        1,
        (1, 2, 3),
        1,
    )
    after = apply(img, result)
    partition = after.topics.by_id[TID].partitions[0]
    assert (partition.isr, partition.partition_epoch, partition.leader_epoch) == ((1, 2, 3), 1, 0)
    result = alter_partition(context(after), alter(1, 101, (1,), partition_epoch=1), 3)
    assert partition_answer(result.response).isr == (1,)


@pytest.mark.parametrize(
    ("request_", "code"),
    [
        (alter(1, 101, (1, 2), leader_epoch=-1), ErrorCode.fenced_leader_epoch),
        (alter(1, 101, (1, 2), partition_epoch=3), ErrorCode.invalid_update_version),
        (alter(2, 102, (1, 2)), ErrorCode.invalid_request),
        (alter(1, 101, (2, 3)), ErrorCode.invalid_request),
        (alter(1, 101, (1, 9)), ErrorCode.invalid_request),
        (alter(1, 101, (1, 2), member_epochs={2: 5}), ErrorCode.ineligible_replica),
        (alter(1, 101, (1,), partition=7), ErrorCode.unknown_topic_or_partition),
        (alter(1, 101, (1,), topic_id=uuid.UUID(int=9)), ErrorCode.unknown_topic_id),
    ],
)
def test_alter_partition_refusals(request_: Any, code: ErrorCode) -> None:
    result = alter_partition(context(isr_image()), request_, 3)
    assert partition_answer(result.response).error_code == code
    assert result.records == ()


def test_a_fenced_broker_may_not_join_the_isr() -> None:
    img = build(FenceBroker(3, 103), image=isr_image())
    result = alter_partition(context(img), alter(1, 101, (1, 2, 3)), 3)
    assert partition_answer(result.response).error_code == ErrorCode.ineligible_replica


def test_a_stale_broker_epoch_refuses_the_whole_request() -> None:
    result = alter_partition(context(isr_image()), alter(1, 99, (1,)), 3)
    assert result.response.error_code == ErrorCode.stale_broker_epoch
    assert result.records == ()


def test_alter_partition_v2_takes_plain_broker_ids() -> None:
    module = request_module(56, 2)
    request = module.AlterPartitionRequest(
        broker_id=1,
        broker_epoch=101,
        topics=(
            module.TopicData(
                topic_id=TID,
                partitions=(
                    module.PartitionData(
                        partition_index=0, leader_epoch=0, new_isr=(1, 3), partition_epoch=0
                    ),
                ),
            ),
        ),
    )
    result = alter_partition(context(isr_image()), request, 2)
    assert partition_answer(roundtrip(result.response)).isr == (1, 3)
