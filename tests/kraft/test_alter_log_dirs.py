"""AlterReplicaLogDirs on a real node with two log dirs (a combined node in this process, real
sockets and disk): a partition moves to the other dir while it takes produces, every
record is read back from there, DescribeLogDirs lists it there, the controller's image
records its new directory id (AssignReplicasToDirs), and after a restart it is still there;
requests Kafka refuses are refused with Kafka's codes. With Apache Kafka's own tools:
``kafka-reassign-partitions --reassignment-json-file`` with ``log_dirs``, then
``kafka-log-dirs --describe`` shows the replica in its new dir."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from kraft.config import load_config
from kraft.node import KraftNode
from kraft.storage import metadata_directory_id
from log.clock import SystemClock
from log.fs import RealFileSystem
from log.runtime import Runtime
from metadata.directories import directory_of
from metadata.records import BROKER_RESOURCE
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft import inprocess
from tests.kraft.wire_client import TIMEOUT_S, connect, create_topic, produce, read_all

TOPIC = "moving"
DEADLINE_S = 30.0


def alter_request(path: str, partitions: dict[str, tuple[int, ...]]) -> Any:
    module: Any = request_module(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    topics = tuple(
        make(module.AlterReplicaLogDirTopic, {"name": name, "partitions": indexes})
        for name, indexes in partitions.items()
    )
    return make(
        module.AlterReplicaLogDirsRequest,
        {"dirs": (make(module.AlterReplicaLogDir, {"path": path, "topics": topics}),)},
    )


async def alter(connection: KafkaConnection, path: str, **partitions: tuple[int, ...]) -> dict:
    """(topic, partition) -> error code of an AlterReplicaLogDirs moving them to ``path``."""
    response: Any = await connection.request(alter_request(path, partitions), TIMEOUT_S)
    return {
        (topic.topic_name, p.partition_index): p.error_code
        for topic in response.results
        for p in topic.partitions
    }


async def placement(connection: KafkaConnection) -> dict[str, list[tuple[int, bool]]]:
    """log dir -> [(partition of TOPIC, is future)], from DescribeLogDirs."""
    module: Any = request_module(ApiKey.DESCRIBE_LOG_DIRS, 4)
    response: Any = await connection.request(
        make(module.DescribeLogDirsRequest, {"topics": None}), TIMEOUT_S
    )
    assert response.error_code == ErrorCode.none
    return {
        result.log_dir: [
            (p.partition_index, p.is_future_key)
            for t in result.topics
            if t.name == TOPIC
            for p in t.partitions
        ]
        for result in response.results
    }


async def until(condition: Any, what: str) -> None:
    """Until ``condition()`` (awaited) holds; fails after DEADLINE_S."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while not await condition():  # bounded by the deadline
        assert loop.time() < deadline, f"not within {DEADLINE_S} s: {what}"
        await asyncio.sleep(0.05)


def test_a_partition_moves_to_the_other_log_dir_while_it_takes_produces(tmp_path: Path) -> None:
    first, second = tmp_path / "d1", tmp_path / "d2"
    path, port = inprocess.format_node(tmp_path, log_dirs=f"{first},{second}")
    config = load_config(str(path))
    fs = RealFileSystem()

    seeds = iter(range(5, 7))  # each incarnation its own (incarnation id, ...)

    def new_node() -> KraftNode:
        runtime = Runtime(fs=fs, clock=SystemClock(), rng=random.Random(next(seeds)))
        return KraftNode(runtime, config, inprocess.CLUSTER_ID)

    async def scenario() -> None:
        node = new_node()
        await node.start()
        connection = await connect("127.0.0.1", port)
        assert await create_topic(connection, TOPIC) == ErrorCode.none
        sent: list[bytes] = []
        for i in range(300):  # several segments' worth of index entries, a few MB
            values = [f"before-{i}-{j}-".encode() + b"x" * 2000 for j in range(5)]
            assert (await produce(connection, TOPIC, values))[0] == ErrorCode.none
            sent += values
        where = await placement(connection)
        (source,) = [d for d, parts in where.items() if parts == [(0, False)]]
        target = str(second) if source == str(first) else str(first)

        # Kafka's refusals: a dir not in log.dirs, a partition without a replica here.
        assert await alter(connection, str(tmp_path / "elsewhere"), moving=(0,)) == {
            (TOPIC, 0): ErrorCode.log_dir_not_found
        }
        assert await alter(connection, target, nothing=(0,)) == {
            ("nothing", 0): ErrorCode.unknown_topic_or_partition
        }
        assert await alter(connection, target, moving=(0,)) == {(TOPIC, 0): ErrorCode.none}
        for i in range(20):  # produced while the copy is made (or just after it)
            values = [f"during-{i}".encode()]
            assert (await produce(connection, TOPIC, values))[0] == ErrorCode.none
            sent += values

        async def moved() -> bool:
            listed = await placement(connection) == {source: [], target: [(0, False)]}
            return listed and not fs.exists(f"{source}/{TOPIC}-0")

        await until(moved, "the replica is in the other dir, with no copy left")
        assert await alter(connection, target, moving=(0,)) == {(TOPIC, 0): ErrorCode.none}
        # The old dir is renamed away, and removed file.delete.delay.ms later (as Kafka).
        left = [name for name in fs.list_dir(source) if name.startswith(f"{TOPIC}-0")]
        assert len(left) == 1 and left[0].endswith("-delete"), left
        assert await read_all(connection, TOPIC) == sent
        target_id = metadata_directory_id(fs, target)
        assert target_id is not None

        async def recorded() -> bool:
            assert node.loader is not None
            topic = node.loader.image.topics.get(TOPIC)
            assert topic is not None
            return directory_of(topic.partitions[0], 1) == target_id

        await until(recorded, "the controller's image records the replica's new dir")
        for i in range(5):
            values = [f"after-{i}".encode()]
            assert (await produce(connection, TOPIC, values))[0] == ErrorCode.none
            sent += values
        await connection.close()
        await node.shutdown()

        node = new_node()  # restarted: the replica is found in its new dir, whole
        await node.start()
        connection = await connect("127.0.0.1", port)
        assert await placement(connection) == {source: [], target: [(0, False)]}
        assert await read_all(connection, TOPIC) == sent
        await connection.close()
        await node.shutdown()

    asyncio.run(scenario())


