"""KIP-858 on the controller: brokers register their log dirs, place replicas in them
(AssignReplicasToDirs), and a dir a heartbeat reports offline loses its leaderships and ISR
places while the broker, unfenced, keeps the partitions of its healthy dirs."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.cluster import (
    assign_replicas_to_dirs,
    broker_heartbeat,
    broker_registration,
)
from metadata.controller.election import broker_returning, preferred_leader_changes
from metadata.directories import MIGRATING, UNASSIGNED
from metadata.image import MetadataImage, PartitionRegistration
from metadata.records import (
    ELR_FEATURE,
    NO_LEADER,
    BrokerRegistrationChange,
    Config,
    FeatureLevel,
    Listener,
    Partition,
    PartitionChange,
    RegisterBroker,
    Topic,
    UnfenceBroker,
    decode_record,
    encode_record,
)
from metadata.snapshot import image_records
from tests.metadata.controller.support import (
    CLUSTER_ID,
    apply,
    build,
    context,
    request_module,
    roundtrip,
)

DIR_A = uuid.UUID(int=0xA0000000000000000000000000000001)
DIR_B = uuid.UUID(int=0xB0000000000000000000000000000001)
DIR_2 = uuid.UUID(int=0x20000000000000000000000000000001)
DIR_3 = uuid.UUID(int=0x30000000000000000000000000000001)
TID = uuid.UUID(int=42)
BR = request_module(62, 4)
HB = request_module(63, 1)
AR = request_module(73, 0)
DIRS = {1: (DIR_A, DIR_B), 2: (DIR_2,), 3: (DIR_3,)}


def cluster(
    *partitions: tuple[tuple[int, ...], tuple[int, ...], int, tuple[uuid.UUID, ...]],
) -> Any:
    """Brokers 1 (dirs A and B), 2 and 3 unfenced, and topic t with ``partitions``
    (replicas, isr, leader, directories)."""
    records: list[Any] = []
    for broker_id, dirs in DIRS.items():
        listeners = (Listener("PLAINTEXT", "localhost", 9090 + broker_id),)
        epoch = 100 + broker_id
        incarnation = uuid.UUID(int=broker_id)
        records.append(
            RegisterBroker(broker_id, incarnation, epoch, listeners, (), None, log_dirs=dirs)
        )
        records.append(UnfenceBroker(broker_id, epoch))
    records.append(Topic("t", TID))
    for index, (replicas, isr, leader, directories) in enumerate(partitions):
        records.append(Partition(TID, index, replicas, isr, leader, directories=directories))
    return build(*records)


def heartbeat(broker_id: int, offline: tuple[uuid.UUID, ...], epoch: int | None = None) -> Any:
    return HB.BrokerHeartbeatRequest(
        broker_id=broker_id,
        broker_epoch=100 + broker_id if epoch is None else epoch,
        current_metadata_offset=10_000,
        want_fence=False,
        want_shut_down=False,
        offline_log_dirs=offline,
    )


def part(image: MetadataImage, index: int) -> PartitionRegistration:
    return image.topics.by_id[TID].partitions[index]


def registration(broker_id: int, *log_dirs: uuid.UUID) -> Any:
    return BR.BrokerRegistrationRequest(
        broker_id=broker_id,
        cluster_id=CLUSTER_ID,
        incarnation_id=uuid.UUID(int=1000 + broker_id),
        listeners=(),
        features=(),
        rack=None,
        log_dirs=log_dirs,
    )


def test_registration_records_the_online_log_dirs() -> None:
    new_a, new_b = uuid.UUID(int=2**99), uuid.UUID(int=2**98)
    result = broker_registration(context(cluster()), registration(4, new_a, new_b), 4, 70)
    (record,) = result.records
    assert isinstance(record, RegisterBroker) and record.log_dirs == (new_a, new_b)
    assert apply(cluster(), result).cluster.brokers[4].log_dirs == (new_a, new_b)
    # A new incarnation of broker 1 may register the dirs it had.
    again = broker_registration(context(cluster()), registration(1, DIR_A, DIR_B), 4, 70)
    assert again.response.error_code == ErrorCode.none


def test_registration_refuses_reserved_duplicate_or_taken_dir_ids() -> None:
    """Kafka's INVALID_REGISTRATION: a copied disk (another broker's dir id) would otherwise
    make a failure of one broker's dir move the other broker's leaderships."""
    for dirs in (
        (UNASSIGNED,),
        (uuid.UUID(int=99),),
        (DIR_3, DIR_3),
        (uuid.UUID(int=2**99), DIR_2),
    ):
        result = broker_registration(context(cluster()), registration(4, *dirs), 4, 70)
        assert roundtrip(result.response).error_code == ErrorCode.invalid_registration, dirs
        assert result.records == ()


def test_an_offline_dir_moves_its_leaders_and_leaves_the_broker_unfenced() -> None:
    img = cluster(
        ((1, 2), (1, 2), 1, (DIR_A, DIR_2)),  # led from the failing dir: moves to 2
        ((1, 3), (1, 3), 1, (DIR_B, DIR_3)),  # led from the healthy dir: stays
        ((2, 1), (2, 1), 2, (DIR_2, DIR_A)),  # followed from the failing dir: leaves the ISR
        ((2, 3), (2, 3), 2, (DIR_2, DIR_3)),  # not on broker 1 at all
        ((1,), (1,), 1, (DIR_A,)),  # its only replica failed: offline, ISR kept
    )
    result = broker_heartbeat(context(img), img, heartbeat(1, (DIR_A,)), 1)
    response = roundtrip(result.response)
    assert response.error_code == ErrorCode.none and not response.is_fenced
    after = apply(img, result)
    broker = after.cluster.brokers[1]
    assert not broker.fenced and broker.log_dirs == (DIR_B,)
    assert (part(after, 0).leader, part(after, 0).isr) == (2, (2,))
    assert part(after, 1) == part(img, 1)
    assert (part(after, 2).leader, part(after, 2).isr) == (2, (2,))
    assert part(after, 3) == part(img, 3)
    assert (part(after, 4).leader, part(after, 4).isr) == (NO_LEADER, (1,))
    # The next heartbeat names the same dir: it is already offline, nothing more happens.
    again = broker_heartbeat(context(after), after, heartbeat(1, (DIR_A,)), 1)
    assert again.records == ()


def test_a_broker_unfenced_with_a_failed_dir_gets_no_leadership_there() -> None:
    """The heartbeat that unfences broker 1 also reports dir A failed (it failed while the
    broker was starting): the unfence's elections already see A offline."""
    img = cluster(
        ((1, 2), (1,), NO_LEADER, (DIR_A, DIR_2)), ((1, 2), (1,), NO_LEADER, (DIR_B, DIR_2))
    )
    img = build(
        RegisterBroker(1, uuid.UUID(int=77), 500, (), (), None, log_dirs=(DIR_A, DIR_B)), image=img
    )
    result = broker_heartbeat(context(img), img, heartbeat(1, (DIR_A,), epoch=500), 1)
    assert not result.response.is_fenced
    after = apply(img, result)
    assert after.cluster.brokers[1].log_dirs == (DIR_B,) and not after.cluster.brokers[1].fenced
    assert part(after, 0).leader == NO_LEADER  # its only ISR member's dir failed
    assert part(after, 1).leader == 1  # the healthy dir's partition comes back with it


