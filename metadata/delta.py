"""MetadataDelta: records replayed on top of an image, producing the next image.

Every record is checked against explicit tables of legal transitions (ARCHITECTURE, "Partition
and replica state machines") before it changes anything: a record that is illegal in the
current state means the controller's view and the log disagree, which is a bug the simulator
must report rather than a state to paper over. A rejected record leaves the delta as it was.

The delta copies an image's dicts only when it first changes them (copy on write), so
``apply`` returns an image that shares every unchanged part (features, brokers, configs,
untouched topics) with its predecessor by identity. ``local_changes`` relies on that sharing to
skip untouched topics, and each new image's topics name the topics the delta touched
(``TopicsChange``) so that ``local_changes`` visits only those.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Mapping
from typing import Any

from metadata.authorizer import AclBinding, binding_from_codes
from metadata.directories import realigned
from metadata.image import (
    BrokerRegistration,
    ClusterImage,
    CountsBuilder,
    MetadataImage,
    PartitionRegistration,
    QuotaEntity,
    TopicImage,
    TopicsChange,
    TopicsImage,
    changed_topic_ids,
    collision_key,
)
from metadata.records import (
    BROKER_RESOURCE,
    NO_LEADER,
    TOPIC_RESOURCE,
    AccessControlEntry,
    BrokerRegistrationChange,
    ClientQuota,
    Config,
    FeatureLevel,
    FenceBroker,
    MetadataRecord,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveTopic,
    RemoveUserScramCredential,
    Topic,
    UnfenceBroker,
    UnregisterBroker,
    UserScramCredential,
)
from protocol.sasl import ScramCredential


class MetadataStateError(Exception):
    """A record that is not a legal transition from the current state."""


class BrokerState(enum.Enum):
    """A registered broker's state as the records see it: (fenced, in_controlled_shutdown)."""

    FENCED = (True, False)
    ACTIVE = (False, False)
    CONTROLLED_SHUTDOWN = (False, True)  # leadership moving away before it stops
    SHUT_DOWN = (True, True)  # fenced after (or during) a controlled shutdown

    @staticmethod
    def of(broker: BrokerRegistration) -> BrokerState:
        return BrokerState((broker.fenced, broker.in_controlled_shutdown))


# Registration state changes a record may make. RegisterBroker is legal in any state (a new
# incarnation replaces the old one) and UnregisterBroker from any state; a broker that finished
# a controlled shutdown comes back only by registering again.
BROKER_TRANSITIONS: frozenset[tuple[BrokerState, BrokerState]] = frozenset(
    {
        (BrokerState.FENCED, BrokerState.ACTIVE),  # caught up with the log: unfenced
        (BrokerState.ACTIVE, BrokerState.FENCED),  # session expired
        (BrokerState.ACTIVE, BrokerState.CONTROLLED_SHUTDOWN),
        (BrokerState.CONTROLLED_SHUTDOWN, BrokerState.SHUT_DOWN),
        (BrokerState.FENCED, BrokerState.SHUT_DOWN),  # leads nothing: shut down at once
    }
)


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistent"
    ONLINE = "Online"  # has a leader (in its ISR)
    OFFLINE = "Offline"  # no leader: NO_LEADER

    @staticmethod
    def of(partition: PartitionRegistration | None) -> PartitionState:
        if partition is None:
            return PartitionState.NON_EXISTENT
        return PartitionState.OFFLINE if partition.leader == NO_LEADER else PartitionState.ONLINE


# Which record takes a partition from which state to which. RemoveTopic takes every partition
# of the topic to NonExistent from any state.
_LIVE = frozenset({PartitionState.ONLINE, PartitionState.OFFLINE})
PARTITION_TRANSITIONS: Mapping[tuple[type[Any], PartitionState], frozenset[PartitionState]] = {
    (Partition, PartitionState.NON_EXISTENT): _LIVE,  # New -> Online, or Offline at birth
    (PartitionChange, PartitionState.ONLINE): _LIVE,
    (PartitionChange, PartitionState.OFFLINE): _LIVE,
}


