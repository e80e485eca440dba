"""CreateTopics, DeleteTopics and CreatePartitions: Kafka's validation, codes and messages."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from metadata.controller.topics import create_partitions, create_topics, delete_topics
from metadata.records import (
    NO_LEADER,
    TOPIC_RESOURCE,
    Config,
    FenceBroker,
    Partition,
    RemoveTopic,
    Topic,
)
from tests.metadata.controller.support import (
    apply,
    brokers,
    build,
    context,
    request_module,
    roundtrip,
    with_topic,
)

CT = request_module(19, 7)


def topic(
    name: str,
    partitions: int = -1,
    replication_factor: int = -1,
    assignments: tuple[tuple[int, ...], ...] = (),
    configs: dict[str, str | None] | None = None,
) -> Any:
    return CT.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=replication_factor,
        assignments=tuple(
            CT.CreatableReplicaAssignment(partition_index=i, broker_ids=ids)
            for i, ids in enumerate(assignments)
        ),
        configs=tuple(CT.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
    )


def create(*topics: Any, validate_only: bool = False) -> Any:
    return CT.CreateTopicsRequest(topics=topics, validate_only=validate_only)


def results(response: Any) -> dict[str, tuple[ErrorCode, str | None]]:
    return {t.name: (t.error_code, t.error_message) for t in response.topics}


def test_create_places_partitions_and_reports_what_it_made() -> None:
    image = brokers(1, 2, 3)
    result = create_topics(context(image), create(topic("orders", 6, 2)), 7)
    (answer,) = roundtrip(result.response).topics
    assert answer.error_code == ErrorCode.none
    assert (answer.num_partitions, answer.replication_factor) == (6, 2)
    assert answer.topic_id is not None
    configs = {c.name: c.value for c in answer.configs}
    assert configs["retention.ms"] == "604800000"
    after = apply(image, result)
    created = after.topics.get("orders")
    assert created is not None and created.topic_id == answer.topic_id
    assert len(created.partitions) == 6
    for partition in created.partitions.values():
        assert len(set(partition.replicas)) == 2
        assert partition.isr == partition.replicas
        assert partition.leader == partition.replicas[0]
    assert sorted(p.leader for p in created.partitions.values()) == [1, 1, 2, 2, 3, 3]


def test_defaults_come_from_the_controller_config() -> None:
    image = brokers(1, 2)
    result = create_topics(
        context(image, num_partitions=3, default_replication_factor=2), create(topic("t")), 7
    )
    (answer,) = result.response.topics
    assert (answer.num_partitions, answer.replication_factor) == (3, 2)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "Topic name is illegal, it can't be empty"),
        (".", 'Topic name cannot be "." or ".."'),
        ("..", 'Topic name cannot be "." or ".."'),
        (
            "a" * 250,
            "Topic name is illegal, it can't be longer than 249 characters, topic name: "
            + "a" * 250,
        ),
        (
            "bad name!",
            'Topic name "bad name!" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'",
        ),
    ],
)
def test_illegal_topic_names_are_refused(name: str, message: str) -> None:
    result = create_topics(context(brokers(1)), create(topic(name)), 7)
    assert results(result.response)[name] == (ErrorCode.invalid_topic_exception, message)
    assert result.records == ()


def test_reserved_topic_names_are_refused_as_kafka_refuses_them() -> None:
    # On main __cluster_metadata was created, and its partition 0 log landed in the
    # metadata log's own directory.
    names = ("__cluster_metadata", "__consumer_offsets", "__transaction_state", "ok")
    result = create_topics(context(brokers(1)), create(*(topic(n) for n in names)), 7)
    refused = "Creation of internal topic __cluster_metadata is prohibited."
    assert results(result.response) == {
        "__cluster_metadata": (ErrorCode.invalid_request, refused),
        "__consumer_offsets": (ErrorCode.topic_authorization_failed, "Authorization failed."),
        "__transaction_state": (ErrorCode.topic_authorization_failed, "Authorization failed."),
        "ok": (ErrorCode.none, None),
    }
    assert {r.name for r in result.records if isinstance(r, Topic)} == {"ok"}


def test_a_broker_creates_its_own_internal_topics_but_never_the_metadata_log() -> None:
    names = ("__cluster_metadata", "__consumer_offsets")
    result = create_topics(
        context(brokers(1)),
        create(*(topic(n, configs={"cleanup.policy": "compact"}) for n in names)),
        7,
        internal=True,
    )
    assert results(result.response)["__consumer_offsets"] == (ErrorCode.none, None)
    assert results(result.response)["__cluster_metadata"][0] == ErrorCode.invalid_request
    assert {r.name for r in result.records if isinstance(r, Topic)} == {"__consumer_offsets"}


def test_a_name_of_249_legal_characters_is_fine() -> None:
    name = "a-b_c.D9" * 31 + "x"
    assert len(name) == 249
    result = create_topics(context(brokers(1)), create(topic(name)), 7)
    assert results(result.response)[name][0] == ErrorCode.none


def test_existing_and_colliding_topics_are_refused() -> None:
    image = with_topic(brokers(1), "a.b", ((1,), (1,), 1))
    result = create_topics(context(image), create(topic("a.b"), topic("a_b")), 7)
    assert results(result.response) == {
        "a.b": (ErrorCode.topic_already_exists, "Topic 'a.b' already exists."),
        "a_b": (ErrorCode.invalid_topic_exception, "Topic 'a_b' collides with existing topic: a.b"),
    }


def test_duplicate_names_in_one_request_fail_every_copy_but_not_the_rest() -> None:
    result = create_topics(context(brokers(1)), create(topic("d"), topic("ok"), topic("d")), 7)
    codes = [(t.name, t.error_code) for t in result.response.topics]
    assert codes == [
        ("d", ErrorCode.invalid_request),
        ("ok", ErrorCode.none),
        ("d", ErrorCode.invalid_request),
    ]
    assert [r.name for r in result.records if isinstance(r, Topic)] == ["ok"]


def test_replication_factor_above_unfenced_brokers_gets_kafkas_message() -> None:
    image = build(FenceBroker(3, 103), image=brokers(1, 2, 3))
    result = create_topics(context(image), create(topic("t", 1, 3)), 7)
    assert results(result.response)["t"] == (
        ErrorCode.invalid_replication_factor,
        "Unable to replicate the partition 3 time(s): The target replication factor of 3 "
        "cannot be reached because only 2 broker(s) are registered.",
    )


@pytest.mark.parametrize(
    ("partitions", "replication_factor", "code"),
    [
        (0, 1, ErrorCode.invalid_partitions),
        (-2, 1, ErrorCode.invalid_partitions),
        (1, 0, ErrorCode.invalid_replication_factor),
        (1, -5, ErrorCode.invalid_replication_factor),
    ],
)
def test_non_positive_counts_are_refused(
    partitions: int, replication_factor: int, code: ErrorCode
) -> None:
    result = create_topics(
        context(brokers(1)), create(topic("t", partitions, replication_factor)), 7
    )
    assert results(result.response)["t"][0] == code


def test_configs_are_validated_and_written() -> None:
    image = brokers(1)
    request = create(
        topic("good", configs={"retention.ms": "1000", "cleanup.policy": "compact"}),
        topic("unknown", configs={"nope": "1"}),
        topic("bad", configs={"segment.bytes": "1"}),
    )
    result = create_topics(context(image), request, 7)
    assert results(result.response)["unknown"] == (
        ErrorCode.invalid_config,
        "Unknown topic config name: nope",
    )
    assert results(result.response)["bad"] == (
        ErrorCode.invalid_config,
        "Invalid value 1 for configuration segment.bytes: Value must be at least 14",
    )
    assert apply(image, result).configs[(TOPIC_RESOURCE, "good")] == {
        "retention.ms": "1000",
        "cleanup.policy": "compact",
    }
    shown = {c.name: (c.value, c.config_source) for c in result.response.topics[0].configs}
    assert shown["retention.ms"] == ("1000", 1)
    assert shown["segment.ms"] == ("604800000", 5)


def test_manual_assignments_use_usable_replicas_for_isr_and_leader() -> None:
    image = build(FenceBroker(1, 101), image=brokers(1, 2, 3))
    result = create_topics(context(image), create(topic("m", assignments=((1, 2), (3, 1)))), 7)
    assert results(result.response)["m"][0] == ErrorCode.none
    partitions = apply(image, result).topics.get("m").partitions  # type: ignore[union-attr]
    assert (partitions[0].replicas, partitions[0].isr, partitions[0].leader) == ((1, 2), (2,), 2)
    assert (partitions[1].replicas, partitions[1].isr, partitions[1].leader) == ((3, 1), (3,), 3)


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        (
            ((1, 9),),
            "The manual partition assignment includes broker 9, but no broker with that ID "
            "was found.",
        ),
        (((1, 1),), "The manual partition assignment includes the broker 1 more than once."),
        (((),), "The manual partition assignment includes an empty replica list."),
        (
            ((1, 2), (1,)),
            "The manual partition assignment includes a partition with 1 replica(s), but this is "
            "not consistent with previous partitions, which have 2 replica(s).",
        ),
        (
            ((3,),),
            "All brokers specified in the manual partition assignment for partition 0 are "
            "fenced or in controlled shutdown.",
        ),
    ],
)
def test_bad_manual_assignments_are_refused(assignments: tuple, message: str) -> None:
    image = build(FenceBroker(3, 103), image=brokers(1, 2, 3))
    result = create_topics(context(image), create(topic("m", assignments=assignments)), 7)
    assert results(result.response)["m"] == (ErrorCode.invalid_replica_assignment, message)


def test_manual_assignment_needs_minus_one_counts_and_consecutive_indexes() -> None:
    image = brokers(1, 2)
    with_count = topic("m", partitions=2, assignments=((1,),))
    result = create_topics(context(image), create(with_count), 7)
    assert results(result.response)["m"][0] == ErrorCode.invalid_request
    gap = CT.CreatableTopic(
        name="g",
        num_partitions=-1,
        replication_factor=-1,
        assignments=(CT.CreatableReplicaAssignment(partition_index=1, broker_ids=(1,)),),
        configs=(),
    )
    result = create_topics(context(image), create(gap), 7)
    assert results(result.response)["g"] == (
        ErrorCode.invalid_replica_assignment,
        "partitions should be a consecutive 0-based integer sequence",
    )


def test_validate_only_answers_without_records() -> None:
    result = create_topics(context(brokers(1, 2)), create(topic("v", 2, 2), validate_only=True), 7)
    assert result.records == ()
    (answer,) = result.response.topics
    assert (answer.error_code, answer.num_partitions, answer.replication_factor) == (
        ErrorCode.none,
        2,
        2,
    )


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6, 7])
def test_every_served_version_encodes(version: int) -> None:
    module = request_module(19, version)
    request = module.CreateTopicsRequest(
        topics=(
            module.CreatableTopic(
                name="t", num_partitions=1, replication_factor=1, assignments=(), configs=()
            ),
            module.CreatableTopic(
                name="t!", num_partitions=1, replication_factor=1, assignments=(), configs=()
            ),
        ),
    )
    result = create_topics(context(brokers(1)), request, version)
    decoded = roundtrip(result.response)
    assert [t.error_code for t in decoded.topics] == [
        ErrorCode.none,
        ErrorCode.invalid_topic_exception,
    ]


def test_records_are_one_topic_then_its_partitions() -> None:
    result = create_topics(
        context(brokers(1)), create(topic("r", 2, 1, configs={"retention.ms": "5"})), 7
    )
    kinds = [type(r) for r in result.records]
    assert kinds == [Topic, Config, Partition, Partition]


# ---- DeleteTopics ------------------------------------------------------------------------------


def test_delete_by_name_and_by_id() -> None:
    tid = uuid.UUID(int=77)
    image = with_topic(
        with_topic(brokers(1), "a", ((1,), (1,), 1)), "b", ((1,), (1,), 1), topic_id=tid
    )
    module = request_module(20, 6)
    request = module.DeleteTopicsRequest(
        topics=(
            module.DeleteTopicState(name="a", topic_id=uuid.UUID(int=0)),
            module.DeleteTopicState(name=None, topic_id=tid),
            module.DeleteTopicState(name="zz", topic_id=uuid.UUID(int=0)),
            module.DeleteTopicState(name=None, topic_id=uuid.UUID(int=5)),
        ),
        timeout=0,
    )
    result = delete_topics(context(image), request, 6)
    decoded = roundtrip(result.response)
    assert [(r.name, r.error_code) for r in decoded.responses] == [
        ("a", ErrorCode.none),
        ("b", ErrorCode.none),
        ("zz", ErrorCode.unknown_topic_or_partition),
        (None, ErrorCode.unknown_topic_id),
    ]
    assert result.records == (RemoveTopic(image.topics.by_name["a"]), RemoveTopic(tid))
    assert apply(image, result).topics.by_name == {}


def test_delete_by_names_in_old_versions() -> None:
    image = with_topic(brokers(1), "a", ((1,), (1,), 1))
    module = request_module(20, 4)
    request = module.DeleteTopicsRequest(topic_names=("a", "a", "b"), timeout=0)
    result = delete_topics(context(image), request, 4)
    assert [(r.name, r.error_code) for r in roundtrip(result.response).responses] == [
        ("a", ErrorCode.invalid_request),
        ("a", ErrorCode.invalid_request),
        ("b", ErrorCode.unknown_topic_or_partition),
    ]
    assert result.records == ()


# ---- CreatePartitions --------------------------------------------------------------------------


CP = request_module(37, 3)


def grow(name: str, count: int, assignments: tuple[tuple[int, ...], ...] | None = None) -> Any:
    return CP.CreatePartitionsTopic(
        name=name,
        count=count,
        assignments=None
        if assignments is None
        else tuple(CP.CreatePartitionsAssignment(broker_ids=a) for a in assignments),
    )


def test_create_partitions_grows_with_the_topics_replication_factor() -> None:
    image = with_topic(brokers(1, 2, 3), "t", ((1, 2), (1, 2), 1))
    request = CP.CreatePartitionsRequest(topics=(grow("t", 4),), timeout=0, validate_only=False)
    result = create_partitions(context(image), request, 3)
    assert roundtrip(result.response).results[0].error_code == ErrorCode.none
    partitions = apply(image, result).topics.get("t").partitions  # type: ignore[union-attr]
    assert sorted(partitions) == [0, 1, 2, 3]
    assert all(len(p.replicas) == 2 and p.leader == p.replicas[0] for p in partitions.values())


def test_create_partitions_must_grow_and_match_assignments() -> None:
    image = with_topic(brokers(1, 2), "t", ((1,), (1,), 1), ((2,), (2,), 2))
    request = CP.CreatePartitionsRequest(
        topics=(grow("t", 2), grow("missing", 3)), timeout=0, validate_only=False
    )
    answers = {
        r.name: (r.error_code, r.error_message)
        for r in create_partitions(context(image), request, 3).response.results
    }
    assert answers == {
        "t": (ErrorCode.invalid_partitions, "Topic already has 2 partition(s)."),
        "missing": (ErrorCode.unknown_topic_or_partition, None),
    }
    shrink = CP.CreatePartitionsRequest(topics=(grow("t", 1),), timeout=0, validate_only=False)
    (answer,) = create_partitions(context(image), shrink, 3).response.results
    assert (answer.error_code, answer.error_message) == (
        ErrorCode.invalid_partitions,
        "The topic t currently has 2 partition(s); 1 would not be an increase.",
    )
    wrong = CP.CreatePartitionsRequest(
        topics=(grow("t", 4, ((1,),)),), timeout=0, validate_only=False
    )
    (answer,) = create_partitions(context(image), wrong, 3).response.results
    assert answer.error_code == ErrorCode.invalid_replica_assignment


def test_create_partitions_with_assignments_and_validate_only() -> None:
    image = with_topic(brokers(1, 2), "t", ((1,), (1,), 1))
    request = CP.CreatePartitionsRequest(
        topics=(grow("t", 3, ((2,), (1,))),), timeout=0, validate_only=False
    )
    result = create_partitions(context(image), request, 3)
    partitions = apply(image, result).topics.get("t").partitions  # type: ignore[union-attr]
    assert [(partitions[i].replicas, partitions[i].leader) for i in (1, 2)] == [
        ((2,), 2),
        ((1,), 1),
    ]
    dry = CP.CreatePartitionsRequest(topics=(grow("t", 3),), timeout=0, validate_only=True)
    result = create_partitions(context(image), dry, 3)
    assert result.records == () and result.response.results[0].error_code == ErrorCode.none


def test_no_leader_constant_is_never_a_placed_leader() -> None:
    result = create_topics(context(brokers(1, 2)), create(topic("n", 4, 2)), 7)
    assert all(r.leader != NO_LEADER for r in result.records if isinstance(r, Partition))
