"""A replica moved between two log dirs under the simulator, its broker crashing (a power
cut on the simulated disk: unsynced writes lost) while the copy is made, or just after the
swap: once the broker is back the replica is in the dir asked for (the copy resumed, or
the swap durable), no copy is left, and it holds the same committed log as the leader."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kraft.config import config_from_properties
from kraft.node import KraftNode
from log.runtime import Runtime
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from sim.process import SimProcess
from sim.world import World
from tests.broker.test_log_admin_sim import ask
from tests.broker.test_replication_sim import (
    BROKERS,
    CLUSTER_ID,
    CONTROLLER,
    PORT,
    TOPIC,
    Cluster,
    committed,
    produce,
    run_scenario,
)

DIRS = ("/data", "/data2")


class TwoDirCluster(Cluster):
    """The replication test's cluster, its brokers on two log dirs and small segments (a
    copy takes several slices)."""

    async def main(self, runtime: Runtime, process: SimProcess) -> None:
        config = config_from_properties(
            {
                "process.roles": "controller" if process.name == CONTROLLER else "broker",
                "node.id": process.name[1:],
                "controller.quorum.voters": f"1@{CONTROLLER}:9093",
                "listeners": f"CONTROLLER://{process.name}:9093"
                if process.name == CONTROLLER
                else f"PLAINTEXT://{process.name}:{PORT}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": ",".join(DIRS),
                "log.segment.bytes": str(64 * 1024),
                "broker.heartbeat.interval.ms": "500",
                "broker.session.timeout.ms": "3000",
                "replica.lag.time.max.ms": "2000",
            },
            f"{process.name}.properties",
        )
        node = KraftNode(runtime, config, CLUSTER_ID)
        self.nodes[process.name] = node
        await node.start()
        await node.wait()


async def alter(broker: str, path: str) -> int:
    module: Any = request_module(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    topic = make(module.AlterReplicaLogDirTopic, {"name": TOPIC, "partitions": (0,)})
    request = make(
        module.AlterReplicaLogDirsRequest,
        {"dirs": (make(module.AlterReplicaLogDir, {"path": path, "topics": (topic,)}),)},
    )
    response = await ask(broker, request)
    ((code,),) = [[p.error_code for p in t.partitions] for t in response.results]
    return int(code)


@pytest.mark.parametrize("crash", ["while copying", "once moved"])
@pytest.mark.parametrize("seed", [21, 22])
def test_a_replica_moving_dirs_survives_a_power_cut_of_its_broker(seed: int, crash: str) -> None:
    world = World(seed=seed)
    cluster = TwoDirCluster(world)

    async def scenario() -> None:
        registration = await cluster.topic_hosted()
        leader = f"n{registration.leader}"
        for i in range(40):  # about 400 KB: several segments and slices
            error, _ = await produce(leader, f"v{i}-".encode() + b"x" * 10_000)
            assert error == ErrorCode.none
        follower = next(b for b in BROKERS if b != leader)
        logs = cluster.nodes[follower].logs
        assert logs is not None
        source = logs.log_dir_of(TOPIC, 0)
        target = next(d for d in DIRS if d != source)
        await cluster.until(
            lambda: cluster.log_of(follower).log_end_offset == 40, "the follower caught up"
        )

        assert await alter(follower, target) == ErrorCode.none
        if crash == "while copying":
            # (what these seeds give: the copy has begun and is not done)
            assert logs.future_log_of(TOPIC, 0) is not None
            assert logs.log_dir_of(TOPIC, 0) == source
        else:
            await cluster.until(
                lambda: logs.log_dir_of(TOPIC, 0) == target and not logs.future_log_of(TOPIC, 0),
                "the replica moved",
            )
        world.processes[follower].crash()
        for i in range(10):
            error, _ = await produce(leader, f"w{i}".encode())
            assert error == ErrorCode.none
        world.processes[follower].restart()

        def settled() -> bool:
            node = cluster.nodes[follower]
            logs = node.logs
            if logs is None or logs.future_log_of(TOPIC, 0) is not None:
                return False
            log = logs.get_log(TOPIC, 0)
            return (
                logs.log_dir_of(TOPIC, 0) == target
                and log is not None
                and log.log_end_offset == cluster.log_of(leader).log_end_offset == 50
            )

        await cluster.until(settled, "the replica is in its new dir and caught up", 60.0)
        high_watermark = 50
        assert committed(cluster.log_of(follower), high_watermark) == committed(
            cluster.log_of(leader), high_watermark
        )
        fs = cluster.nodes[follower].runtime.fs
        for log_dir in DIRS:
            assert not [n for n in fs.list_dir(log_dir) if n.endswith("-future")]

    run_scenario(world, scenario)
