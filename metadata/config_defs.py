"""The configuration keys a topic or a broker accepts at run time, with Kafka's defaults.

Kafka's admin clients show these through DescribeConfigs and change them through
(Incremental)AlterConfigs; both must refuse what Kafka refuses, with Kafka's wording, because
tools and tests match on the message. Topic configs are the log layer's one table
(log/config_defs.py), which the broker's LogConfig is built from too; the dynamic broker
configs and the resolution of a topic's effective values live here.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping

from log.config_defs import (
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigType,
    Validator,
    at_least,
    list_items,
    typed,
)
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE

# Re-exported: callers see one config module per layer.
__all__ = [
    "CLUSTER_DEFAULT",
    "TOPIC_CONFIGS",
    "ConfigDef",
    "ConfigSource",
    "ConfigType",
    "ConfigValue",
    "check_config",
    "definitions",
    "list_items",
    "topic_config_values",
]

CLUSTER_DEFAULT = ""  # the broker resource name of the cluster-wide dynamic defaults


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' ``config_source`` ids: where a config's value comes from."""

    UNKNOWN = 0
    TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigValue:
    """A config's effective value for one resource, and where it came from."""

    definition: ConfigDef
    value: str | None
    source: ConfigSource


def _broker(
    name: str, kind: ConfigType, default: str | None, doc: str, check: Validator | None = None
) -> ConfigDef:
    return ConfigDef(name, kind, default, typed(kind, check), doc)


def _topic_default(topic_key: str, *, null_default: bool = False, doc: str = "") -> ConfigDef:
    """The dynamic broker config that sets ``topic_key``'s cluster-wide default: the topic
    config's type and validation (one table), under its broker synonym. Kafka's default is
    null for a few (``log.retention.ms``: ``log.retention.hours`` decides)."""
    topic = TOPIC_CONFIGS[topic_key]
    assert topic.broker_synonym is not None, topic_key
    default = None if null_default else topic.default
    return ConfigDef(
        topic.broker_synonym,
        topic.type,
        default,
        topic.validate,
        doc or f"The default {topic_key} of topics.",
    )


BROKER_DYNAMIC_CONFIGS: Mapping[str, ConfigDef] = {
    d.name: d
    for d in (
        _topic_default("compression.type"),
        _topic_default("cleanup.policy"),
        _topic_default("flush.messages"),
        _topic_default("flush.ms", null_default=True),
        _topic_default("index.interval.bytes"),
        _topic_default("message.timestamp.type"),
        _topic_default("preallocate"),
        _topic_default("retention.bytes"),
        _topic_default(
            "retention.ms",
            null_default=True,
            doc="The default retention.ms of topics (null: log.retention.hours, 168).",
        ),
        _topic_default("segment.ms", null_default=True),
        _topic_default("segment.bytes"),
        _topic_default("file.delete.delay.ms"),
        _topic_default("max.message.bytes"),
        _topic_default("min.insync.replicas"),
        _broker(
            "num.io.threads",
            ConfigType.INT,
            "8",
            "Threads that process requests (kraft-py runs one event loop; kept for tools).",
            at_least(1),
        ),
        _broker(
            "num.network.threads",
            ConfigType.INT,
            "3",
            "Threads that serve the network (kept for tools).",
            at_least(1),
        ),
        _broker(
            "num.replica.fetchers",
            ConfigType.INT,
            "1",
            "Fetcher connections per source broker.",
            at_least(1),
        ),
        _topic_default("unclean.leader.election.enable"),
        # Reassignment throttles: kafka-reassign-partitions sets them with --throttle and
        # clears them on --verify. Accepted and shown, not enforced (docs/replication.md).
        *(
            _broker(name, ConfigType.LONG, str(2**63 - 1), doc, at_least(0))
            for name, doc in (
                ("leader.replication.throttled.rate", "Leader replication bytes/s cap."),
                ("follower.replication.throttled.rate", "Follower replication bytes/s cap."),
                (
                    "replica.alter.log.dirs.io.max.bytes.per.second",
                    "Bytes/s cap on moving replicas between log dirs.",
                ),
            )
        ),
    )
}


def definitions(resource_type: int) -> Mapping[str, ConfigDef] | None:
    """The config keys of a resource type (None for a type without dynamic configs)."""
    if resource_type == TOPIC_RESOURCE:
        return TOPIC_CONFIGS
    if resource_type == BROKER_RESOURCE:
        return BROKER_DYNAMIC_CONFIGS
    return None


def check_config(resource_type: int, name: str, value: str | None) -> str | None:
    """Kafka's INVALID_CONFIG message for setting ``name`` to ``value``, or None if allowed
    (a None value deletes the key, which is always allowed for a known key)."""
    defs = definitions(resource_type)
    if defs is None:
        return f"Unsupported resource type {resource_type}"
    definition = defs.get(name)
    if definition is None:
        kind = "topic" if resource_type == TOPIC_RESOURCE else "broker"
        return f"Unknown {kind} config name: {name}"
    if value is None:
        return None
    problem = definition.validate(value)
    if problem is None:
        return None
    return f"Invalid value {value} for configuration {name}: {problem}"


def topic_config_values(
    configs: Mapping[tuple[int, str], Mapping[str, str]], topic: str
) -> list[ConfigValue]:
    """Every topic config's effective value for ``topic``: its own override, else the
    cluster-wide dynamic broker default, else Kafka's default (in name order)."""
    overrides = configs.get((TOPIC_RESOURCE, topic), {})
    cluster = configs.get((BROKER_RESOURCE, CLUSTER_DEFAULT), {})
    values = []
    for name, definition in sorted(TOPIC_CONFIGS.items()):
        if name in overrides:
            values.append(ConfigValue(definition, overrides[name], ConfigSource.TOPIC_CONFIG))
        elif definition.broker_synonym is not None and definition.broker_synonym in cluster:
            values.append(
                ConfigValue(
                    definition,
                    cluster[definition.broker_synonym],
                    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                )
            )
        else:
            values.append(ConfigValue(definition, definition.default, ConfigSource.DEFAULT_CONFIG))
    return values
