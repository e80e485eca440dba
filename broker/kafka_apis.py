"""The broker's client-facing request handlers (Kafka's KafkaApis).

Produce, Fetch and ListOffsets go to the ReplicaManager (broker/data_plane.py) when there
is one, InitProducerId to the ProducerIdManager (broker/producer_ids.py), or, with a
transactional id, to the transaction APIs (broker/txn/apis.py). Reads (ApiVersions, Metadata,
DescribeCluster, DescribeConfigs, DescribeTopicPartitions) are answered from the latest
published MetadataImage, taken once per request so one answer never mixes two images.
Writes to cluster metadata (topics, partitions, configs, leader elections) are the controller's:
they are forwarded in an Envelope with the client's principal and address (broker/envelope.py)
through the controller channel, and the controller authorizes them, charges the client's
controller mutation quota and answers; its answer is passed back, NOT_CONTROLLER included
(clients retry it); only when no controller answers in time does the broker answer for it,
with REQUEST_TIMED_OUT.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker import data_plane, describe_producers, forwarding, txn_markers
from broker.auto_topic_creation import AUTO_CREATE_VERSION, AutoTopicCreationManager
from broker.cluster_metadata import describe_cluster_response, metadata_response, random_live_broker
from broker.controller_channel import ControllerSender
from broker.describe_configs import describe_configs_response
from broker.describe_topic_partitions import describe_topic_partitions_response
from broker.envelope import forward_in_envelope
from broker.fetch_session import CACHE_SLOTS_DEFAULT, FetchSessionCache
from broker.lifecycle import SUPPORTED_FEATURES
from broker.producer_ids import ProducerIdManager, init_producer_id
from broker.replica_manager import ReplicaManager
from broker.txn.apis import TxnApis
from metadata.controller.acls import describe_acls_response, security_disabled
from metadata.controller.client_quotas import describe_client_quotas
from metadata.controller.scram import describe_user_scram_credentials
from metadata.image import MetadataImage
from metadata.topic_names import RESERVED_TOPICS, topic_name_error
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import (
    ALTER_CONFIGS_AUTHORIZATION,
    API_VERSIONS_VERSIONS,
    BROKER,
    CLUSTER_ACTION,
    CLUSTER_ALTER,
    CLUSTER_ALTER_CONFIGS,
    CLUSTER_CREATE,
    CLUSTER_DESCRIBE,
    CLUSTER_DESCRIBE_CONFIGS,
    CLUSTER_IDEMPOTENT_WRITE,
    CREATE_TOPICS_AUTHORIZATION,
    NONE,
    TOPIC_ALTER,
    TOPIC_CREATE,
    TOPIC_DELETE,
    TOPIC_DESCRIBE,
    TOPIC_DESCRIBE_CONFIGS,
    TOPIC_READ,
    TOPIC_WRITE,
    TRANSACTIONAL_ID_WRITE,
    Api,
    ApiRequest,
)
from protocol.entities import make, response_module
from raft.voters import KRAFT_VERSION_DYNAMIC, KRAFT_VERSION_FEATURE, KRAFT_VERSION_STATIC

logger = logging.getLogger("broker.kafka_apis")

# What Kafka's KafkaApis authorizes per API, where the tuple does not fit on its entry's line.
METADATA_AUTHORIZATION = (TOPIC_DESCRIBE, CLUSTER_CREATE, TOPIC_CREATE)  # creates: auto-create
DESCRIBE_CONFIGS_AUTHORIZATION = (CLUSTER_DESCRIBE_CONFIGS, TOPIC_DESCRIBE_CONFIGS)
# A transactional id's WRITE; an idempotent producer's IDEMPOTENT_WRITE or WRITE on a topic.
INIT_PRODUCER_ID_AUTHORIZATION = (TRANSACTIONAL_ID_WRITE, CLUSTER_IDEMPOTENT_WRITE, TOPIC_WRITE)
FORWARD_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default
METADATA_BY_ID_VERSION = 12  # Metadata looks topics up by id from v12 (KIP-516)


def loop_time() -> float:
    """The running event loop's clock (virtual under the simulator): fetch session ages."""
    return asyncio.get_running_loop().time()


