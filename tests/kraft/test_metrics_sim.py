"""Metrics of real KraftNodes under the simulator (one controller, three brokers, a topic
with replication factor 3): what Prometheus would scrape, rendered by each node's own
registry, follows what the cluster does. Counters count exactly what was produced; a stopped
follower shows up as an under-replicated partition and an ISR shrink on the leader; exactly
one controller is active."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client.parser import text_string_to_metric_families

from kraft.metrics import NodeMetrics
from kraft.node import KraftNode
from log.runtime import Runtime
from sim.process import SimProcess
from sim.world import World
from tests.broker.test_replication_sim import (
    BROKERS,
    CLUSTER_ID,
    CONTROLLER,
    TOPIC,
    Cluster,
    config,
    produce,
    produce_request,
    run_scenario,
)


class MeteredCluster(Cluster):
    """The replication test's cluster, every node with its own NodeMetrics."""

    async def main(self, runtime: Runtime, process: SimProcess) -> None:
        node = KraftNode(
            runtime, config(process.name, self.rebalance_s), CLUSTER_ID, metrics=NodeMetrics()
        )
        self.nodes[process.name] = node
        await node.start()
        await node.wait()

    def sample(self, name: str, node: str, **labels: str) -> float | None:
        """One sample of ``node``'s exposition (None when absent)."""
        metrics = self.nodes[node].metrics
        assert metrics is not None
        text = metrics.exposition().decode()
        for family in text_string_to_metric_families(text):
            for found in family.samples:
                if found.name == name and found.labels == labels:
                    return found.value
        return None


@pytest.mark.parametrize("seed", [3, 4])
def test_scraped_metrics_follow_produces_a_stopped_follower_and_the_controller(
    seed: int,
) -> None:
    world = World(seed=seed)
    cluster = MeteredCluster(world)
    values = [f"value-{i}".encode() for i in range(20)]
    batch_bytes = sum(
        len(produce_request(v).topic_data[0].partition_data[0].records) for v in values
    )

    async def scenario() -> None:
        registration = await cluster.topic_hosted()
        leader = f"n{registration.leader}"
        await cluster.until(
            lambda: (
                cluster.sample("kafka_server_replicamanager_underreplicatedpartitions", leader) == 0
            ),
            "the ISR is full",
        )
        for value in values:
            error, _ = await produce(leader, value)
            assert error == ErrorCode.none

        messages = "kafka_server_brokertopicmetrics_messagesin_total"
        assert cluster.sample(messages, leader, topic=TOPIC) == len(values)
        assert cluster.sample(messages, leader) == len(values)  # the all-topics series
        assert cluster.sample("kafka_server_brokertopicmetrics_bytesin_total", leader) == (
            batch_bytes
        )
        produce_requests = "kafka_network_requestmetrics_requests_total"
        assert cluster.sample(produce_requests, leader, request="Produce", version="9") == 20
        errors = "kafka_network_requestmetrics_errors_total"
        assert cluster.sample(errors, leader, request="Produce", error="NONE") == 20
        timed = "kafka_network_requestmetrics_totaltimems_count"
        assert cluster.sample(timed, leader, request="Produce") == 20
        # The followers fetched the records: the leader answered them as replication.
        assert cluster.sample("kafka_server_brokertopicmetrics_replicationbytesout_total", leader)
        lag = "kafka_server_fetcherlagmetrics_consumerlag"
        max_lag = "kafka_server_replicafetchermanager_maxlag"
        moves = "kafka_server_replicaalterlogdirsmanager_"
        mover = {"clientId": "ReplicaAlterLogDirs"}
        for broker in BROKERS:
            assert cluster.sample(moves + "maxlag", broker, **mover) == 0  # no move under way
            assert cluster.sample(moves + "failedpartitionscount", broker, **mover) == 0
            if broker != leader:
                assert cluster.sample(messages, broker) == 0  # followers count no produce
                assert cluster.sample(lag, broker, topic=TOPIC, partition="0") == 0
                assert cluster.sample(max_lag, broker, clientId="Replica") == 0
            else:
                assert cluster.sample(lag, broker, topic=TOPIC, partition="0") is None
            assert cluster.sample("kafka_server_replicamanager_partitioncount", broker) == 1
        assert cluster.sample("kafka_server_replicamanager_leadercount", leader) == 1
        assert cluster.sample("kafka_controller_kafkacontroller_activecontrollercount", CONTROLLER)
        assert cluster.sample("kafka_controller_kafkacontroller_globaltopiccount", CONTROLLER) == 1
        assert (
            cluster.sample(
                "kafka_server_raftmetrics_current_state", CONTROLLER, current_state="leader"
            )
            == 1
        )
        shrinks = "kafka_server_replicamanager_isrshrinks_total"
        assert cluster.sample(shrinks, leader) == 0

        follower = next(b for b in BROKERS if b != leader)
        world.processes[follower].crash()
        await cluster.until(
            lambda: (
                cluster.sample("kafka_server_replicamanager_underreplicatedpartitions", leader) == 1
            ),
            "the leader reports its partition under-replicated",
        )
        assert cluster.sample(shrinks, leader) == 1
        expands = "kafka_server_replicamanager_isrexpands_total"
        assert cluster.sample(expands, leader) == 0
        world.processes[follower].restart()
        await cluster.until(
            lambda: (
                cluster.sample("kafka_server_replicamanager_underreplicatedpartitions", leader) == 0
            ),
            "the restarted follower rejoins the ISR",
        )
        assert cluster.sample(expands, leader) == 1
        assert (
            cluster.sample("kafka_controller_kafkacontroller_offlinepartitionscount", CONTROLLER)
            == 0
        )

    run_scenario(world, scenario)
