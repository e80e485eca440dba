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
from collections.abc import Mapping, Sequence
from types import MappingProxyType

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
    "ConfigLayer",
    "ConfigSource",
    "ConfigType",
    "ConfigValue",
    "check_config",
    "config_layers",
    "config_sources",
    "definitions",
    "dynamic_overrides",
    "dynamic_value",
    "list_items",
    "topic_config_values",
]

CLUSTER_DEFAULT = ""  # the broker resource name of the cluster-wide dynamic defaults
# The bytes/s cap on copying replicas between a broker's log dirs (KIP-113).
ALTER_LOG_DIRS_THROTTLE = "replica.alter.log.dirs.io.max.bytes.per.second"


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
        # Reassignment throttles: kafka-reassign-partitions sets them with --throttle (and
        # --replica-alter-log-dirs-throttle) and clears them on --verify. The replication
        # ones are accepted and shown, not enforced (docs/replication.md); the log dir one
        # paces AlterReplicaLogDirs copies (broker/log_dir_mover.py).
        *(
            _broker(name, ConfigType.LONG, str(2**63 - 1), doc, at_least(0))
            for name, doc in (
                ("leader.replication.throttled.rate", "Leader replication bytes/s cap."),
                ("follower.replication.throttled.rate", "Follower replication bytes/s cap."),
                (ALTER_LOG_DIRS_THROTTLE, "Bytes/s cap on moving replicas between log dirs."),
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


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigLayer:
    """One map of dynamic configs from the metadata image, and the source it reports.
    ``by_synonym``: the map holds broker keys, so a topic config is looked up by its broker
    synonym there (``log.retention.ms`` for ``retention.ms``)."""

    values: Mapping[str, str]
    by_synonym: bool
    source: ConfigSource


Configs = Mapping[tuple[int, str], Mapping[str, str]]
# A resource with no dynamic configs: one shared empty map, so callers can tell a changed
# layer from an unchanged one by identity.
_NONE: Mapping[str, str] = MappingProxyType({})


def config_layers(
    configs: Configs, *, topic: str | None = None, broker: int | None = None
) -> tuple[ConfigLayer, ...]:
    """The dynamic config maps in force, strongest first, in Kafka's order: the topic's own
    (when ``topic`` is given), this broker's dynamic configs (when ``broker`` is given), then
    the cluster-wide dynamic default. The static server.properties value and the definition's
    default come after every layer. This is the one place that order is written: the
    controller (min ISR, unclean election), the broker (log configs, min ISR) and
    DescribeConfigs all resolve through it."""
    layers: list[ConfigLayer] = []
    if topic is not None:
        own = configs.get((TOPIC_RESOURCE, topic), _NONE)
        layers.append(ConfigLayer(own, False, ConfigSource.TOPIC_CONFIG))
    by_synonym = topic is not None
    if broker is not None:
        own = configs.get((BROKER_RESOURCE, str(broker)), _NONE)
        layers.append(ConfigLayer(own, by_synonym, ConfigSource.DYNAMIC_BROKER_CONFIG))
    cluster = configs.get((BROKER_RESOURCE, CLUSTER_DEFAULT), _NONE)
    layers.append(ConfigLayer(cluster, by_synonym, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG))
    return tuple(layers)


def config_sources(
    definition: ConfigDef, layers: Sequence[ConfigLayer]
) -> list[tuple[str, str, ConfigSource]]:
    """Every (key, value, source) that sets ``definition`` in ``layers``, winner first, then
    the definition's default (DescribeConfigs' synonyms list)."""
    sources: list[tuple[str, str, ConfigSource]] = []
    for layer in layers:
        key = definition.broker_synonym if layer.by_synonym else definition.name
        if key is not None and key in layer.values:
            sources.append((key, layer.values[key], layer.source))
    if definition.default is not None:
        sources.append((definition.name, definition.default, ConfigSource.DEFAULT_CONFIG))
    return sources


def dynamic_value(
    configs: Configs, name: str, *, topic: str | None = None, broker: int | None = None
) -> str | None:
    """The dynamic value in force of config ``name`` (a topic config's name when ``topic`` is
    given, else a broker config's), or None when only the static value applies."""
    definition = TOPIC_CONFIGS.get(name) if topic is not None else None
    for layer in config_layers(configs, topic=topic, broker=broker):
        key = name
        if layer.by_synonym and definition is not None and definition.broker_synonym is not None:
            key = definition.broker_synonym
        value = layer.values.get(key)
        if value is not None:
            return value
    return None


def dynamic_overrides(
    configs: Configs, *, topic: str | None = None, broker: int | None = None
) -> dict[str, str]:
    """Every dynamic key in force, the stronger layer winning (topic keys and broker keys
    side by side, as LogConfig.from_properties reads them: a topic key overrides its broker
    synonym there)."""
    merged: dict[str, str] = {}
    for layer in reversed(config_layers(configs, topic=topic, broker=broker)):
        merged.update(layer.values)
    return merged


def topic_config_values(configs: Configs, topic: str) -> list[ConfigValue]:
    """Every topic config's effective value for ``topic``: its own override, else the
    cluster-wide dynamic broker default, else Kafka's default (in name order)."""
    layers = config_layers(configs, topic=topic)
    values = []
    for _, definition in sorted(TOPIC_CONFIGS.items()):
        sources = config_sources(definition, layers)
        if sources:
            _, value, source = sources[0]
            values.append(ConfigValue(definition, value, source))
        else:
            values.append(ConfigValue(definition, None, ConfigSource.DEFAULT_CONFIG))
    return values
