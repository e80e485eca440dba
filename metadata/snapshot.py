"""The image as records: what a metadata snapshot holds (Kafka's image writers).

A snapshot stores the fewest records that rebuild an image on an empty one: a broker becomes
one RegisterBroker carrying its fenced and controlled-shutdown flags, a partition one
Partition record carrying its epochs as they are. Replaying them must give an image equal to
the one written (tests assert it), because a node that restarts from a snapshot has to serve
exactly what a node that replayed the whole log serves.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from log.records import Record
from metadata.authorizer import AclBinding
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage, entity_order
from metadata.records import (
    AccessControlEntry,
    ClientQuota,
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
                log_dirs=broker.log_dirs,
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
                    directories=partition.directories,
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
    for entity in sorted(image.client_quotas, key=entity_order):
        quotas = image.client_quotas[entity]
        types = tuple(entity_type for entity_type, _ in entity)
        names = tuple(name for _, name in entity)
        records.extend(
            ClientQuota(types, names, key, value, remove=False)
            for key, value in sorted(quotas.items())
        )
    if image.next_producer_id > 0:
        # Who asked for the last block does not survive a snapshot (-1: nobody); the counter
        # does.
        records.append(ProducerIds(-1, -1, image.next_producer_id))
    for acl_id, acl in sorted(image.acls.items()):
        records.append(acl_record(acl_id, acl))
    return records


def acl_record(acl_id: uuid.UUID, acl: AclBinding) -> AccessControlEntry:
    """The AccessControlEntry record of ``acl``."""
    return AccessControlEntry(
        acl_id=acl_id,
        resource_type=int(acl.resource_type),
        resource_name=acl.resource_name,
        pattern_type=int(acl.pattern_type),
        principal=acl.principal,
        host=acl.host,
        operation=int(acl.operation),
        permission_type=int(acl.permission),
    )


def image_from_records(records: Iterable[MetadataRecord], offset: int, epoch: int) -> MetadataImage:
    """The image ``records`` build on an empty one, as of ``offset`` in ``epoch``."""
    delta = MetadataDelta(EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply(offset, epoch)


def image_log_records(image: MetadataImage, timestamp_ms: int) -> list[Record]:
    """``image_records`` as the log records a raft snapshot stores."""
    return [Record(None, encode_record(r), timestamp_ms) for r in image_records(image)]
