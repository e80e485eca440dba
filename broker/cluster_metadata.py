"""Metadata and DescribeCluster answers, read from one published MetadataImage.

What a client sees follows Kafka's KRaftMetadataCache: brokers are the unfenced ones with an
endpoint on the listener the request came in on; a partition whose leader is gone (or has no
such endpoint) reports LEADER_NOT_AVAILABLE (LISTENER_NOT_FOUND) with leader -1, and replicas
on fenced or listener-less brokers are offline. The "controller" a broker names is a random
live broker: clients send admin requests there and brokers forward them to the real
controller, which clients cannot reach.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.image import MetadataImage, PartitionRegistration, TopicImage
from metadata.records import NO_LEADER
from metadata.topic_names import INTERNAL_TOPICS, topic_name_error
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module

BROKER_ENDPOINTS = 1  # DescribeCluster endpoint_type
_ZERO_UUID = uuid.UUID(int=0)
YIELD_EVERY_ENTRIES = 1000  # topics + partitions built between two turns of the event loop


def random_live_broker(image: MetadataImage, listener_name: str, rng: random.Random) -> int:
    """The id a broker reports as "controller": a random unfenced broker a client can reach
    on ``listener_name`` (one the same response lists), -1 when there is none."""
    live = [b for b in image.cluster.unfenced() if b.listener(listener_name) is not None]
    return rng.choice(live).broker_id if live else -1


async def metadata_response(
    image: MetadataImage,
    request: Any,
    listener_name: str,
    cluster_id: str,
    controller_id: int,
    being_created: frozenset[str] = frozenset(),
) -> object:
    """The MetadataResponse (of the request's version) for ``request``; topics in
    ``being_created`` (auto-created) are answered LEADER_NOT_AVAILABLE, as Kafka does. A big
    answer is built in slices of about YIELD_EVERY_ENTRIES topics and partitions with the
    event loop served between them: a request naming 100,000 topics, or a cluster of
    100,000 partitions, never holds the loop for the whole answer (heartbeats and Raft
    fetches keep their timing)."""
    version = int(request.__version__)
    module: Any = response_module(ApiKey.METADATA, version)
    brokers = tuple(
        make(
            module.MetadataResponseBroker,
            {"node_id": b.broker_id, "host": e.host, "port": e.port, "rack": b.rack},
        )
        for b in image.cluster.unfenced()
        if (e := b.listener(listener_name)) is not None
    )
    # v0 has no null list: empty means all topics. From v1, null means all, empty means none.
    wants_all = request.topics is None or (version == 0 and not request.topics)
    topics: list[Any] = []
    budget = YIELD_EVERY_ENTRIES
    if wants_all:
        for _, topic_id in sorted(image.topics.by_name.items()):
            topic = image.topics.by_id[topic_id]
            topics.append(_topic(module, image, topic, listener_name))
            budget -= 1 + len(topic.partitions)
            if budget <= 0:
                await asyncio.sleep(0)
                budget = YIELD_EVERY_ENTRIES
    else:
        for item in request.topics:
            if item.name in being_created:
                answer = _topic_error(module, ErrorCode.leader_not_available, item.name, _ZERO_UUID)
            else:
                answer = _requested(module, image, item, listener_name)
            topics.append(answer)
            budget -= 1 + len(answer.partitions)
            if budget <= 0:
                await asyncio.sleep(0)
                budget = YIELD_EVERY_ENTRIES
    return make(
        module.MetadataResponse,
        {
            "throttle_time": timedelta(0),
            "brokers": brokers,
            "cluster_id": cluster_id,
            "controller_id": controller_id,
            "topics": tuple(topics),
        },
    )


def _requested(module: Any, image: MetadataImage, item: Any, listener_name: str) -> Any:
    """One requested topic: by name, or from v12 by id when the name is null."""
    topic_id = getattr(item, "topic_id", None)
    if item.name is None:
        topic = image.topics.by_id.get(topic_id) if topic_id is not None else None
        if topic is None:
            return _topic_error(module, ErrorCode.unknown_topic_id, None, topic_id or _ZERO_UUID)
        return _topic(module, image, topic, listener_name)
    if topic_name_error(item.name) is not None:
        return _topic_error(module, ErrorCode.invalid_topic_exception, item.name, _ZERO_UUID)
    topic = image.topics.get(item.name)
    if topic is None:
        return _topic_error(module, ErrorCode.unknown_topic_or_partition, item.name, _ZERO_UUID)
    return _topic(module, image, topic, listener_name)


def _topic_error(module: Any, code: ErrorCode, name: str | None, topic_id: uuid.UUID) -> Any:
    values = {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": (),
    }
    return make(module.MetadataResponseTopic, values)


def _topic(module: Any, image: MetadataImage, topic: TopicImage, listener_name: str) -> Any:
    partitions = tuple(
        _partition(module, image, index, partition, listener_name)
        for index, partition in sorted(topic.partitions.items())
    )
    values = {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.name in INTERNAL_TOPICS,
        "partitions": partitions,
    }
    return make(module.MetadataResponseTopic, values)


def _partition(
    module: Any,
    image: MetadataImage,
    index: int,
    partition: PartitionRegistration,
    listener_name: str,
) -> Any:
    brokers = image.cluster.brokers
    offline = offline_replicas(image, partition, listener_name)
    leader = brokers.get(partition.leader) if partition.leader != NO_LEADER else None
    if leader is None:
        code, leader_id = ErrorCode.leader_not_available, NO_LEADER
    elif leader.listener(listener_name) is None:
        code, leader_id = ErrorCode.listener_not_found, NO_LEADER
    else:
        code, leader_id = ErrorCode.none, partition.leader
    values = {
        "error_code": code,
        "partition_index": index,
        "leader_id": leader_id,
        "leader_epoch": partition.leader_epoch,
        "replica_nodes": partition.replicas,
        "isr_nodes": partition.isr,
        "offline_replicas": offline,
    }
    return make(module.MetadataResponsePartition, values)


def offline_replicas(
    image: MetadataImage, partition: PartitionRegistration, listener_name: str
) -> tuple[int, ...]:
    """The partition's replicas on brokers that are gone, fenced, or not on this listener."""
    brokers = image.cluster.brokers
    return tuple(
        replica
        for replica in partition.replicas
        if (broker := brokers.get(replica)) is None
        or broker.fenced
        or broker.listener(listener_name) is None
    )


def describe_cluster_response(
    image: MetadataImage,
    request: Any,
    listener_name: str,
    cluster_id: str,
    controller_id: int,
) -> object:
    """The DescribeClusterResponse (of the request's version): this broker serves only
    broker endpoints (v1's endpoint_type 2, controllers, is UNSUPPORTED_ENDPOINT_TYPE)."""
    module: Any = response_module(ApiKey.DESCRIBE_CLUSTER, int(request.__version__))
    endpoint_type = getattr(request, "endpoint_type", BROKER_ENDPOINTS)
    if endpoint_type != BROKER_ENDPOINTS:
        values: dict[str, object] = {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "The broker only supports broker endpoints.",
            "endpoint_type": endpoint_type,
            "cluster_id": cluster_id,
            "brokers": (),
        }
        return make(module.DescribeClusterResponse, values)
    brokers = tuple(
        make(
            module.DescribeClusterBroker,
            {"broker_id": b.broker_id, "host": e.host, "port": e.port, "rack": b.rack},
        )
        for b in image.cluster.unfenced()
        if (e := b.listener(listener_name)) is not None
    )
    values = {
        "throttle_time": timedelta(0),
        "error_code": ErrorCode.none,
        "endpoint_type": BROKER_ENDPOINTS,
        "cluster_id": cluster_id,
        "controller_id": controller_id,
        "brokers": brokers,
    }
    return make(module.DescribeClusterResponse, values)


CONTROLLER_ENDPOINTS = 2


def describe_controllers_response(
    request: Any, cluster_id: str, leader_id: int, voters: dict[int, tuple[str, int]]
) -> object:
    """A controller's DescribeClusterResponse (KIP-919, for admin clients bootstrapped from
    controllers): the quorum's voters and the current leader; broker endpoints are the
    brokers' to give, so that endpoint type is UNSUPPORTED_ENDPOINT_TYPE here, as in Kafka."""
    module: Any = response_module(ApiKey.DESCRIBE_CLUSTER, int(request.__version__))
    endpoint_type = getattr(request, "endpoint_type", BROKER_ENDPOINTS)
    values: dict[str, object] = {
        "throttle_time": timedelta(0),
        "endpoint_type": endpoint_type,
        "cluster_id": cluster_id,
    }
    if endpoint_type != CONTROLLER_ENDPOINTS:
        values |= {
            "error_code": ErrorCode.unsupported_endpoint_type,
            "error_message": "The controller only supports the controller endpoint type.",
            "brokers": (),
        }
        return make(module.DescribeClusterResponse, values)
    values |= {
        "error_code": ErrorCode.none,
        "controller_id": leader_id,
        "brokers": tuple(
            make(
                module.DescribeClusterBroker,
                {"broker_id": node, "host": host, "port": port, "rack": None},
            )
            for node, (host, port) in sorted(voters.items())
        ),
    }
    return make(module.DescribeClusterResponse, values)
