"""broker/kafka_apis.py with a hand-built image and a fake controller.

Every answer goes through the wire codec (encode, then decode as a client would), so a
response a version cannot carry fails here rather than in a client.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker import forwarding
from broker.auto_topic_creation import (
    AUTO_CREATE_BURST_TOPICS,
    AUTO_CREATE_TOPICS_PER_S,
    AUTO_CREATE_VERSION,
)
from broker.fetch_session import FetchSessionCache
from broker.kafka_apis import KafkaApis
from metadata.config_defs import TOPIC_CONFIGS, ConfigSource, ConfigType
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from sim.loop import SimLoop
from tests.broker.fakes import (
    AUDIT_ID,
    LISTENER,
    ORDERS_ID,
    FakeController,
    cluster_image,
    served,
)

METADATA, DESCRIBE_CLUSTER, DESCRIBE_CONFIGS = 3, 60, 32


def apis(
    controller: FakeController | None = None,
    seed: int = 0,
    *,
    auto_create: bool = False,
    kraft_version: Callable[[], int] | None = None,
) -> KafkaApis:
    controller = controller or FakeController(cluster_image())
    return KafkaApis(
        1,
        "cluster-a",
        LISTENER,
        lambda: controller.image,
        controller,
        random.Random(seed),
        auto_create_topics=auto_create,
        acls_enabled=True,
        kraft_version=kraft_version,
    )


def ask(handler: KafkaApis, api_key: int, version: int, values: dict[str, object]) -> Any:
    """Build a request of (api, version) from ``values``, answer it, and return the answer
    as a client decodes it."""
    module: Any = request_module(api_key, version)
    request_class = next(getattr(module, name) for name in dir(module) if name.endswith("Request"))
    request = make(request_class, values)
    header = wire.RequestHeader(api_key, version, 5, "client")
    response = asyncio.run(served(handler).handle(header, request))
    assert response is not None
    _cid, decoded = wire.decode_response(
        api_key, version, wire.encode_response(header, response)[4:]
    )
    return decoded


def metadata_topic(version: int, name: str | None, topic_id: uuid.UUID | None = None) -> Any:
    module: Any = request_module(METADATA, version)
    return make(module.MetadataRequestTopic, {"name": name, "topic_id": topic_id})


# ---- ApiVersions --------------------------------------------------------------------------


def test_api_versions_lists_every_served_api() -> None:
    response = ask(
        apis(),
        ApiKey.API_VERSIONS,
        3,
        {"client_software_name": "x", "client_software_version": "1"},
    )
    listed = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert listed == served(apis()).versions
    assert response.error_code == ErrorCode.none


def test_api_versions_v3_lists_supported_and_finalized_features() -> None:
    """KIP-584 fields, which kafka-features describe reads (level 0 is not finalized)."""
    image = dataclasses.replace(
        cluster_image(),
        features={
            "metadata.version": 1,
            "eligible.leader.replicas.version": 1,
            "transaction.version": 2,
        },
    )
    values = {"client_software_name": "x", "client_software_version": "1"}
    response = ask(apis(FakeController(image)), ApiKey.API_VERSIONS, 3, values)
    assert {(f.name, f.min_version, f.max_version) for f in response.supported_features} == {
        ("metadata.version", 1, 1),
        ("eligible.leader.replicas.version", 0, 1),
        ("transaction.version", 0, 2),  # KIP-890 part 2: TV1 and TV2 clients
    }
    assert [(f.name, f.max_version_level) for f in response.finalized_features] == [
        ("eligible.leader.replicas.version", 1),
        ("metadata.version", 1),
        ("transaction.version", 2),  # what a Java 4.x producer reads to use TV2
    ]
    assert response.finalized_features_epoch == image.offset - 1
    off = dataclasses.replace(image, features={"eligible.leader.replicas.version": 0})
    response = ask(apis(FakeController(off)), ApiKey.API_VERSIONS, 3, values)
    assert response.finalized_features == ()


@pytest.mark.parametrize("level", [0, 1])
def test_api_versions_reports_kraft_version_from_the_quorum(level: int) -> None:
    """kraft.version is the quorum's (its log's control records), not the image's: a broker
    with a quorum lists it as supported 0-1 and finalized once upgraded (KIP-853)."""
    image = dataclasses.replace(cluster_image(), features={"metadata.version": 1})
    broker = apis(FakeController(image), kraft_version=lambda: level)
    values = {"client_software_name": "x", "client_software_version": "1"}
    response = ask(broker, ApiKey.API_VERSIONS, 3, values)
    supported = {(f.name, f.min_version, f.max_version) for f in response.supported_features}
    assert ("kraft.version", 0, 1) in supported
    finalized = [(f.name, f.max_version_level) for f in response.finalized_features]
    assert finalized == [("kraft.version", 1), ("metadata.version", 1)][1 - level :]


# ---- Metadata -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(13))
def test_metadata_lists_every_topic_when_asked_for_all(version: int) -> None:
    everything: object = () if version == 0 else None  # v0 has no null list
    response = ask(apis(), METADATA, version, {"topics": everything})
    assert [t.name for t in response.topics] == ["audit", "orders"]
    assert [(b.node_id, b.port) for b in response.brokers] == [(1, 9092), (2, 9092)]
    if version >= 1:
        assert response.controller_id in (1, 2)
    if version >= 2:
        assert response.cluster_id == "cluster-a"
    if version >= 10:
        assert [t.topic_id for t in response.topics] == [AUDIT_ID, ORDERS_ID]


@pytest.mark.parametrize("version", range(1, 13))
def test_metadata_with_an_empty_topic_list_lists_no_topics(version: int) -> None:
    response = ask(apis(), METADATA, version, {"topics": ()})
    assert response.topics == ()
    assert len(response.brokers) == 2


@pytest.mark.parametrize("version", [0, 5, 7, 12])
def test_metadata_partitions_carry_leaders_replicas_and_offline_replicas(version: int) -> None:
    response = ask(apis(), METADATA, version, {"topics": (metadata_topic(version, "orders"),)})
    (topic,) = response.topics
    assert topic.error_code == ErrorCode.none
    healthy, leaderless = topic.partitions
    assert (healthy.error_code, healthy.partition_index, healthy.leader_id) == (
        ErrorCode.none,
        0,
        1,
    )
    assert (healthy.replica_nodes, healthy.isr_nodes) == ((1, 2), (1, 2))
    assert leaderless.error_code == ErrorCode.leader_not_available
    assert leaderless.leader_id == -1
    assert (leaderless.replica_nodes, leaderless.isr_nodes) == ((3, 2), (3,))
    if version >= 5:
        assert healthy.offline_replicas == ()
        assert leaderless.offline_replicas == (3,)  # broker 3 is fenced
    if version >= 7:
        assert (healthy.leader_epoch, leaderless.leader_epoch) == (4, 2)


def test_metadata_reports_a_leader_without_this_listener_as_listener_not_found() -> None:
    response = ask(apis(), METADATA, 12, {"topics": (metadata_topic(12, "audit"),)})
    (partition,) = response.topics[0].partitions
    assert partition.error_code == ErrorCode.listener_not_found
    assert partition.leader_id == -1
    assert partition.offline_replicas == (4,)


def test_metadata_errors_for_unknown_and_illegal_topic_names_without_creating_them() -> None:
    controller = FakeController(cluster_image())
    names = ["missing", "bad name!", "orders"]
    response = ask(
        apis(controller),
        METADATA,
        9,
        {"topics": tuple(metadata_topic(9, n) for n in names), "allow_auto_topic_creation": True},
    )
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("missing", ErrorCode.unknown_topic_or_partition),
        ("bad name!", ErrorCode.invalid_topic_exception),
        ("orders", ErrorCode.none),
    ]
    assert controller.requests == []


def test_auto_create_forwards_missing_valid_names_and_answers_leader_not_available() -> None:
    """auto.create.topics.enable: Kafka's answer, LEADER_NOT_AVAILABLE, while the controller
    creates the topic with its defaults (-1); the client's next Metadata finds it."""
    controller = FakeController(cluster_image())
    handler = KafkaApis(
        1,
        "cluster-a",
        LISTENER,
        lambda: controller.image,
        controller,
        random.Random(0),
        auto_create_topics=True,
    )
    names = ["fresh", "bad name!", "orders"]

    async def twice(allow: bool) -> tuple[Any, Any]:
        module: Any = request_module(METADATA, 9)
        request = make(
            module.MetadataRequest,
            {
                "topics": tuple(metadata_topic(9, n) for n in names),
                "allow_auto_topic_creation": allow,
            },
        )
        header = wire.RequestHeader(METADATA, 9, 5, "client")
        first = await served(handler).handle(header, request)
        assert handler._auto_creation is not None
        await handler._auto_creation.wait_idle()  # the forwarded creation completes
        return first, await served(handler).handle(header, request)

    refused, _ = asyncio.run(twice(allow=False))
    assert refused.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert controller.requests == []
    first, second = asyncio.run(twice(allow=True))
    assert [(t.name, t.error_code) for t in first.topics] == [
        ("fresh", ErrorCode.leader_not_available),
        ("bad name!", ErrorCode.invalid_topic_exception),
        ("orders", ErrorCode.none),
    ]
    (create,) = controller.requests
    assert [(t.name, t.num_partitions, t.replication_factor) for t in create.topics] == [
        ("fresh", -1, -1)
    ]
    # In an Envelope as the client, with its client id and correlation id (Kafka's
    # AutoTopicCreationManager): the controller authorizes and charges the client.
    (envelope,) = controller.envelopes
    assert (envelope.header.client_id, envelope.header.correlation_id) == ("client", 5)
    assert envelope.header.api_version == AUTO_CREATE_VERSION == 7
    assert envelope.principal == "User:ANONYMOUS"
    assert [t.error_code for t in second.topics[:1]] == [ErrorCode.none]


