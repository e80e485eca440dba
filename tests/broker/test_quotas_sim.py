"""Client quotas among real KraftNodes under the simulator (one controller, three brokers):
a producer_byte_rate set through a broker (AlterClientQuotas forwarded to the controller)
reaches every broker's image; a producer that ignores throttle_time_ms is held to the quota
by the mute alone (its next request waits out the throttle), in virtual time, and the same
seed gives the same throttle times."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from sim import admin
from sim.world import World
from tests.broker.test_replication_sim import (
    BROKERS,
    CONTROLLER,
    PORT,
    TIMEOUT_S,
    TOPIC,
    Cluster,
    produce_request,
    run_scenario,
)

CONTROLLER_PORT = 9093  # the controller listener of test_replication_sim's cluster
QUOTA = 20_000.0  # bytes/s
VALUE = b"v" * 2000
WARM_UP_S = 12.0
MEASURE_S = 33.0  # three quota windows


def alter_request() -> Any:
    module: Any = request_module(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    entity = make(module.EntityData, {"entity_type": "client-id", "entity_name": "throttled"})
    op = make(module.OpData, {"key": "producer_byte_rate", "value": QUOTA, "remove": False})
    entry = make(module.EntryData, {"entity": (entity,), "ops": (op,)})
    return make(module.AlterClientQuotasRequest, {"entries": (entry,), "validate_only": False})


def run(seed: int) -> tuple[float, list[int], float]:
    """(bytes/s acknowledged over the measured windows, every throttle time in ms, the
    shortest wait for an answer right after a throttled one, as a fraction of its throttle)."""
    world = World(seed=seed)
    cluster = Cluster(world)
    outcome: list[Any] = []

    async def scenario() -> None:
        await cluster.serving()
        connection = KafkaConnection("admin")
        await connection.connect(BROKERS[0], PORT, 1.0)
        assert await admin.create_topic(connection, TOPIC, 1, 3, TIMEOUT_S) == "NONE"
        response: Any = await connection.request(alter_request(), TIMEOUT_S)
        assert [e.error_code for e in response.entries] == [ErrorCode.none]
        await connection.close()
        registration = await cluster.until(cluster.partition, "the topic exists")
        await cluster.hosted()
        await cluster.until(
            lambda: all(
                cluster.nodes[b].loader.image.client_quotas  # type: ignore[union-attr]
                for b in BROKERS
            ),
            "every broker's image has the quota",
        )
        producer = KafkaConnection("throttled")
        await producer.connect(f"n{registration.leader}", PORT, 1.0)
        # acks=1: the leader answers without waiting for its followers, so the client can
        # send far faster than its quota (it must, to show the quota holding it).
        request = dataclasses.replace(produce_request(VALUE), acks=1)
        loop = world.loop
        start = loop.time()
        acked = 0.0
        throttles: list[int] = []
        waits: list[float] = []
        while (now := loop.time()) < start + WARM_UP_S + MEASURE_S:
            answer: Any = await producer.request(request, TIMEOUT_S + 30)
            partition = answer.responses[0].partition_responses[0]
            assert partition.error_code == ErrorCode.none
            if now >= start + WARM_UP_S:
                acked += len(VALUE)
            throttle_ms = int(answer.throttle_time.total_seconds() * 1000)
            if throttles and throttles[-1] > 0:
                waits.append((loop.time() - now) * 1000 / throttles[-1])
            throttles.append(throttle_ms)
        await producer.close()
        outcome.extend([acked / MEASURE_S, throttles, min(waits)])

    run_scenario(world, scenario)
    return outcome[0], outcome[1], outcome[2]


@pytest.mark.parametrize("seed", [21, 22])
def test_a_producer_that_ignores_its_throttle_times_is_held_to_its_quota(seed: int) -> None:
    rate, throttles, shortest_wait = run(seed)
    assert abs(rate - QUOTA) <= 0.1 * QUOTA
    assert sum(1 for t in throttles if t > 0) > 10
    # Each request sent right after a throttled answer is read only once the throttle time
    # has passed: the mute, not the client's good manners, holds it back.
    assert shortest_wait >= 0.99
    assert run(seed)[1] == throttles  # the same seed, the same throttles


@pytest.mark.parametrize(("node", "port"), [(BROKERS[1], PORT), (CONTROLLER, CONTROLLER_PORT)])
def test_an_ip_over_its_connection_creation_rate_gets_its_connections_closed(
    node: str, port: int
) -> None:
    """KIP-612: with a default IP quota of one connection a second, a client opening
    connections in a loop is admitted at that rate (after the first ten seconds' worth) and
    the rest are closed after a delay of at most a second; at a broker's port, and at the
    controller's, as Kafka's controller holds its own listener to IP quotas."""
    world = World(seed=5)
    cluster = Cluster(world)
    outcome: list[Any] = []

    async def scenario() -> None:
        await cluster.serving()
        module: Any = request_module(ApiKey.ALTER_CLIENT_QUOTAS, 1)
        entity = make(module.EntityData, {"entity_type": "ip", "entity_name": None})
        op = make(module.OpData, {"key": "connection_creation_rate", "value": 1.0, "remove": False})
        entry = make(module.EntryData, {"entity": (entity,), "ops": (op,)})
        request = make(
            module.AlterClientQuotasRequest, {"entries": (entry,), "validate_only": False}
        )
        connection = KafkaConnection("admin")
        await connection.connect(BROKERS[0], PORT, 1.0)
        response: Any = await connection.request(request, TIMEOUT_S)
        assert [e.error_code for e in response.entries] == [ErrorCode.none]
        await connection.close()
        await cluster.until(
            lambda: cluster.nodes[node].loader.image.client_quotas,  # type: ignore[union-attr]
            "the node's image has the quota",
        )
        versions = make(
            request_module(ApiKey.API_VERSIONS, 3).ApiVersionsRequest,
            {"client_software_name": "t", "client_software_version": "1"},
        )
        loop = world.loop
        start = loop.time()
        admitted, refusal_waits = 0, []
        for _ in range(40):
            began = loop.time()
            client = KafkaConnection("looping")
            try:
                await client.connect(node, port, 1.0)
                await client.request(versions, 5.0)
                admitted += 1
            except (OSError, ConnectionError, TimeoutError, asyncio.IncompleteReadError):
                refusal_waits.append(loop.time() - began)
            finally:
                await client.close()
        outcome.extend([admitted, refusal_waits, loop.time() - start])

    run_scenario(world, scenario)
    admitted, refusal_waits, elapsed_s = outcome
    print(f"{admitted} admitted, {len(refusal_waits)} refused in {elapsed_s:.1f} s")
    assert refusal_waits, "no connection was refused"
    assert admitted <= 1.0 * (elapsed_s + 10) + 1
    assert admitted >= 10  # the first ten seconds' worth at once
    assert all(wait <= 1.5 for wait in refusal_waits)
