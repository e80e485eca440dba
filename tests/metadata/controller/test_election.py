"""Elections keep the partition invariants whatever brokers leave or return."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.controller.election import broker_leaving, broker_returning
from metadata.image import MetadataImage
from metadata.records import NO_LEADER, FenceBroker, MetadataRecord, Partition, Topic, UnfenceBroker
from tests.metadata.controller.support import brokers, build, context

BROKERS = (1, 2, 3, 4)


@st.composite
def cluster(draw: st.DrawFn) -> MetadataImage:
    """Brokers 1-4 (some fenced) and partitions in any legal state."""
    image = brokers(*BROKERS)
    fenced = draw(st.sets(st.sampled_from(BROKERS)))
    records: list[MetadataRecord] = [FenceBroker(b, 100 + b) for b in sorted(fenced)]
    topic_id = uuid.UUID(int=1)
    records.append(Topic("t", topic_id))
    for index in range(draw(st.integers(1, 6))):
        replicas = tuple(draw(st.permutations(BROKERS))[: draw(st.integers(1, 4))])
        isr = tuple(r for r in replicas if draw(st.booleans())) or replicas[:1]
        leader = draw(st.sampled_from((*isr, NO_LEADER)))
        records.append(Partition(topic_id, index, replicas, isr, leader))
    return build(*records, image=image)


@settings(max_examples=200, deadline=None)
@given(image=cluster(), broker_id=st.sampled_from(BROKERS), unclean=st.booleans())
def test_a_leaving_broker_leads_nothing_and_stays_only_as_a_last_isr_member(
    image: MetadataImage, broker_id: int, unclean: bool
) -> None:
    ctx = context(image, unclean_leader_election_enable=unclean)
    after = build(*broker_leaving(ctx, broker_id), image=image)  # the delta checks legality
    before_partitions = next(iter(image.topics.by_id.values())).partitions
    for index, partition in next(iter(after.topics.by_id.values())).partitions.items():
        before = before_partitions[index]
        assert partition.leader != broker_id
        if broker_id in partition.isr:
            assert partition.isr == (broker_id,)
        if partition.leader != NO_LEADER:
            assert partition.leader in partition.isr
        if partition.leader not in (before.leader, NO_LEADER):  # a new leader, by the rules
            assert ctx.is_usable(partition.leader)
            if partition.leader not in before.isr:
                assert unclean and partition.isr == (partition.leader,)


@settings(max_examples=200, deadline=None)
@given(image=cluster(), broker_id=st.sampled_from(BROKERS))
def test_a_returning_broker_leads_partitions_whose_isr_it_holds(
    image: MetadataImage, broker_id: int
) -> None:
    broker = image.cluster.brokers[broker_id]
    if not broker.fenced:
        return
    records = [UnfenceBroker(broker_id, broker.epoch), *broker_returning(context(image), broker_id)]
    after = build(*records, image=image)
    for partition in next(iter(after.topics.by_id.values())).partitions.values():
        if partition.leader == NO_LEADER:
            assert broker_id not in partition.isr
        else:
            assert partition.leader in partition.isr
