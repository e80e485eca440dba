"""Hypothesis strategies for metadata records: any record (for the codec) and legal histories.

A legal history is generated from a small model of its own (plain dicts of brokers, topics and
partitions), not from MetadataDelta, so the delta's rules are checked against an independent
statement of what is legal.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hypothesis import strategies as st

from metadata.image import MetadataImage
from metadata.records import (
    BROKER_RESOURCE,
    NO_LEADER,
    TOPIC_RESOURCE,
    AccessControlEntry,
    BrokerRegistrationChange,
    ClientQuota,
    Config,
    FeatureLevel,
    FeatureRange,
    FenceBroker,
    Listener,
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

INT8 = st.integers(-128, 127)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
ints = st.lists(INT32, max_size=5).map(tuple)
listeners = st.builds(Listener, st.text(max_size=8), st.text(max_size=8), INT32, INT32)
feature_ranges = st.builds(FeatureRange, st.text(max_size=8), INT32, INT32)

any_record: st.SearchStrategy[MetadataRecord] = st.one_of(
    st.builds(
        RegisterBroker,
        INT32,
        uuids,
        INT64,
        st.lists(listeners, max_size=3).map(tuple),
        st.lists(feature_ranges, max_size=3).map(tuple),
        st.none() | st.text(max_size=8),
        st.booleans(),
        st.booleans(),
        log_dirs=st.lists(uuids, max_size=3).map(tuple),
    ),
    st.builds(UnregisterBroker, INT32, INT64),
    st.builds(FenceBroker, INT32, INT64),
    st.builds(UnfenceBroker, INT32, INT64),
    st.builds(
        BrokerRegistrationChange,
        INT32,
        INT64,
        st.none() | st.booleans(),
        st.none() | st.booleans(),
        log_dirs=st.none() | st.lists(uuids, max_size=3).map(tuple),
    ),
    st.builds(Topic, st.text(max_size=20), uuids),
    st.builds(
        Partition,
        uuids,
        INT32,
        ints,
        ints,
        INT32,
        INT32,
        INT32,
        ints,
        ints,
        directories=st.lists(uuids, max_size=3).map(tuple),
    ),
    st.builds(
        PartitionChange,
        uuids,
        INT32,
        st.none() | ints,
        st.none() | INT32,
        st.none() | ints,
        st.none() | ints,
        st.none() | ints,
        st.booleans(),
        directories=st.none() | st.lists(uuids, max_size=3).map(tuple),
    ),
    st.builds(RemoveTopic, uuids),
    st.builds(Config, INT32, st.text(max_size=8), st.text(max_size=8), st.none() | st.text()),
    st.builds(FeatureLevel, st.text(max_size=8), INT32),
    st.builds(ProducerIds, INT32, INT64, INT64),
    st.builds(
        AccessControlEntry,
        uuids,
        INT8,
        st.text(max_size=8),
        INT8,
        st.text(max_size=8),
        st.text(max_size=8),
        INT8,
        INT8,
    ),
    st.builds(RemoveAccessControlEntry, uuids),
    st.builds(
        UserScramCredential,
        st.text(max_size=8),
        st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
        st.binary(max_size=32),
        st.binary(max_size=64),
        st.binary(max_size=64),
        st.integers(4096, 10_000),
    ),
    st.builds(
        RemoveUserScramCredential,
        st.text(max_size=8),
        st.sampled_from(["SCRAM-SHA-256", "SCRAM-SHA-512"]),
    ),
    st.builds(
        ClientQuota,
        st.lists(st.text(max_size=8), max_size=2).map(tuple),
        st.lists(st.none() | st.text(max_size=8), max_size=2).map(tuple),
        st.text(max_size=8),
        st.floats(allow_nan=False),
        st.booleans(),
    ),
    st.just(NoOp()),
)

BROKER_IDS = range(4)
# KIP-858 log dir ids: Kafka's reserved MIGRATING / UNASSIGNED / LOST and two real ones.
DIR_IDS = st.sampled_from([uuid.UUID(int=i) for i in (0, 1, 2, 2**100, 2**101)])


@st.composite
def _directories(draw: st.DrawFn, replicas: tuple[int, ...]) -> tuple[uuid.UUID, ...]:
    """A partition's dirs: none (all MIGRATING) or one per replica."""
    if draw(st.booleans()):
        return ()
    return tuple(draw(DIR_IDS) for _ in replicas)


