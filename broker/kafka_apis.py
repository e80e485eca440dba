"""The broker's client-facing request handlers (Kafka's KafkaApis).

Produce, Fetch and ListOffsets go to the ReplicaManager (broker/data_plane.py) when there
is one, InitProducerId to the ProducerIdManager (broker/producer_ids.py). Reads (ApiVersions,
Metadata, DescribeCluster, DescribeConfigs, DescribeTopicPartitions) are answered from the
latest published MetadataImage, taken once per request so one answer never mixes two images.
Writes to cluster metadata (topics, partitions, configs, leader elections) are the controller's:
they are forwarded unchanged through the controller channel and its answer is passed back,
NOT_CONTROLLER included (clients retry it); only when no controller answers in time does the
broker answer for it, with REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

from kio.schema.errors import ErrorCode

from broker import data_plane, forwarding
from broker.auto_topic_creation import AutoTopicCreationManager
from broker.cluster_metadata import (
    DESCRIBE_CLUSTER,
    METADATA,
    describe_cluster_response,
    metadata_response,
    random_live_broker,
)
from broker.controller_channel import ControllerSender
from broker.describe_configs import DESCRIBE_CONFIGS, describe_configs_response
from broker.describe_topic_partitions import (
    DESCRIBE_TOPIC_PARTITIONS,
    describe_topic_partitions_response,
)
from broker.fetch_session import CACHE_SLOTS_DEFAULT, FetchSessionCache
from broker.group.apis import SUPPORTED as GROUP_APIS
from broker.group.apis import GroupApis
from broker.lifecycle import SUPPORTED_FEATURES
from broker.network import api_versions_response
from broker.producer_ids import INIT_PRODUCER_ID, ProducerIdManager, init_producer_id
from broker.replica_manager import ReplicaManager
from metadata.image import MetadataImage
from metadata.topic_names import RESERVED_TOPICS, topic_name_error
from protocol import wire
from protocol.entities import make, response_module

logger = logging.getLogger("broker.kafka_apis")

FORWARD_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default
METADATA_BY_ID_VERSION = 12  # Metadata looks topics up by id from v12 (KIP-516)


def loop_time() -> float:
    """The running event loop's clock (virtual under the simulator): fetch session ages."""
    return asyncio.get_running_loop().time()


