"""Metadata records: the values of ``__cluster_metadata``, msgpack maps ``{type, version, ...}``.

Each record is a frozen dataclass whose fields are exactly its version's fields; the codec
(:func:`encode_record` / :func:`decode_record`) turns one into the msgpack value of a v2 batch
record and back. The set mirrors Kafka's metadata records (RegisterBrokerRecord,
PartitionChangeRecord, ...) under snake_case names. Unknown types and versions fail loudly with
the offset: a broker that silently skipped a record would serve a different image than its
peers.

Conventions shared with the image (metadata/image.py):
- topic ids are ``uuid.UUID`` (16 raw bytes on the wire);
- ``PartitionChange`` fields set to ``None`` mean "unchanged"; a leader of ``NO_LEADER`` (-1)
  means the partition has no leader;
- ``Config.value`` of ``None`` deletes the key (back to its default).
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
import uuid
from typing import Any, ClassVar

import msgpack

NO_LEADER = -1
TOPIC_RESOURCE = 2  # Kafka's ConfigResource.Type ids
BROKER_RESOURCE = 4
METADATA_VERSION_FEATURE = "metadata.version"
# KIP-966: level 1 makes the controller keep eligible leader replicas (metadata/controller/elr.py).
ELR_FEATURE = "eligible.leader.replicas.version"
# KIP-890 part 2 / KIP-1022: level 2 lets clients use transaction version 2 (an epoch bump per
# transaction, partitions added by the Produce itself); 0 and 1 keep the older protocol.
TRANSACTION_VERSION_FEATURE = "transaction.version"


class MetadataRecordError(ValueError):
    """A record value that is not a known {type, version} map."""


@dataclasses.dataclass(frozen=True, slots=True)
class Listener:
    """One advertised endpoint of a broker (or controller)."""

    name: str
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureRange:
    """A feature a broker supports: [min_version, max_version]."""

    name: str
    min_version: int
    max_version: int


@dataclasses.dataclass(frozen=True, slots=True)
class RegisterBroker:
    TYPE: ClassVar[str] = "RegisterBroker"
    VERSION: ClassVar[int] = 0
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int  # the offset of this record: unique per registration
    listeners: tuple[Listener, ...]
    features: tuple[FeatureRange, ...]
    rack: str | None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    # KIP-858 (RegisterBrokerRecord v3 LogDirs): the directory ids of its online log dirs.
    log_dirs: tuple[uuid.UUID, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class UnregisterBroker:
    TYPE: ClassVar[str] = "UnregisterBroker"
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class FenceBroker:
    TYPE: ClassVar[str] = "FenceBroker"
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class UnfenceBroker:
    TYPE: ClassVar[str] = "UnfenceBroker"
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRegistrationChange:
    TYPE: ClassVar[str] = "BrokerRegistrationChange"
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    # KIP-858 (BrokerRegistrationChangeRecord v2 LogDirs): its online log dirs are now these
    # (some failed); None leaves them as they are.
    log_dirs: tuple[uuid.UUID, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Topic:
    TYPE: ClassVar[str] = "Topic"
    VERSION: ClassVar[int] = 0
    name: str
    topic_id: uuid.UUID


@dataclasses.dataclass(frozen=True, slots=True)
class Partition:
    TYPE: ClassVar[str] = "Partition"
    VERSION: ClassVar[int] = 0
    topic_id: uuid.UUID
    partition_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # KIP-966 (Kafka's PartitionRecord v2 EligibleLeaderReplicas / LastKnownElr).
    eligible_leader_replicas: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()
    # KIP-858 (PartitionRecord v1 Directories): the log dir id of each replica, in replica
    # order; empty means every replica's dir is unknown (Kafka's MIGRATING, see
    # metadata/directories.py).
    directories: tuple[uuid.UUID, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionChange:
    """A change to one partition. Applying it bumps the partition epoch; a leader change (or
    an explicit ``bump_leader_epoch``) also bumps the leader epoch."""

    TYPE: ClassVar[str] = "PartitionChange"
    VERSION: ClassVar[int] = 0
    topic_id: uuid.UUID
    partition_id: int
    isr: tuple[int, ...] | None = None
    leader: int | None = None
    replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    bump_leader_epoch: bool = False
    eligible_leader_replicas: tuple[int, ...] | None = None
    last_known_elr: tuple[int, ...] | None = None
    # KIP-858 (PartitionChangeRecord v1 Directories), in (new) replica order; None keeps
    # each remaining replica's dir (metadata/delta.py).
    directories: tuple[uuid.UUID, ...] | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveTopic:
    TYPE: ClassVar[str] = "RemoveTopic"
    VERSION: ClassVar[int] = 0
    topic_id: uuid.UUID


@dataclasses.dataclass(frozen=True, slots=True)
class Config:
    TYPE: ClassVar[str] = "Config"
    VERSION: ClassVar[int] = 0
    resource_type: int  # TOPIC_RESOURCE or BROKER_RESOURCE
    resource_name: str  # topic name, broker id as text, or "" for the cluster default
    name: str
    value: str | None  # None deletes the key


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureLevel:
    TYPE: ClassVar[str] = "FeatureLevel"
    VERSION: ClassVar[int] = 0
    name: str
    feature_level: int


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerIds:
    """The controller handed out [previous next_producer_id, next_producer_id)."""

    TYPE: ClassVar[str] = "ProducerIds"
    VERSION: ClassVar[int] = 0
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """One ACL (Kafka's AccessControlEntryRecord): codes as Kafka's ResourceType,
    PatternType, AclOperation and AclPermissionType; ``acl_id`` names it for removal."""

    TYPE: ClassVar[str] = "AccessControlEntry"
    VERSION: ClassVar[int] = 0
    acl_id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveAccessControlEntry:
    """Kafka's RemoveAccessControlEntryRecord: the ACL ``acl_id`` is gone."""

    TYPE: ClassVar[str] = "RemoveAccessControlEntry"
    VERSION: ClassVar[int] = 0
    acl_id: uuid.UUID


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredential:
    """Kafka's UserScramCredentialRecord: one user's SCRAM credential for one mechanism
    (SCRAM-SHA-256 or SCRAM-SHA-512); the password itself is never stored."""

    TYPE: ClassVar[str] = "UserScramCredential"
    VERSION: ClassVar[int] = 0
    name: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclasses.dataclass(frozen=True, slots=True)
class RemoveUserScramCredential:
    """Kafka's RemoveUserScramCredentialRecord."""

    TYPE: ClassVar[str] = "RemoveUserScramCredential"
    VERSION: ClassVar[int] = 0
    name: str
    mechanism: str


@dataclasses.dataclass(frozen=True, slots=True)
class ClientQuota:
    """Kafka's ClientQuotaRecord: one quota key of one entity set or removed. The entity is
    its (type, name) pairs ("user", "client-id", "ip"), kept as two parallel tuples in
    entity-type order; a name of None is the type's default entity (Kafka's ``<default>``).
    ``remove`` deletes the key (``value`` is then ignored)."""

    TYPE: ClassVar[str] = "ClientQuota"
    VERSION: ClassVar[int] = 0
    entity_types: tuple[str, ...]
    entity_names: tuple[str | None, ...]
    key: str
    value: float
    remove: bool


@dataclasses.dataclass(frozen=True, slots=True)
class NoOp:
    """Appended when idle (KIP-835) so the high watermark keeps moving."""

    TYPE: ClassVar[str] = "NoOp"
    VERSION: ClassVar[int] = 0


MetadataRecord = (
    RegisterBroker
    | UnregisterBroker
    | FenceBroker
    | UnfenceBroker
    | BrokerRegistrationChange
    | Topic
    | Partition
    | PartitionChange
    | RemoveTopic
    | Config
    | FeatureLevel
    | ProducerIds
    | AccessControlEntry
    | RemoveAccessControlEntry
    | UserScramCredential
    | RemoveUserScramCredential
    | ClientQuota
    | NoOp
)
RECORD_TYPES: dict[str, type[Any]] = {
    cls.TYPE: cls
    for cls in (
        RegisterBroker,
        UnregisterBroker,
        FenceBroker,
        UnfenceBroker,
        BrokerRegistrationChange,
        Topic,
        Partition,
        PartitionChange,
        RemoveTopic,
        Config,
        FeatureLevel,
        ProducerIds,
        AccessControlEntry,
        RemoveAccessControlEntry,
        UserScramCredential,
        RemoveUserScramCredential,
        ClientQuota,
        NoOp,
    )
}


# KIP-858's fields are left out while at their default (Kafka's records carry them only from the
# metadata version that added them): a cluster whose brokers have one log dir each writes
# the same bytes as before they existed, and decoding fills in the default.
_OMITTED_WHEN_UNSET = frozenset({"log_dirs", "directories"})


def encode_record(record: MetadataRecord) -> bytes:
    """The msgpack value of one metadata record: a flat map of ``type``, ``version`` and the
    fields in declaration order; tuples are arrays, uuids their 16 raw bytes, listeners and
    feature ranges maps. (msgpack packs the nesting in C, calling ``_packed_as`` only for
    uuids and those two: 7,000 partition records took 138 ms with every value walked in
    Python first, one turn of the controller's loop.)"""
    fields: dict[str, Any] = {"type": record.TYPE, "version": record.VERSION}
    for name, default, optional in _fields_of(type(record)):
        value = getattr(record, name)
        if not optional or value != default:
            fields[name] = value
    return _PACKER.pack(fields)


def _fields_of(cls: type[MetadataRecord]) -> tuple[tuple[str, object, bool], ...]:
    """(name, default, omitted when equal to the default) of each field of ``cls``."""
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = tuple(
            (f.name, f.default, f.name in _OMITTED_WHEN_UNSET) for f in dataclasses.fields(cls)
        )
    return found


def _packed_as(value: object) -> object:
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, Listener | FeatureRange):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    raise TypeError(f"a metadata record holds an unencodable {type(value).__name__}")


