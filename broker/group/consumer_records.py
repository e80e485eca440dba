"""The KIP-848 consumer group records of ``__consumer_offsets``, in Kafka's own formats.

Kafka's group coordinator keeps a consumer-protocol group as six kinds of record, told apart
by the int16 version that starts the key (each key is a non-flexible message of that single
version; each value is a flexible message, version 0, with tagged fields):

  3 ConsumerGroupMetadata (group) -> the group epoch
  4 ConsumerGroupPartitionMetadata (group) -> the subscribed topics' ids, names, partition counts
  5 ConsumerGroupMemberMetadata (group, member) -> instance id, rack, client, subscription
  6 ConsumerGroupTargetAssignmentMetadata (group) -> the assignment epoch
  7 ConsumerGroupTargetAssignmentMember (group, member) -> the member's target partitions
  8 ConsumerGroupCurrentMemberAssignment (group, member) -> member epoch, state, partitions

A null value is a tombstone. kio has only API messages, not these coordinator records,
hence this codec (the reader is ``records``' flexible reader); unknown tagged fields are
skipped, so records a newer Kafka writes with extra tags still load.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from broker.group.records import Reader
from log.errors import CorruptRecordError

TopicIdPartition = tuple[uuid.UUID, int]
Partitions = frozenset[TopicIdPartition]

GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_ASSIGNMENT_METADATA = 6
TARGET_ASSIGNMENT_MEMBER = 7
CURRENT_MEMBER_ASSIGNMENT = 8
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """A consumer group record's key: ``kind`` is one of the versions above; ``member_id``
    is set for the per-member kinds (5, 7, 8) only."""

    kind: int
    group: str
    member_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class AssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetMemberValue:
    partitions: Partitions


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # Kafka's MemberState byte: 0 stable, 1 unrevoked, 2 unreleased, 127 unknown
    assigned: Partitions
    pending_revocation: Partitions


ConsumerGroupValue = (
    GroupEpochValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | AssignmentEpochValue
    | TargetMemberValue
    | CurrentAssignmentValue
)
_MEMBER_KINDS = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
_VALUE_KIND: dict[type, int] = {
    GroupEpochValue: GROUP_METADATA,
    PartitionMetadataValue: PARTITION_METADATA,
    MemberMetadataValue: MEMBER_METADATA,
    AssignmentEpochValue: TARGET_ASSIGNMENT_METADATA,
    TargetMemberValue: TARGET_ASSIGNMENT_MEMBER,
    CurrentAssignmentValue: CURRENT_MEMBER_ASSIGNMENT,
}


def kind_of(value: ConsumerGroupValue) -> int:
    """The key version a value is stored under."""
    return _VALUE_KIND[type(value)]


# ---- writing -------------------------------------------------------------------------------
def _key_string(out: bytearray, text: str) -> None:
    data = text.encode()
    out += _I16.pack(len(data))
    out += data


def encode_key(key: ConsumerGroupKey) -> bytes:
    """A key: int16 kind, then the group (and member) as classic int16-length strings."""
    assert (key.member_id is not None) == (key.kind in _MEMBER_KINDS), key
    out = bytearray(_I16.pack(key.kind))
    _key_string(out, key.group)
    if key.member_id is not None:
        _key_string(out, key.member_id)
    return bytes(out)


def _uvarint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _compact_string(out: bytearray, text: str | None) -> None:
    if text is None:
        out.append(0)
        return
    data = text.encode()
    _uvarint(out, len(data) + 1)
    out += data


def _topic_partitions(out: bytearray, partitions: Partitions) -> None:
    """Kafka's []TopicPartitions: per topic id, its partitions (sorted, for stable bytes)."""
    by_topic: dict[uuid.UUID, list[int]] = {}
    for topic_id, partition in sorted(partitions):
        by_topic.setdefault(topic_id, []).append(partition)
    _uvarint(out, len(by_topic) + 1)
    for topic_id, indexes in by_topic.items():
        out += topic_id.bytes
        _uvarint(out, len(indexes) + 1)
        for index in indexes:
            out += _I32.pack(index)
        out.append(0)  # no tagged fields


