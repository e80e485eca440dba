"""Replication among real KraftNodes under the simulator (one controller, three brokers, a
topic with replication factor 3 and min.insync.replicas=2), driven step by step:

- acks=-1 produces commit on all three replicas;
- the leader appends a record its followers never get (its links to them are cut), then
  crashes;
  a follower takes over and every acknowledged record stays at its offset;
- the old leader restarts, truncates the record nobody acknowledged (diverging epoch), and
  rejoins the ISR; every replica then holds the same committed log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from kraft.config import config_from_properties
from kraft.node import KraftNode
from log.batch import decode_batch, encode_batch, iter_batches
from log.records import Record
from log.runtime import Runtime
from protocol.entities import make, request_module
from sim import admin
from sim.process import SimProcess
from sim.world import World

CLUSTER_ID = "cmVwbGljYXRpb24tc2ltLTE"
CONTROLLER = "n1"
BROKERS = ("n2", "n3", "n4")
PORT = 9092
TOPIC = "r"
TIMEOUT_S = 10.0


def config(name: str, rebalance_s: int) -> Any:
    controller = name == CONTROLLER
    return config_from_properties(
        {
            "process.roles": "controller" if controller else "broker",
            "node.id": name[1:],
            "controller.quorum.voters": f"1@{CONTROLLER}:9093",
            "listeners": f"CONTROLLER://{name}:9093"
            if controller
            else f"PLAINTEXT://{name}:{PORT}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": "/data",
            "broker.heartbeat.interval.ms": "500",
            "broker.session.timeout.ms": "3000",
            "replica.lag.time.max.ms": "2000",
            "leader.imbalance.check.interval.seconds": str(rebalance_s),
        },
        f"{name}.properties",
    )


class Cluster:
    def __init__(self, world: World, rebalance_s: int = 300) -> None:
        self.world = world
        self.rebalance_s = rebalance_s
        self.nodes: dict[str, KraftNode] = {}
        for name in (CONTROLLER, *BROKERS):
            process = world.add_process(name)
            process.start(lambda runtime, p=process: self.main(runtime, p))

    async def main(self, runtime: Runtime, process: SimProcess) -> None:
        node = KraftNode(runtime, config(process.name, self.rebalance_s), CLUSTER_ID)
        self.nodes[process.name] = node
        await node.start()
        await node.wait()

    def partition(self) -> Any:
        """Partition 0 of the topic as the controller's image has it, or None."""
        node = self.nodes.get(CONTROLLER)
        image = node.loader.image if node is not None and node.loader is not None else None
        topic = image.topics.get(TOPIC) if image is not None else None
        return None if topic is None else topic.partitions.get(0)

    async def until(self, condition: Any, what: str, timeout_s: float = 30.0) -> Any:
        loop = self.world.loop
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            value = condition()
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"{what}: not within {timeout_s}s")

    async def serving(self) -> None:
        """Until every broker serves clients."""
        await self.until(
            lambda: all(
                (n := self.nodes.get(b)) is not None
                and n.lifecycle_ready is not None
                and n.lifecycle_ready.done()
                for b in BROKERS
            ),
            "brokers serve",
        )

    async def hosted(self) -> None:
        """Until every broker has applied the topic's partition."""
        await self.until(
            lambda: all(
                self.nodes[b].replicas.high_watermark_of((TOPIC, 0)) is not None for b in BROKERS
            ),
            "every broker hosts its replica",
        )

    async def topic_hosted(self) -> Any:
        """Once brokers serve: the topic made (one partition, three replicas) through
        BROKERS[0], and hosted by every broker; its partition as the controller has it."""
        await self.serving()
        connection = KafkaConnection("admin")
        await connection.connect(BROKERS[0], PORT, 1.0)
        assert await admin.create_topic(connection, TOPIC, 1, 3, TIMEOUT_S) == "NONE"
        await connection.close()
        registration = await self.until(self.partition, "the topic exists")
        await self.hosted()
        return registration

    def log_of(self, broker: str) -> Any:
        node = self.nodes[broker]
        assert node.logs is not None
        return node.logs.get_log(TOPIC, 0)


def run_scenario(world: World, scenario: Callable[[], Awaitable[None]]) -> None:
    """Run ``scenario`` in a simulated client process (network calls must come from one);
    the world must end without failures."""

    async def drive() -> None:
        client = world.add_process("client")
        await client.start(lambda _runtime: scenario())

    try:
        world.run(drive())
        assert world.failures == []
    finally:
        world.close()


def produce_request(value: bytes) -> Any:
    module = request_module(0, 9)
    records = encode_batch([Record(None, value, 0)])
    return make(
        module.ProduceRequest,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": timedelta(seconds=TIMEOUT_S),
            "topic_data": (
                make(
                    module.TopicProduceData,
                    {
                        "name": TOPIC,
                        "partition_data": (
                            make(module.PartitionProduceData, {"index": 0, "records": records}),
                        ),
                    },
                ),
            ),
        },
    )


async def produce(broker: str, value: bytes) -> tuple[ErrorCode, int]:
    """(error, offset) of one acks=-1 produce of ``value`` to ``broker``."""
    connection = KafkaConnection("producer")
    try:
        await connection.connect(broker, PORT, 1.0)
        response: Any = await connection.request(produce_request(value), TIMEOUT_S + 1)
    finally:
        await connection.close()
    answer = response.responses[0].partition_responses[0]
    return ErrorCode(answer.error_code), int(answer.base_offset)