class KafkaApis:
    """Answers one broker listener's client APIs; ``apis`` are their entries in the node's
    API table (kraft/node.py composes them with the group APIs' and the data plane's)."""

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
        transactions: TxnApis | None = None,
        on_offsets_marker: txn_markers.OffsetsMarkerHook | None = None,
        auto_create_topics: bool = False,
        forward_timeout_ms: int = FORWARD_TIMEOUT_MS,
        descriptors_free: Callable[[], bool] = lambda: True,
        acls_enabled: bool = False,
        kraft_version: Callable[[], int] | None = None,
    ) -> None:
        self.node_id = node_id
        # kraft.version as this node's metadata log has it (KIP-853): a quorum feature,
        # kept in the log's control records, not in the image. None: no quorum to ask.
        self._kraft_version = kraft_version
        self.replicas = replicas
        # One cache per broker (its listeners share it); a lone KafkaApis makes its own.
        if fetch_sessions is None:
            fetch_sessions = FetchSessionCache(CACHE_SLOTS_DEFAULT, rng, loop_time)
        self.fetch_sessions = fetch_sessions
        self._auto_creation = (
            AutoTopicCreationManager(node_id, self._forward_auto_create, descriptors_free)
            if auto_create_topics
            else None
        )
        self.producer_ids = producer_ids
        self.transactions = transactions
        self._on_offsets_marker = on_offsets_marker  # the group coordinator's, when wired
        self.cluster_id = cluster_id
        self.listener_name = listener_name
        self._image = image
        self._channel = channel
        self._rng = rng
        self._forward_timeout_s = forward_timeout_ms / 1000
        self.acls_enabled = acls_enabled  # an authorizer is configured (docs/acls.md)

    def apis(self) -> list[Api]:
        """This listener's entries: the metadata-plane APIs always, Produce, Fetch,
        ListOffsets and OffsetForLeaderEpoch with a ReplicaManager, InitProducerId with a
        ProducerIdManager. Forwarded APIs keep the versions the controller serves."""
        forward = self._forward_api
        entries = [
            Api(ApiKey.API_VERSIONS, API_VERSIONS_VERSIONS, self._api_versions, BROKER, NONE),
            Api(ApiKey.METADATA, (0, 12), self._metadata, BROKER, METADATA_AUTHORIZATION),
            Api(ApiKey.CREATE_TOPICS, (2, 7), forward, BROKER, CREATE_TOPICS_AUTHORIZATION),
            Api(ApiKey.DELETE_TOPICS, (1, 6), forward, BROKER, (TOPIC_DELETE, TOPIC_DESCRIBE)),
            Api(
                ApiKey.DESCRIBE_CONFIGS,
                (1, 4),
                self._describe_configs,
                BROKER,
                DESCRIBE_CONFIGS_AUTHORIZATION,
            ),
            Api(ApiKey.ALTER_CONFIGS, (0, 2), forward, BROKER, ALTER_CONFIGS_AUTHORIZATION),
            Api(ApiKey.CREATE_PARTITIONS, (0, 3), forward, BROKER, (TOPIC_ALTER,)),
            Api(ApiKey.ELECT_LEADERS, (0, 2), forward, BROKER, (CLUSTER_ALTER,)),
            Api(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                (0, 1),
                forward,
                BROKER,
                ALTER_CONFIGS_AUTHORIZATION,
            ),
            Api(ApiKey.ALTER_PARTITION_REASSIGNMENTS, (0, 1), forward, BROKER, (CLUSTER_ALTER,)),
            Api(ApiKey.LIST_PARTITION_REASSIGNMENTS, (0, 0), forward, BROKER, (CLUSTER_DESCRIBE,)),
            Api(ApiKey.UPDATE_FEATURES, (0, 1), forward, BROKER, (CLUSTER_ALTER,)),
            Api(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, (0, 0), forward, BROKER, (CLUSTER_ALTER,)),
            Api(
                ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                (0, 0),
                self._describe_user_scram_credentials,
                BROKER,
                (CLUSTER_DESCRIBE,),
            ),
            Api(ApiKey.ALTER_CLIENT_QUOTAS, (0, 1), forward, BROKER, (CLUSTER_ALTER_CONFIGS,)),
            Api(
                ApiKey.DESCRIBE_CLIENT_QUOTAS,
                (0, 1),
                self._describe_client_quotas,
                BROKER,
                (CLUSTER_DESCRIBE_CONFIGS,),
            ),
            Api(
                ApiKey.DESCRIBE_CLUSTER, (0, 1), self._describe_cluster, BROKER, (CLUSTER_DESCRIBE,)
            ),
            Api(ApiKey.DESCRIBE_ACLS, (1, 3), self._describe_acls, BROKER, (CLUSTER_DESCRIBE,)),
            Api(ApiKey.CREATE_ACLS, (1, 3), self._acl_write, BROKER, (CLUSTER_ALTER,)),
            Api(ApiKey.DELETE_ACLS, (1, 3), self._acl_write, BROKER, (CLUSTER_ALTER,)),
            Api(
                ApiKey.DESCRIBE_TOPIC_PARTITIONS,
                (0, 0),
                self._describe_topic_partitions,
                BROKER,
                (TOPIC_DESCRIBE,),
            ),
        ]
        if self.replicas is not None:
            entries += [
                # Produce v3+ carries only v2 record batches, the one format the log stores;
                # v12 is transaction version 2's (the leader adds the partition itself).
                Api(
                    ApiKey.PRODUCE,
                    (3, 12),
                    self._produce,
                    BROKER,
                    (TOPIC_WRITE, TRANSACTIONAL_ID_WRITE),
                ),
                Api(ApiKey.FETCH, (4, 13), self._fetch, BROKER, (CLUSTER_ACTION, TOPIC_READ)),
                Api(ApiKey.LIST_OFFSETS, (1, 7), self._list_offsets, BROKER, (TOPIC_DESCRIBE,)),
                Api(
                    ApiKey.OFFSET_FOR_LEADER_EPOCH,
                    (2, 4),
                    self._offset_for_leader_epoch,
                    BROKER,
                    (CLUSTER_ACTION, TOPIC_DESCRIBE),
                ),
                # The transaction coordinator's (and kafka-transactions abort's) markers; kio
                # has no version 0, which Kafka 4 removed too.
                Api(
                    ApiKey.WRITE_TXN_MARKERS,
                    (1, 2),
                    self._write_txn_markers,
                    BROKER,
                    (CLUSTER_ACTION,),
                ),
                Api(
                    ApiKey.DESCRIBE_PRODUCERS,
                    (0, 0),
                    self._describe_producers,
                    BROKER,
                    (TOPIC_READ,),
                ),
            ]
        if self.producer_ids is not None:
            entries.append(
                Api(
                    ApiKey.INIT_PRODUCER_ID,
                    (0, 4),
                    self._init_producer_id,
                    BROKER,
                    INIT_PRODUCER_ID_AUTHORIZATION,
                ),
            )
        return entries

    def _topic_name(self, topic_id: uuid.UUID) -> str | None:
        topic = self._image().topics.by_id.get(topic_id)
        return None if topic is None else topic.name

    # ---- handlers ----------------------------------------------------------------------
    async def _forward_api(self, request: ApiRequest) -> object:
        """A client's admin request, forwarded to the active controller in an Envelope
        (broker/envelope.py): the controller authorizes it and charges the client's
        ``controller_mutation_rate`` as the client, and its answer (throttle time included)
        is passed back."""
        try:
            return await forward_in_envelope(self._channel, request, self._forward_timeout_s)
        except OSError as error:
            return self._unanswered(request.body, error)

    def _replicas(self) -> ReplicaManager:
        assert self.replicas is not None  # the data-plane entries exist only with one
        return self.replicas

    async def _produce(self, request: ApiRequest) -> object:
        return await data_plane.produce(self._replicas(), request.body, request.api_version)

    async def _fetch(self, request: ApiRequest) -> object:
        return await data_plane.fetch(
            self._replicas(),
            self.fetch_sessions,
            self._topic_name,
            request.body,
            request.api_version,
        )

    async def _list_offsets(self, request: ApiRequest) -> object:
        return await data_plane.list_offsets(self._replicas(), request.body, request.api_version)

    async def _offset_for_leader_epoch(self, request: ApiRequest) -> object:
        return await data_plane.offset_for_leader_epoch(
            self._replicas(), request.body, request.api_version
        )

    async def _write_txn_markers(self, request: ApiRequest) -> object:
        return await txn_markers.write_txn_markers(
            self._replicas(),
            request.body,
            request.api_version,
            on_offsets_marker=self._on_offsets_marker,
        )

    async def _describe_producers(self, request: ApiRequest) -> object:
        return await describe_producers.describe_producers(
            self._replicas(), request.body, request.api_version
        )

    async def _init_producer_id(self, request: ApiRequest) -> object:
        """An idempotent producer's id from the ProducerIdManager; with a transactional id,
        the transaction coordinator's (broker/txn/apis.py)."""
        if self.transactions is not None and request.body.transactional_id is not None:
            return await self.transactions.init_producer_id(request)
        assert self.producer_ids is not None
        return await init_producer_id(self.producer_ids, request.body, request.api_version)

    async def _api_versions(self, request: ApiRequest) -> object:
        response = request.apis.api_versions_response(request.api_version)
        if request.api_version < 3:
            return response
        kraft = None if self._kraft_version is None else self._kraft_version()
        return with_features(response, self._image(), kraft)

    async def _metadata(self, request: ApiRequest) -> object | None:
        body: Any = request.body
        if request.api_version < METADATA_BY_ID_VERSION and any(
            item.name is None for item in body.topics or ()
        ):
            # v10-11 may carry a null name but not look a topic up by id, and their
            # answer cannot carry a null name: Kafka refuses the request
            # (InvalidRequestException), the connection closes.
            return None
        image = self._image()
        controller_id = random_live_broker(image, self.listener_name, self._rng)
        created = self._auto_create(image, request)
        return await metadata_response(
            image, body, self.listener_name, self.cluster_id, controller_id, created
        )

    async def _describe_cluster(self, request: ApiRequest) -> object:
        image = self._image()
        controller_id = random_live_broker(image, self.listener_name, self._rng)
        return describe_cluster_response(
            image, request.body, self.listener_name, self.cluster_id, controller_id
        )

    async def _describe_configs(self, request: ApiRequest) -> object:
        return await describe_configs_response(self._image(), request.body, self.node_id)

    async def _describe_acls(self, request: ApiRequest) -> object:
        """DescribeAcls from this broker's image (Kafka's brokers answer it from their
        authorizer's copy of the ACLs); SECURITY_DISABLED without an authorizer."""
        if not self.acls_enabled:
            return security_disabled(ApiKey.DESCRIBE_ACLS, request.api_version, request.body)
        return describe_acls_response(self._image().acls, request.body, request.api_version)

    async def _acl_write(self, request: ApiRequest) -> object:
        """CreateAcls and DeleteAcls: the controller's (forwarded); SECURITY_DISABLED
        without an authorizer."""
        if not self.acls_enabled:
            return security_disabled(request.header.api_key, request.api_version, request.body)
        return await self._forward_api(request)

    async def _describe_user_scram_credentials(self, request: ApiRequest) -> object:
        return await describe_user_scram_credentials(
            self._image(), request.body, request.api_version
        )

    async def _describe_client_quotas(self, request: ApiRequest) -> object:
        return await describe_client_quotas(self._image(), request.body, request.api_version)

    async def _describe_topic_partitions(self, request: ApiRequest) -> object:
        return describe_topic_partitions_response(self._image(), request.body, self.listener_name)

    def _auto_create(self, image: MetadataImage, metadata: ApiRequest) -> frozenset[str]:
        """Kafka's auto.create.topics.enable: missing topics a Metadata request names (and
        lets it create: v4+ asks, older versions always may) are created with the
        controller's defaults, within the AutoTopicCreationManager's budget, as the client's
        request. Returns the names being created."""
        request: Any = metadata.body
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
        return self._auto_creation.create(missing, metadata)

    async def close(self) -> None:
        """Stop auto-creations still waiting for the controller."""
        if self._auto_creation is not None:
            await self._auto_creation.close()

    async def _forward_auto_create(self, body: object, metadata: ApiRequest) -> object:
        """Auto-creation's CreateTopics, forwarded in an Envelope as the client whose
        Metadata asked for it, with its client id and correlation id, as Kafka's
        AutoTopicCreationManager does: the controller authorizes and charges the client."""
        header = wire.RequestHeader(
            ApiKey.CREATE_TOPICS,
            AUTO_CREATE_VERSION,
            metadata.header.correlation_id,
            metadata.header.client_id,
        )
        return await self._forward_api(dataclasses.replace(metadata, header=header, body=body))

    def _unanswered(self, request: object, error: OSError) -> object:
        """The broker's answer for the controller when none answered in time."""
        body: Any = request
        logger.warning(
            "[KafkaApis id=%d] No controller answered api %d: %r",
            self.node_id,
            body.__api_key__,
            error,
        )
        message = f"No controller answered within {self._forward_timeout_s}s"
        return forwarding.forwarded_error_response(request, ErrorCode.request_timed_out, message)