@dataclasses.dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


@dataclasses.dataclass(slots=True)
class LocalReplicaChanges:
    """What one broker must do after an image change. A topic deleted and re-created under
    the same name shows up in ``deleted`` and in ``leaders``/``followers``: apply deletions
    first."""

    leaders: dict[TopicPartition, PartitionRegistration]
    followers: dict[TopicPartition, PartitionRegistration]
    deleted: set[TopicPartition]


class MetadataDelta:
    """Replays records on top of ``image``; ``apply`` gives the resulting image."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self._features: Mapping[str, int] = image.features
        self._brokers: Mapping[int, BrokerRegistration] = image.cluster.brokers
        self._topics: Mapping[uuid.UUID, TopicImage] = image.topics.by_id
        self._topic_ids: Mapping[str, uuid.UUID] = image.topics.by_name
        self._collision_keys: Mapping[str, tuple[str, ...]] = image.topics.collision_keys
        self._counts = image.topics.counts
        self._next_order = image.topics.next_order
        self._counting: CountsBuilder | None = None  # changes since the last apply
        # Topics created, changed or removed since the last apply, in first-touch order.
        self._touched: dict[uuid.UUID, None] = {}
        # Partition maps of topics changed since the last apply, owned (mutable) by the delta.
        self._partitions: dict[uuid.UUID, dict[int, PartitionRegistration]] = {}
        self._configs: Mapping[tuple[int, str], Mapping[str, str]] = image.configs
        self._next_producer_id = image.next_producer_id
        self._acls: Mapping[uuid.UUID, AclBinding] = image.acls
        self._scram: Mapping[tuple[str, str], ScramCredential] = image.scram_credentials
        self._client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = image.client_quotas
        self._owned: set[str] = set()  # names of the maps above already copied

    # ---- replay ------------------------------------------------------------------------------
    def replay(self, record: MetadataRecord) -> None:
        """Apply one record, or raise MetadataStateError leaving the delta unchanged."""
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise MetadataStateError(f"no replay rule for {record!r}")
        handler(self, record)

    def _replay_register_broker(self, record: RegisterBroker) -> None:
        self._own_brokers()[record.broker_id] = BrokerRegistration(
            broker_id=record.broker_id,
            incarnation_id=record.incarnation_id,
            epoch=record.broker_epoch,
            listeners=record.listeners,
            features=record.features,
            rack=record.rack,
            fenced=record.fenced,
            in_controlled_shutdown=record.in_controlled_shutdown,
            log_dirs=record.log_dirs,
        )

    def _replay_unregister_broker(self, record: UnregisterBroker) -> None:
        self._registered(record.broker_id, record.broker_epoch, record)
        del self._own_brokers()[record.broker_id]

    def _replay_fence_broker(self, record: FenceBroker) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch, record)
        self._change_broker(broker, True, broker.in_controlled_shutdown, record)

    def _replay_unfence_broker(self, record: UnfenceBroker) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch, record)
        self._change_broker(broker, False, broker.in_controlled_shutdown, record)

    def _replay_broker_registration_change(self, record: BrokerRegistrationChange) -> None:
        broker = self._registered(record.broker_id, record.broker_epoch, record)
        if record.log_dirs is not None:
            broker = dataclasses.replace(broker, log_dirs=record.log_dirs)
            self._own_brokers()[broker.broker_id] = broker
        if record.fenced is None and record.in_controlled_shutdown is None:
            return
        fenced = broker.fenced if record.fenced is None else record.fenced
        shutdown = (
            broker.in_controlled_shutdown
            if record.in_controlled_shutdown is None
            else record.in_controlled_shutdown
        )
        self._change_broker(broker, fenced, shutdown, record)

    def _registered(self, broker_id: int, broker_epoch: int, record: object) -> BrokerRegistration:
        broker = self._brokers.get(broker_id)
        if broker is None:
            raise MetadataStateError(f"{record!r}: broker {broker_id} is not registered")
        if broker.epoch != broker_epoch:
            raise MetadataStateError(
                f"{record!r}: stale broker epoch (broker {broker_id} is at {broker.epoch})"
            )
        return broker

    def _change_broker(
        self, broker: BrokerRegistration, fenced: bool, shutdown: bool, record: object
    ) -> None:
        before, after = BrokerState.of(broker), BrokerState((fenced, shutdown))
        if (before, after) not in BROKER_TRANSITIONS:
            raise MetadataStateError(
                f"{record!r}: broker {broker.broker_id} cannot go from {before.name} to "
                f"{after.name}"
            )
        self._own_brokers()[broker.broker_id] = dataclasses.replace(
            broker, fenced=fenced, in_controlled_shutdown=shutdown
        )

    def _replay_topic(self, record: Topic) -> None:
        if record.topic_id in self._topics or record.name in self._topic_ids:
            raise MetadataStateError(f"{record!r}: topic name or id already exists")
        if not record.name:
            raise MetadataStateError(f"{record!r}: empty topic name")
        topic = TopicImage(record.name, record.topic_id, {}, self._next_order)
        self._own("_topics")[record.topic_id] = topic
        self._next_order += 1
        self._own("_topic_ids")[record.name] = record.topic_id
        # A colliding name is refused by the controller, except an internal topic beside a
        # client's topic made before internal names were reserved: a key may name two topics.
        key = collision_key(record.name)
        self._own("_collision_keys")[key] = (*self._collision_keys.get(key, ()), record.name)
        self._partitions[record.topic_id] = {}
        self._touched[record.topic_id] = None

    def _replay_partition(self, record: Partition) -> None:
        self._check_transition(record, self._partition(record))
        if record.partition_id < 0 or record.leader_epoch < 0 or record.partition_epoch < 0:
            raise MetadataStateError(f"{record!r}: negative partition id or epoch")
        registration = PartitionRegistration(
            replicas=record.replicas,
            isr=record.isr,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            partition_epoch=record.partition_epoch,
            removing_replicas=record.removing_replicas,
            adding_replicas=record.adding_replicas,
            elr=record.eligible_leader_replicas,
            last_known_elr=record.last_known_elr,
            directories=record.directories,
        )
        _check_registration(registration, record)
        self._own_partitions(record.topic_id)[record.partition_id] = registration
        self._count(None, registration)

    def _replay_partition_change(self, record: PartitionChange) -> None:
        current = self._partition(record)
        self._check_transition(record, current)
        assert current is not None
        leader = current.leader if record.leader is None else record.leader
        new_leader = leader != current.leader or record.bump_leader_epoch
        replicas = _or(record.replicas, current.replicas)
        # Kafka's builder always writes the dirs with new replicas; kraft-py's records leave
        # them out and every remaining replica keeps its dir (a new one is UNASSIGNED).
        directories = (
            realigned(current.replicas, current.directories, replicas)
            if record.directories is None
            else record.directories
        )
        registration = PartitionRegistration(
            replicas=replicas,
            isr=_or(record.isr, current.isr),
            leader=leader,
            leader_epoch=current.leader_epoch + 1 if new_leader else current.leader_epoch,
            partition_epoch=current.partition_epoch + 1,
            removing_replicas=_or(record.removing_replicas, current.removing_replicas),
            adding_replicas=_or(record.adding_replicas, current.adding_replicas),
            elr=_or(record.eligible_leader_replicas, current.elr),
            last_known_elr=_or(record.last_known_elr, current.last_known_elr),
            directories=directories,
        )
        _check_registration(registration, record)
        self._own_partitions(record.topic_id)[record.partition_id] = registration
        self._count(current, registration)

    def _count(self, old: PartitionRegistration | None, new: PartitionRegistration | None) -> None:
        if self._counting is None:
            self._counting = CountsBuilder(self._counts)
        self._counting.move(old, new)

    def _partition(self, record: Partition | PartitionChange) -> PartitionRegistration | None:
        if record.topic_id not in self._topics:
            raise MetadataStateError(f"{record!r}: unknown topic id")
        return self._partitions_of(record.topic_id).get(record.partition_id)

    def _check_transition(
        self, record: Partition | PartitionChange, current: PartitionRegistration | None
    ) -> None:
        state = PartitionState.of(current)
        if (type(record), state) not in PARTITION_TRANSITIONS:
            raise MetadataStateError(f"{record!r}: illegal for a partition in state {state.value}")

    def _replay_remove_topic(self, record: RemoveTopic) -> None:
        topic = self._topics.get(record.topic_id)
        if topic is None:
            raise MetadataStateError(f"{record!r}: unknown topic id")
        for partition in self._partitions_of(record.topic_id).values():
            self._count(partition, None)
        del self._own("_topics")[record.topic_id]
        del self._own("_topic_ids")[topic.name]
        key = collision_key(topic.name)
        others = tuple(name for name in self._collision_keys[key] if name != topic.name)
        if others:
            self._own("_collision_keys")[key] = others
        else:
            del self._own("_collision_keys")[key]
        self._partitions.pop(record.topic_id, None)
        self._touched[record.topic_id] = None
        if (TOPIC_RESOURCE, topic.name) in self._configs:
            del self._own("_configs")[(TOPIC_RESOURCE, topic.name)]

    def _replay_config(self, record: Config) -> None:
        resource = (record.resource_type, record.resource_name)
        if record.resource_type not in (TOPIC_RESOURCE, BROKER_RESOURCE):
            raise MetadataStateError(f"{record!r}: unknown resource type")
        if record.resource_type == TOPIC_RESOURCE and record.resource_name not in self._topic_ids:
            raise MetadataStateError(f"{record!r}: unknown topic")
        entries = dict(self._configs.get(resource, {}))
        if record.value is None:
            entries.pop(record.name, None)
        else:
            entries[record.name] = record.value
        configs = self._own("_configs")
        if entries:
            configs[resource] = entries
        else:
            configs.pop(resource, None)

    def _replay_feature_level(self, record: FeatureLevel) -> None:
        if record.feature_level < 0:
            raise MetadataStateError(f"{record!r}: negative feature level")
        features = self._own("_features")
        if record.feature_level == 0:
            features.pop(record.name, None)
        else:
            features[record.name] = record.feature_level

    def _replay_producer_ids(self, record: ProducerIds) -> None:
        # Equal would hand out an empty block; below would hand out ids twice.
        if record.next_producer_id <= self._next_producer_id:
            raise MetadataStateError(
                f"{record!r}: next producer id must grow past {self._next_producer_id}"
            )
        self._next_producer_id = record.next_producer_id

    def _replay_access_control_entry(self, record: AccessControlEntry) -> None:
        if record.acl_id in self._acls:
            raise MetadataStateError(f"{record!r}: the ACL id already exists")
        binding = binding_from_codes(
            record.resource_type,
            record.resource_name,
            record.pattern_type,
            record.principal,
            record.host,
            record.operation,
            record.permission_type,
        )
        if isinstance(binding, str):
            raise MetadataStateError(f"{record!r}: {binding}")
        self._own("_acls")[record.acl_id] = binding

    def _replay_remove_access_control_entry(self, record: RemoveAccessControlEntry) -> None:
        if record.acl_id not in self._acls:
            raise MetadataStateError(f"{record!r}: unknown ACL id")
        del self._own("_acls")[record.acl_id]

    def _replay_user_scram_credential(self, record: UserScramCredential) -> None:
        self._own("_scram")[(record.name, record.mechanism)] = ScramCredential(
            record.salt, record.stored_key, record.server_key, record.iterations
        )

    def _replay_remove_user_scram_credential(self, record: RemoveUserScramCredential) -> None:
        if (record.name, record.mechanism) not in self._scram:
            raise MetadataStateError(f"{record!r}: no such credential")
        del self._own("_scram")[(record.name, record.mechanism)]

    def _replay_client_quota(self, record: ClientQuota) -> None:
        """Set or remove one key of one entity, as Kafka's ClientQuotasImage does; an entity
        left with no key is forgotten (DescribeClientQuotas no longer lists it)."""
        if len(record.entity_types) != len(record.entity_names) or not record.entity_types:
            raise MetadataStateError(f"{record!r}: malformed entity")
        entity: QuotaEntity = tuple(
            sorted(zip(record.entity_types, record.entity_names, strict=True))
        )
        quotas = self._own("_client_quotas")
        keys = dict(quotas.get(entity, {}))
        if record.remove:
            keys.pop(record.key, None)
        else:
            keys[record.key] = record.value
        if keys:
            quotas[entity] = keys
        else:
            quotas.pop(entity, None)

    def _replay_no_op(self, record: NoOp) -> None:
        """Nothing to change: NoOps exist to move the high watermark."""

    # ---- copy on write -----------------------------------------------------------------------
    def _own(self, name: str) -> dict[Any, Any]:
        """The map called ``name``, copied on first write after construction or apply."""
        if name not in self._owned:
            setattr(self, name, dict(getattr(self, name)))
            self._owned.add(name)
        return getattr(self, name)

    def _own_brokers(self) -> dict[int, BrokerRegistration]:
        return self._own("_brokers")

    def _partitions_of(self, topic_id: uuid.UUID) -> Mapping[int, PartitionRegistration]:
        owned = self._partitions.get(topic_id)
        return owned if owned is not None else self._topics[topic_id].partitions

    def _own_partitions(self, topic_id: uuid.UUID) -> dict[int, PartitionRegistration]:
        if topic_id not in self._partitions:
            self._partitions[topic_id] = dict(self._topics[topic_id].partitions)
            self._touched[topic_id] = None
        return self._partitions[topic_id]

    # ---- apply -------------------------------------------------------------------------------
    def apply(self, offset: int, epoch: int) -> MetadataImage:
        """The image after every record replayed so far, as of ``offset`` (the next offset
        to apply) in leader ``epoch``. The delta then continues from that image."""
        if offset < self.image.offset:
            raise MetadataStateError(f"apply at {offset} is behind the image's {self.image.offset}")
        if self._partitions:
            topics = self._own("_topics")
            for topic_id, partitions in self._partitions.items():
                topics[topic_id] = dataclasses.replace(topics[topic_id], partitions=partitions)
            self._partitions = {}
        image = self.image
        changed = self._owned
        self._owned = set()  # what the new image holds is frozen from here on
        touched, self._touched = self._touched, {}
        if self._counting is not None:
            self._counts, self._counting = self._counting.finish(), None
        self.image = MetadataImage(
            offset=offset,
            epoch=epoch,
            features=self._features,
            cluster=ClusterImage(self._brokers) if "_brokers" in changed else image.cluster,
            topics=(
                TopicsImage.kept(
                    self._topics,
                    self._topic_ids,
                    self._collision_keys,
                    self._counts,
                    self._next_order,
                    TopicsChange(image.topics.token, tuple(touched)),
                )
                if changed & {"_topics", "_topic_ids", "_collision_keys"}
                else image.topics
            ),
            configs=self._configs,
            next_producer_id=self._next_producer_id,
            acls=self._acls,
            scram_credentials=self._scram,
            client_quotas=self._client_quotas,
        )
        return self.image


def _or(value: tuple[int, ...] | None, current: tuple[int, ...]) -> tuple[int, ...]:
    return current if value is None else value


def _check_registration(partition: PartitionRegistration, record: object) -> None:
    """The invariants every partition state holds, whatever record produced it."""
    replicas = set(partition.replicas)
    problem = None
    if not partition.replicas:
        problem = "no replicas"
    elif len(replicas) != len(partition.replicas) or len(set(partition.isr)) != len(partition.isr):
        problem = "duplicate replicas"
    elif not replicas.issuperset(partition.isr):
        problem = "ISR not a subset of the replicas"
    elif partition.leader != NO_LEADER and partition.leader not in partition.isr:
        problem = f"leader {partition.leader} not in the ISR"
    elif not replicas.issuperset(partition.adding_replicas) or not replicas.issuperset(
        partition.removing_replicas
    ):
        problem = "adding or removing replicas that are not replicas"
    elif (
        len(set(partition.elr)) != len(partition.elr)
        or not replicas.issuperset(partition.elr)
        or not set(partition.elr).isdisjoint(partition.isr)
    ):
        problem = "ELR with duplicates, non-replicas or ISR members"  # KIP-966
    elif partition.directories and len(partition.directories) != len(partition.replicas):
        problem = "directories not one per replica"  # KIP-858
    if problem is not None:
        raise MetadataStateError(f"{record!r}: {problem}")


_HANDLERS: Mapping[type[Any], Any] = {
    RegisterBroker: MetadataDelta._replay_register_broker,
    UnregisterBroker: MetadataDelta._replay_unregister_broker,
    FenceBroker: MetadataDelta._replay_fence_broker,
    UnfenceBroker: MetadataDelta._replay_unfence_broker,
    BrokerRegistrationChange: MetadataDelta._replay_broker_registration_change,
    Topic: MetadataDelta._replay_topic,
    Partition: MetadataDelta._replay_partition,
    PartitionChange: MetadataDelta._replay_partition_change,
    RemoveTopic: MetadataDelta._replay_remove_topic,
    Config: MetadataDelta._replay_config,
    FeatureLevel: MetadataDelta._replay_feature_level,
    ProducerIds: MetadataDelta._replay_producer_ids,
    AccessControlEntry: MetadataDelta._replay_access_control_entry,
    RemoveAccessControlEntry: MetadataDelta._replay_remove_access_control_entry,
    UserScramCredential: MetadataDelta._replay_user_scram_credential,
    RemoveUserScramCredential: MetadataDelta._replay_remove_user_scram_credential,
    ClientQuota: MetadataDelta._replay_client_quota,
    NoOp: MetadataDelta._replay_no_op,
}


def local_changes(
    before: MetadataImage, after: MetadataImage, broker_id: int
) -> LocalReplicaChanges:
    """What ``broker_id`` must start leading, following or deleting going from ``before`` to
    ``after``: a replica appears when it is new to the broker or its epochs moved. When
    ``after`` was built from ``before`` by a delta, only the topics it touched are visited."""
    changes = LocalReplicaChanges({}, {}, set())
    old_topics, new_topics = before.topics.by_id, after.topics.by_id
    touched = changed_topic_ids(before.topics, after.topics)
    if touched is None:  # unrelated images: every topic, the new ones in the image's order
        gone = (topic_id for topic_id in old_topics if topic_id not in new_topics)
        touched = (*new_topics, *gone)
    elif len(touched) > 1:
        # The same order as the walk above (the new image's, then what went), so that the
        # broker acts on its changes in the order it did before it visited only these.
        def position(topic_id: uuid.UUID) -> tuple[bool, int]:
            topic = new_topics.get(topic_id)
            return topic is None, 0 if topic is None else topic.order

        touched = tuple(sorted(touched, key=position))
    for topic_id in touched:
        old, topic = old_topics.get(topic_id), new_topics.get(topic_id)
        if old is topic:
            continue  # shared by identity: untouched by the delta
        if topic is None:
            assert old is not None
            for partition_id, partition in old.partitions.items():
                if broker_id in partition.replicas:
                    changes.deleted.add(TopicPartition(old.name, partition_id))
            continue
        old_partitions = old.partitions if old is not None else {}
        for partition_id, partition in topic.partitions.items():
            previous = old_partitions.get(partition_id)
            if broker_id not in partition.replicas:
                if previous is not None and broker_id in previous.replicas:
                    changes.deleted.add(TopicPartition(topic.name, partition_id))
                continue
            if (
                previous is not None
                and broker_id in previous.replicas
                and previous.leader_epoch == partition.leader_epoch
                and previous.partition_epoch == partition.partition_epoch
            ):
                continue
            target = changes.leaders if partition.leader == broker_id else changes.followers
            target[TopicPartition(topic.name, partition_id)] = partition
    return changes
