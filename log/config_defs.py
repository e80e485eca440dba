"""The one table of topic configs: Kafka's keys, types, valid values and defaults.

The controller validates CreateTopics and (Incremental)AlterConfigs against it
(metadata/config_defs.py) and the broker builds each partition's LogConfig from it
(log/config.py), so whatever the controller accepts the log can honour: a value that passes
here can never fail later in a broker's reconciler. Each definition carries its
DescribeConfigs ``config_type`` id, its default as text (``None`` where Kafka's is null) and a
validator that returns the reason a value is bad, phrased as Kafka's ConfigDef validators
phrase it (tools and tests match on the message).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping

from log.records import INT64_MAX


class ConfigType(enum.IntEnum):
    """DescribeConfigs' ``config_type`` ids (KIP-569)."""

    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


Validator = Callable[[str], str | None]
ConfigPython = int | float | bool | str | tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config key. ``validate`` returns why a value is invalid, or None if it is valid;
    ``broker_synonym`` is the broker config that supplies a topic config's default."""

    name: str
    type: ConfigType
    default: str | None
    validate: Validator
    doc: str
    broker_synonym: str | None = None

    def parse(self, text: str, key: str | None = None) -> ConfigPython:
        """The value as Python (int, float, bool, str, or a tuple for a LIST); ValueError
        in Kafka's INVALID_CONFIG wording, naming ``key`` (the name the value was given
        under, this config's by default), if the table refuses it."""
        problem = self.validate(text)
        if problem is not None:
            raise ValueError(
                f"Invalid value {text} for configuration {key or self.name}: {problem}"
            )
        text = text.strip()
        kind = self.type
        if kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
            return int(text)
        if kind is ConfigType.DOUBLE:
            return float(text)
        if kind is ConfigType.BOOLEAN:
            return text.lower() == "true"
        if kind is ConfigType.LIST:
            return tuple(list_items(text))
        return text


