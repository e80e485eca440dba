"""The records of ``__consumer_offsets`` in Kafka's own formats, so Kafka's tools read them.

A key starts with an int16 version: 0 and 1 are an OffsetCommitKey (group, topic,
partition), 2 is a GroupMetadataKey (group). Values are an OffsetCommitValue (versions 0-3
read, 3 written, as Kafka does unless a v1 expire timestamp is set) or a GroupMetadataValue
(versions 0-3 read, 3 written). A null value is a tombstone: the offset or group is gone.
Version 4 of both values is flexible (KIP-915): it is read too, skipping tagged fields.
kio has no schemas for these records (they are not API messages), hence this small codec.

Also here: which partition of the topic holds a group (Kafka's rule, so Kafka's own tools
agree on the coordinator): Java's String.hashCode of the group id, made non-negative
(Utils.abs), modulo the partition count.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from log.errors import CorruptRecordError

OFFSET_COMMIT_KEY_VERSION = 1
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def java_string_hash(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, as a signed 32-bit int."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of a group (Kafka's Utils.abs(hash) % n)."""
    hashed = java_string_hash(group_id)
    return (0 if hashed == -(1 << 31) else abs(hashed)) % num_partitions


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberValue, ...]


# ---- writing -------------------------------------------------------------------------------
def _string(out: bytearray, text: str | None) -> None:
    if text is None:
        out += _I16.pack(-1)
        return
    data = text.encode()
    out += _I16.pack(len(data))
    out += data


def _bytes(out: bytearray, data: bytes) -> None:
    out += _I32.pack(len(data))
    out += data


def encode_offset_key(key: OffsetKey) -> bytes:
    out = bytearray(_I16.pack(OFFSET_COMMIT_KEY_VERSION))
    _string(out, key.group)
    _string(out, key.topic)
    out += _I32.pack(key.partition)
    return bytes(out)


def encode_group_key(key: GroupKey) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_KEY_VERSION))
    _string(out, key.group)
    return bytes(out)


def encode_offset_value(value: OffsetValue) -> bytes:
    out = bytearray(_I16.pack(OFFSET_COMMIT_VALUE_VERSION))
    out += _I64.pack(value.offset)
    out += _I32.pack(value.leader_epoch)
    _string(out, value.metadata)
    out += _I64.pack(value.commit_timestamp_ms)
    return bytes(out)


def encode_group_value(value: GroupValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_METADATA_VALUE_VERSION))
    _string(out, value.protocol_type)
    out += _I32.pack(value.generation)
    _string(out, value.protocol)
    _string(out, value.leader)
    out += _I64.pack(value.current_state_timestamp_ms)
    out += _I32.pack(len(value.members))
    for member in value.members:
        _string(out, member.member_id)
        _string(out, member.group_instance_id)
        _string(out, member.client_id)
        _string(out, member.client_host)
        out += _I32.pack(member.rebalance_timeout_ms)
        out += _I32.pack(member.session_timeout_ms)
        _bytes(out, member.subscription)
        _bytes(out, member.assignment)
    return bytes(out)


# ---- reading -------------------------------------------------------------------------------
class Reader:
    """Kafka's classic (v0-3) and flexible (v4) field encodings over one buffer; any overrun
    is a CorruptRecordError, never an IndexError or a silently short value."""

    __slots__ = ("data", "flexible", "pos")

    def __init__(self, data: bytes, flexible: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.flexible = flexible

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise CorruptRecordError("__consumer_offsets record is truncated")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def _fixed(self, fmt: struct.Struct) -> int:
        return fmt.unpack(self.take(fmt.size))[0]

    def i16(self) -> int:
        return self._fixed(_I16)

    def i32(self) -> int:
        return self._fixed(_I32)

    def i64(self) -> int:
        return self._fixed(_I64)

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise CorruptRecordError("__consumer_offsets varint is too long")

    def nullable_string(self) -> str | None:
        size = self.uvarint() - 1 if self.flexible else self.i16()
        if size < 0:
            return None
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as error:
            raise CorruptRecordError(f"__consumer_offsets string: {error}") from None

    def string(self) -> str:
        text = self.nullable_string()
        if text is None:
            raise CorruptRecordError("__consumer_offsets string is null")
        return text

    def bytes_(self) -> bytes:
        size = self.uvarint() - 1 if self.flexible else self.i32()
        return self.take(max(size, 0))

    def array_length(self) -> int:
        size = self.uvarint() - 1 if self.flexible else self.i32()
        if size < 0 or size > len(self.data):
            raise CorruptRecordError("__consumer_offsets array length is invalid")
        return size

    def skip_tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key of a ``__consumer_offsets`` record; None for versions groups do not use
    (transaction and share-group records live in other topics, newer kinds are skipped)."""
    reader = Reader(data)
    version = reader.i16()
    if version in (0, 1):
        return OffsetKey(reader.string(), reader.string(), reader.i32())
    if version == 2:
        return GroupKey(reader.string())
    return None


def decode_offset_value(data: bytes) -> OffsetValue:
    version = _I16.unpack(data[:2])[0] if len(data) >= 2 else -1
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"unknown OffsetCommitValue version {version}")
    reader = Reader(data, flexible=version >= 4)
    reader.pos = 2
    offset = reader.i64()
    epoch = reader.i32() if version >= 3 else NO_LEADER_EPOCH
    metadata = reader.string()
    committed = reader.i64()
    expire = reader.i64() if version == 1 else -1
    reader.skip_tags()
    return OffsetValue(offset, epoch, metadata, committed, expire)


def decode_group_value(data: bytes) -> GroupValue:
    version = _I16.unpack(data[:2])[0] if len(data) >= 2 else -1
    if not 0 <= version <= 4:
        raise CorruptRecordError(f"unknown GroupMetadataValue version {version}")
    reader = Reader(data, flexible=version >= 4)
    reader.pos = 2
    protocol_type = reader.string()
    generation = reader.i32()
    protocol = reader.nullable_string()
    leader = reader.nullable_string()
    timestamp = reader.i64() if version >= 2 else -1
    members = []
    for _ in range(reader.array_length()):
        member_id = reader.string()
        instance = reader.nullable_string() if version >= 3 else None
        client_id = reader.string()
        client_host = reader.string()
        rebalance_timeout = reader.i32() if version >= 1 else -1
        session_timeout = reader.i32()
        subscription = reader.bytes_()
        assignment = reader.bytes_()
        reader.skip_tags()
        members.append(
            MemberValue(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance_timeout if rebalance_timeout >= 0 else session_timeout,
                session_timeout,
                subscription,
                assignment,
            )
        )
    reader.skip_tags()
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))
