"""Transaction coordinator failover on the shipped 3-controller + 3-broker layout
(``__transaction_state`` and ``__consumer_offsets`` at their defaults: replication factor 3,
the transaction log's min ISR 2): a transactional producer commits an offset in every
transaction while the broker coordinating its transactional id is SIGKILLed. The id moves
to another broker, which loads its state; every acknowledged commit is kept, no transaction
is left open, and the markers reach an offsets partition led by another broker over the
inter-broker listener.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.group.records import partition_for
from tests.kraft.procs import Processes, port_open, wait_until
from tests.kraft.test_replication import BROKERS, bootstrap, cluster_nodes
from tests.kraft.test_txn_clients import describe

TXN_ID = "failover-tx"
GROUP = "txn-failover"
TOPIC = "txn-failover-in"
PARTITIONS = 3
TRANSACTIONS = 40


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, dict]]:
    root = tmp_path_factory.mktemp("txn-failover")
    nodes, ports = cluster_nodes(root)
    for node in BROKERS:
        nodes[node] |= {
            "offsets.topic.num.partitions": str(PARTITIONS),
            "transaction.state.log.num.partitions": str(PARTITIONS),
            "group.initial.rebalance.delay.ms": "0",
        }
    procs = Processes(root, nodes)
    try:
        for node in nodes:
            procs.start(node)
        for node in BROKERS:
            wait_until(lambda n=node: port_open(*ports[n]), f"broker {node} serves")
        yield procs, ports
    finally:
        procs.cleanup()


def leader_of(servers: str, topic_name: str, key: str) -> int | None:
    admin = AdminClient({"bootstrap.servers": servers})
    topic = admin.list_topics(topic_name, timeout=5).topics.get(topic_name)
    if topic is None or topic.error is not None or not topic.partitions:
        return None
    leader = topic.partitions[partition_for(key, PARTITIONS)].leader
    return leader if leader >= 0 else None


def producer_for(servers: str) -> Producer:
    producer = Producer(
        {"bootstrap.servers": servers, "transactional.id": TXN_ID, "transaction.timeout.ms": 20_000}
    )
    producer.init_transactions(60)
    return producer


def test_a_killed_transaction_coordinator_loses_no_committed_transaction(
    cluster: tuple[Processes, dict],
) -> None:
    procs, ports = cluster
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 3)]).values():
        future.result(30)
    metadata = Consumer({"bootstrap.servers": servers, "group.id": GROUP})
    group = metadata.consumer_group_metadata()
    metadata.close()
    producer = producer_for(servers)
    acknowledged: list[int] = []
    killed = None
    offset, deadline = 1, time.monotonic() + 120

    def retried(operation: Callable[..., object], *args: object) -> None:
        """librdkafka's rule: an operation failing with a retriable error is called again."""
        while True:
            try:
                operation(*args)
                return
            except KafkaException as raised:
                if not raised.args[0].retriable() or time.monotonic() > deadline:
                    raise

    while offset <= TRANSACTIONS and time.monotonic() < deadline:
        try:
            producer.begin_transaction()
            producer.produce(TOPIC, str(offset).encode())
            retried(producer.send_offsets_to_transaction, [TopicPartition(TOPIC, 0, offset)], group)
            retried(producer.commit_transaction)
        except KafkaException as raised:
            if raised.args[0].fatal():
                producer = producer_for(servers)  # a new instance fences what is left
            else:
                retried(producer.abort_transaction)
            continue  # not acknowledged: this offset is tried again
        acknowledged.append(offset)
        offset += 1
        if killed is None and len(acknowledged) == 10:
            killed = wait_until(
                lambda: leader_of(servers, "__transaction_state", TXN_ID), "a coordinator"
            )
            procs.kill(killed)
    assert killed is not None and acknowledged == list(range(1, TRANSACTIONS + 1))
    alive = tuple(b for b in BROKERS if b != killed)
    servers = bootstrap(ports, alive)
    moved = wait_until(lambda: leader_of(servers, "__transaction_state", TXN_ID), "it moves")
    assert moved != killed
    host, port = ports[moved]
    state = wait_until(
        lambda: (
            (found := describe(f"{host}:{port}", TXN_ID)).transaction_state == "CompleteCommit"
            and found
        ),
        "the last transaction completes",
    )
    assert state.partitions == frozenset()
    reader = Consumer({"bootstrap.servers": servers, "group.id": GROUP})
    committed = reader.committed([TopicPartition(TOPIC, 0)], timeout=30)[0].offset
    reader.close()
    assert committed == TRANSACTIONS  # the last acknowledged transaction's offset