def test_kafka_reassign_partitions_moves_a_replica_between_log_dirs(
    tmp_path: Path,
    kafka_tools: Path,  # noqa: F811
) -> None:
    first, second = tmp_path / "d1", tmp_path / "d2"
    path, port = inprocess.format_node(tmp_path, log_dirs=f"{first},{second}")
    config = load_config(str(path))
    servers = f"127.0.0.1:{port}"

    async def scenario() -> None:
        runtime = Runtime(fs=RealFileSystem(), clock=SystemClock(), rng=random.Random(5))
        node = KraftNode(runtime, config, inprocess.CLUSTER_ID)
        await node.start()
        connection = await connect("127.0.0.1", port)
        assert await create_topic(connection, TOPIC) == ErrorCode.none
        for i in range(50):
            assert (await produce(connection, TOPIC, [f"v{i}".encode()]))[0] == ErrorCode.none
        where = await placement(connection)
        (source,) = [d for d, parts in where.items() if parts == [(0, False)]]
        target = str(second) if source == str(first) else str(first)
        plan = tmp_path / "reassignment.json"
        plan.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [
                        {"topic": TOPIC, "partition": 0, "replicas": [1], "log_dirs": [target]}
                    ],
                }
            )
        )
        loop = asyncio.get_running_loop()
        out = await loop.run_in_executor(
            None,
            lambda: tools.run(
                "reassign-partitions",
                "--bootstrap-server",
                servers,
                "--reassignment-json-file",
                str(plan),
                "--execute",
                "--replica-alter-log-dirs-throttle",
                "1000000",
            ),
        )
        assert "Successfully started" in out.stdout, out.stdout
        # The tool throttles the move on the broker (the mover reads it: tests/broker/
        # test_log_dir_mover.py), and its --verify removes the throttle once it is done.
        key = ("replica.alter.log.dirs.io.max.bytes.per.second", BROKER_RESOURCE, "1")

        def throttle() -> str | None:
            name, resource, broker = key
            image = node.loader.image  # type: ignore[union-attr]
            return image.configs.get((resource, broker), {}).get(name)

        async def throttled() -> bool:
            return throttle() == "1000000"

        await until(throttled, "the broker has the tool's throttle")

        async def described() -> bool:
            result = await loop.run_in_executor(
                None,
                lambda: tools.run(
                    "log-dirs", "--bootstrap-server", servers, "--describe", "--broker-list", "1"
                ),
            )
            (broker,) = json.loads(result.stdout.strip().splitlines()[-1])["brokers"]
            dirs = {
                item["logDir"]: [(p["partition"], p["isFuture"]) for p in item["partitions"]]
                for item in broker["logDirs"]
            }
            return dirs.get(target) == [(f"{TOPIC}-0", False)] and dirs.get(source) == []

        await until(described, "kafka-log-dirs shows the replica in its new dir")
        verified = await loop.run_in_executor(
            None,
            lambda: tools.run(
                "reassign-partitions",
                "--bootstrap-server",
                servers,
                "--reassignment-json-file",
                str(plan),
                "--verify",
            ),
        )
        assert "in progress" not in verified.stdout, verified.stdout
        assert f"Reassignment of replica {TOPIC}-0-1 completed" in verified.stdout, verified.stdout

        async def unthrottled() -> bool:
            return throttle() is None

        await until(unthrottled, f"--verify removed the throttle: {verified.stdout}")
        assert len(await read_all(connection, TOPIC)) == 50
        await connection.close()
        await node.shutdown()

    asyncio.run(scenario())