def test_auto_create_never_creates_reserved_topics() -> None:
    controller = FakeController(cluster_image())
    handler = apis(controller, auto_create=True)
    names = ("__cluster_metadata", "__consumer_offsets", "__transaction_state")
    response = ask(
        handler,
        METADATA,
        9,
        {"topics": tuple(metadata_topic(9, n) for n in names), "allow_auto_topic_creation": True},
    )
    assert {t.error_code for t in response.topics} == {ErrorCode.unknown_topic_or_partition}
    assert handler._auto_creation is not None and not handler._auto_creation._background
    assert controller.requests == []


def test_metadata_v12_looks_topics_up_by_id() -> None:
    unknown = uuid.UUID(int=0xDEAD)
    topics = (metadata_topic(12, None, ORDERS_ID), metadata_topic(12, None, unknown))
    response = ask(apis(), METADATA, 12, {"topics": topics})
    found, missing = response.topics
    assert (found.name, found.topic_id, found.error_code) == ("orders", ORDERS_ID, ErrorCode.none)
    assert (missing.name, missing.topic_id, missing.error_code) == (
        None,
        unknown,
        ErrorCode.unknown_topic_id,
    )


@settings(max_examples=40, deadline=None)
@given(
    version=st.integers(min_value=1, max_value=12),
    names=st.lists(st.text(alphabet="ab.-_ !", min_size=0, max_size=6), max_size=5),
)
def test_metadata_answers_every_requested_name_in_order(version: int, names: list[str]) -> None:
    response = ask(
        apis(), METADATA, version, {"topics": tuple(metadata_topic(version, n) for n in names)}
    )
    assert [t.name for t in response.topics] == names
    for topic in response.topics:
        assert topic.error_code in (
            ErrorCode.unknown_topic_or_partition,
            ErrorCode.invalid_topic_exception,
        )
        assert topic.partitions == ()


