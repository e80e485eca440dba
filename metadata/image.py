"""MetadataImage: the cluster as of one offset of ``__cluster_metadata``.

An image is immutable: replaying records goes through a MetadataDelta (metadata/delta.py) that
produces the next image, so a published image can be read by request handlers while the next
one is being built. Dicts inside an image are never mutated after construction (a delta copies
what it changes), which keeps unchanged parts shared between successive images.

An image's topics also say which topics changed since the image they were built from
(``TopicsChange``), so what follows each committed batch (a broker's replica changes, its ISR
metrics) costs what the batch touched rather than the number of topics in the cluster.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping

from metadata.authorizer import AclBinding
from metadata.records import NO_LEADER, FeatureRange, Listener
from protocol.sasl import ScramCredential

# A client-quota entity: its (entity type, name) pairs sorted by type ("client-id", "ip",
# "user"); a name of None is that type's default entity (Kafka's ``<default>``).
QuotaEntity = tuple[tuple[str, str | None], ...]


def entity_order(entity: QuotaEntity) -> tuple[tuple[str, bool, str], ...]:
    """A sort key for entities (None, the default, does not compare with a name)."""
    return tuple((entity_type, name is None, name or "") for entity_type, name in entity)


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    epoch: int
    listeners: tuple[Listener, ...]
    features: tuple[FeatureRange, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    # KIP-858: the ids of its online log dirs (empty: it registered none).
    log_dirs: tuple[uuid.UUID, ...] = ()

    def listener(self, name: str) -> Listener | None:
        return next((item for item in self.listeners if item.name == name), None)


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionRegistration:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # NO_LEADER (-1) when offline
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # KIP-966: replicas outside the ISR that still hold every committed record (the ISR
    # shrank below min.insync.replicas, so the high watermark stopped), and the last leader
    # once the partition lost every ISR member (metadata/controller/elr.py).
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    # KIP-858: each replica's log dir id in replica order, or empty (metadata/directories.py).
    directories: tuple[uuid.UUID, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionRegistration]
    # Where the topic stands in its image's ``by_id`` (a delta numbers topics as it creates
    # them, and a dict keeps insertion order): lets what a delta touched be visited in the
    # image's order without a walk of every topic (``local_changes``).
    order: int = dataclasses.field(default=0, compare=False)


def collision_key(name: str) -> str:
    """Kafka's metric names turn '.' into '_': two topics equal after that would collide."""
    return name.replace(".", "_")


@dataclasses.dataclass(frozen=True, slots=True)
class TopicsChange:
    """The topics a delta created, changed or removed going from the image whose topics
    carry ``base`` (their ``token``) to the image that holds this change."""

    base: object
    topic_ids: tuple[uuid.UUID, ...]  # in the order the delta first touched them


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionCounts:
    """How many partitions each of the controller's recurring questions is about, so that
    the common answer "none" costs a lookup rather than a walk of every partition, which
    takes 170 ms at 100,000 partitions: every heartbeat asks whether its broker leads
    anything, a broker leaving whether it is in any ISR, a broker returning whether any
    partition is offline, the preferred-leader check whether any is led by another replica
    than its first. (Kafka's controller keeps BrokersToIsrs and an imbalanced-partition set,
    which also say which partitions; persistent maps that did so here made a 100,000-partition
    snapshot load in 3.5 s instead of 1.9 s, docs/metadata.md, so the walk remains for the
    rarer case that has something to do.)"""

    leaders: Mapping[int, int] = dataclasses.field(default_factory=dict)  # broker -> led
    # broker -> partitions it leads or is in the ISR or ELR of
    members: Mapping[int, int] = dataclasses.field(default_factory=dict)
    leaderless: int = 0
    imbalanced: int = 0  # led by another replica than the first, or by none


class CountsBuilder:
    """PartitionCounts changing one partition at a time (a delta's), until ``finish``."""

    __slots__ = ("_imbalanced", "_leaderless", "_leaders", "_members")

    def __init__(self, base: PartitionCounts) -> None:
        self._leaders = dict(base.leaders)  # one entry per broker: small
        self._members = dict(base.members)
        self._leaderless = base.leaderless
        self._imbalanced = base.imbalanced

    def move(self, old: PartitionRegistration | None, new: PartitionRegistration | None) -> None:
        """One partition goes from ``old`` to ``new`` (None: absent)."""
        for partition, step in ((old, -1), (new, 1)):
            if partition is None:
                continue
            leader = partition.leader
            if leader == NO_LEADER:
                self._leaderless += step
            else:
                _add(self._leaders, leader, step)
            if not partition.replicas or leader != partition.replicas[0]:
                self._imbalanced += step
            for broker_id in {leader, *partition.isr, *partition.elr} - {NO_LEADER}:
                _add(self._members, broker_id, step)

    def finish(self) -> PartitionCounts:
        return PartitionCounts(self._leaders, self._members, self._leaderless, self._imbalanced)


def _add(counts: dict[int, int], key: int, step: int) -> None:
    total = counts.get(key, 0) + step
    if total:
        counts[key] = total
    else:
        del counts[key]


