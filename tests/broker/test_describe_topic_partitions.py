"""DescribeTopicPartitions (KIP-966): the partition view with ELR fields, paged by cursor,
answered through the wire codec as a client decodes it."""

from __future__ import annotations

import dataclasses
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.image import MetadataImage, TopicImage, TopicsImage
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.broker.fakes import AUDIT_ID, ORDERS_ID, FakeController, cluster_image
from tests.broker.test_kafka_apis import apis, ask

REQUEST: Any = request_module(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0)


def describe(
    image: MetadataImage, names: tuple[str, ...] = (), limit: int = 2000, cursor: Any = None
) -> Any:
    values: dict[str, object] = {
        "topics": tuple(make(REQUEST.TopicRequest, {"name": n}) for n in names),
        "response_partition_limit": limit,
        "cursor": cursor,
    }
    return ask(apis(FakeController(image)), ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, values)


def with_elr(image: MetadataImage) -> MetadataImage:
    """orders-1 has lost its ISR: 2 is eligible, 3 led last."""
    orders = image.topics.by_id[ORDERS_ID]
    leaderless = dataclasses.replace(orders.partitions[1], isr=(), elr=(2,), last_known_elr=(3,))
    topic = TopicImage("orders", ORDERS_ID, {**orders.partitions, 1: leaderless})
    topics = TopicsImage({**image.topics.by_id, ORDERS_ID: topic}, image.topics.by_name)
    return dataclasses.replace(image, topics=topics)


def test_partitions_carry_the_eligible_leader_replicas_and_last_known_leader() -> None:
    response = describe(with_elr(cluster_image()), ("orders",))
    (topic,) = response.topics
    assert (topic.error_code, topic.name, topic.topic_id) == (ErrorCode.none, "orders", ORDERS_ID)
    healthy, leaderless = topic.partitions
    assert (healthy.leader_id, healthy.isr_nodes, healthy.eligible_leader_replicas) == (
        1,
        (1, 2),
        (),
    )
    assert (leaderless.leader_id, leaderless.isr_nodes) == (-1, ())
    assert (leaderless.eligible_leader_replicas, leaderless.last_known_elr) == ((2,), (3,))
    assert leaderless.offline_replicas == (3,)  # broker 3 is fenced
    assert response.next_cursor is None


def test_all_topics_in_name_order_and_unknown_names_reported_only_when_named() -> None:
    response = describe(cluster_image())
    assert [(t.name, t.topic_id) for t in response.topics] == [
        ("audit", AUDIT_ID),
        ("orders", ORDERS_ID),
    ]
    response = describe(cluster_image(), ("orders", "nope", "bad/name"))
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("bad/name", ErrorCode.invalid_topic_exception),
        ("nope", ErrorCode.unknown_topic_or_partition),
        ("orders", ErrorCode.none),
    ]


def test_a_partition_limit_pages_the_answer_with_a_cursor() -> None:
    image = cluster_image()
    first = describe(image, limit=2)
    assert [(t.name, len(t.partitions)) for t in first.topics] == [("audit", 1), ("orders", 1)]
    assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("orders", 1)
    cursor = make(REQUEST.Cursor, {"topic_name": "orders", "partition_index": 1})
    second = describe(image, limit=2, cursor=cursor)
    (topic,) = second.topics
    assert [p.partition_index for p in topic.partitions] == [1]
    assert second.next_cursor is None
    exact = describe(image, limit=1)
    assert [t.name for t in exact.topics] == ["audit"]
    assert (exact.next_cursor.topic_name, exact.next_cursor.partition_index) == ("orders", 0)


def test_a_bad_cursor_is_an_invalid_request() -> None:
    cursor = make(REQUEST.Cursor, {"topic_name": "audit", "partition_index": -1})
    response = describe(cluster_image(), ("audit", "orders"), cursor=cursor)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("audit", ErrorCode.invalid_request),
        ("orders", ErrorCode.invalid_request),
    ]
    cursor = make(REQUEST.Cursor, {"topic_name": "nope", "partition_index": 0})
    response = describe(cluster_image(), ("orders", "zzz"), cursor=cursor)
    assert {t.error_code for t in response.topics} == {ErrorCode.invalid_request}
