"""A client's controller_mutation_rate among real KraftNodes under the simulator (one
controller, three brokers): brokers forward CreateTopics in Envelopes and the controller
charges the client, so topics created through one broker spend the budget the next
broker's request finds (issue 29: it used to be charged per broker, a budget on each)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

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


def test_a_clients_mutation_quota_is_shared_by_the_brokers_it_reaches() -> None:
    world = World(seed=29)
    cluster = Cluster(world)
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        await cluster.serving()
        admin = await connected("admin", BROKERS[0])
        answer: Any = await admin.request(quota_request("creator"), TIMEOUT_S)
        assert [e.error_code for e in answer.entries] == [ErrorCode.none]
        controller = cluster.nodes[CONTROLLER]
        await cluster.until(
            lambda: controller.loader.image.client_quotas,  # type: ignore[union-attr]
            "the controller's image has the quota",
        )
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