def committed(log: Any, high_watermark: int) -> list[tuple[int, bytes]]:
    """(offset, value) of every record below ``high_watermark`` in ``log``."""
    data = bytes(log.read(log.log_start_offset, 1 << 24, max_offset=high_watermark).records)
    out = []
    for position, header in iter_batches(data):
        _, records = decode_batch(data, position)
        out.extend((header.base_offset + i, r.value or b"") for i, r in enumerate(records))
    return out


@pytest.mark.parametrize("seed", [7, 8, 9])
def test_acks_all_survives_a_leader_crash_and_the_old_leader_truncates_and_rejoins(
    seed: int,
) -> None:
    world = World(seed=seed)
    cluster = Cluster(world)
    acked: dict[bytes, int] = {}

    async def scenario() -> None:
        await cluster.serving()
        connection = KafkaConnection("admin")
        await connection.connect(BROKERS[0], PORT, 1.0)
        assert await admin.create_topic(connection, TOPIC, 1, 3, TIMEOUT_S) == "NONE"
        error = await admin.alter_topic_config(
            connection, TOPIC, "min.insync.replicas", "2", TIMEOUT_S
        )
        assert error == "NONE"
        await connection.close()
        registration = await cluster.until(cluster.partition, "the topic exists")
        leader = f"n{registration.leader}"
        await cluster.hosted()

        for i in range(20):
            error, offset = await produce(leader, f"a{i}".encode())
            assert error == ErrorCode.none, error
            acked[f"a{i}".encode()] = offset
        assert sorted(acked.values()) == list(range(20))

        # The leader's answers stop reaching its followers; it takes one more record, which
        # nobody acknowledges, and crashes.
        followers = [b for b in BROKERS if b != leader]
        cuts = [cut for f in followers for cut in world.network.block(leader, f)]
        orphan = asyncio.ensure_future(produce(leader, b"orphan"))
        await asyncio.sleep(0.2)
        assert cluster.log_of(leader).log_end_offset == 21
        world.processes[leader].crash()
        world.network.restore(cuts)
        assert (await asyncio.gather(orphan, return_exceptions=True))[0] is not None

        moved = await cluster.until(
            lambda: (
                (p := cluster.partition()) is not None
                and p.leader != registration.leader
                and p.leader > 0
                and p
            ),
            "a follower leads",
        )
        new_leader = f"n{moved.leader}"
        assert new_leader in followers
        for i in range(20):
            error, offset = await produce(new_leader, f"b{i}".encode())
            assert error == ErrorCode.none, error
            acked[f"b{i}".encode()] = offset

        world.processes[leader].restart()
        await cluster.until(
            lambda: (p := cluster.partition()) is not None and len(p.isr) == 3,
            "the old leader rejoins the ISR",
        )
        error, offset = await produce(new_leader, b"last")
        assert error == ErrorCode.none
        acked[b"last"] = offset
        final = cluster.nodes[new_leader].replicas
        assert final is not None
        hw = final.high_watermark_of((TOPIC, 0))
        assert hw == offset + 1
        await cluster.until(
            lambda: all(cluster.log_of(b).log_end_offset == hw for b in BROKERS),
            "every replica reaches the high watermark",
        )
        logs = {b: committed(cluster.log_of(b), hw) for b in BROKERS}
        assert logs[leader] == logs[new_leader] == logs[followers[-1]]
        held = dict((value, offset) for offset, value in logs[new_leader])
        assert {v: held.get(v) for v in acked} == acked  # every acknowledged record, in place
        assert b"orphan" not in held  # the old leader truncated what nobody acknowledged
        assert [offset for offset, _ in logs[new_leader]] == list(range(hw))

    run_scenario(world, scenario)


def test_a_broker_that_led_an_epoch_without_appending_keeps_following() -> None:
    """A leads, B takes over (epoch 1) while A is down and appends nothing, then the
    controller gives the partition back to A, its preferred leader (auto rebalance). B's
    epoch cache names epoch 1 at its log end, which A never had: A answers with a diverging
    epoch ending exactly at B's log end, and B must drop that epoch (as Kafka's truncateTo
    does) rather than ask the same question forever and fall out of the ISR."""
    world = World(seed=11)
    cluster = Cluster(world, rebalance_s=3)

    def leader_other_than(*brokers: str) -> Any:
        def check() -> Any:
            p = cluster.partition()
            ok = p is not None and p.leader > 0 and f"n{p.leader}" not in brokers
            return p if ok else None

        return check

    async def scenario() -> None:
        first = await cluster.topic_hosted()
        a = f"n{first.leader}"
        assert first.leader == first.replicas[0]
        for i in range(5):
            assert (await produce(a, f"v{i}".encode()))[0] == ErrorCode.none
        await cluster.until(
            lambda: all(cluster.log_of(x).log_end_offset == 5 for x in BROKERS), "replicated"
        )
        world.processes[a].crash()
        b = f"n{(await cluster.until(leader_other_than(a), 'b leads')).leader}"
        world.processes[a].restart()
        await cluster.until(leader_other_than(b), "a leads again (preferred)")
        await cluster.until(
            lambda: [e.epoch for e in cluster.log_of(b).leader_epoch_cache.entries()] == [0],
            "b forgets the epoch it led without appending",
        )
        await asyncio.sleep(5)  # over two lag times: b fetches, so it stays in sync
        assert len(cluster.partition().isr) == 3

    run_scenario(world, scenario)
