"""A hand-built cluster image and a fake controller for the broker's request handlers."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from broker.forwarding import FORWARDED_APIS
from broker.group.apis import GroupApis
from broker.kafka_apis import KafkaApis
from broker.txn.apis import TxnApis
from metadata.image import (
    BrokerRegistration,
    ClusterImage,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    TopicsImage,
)
from metadata.records import BROKER_RESOURCE, NO_LEADER, TOPIC_RESOURCE, Listener
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import BROKER, ApiRequest, ServedApis
from protocol.entities import make, response_module
from protocol.envelope import Forwarded, envelope_response, open_envelope, response_data_parts

LISTENER = "PLAINTEXT"
ORDERS_ID = uuid.UUID(int=0x0A)
AUDIT_ID = uuid.UUID(int=0x0B)


def broker(broker_id: int, port: int, *, fenced: bool = False, listener: str = LISTENER) -> Any:
    return BrokerRegistration(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=broker_id),
        epoch=broker_id * 10,
        listeners=(Listener(listener, "127.0.0.1", port),),
        features=(),
        rack=f"rack-{broker_id % 2}",
        fenced=fenced,
        in_controlled_shutdown=False,
    )


def cluster_image(port: int = 9092) -> MetadataImage:
    """Brokers 1 and 2 live on PLAINTEXT (both at ``port``), 3 fenced, 4 live on another
    listener only. "orders" has a healthy partition and a leaderless one; "audit" has a
    retention.ms override; broker 1 and the cluster have dynamic broker configs."""
    brokers = {
        1: broker(1, port),
        2: broker(2, port),
        3: broker(3, port + 1, fenced=True),
        4: broker(4, port + 2, listener="INTERNAL"),
    }
    orders = TopicImage(
        "orders",
        ORDERS_ID,
        {
            0: PartitionRegistration((1, 2), (1, 2), leader=1, leader_epoch=4, partition_epoch=6),
            1: PartitionRegistration(
                (3, 2), (3,), leader=NO_LEADER, leader_epoch=2, partition_epoch=3
            ),
        },
    )
    audit = TopicImage(
        "audit",
        AUDIT_ID,
        {0: PartitionRegistration((4, 1), (4, 1), leader=4, leader_epoch=0, partition_epoch=0)},
    )
    return MetadataImage(
        offset=100,
        epoch=2,
        cluster=ClusterImage(brokers),
        topics=TopicsImage(
            by_id={ORDERS_ID: orders, AUDIT_ID: audit},
            by_name={"orders": ORDERS_ID, "audit": AUDIT_ID},
        ),
        configs={
            (TOPIC_RESOURCE, "audit"): {"retention.ms": "1000"},
            (BROKER_RESOURCE, "1"): {"log.retention.ms": "5000"},
            (BROKER_RESOURCE, ""): {"log.retention.ms": "7000", "log.segment.bytes": "2000000"},
        },
    )


class FakeController:
    """Answers forwarded CreateTopics and DeleteTopics by editing ``image`` (one partition,
    replicas on broker 1); anything else is answered from ``canned`` or raises ``failure``."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.requests: list[Any] = []
        self.envelopes: list[Forwarded] = []  # the client requests forwarded in envelopes
        self.canned: object | None = None
        self.failure: Exception | None = None

    async def send(self, request: Any, timeout_s: float) -> object:
        if int(request.__api_key__) == ApiKey.ENVELOPE:
            # A client's request as a broker forwards it: answered inside the envelope, as
            # the controller's listener does (broker/envelope.py); recorded as the request.
            forwarded = open_envelope(request, FORWARDED_APIS, None)
            self.envelopes.append(forwarded)
            inner = await self.send(forwarded.body, timeout_s)
            data = b"".join(response_data_parts(forwarded.header, inner, 10_000))
            return envelope_response(data)
        self.requests.append(request)
        if self.failure is not None:
            raise self.failure
        key, version = int(request.__api_key__), int(request.__version__)
        if key == ApiKey.CREATE_TOPICS:
            return self._create(request, version)
        if key == ApiKey.DELETE_TOPICS:
            return self._delete(request, version)
        assert self.canned is not None
        return self.canned

    def _create(self, request: Any, version: int) -> object:
        module: Any = response_module(ApiKey.CREATE_TOPICS, version)
        results = []
        for topic in request.topics:
            if self.image.topics.get(topic.name) is not None:
                code, topic_id = ErrorCode.topic_already_exists, uuid.UUID(int=0)
            else:
                code, topic_id = ErrorCode.none, uuid.UUID(int=len(self.image.topics.by_id) + 100)
                self._add(topic.name, topic_id, max(topic.num_partitions, 1))
            values = {"name": topic.name, "topic_id": topic_id, "error_code": code}
            results.append(make(module.CreatableTopicResult, values))
        return make(module.CreateTopicsResponse, {"topics": tuple(results)})

    def _add(self, name: str, topic_id: uuid.UUID, partitions: int) -> None:
        topics = self.image.topics
        registration = PartitionRegistration(
            (1,), (1,), leader=1, leader_epoch=0, partition_epoch=0
        )
        topic = TopicImage(name, topic_id, dict.fromkeys(range(partitions), registration))
        self.image = dataclasses.replace(
            self.image,
            topics=TopicsImage(
                by_id={**topics.by_id, topic_id: topic}, by_name={**topics.by_name, name: topic_id}
            ),
        )

    def _delete(self, request: Any, version: int) -> object:
        module: Any = response_module(ApiKey.DELETE_TOPICS, version)
        names = (
            [t.name for t in request.topics] if hasattr(request, "topics") else request.topic_names
        )
        results = []
        for name in names:
            topic_id = self.image.topics.by_name.get(name)
            code = ErrorCode.unknown_topic_or_partition if topic_id is None else ErrorCode.none
            if topic_id is not None:
                by_id = dict(self.image.topics.by_id)
                by_name = dict(self.image.topics.by_name)
                del by_id[topic_id], by_name[name]
                self.image = dataclasses.replace(self.image, topics=TopicsImage(by_id, by_name))
            results.append(make(module.DeletableTopicResult, {"name": name, "error_code": code}))
        return make(module.DeleteTopicsResponse, {"responses": tuple(results)})


def served(apis: KafkaApis) -> ServedApis:
    """A lone KafkaApis' table on a broker listener (no group APIs), as a connection reads it."""
    return ServedApis(BROKER, apis.apis())


async def ask_group(
    apis: GroupApis, api_key: int, version: int, request: object, listener: str, client_id: str
) -> Any:
    """A group request answered through a broker listener's table, as a connection does."""
    header = wire.RequestHeader(api_key, version, 1, client_id)
    return await ServedApis(BROKER, apis.apis(listener)).handle(header, request)


async def ask_txn(apis: TxnApis, api_key: int, version: int, request: object) -> Any:
    """A transaction request answered as a broker listener does: InitProducerId (KafkaApis'
    entry) handed to the transaction APIs, the others through their table entries."""
    header = wire.RequestHeader(api_key, version, 1, "c")
    if api_key == ApiKey.INIT_PRODUCER_ID:
        return await apis.init_producer_id(ApiRequest(header, request, ServedApis(BROKER, ())))
    return await ServedApis(BROKER, apis.apis()).handle(header, request)