def test_a_replica_in_a_failed_dir_is_never_elected() -> None:
    img = cluster(((1, 2), (1, 2), 1, (DIR_A, DIR_2)), ((1,), (1,), 1, (DIR_A,)))
    after = apply(img, broker_heartbeat(context(img), img, heartbeat(1, (DIR_A,)), 1))
    assert (part(after, 1).leader, part(after, 1).isr) == (NO_LEADER, (1,))
    # Broker 1 is usable and the last ISR member of partition 1, but its replica's dir failed:
    # neither a clean nor an unclean election gives it the partition back.
    unclean = build(Config(2, "t", "unclean.leader.election.enable", "true"), image=after)
    assert broker_returning(context(unclean), 1) == []
    # Nor does a preferred-leader rebalance hand partition 0 back to broker 1.
    back_in_isr = build(PartitionChange(TID, 0, isr=(2, 1)), image=after)
    assert preferred_leader_changes(context(back_in_isr), 10) == []


def test_a_dir_back_after_re_registration_may_lead_again() -> None:
    img = cluster(((1, 2), (1, 2), 1, (DIR_A, DIR_2)))
    after = apply(img, broker_heartbeat(context(img), img, heartbeat(1, (DIR_A,)), 1))
    restarted = build(
        RegisterBroker(1, uuid.UUID(int=99), 500, (), (), None, log_dirs=(DIR_A, DIR_B)),
        image=build(PartitionChange(TID, 0, isr=(2, 1)), image=after),
    )
    changes = preferred_leader_changes(context(build(UnfenceBroker(1, 500), image=restarted)), 9)
    assert [(c.partition_id, c.leader) for c in changes] == [(0, 1)]


def assign(broker_id: int, epoch: int, *dirs: tuple[uuid.UUID, uuid.UUID, tuple[int, ...]]) -> Any:
    return AR.AssignReplicasToDirsRequest(
        broker_id=broker_id,
        broker_epoch=epoch,
        directories=tuple(
            AR.DirectoryData(
                id_=dir_id,
                topics=(
                    AR.TopicData(
                        topic_id=topic_id,
                        partitions=tuple(AR.PartitionData(partition_index=i) for i in indexes),
                    ),
                ),
            )
            for dir_id, topic_id, indexes in dirs
        ),
    )


def codes(response: Any) -> list[tuple[uuid.UUID, int, ErrorCode]]:
    return [
        (directory.id_, p.partition_index, p.error_code)
        for directory in response.directories
        for topic in directory.topics
        for p in topic.partitions
    ]