TOPIC_NAMES = ("a", "b", "c")
CONFIG_KEYS = ("retention.ms", "cleanup.policy")


@dataclass
class Model:
    """What a legal next record may refer to."""

    brokers: dict[int, tuple[int, bool, bool]] = field(default_factory=dict)  # epoch, flags
    topics: dict[str, uuid.UUID] = field(default_factory=dict)
    partitions: dict[uuid.UUID, dict[int, tuple[tuple[int, ...], tuple[int, ...], int]]] = field(
        default_factory=dict
    )
    next_producer_id: int = 0
    epoch_counter: int = 0
    acls: set[uuid.UUID] = field(default_factory=set)


@st.composite
def legal_record(draw: st.DrawFn, model: Model) -> MetadataRecord:
    """One record legal after the model's history; updates the model."""
    kinds = ["register", "feature", "noop", "acl", "client_quota"]
    if model.acls:
        kinds.append("remove_acl")
    if model.brokers:
        kinds += ["unregister", "broker_change", "producer_ids", "broker_config"]
    if len(model.topics) < len(TOPIC_NAMES):
        kinds.append("topic")
    if model.topics:
        kinds += ["partition", "partition_change", "remove_topic", "topic_config"]
    kind = draw(st.sampled_from(kinds))
    if kind == "register":
        model.epoch_counter += 1
        broker_id = draw(st.sampled_from(BROKER_IDS))
        fenced, shutdown = draw(st.booleans()), draw(st.booleans())
        model.brokers[broker_id] = (model.epoch_counter, fenced, shutdown)
        return RegisterBroker(
            broker_id,
            draw(uuids),
            model.epoch_counter,
            (Listener("PLAINTEXT", "localhost", 9092 + broker_id),),
            (FeatureRange("metadata.version", 1, 1),),
            draw(st.none() | st.sampled_from(("r1", "r2"))),
            fenced,
            shutdown,
            draw(st.lists(DIR_IDS, unique=True, max_size=2).map(tuple)),
        )
    if kind == "unregister":
        broker_id = draw(st.sampled_from(sorted(model.brokers)))
        epoch, _, _ = model.brokers.pop(broker_id)
        return UnregisterBroker(broker_id, epoch)
    if kind == "broker_change":
        return draw(_broker_change(model))
    if kind == "producer_ids":
        broker_id = draw(st.sampled_from(sorted(model.brokers)))
        model.next_producer_id += draw(st.integers(1, 1000))
        return ProducerIds(broker_id, model.brokers[broker_id][0], model.next_producer_id)
    if kind == "noop":
        return NoOp()
    if kind == "acl":
        acl_id = draw(uuids.filter(lambda u: u not in model.acls))
        model.acls.add(acl_id)
        return AccessControlEntry(
            acl_id,
            draw(st.sampled_from((2, 3, 5))),  # TOPIC, GROUP, TRANSACTIONAL_ID
            draw(st.sampled_from(("a", "b", "*"))),
            draw(st.sampled_from((3, 4))),  # LITERAL, PREFIXED
            draw(st.sampled_from(("User:alice", "User:*"))),
            draw(st.sampled_from(("*", "10.0.0.1"))),
            draw(st.integers(2, 12)),
            draw(st.sampled_from((2, 3))),  # DENY, ALLOW
        )
    if kind == "remove_acl":
        acl_id = draw(st.sampled_from(sorted(model.acls)))
        model.acls.remove(acl_id)
        return RemoveAccessControlEntry(acl_id)
    if kind == "client_quota":
        return draw(_client_quota())
    if kind == "feature":
        return FeatureLevel(
            draw(st.sampled_from(("metadata.version", "x"))), draw(st.integers(0, 3))
        )
    if kind == "broker_config":
        name = str(draw(st.sampled_from(sorted(model.brokers))))
        return _config(draw, BROKER_RESOURCE, draw(st.sampled_from((name, ""))))
    if kind == "topic":
        name = draw(st.sampled_from([n for n in TOPIC_NAMES if n not in model.topics]))
        topic_id = draw(uuids.filter(lambda u: u not in model.partitions))
        model.topics[name] = topic_id
        model.partitions[topic_id] = {}
        return Topic(name, topic_id)
    name = draw(st.sampled_from(sorted(model.topics)))
    topic_id = model.topics[name]
    partitions = model.partitions[topic_id]
    if kind == "topic_config":
        return _config(draw, TOPIC_RESOURCE, name)
    if kind == "remove_topic":
        del model.topics[name]
        del model.partitions[topic_id]
        return RemoveTopic(topic_id)
    if kind == "partition" or not partitions:
        partition_id = len(partitions)
        replicas, isr, leader = draw(_assignment())
        epochs = draw(st.tuples(st.integers(0, 5), st.integers(0, 5)))
        partitions[partition_id] = (replicas, isr, leader)
        elr, last_known_elr = draw(_elr(replicas, isr))
        return Partition(
            topic_id,
            partition_id,
            replicas,
            isr,
            leader,
            *epochs,
            eligible_leader_replicas=elr,
            last_known_elr=last_known_elr,
            directories=draw(_directories(replicas)),
        )
    partition_id = draw(st.sampled_from(sorted(partitions)))
    replicas, isr, leader = partitions[partition_id]
    change = draw(st.sampled_from(("isr", "leader", "reassign", "bump", "dirs")))
    if change == "bump":
        return PartitionChange(topic_id, partition_id, bump_leader_epoch=True)
    if change == "dirs":  # KIP-858: a broker placed its replica (AssignReplicasToDirs)
        return PartitionChange(topic_id, partition_id, directories=draw(_directories(replicas)))
    if change == "reassign":
        replicas, isr, leader = draw(_assignment())
        partitions[partition_id] = (replicas, isr, leader)
        return PartitionChange(
            topic_id, partition_id, isr, leader, replicas, eligible_leader_replicas=()
        )
    if change == "isr":
        isr = tuple(draw(st.lists(st.sampled_from(replicas), unique=True)))
        new_leader = leader if leader in isr or leader == NO_LEADER else NO_LEADER
        partitions[partition_id] = (replicas, isr, new_leader)
        elr, last_known_elr = draw(_elr(replicas, isr))  # every ISR change says the ELR too
        return PartitionChange(
            topic_id,
            partition_id,
            isr=isr,
            leader=None if new_leader == leader else new_leader,
            eligible_leader_replicas=elr,
            last_known_elr=last_known_elr,
        )
    new_leader = draw(st.sampled_from((NO_LEADER, *isr)))
    partitions[partition_id] = (replicas, isr, new_leader)
    return PartitionChange(topic_id, partition_id, leader=new_leader)