def with_features(response: Any, image: MetadataImage, kraft_version: int | None) -> Any:
    """ApiVersions v3+ (KIP-584): the features this broker supports and the levels the
    metadata log finalized (``kafka-features describe`` reads them), as of ``image``; with
    a quorum, kraft.version too (0-1 supported, its level from the log's control records,
    as Kafka's broker reports it beside the image's features)."""
    module: Any = response_module(ApiKey.API_VERSIONS, int(response.__version__))
    ranges = [(f.name, f.min_version, f.max_version) for f in SUPPORTED_FEATURES]
    levels = dict(image.features)
    if kraft_version is not None:
        ranges.append((KRAFT_VERSION_FEATURE, KRAFT_VERSION_STATIC, KRAFT_VERSION_DYNAMIC))
        levels[KRAFT_VERSION_FEATURE] = kraft_version
    supported = tuple(
        make(
            module.SupportedFeatureKey,
            {"name": name, "min_version": low, "max_version": high},
        )
        for name, low, high in ranges
    )
    finalized = tuple(
        make(
            module.FinalizedFeatureKey,
            {"name": name, "max_version_level": level, "min_version_level": level},
        )
        for name, level in sorted(levels.items())
        if level > 0
    )
    return dataclasses.replace(
        response,
        supported_features=supported,
        finalized_features_epoch=image.offset - 1,  # the last offset the image holds
        finalized_features=finalized,
    )
