"""DescribeTopicPartitions (key 75, KIP-966): Metadata's partition view plus each partition's
eligible leader replicas and last known ELR, paged by a cursor. Kafka 4.x's admin client
(``kafka-topics --describe``) asks this instead of Metadata.

As in Kafka's DescribeTopicPartitionsRequestHandler: topics are answered in name order
from the cursor's topic (all topics when the request names none, and then unknown names
are not reported); at most ``response_partition_limit`` partitions, capped at
MAX_REQUEST_PARTITION_SIZE_LIMIT (Kafka's max.request.partition.size.limit default), go
in one answer, and ``next_cursor`` says where the next request starts.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.cluster_metadata import offline_replicas
from metadata.image import MetadataImage, TopicImage
from metadata.records import NO_LEADER
from metadata.topic_names import INTERNAL_TOPICS, topic_name_error
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module

MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)  # no authorizer: Kafka's "not asked" value
_ZERO_UUID = uuid.UUID(int=0)


def describe_topic_partitions_response(
    image: MetadataImage, request: Any, listener_name: str
) -> object:
    """The DescribeTopicPartitionsResponse for ``request`` from one image."""
    module: Any = response_module(ApiKey.DESCRIBE_TOPIC_PARTITIONS, int(request.__version__))
    cursor = request.cursor
    start_topic = cursor.topic_name if cursor is not None else ""
    fetch_all = not request.topics
    names = image.topics.by_name.keys() if fetch_all else {t.name for t in request.topics}
    wanted = sorted(name for name in names if name >= start_topic)
    if cursor is not None and (
        cursor.partition_index < 0 or (not fetch_all and cursor.topic_name not in wanted)
    ):
        return _response(
            module, [_topic_error(module, ErrorCode.invalid_request, n) for n in wanted]
        )
    remaining = max(min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit), 1)
    topics: list[Any] = []
    next_cursor = None
    for name in wanted:
        if remaining <= 0:
            next_cursor = make(module.Cursor, {"topic_name": name, "partition_index": 0})
            break
        topic = image.topics.get(name)
        if topic is None:
            if not fetch_all:
                code = (
                    ErrorCode.unknown_topic_or_partition
                    if topic_name_error(name) is None
                    else ErrorCode.invalid_topic_exception
                )
                topics.append(_topic_error(module, code, name))
            continue
        start = cursor.partition_index if cursor is not None and name == start_topic else 0
        end = min(len(topic.partitions), start + remaining)
        topics.append(_topic(module, image, topic, range(start, end), listener_name))
        if end < len(topic.partitions):
            next_cursor = make(module.Cursor, {"topic_name": name, "partition_index": end})
            break
        remaining -= max(end - start, 0)
    return _response(module, topics, next_cursor)


def _response(module: Any, topics: list[Any], next_cursor: Any = None) -> Any:
    values = {"throttle_time": timedelta(0), "topics": tuple(topics), "next_cursor": next_cursor}
    return make(module.DescribeTopicPartitionsResponse, values)


def _topic_error(module: Any, code: ErrorCode, name: str) -> Any:
    values = {
        "error_code": code,
        "name": name,
        "topic_id": _ZERO_UUID,
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": (),
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    return make(module.DescribeTopicPartitionsResponseTopic, values)


def _topic(
    module: Any, image: MetadataImage, topic: TopicImage, indexes: range, listener_name: str
) -> Any:
    brokers = image.cluster.brokers
    partitions = []
    for index in indexes:
        partition = topic.partitions.get(index)
        if partition is None:
            continue
        offline = offline_replicas(image, partition, listener_name)
        leader = brokers.get(partition.leader)
        alive = (
            leader is not None and not leader.fenced and leader.listener(listener_name) is not None
        )
        values = {
            "error_code": ErrorCode.none,
            "partition_index": index,
            "leader_id": partition.leader if alive else NO_LEADER,
            "leader_epoch": partition.leader_epoch,
            "replica_nodes": partition.replicas,
            "isr_nodes": partition.isr,
            "eligible_leader_replicas": partition.elr,
            "last_known_elr": partition.last_known_elr,
            "offline_replicas": offline,
        }
        partitions.append(make(module.DescribeTopicPartitionsResponsePartition, values))
    values = {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": tuple(partitions),
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
    }
    return make(module.DescribeTopicPartitionsResponseTopic, values)