def test_controller_id_is_a_random_reachable_broker() -> None:
    seen = {ask(apis(seed=seed), METADATA, 12, {"topics": ()}).controller_id for seed in range(20)}
    assert seen == {1, 2}


# ---- DescribeCluster ----------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_lists_live_brokers(version: int) -> None:
    response = ask(
        apis(), DESCRIBE_CLUSTER, version, {"include_cluster_authorized_operations": False}
    )
    assert response.error_code == ErrorCode.none
    assert response.cluster_id == "cluster-a"
    assert [(b.broker_id, b.host, b.port, b.rack) for b in response.brokers] == [
        (1, "127.0.0.1", 9092, "rack-1"),
        (2, "127.0.0.1", 9092, "rack-0"),
    ]
    assert response.controller_id in (1, 2)


def test_describe_cluster_refuses_controller_endpoints() -> None:
    values = {"include_cluster_authorized_operations": False, "endpoint_type": 2}
    response = ask(apis(), DESCRIBE_CLUSTER, 1, values)
    assert response.error_code == ErrorCode.unsupported_endpoint_type
    assert response.brokers == ()


# ---- DescribeConfigs ----------------------------------------------------------------------


def describe(
    version: int, *resources: tuple[int, str, tuple[str, ...] | None], **flags: bool
) -> Any:
    module: Any = request_module(DESCRIBE_CONFIGS, version)
    items = tuple(
        make(
            module.DescribeConfigsResource,
            {"resource_type": t, "resource_name": n, "configuration_keys": k},
        )
        for t, n, k in resources
    )
    return ask(apis(), DESCRIBE_CONFIGS, version, {"resources": items, **flags})