_FIELDS: dict[type[Any], tuple[tuple[str, object, bool], ...]] = {}
# One packer: packb builds one per call. autoreset: ``pack`` returns each value's bytes.
_PACKER = msgpack.Packer(default=_packed_as)


def decode_record(value: bytes, offset: int) -> MetadataRecord:
    """Parse a record value; unknown types, versions or fields fail loudly with the offset."""
    try:
        raw = msgpack.unpackb(value)
    except (ValueError, TypeError, msgpack.UnpackException) as error:
        raise MetadataRecordError(f"offset {offset}: undecodable record ({error})") from None
    try:
        return _decode_fast(raw)
    except _Mismatch:
        pass  # the checked path below says what is wrong
    try:
        return _decode_record(raw)
    except _FieldError as error:
        raise MetadataRecordError(f"offset {offset}: {error}") from None


class _FieldError(Exception):
    """A decoded map that does not match its schema (the offset is added by the caller)."""


# ---- the fast path -------------------------------------------------------------------------
# Every node decodes every metadata record it replays (a 100,000-partition snapshot holds
# 200,000), and the checked path below took 75 us a record, most of it building the error
# location of every value in case it is wrong. The fast path makes exactly the same checks
# with a decoder built once per field type and no messages; on any mismatch it gives up and
# the checked path decodes the same map again to say where the mismatch is. (Both accept
# exactly the same maps: tests/metadata/test_records.py feeds them valid and mutated ones.)


