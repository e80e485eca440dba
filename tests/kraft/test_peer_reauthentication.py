"""KIP-368 between the nodes of a real cluster: with connections.max.reauth.ms on the
controller and inter-broker listeners (SASL_PLAINTEXT, PLAIN), the brokers' controller
channels and heartbeats, the forwarding channel and the follower's replica fetcher log in
again on their connections before the session ends, so no listener ever closes a peer's
connection for an expired session, and replication goes on past several lifetimes."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kraft.procs import Processes, free_port, port_open, wait_until

HOST = "127.0.0.1"
LIFETIME_MS = 2000
PLAIN = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="peer" password="peer-pw" user_peer="peer-pw" user_client="client-pw";'
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Processes]]:
    root = tmp_path_factory.mktemp("peer-reauth")
    controller_port = free_port()
    ports = {1: free_port(), 2: free_port()}
    common = {
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "BROKER",
        "listener.security.protocol.map": "BROKER:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.broker.plain.sasl.jaas.config": PLAIN,
        "listener.name.controller.plain.sasl.jaas.config": PLAIN,
        "connections.max.reauth.ms": str(LIFETIME_MS),
        "offsets.topic.replication.factor": "1",
        "broker.heartbeat.interval.ms": "300",
    }
    nodes = {
        1: {
            **common,
            "process.roles": "broker,controller",
            "node.id": "1",
            "listeners": f"BROKER://{HOST}:{ports[1]},CONTROLLER://{HOST}:{controller_port}",
        },
        2: {
            **common,
            "process.roles": "broker",
            "node.id": "2",
            "listeners": f"BROKER://{HOST}:{ports[2]}",
        },
    }
    procs = Processes(root, nodes)
    try:
        procs.start(1)
        procs.start(2)
        for port in ports.values():
            wait_until(lambda port=port: port_open(HOST, port), "a broker listener opens")
        yield f"{HOST}:{ports[1]}", procs
    finally:
        procs.cleanup()


def test_peer_connections_outlive_their_sasl_sessions(cluster: tuple[str, Processes]) -> None:
    bootstrap, procs = cluster
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "client",
        "sasl.password": "client-pw",
    }
    admin = AdminClient(conf)
    wait_until(lambda: len(admin.list_topics(timeout=5).brokers) == 2, "both brokers registered")
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, 2, 2)]).values():
        future.result(30)
    producer = Producer({**conf, "acks": "all"})
    deadline = time.monotonic() + 4 * LIFETIME_MS / 1000  # four session lifetimes
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, f"v-{sent}".encode(), partition=sent % 2)
        sent += 1
        assert producer.flush(10) == 0
        time.sleep(0.1)
    # On the code before re-authentication, each listener closed the peers' connections
    # once their sessions ended: logged as "the SASL session expired" (the first of each
    # minute), and the fetchers logged the broken connection.
    for node in (1, 2):
        log = procs.log(node)
        assert "session expired" not in log, f"node {node} closed a peer's expired session"
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    assert all(len(p.isrs) == 2 for p in partitions.values())
