"""Per-log and log-manager configuration, under Kafka's own key names.

A topic's config (``segment.bytes`` ...) and the broker-wide default it overrides
(``log.segment.bytes`` ...) map onto the same LogConfig field, so a user's server.properties
and ``kafka-configs --alter`` commands carry over unchanged. Defaults are Kafka's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

# Kafka's LegacyRecord.RECORD_OVERHEAD_V0: the smallest segment.bytes Kafka accepts.
SEGMENT_BYTES_MIN = 14
OFFSET_INDEX_ENTRY_SIZE = 8
# compression.type and message.timestamp.type values (log/validator.py applies them).
COMPRESSION_TYPES = ("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
_STRING_FIELDS = frozenset({"cleanup_policy", "compression_type", "message_timestamp_type"})


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How one partition's log rolls, indexes, flushes and expires its segments."""

    segment_bytes: int = 1024 * 1024 * 1024  # segment.bytes
    segment_ms: int = 7 * 24 * 60 * 60 * 1000  # segment.ms
    segment_jitter_ms: int = 0  # segment.jitter.ms
    segment_index_bytes: int = 10 * 1024 * 1024  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes (log.index.interval.bytes)
    retention_ms: int = 7 * 24 * 60 * 60 * 1000  # retention.ms; -1 = forever
    retention_bytes: int = -1  # retention.bytes; -1 = unbounded
    flush_messages: int = LONG_MAX  # flush.messages
    flush_ms: int = LONG_MAX  # flush.ms
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    max_message_bytes: int = 1024 * 1024 + 12  # max.message.bytes (message.max.bytes)
    cleanup_policy: str = "delete"  # cleanup.policy; compaction is not implemented
    compression_type: str = "producer"  # compression.type
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    message_timestamp_before_max_ms: int = LONG_MAX  # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = 3_600_000  # message.timestamp.after.max.ms

    def __post_init__(self) -> None:
        # Config errors surface when the config is built, not deep inside an append.
        if self.segment_bytes < SEGMENT_BYTES_MIN:
            raise ValueError(f"segment.bytes {self.segment_bytes} < {SEGMENT_BYTES_MIN}")
        if self.segment_bytes > INT_MAX:
            raise ValueError(f"segment.bytes {self.segment_bytes} exceeds int32 (u32 positions)")
        if self.segment_ms < 1:
            raise ValueError(f"segment.ms {self.segment_ms} < 1")
        if self.segment_jitter_ms < 0:
            raise ValueError(f"segment.jitter.ms {self.segment_jitter_ms} < 0")
        if self.segment_index_bytes < OFFSET_INDEX_ENTRY_SIZE:
            raise ValueError(f"segment.index.bytes {self.segment_index_bytes} < 8")
        if self.index_interval_bytes < 0:
            raise ValueError(f"index.interval.bytes {self.index_interval_bytes} < 0")
        if self.retention_ms < -1 or self.retention_bytes < -1:
            raise ValueError("retention.ms and retention.bytes must be >= -1")
        if self.flush_messages < 1 or self.flush_ms < 0:
            raise ValueError("flush.messages must be >= 1 and flush.ms >= 0")
        if self.file_delete_delay_ms < 0:
            raise ValueError(f"file.delete.delay.ms {self.file_delete_delay_ms} < 0")
        if self.max_message_bytes < 0:
            raise ValueError(f"max.message.bytes {self.max_message_bytes} < 0")
        if self.cleanup_policy != "delete":
            raise ValueError(f"cleanup.policy {self.cleanup_policy!r}: only 'delete' exists")
        if self.compression_type not in COMPRESSION_TYPES:
            raise ValueError(f"compression.type {self.compression_type!r} is unknown")
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ValueError(f"message.timestamp.type {self.message_timestamp_type!r} is unknown")
        if self.message_timestamp_before_max_ms < 0 or self.message_timestamp_after_max_ms < 0:
            raise ValueError("message.timestamp.before.max.ms and .after.max.ms must be >= 0")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka keys (topic-level or ``log.``-prefixed broker-level); unknown
        keys are ignored because a properties file also holds every other subsystem's keys."""
        values: dict[str, Any] = {}
        # Broker-level defaults first, so a topic-level key always overrides them.
        ordered = sorted(props.items(), key=lambda item: item[0] in _TOPIC_KEYS)
        for key, raw in ordered:
            # Kafka's precedence among broker keys: .ms over .minutes over .hours.
            if key == "log.retention.hours" and not _has(props, "log.retention.m"):
                values["retention_ms"] = int(raw) * 3_600_000
            elif key == "log.retention.minutes" and "log.retention.ms" not in props:
                values["retention_ms"] = int(raw) * 60_000
            elif key == "log.roll.hours" and "log.roll.ms" not in props:
                values["segment_ms"] = int(raw) * 3_600_000
            elif key in _KEYS:
                name = _KEYS[key]
                values[name] = str(raw) if name in _STRING_FIELDS else int(raw)
        return replace(base or cls(), **values)

    def to_properties(self) -> dict[str, str]:
        """The topic-level Kafka keys and their values (what DescribeConfigs shows)."""
        by_field = {name: key for key, name in _KEYS.items() if not key.startswith("log.")}
        by_field["max_message_bytes"] = "max.message.bytes"
        return {by_field[f.name]: str(getattr(self, f.name)) for f in fields(self)}


# Topic-level keys first, then the broker-level defaults they override.
_KEYS: dict[str, str] = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.jitter.ms": "segment_jitter_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "flush.messages": "flush_messages",
    "flush.ms": "flush_ms",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "max.message.bytes": "max_message_bytes",
    "cleanup.policy": "cleanup_policy",
    "compression.type": "compression_type",
    "message.timestamp.type": "message_timestamp_type",
    "message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
    "log.segment.bytes": "segment_bytes",
    "log.roll.ms": "segment_ms",
    "log.roll.jitter.ms": "segment_jitter_ms",
    "log.index.size.max.bytes": "segment_index_bytes",
    "log.index.interval.bytes": "index_interval_bytes",
    "log.retention.ms": "retention_ms",
    "log.retention.bytes": "retention_bytes",
    "log.flush.interval.messages": "flush_messages",
    "log.flush.interval.ms": "flush_ms",
    "log.segment.delete.delay.ms": "file_delete_delay_ms",
    "message.max.bytes": "max_message_bytes",
    "log.cleanup.policy": "cleanup_policy",
    "log.message.timestamp.type": "message_timestamp_type",
    "log.message.timestamp.before.max.ms": "message_timestamp_before_max_ms",
    "log.message.timestamp.after.max.ms": "message_timestamp_after_max_ms",
}


_TOPIC_KEYS = frozenset(
    key for key in _KEYS if not key.startswith("log.") and key != "message.max.bytes"
)


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

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) < (0 if f.name == "initial_task_delay_ms" else 1):
                raise ValueError(f"{f.name} must be positive")

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> LogManagerConfig:
        """Build from the broker's ``log.*`` keys; unknown keys are ignored."""
        keys = {
            "log.retention.check.interval.ms": "retention_check_interval_ms",
            "log.flush.scheduler.interval.ms": "flush_scheduler_interval_ms",
            "log.flush.offset.checkpoint.interval.ms": "flush_offset_checkpoint_interval_ms",
            "log.flush.start.offset.checkpoint.interval.ms": (
                "flush_start_offset_checkpoint_interval_ms"
            ),
            "log.initial.task.delay.ms": "initial_task_delay_ms",
        }
        return cls(**{keys[k]: int(v) for k, v in props.items() if k in keys})
