"""A client's controller_mutation_rate among real KraftNodes under the simulator (one
controller, three brokers): brokers forward CreateTopics in Envelopes and the controller
charges the client, so topics created through one broker spend the budget the next
broker's request finds (issue 29: it used to be charged per broker, a budget on each)."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from broker.mutation_quota import THROTTLED_MESSAGE
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from sim.world import World
from tests.broker.test_replication_sim import (
    BROKERS,
    CONTROLLER,
    PORT,
    TIMEOUT_S,
    Cluster,
    run_scenario,
)

QUOTA = 2.0  # partitions a second: a burst of (11 - 1) x 1 s x 2 = 20


def quota_request(client_id: str) -> Any:
    module: Any = request_module(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    entity = make(module.EntityData, {"entity_type": "client-id", "entity_name": client_id})
    op = make(module.OpData, {"key": "controller_mutation_rate", "value": QUOTA, "remove": False})
    entry = make(module.EntryData, {"entity": (entity,), "ops": (op,)})
    return make(module.AlterClientQuotasRequest, {"entries": (entry,), "validate_only": False})


def create_request(name: str, partitions: int) -> Any:
    module: Any = request_module(ApiKey.CREATE_TOPICS, 7)  # strict (KIP-599)
    topic = make(
        module.CreatableTopic,
        {"name": name, "num_partitions": partitions, "replication_factor": 1},
    )
    return make(module.CreateTopicsRequest, {"topics": (topic,), "timeout": timedelta(seconds=10)})


async def connected(client_id: str, broker: str) -> KafkaConnection:
    connection = KafkaConnection(client_id)
    await connection.connect(broker, PORT, 1.0)
    return connection


async def quota_set(cluster: Cluster) -> KafkaConnection:
    """Once brokers serve: client id "creator" given its mutation quota (``quota_request``)
    through an admin connection to BROKERS[0] (returned, open), and the controller's image
    holding it."""
    await cluster.serving()
    admin = await connected("admin", BROKERS[0])
    answer: Any = await admin.request(quota_request("creator"), TIMEOUT_S)
    assert [e.error_code for e in answer.entries] == [ErrorCode.none]
    controller = cluster.nodes[CONTROLLER]
    await cluster.until(
        lambda: controller.loader.image.client_quotas,  # type: ignore[union-attr]
        "the controller's image has the quota",
    )
    return admin


def test_a_clients_mutation_quota_is_shared_by_the_brokers_it_reaches() -> None:
    world = World(seed=29)
    cluster = Cluster(world)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        admin = await quota_set(cluster)
        controller = cluster.nodes[CONTROLLER]
        through_a = await connected("creator", BROKERS[0])
        through_b = await connected("creator", BROKERS[1])
        other = await connected("other", BROKERS[1])
        # 25 partitions from a full bucket of 20: created, the bucket 5 in debt.
        seen["a"] = await through_a.request(create_request("a", 25), TIMEOUT_S)
        # The same client through another broker finds that debt.
        seen["b"] = await through_b.request(create_request("b", 1), TIMEOUT_S)
        # Another client id has a budget of its own.
        seen["c"] = await other.request(create_request("c", 1), TIMEOUT_S)
        # The broker that answered mutes the client for the throttle time; its next
        # request is read once that has passed, and by then the debt is paid.
        loop = world.loop
        sent_s = loop.time()
        seen["b again"] = await through_b.request(create_request("b", 1), TIMEOUT_S)
        seen["waited_s"] = loop.time() - sent_s
        image: Any = controller.loader.image  # type: ignore[union-attr]
        seen["created"] = {
            name: len(image.topics.get(name).partitions)
            for name in ("a", "b", "c")
            if image.topics.get(name) is not None
        }
        for connection in (admin, through_a, through_b, other):
            await connection.close()

    run_scenario(world, scenario)
    first, refused, other, retried = seen["a"], seen["b"], seen["c"], seen["b again"]
    assert [(t.name, t.error_code) for t in first.topics] == [("a", ErrorCode.none)]
    assert first.throttle_time == timedelta(0)
    assert [(t.name, t.error_code) for t in refused.topics] == [
        ("b", ErrorCode.throttling_quota_exceeded)
    ]
    assert refused.topics[0].error_message == THROTTLED_MESSAGE
    # 5 permits of debt at 2 a second, less what refilled while the requests travelled.
    throttle_s = refused.throttle_time.total_seconds()
    assert 2.0 <= throttle_s <= 2.5
    assert [(t.name, t.error_code) for t in other.topics] == [("c", ErrorCode.none)]
    assert [(t.name, t.error_code) for t in retried.topics] == [("b", ErrorCode.none)]
    assert seen["waited_s"] >= throttle_s * 0.99
    assert seen["created"] == {"a": 25, "b": 1, "c": 1}


def metadata_request(name: str) -> Any:
    module: Any = request_module(ApiKey.METADATA, 12)
    topic = make(module.MetadataRequestTopic, {"name": name, "topic_id": None})
    return make(module.MetadataRequest, {"topics": (topic,), "allow_auto_topic_creation": True})


def test_a_topic_auto_created_for_a_client_is_charged_to_its_mutation_quota(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Kafka's AutoTopicCreationManager sends the CreateTopics a client's Metadata causes in
    an Envelope as that client, at Kafka's latest version (a strict quota): a client in
    debt to its controller_mutation_rate gets no topic auto-created (it asks again later),
    while another client's Metadata through the same broker does; the broker logs the
    deferral. Before, the broker asked as itself and the topic was created past the
    client's quota."""
    world = World(seed=29)
    cluster = Cluster(world)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        admin = await quota_set(cluster)
        controller = cluster.nodes[CONTROLLER]

        def image() -> Any:
            return controller.loader.image  # type: ignore[union-attr]

        creator = await connected("creator", BROKERS[1])
        other = await connected("other", BROKERS[1])
        seen["debt"] = await creator.request(create_request("a", 25), TIMEOUT_S)
        seen["in debt"] = await creator.request(metadata_request("auto-x"), TIMEOUT_S)
        seen["free"] = await other.request(metadata_request("auto-y"), TIMEOUT_S)
        # The broker forwards both creations on its one forwarding connection, in order:
        # once auto-y exists, the controller has answered auto-x's too.
        await cluster.until(lambda: image().topics.get("auto-y") is not None, "auto-y exists")
        seen["auto-x"] = image().topics.get("auto-x")
        for connection in (admin, creator, other):
            await connection.close()

    with caplog.at_level(logging.WARNING, logger="broker.auto_topic_creation"):
        run_scenario(world, scenario)
    deferred = [r.getMessage() for r in caplog.records if "Deferred" in r.getMessage()]
    assert len(deferred) == 1 and "over the client's quota" in deferred[0], deferred
    assert [(t.name, t.error_code) for t in seen["debt"].topics] == [("a", ErrorCode.none)]
    for key, name in (("in debt", "auto-x"), ("free", "auto-y")):
        assert [(t.name, t.error_code) for t in seen[key].topics] == [
            (name, ErrorCode.leader_not_available)
        ]
    assert seen["auto-x"] is None