class KafkaApis:
    """Answers one broker listener's requests; ``handle`` is a network.Handler."""

    SUPPORTED_APIS: ClassVar[dict[int, tuple[int, int]]] = {
        wire.API_VERSIONS_KEY: (0, 4),
        METADATA: (0, 12),
        forwarding.CREATE_TOPICS: (2, 7),
        forwarding.DELETE_TOPICS: (1, 6),
        DESCRIBE_CONFIGS: (1, 4),
        forwarding.ALTER_CONFIGS: (0, 2),
        forwarding.CREATE_PARTITIONS: (0, 3),
        forwarding.ELECT_LEADERS: (0, 2),
        forwarding.INCREMENTAL_ALTER_CONFIGS: (0, 1),
        forwarding.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
        forwarding.LIST_PARTITION_REASSIGNMENTS: (0, 0),
        forwarding.UPDATE_FEATURES: (0, 1),
        DESCRIBE_CLUSTER: (0, 1),
        DESCRIBE_TOPIC_PARTITIONS: (0, 0),
    }

    def __init__(
        self,
        node_id: int,
        cluster_id: str,
        listener_name: str,
        image: Callable[[], MetadataImage],
        channel: ControllerSender,
        rng: random.Random,
        *,
        replicas: ReplicaManager | None = None,
        fetch_sessions: FetchSessionCache | None = None,
        producer_ids: ProducerIdManager | None = None,
        groups: GroupApis | None = None,
        auto_create_topics: bool = False,
        forward_timeout_ms: int = FORWARD_TIMEOUT_MS,
    ) -> None:
        self.node_id = node_id
        self.replicas = replicas
        # One cache per broker (its listeners share it); a lone KafkaApis makes its own.
        if fetch_sessions is None:
            fetch_sessions = FetchSessionCache(CACHE_SLOTS_DEFAULT, rng, loop_time)
        self.fetch_sessions = fetch_sessions
        self._auto_creation = (
            AutoTopicCreationManager(node_id, self._forward) if auto_create_topics else None
        )
        self.supported_apis = dict(self.SUPPORTED_APIS)
        if replicas is not None:
            self.supported_apis |= data_plane.SUPPORTED
        self.producer_ids = producer_ids
        if producer_ids is not None:
            self.supported_apis[INIT_PRODUCER_ID] = (0, 4)
        self.groups = groups
        if groups is not None:
            self.supported_apis |= GROUP_APIS
        self.cluster_id = cluster_id
        self.listener_name = listener_name
        self._image = image
        self._channel = channel
        self._rng = rng
        self._forward_timeout_s = forward_timeout_ms / 1000

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self._image().topics.by_id.get(topic_id)
        return None if topic is None else topic.name

    async def handle(self, header: wire.RequestHeader, request: object) -> object | None:
        """The response entity for a decoded request, None to close the connection."""
        api_key = header.api_key
        if api_key in forwarding.FORWARDED_APIS:
            return await self._forward(request)
        body: Any = request
        replicas = self.replicas
        if replicas is not None:
            if api_key == data_plane.PRODUCE:
                return await data_plane.produce(replicas, body, header.api_version)
            if api_key == data_plane.FETCH:
                return await data_plane.fetch(
                    replicas, self.fetch_sessions, self._topic_name, body, header.api_version
                )
            if api_key == data_plane.LIST_OFFSETS:
                return await data_plane.list_offsets(replicas, body, header.api_version)
            if api_key == data_plane.OFFSET_FOR_LEADER_EPOCH:
                return await data_plane.offset_for_leader_epoch(replicas, body, header.api_version)
        if api_key in GROUP_APIS and self.groups is not None:
            return await self.groups.handle(
                api_key, header.api_version, body, self.listener_name, header.client_id or ""
            )
        if api_key == INIT_PRODUCER_ID and self.producer_ids is not None:
            return await init_producer_id(self.producer_ids, body, header.api_version)
        image = self._image()
        if api_key == wire.API_VERSIONS_KEY:
            response = api_versions_response(header.api_version, self.supported_apis)
            return _with_features(response, image) if header.api_version >= 3 else response
        if api_key == METADATA:
            if header.api_version < METADATA_BY_ID_VERSION and any(
                item.name is None for item in body.topics or ()
            ):
                # v10-11 may carry a null name but not look a topic up by id, and their
                # answer cannot carry a null name: Kafka refuses the request
                # (InvalidRequestException), the connection closes.
                return None
            controller_id = random_live_broker(image, self.listener_name, self._rng)
            created = self._auto_create(image, body)
            return await metadata_response(
                image, body, self.listener_name, self.cluster_id, controller_id, created
            )
        if api_key == DESCRIBE_CLUSTER:
            controller_id = random_live_broker(image, self.listener_name, self._rng)
            return describe_cluster_response(
                image, body, self.listener_name, self.cluster_id, controller_id
            )
        if api_key == DESCRIBE_CONFIGS:
            return describe_configs_response(image, body, self.node_id)
        if api_key == DESCRIBE_TOPIC_PARTITIONS:
            return describe_topic_partitions_response(image, body, self.listener_name)
        return None  # not served here: Kafka closes the connection

    def _auto_create(self, image: MetadataImage, request: Any) -> frozenset[str]:
        """Kafka's auto.create.topics.enable: missing topics a Metadata request names (and
        lets it create: v4+ asks, older versions always may) are created with the
        controller's defaults, within the AutoTopicCreationManager's budget. Returns the
        names being created."""
        if self._auto_creation is None or not request.topics:
            return frozenset()
        if not getattr(request, "allow_auto_topic_creation", True):
            return frozenset()
        missing = dict.fromkeys(
            item.name
            for item in request.topics
            if item.name is not None
            and image.topics.get(item.name) is None
            and topic_name_error(item.name) is None
            and item.name not in RESERVED_TOPICS  # never a client's to create
        )
        return self._auto_creation.create(missing)

    async def close(self) -> None:
        """Stop auto-creations still waiting for the controller."""
        if self._auto_creation is not None:
            await self._auto_creation.close()

    async def _forward(self, request: object) -> object:
        try:
            return await self._channel.send(request, self._forward_timeout_s)
        except OSError as error:
            body: Any = request
            logger.warning(
                "[KafkaApis id=%d] No controller answered api %d: %r",
                self.node_id,
                body.__api_key__,
                error,
            )
            message = f"No controller answered within {self._forward_timeout_s}s"
            return forwarding.forwarded_error_response(
                request, ErrorCode.request_timed_out, message
            )


def _with_features(response: Any, image: MetadataImage) -> Any:
    """ApiVersions v3+ (KIP-584): the features this broker supports and the levels the
    metadata log finalized (``kafka-features describe`` reads them), as of ``image``."""
    module: Any = response_module(wire.API_VERSIONS_KEY, int(response.__version__))
    supported = tuple(
        make(
            module.SupportedFeatureKey,
            {"name": f.name, "min_version": f.min_version, "max_version": f.max_version},
        )
        for f in SUPPORTED_FEATURES
    )
    finalized = tuple(
        make(
            module.FinalizedFeatureKey,
            {"name": name, "max_version_level": level, "min_version_level": level},
        )
        for name, level in sorted(image.features.items())
        if level > 0
    )
    return dataclasses.replace(
        response,
        supported_features=supported,
        finalized_features_epoch=image.offset - 1,  # the last offset the image holds
        finalized_features=finalized,
    )
