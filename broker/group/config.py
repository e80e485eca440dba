"""The group coordinator's settings, under Kafka's own broker keys and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from broker.group.assignors import assignor_name
from broker.group.classic import GroupLimits
from broker.group.consumer_group import ConsumerGroupLimits

ASSIGNORS_KEY = "group.consumer.assignors"


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
    # KIP-848 consumer groups. Kafka bounds a consumer group to 2^31-1 members by default;
    # here, as for classic groups, 1000.
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_max_size: int = 1000
    group_consumer_assignors: tuple[str, ...] = ("uniform", "range")
    # kraft-py's own: the bytes of member metadata (classic protocols, KIP-848
    # subscriptions) the coordinator keeps across all its groups (broker/group/member_budget.py).
    group_coordinator_member_metadata_max_bytes: int = 64 * 1024 * 1024

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> GroupCoordinatorConfig:
        """From Kafka keys (``offsets.topic.num.partitions`` ...); others are ignored. A
        value that is not a positive integer (zero allowed for the delay) is a ValueError
        naming the key."""
        values: dict[str, Any] = {}
        if ASSIGNORS_KEY in props:
            values["group_consumer_assignors"] = _assignors(str(props[ASSIGNORS_KEY]))
        for item in fields(cls):
            key = item.name.replace("_", ".")
            if key in props and key != ASSIGNORS_KEY:
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

    def consumer_limits(self) -> ConsumerGroupLimits:
        return ConsumerGroupLimits(
            self.group_consumer_session_timeout_ms,
            self.group_consumer_heartbeat_interval_ms,
            self.group_consumer_max_size,
            self.group_consumer_assignors,
        )


KEYS = frozenset(item.name.replace("_", ".") for item in fields(GroupCoordinatorConfig))


def _assignors(text: str) -> tuple[str, ...]:
    """``group.consumer.assignors``: a comma-separated list of ``uniform``/``range`` or
    Kafka's class names; the first is the default."""
    names = []
    for item in (part.strip() for part in text.split(",")):
        name = assignor_name(item)
        if name is None:
            raise ValueError(f"{ASSIGNORS_KEY}: unknown assignor {item!r} (uniform, range)")
        names.append(name)
    if not names:
        raise ValueError(f"{ASSIGNORS_KEY}: names no assignor")
    return tuple(dict.fromkeys(names))
