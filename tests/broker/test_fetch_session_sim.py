"""Followers' fetch sessions (KIP-227) among real KraftNodes under the simulator: each
replica fetcher keeps one incremental session with its leader, whose cache holds exactly the
partitions the fetcher fetches, through a leader crash, the partition moving to another
leader's fetcher (forgotten by the old session) and back again (preferred-leader election).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from log.batch import encode_batch
from log.records import Record
from protocol.entities import make, request_module
from sim import admin
from sim.world import World
from tests.broker.test_replication_sim import BROKERS, PORT, TIMEOUT_S, Cluster, run_scenario

TOPIC = "s"
PARTITIONS = 3


async def produce(broker: str, index: int, value: bytes) -> ErrorCode:
    module = request_module(0, 9)
    data = make(
        module.PartitionProduceData,
        {"index": index, "records": encode_batch([Record(None, value, 0)])},
    )
    request = make(
        module.ProduceRequest,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": timedelta(seconds=TIMEOUT_S),
            "topic_data": (
                make(module.TopicProduceData, {"name": TOPIC, "partition_data": (data,)}),
            ),
        },
    )
    connection = KafkaConnection("producer")
    try:
        await connection.connect(broker, PORT, 1.0)
        response: Any = await connection.request(request, TIMEOUT_S + 1)
    finally:
        await connection.close()
    return ErrorCode(response.responses[0].partition_responses[0].error_code)


def test_followers_keep_one_incremental_session_per_leader_and_forget_moved_partitions() -> None:
    world = World(seed=21)
    cluster = Cluster(world, rebalance_s=3)

    def registrations() -> dict[int, Any]:
        image = cluster.nodes[BROKERS[0]].loader.image  # type: ignore[union-attr]
        topic = image.topics.get(TOPIC)
        return {} if topic is None else dict(topic.partitions)

    def fetchers() -> list[tuple[str, Any]]:
        return [
            (broker, fetcher)
            for broker in BROKERS
            if world.processes[broker].alive
            for fetcher in cluster.nodes[broker].replicas.fetchers._fetchers.values()
        ]

    def sessions_agree() -> bool:
        """Every fetcher is past its first incremental request, and its leader's session
        holds exactly the partitions it fetches, under the same id."""
        if not fetchers():
            return False
        for _, fetcher in fetchers():
            handler = fetcher._session
            leader = cluster.nodes[f"n{fetcher.source_id}"]
            session = leader.apis["PLAINTEXT"].fetch_sessions.get(handler.session_id)
            if session is None or handler.epoch < 3 or not session.privileged:
                return False
            if set(session.partitions) != set(fetcher._partitions):
                return False
        return True

    def replicated(end: int) -> bool:
        return all(
            cluster.nodes[b].logs.get_log(TOPIC, p).log_end_offset == end  # type: ignore[union-attr]
            for b in BROKERS
            for p in range(PARTITIONS)
        )

    async def produce_everywhere(tag: str) -> None:
        for index, registration in sorted(registrations().items()):
            for i in range(3):
                error = await produce(f"n{registration.leader}", index, f"{tag}{i}".encode())
                assert error == ErrorCode.none, error

    async def scenario() -> None:
        await cluster.serving()
        connection = KafkaConnection("admin")
        await connection.connect(BROKERS[0], PORT, 1.0)
        assert await admin.create_topic(connection, TOPIC, PARTITIONS, 3, TIMEOUT_S) == "NONE"
        await connection.close()
        await cluster.until(lambda: len(registrations()) == PARTITIONS, "the topic exists")
        await cluster.until(
            lambda: all(
                cluster.nodes[b].replicas.high_watermark_of((TOPIC, p)) is not None
                for b in BROKERS
                for p in range(PARTITIONS)
            ),
            "every broker hosts its replicas",
        )
        await produce_everywhere("a")
        await cluster.until(lambda: replicated(3), "replicated")
        await cluster.until(sessions_agree, "sessions agree")

        # The leader of partition 0 crashes: its followers fetch it from a new leader, one
        # of them in the session it already keeps with that leader for another partition.
        first = registrations()[0].leader
        world.processes[f"n{first}"].crash()
        await cluster.until(
            lambda: registrations()[0].leader not in (first, -1), "partition 0 moves"
        )
        await cluster.until(
            lambda: any(
                (TOPIC, 0) in f._partitions and len(f._partitions) > 1 for _, f in fetchers()
            ),
            "partition 0 joins another partition's session",
        )
        shared = next(f for _, f in fetchers() if (TOPIC, 0) in f._partitions and len(f) > 1)
        await cluster.until(sessions_agree, "sessions agree without the crashed leader")
        session_id = shared._session.session_id

        # It comes back and, as preferred leader, takes partition 0 back: the session that
        # held partition 0 with the interim leader forgets it.
        world.processes[f"n{first}"].restart()
        await cluster.until(
            lambda: registrations()[0].leader == first and len(registrations()[0].isr) == 3,
            "the preferred leader leads partition 0 again, in sync",
        )
        await cluster.until(sessions_agree, "sessions agree after the move back")
        # Forgotten within the same session, not by starting over with a full fetch.
        await cluster.until(
            lambda: (TOPIC, 0) not in shared._partitions, "partition 0 left the shared fetcher"
        )
        await cluster.until(sessions_agree, "the shared session forgets partition 0")
        assert shared._session.session_id == session_id
        await produce_everywhere("b")
        await cluster.until(lambda: replicated(6), "replicated after the moves")

    run_scenario(world, scenario)