def config_text(value: ConfigPython) -> str:
    """A parsed value back as Kafka's text (``parse`` inverted)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # a ratio set as "1" reads back as "1", as Kafka shows it
    return str(value)


# ---- validators (messages as Kafka's ConfigDef.Type.parse and its validators word them) ----


def _parse_error(kind: ConfigType, value: str) -> str | None:
    text = value.strip()
    if kind is ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            return "Expected value to be either true or false"
    elif kind in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        bound = {ConfigType.SHORT: 2**15, ConfigType.INT: 2**31, ConfigType.LONG: 2**63}[kind]
        try:
            number = int(text)
        except ValueError:
            return f"Not a number of type {kind.name}"
        if not -bound <= number < bound:
            return f"Not a number of type {kind.name}"
    elif kind is ConfigType.DOUBLE:
        try:
            float(text)
        except ValueError:
            return f"Not a number of type {kind.name}"
    return None


def typed(kind: ConfigType, check: Validator | None = None) -> Validator:
    """A validator that parses the value as ``kind`` first, then applies ``check``."""

    def validate(value: str) -> str | None:
        problem = _parse_error(kind, value)
        if problem is None and check is not None:
            problem = check(value.strip())
        return problem

    return validate


def at_least(low: float) -> Validator:
    def check(value: str) -> str | None:
        return f"Value must be at least {_number_text(low)}" if float(value) < low else None

    return check


def _between(low: float, high: float) -> Validator:
    def check(value: str) -> str | None:
        number = float(value)
        if number < low:
            return f"Value must be at least {_number_text(low)}"
        if number > high:
            return f"Value must be no more than {_number_text(high)}"
        return None

    return check


def _one_of(*allowed: str) -> Validator:
    def check(value: str) -> str | None:
        return None if value in allowed else f"String must be one of: {', '.join(allowed)}"

    return check


def _list_of(*allowed: str) -> Validator:
    def check(value: str) -> str | None:
        for item in list_items(value):
            if item not in allowed:
                return f"String must be one of: {', '.join(allowed)}"
        return None

    return check


def _number_text(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else str(number)


def list_items(value: str) -> list[str]:
    """The items of a LIST config value (comma separated, blanks dropped), as Kafka parses."""
    return [item.strip() for item in value.split(",") if item.strip()]


# ---- the definitions -----------------------------------------------------------------------

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def _topic(
    name: str,
    kind: ConfigType,
    default: str | None,
    doc: str,
    check: Validator | None = None,
    synonym: str | None = None,
) -> ConfigDef:
    return ConfigDef(name, kind, default, typed(kind, check), doc, synonym)


TOPIC_CONFIGS: Mapping[str, ConfigDef] = {
    d.name: d
    for d in (
        _topic(
            "cleanup.policy",
            ConfigType.LIST,
            "delete",
            "The retention policy for old log segments: delete, compact, or both.",
            _list_of("compact", "delete"),
            "log.cleanup.policy",
        ),
        _topic(
            "compression.type",
            ConfigType.STRING,
            "producer",
            "The final compression of the topic's batches ('producer' keeps the producer's).",
            _one_of(*COMPRESSION_TYPES),
            "compression.type",
        ),
        _topic(
            "compression.gzip.level",
            ConfigType.INT,
            "-1",
            "The gzip level used when compression.type is gzip.",
            lambda v: None if v == "-1" else _between(1, 9)(v),
            "compression.gzip.level",
        ),
        _topic(
            "compression.lz4.level",
            ConfigType.INT,
            "9",
            "The lz4 level used when compression.type is lz4.",
            _between(1, 17),
            "compression.lz4.level",
        ),
        _topic(
            "compression.zstd.level",
            ConfigType.INT,
            "3",
            "The zstd level used when compression.type is zstd.",
            _between(-131072, 22),
            "compression.zstd.level",
        ),
        _topic(
            "delete.retention.ms",
            ConfigType.LONG,
            "86400000",
            "How long delete tombstones are kept for compacted topics.",
            at_least(0),
            "log.cleaner.delete.retention.ms",
        ),
        _topic(
            "file.delete.delay.ms",
            ConfigType.LONG,
            "60000",
            "How long to wait before deleting a file from the filesystem.",
            at_least(0),
            "log.segment.delete.delay.ms",
        ),
        _topic(
            "flush.messages",
            ConfigType.LONG,
            str(INT64_MAX),
            "Force an fsync after this many messages.",
            at_least(1),
            "log.flush.interval.messages",
        ),
        _topic(
            "flush.ms",
            ConfigType.LONG,
            str(INT64_MAX),
            "Force an fsync after this much time.",
            at_least(0),
            "log.flush.interval.ms",
        ),
        _topic(
            "follower.replication.throttled.replicas",
            ConfigType.LIST,
            "",
            "Replicas whose log replication is throttled on the follower side.",
        ),
        _topic(
            "index.interval.bytes",
            ConfigType.INT,
            "4096",
            "How many bytes of log go between two offset index entries.",
            at_least(0),
            "log.index.interval.bytes",
        ),
        _topic(
            "leader.replication.throttled.replicas",
            ConfigType.LIST,
            "",
            "Replicas whose log replication is throttled on the leader side.",
        ),
        _topic(
            "local.retention.bytes",
            ConfigType.LONG,
            "-2",
            "Bytes kept locally with tiered storage (-2: retention.bytes).",
            at_least(-2),
            "log.local.retention.bytes",
        ),
        _topic(
            "local.retention.ms",
            ConfigType.LONG,
            "-2",
            "Time kept locally with tiered storage (-2: retention.ms).",
            at_least(-2),
            "log.local.retention.ms",
        ),
        _topic(
            "max.compaction.lag.ms",
            ConfigType.LONG,
            str(INT64_MAX),
            "The longest a message stays uncompacted.",
            at_least(1),
            "log.cleaner.max.compaction.lag.ms",
        ),
        _topic(
            "max.message.bytes",
            ConfigType.INT,
            "1048588",
            "The largest record batch size allowed.",
            at_least(0),
            "message.max.bytes",
        ),
        _topic(
            "message.timestamp.after.max.ms",
            ConfigType.LONG,
            "3600000",
            "How far a CreateTime timestamp may be ahead of the broker's clock.",
            at_least(0),
            "log.message.timestamp.after.max.ms",
        ),
        _topic(
            "message.timestamp.before.max.ms",
            ConfigType.LONG,
            str(INT64_MAX),
            "How far a CreateTime timestamp may be behind the broker's clock.",
            at_least(0),
            "log.message.timestamp.before.max.ms",
        ),
        _topic(
            "message.timestamp.type",
            ConfigType.STRING,
            "CreateTime",
            "Whether record timestamps are the producer's or the broker's append time.",
            _one_of(*TIMESTAMP_TYPES),
            "log.message.timestamp.type",
        ),
        _topic(
            "min.cleanable.dirty.ratio",
            ConfigType.DOUBLE,
            "0.5",
            "How dirty a log must be before the cleaner compacts it.",
            _between(0, 1),
            "log.cleaner.min.cleanable.ratio",
        ),
        _topic(
            "min.compaction.lag.ms",
            ConfigType.LONG,
            "0",
            "The shortest a message stays uncompacted.",
            at_least(0),
            "log.cleaner.min.compaction.lag.ms",
        ),
        _topic(
            "min.insync.replicas",
            ConfigType.INT,
            "1",
            "The fewest in-sync replicas an acks=all write needs.",
            at_least(1),
            "min.insync.replicas",
        ),
        _topic(
            "preallocate",
            ConfigType.BOOLEAN,
            "false",
            "Preallocate the file when creating a new segment.",
            None,
            "log.preallocate",
        ),
        _topic(
            "remote.storage.enable",
            ConfigType.BOOLEAN,
            "false",
            "Tiered storage for the topic.",
        ),
        _topic(
            "retention.bytes",
            ConfigType.LONG,
            "-1",
            "The largest a partition may grow before old segments are deleted (-1: no limit).",
            None,
            "log.retention.bytes",
        ),
        _topic(
            "retention.ms",
            ConfigType.LONG,
            "604800000",
            "How long a segment is kept before deletion (-1: no limit).",
            at_least(-1),
            "log.retention.ms",
        ),
        _topic(
            "segment.bytes",
            ConfigType.INT,
            "1073741824",
            "The size of one segment file.",
            at_least(14),
            "log.segment.bytes",
        ),
        _topic(
            "segment.index.bytes",
            ConfigType.INT,
            "10485760",
            "The size of the index that maps offsets to file positions.",
            at_least(4),
            "log.index.size.max.bytes",
        ),
        _topic(
            "segment.jitter.ms",
            ConfigType.LONG,
            "0",
            "The largest random jitter subtracted from segment.ms.",
            at_least(0),
            "log.roll.jitter.ms",
        ),
        _topic(
            "segment.ms",
            ConfigType.LONG,
            "604800000",
            "Roll a segment after this long even if it is not full.",
            at_least(1),
            "log.roll.ms",
        ),
        _topic(
            "unclean.leader.election.enable",
            ConfigType.BOOLEAN,
            "false",
            "Whether a replica outside the ISR may become leader, at the risk of data loss.",
            None,
            "unclean.leader.election.enable",
        ),
    )
}
