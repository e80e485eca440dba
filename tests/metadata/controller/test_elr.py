"""KIP-966 on the controller: every ELR transition, and a model check that an elected leader
always holds every committed record unless unclean election (or an unclean shutdown) says
otherwise."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from metadata.controller.cluster import broker_registration, fence_broker
from metadata.controller.configs import incremental_alter_configs
from metadata.controller.election import broker_leaving, broker_returning
from metadata.controller.partitions import UNCLEAN, alter_partition, elect_leaders
from metadata.controller.reassignment import alter_partition_reassignments
from metadata.image import MetadataImage, PartitionRegistration
from metadata.records import (
    BROKER_RESOURCE,
    ELR_FEATURE,
    NO_LEADER,
    TOPIC_RESOURCE,
    FeatureLevel,
    MetadataRecord,
    Partition,
    Topic,
    UnfenceBroker,
)
from tests.metadata.controller.support import (
    CLUSTER_ID,
    apply,
    brokers,
    build,
    context,
    request_module,
)
from tests.metadata.controller.test_reassignment import reassign

TID = uuid.UUID(int=42)
BR = request_module(62, 4)
AP = request_module(56, 3)
IAC = request_module(44, 1)
EL = request_module(43, 2)
MIN_ISR = 2


def cluster(
    isr: tuple[int, ...] = (1, 2, 3),
    leader: int = 1,
    *,
    elr: tuple[int, ...] = (),
    last_known_elr: tuple[int, ...] = (),
    feature: int = 1,
) -> MetadataImage:
    """Brokers 1-3 and topic ``t`` with one RF3 partition, ELR at level ``feature``."""
    records: list[MetadataRecord] = [
        FeatureLevel(ELR_FEATURE, feature),
        Topic("t", TID),
        Partition(
            TID,
            0,
            (1, 2, 3),
            isr,
            leader,
            eligible_leader_replicas=elr,
            last_known_elr=last_known_elr,
        ),
    ]
    return build(*records, image=brokers(1, 2, 3))


def ctx(image: MetadataImage, **overrides: Any) -> Any:
    return context(image, min_insync_replicas=MIN_ISR, **overrides)


def partition(image: MetadataImage) -> PartitionRegistration:
    return image.topics.by_id[TID].partitions[0]


def state(image: MetadataImage) -> tuple[int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(leader, ISR, ELR, last known ELR) of t-0."""
    p = partition(image)
    return p.leader, p.isr, p.elr, p.last_known_elr


def fence(image: MetadataImage, broker_id: int) -> MetadataImage:
    return build(*fence_broker(ctx(image), broker_id), image=image)


def unfence(image: MetadataImage, broker_id: int, **overrides: Any) -> MetadataImage:
    epoch = image.cluster.brokers[broker_id].epoch
    records = [
        UnfenceBroker(broker_id, epoch),
        *broker_returning(ctx(image, **overrides), broker_id),
    ]
    return build(*records, image=image)


def reregister(image: MetadataImage, broker_id: int, *, clean: bool) -> MetadataImage:
    """A new incarnation of ``broker_id``; ``clean`` names the epoch it shut down in."""
    return apply(image, registration(image, broker_id, clean=clean))


def registration(image: MetadataImage, broker_id: int, *, clean: bool) -> Any:
    """The controller's answer to a new incarnation of ``broker_id``."""
    old = image.cluster.brokers[broker_id]
    request = BR.BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=uuid.uuid4(),
        listeners=(BR.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        features=(),
        rack=None,
        previous_broker_epoch=old.epoch if clean else -1,
    )
    return broker_registration(ctx(image), request, 4, image.offset)


def shrink(image: MetadataImage, isr: tuple[int, ...]) -> Any:
    p = partition(image)
    leader = image.cluster.brokers[p.leader]
    request = AP.AlterPartitionRequest(
        broker_id=p.leader,
        broker_epoch=leader.epoch,
        topics=(
            AP.TopicData(
                topic_id=TID,
                partitions=(
                    AP.PartitionData(
                        partition_index=0,
                        leader_epoch=p.leader_epoch,
                        new_isr_with_epochs=tuple(
                            AP.BrokerState(broker_id=b, broker_epoch=-1) for b in isr
                        ),
                        partition_epoch=p.partition_epoch,
                    ),
                ),
            ),
        ),
    )
    return alter_partition(ctx(image), request, 3)


def test_the_isr_shrinking_below_min_isr_keeps_the_leavers_eligible() -> None:
    image = fence(cluster(), 3)
    assert state(image) == (1, (1, 2), (), ())  # at min ISR: nothing to keep
    image = fence(image, 2)
    assert state(image) == (1, (1,), (2,), ())
    image = fence(image, 1)  # the last ISR member: the ISR empties, no leader
    assert state(image) == (NO_LEADER, (), (1, 2), (1,))