def encode_value(value: ConsumerGroupValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    if isinstance(value, GroupEpochValue):
        out += _I32.pack(value.epoch)
    elif isinstance(value, PartitionMetadataValue):
        _uvarint(out, len(value.topics) + 1)
        for topic in value.topics:
            out += topic.topic_id.bytes
            _compact_string(out, topic.name)
            out += _I32.pack(topic.num_partitions)
            out.append(1)  # PartitionMetadata (racks): empty, as Kafka 4 writes it
            out.append(0)
    elif isinstance(value, MemberMetadataValue):
        _compact_string(out, value.instance_id)
        _compact_string(out, value.rack_id)
        _compact_string(out, value.client_id)
        _compact_string(out, value.client_host)
        _uvarint(out, len(value.subscribed_topic_names) + 1)
        for name in value.subscribed_topic_names:
            _compact_string(out, name)
        _compact_string(out, value.subscribed_topic_regex)
        out += _I32.pack(value.rebalance_timeout_ms)
        _compact_string(out, value.server_assignor)
    elif isinstance(value, AssignmentEpochValue):
        out += _I32.pack(value.assignment_epoch)
    elif isinstance(value, TargetMemberValue):
        _topic_partitions(out, value.partitions)
    else:
        out += _I32.pack(value.member_epoch)
        out += _I32.pack(value.previous_member_epoch)
        out.append(value.state & 0xFF)
        _topic_partitions(out, value.assigned)
        _topic_partitions(out, value.pending_revocation)
    out.append(0)  # no tagged fields
    return bytes(out)


# ---- reading -------------------------------------------------------------------------------
def decode_key(data: bytes) -> ConsumerGroupKey | None:
    """A consumer group key, or None for a version that is not one."""
    reader = Reader(data)
    kind = reader.i16()
    if not GROUP_METADATA <= kind <= CURRENT_MEMBER_ASSIGNMENT:
        return None
    group = reader.string()
    member = reader.string() if kind in _MEMBER_KINDS else None
    return ConsumerGroupKey(kind, group, member)


def _read_uuid(reader: Reader) -> uuid.UUID:
    return uuid.UUID(bytes=reader.take(16))


def _read_topic_partitions(reader: Reader) -> Partitions:
    found: set[TopicIdPartition] = set()
    for _ in range(reader.array_length()):
        topic_id = _read_uuid(reader)
        for _ in range(reader.array_length()):
            found.add((topic_id, reader.i32()))
        reader.skip_tags()
    return frozenset(found)


def decode_value(kind: int, data: bytes) -> ConsumerGroupValue:
    """The value stored under a key of ``kind``; a CorruptRecordError if unreadable."""
    reader = Reader(data, flexible=True)
    version = reader.i16()
    if version != VALUE_VERSION:
        raise CorruptRecordError(f"unknown consumer group record version {version} ({kind})")
    value: ConsumerGroupValue
    if kind == GROUP_METADATA:
        value = GroupEpochValue(reader.i32())
    elif kind == PARTITION_METADATA:
        topics = []
        for _ in range(reader.array_length()):
            topic_id = _read_uuid(reader)
            name = reader.string()
            count = reader.i32()
            for _ in range(reader.array_length()):  # racks per partition: not used
                reader.i32()
                for _ in range(reader.array_length()):
                    reader.string()
                reader.skip_tags()
            reader.skip_tags()
            topics.append(TopicMetadata(topic_id, name, count))
        value = PartitionMetadataValue(tuple(topics))
    elif kind == MEMBER_METADATA:
        instance, rack = reader.nullable_string(), reader.nullable_string()
        client_id, client_host = reader.string(), reader.string()
        names = tuple(reader.string() for _ in range(reader.array_length()))
        regex = reader.nullable_string()
        value = MemberMetadataValue(
            instance,
            rack,
            client_id,
            client_host,
            names,
            regex,
            reader.i32(),
            reader.nullable_string(),
        )
    elif kind == TARGET_ASSIGNMENT_METADATA:
        value = AssignmentEpochValue(reader.i32())
    elif kind == TARGET_ASSIGNMENT_MEMBER:
        value = TargetMemberValue(_read_topic_partitions(reader))
    elif kind == CURRENT_MEMBER_ASSIGNMENT:
        member_epoch, previous = reader.i32(), reader.i32()
        state = reader.take(1)[0]
        value = CurrentAssignmentValue(
            member_epoch,
            previous,
            state,
            _read_topic_partitions(reader),
            _read_topic_partitions(reader),
        )
    else:
        raise CorruptRecordError(f"not a consumer group record kind: {kind}")
    reader.skip_tags()
    return value