class _Mismatch(Exception):
    """The fast path met something the checked path must explain."""


_MISMATCH = _Mismatch()
_Decoder = typing.Callable[[Any], Any]


def _decode_fast(raw: Any) -> MetadataRecord:
    if type(raw) is not dict:
        raise _MISMATCH
    record_type, version = raw.get("type"), raw.get("version")
    if type(record_type) is not str:
        raise _MISMATCH
    cls = RECORD_TYPES.get(record_type)
    if cls is None or type(version) is not int or version != cls.VERSION:
        raise _MISMATCH
    decoded: MetadataRecord = _fast_fields(cls, raw, 2)
    return decoded


def _fast_fields(cls: Any, raw: dict[Any, Any], extra: int) -> Any:
    """``cls`` from ``raw``, which holds its fields and ``extra`` keys more (a record's
    ``type`` and ``version``, checked by the caller)."""
    names, plan = _fast_plan(cls)
    values = {}
    for name, decode, required in plan:
        if name in raw:
            values[name] = decode(raw[name])
        elif required:
            raise _MISMATCH
    if len(raw) - extra != len(values) or not names.issuperset(raw.keys() - _HEADER):
        raise _MISMATCH  # a key that is not a field
    return cls(**values)


_HEADER = frozenset({"type", "version"})


