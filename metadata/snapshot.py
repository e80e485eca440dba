"""The image as records: what a metadata snapshot holds (Kafka's image writers).

A snapshot stores the fewest records that rebuild an image on an empty one: a broker becomes
one RegisterBroker carrying its fenced and controlled-shutdown flags, a partition one
Partition record carrying its epochs as they are. Replaying them must give an image equal to
the one written (tests assert it), because a node that restarts from a snapshot has to serve
exactly what a node that replayed the whole log serves.
"""

from __future__ import annotations

from collections.abc import Iterable

from log.records import Record
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.records import (
    Config,
    FeatureLevel,
    MetadataRecord,
    Partition,
    ProducerIds,
    RegisterBroker,
    Topic,
    UserScramCredential,
    encode_record,
)


def image_records(image: MetadataImage) -> list[MetadataRecord]:
    """Records that rebuild ``image`` from an empty one, in replayable order (a topic's
    record before its partitions and configs)."""
    records: list[MetadataRecord] = [
        FeatureLevel(name, level) for name, level in sorted(image.features.items())
    ]
    for broker_id, broker in sorted(image.cluster.brokers.items()):
        records.append(
            RegisterBroker(
                broker_id=broker_id,
                incarnation_id=broker.incarnation_id,
                broker_epoch=broker.epoch,
                listeners=broker.listeners,
                features=broker.features,
                rack=broker.rack,
                fenced=broker.fenced,
                in_controlled_shutdown=broker.in_controlled_shutdown,
            )
        )
    for name, topic_id in sorted(image.topics.by_name.items()):
        topic = image.topics.by_id[topic_id]
        records.append(Topic(name, topic_id))
        for partition_id, partition in sorted(topic.partitions.items()):
            records.append(
                Partition(
                    topic_id=topic_id,
                    partition_id=partition_id,
                    replicas=partition.replicas,
                    isr=partition.isr,
                    leader=partition.leader,
                    leader_epoch=partition.leader_epoch,
                    partition_epoch=partition.partition_epoch,
                    removing_replicas=partition.removing_replicas,
                    adding_replicas=partition.adding_replicas,
                    eligible_leader_replicas=partition.elr,
                    last_known_elr=partition.last_known_elr,
                )
            )
    for (resource_type, resource_name), entries in sorted(image.configs.items()):
        records.extend(
            Config(resource_type, resource_name, key, value)
            for key, value in sorted(entries.items())
        )
    records.extend(
        UserScramCredential(
            name, mechanism, cred.salt, cred.stored_key, cred.server_key, cred.iterations
        )
        for (name, mechanism), cred in sorted(image.scram_credentials.items())
    )
    if image.next_producer_id > 0:
        # Who asked for the last block does not survive a snapshot (-1: nobody); the counter
        # does.
        records.append(ProducerIds(-1, -1, image.next_producer_id))
    return records


def image_from_records(records: Iterable[MetadataRecord], offset: int, epoch: int) -> MetadataImage:
    """The image ``records`` build on an empty one, as of ``offset`` in ``epoch``."""
    delta = MetadataDelta(EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply(offset, epoch)


def image_log_records(image: MetadataImage, timestamp_ms: int) -> list[Record]:
    """``image_records`` as the log records a raft snapshot stores."""
    return [Record(None, encode_record(r), timestamp_ms) for r in image_records(image)]