@st.composite
def _client_quota(draw: st.DrawFn) -> MetadataRecord:
    """A quota set or removed on a user, a client id, both (defaults included), or an ip."""
    names = st.none() | st.sampled_from(("alice", "app"))
    types = draw(st.sampled_from((("user",), ("client-id",), ("client-id", "user"), ("ip",))))
    entity_names = tuple(draw(names) for _ in types)
    key = draw(st.sampled_from(("producer_byte_rate", "consumer_byte_rate")))
    value = float(draw(st.integers(1, 10**9)))
    return ClientQuota(types, entity_names, key, value, remove=draw(st.booleans()))


@st.composite
def _broker_change(draw: st.DrawFn, model: Model) -> MetadataRecord:
    broker_id = draw(st.sampled_from(sorted(model.brokers)))
    epoch, fenced, shutdown = model.brokers[broker_id]
    moves = {  # (fenced, shutdown) -> legal next states
        (True, False): [(False, False), (True, True)],
        (False, False): [(True, False), (False, True)],
        (False, True): [(True, True)],
        (True, True): [],
    }[(fenced, shutdown)]
    if not moves:  # only re-registration brings it back
        return BrokerRegistrationChange(broker_id, epoch)
    to_fenced, to_shutdown = draw(st.sampled_from(moves))
    model.brokers[broker_id] = (epoch, to_fenced, to_shutdown)
    if to_shutdown == shutdown and draw(st.booleans()):
        return FenceBroker(broker_id, epoch) if to_fenced else UnfenceBroker(broker_id, epoch)
    if not shutdown and to_shutdown and to_fenced:
        return BrokerRegistrationChange(broker_id, epoch, True, True)
    if to_shutdown != shutdown:
        return BrokerRegistrationChange(broker_id, epoch, in_controlled_shutdown=True)
    return BrokerRegistrationChange(broker_id, epoch, fenced=to_fenced)