@functools.cache
def _fast_plan(cls: Any) -> tuple[frozenset[str], tuple[tuple[str, _Decoder, bool], ...]]:
    hints = _field_types(cls)
    plan = tuple(
        (f.name, _fast_decoder(hints[f.name]), f.default is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
    )
    return frozenset(hints), plan


@functools.cache
def _fast_decoder(hint: Any) -> _Decoder:
    """A decoder for values of type ``hint`` making ``_decode_value``'s checks."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is types.UnionType:
        (inner,) = (arg for arg in args if arg is not type(None))
        decode_inner = _fast_decoder(inner)
        return lambda raw: None if raw is None else decode_inner(raw)
    if origin is tuple:
        item = args[0]
        if item is int or item is str:
            return lambda raw: _fast_scalars(raw, item)
        decode_item = _fast_decoder(item)
        return lambda raw: tuple(map(decode_item, _fast_list(raw)))
    if hint is uuid.UUID:
        return _fast_uuid
    if hint is Listener or hint is FeatureRange:
        return lambda raw: _fast_fields(hint, raw, 0) if type(raw) is dict else _fail()
    return lambda raw: raw if type(raw) is hint else _fail()


def _fast_scalars(raw: Any, item: type) -> tuple[Any, ...]:
    for value in _fast_list(raw):
        if type(value) is not item:
            raise _MISMATCH
    return tuple(raw)


def _fast_list(raw: Any) -> list[Any]:
    if type(raw) is not list:
        raise _MISMATCH
    return raw


def _fast_uuid(raw: Any) -> uuid.UUID:
    if type(raw) is not bytes or len(raw) != 16:
        raise _MISMATCH
    return uuid.UUID(bytes=raw)


def _fail() -> typing.NoReturn:
    raise _MISMATCH


# ---- the checked path ----------------------------------------------------------------------


def _decode_record(raw: Any) -> MetadataRecord:
    if not isinstance(raw, dict):
        raise _FieldError(f"record is not a map: {raw!r:.80}")
    record_type, version = raw.get("type"), raw.get("version")
    cls = RECORD_TYPES.get(record_type) if isinstance(record_type, str) else None
    if cls is None or not isinstance(record_type, str):
        raise _FieldError(f"unknown record type {record_type!r:.80}")
    if type(version) is not int or version != cls.VERSION:
        raise _FieldError(f"unknown version {version!r:.20} of {record_type}")
    fields = {k: v for k, v in raw.items() if k not in ("type", "version")}
    return _decode_fields(cls, fields, record_type)


def _decode_fields(cls: Any, raw: dict[str, Any], where: str) -> Any:
    """Build ``cls`` from a map holding exactly its fields (those with defaults optional)."""
    hints = _field_types(cls)
    unknown = raw.keys() - hints.keys()
    if unknown:
        raise _FieldError(f"{where}: unknown fields {sorted(map(str, unknown))}")
    values = {}
    for field in dataclasses.fields(cls):
        if field.name in raw:
            values[field.name] = _decode_value(
                hints[field.name], raw[field.name], f"{where}.{field.name}"
            )
        elif field.default is dataclasses.MISSING:
            raise _FieldError(f"{where}: missing field {field.name}")
    return cls(**values)


def _decode_value(hint: Any, raw: Any, where: str) -> Any:
    """The field value for ``raw`` checked against the field's type ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is types.UnionType:  # ``X | None``: the only unions records use
        if raw is None:
            return None
        (inner,) = (arg for arg in args if arg is not type(None))
        return _decode_value(inner, raw, where)
    if origin is tuple:
        if not isinstance(raw, list):
            raise _FieldError(f"{where}: expected a list, got {raw!r:.80}")
        return tuple(_decode_value(args[0], item, f"{where}[{i}]") for i, item in enumerate(raw))
    if hint is uuid.UUID:
        if not isinstance(raw, bytes) or len(raw) != 16:
            raise _FieldError(f"{where}: expected 16 uuid bytes, got {raw!r:.80}")
        return uuid.UUID(bytes=raw)
    if hint is Listener or hint is FeatureRange:
        if not isinstance(raw, dict):
            raise _FieldError(f"{where}: expected a map, got {raw!r:.80}")
        return _decode_fields(hint, raw, where)
    # bool is an int subclass: compare exact types so True never passes for 1, or 1 for True.
    if type(raw) is not hint:
        raise _FieldError(f"{where}: expected {hint.__name__}, got {raw!r:.80}")
    return raw


@functools.cache
def _field_types(cls: Any) -> dict[str, Any]:
    """Field name -> resolved type (the module uses postponed annotations)."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}