def test_an_eligible_replica_leads_cleanly_when_the_isr_is_empty() -> None:
    image = fence(fence(fence(cluster(), 3), 2), 1)
    image = unfence(image, 2)
    assert state(image) == (2, (2,), (1,), ())  # led from the ELR; 1 is still eligible
    assert partition(image).leader_epoch == 2  # one bump losing the leader, one electing
    image = unfence(image, 3)  # not eligible: it left when the ISR was at min ISR
    assert state(image) == (2, (2,), (1,), ())


def test_with_no_eligible_replica_alive_only_unclean_election_elects_outside() -> None:
    image = fence(fence(fence(cluster(), 3), 2), 1)
    assert state(unfence(image, 3)) == (NO_LEADER, (), (1, 2), (1,))
    assert state(unfence(image, 3, unclean_leader_election_enable=True)) == (3, (3,), (), ())


def test_elect_leaders_unclean_prefers_the_elr() -> None:
    image = fence(fence(fence(cluster(), 3), 2), 1)
    image = build(UnfenceBroker(2, 102), UnfenceBroker(3, 103), image=image)
    request = EL.ElectLeadersRequest(
        election_type=UNCLEAN,
        topic_partitions=(EL.TopicPartitions(topic="t", partitions=(0,)),),
    )
    after = apply(image, elect_leaders(ctx(image), request, 2))
    assert state(after) == (2, (2,), (1,), ())


def test_an_unclean_shutdown_leaves_the_elr_and_a_clean_one_does_not() -> None:
    image = fence(fence(fence(cluster(), 3), 2), 1)
    assert state(reregister(image, 2, clean=True)) == (NO_LEADER, (), (1, 2), (1,))
    assert state(reregister(image, 2, clean=False)) == (NO_LEADER, (), (1,), (1,))


def test_the_last_known_leader_recovers_a_partition_with_no_isr_and_no_elr() -> None:
    image = fence(fence(fence(cluster(), 3), 2), 1)
    image = reregister(reregister(image, 2, clean=False), 1, clean=False)
    assert state(image) == (NO_LEADER, (), (), (1,))
    assert state(unfence(image, 2)) == (NO_LEADER, (), (), (1,))  # 2 never led
    assert state(unfence(image, 1)) == (1, (1,), (), ())


def test_alter_partition_shrinking_below_min_isr_fills_the_elr_and_growing_clears_it() -> None:
    image = cluster()
    result = shrink(image, (1,))
    (topic,) = result.response.topics
    assert topic.partitions[0].error_code == ErrorCode.none
    image = apply(image, result)
    assert state(image) == (1, (1,), (2, 3), ())
    image = apply(image, shrink(image, (1, 2)))
    assert state(image) == (1, (1, 2), (), ())


def alter_min_isr(image: MetadataImage, resource_type: int, name: str) -> Any:
    request = IAC.IncrementalAlterConfigsRequest(
        resources=(
            IAC.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=(
                    IAC.AlterableConfig(name="min.insync.replicas", config_operation=0, value="3"),
                ),
            ),
        ),
        validate_only=False,
    )
    return incremental_alter_configs(ctx(image), request, 1)


def test_a_min_isr_change_clears_the_elr_and_broker_overrides_are_refused() -> None:
    image = fence(fence(cluster(), 3), 2)
    assert partition(image).elr == (2,)
    for resource_type, name in ((TOPIC_RESOURCE, "t"), (BROKER_RESOURCE, "")):
        after = apply(image, alter_min_isr(image, resource_type, name))
        assert state(after) == (1, (1,), (), ())
    refused = alter_min_isr(image, BROKER_RESOURCE, "1")
    assert refused.records == ()
    assert refused.response.responses[0].error_code == ErrorCode.invalid_config


def test_without_the_feature_the_last_isr_member_stays_and_nothing_is_eligible() -> None:
    image = fence(fence(fence(cluster(feature=0), 3), 2), 1)
    assert state(image) == (NO_LEADER, (1,), (), ())
    assert state(unfence(image, 2)) == (NO_LEADER, (1,), (), ())
    assert state(unfence(image, 1)) == (1, (1,), (), ())


def test_turning_the_feature_off_clears_what_it_kept() -> None:
    image = cluster((1,), 1, elr=(2, 3), feature=0)
    after = build(*broker_leaving(ctx(image), 1), image=image)
    assert state(after) == (NO_LEADER, (1,), (), ())


# ---- the model check --------------------------------------------------------------------------


