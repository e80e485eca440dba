"""Config definitions: Kafka's keys, defaults and refusals, worded as Kafka words them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.config import LogConfig
from metadata.config_defs import (
    BROKER_DYNAMIC_CONFIGS,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    check_config,
    dynamic_overrides,
    dynamic_value,
    topic_config_values,
)
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE


def test_every_default_passes_its_own_validation() -> None:
    for resource_type, defs in (
        (TOPIC_RESOURCE, TOPIC_CONFIGS),
        (BROKER_RESOURCE, BROKER_DYNAMIC_CONFIGS),
    ):
        for name, definition in defs.items():
            if definition.default is not None:
                assert check_config(resource_type, name, definition.default) is None, name


def test_kafka_defaults_and_types_of_well_known_topic_configs() -> None:
    assert TOPIC_CONFIGS["retention.ms"].default == "604800000"
    assert TOPIC_CONFIGS["segment.bytes"].default == "1073741824"
    assert TOPIC_CONFIGS["cleanup.policy"].type is ConfigType.LIST
    assert TOPIC_CONFIGS["min.insync.replicas"].type is ConfigType.INT
    assert TOPIC_CONFIGS["unclean.leader.election.enable"].type is ConfigType.BOOLEAN
    assert TOPIC_CONFIGS["min.cleanable.dirty.ratio"].type is ConfigType.DOUBLE


def test_unknown_keys_are_refused_by_name() -> None:
    assert check_config(TOPIC_RESOURCE, "x", "1") == "Unknown topic config name: x"
    assert check_config(BROKER_RESOURCE, "x", "1") == "Unknown broker config name: x"


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        ("cleanup.policy", "foo", "String must be one of: compact, delete"),
        ("retention.ms", "abc", "Not a number of type LONG"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.bytes", str(2**31), "Not a number of type INT"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("preallocate", "yes", "Expected value to be either true or false"),
        ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
        (
            "compression.type",
            "brotli",
            "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
        ),
        ("message.timestamp.type", "Now", "String must be one of: CreateTime, LogAppendTime"),
    ],
)
def test_bad_values_get_kafkas_message(name: str, value: str, reason: str) -> None:
    assert check_config(TOPIC_RESOURCE, name, value) == (
        f"Invalid value {value} for configuration {name}: {reason}"
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("cleanup.policy", "compact,delete"),
        ("cleanup.policy", "compact"),
        ("retention.ms", "-1"),
        ("segment.bytes", "14"),
        ("preallocate", "TRUE"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("compression.gzip.level", "-1"),
        ("retention.bytes", "-1"),
    ],
)
def test_good_values_pass(name: str, value: str) -> None:
    assert check_config(TOPIC_RESOURCE, name, value) is None


def test_deleting_a_known_key_is_always_allowed() -> None:
    assert check_config(TOPIC_RESOURCE, "retention.ms", None) is None
    assert check_config(BROKER_RESOURCE, "log.retention.ms", None) is None


def test_effective_values_prefer_topic_then_cluster_default_then_kafka_default() -> None:
    configs = {
        (TOPIC_RESOURCE, "t"): {"retention.ms": "1000"},
        (BROKER_RESOURCE, ""): {"log.segment.bytes": "2048", "log.retention.ms": "5"},
    }
    values = {v.definition.name: v for v in topic_config_values(configs, "t")}
    assert (values["retention.ms"].value, values["retention.ms"].source) == (
        "1000",
        ConfigSource.TOPIC_CONFIG,
    )
    assert (values["segment.bytes"].value, values["segment.bytes"].source) == (
        "2048",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert (values["segment.ms"].value, values["segment.ms"].source) == (
        "604800000",
        ConfigSource.DEFAULT_CONFIG,
    )
    assert list(values) == sorted(TOPIC_CONFIGS)


# Topic configs whose broker synonym differs from their own name, and ones where it is the same.
_CHOICES = {
    "retention.ms": ("1", "2", "3"),
    "segment.bytes": ("14", "2048", "4096"),
    "min.insync.replicas": ("1", "2", "3"),
    "cleanup.policy": ("compact", "delete", "compact,delete"),
}
_RESOLVED = tuple(_CHOICES)
_layer = st.fixed_dictionaries({n: st.none() | st.sampled_from(c) for n, c in _CHOICES.items()})


@given(
    topic=_layer,
    broker=_layer,
    cluster=_layer,
    ask_broker=st.booleans(),
)
def test_one_resolution_order_topic_then_this_broker_then_cluster_default(
    topic: dict[str, str | None],
    broker: dict[str, str | None],
    cluster: dict[str, str | None],
    ask_broker: bool,
) -> None:
    # The reference model of Kafka's order, written out per key: a topic's own value, then
    # the broker's dynamic value of the key's broker synonym, then the cluster-wide one.
    def synonym(name: str) -> str:
        return TOPIC_CONFIGS[name].broker_synonym or name

    configs = {
        (TOPIC_RESOURCE, "t"): {n: v for n, v in topic.items() if v is not None},
        (BROKER_RESOURCE, "7"): {synonym(n): v for n, v in broker.items() if v is not None},
        (BROKER_RESOURCE, ""): {synonym(n): v for n, v in cluster.items() if v is not None},
        (TOPIC_RESOURCE, "other"): {n: c[0] for n, c in _CHOICES.items()},
    }
    for name in _RESOLVED:
        layers = [topic[name], broker[name] if ask_broker else None, cluster[name]]
        expected = next((v for v in layers if v is not None), None)
        got = dynamic_value(configs, name, topic="t", broker=7 if ask_broker else None)
        assert got == expected, name
        # The broker builds its LogConfig from the merged overrides: the same winner.
        if name in LogConfig().to_properties() and expected is not None:
            merged = dynamic_overrides(configs, topic="t", broker=7 if ask_broker else None)
            built = LogConfig.from_properties(merged).to_properties()[name]
            assert built == expected, name
    # DescribeConfigs' (and CreateTopics') view of a topic has no broker layer.
    values = {v.definition.name: v.value for v in topic_config_values(configs, "t")}
    for name in _RESOLVED:
        own = topic[name] if topic[name] is not None else cluster[name]
        assert values[name] == (own if own is not None else TOPIC_CONFIGS[name].default)


@pytest.mark.parametrize(
    "value",
    [
        "-2",
        "-1",
        "0",
        "1",
        "4",
        "7",
        "14",
        str(2**31 - 1),
        str(2**63 - 1),
        "compact",
        "compact,delete",
        "",
    ],
)
def test_every_topic_config_value_the_controller_accepts_builds_the_brokers_log_config(
    value: str,
) -> None:
    # One table: a value the controller lets into the metadata log can never make a
    # broker's reconciler fail on it (main accepted segment.index.bytes=4 and
    # cleanup.policy=compact here, then LogConfig raised on every broker).
    for name in LogConfig().to_properties():
        if check_config(TOPIC_RESOURCE, name, value) is None:
            assert LogConfig.from_properties({name: value}).to_properties()[name] == value.strip()


def test_a_dynamic_broker_default_validates_as_the_topic_config_it_defaults() -> None:
    for name, topic in TOPIC_CONFIGS.items():
        broker = BROKER_DYNAMIC_CONFIGS.get(topic.broker_synonym or "")
        if broker is not None:
            assert (broker.type, broker.validate) == (topic.type, topic.validate), name
    assert check_config(BROKER_RESOURCE, "log.roll.ms", "0") == (
        "Invalid value 0 for configuration log.roll.ms: Value must be at least 1"
    )
