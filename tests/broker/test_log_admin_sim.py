"""DeleteRecords and DescribeLogDirs among real KraftNodes under the simulator (one
controller, three brokers, a topic with replication factor 3): the leader raises its log
start offset and answers it as the low watermark, the followers raise theirs from their
fetch responses, and consumers can no longer read below it; requests the leader cannot
serve get Kafka's error codes; DescribeLogDirs lists each broker's replica in its log dir."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from sim.world import World
from tests.broker.test_replication_sim import (
    BROKERS,
    PORT,
    TIMEOUT_S,
    TOPIC,
    Cluster,
    produce,
    run_scenario,
)


def delete_records_request(partitions: dict[int, int], version: int = 2) -> Any:
    module = request_module(ApiKey.DELETE_RECORDS, version)
    return make(
        module.DeleteRecordsRequest,
        {
            "topics": (
                make(
                    module.DeleteRecordsTopic,
                    {
                        "name": TOPIC,
                        "partitions": tuple(
                            make(
                                module.DeleteRecordsPartition,
                                {"partition_index": index, "offset": offset},
                            )
                            for index, offset in partitions.items()
                        ),
                    },
                ),
            ),
            "timeout": timedelta(seconds=TIMEOUT_S),
        },
    )


async def ask(broker: str, request: object) -> Any:
    connection = KafkaConnection("admin")
    try:
        await connection.connect(broker, PORT, 1.0)
        return await connection.request(request, TIMEOUT_S)
    finally:
        await connection.close()


async def delete_records(broker: str, partitions: dict[int, int]) -> dict[int, tuple[int, int]]:
    """partition -> (error code, low watermark) of a DeleteRecords sent to ``broker``."""
    response = await ask(broker, delete_records_request(partitions))
    return {
        p.partition_index: (int(p.error_code), int(p.low_watermark))
        for topic in response.topics
        for p in topic.partitions
    }


@pytest.mark.parametrize("seed", [11, 12])
def test_delete_records_moves_every_replicas_log_start_and_log_dirs_list_them(seed: int) -> None:
    world = World(seed=seed)
    cluster = Cluster(world)

    async def scenario() -> None:
        registration = await cluster.topic_hosted()
        leader = f"n{registration.leader}"
        follower = next(b for b in BROKERS if b != leader)
        for i in range(20):
            error, _ = await produce(leader, f"v{i}".encode())
            assert error == ErrorCode.none

        # Past the high watermark, a follower, a partition that does not exist: refused.
        assert await delete_records(leader, {0: 21, 7: 1}) == {
            0: (ErrorCode.offset_out_of_range, -1),
            7: (ErrorCode.unknown_topic_or_partition, -1),
        }
        assert await delete_records(follower, {0: 5}) == {0: (ErrorCode.not_leader_or_follower, -1)}
        assert await delete_records(leader, {0: 12}) == {0: (ErrorCode.none, 12)}
        assert cluster.log_of(leader).log_start_offset == 12
        await cluster.until(
            lambda: all(cluster.log_of(b).log_start_offset == 12 for b in BROKERS),
            "every follower raises its log start offset from its fetches",
        )
        replicas = cluster.nodes[leader].replicas
        below = replicas.read(TOPIC, 0, 11, 1 << 20, -1, min_one_message=True)
        assert below.error == ErrorCode.offset_out_of_range
        at = replicas.read(TOPIC, 0, 12, 1 << 20, -1, min_one_message=True)
        assert at.error == ErrorCode.none and len(at.records) > 0
        # Lower than the log start: nothing moves back. -1: up to the high watermark.
        assert await delete_records(leader, {0: 3}) == {0: (ErrorCode.none, 12)}
        assert await delete_records(leader, {0: -1}) == {0: (ErrorCode.none, 20)}
        await cluster.until(
            lambda: all(cluster.log_of(b).log_start_offset == 20 for b in BROKERS),
            "every follower follows to the high watermark",
        )

        module = request_module(ApiKey.DESCRIBE_LOG_DIRS, 4)
        for broker in BROKERS:
            everything = await ask(broker, make(module.DescribeLogDirsRequest, {"topics": None}))
            assert everything.error_code == ErrorCode.none
            (result,) = everything.results
            assert (result.error_code, result.log_dir) == (ErrorCode.none, "/data")
            (topic,) = result.topics
            (partition,) = topic.partitions
            assert (topic.name, partition.partition_index) == (TOPIC, 0)
            assert partition.partition_size == cluster.log_of(broker).size
            assert partition.offset_lag == 0
            other = make(module.DescribableLogDirTopic, {"topic": "other", "partitions": (0,)})
            nothing = await ask(broker, make(module.DescribeLogDirsRequest, {"topics": (other,)}))
            assert nothing.results[0].topics == ()

    run_scenario(world, scenario)