@dataclasses.dataclass(frozen=True, slots=True)
class TopicsImage:
    by_id: Mapping[uuid.UUID, TopicImage] = dataclasses.field(default_factory=dict)
    by_name: Mapping[str, uuid.UUID] = dataclasses.field(default_factory=dict)
    # collision_key(name) -> the names of the topics with that key (two only for an internal
    # topic beside an older client topic), so that CreateTopics need not rebuild it from
    # every name; and how many partitions each of the controller's recurring questions is
    # about. A delta keeps both as it replays (``kept``); built any other way (by hand,
    # dataclasses.replace) they are derived from the topics, so they always match them.
    collision_keys: Mapping[str, tuple[str, ...]] = dataclasses.field(init=False)
    counts: PartitionCounts = dataclasses.field(init=False)
    next_order: int = dataclasses.field(init=False, compare=False)  # the next topic's order
    # Identity of these topics for a later image's ``change`` (compared with ``is``), and
    # what changed from the topics this was built from (None: not built by a delta).
    token: object = dataclasses.field(init=False, compare=False, repr=False)
    change: TopicsChange | None = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        keys: dict[str, tuple[str, ...]] = {}
        for name in self.by_name:
            keys[collision_key(name)] = (*keys.get(collision_key(name), ()), name)
        builder = CountsBuilder(PartitionCounts())
        next_order = 0
        for topic in self.by_id.values():
            next_order = max(next_order, topic.order + 1)
            for partition in topic.partitions.values():
                builder.move(None, partition)
        self._set(keys, builder.finish(), next_order, None)

    @classmethod
    def kept(
        cls,
        by_id: Mapping[uuid.UUID, TopicImage],
        by_name: Mapping[str, uuid.UUID],
        collision_keys: Mapping[str, tuple[str, ...]],
        counts: PartitionCounts,
        next_order: int,
        change: TopicsChange,
    ) -> TopicsImage:
        """The topics a delta built, with the indexes it kept (nothing derived)."""
        topics = object.__new__(cls)
        object.__setattr__(topics, "by_id", by_id)
        object.__setattr__(topics, "by_name", by_name)
        topics._set(collision_keys, counts, next_order, change)
        return topics

    def _set(
        self,
        collision_keys: Mapping[str, tuple[str, ...]],
        counts: PartitionCounts,
        next_order: int,
        change: TopicsChange | None,
    ) -> None:
        object.__setattr__(self, "collision_keys", collision_keys)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "next_order", next_order)
        object.__setattr__(self, "token", object())
        object.__setattr__(self, "change", change)

    def colliding(self, name: str) -> str | None:
        """The existing topic whose name collides with ``name`` (maybe ``name`` itself)."""
        names = self.collision_keys.get(collision_key(name))
        return None if names is None else names[0]

    def get(self, name: str) -> TopicImage | None:
        topic_id = self.by_name.get(name)
        return None if topic_id is None else self.by_id[topic_id]

    def led_by(self, name: str, broker_id: int) -> dict[int, int]:
        """partition -> leader epoch of the partitions of topic ``name`` that ``broker_id``
        leads (what a coordinator of an internal topic loads)."""
        topic = self.get(name)
        if topic is None:
            return {}
        return {
            index: registration.leader_epoch
            for index, registration in topic.partitions.items()
            if registration.leader == broker_id
        }


def changed_topic_ids(before: TopicsImage, after: TopicsImage) -> tuple[uuid.UUID, ...] | None:
    """The ids of the topics that differ between ``before`` and ``after`` when ``after`` was
    built from ``before`` by one delta (in the order the delta touched them); None when the
    two are not related that way (a snapshot loaded, an image made by hand), and the caller
    must compare every topic."""
    if before is after:
        return ()
    change = after.change
    if change is not None and change.base is before.token:
        return change.topic_ids
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterImage:
    brokers: Mapping[int, BrokerRegistration] = dataclasses.field(default_factory=dict)

    def unfenced(self) -> list[BrokerRegistration]:
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]


@dataclasses.dataclass(frozen=True, slots=True)
class MetadataImage:
    """Everything the metadata log says, as of ``offset`` (the next offset to apply)."""

    offset: int = 0
    epoch: int = 0  # leader epoch of the last applied batch
    features: Mapping[str, int] = dataclasses.field(default_factory=dict)
    cluster: ClusterImage = dataclasses.field(default_factory=ClusterImage)
    topics: TopicsImage = dataclasses.field(default_factory=TopicsImage)
    # (resource_type, resource_name) -> {key: value}
    configs: Mapping[tuple[int, str], Mapping[str, str]] = dataclasses.field(default_factory=dict)
    next_producer_id: int = 0
    # The ACLs (AccessControlEntry records) by id.
    acls: Mapping[uuid.UUID, AclBinding] = dataclasses.field(default_factory=dict)
    # (user, mechanism) -> credential, from UserScramCredential records.
    scram_credentials: Mapping[tuple[str, str], ScramCredential] = dataclasses.field(
        default_factory=dict
    )
    # entity -> {quota key: value}, from ClientQuota records (broker/quotas.py reads them).
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = dataclasses.field(
        default_factory=dict
    )


EMPTY = MetadataImage()