@st.composite
def _elr(
    draw: st.DrawFn, replicas: tuple[int, ...], isr: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(ELR, last known ELR) for a partition: the ELR never overlaps the ISR (KIP-966)."""
    outside = [r for r in replicas if r not in isr] or [replicas[0]]
    elr = tuple(draw(st.lists(st.sampled_from(outside), unique=True)))
    elr = tuple(r for r in elr if r not in isr)
    return elr, tuple(draw(st.lists(st.sampled_from(replicas), unique=True, max_size=1)))


@st.composite
def _assignment(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    replicas = tuple(draw(st.lists(st.sampled_from(BROKER_IDS), min_size=1, unique=True)))
    isr = tuple(draw(st.lists(st.sampled_from(replicas), unique=True)))
    leader = draw(st.sampled_from((NO_LEADER, *isr)))
    return replicas, isr, leader


def _config(draw: st.DrawFn, resource_type: int, resource_name: str) -> Config:
    value = draw(st.none() | st.sampled_from(("1", "2", "delete")))
    return Config(resource_type, resource_name, draw(st.sampled_from(CONFIG_KEYS)), value)


@st.composite
def legal_history(draw: st.DrawFn, max_batches: int = 12) -> list[list[MetadataRecord]]:
    """Batches of records, each legal after those before it."""
    model = Model()
    batch_sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=max_batches))
    return [[draw(legal_record(model)) for _ in range(size)] for size in batch_sizes]


def illegal_for(image: MetadataImage) -> st.SearchStrategy[MetadataRecord]:
    """Records that are illegal on top of ``image``, whatever it holds."""
    unknown_id = uuids.filter(lambda u: u not in image.topics.by_id)
    stranger = 100  # never a broker or a replica in generated histories
    options: list[st.SearchStrategy[MetadataRecord]] = [
        st.builds(
            Partition, unknown_id, st.integers(0, 3), st.just((1,)), st.just((1,)), st.just(1)
        ),
        st.builds(PartitionChange, unknown_id, st.integers(0, 3), leader=st.just(NO_LEADER)),
        st.builds(RemoveTopic, unknown_id),
        st.builds(RemoveAccessControlEntry, unknown_id.filter(lambda u: u not in image.acls)),
        st.builds(FenceBroker, st.just(stranger), INT32),
        st.builds(UnfenceBroker, st.just(stranger), INT32),
        st.builds(UnregisterBroker, st.just(stranger), INT32),
        st.builds(BrokerRegistrationChange, st.just(stranger), INT32, st.booleans()),
        st.builds(
            Partition,
            st.just(uuid.UUID(int=0)),
            st.just(0),
            st.just(()),
            st.just(()),
            st.just(NO_LEADER),
        ),
        st.just(ProducerIds(0, 0, image.next_producer_id)),
        st.builds(FeatureLevel, st.text(max_size=3), st.integers(-5, -1)),
        st.builds(Config, st.just(TOPIC_RESOURCE), st.just("zz"), st.just("k"), st.just("v")),
    ]
    for broker_id, broker in image.cluster.brokers.items():
        stale = broker.epoch + 1000
        options.append(
            st.sampled_from(
                [
                    FenceBroker(broker_id, stale),
                    UnregisterBroker(broker_id, stale),
                    BrokerRegistrationChange(broker_id, stale, fenced=not broker.fenced),
                    (FenceBroker if broker.fenced else UnfenceBroker)(broker_id, broker.epoch),
                ]
            )
        )
    for name, topic_id in image.topics.by_name.items():
        options.append(st.sampled_from([Topic(name, uuid.UUID(int=0)), Topic("new", topic_id)]))
        for partition_id in image.topics.by_id[topic_id].partitions:
            options.append(
                st.sampled_from(
                    [
                        Partition(topic_id, partition_id, (1,), (1,), 1),
                        PartitionChange(topic_id, partition_id, leader=stranger),
                        PartitionChange(topic_id, partition_id, isr=(stranger,)),
                        PartitionChange(topic_id, partition_id, replicas=()),
                    ]
                )
            )
    return st.one_of(options)