class ElrMachine(RuleBasedStateMachine):
    """One RF3 partition, min ISR 2, under fencing, unfencing, clean and unclean restarts,
    ISR shrinks and expansions, and acks=all writes. ``holders`` is the model: the
    replicas whose logs hold every committed record (a write commits only with the ISR at
    min ISR or above and reaches the whole ISR; an unclean shutdown may lose it). The
    property: a leader elected without unclean election holds every committed record."""

    def __init__(self) -> None:
        super().__init__()
        self.unclean = False
        self.image = cluster()
        self.holders = {1, 2, 3}

    def apply(self, records: list[MetadataRecord] | tuple[MetadataRecord, ...]) -> None:
        before = partition(self.image)
        self.image = build(*records, image=self.image)
        after = partition(self.image)
        if after.leader not in (NO_LEADER, before.leader):
            # Kafka 4.1's recovery through the last known leader, once ISR and ELR are
            # empty (an unclean shutdown may empty the ELR in this very change).
            from_last_known = before.last_known_elr == (after.leader,) and (
                after.leader not in before.isr + before.elr
            )
            if not (self.unclean or from_last_known):
                # From the ISR, or from the ELR once the ISR (less whoever left) is empty.
                assert after.leader in before.isr + before.elr, (
                    f"{after.leader} elected from outside ISR {before.isr} / ELR {before.elr}"
                )
                assert after.leader in self.holders, f"{after.leader} lacks committed records"
            if self.unclean or from_last_known:
                self.holders = {after.leader}  # what it has is what the partition has now

    @rule(broker_id=st.sampled_from((1, 2, 3)))
    def fence(self, broker_id: int) -> None:
        if not self.image.cluster.brokers[broker_id].fenced:
            self.apply(fence_broker(ctx(self.image), broker_id))

    @rule(broker_id=st.sampled_from((1, 2, 3)))
    def unfence(self, broker_id: int) -> None:
        broker = self.image.cluster.brokers[broker_id]
        if broker.fenced:
            c = ctx(self.image, unclean_leader_election_enable=self.unclean)
            self.apply([UnfenceBroker(broker_id, broker.epoch), *broker_returning(c, broker_id)])

    @rule(broker_id=st.sampled_from((1, 2, 3)), clean=st.booleans())
    def restart(self, broker_id: int, clean: bool) -> None:
        if not self.image.cluster.brokers[broker_id].fenced:
            self.fence(broker_id)
        if not clean:
            self.holders.discard(broker_id)  # its unflushed tail is gone
        # Leaving an ELR may leave the last known leader as the only way back: it may lead.
        self.apply(registration(self.image, broker_id, clean=clean).records)

    @rule()
    def write(self) -> None:
        p = partition(self.image)
        if p.leader != NO_LEADER and len(p.isr) >= MIN_ISR:
            self.holders = set(p.isr)

    @precondition(lambda self: partition(self.image).leader != NO_LEADER)
    @rule(data=st.data())
    def alter_isr(self, data: st.DataObject) -> None:
        p = partition(self.image)
        others = [r for r in (1, 2, 3) if r != p.leader]
        members = data.draw(st.lists(st.sampled_from(others), unique=True))
        # A follower joins only once caught up to the high watermark: it then holds
        # everything committed (the broker's rule; here the model grants it).
        isr = tuple(r for r in (1, 2, 3) if r == p.leader or r in members)
        result = shrink(self.image, isr)
        code = result.response.topics[0].partitions[0].error_code
        if code == ErrorCode.none:
            self.holders |= set(isr) - set(p.isr)
            self.apply(result.records)

    @rule()
    def allow_unclean(self) -> None:
        self.unclean = True

    @invariant()
    def elr_holds_only_what_kip_966_allows(self) -> None:
        p = partition(self.image)
        assert not set(p.elr) & set(p.isr)
        if len(p.isr) >= MIN_ISR:
            assert p.elr == ()
        if p.leader != NO_LEADER:
            assert p.leader in p.isr and p.last_known_elr == ()
        if not self.unclean:
            assert set(p.elr) <= self.holders or not self.holders


ElrMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_elr_model = ElrMachine.TestCase


def test_a_reassignment_completed_by_alter_partition_keeps_the_elr_apart_from_the_isr() -> None:
    """The ELR rules hold on a partition being moved too: the leader's AlterPartition that
    completes the move (drop replica 3) grows the ISR back to min ISR, so the ELR clears;
    kept as it was, it would overlap the ISR and name a replica gone from the set, which
    replay refuses."""
    image = apply(cluster(), shrink(cluster(), (1,)))
    assert state(image) == (1, (1,), (2, 3), ())
    move = alter_partition_reassignments(ctx(image), reassign({("t", 0): (1, 2)}), 1)
    image = apply(image, move)
    assert (partition(image).replicas, partition(image).removing_replicas) == ((1, 2, 3), (3,))
    image = apply(image, shrink(image, (1, 2)))
    assert partition(image).replicas == (1, 2)
    assert state(image) == (1, (1, 2), (), ())