def test_assign_replicas_to_dirs_places_each_replica() -> None:
    img = cluster(
        ((1, 2), (1, 2), 1, ()), ((2, 1), (2, 1), 2, (DIR_2, UNASSIGNED)), ((2,), (2,), 2, ())
    )
    request = assign(
        1, 101, (DIR_B, TID, (0,)), (DIR_A, TID, (1, 2, 7)), (DIR_A, uuid.UUID(int=9), (0,))
    )
    result = assign_replicas_to_dirs(context(img), request, 0)
    assert codes(roundtrip(result.response)) == [
        (DIR_B, 0, ErrorCode.none),
        (DIR_A, 1, ErrorCode.none),
        (DIR_A, 2, ErrorCode.not_leader_or_follower),
        (DIR_A, 7, ErrorCode.unknown_topic_or_partition),
        (DIR_A, 0, ErrorCode.unknown_topic_id),
    ]
    after = apply(img, result)
    assert part(after, 0).directories == (DIR_B, MIGRATING)
    assert part(after, 1).directories == (DIR_2, DIR_A)
    assert part(after, 0).leader == 1  # an assignment to a healthy dir moves nothing
    # Assigning again where it already is writes nothing.
    assert (
        assign_replicas_to_dirs(context(after), assign(1, 101, (DIR_B, TID, (0,))), 0).records == ()
    )


def test_an_assignment_to_a_stale_epoch_is_refused() -> None:
    img = cluster(((1, 2), (1, 2), 1, ()))
    result = assign_replicas_to_dirs(context(img), assign(1, 7, (DIR_A, TID, (0,))), 0)
    assert roundtrip(result.response).error_code == ErrorCode.stale_broker_epoch
    assert result.records == ()


def test_an_assignment_to_an_offline_dir_moves_the_leader() -> None:
    """The broker placed a replica in a dir that failed before the controller heard of the
    placement: the replica leaves its ISR and leadership then (Kafka does the same)."""
    img = cluster(((1, 2), (1, 2), 1, ()))
    after = apply(img, broker_heartbeat(context(img), img, heartbeat(1, (DIR_A,)), 1))
    assert part(after, 0).leader == 1  # the controller did not know where it was
    result = assign_replicas_to_dirs(context(after), assign(1, 101, (DIR_A, TID, (0,))), 0)
    moved = part(apply(after, result), 0)
    assert (moved.leader, moved.isr, moved.directories) == (2, (2,), (DIR_A, MIGRATING))


def test_a_reassignment_keeps_the_dirs_of_the_replicas_that_stay() -> None:
    img = cluster(((1, 2), (1, 2), 1, (DIR_B, DIR_2)))
    after = build(PartitionChange(TID, 0, replicas=(3, 1), isr=(1,)), image=img)
    assert part(after, 0).directories == (UNASSIGNED, DIR_B)


def test_dirs_survive_the_record_codec_and_a_snapshot() -> None:
    img = cluster(((1, 2), (1, 2), 1, (DIR_A, DIR_2)))
    records = image_records(img)
    decoded = [decode_record(encode_record(r), i) for i, r in enumerate(records)]
    assert decoded == records
    rebuilt = build(*decoded)
    assert rebuilt.cluster.brokers[1].log_dirs == (DIR_A, DIR_B)
    assert part(rebuilt, 0).directories == (DIR_A, DIR_2)


def test_dir_fields_are_written_only_when_set() -> None:
    """Unused, they add no bytes (single-dir clusters write what they wrote before); set,
    even to an empty list of online dirs, they come back as written."""
    assert b"directories" not in encode_record(Partition(TID, 0, (1,), (1,), 1))
    assert b"log_dirs" not in encode_record(BrokerRegistrationChange(1, 5, fenced=True))
    none_online = BrokerRegistrationChange(1, 5, log_dirs=())
    assert decode_record(encode_record(none_online), 0) == none_online


def test_with_elr_on_a_failed_dirs_replica_is_not_an_eligible_leader_either() -> None:
    """KIP-966 on (a new cluster's default): the failed replica leaves the ISR by ELR's rules,
    and even as the last known leader it is not elected while its dir is offline."""
    img = build(
        FeatureLevel(ELR_FEATURE, 1),
        image=cluster(((1, 2), (1, 2), 1, (DIR_A, DIR_2)), ((1,), (1,), 1, (DIR_A,))),
    )
    after = apply(img, broker_heartbeat(context(img), img, heartbeat(1, (DIR_A,)), 1))
    assert (part(after, 0).leader, part(after, 0).isr) == (2, (2,))
    assert part(after, 1).leader == NO_LEADER and 1 not in part(after, 1).isr
    unclean = build(Config(2, "t", "unclean.leader.election.enable", "true"), image=after)
    assert broker_returning(context(unclean), 1) == []
