"""Broker registration, heartbeats, fencing and controlled shutdown on the controller."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.cluster import (
    broker_heartbeat,
    broker_registration,
    fence_broker,
    unregister_broker,
)
from metadata.delta import BrokerState
from metadata.image import MetadataImage
from metadata.records import (
    BROKER_RESOURCE,
    NO_LEADER,
    TOPIC_RESOURCE,
    BrokerRegistrationChange,
    Config,
    FenceBroker,
    RegisterBroker,
    UnfenceBroker,
    UnregisterBroker,
)
from tests.metadata.controller.support import (
    CLUSTER_ID,
    apply,
    brokers,
    build,
    context,
    request_module,
    roundtrip,
    with_topic,
)

TID = uuid.UUID(int=42)
BR = request_module(62, 4)
HB = request_module(63, 2)


def register(broker_id: int, incarnation: int, cluster_id: str = CLUSTER_ID) -> Any:
    return BR.BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=cluster_id,
        incarnation_id=uuid.UUID(int=incarnation),
        listeners=(BR.Listener(name="PLAINTEXT", host="h", port=9092, security_protocol=0),),
        features=(
            BR.Feature(name="metadata.version", min_supported_version=1, max_supported_version=1),
        ),
        rack="r1",
    )


def heartbeat(
    broker_id: int,
    epoch: int,
    offset: int = 10_000,
    *,
    want_fence: bool = False,
    want_shut_down: bool = False,
) -> Any:
    return HB.BrokerHeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=epoch,
        current_metadata_offset=offset,
        want_fence=want_fence,
        want_shut_down=want_shut_down,
    )


def state(image: MetadataImage, broker_id: int) -> BrokerState:
    return BrokerState.of(image.cluster.brokers[broker_id])


# ---- registration ------------------------------------------------------------------------------


def test_a_new_broker_registers_fenced_at_the_offset_of_its_record() -> None:
    result = broker_registration(context(brokers()), register(4, 1), 4, next_offset=57)
    assert roundtrip(result.response).broker_epoch == 57
    (record,) = result.records
    assert isinstance(record, RegisterBroker)
    assert (record.broker_epoch, record.fenced, record.rack) == (57, True, "r1")
    assert record.listeners[0].port == 9092


def test_a_wrong_cluster_id_is_refused() -> None:
    result = broker_registration(context(brokers()), register(4, 1, "other"), 4, 57)
    assert result.response.error_code == ErrorCode.inconsistent_cluster_id
    assert result.records == ()


def test_an_unsupported_metadata_version_is_refused() -> None:
    from metadata.records import FeatureLevel

    img = build(FeatureLevel("metadata.version", 2))
    result = broker_registration(context(img), register(4, 1), 4, 57)
    assert result.response.error_code == ErrorCode.unsupported_version


def test_re_registering_the_same_incarnation_is_idempotent() -> None:
    img = brokers(1)  # incarnation uuid(int=1), epoch 101
    result = broker_registration(context(img), register(1, 1), 4, 57)
    assert result.records == ()
    assert (result.response.error_code, result.response.broker_epoch) == (ErrorCode.none, 101)


def test_a_new_incarnation_replaces_the_old_and_takes_its_leaderships() -> None:
    img = with_topic(brokers(1, 2), "t", ((1, 2), (1, 2), 1), topic_id=TID)
    result = broker_registration(context(img), register(1, 99), 4, 57)
    assert result.response.broker_epoch == 57
    after = apply(img, result)
    assert after.cluster.brokers[1].epoch == 57 and after.cluster.brokers[1].fenced
    partition = after.topics.by_id[TID].partitions[0]
    assert (partition.leader, partition.isr) == (2, (2,))


# ---- heartbeats --------------------------------------------------------------------------------


def fenced_broker() -> MetadataImage:
    return build(RegisterBroker(5, uuid.UUID(int=5), 50, (), (), None), image=brokers(1))


def test_a_stale_epoch_is_refused() -> None:
    result = broker_heartbeat(context(fenced_broker()), fenced_broker(), heartbeat(5, 49), 2)
    assert roundtrip(result.response).error_code == ErrorCode.stale_broker_epoch
    result = broker_heartbeat(context(fenced_broker()), fenced_broker(), heartbeat(9, 49), 2)
    assert result.response.error_code == ErrorCode.stale_broker_epoch


def test_a_broker_is_unfenced_only_once_caught_up_to_its_registration() -> None:
    img = fenced_broker()
    behind = broker_heartbeat(context(img), img, heartbeat(5, 50, offset=49), 2)
    assert behind.records == ()
    assert (behind.response.is_caught_up, behind.response.is_fenced) == (False, True)
    caught_up = broker_heartbeat(context(img), img, heartbeat(5, 50, offset=50), 2)
    assert caught_up.records == (UnfenceBroker(5, 50),)
    assert (caught_up.response.is_caught_up, caught_up.response.is_fenced) == (True, False)
    wants_fence = broker_heartbeat(context(img), img, heartbeat(5, 50, want_fence=True), 2)
    assert wants_fence.records == () and wants_fence.response.is_fenced


def test_planted_bug_unfences_a_broker_that_is_behind() -> None:
    img = fenced_broker()
    ctx = context(img, bugs=frozenset({"unfence-before-caught-up"}))
    result = broker_heartbeat(ctx, img, heartbeat(5, 50, offset=0), 2)
    assert result.records == (UnfenceBroker(5, 50),)
    assert not result.response.is_fenced and not result.response.is_caught_up


def test_unfencing_brings_offline_partitions_back() -> None:
    img = build(
        RegisterBroker(5, uuid.UUID(int=5), 50, (), (), None),
        image=with_topic(brokers(1, 5), "t", ((5, 1), (5,), NO_LEADER), topic_id=TID),
    )
    result = broker_heartbeat(context(img), img, heartbeat(5, 50), 2)
    partition = apply(img, result).topics.by_id[TID].partitions[0]
    assert (partition.leader, partition.isr) == (5, (5,))


def test_an_active_broker_asking_to_be_fenced_loses_its_leaderships() -> None:
    img = with_topic(brokers(1, 2), "t", ((1, 2), (1, 2), 1), topic_id=TID)
    result = broker_heartbeat(context(img), img, heartbeat(1, 101, want_fence=True), 2)
    assert result.response.is_fenced and not result.response.should_shut_down
    after = apply(img, result)
    assert state(after, 1) is BrokerState.FENCED
    assert after.topics.by_id[TID].partitions[0].leader == 2


def test_controlled_shutdown_moves_leadership_then_lets_the_broker_go() -> None:
    img = with_topic(brokers(1, 2), "t", ((1, 2), (1, 2), 1), ((2, 1), (2, 1), 2), topic_id=TID)
    first = broker_heartbeat(context(img), img, heartbeat(1, 101, want_shut_down=True), 2)
    assert (first.response.is_fenced, first.response.should_shut_down) == (False, False)
    assert first.records[0] == BrokerRegistrationChange(1, 101, in_controlled_shutdown=True)
    moved = apply(img, first)
    assert state(moved, 1) is BrokerState.CONTROLLED_SHUTDOWN
    assert [(p.leader, p.isr) for p in moved.topics.by_id[TID].partitions.values()] == [
        (2, (2,)),
        (2, (2,)),
    ]
    # While the move is uncommitted the broker must keep serving: not yet.
    waiting = broker_heartbeat(context(moved), img, heartbeat(1, 101, want_shut_down=True), 2)
    assert waiting.records == () and not waiting.response.should_shut_down
    done = broker_heartbeat(context(moved), moved, heartbeat(1, 101, want_shut_down=True), 2)
    assert done.records == (FenceBroker(1, 101),)
    assert (done.response.is_fenced, done.response.should_shut_down) == (True, True)
    assert state(apply(moved, done), 1) is BrokerState.SHUT_DOWN


def test_a_broker_leading_nothing_shuts_down_at_once() -> None:
    img = brokers(1, 2)
    result = broker_heartbeat(context(img), img, heartbeat(2, 102, want_shut_down=True), 2)
    assert result.response.should_shut_down
    assert state(apply(img, result), 2) is BrokerState.SHUT_DOWN
    fenced = fenced_broker()
    result = broker_heartbeat(context(fenced), fenced, heartbeat(5, 50, want_shut_down=True), 2)
    assert result.response.should_shut_down
    assert state(apply(fenced, result), 5) is BrokerState.SHUT_DOWN


# ---- fencing -----------------------------------------------------------------------------------


def test_fencing_moves_leadership_within_the_isr() -> None:
    img = with_topic(brokers(1, 2, 3), "t", ((1, 2, 3), (1, 3), 1), topic_id=TID)
    after = build(*fence_broker(context(img), 1), image=img)
    partition = after.topics.by_id[TID].partitions[0]
    assert (partition.leader, partition.isr, partition.leader_epoch) == (3, (3,), 1)


def test_fencing_the_last_isr_member_takes_the_partition_offline() -> None:
    img = with_topic(brokers(1, 2), "t", ((1, 2), (1,), 1), topic_id=TID)
    after = build(*fence_broker(context(img), 1), image=img)
    partition = after.topics.by_id[TID].partitions[0]
    assert (partition.leader, partition.isr) == (NO_LEADER, (1,))


def test_fencing_elects_uncleanly_only_where_enabled() -> None:
    img = with_topic(brokers(1, 2), "t", ((1, 2), (1,), 1), topic_id=TID)
    for records, expected in [
        ((Config(TOPIC_RESOURCE, "t", "unclean.leader.election.enable", "true"),), (2, (2,))),
        ((Config(BROKER_RESOURCE, "", "unclean.leader.election.enable", "true"),), (2, (2,))),
        ((), (NO_LEADER, (1,))),
    ]:
        configured = build(*records, image=img)
        after = build(*fence_broker(context(configured), 1), image=configured)
        partition = after.topics.by_id[TID].partitions[0]
        assert (partition.leader, partition.isr) == expected
    static = context(img, unclean_leader_election_enable=True)
    partition = build(*fence_broker(static, 1), image=img).topics.by_id[TID].partitions[0]
    assert partition.leader == 2


def test_planted_bug_elects_outside_the_isr() -> None:
    img = with_topic(brokers(1, 2, 3), "t", ((1, 2, 3), (1, 3), 1), topic_id=TID)
    ctx = context(img, bugs=frozenset({"leader-outside-isr"}))
    partition = build(*fence_broker(ctx, 1), image=img).topics.by_id[TID].partitions[0]
    assert (partition.leader, partition.isr) == (2, (2,))


def test_unregistering_removes_the_broker_and_its_leaderships() -> None:
    img = with_topic(brokers(1, 2), "t", ((1, 2), (1, 2), 1), topic_id=TID)
    module = request_module(64, 0)
    result = unregister_broker(context(img), module.UnregisterBrokerRequest(broker_id=1), 0)
    assert roundtrip(result.response).error_code == ErrorCode.none
    assert result.records[-1] == UnregisterBroker(1, 101)
    after = apply(img, result)
    assert 1 not in after.cluster.brokers
    assert after.topics.by_id[TID].partitions[0].leader == 2
    again = unregister_broker(context(after), module.UnregisterBrokerRequest(broker_id=1), 0)
    assert again.response.error_code == ErrorCode.broker_id_not_registered
