"""IncrementalAlterConfigs and legacy AlterConfigs for topics and brokers."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.configs import OpType, alter_configs, incremental_alter_configs
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE, Config
from tests.metadata.controller.support import (
    apply,
    brokers,
    build,
    context,
    request_module,
    roundtrip,
    with_topic,
)

IA = request_module(44, 1)
LA = request_module(33, 2)


def incremental(resource_type: int, name: str, *ops: tuple[str, OpType, str | None]) -> Any:
    return IA.AlterConfigsResource(
        resource_type=resource_type,
        resource_name=name,
        configs=tuple(IA.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops),
    )


def answers(response: Any) -> list[tuple[str, ErrorCode, str | None]]:
    return [(r.resource_name, r.error_code, r.error_message) for r in response.responses]


IMAGE = build(
    Config(TOPIC_RESOURCE, "t", "cleanup.policy", "delete"),
    Config(TOPIC_RESOURCE, "t", "retention.ms", "10"),
    image=with_topic(brokers(1), "t", ((1,), (1,), 1)),
)


def test_set_delete_append_subtract() -> None:
    request = IA.IncrementalAlterConfigsRequest(
        resources=(
            incremental(
                TOPIC_RESOURCE,
                "t",
                ("segment.ms", OpType.SET, "1000"),
                ("retention.ms", OpType.DELETE, None),
                ("cleanup.policy", OpType.APPEND, "compact"),
            ),
        ),
        validate_only=False,
    )
    result = incremental_alter_configs(context(IMAGE), request, 1)
    assert answers(roundtrip(result.response)) == [("t", ErrorCode.none, None)]
    after = apply(IMAGE, result)
    assert after.configs[(TOPIC_RESOURCE, "t")] == {
        "cleanup.policy": "delete,compact",
        "segment.ms": "1000",
    }
    subtract = IA.IncrementalAlterConfigsRequest(
        resources=(
            incremental(TOPIC_RESOURCE, "t", ("cleanup.policy", OpType.SUBTRACT, "delete")),
        ),
        validate_only=False,
    )
    after = apply(after, incremental_alter_configs(context(after), subtract, 1))
    assert after.configs[(TOPIC_RESOURCE, "t")]["cleanup.policy"] == "compact"


def test_refusals_per_resource() -> None:
    request = IA.IncrementalAlterConfigsRequest(
        resources=(
            incremental(TOPIC_RESOURCE, "missing", ("retention.ms", OpType.SET, "1")),
            incremental(TOPIC_RESOURCE, "t", ("bogus", OpType.SET, "1")),
            incremental(TOPIC_RESOURCE, "t", ("retention.ms", OpType.SET, "-7")),
            incremental(BROKER_RESOURCE, "x", ("log.retention.ms", OpType.SET, "1")),
            incremental(BROKER_RESOURCE, "", ("retention.ms", OpType.APPEND, "1")),
        ),
        validate_only=False,
    )
    # Two resources named t: both are refused as duplicates before their configs are read.
    result = incremental_alter_configs(context(IMAGE), request, 1)
    assert answers(result.response) == [
        ("missing", ErrorCode.unknown_topic_or_partition, "The topic 'missing' does not exist."),
        ("t", ErrorCode.invalid_request, "Duplicate resource."),
        ("t", ErrorCode.invalid_request, "Duplicate resource."),
        ("x", ErrorCode.invalid_request, "Invalid broker name x"),
        ("", ErrorCode.invalid_config, "Unknown broker config name: retention.ms"),
    ]
    assert result.records == ()


def test_bad_key_or_value_fails_the_whole_resource() -> None:
    for op, message in [
        (("bogus", OpType.SET, "1"), "Unknown topic config name: bogus"),
        (
            ("retention.ms", OpType.SET, "-7"),
            "Invalid value -7 for configuration retention.ms: Value must be at least -1",
        ),
        (
            ("retention.ms", OpType.APPEND, "1"),
            "Config value append is not allowed for config key: retention.ms",
        ),
    ]:
        request = IA.IncrementalAlterConfigsRequest(
            resources=(incremental(TOPIC_RESOURCE, "t", ("segment.ms", OpType.SET, "5"), op),),
            validate_only=False,
        )
        result = incremental_alter_configs(context(IMAGE), request, 1)
        assert answers(result.response) == [("t", ErrorCode.invalid_config, message)]
        assert result.records == ()


def test_broker_and_cluster_default_configs() -> None:
    request = IA.IncrementalAlterConfigsRequest(
        resources=(
            incremental(
                BROKER_RESOURCE, "", ("unclean.leader.election.enable", OpType.SET, "true")
            ),
            incremental(BROKER_RESOURCE, "1", ("log.retention.ms", OpType.SET, "99")),
        ),
        validate_only=False,
    )
    after = apply(IMAGE, incremental_alter_configs(context(IMAGE), request, 1))
    assert after.configs[(BROKER_RESOURCE, "")] == {"unclean.leader.election.enable": "true"}
    assert after.configs[(BROKER_RESOURCE, "1")] == {"log.retention.ms": "99"}
    assert context(after).unclean_enabled("t")


def test_validate_only_writes_nothing() -> None:
    request = IA.IncrementalAlterConfigsRequest(
        resources=(incremental(TOPIC_RESOURCE, "t", ("segment.ms", OpType.SET, "5")),),
        validate_only=True,
    )
    result = incremental_alter_configs(context(IMAGE), request, 1)
    assert result.records == () and answers(result.response) == [("t", ErrorCode.none, None)]


def test_legacy_alter_configs_replaces_the_whole_map() -> None:
    request = LA.AlterConfigsRequest(
        resources=(
            LA.AlterConfigsResource(
                resource_type=TOPIC_RESOURCE,
                resource_name="t",
                configs=(
                    LA.AlterableConfig(name="retention.ms", value="20"),
                    LA.AlterableConfig(name="segment.ms", value="7"),
                ),
            ),
        ),
        validate_only=False,
    )
    result = alter_configs(context(IMAGE), request, 2)
    assert answers(roundtrip(result.response)) == [("t", ErrorCode.none, None)]
    assert apply(IMAGE, result).configs[(TOPIC_RESOURCE, "t")] == {
        "retention.ms": "20",
        "segment.ms": "7",
    }


def test_legacy_alter_configs_refuses_bad_values() -> None:
    module = request_module(33, 0)
    request = module.AlterConfigsRequest(
        resources=(
            module.AlterConfigsResource(
                resource_type=TOPIC_RESOURCE,
                resource_name="t",
                configs=(module.AlterableConfig(name="cleanup.policy", value="bogus"),),
            ),
        ),
        validate_only=False,
    )
    result = alter_configs(context(IMAGE), request, 0)
    assert answers(roundtrip(result.response)) == [
        (
            "t",
            ErrorCode.invalid_config,
            "Invalid value bogus for configuration cleanup.policy: String must be one of: "
            "compact, delete",
        )
    ]
