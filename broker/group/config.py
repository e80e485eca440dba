"""The group coordinator's settings, under Kafka's own broker keys and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from broker.group.classic import GroupLimits


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    offsets_topic_num_partitions: int = 50
    # Kafka's default; a cluster with fewer brokers cannot create the topic, and every
    # FindCoordinator answers COORDINATOR_NOT_AVAILABLE (the single-node config sets 1).
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104_857_600
    offsets_retention_minutes: int = 10_080
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5000
    offsets_load_buffer_size: int = 5_242_880
    offset_metadata_max_bytes: int = 4096
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # Kafka's default is unbounded (Int.MaxValue); every limit here has a bound.
    group_max_size: int = 1000
    group_initial_rebalance_delay_ms: int = 3000

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> GroupCoordinatorConfig:
        """From Kafka keys (``offsets.topic.num.partitions`` ...); others are ignored. A
        value that is not a positive integer (zero allowed for the delay) is a ValueError
        naming the key."""
        values: dict[str, int] = {}
        for item in fields(cls):
            key = item.name.replace("_", ".")
            if key in props:
                try:
                    value = int(props[key])
                except ValueError:
                    raise ValueError(f"{key}: not an integer: {props[key]!r}") from None
                floor = 0 if item.name == "group_initial_rebalance_delay_ms" else 1
                if value < floor:
                    raise ValueError(f"{key}: must be at least {floor}, got {value}")
                values[item.name] = value
        return cls(**values)

    def limits(self) -> GroupLimits:
        return GroupLimits(
            self.group_min_session_timeout_ms,
            self.group_max_session_timeout_ms,
            self.group_max_size,
            self.group_initial_rebalance_delay_ms,
        )
