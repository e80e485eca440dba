"""Per-log and log-manager configuration, under Kafka's own key names.

A topic's config (``segment.bytes`` ...) and the broker-wide default it overrides
(``log.segment.bytes`` ...) map onto the same LogConfig field, so a user's server.properties
and ``kafka-configs --alter`` commands carry over unchanged. Defaults are Kafka's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from log.config_defs import TOPIC_CONFIGS, config_text

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1


def _key(name: str) -> Any:
    """A LogConfig field for topic config ``name``: its default is the table's."""
    definition = TOPIC_CONFIGS[name]
    assert definition.default is not None, name
    return dataclasses.field(default=definition.parse(definition.default), metadata={"key": name})


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How one partition's log rolls, indexes, flushes and expires its segments. Every field
    is a topic config of the one table (log/config_defs.py): its default, type and valid
    range are the table's, so any value the controller accepted builds a LogConfig."""

    segment_bytes: int = _key("segment.bytes")
    segment_ms: int = _key("segment.ms")
    segment_jitter_ms: int = _key("segment.jitter.ms")
    segment_index_bytes: int = _key("segment.index.bytes")
    index_interval_bytes: int = _key("index.interval.bytes")
    retention_ms: int = _key("retention.ms")  # -1 = forever
    retention_bytes: int = _key("retention.bytes")  # negative = unbounded
    flush_messages: int = _key("flush.messages")
    flush_ms: int = _key("flush.ms")
    file_delete_delay_ms: int = _key("file.delete.delay.ms")
    max_message_bytes: int = _key("max.message.bytes")
    # compact, delete, both or neither; compaction is log/cleaner.py's.
    cleanup_policy: tuple[str, ...] = _key("cleanup.policy")
    delete_retention_ms: int = _key("delete.retention.ms")
    min_cleanable_dirty_ratio: float = _key("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _key("min.compaction.lag.ms")
    max_compaction_lag_ms: int = _key("max.compaction.lag.ms")
    # What log/validator.py does to a produced batch before it is stored.
    compression_type: str = _key("compression.type")
    message_timestamp_type: str = _key("message.timestamp.type")
    message_timestamp_before_max_ms: int = _key("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = _key("message.timestamp.after.max.ms")

    def __post_init__(self) -> None:
        # Config errors surface when the config is built, not deep inside an append, and
        # are exactly the table's (so the controller refuses all of them first).
        for f in fields(self):
            TOPIC_CONFIGS[f.metadata["key"]].parse(config_text(getattr(self, f.name)))

    @property
    def delete(self) -> bool:
        """Whether retention deletes old segments (Kafka's LogConfig.delete)."""
        return "delete" in self.cleanup_policy

    @property
    def compact(self) -> bool:
        """Whether the topic is compacted (Kafka's LogConfig.compact)."""
        return "compact" in self.cleanup_policy

    @property
    def max_segment_ms(self) -> int:
        """How old the active segment may get (Kafka's maxSegmentMs): a compacted log
        rolls by max.compaction.lag.ms too, as the cleaner never touches the active one."""
        if self.compact:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka keys (topic-level or ``log.``-prefixed broker-level); unknown
        keys are ignored because a properties file also holds every other subsystem's keys.
        ValueError naming the key for a value the table refuses."""
        # Field name -> value; each parsed by its key's definition, so of the field's type.
        values: dict[str, Any] = {}
        # Broker-level defaults first, so a topic-level key always overrides them.
        ordered = sorted(props.items(), key=lambda item: item[0] in _FIELDS)
        for key, raw in ordered:
            # Kafka's precedence among broker keys: .ms over .minutes over .hours.
            if key == "log.retention.hours" and not _has(props, "log.retention.m"):
                values["retention_ms"] = _int(key, raw) * 3_600_000
            elif key == "log.retention.minutes" and "log.retention.ms" not in props:
                values["retention_ms"] = _int(key, raw) * 60_000
            elif key == "log.roll.hours" and "log.roll.ms" not in props:
                values["segment_ms"] = _int(key, raw) * 3_600_000
            else:
                topic_key = _BROKER_SYNONYMS.get(key, key)
                if topic_key in _FIELDS:
                    values[_FIELDS[topic_key]] = TOPIC_CONFIGS[topic_key].parse(str(raw), key)
        return replace(base or cls(), **values)

    def to_properties(self) -> dict[str, str]:
        """The topic-level Kafka keys and their values (what DescribeConfigs shows)."""
        return {f.metadata["key"]: config_text(getattr(self, f.name)) for f in fields(self)}


# Topic config key -> LogConfig field, and the broker-level default -> its topic key.
_FIELDS: dict[str, str] = {f.metadata["key"]: f.name for f in fields(LogConfig)}
_BROKER_SYNONYMS: dict[str, str] = {
    d.broker_synonym: name
    for name, d in TOPIC_CONFIGS.items()
    if name in _FIELDS and d.broker_synonym is not None
}


# Every key LogConfig.from_properties reads from server.properties.
LOG_CONFIG_KEYS = frozenset(
    [*_FIELDS, *_BROKER_SYNONYMS, "log.retention.hours", "log.retention.minutes", "log.roll.hours"]
)


def _int(key: str, raw: object) -> int:
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ValueError(f"Invalid value {raw} for configuration {key}: Not a number") from None


def _has(props: Mapping[str, Any], prefix: str) -> bool:
    return any(key.startswith(prefix) for key in props)


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """Periods of the LogManager's scheduled tasks (seed 002's table), in ms."""

    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    flush_scheduler_interval_ms: int = LONG_MAX  # log.flush.scheduler.interval.ms
    flush_offset_checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    flush_start_offset_checkpoint_interval_ms: int = 60_000  # ...start.offset.checkpoint...
    initial_task_delay_ms: int = 30_000  # log.initial.task.delay.ms
    cleaner_enable: bool = True  # log.cleaner.enable
    cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    # Bounds the cleaner's key -> offset map (the only memory a pass holds on to).
    cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
    # Descriptors kept free of new partitions and connections (log/descriptors.py); -1: a
    # tenth of the open-files limit, between 64 (a quarter of a limit under 256) and 4,096.
    open_files_reserve: int = -1  # open.files.reserve (kraft-py's own key)

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.type == "bool":
                continue
            least = {"initial_task_delay_ms": 0, "open_files_reserve": -1}.get(f.name, 1)
            if getattr(self, f.name) < least:
                key = next(k for k, name in LOG_MANAGER_KEYS.items() if name == f.name)
                raise ValueError(
                    f"Invalid value {getattr(self, f.name)} for configuration {key}: "
                    f"Value must be at least {least}"
                )

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> LogManagerConfig:
        """Build from the broker's ``log.*`` keys; unknown keys are ignored."""
        keys = LOG_MANAGER_KEYS
        values: dict[str, Any] = {keys[k]: _parse(k, v) for k, v in props.items() if k in keys}
        return cls(**values)


def _parse(key: str, raw: object) -> int | bool:
    if key != "log.cleaner.enable":
        return _int(key, raw)
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(
            f"Invalid value {raw} for configuration {key}: Expected value to be "
            "either true or false"
        )
    return text == "true"


LOG_MANAGER_KEYS: dict[str, str] = {
    "log.retention.check.interval.ms": "retention_check_interval_ms",
    "log.flush.scheduler.interval.ms": "flush_scheduler_interval_ms",
    "log.flush.offset.checkpoint.interval.ms": "flush_offset_checkpoint_interval_ms",
    "log.flush.start.offset.checkpoint.interval.ms": "flush_start_offset_checkpoint_interval_ms",
    "log.initial.task.delay.ms": "initial_task_delay_ms",
    "log.cleaner.enable": "cleaner_enable",
    "log.cleaner.backoff.ms": "cleaner_backoff_ms",
    "log.cleaner.dedupe.buffer.size": "cleaner_dedupe_buffer_size",
    "open.files.reserve": "open_files_reserve",
}