def by_name(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.configs}


@pytest.mark.parametrize("version", [1, 2, 3, 4])
def test_describe_topic_configs_reports_overrides_and_defaults(version: int) -> None:
    response = describe(version, (TOPIC_RESOURCE, "audit", None))
    (result,) = response.results
    assert result.error_code == ErrorCode.none
    configs = by_name(result)
    assert set(configs) == set(TOPIC_CONFIGS)
    assert (configs["retention.ms"].value, configs["retention.ms"].config_source) == (
        "1000",
        ConfigSource.TOPIC_CONFIG,
    )
    cleanup = configs["cleanup.policy"]
    assert (cleanup.value, cleanup.config_source) == ("delete", ConfigSource.DEFAULT_CONFIG)
    assert not cleanup.read_only
    segment = configs["segment.bytes"]  # from the cluster-wide log.segment.bytes
    assert (segment.value, segment.config_source) == (
        "2000000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    if version >= 3:
        assert cleanup.config_type == ConfigType.LIST
        assert cleanup.documentation is None


def test_describe_configs_filters_keys_and_adds_synonyms_and_documentation() -> None:
    response = describe(
        4,
        (TOPIC_RESOURCE, "audit", ("retention.ms",)),
        include_synonyms=True,
        include_documentation=True,
    )
    (entry,) = response.results[0].configs
    assert entry.name == "retention.ms"
    assert entry.documentation == TOPIC_CONFIGS["retention.ms"].doc
    synonyms = [(s.name, s.value, s.source) for s in entry.synonyms]
    assert synonyms[0] == ("retention.ms", "1000", ConfigSource.TOPIC_CONFIG)
    assert ("log.retention.ms", "7000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) in synonyms
    assert synonyms[-1][2] == ConfigSource.DEFAULT_CONFIG


def test_describe_configs_errors_per_resource() -> None:
    response = describe(
        4,
        (TOPIC_RESOURCE, "missing", None),
        (TOPIC_RESOURCE, "bad/name", None),
        (BROKER_RESOURCE, "2", None),
        (8, "1", None),
        (TOPIC_RESOURCE, "orders", ("retention.ms",)),
    )
    codes = [(r.resource_name, r.error_code) for r in response.results]
    assert codes == [
        ("missing", ErrorCode.unknown_topic_or_partition),
        ("bad/name", ErrorCode.invalid_topic_exception),
        ("2", ErrorCode.invalid_request),
        ("1", ErrorCode.invalid_request),
        ("orders", ErrorCode.none),
    ]
    assert response.results[0].error_message == "This server does not host this topic-partition."
    assert (
        response.results[2].error_message
        == "Unexpected broker id, expected 1 or empty string, but received 2"
    )


def test_describe_broker_configs_resolve_own_then_cluster_then_default() -> None:
    response = describe(4, (BROKER_RESOURCE, "1", None), (BROKER_RESOURCE, "", None))
    own, cluster = (by_name(r) for r in response.results)
    assert (own["log.retention.ms"].value, own["log.retention.ms"].config_source) == (
        "5000",
        ConfigSource.DYNAMIC_BROKER_CONFIG,
    )
    assert (own["log.segment.bytes"].value, own["log.segment.bytes"].config_source) == (
        "2000000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert own["compression.type"].config_source == ConfigSource.DEFAULT_CONFIG
    assert {name: c.value for name, c in cluster.items()} == {
        "log.retention.ms": "7000",
        "log.segment.bytes": "2000000",
    }


# ---- forwarding ---------------------------------------------------------------------------


def test_create_topics_is_forwarded_and_the_controllers_answer_passed_back() -> None:
    controller = FakeController(cluster_image())
    module: Any = request_module(ApiKey.CREATE_TOPICS, 7)
    topics = tuple(
        make(module.CreatableTopic, {"name": n, "num_partitions": 3, "replication_factor": 1})
        for n in ("new", "orders")
    )
    response = ask(apis(controller), ApiKey.CREATE_TOPICS, 7, {"topics": topics})
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("new", ErrorCode.none),
        ("orders", ErrorCode.topic_already_exists),
    ]
    assert controller.requests[0].topics == topics  # the same entity, unchanged
    assert len(controller.image.topics.get("new").partitions) == 3


def forwarded_request(api_key: int, version: int) -> dict[str, object]:
    """Values for a request of every forwarded API naming topic "t" (or its partition 0)."""
    module: Any = request_module(api_key, version)
    if api_key == ApiKey.CREATE_TOPICS:
        return {
            "topics": (
                make(
                    module.CreatableTopic,
                    {"name": "t", "num_partitions": 1, "replication_factor": 1},
                ),
            )
        }
    if api_key == ApiKey.DELETE_TOPICS:
        if version >= 6:
            return {
                "topics": (
                    make(module.DeleteTopicState, {"name": "t", "topic_id": uuid.UUID(int=0)}),
                )
            }
        return {"topic_names": ("t",)}
    if api_key == ApiKey.CREATE_PARTITIONS:
        return {
            "topics": (
                make(module.CreatePartitionsTopic, {"name": "t", "count": 2, "assignments": None}),
            )
        }
    if api_key == ApiKey.ELECT_LEADERS:
        return {
            "topic_partitions": (make(module.TopicPartitions, {"topic": "t", "partitions": (0,)}),)
        }
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        target = make(module.ReassignablePartition, {"partition_index": 0, "replicas": (1,)})
        return {"topics": (make(module.ReassignableTopic, {"name": "t", "partitions": (target,)}),)}
    if api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
        named = {"name": "t", "partition_indexes": (0,)}
        return {"topics": (make(module.ListPartitionReassignmentsTopics, named),)}
    if api_key == ApiKey.UPDATE_FEATURES:
        feature = {"feature": "eligible.leader.replicas.version", "max_version_level": 1}
        return {"feature_updates": (make(module.FeatureUpdateKey, feature),)}
    if api_key == ApiKey.CREATE_ACLS:
        creation = {
            "resource_type": 2,
            "resource_name": "t",
            "resource_pattern_type": 3,
            "principal": "User:alice",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        }
        return {"creations": (make(module.AclCreation, creation),)}
    if api_key == ApiKey.DELETE_ACLS:
        wanted = {"resource_type_filter": 2, "resource_name_filter": "t", "pattern_type_filter": 3}
        return {"filters": (make(module.DeleteAclsFilter, wanted | {"operation": 1}),)}
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return {"deletions": (make(module.ScramCredentialDeletion, {"name": "t", "mechanism": 2}),)}
    if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        entity = make(module.EntityData, {"entity_type": "client-id", "entity_name": "t"})
        op = make(module.OpData, {"key": "producer_byte_rate", "value": 1024.0, "remove": False})
        entry = make(module.EntryData, {"entity": (entity,), "ops": (op,)})
        return {"entries": (entry,), "validate_only": False}
    return {
        "resources": (
            make(
                module.AlterConfigsResource, {"resource_type": TOPIC_RESOURCE, "resource_name": "t"}
            ),
        )
    }


def item_codes(response: Any) -> list[int]:
    if int(response.__api_key__) in (
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
    ):  # a top-level error code (Alter also repeats it for every partition)
        nested = getattr(response, "responses", ())
        partitions = [int(p.error_code) for t in nested for p in t.partitions]
        assert partitions in ([], [int(response.error_code)])
        return [int(response.error_code)]
    for field in ("topics", "responses", "results", "filter_results", "entries"):
        if hasattr(response, field):
            return [int(item.error_code) for item in getattr(response, field)]
    return [
        int(p.error_code) for r in response.replica_election_results for p in r.partition_result
    ]


@pytest.mark.parametrize(
    ("api_key", "version"),
    [
        (key, v)
        for key, (low, high) in sorted(served(apis()).versions.items())
        if key in forwarding.FORWARDED_APIS
        for v in range(low, high + 1)
    ],
)
def test_a_forward_nobody_answers_times_out_for_every_item(api_key: int, version: int) -> None:
    controller = FakeController(cluster_image())
    controller.failure = TimeoutError("no controller")
    response = ask(apis(controller), api_key, version, forwarded_request(api_key, version))
    assert item_codes(response) == [ErrorCode.request_timed_out]
    assert len(controller.requests) == 1


def test_not_controller_from_the_controller_is_passed_on() -> None:
    controller = FakeController(cluster_image())
    request = make(
        request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1).IncrementalAlterConfigsRequest,
        forwarded_request(44, 1),
    )
    controller.canned = forwarding.forwarded_error_response(request, ErrorCode.not_controller, None)
    response = ask(apis(controller), ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, forwarded_request(44, 1))
    assert item_codes(response) == [ErrorCode.not_controller]


def test_auto_creation_draws_on_a_budget_that_refills_and_logs_deferrals_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Names beyond AUTO_CREATE_BURST_TOPICS are answered UNKNOWN_TOPIC_OR_PARTITION and
    not forwarded; the budget refills at AUTO_CREATE_TOPICS_PER_S (virtual time here), and
    however many requests are deferred, one warning per LOG_INTERVAL_S says so."""
    controller = FakeController(cluster_image())
    handler = KafkaApis(
        1, "c", LISTENER, lambda: controller.image, controller, random.Random(0),
        auto_create_topics=True,
    )  # fmt: skip
    module: Any = request_module(METADATA, 9)
    header = wire.RequestHeader(METADATA, 9, 5, "client")

    def metadata(names: list[str]) -> Any:
        topics = tuple(metadata_topic(9, n) for n in names)
        return make(module.MetadataRequest, {"topics": topics, "allow_auto_topic_creation": True})

    async def scenario() -> tuple[Any, Any, Any]:
        burst = [f"a{i}" for i in range(AUTO_CREATE_BURST_TOPICS + 5)]
        first = await served(handler).handle(header, metadata(burst))
        again = await served(handler).handle(header, metadata(["late-1", "late-2"]))
        await asyncio.sleep(3 / AUTO_CREATE_TOPICS_PER_S)  # three topics' worth of budget
        refilled = await served(handler).handle(
            header, metadata(["late-1", "late-2", "late-3", "x"])
        )
        assert handler._auto_creation is not None
        await handler._auto_creation.wait_idle()
        return first, again, refilled

    loop = SimLoop()
    with caplog.at_level(logging.WARNING):
        first, again, refilled = loop.run_until_complete(scenario())
    loop.close()
    codes = Counter(t.error_code for t in first.topics)
    assert codes == {
        ErrorCode.leader_not_available: AUTO_CREATE_BURST_TOPICS,
        ErrorCode.unknown_topic_or_partition: 5,
    }
    assert {t.error_code for t in again.topics} == {ErrorCode.unknown_topic_or_partition}
    assert [t.error_code for t in refilled.topics] == [ErrorCode.leader_not_available] * 3 + [
        ErrorCode.unknown_topic_or_partition
    ]
    assert sum(len(r.topics) for r in controller.requests) == AUTO_CREATE_BURST_TOPICS + 3
    assert max(len(r.topics) for r in controller.requests) <= AUTO_CREATE_BURST_TOPICS
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "Deferred auto-creating 5 topic(s)" in warnings[0]


def test_metadata_v10_naming_a_topic_null_closes_the_connection() -> None:
    """The wire fuzzer's find: Metadata v10/v11 may carry a null topic name but cannot look
    topics up by id, and their answer cannot carry a null name: encoding it raised
    TypeError. Kafka refuses the request (InvalidRequestException)."""
    for version in (10, 11):
        module: Any = request_module(METADATA, version)
        request = make(module.MetadataRequest, {"topics": (metadata_topic(version, None),)})
        header = wire.RequestHeader(METADATA, version, 5, "client")
        assert asyncio.run(served(apis()).handle(header, request)) is None


def test_the_listeners_of_a_broker_share_the_fetch_session_cache_they_are_given() -> None:
    """An empty cache is still the broker's (it sizes by max.incremental.fetch.session...)."""
    controller = FakeController(cluster_image())
    shared = FetchSessionCache(0, random.Random(0), lambda: 0.0)
    listeners = [
        KafkaApis(
            1,
            "c",
            name,
            lambda: controller.image,
            controller,
            random.Random(0),
            fetch_sessions=shared,
        )
        for name in (LISTENER, "OTHER")
    ]
    assert all(apis.fetch_sessions is shared for apis in listeners)
