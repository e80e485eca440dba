"""Issue 22: the broker's internal topics are created only through a broker's
internal-topics channel, and no request deletes, repartitions or makes them unsafe."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.controller.configs import OpType, alter_configs, incremental_alter_configs
from metadata.controller.internal_topics import (
    INTERNAL_TOPIC_CREATOR,
    MIN_MAX_MESSAGE_BYTES,
    internal_creator_client_id,
)
from metadata.controller.topics import create_partitions, create_topics, delete_topics
from metadata.records import TOPIC_RESOURCE, Config, Topic
from tests.metadata.controller.support import (
    apply,
    brokers,
    build,
    context,
    request_module,
    roundtrip,
    with_topic,
)
from tests.metadata.controller.test_configs import IA, LA, answers, incremental
from tests.metadata.controller.test_quorum_controller import Controller, run
from tests.metadata.controller.test_topics import create, results, topic

OFFSETS = "__consumer_offsets"
SAFE = {"cleanup.policy": "compact", "segment.bytes": "104857600"}
# __consumer_offsets as the broker creates it, on broker 1.
IMAGE = build(
    *(Config(TOPIC_RESOURCE, OFFSETS, k, v) for k, v in SAFE.items()),
    image=with_topic(brokers(1), OFFSETS, ((1,), (1,), 1), topic_id=uuid.UUID(int=50)),
)


def test_only_a_registered_brokers_internal_channel_creates_internal_topics(
    tmp_path: Path,
) -> None:
    """On main the client id "kraft-broker-internal-topics" alone was trusted: any client
    of the controller listener created __consumer_offsets with max.message.bytes=0."""

    async def scenario() -> dict[str, tuple[ErrorCode, str | None]]:
        controller = Controller(tmp_path)
        await controller.start()
        epoch = await controller.register(1)  # incarnation id UUID(int=1)
        await controller.heartbeat(1, epoch, offset=controller.image.offset)
        answers: dict[str, tuple[ErrorCode, str | None]] = {}
        tries = {
            "constant": (INTERNAL_TOPIC_CREATOR, SAFE),
            "wrong-incarnation": (internal_creator_client_id(1, uuid.UUID(int=2)), SAFE),
            "unknown-broker": (internal_creator_client_id(9, uuid.UUID(int=9)), SAFE),
            "unsafe": (
                internal_creator_client_id(1, uuid.UUID(int=1)),
                {**SAFE, "max.message.bytes": "0"},
            ),
            "broker": (internal_creator_client_id(1, uuid.UUID(int=1)), SAFE),
        }
        for label, (client_id, configs) in tries.items():
            request = create(topic(OFFSETS, 3, 1, configs=configs))
            response = await controller.controller.handle(19, 7, request, client_id=client_id)
            answers[label] = results(roundtrip(response))[OFFSETS]
        assert len(controller.image.topics.get(OFFSETS).partitions) == 3  # type: ignore[union-attr]
        await controller.stop()
        return answers

    answers = run(scenario())
    denied = (ErrorCode.topic_authorization_failed, "Authorization failed.")
    assert answers["constant"] == denied
    assert answers["wrong-incarnation"] == denied
    assert answers["unknown-broker"] == denied
    assert answers["unsafe"][0] == ErrorCode.invalid_config
    assert answers["broker"] == (ErrorCode.none, None)


def test_internal_topics_cannot_be_deleted_by_name_or_id() -> None:
    module = request_module(20, 6)
    request = module.DeleteTopicsRequest(
        topics=(
            module.DeleteTopicState(name=OFFSETS, topic_id=uuid.UUID(int=0)),
            module.DeleteTopicState(name=None, topic_id=uuid.UUID(int=50)),
        ),
        timeout=0,
    )
    result = delete_topics(context(IMAGE), request, 6)
    codes = [r.error_code for r in roundtrip(result.response).responses]
    assert codes == [ErrorCode.topic_authorization_failed] * 2
    assert result.records == ()
    old = request_module(20, 5)
    request = old.DeleteTopicsRequest(topic_names=(OFFSETS, "__transaction_state"), timeout=0)
    result = delete_topics(context(IMAGE), request, 5)
    codes = [r.error_code for r in roundtrip(result.response).responses]
    assert codes == [ErrorCode.topic_authorization_failed] * 2


def test_internal_topics_cannot_get_more_partitions() -> None:
    module = request_module(37, 3)
    grow = module.CreatePartitionsTopic(name=OFFSETS, count=5, assignments=None)
    request = module.CreatePartitionsRequest(topics=(grow,), timeout=0, validate_only=False)
    result = create_partitions(context(IMAGE), request, 3)
    assert roundtrip(result.response).results[0].error_code == ErrorCode.topic_authorization_failed
    assert result.records == ()


@pytest.mark.parametrize(
    ("key", "operation", "value"),
    [
        ("cleanup.policy", OpType.SET, "delete"),
        ("cleanup.policy", OpType.SET, "compact,delete"),
        ("cleanup.policy", OpType.APPEND, "delete"),
        ("cleanup.policy", OpType.DELETE, None),  # the broker default is delete
        ("max.message.bytes", OpType.SET, "0"),
        ("max.message.bytes", OpType.SET, str(MIN_MAX_MESSAGE_BYTES - 1)),
        ("retention.ms", OpType.SET, "1"),
        ("retention.bytes", OpType.SET, "0"),
    ],
)
def test_unsafe_configs_of_an_internal_topic_are_refused(
    key: str, operation: OpType, value: str | None
) -> None:
    resource = incremental(TOPIC_RESOURCE, OFFSETS, (key, operation, value))
    request = IA.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)
    result = incremental_alter_configs(context(IMAGE), request, 1)
    ((name, code, message),) = answers(roundtrip(result.response))
    assert (name, code) == (OFFSETS, ErrorCode.invalid_config)
    assert message is not None and f"Internal topic {OFFSETS}" in message
    assert result.records == ()


def test_safe_configs_of_an_internal_topic_still_change() -> None:
    resource = incremental(
        TOPIC_RESOURCE,
        OFFSETS,
        ("segment.bytes", OpType.SET, "1048576"),
        ("max.message.bytes", OpType.SET, str(2 * MIN_MAX_MESSAGE_BYTES)),
        ("retention.ms", OpType.SET, "-1"),
    )
    request = IA.IncrementalAlterConfigsRequest(resources=(resource,), validate_only=False)
    result = incremental_alter_configs(context(IMAGE), request, 1)
    assert answers(roundtrip(result.response)) == [(OFFSETS, ErrorCode.none, None)]
    assert apply(IMAGE, result).configs[(TOPIC_RESOURCE, OFFSETS)]["segment.bytes"] == "1048576"


def _legacy(configs: dict[str, str]) -> Any:
    return LA.AlterConfigsRequest(
        resources=(
            LA.AlterConfigsResource(
                resource_type=TOPIC_RESOURCE,
                resource_name=OFFSETS,
                configs=tuple(LA.AlterableConfig(name=k, value=v) for k, v in configs.items()),
            ),
        ),
        validate_only=False,
    )


def test_a_legacy_alter_configs_must_keep_compaction() -> None:
    # AlterConfigs replaces every config: leaving cleanup.policy out would delete it.
    result = alter_configs(context(IMAGE), _legacy({"segment.bytes": "1048576"}), 2)
    assert answers(roundtrip(result.response))[0][1] == ErrorCode.invalid_config
    result = alter_configs(context(IMAGE), _legacy({"cleanup.policy": "compact"}), 2)
    assert answers(roundtrip(result.response))[0][1] == ErrorCode.none


@pytest.mark.parametrize(
    ("name", "internal"),
    [("__consumer.offsets", OFFSETS), ("__transaction.state", "__transaction_state")],
)
def test_a_name_colliding_with_an_internal_topic_is_refused_before_it_exists(
    name: str, internal: str
) -> None:
    """On main "__consumer.offsets" created first made __consumer_offsets collide, and no
    group ever worked."""
    result = create_topics(context(brokers(1)), create(topic(name)), 7)
    assert results(result.response)[name] == (
        ErrorCode.invalid_topic_exception,
        f"Topic '{name}' collides with internal topic: {internal}",
    )
    assert result.records == ()


def test_the_internal_topic_is_still_created_beside_a_colliding_one_made_earlier() -> None:
    image = with_topic(brokers(1), "__consumer.offsets", ((1,), (1,), 1))
    request = create(topic(OFFSETS, 1, 1, configs=SAFE))
    result = create_topics(context(image), request, 7, internal=True)
    assert results(result.response)[OFFSETS] == (ErrorCode.none, None)
    assert [r.name for r in result.records if isinstance(r, Topic)] == [OFFSETS]
