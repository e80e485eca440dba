"""Coordinator failover on the shipped 3-controller + 3-broker layout: the broker that
coordinates a group is SIGKILLed while the group's consumer commits after every record; the
group moves to another broker and no acknowledged commit is lost.

It needs partition replication (follower fetch), as the group's offsets partition is
replicated to three brokers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.group.records import partition_for
from tests.kraft.procs import Processes, wait_until
from tests.kraft.test_replication import BROKERS, bootstrap, running_cluster

GROUP = "failover"
OFFSETS_PARTITIONS = 3
RECORDS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, dict]]:
    props = {
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "group.initial.rebalance.delay.ms": "0",
    }
    with running_cluster(tmp_path_factory.mktemp("failover"), props) as running:
        yield running


def coordinator_of(servers: str) -> int | None:
    admin = AdminClient({"bootstrap.servers": servers})
    topic = admin.list_topics("__consumer_offsets", timeout=5).topics.get("__consumer_offsets")
    if topic is None or topic.error is not None:
        return None
    leader = topic.partitions[partition_for(GROUP, OFFSETS_PARTITIONS)].leader
    return leader if leader >= 0 else None


def test_a_killed_coordinator_loses_no_acknowledged_commit(cluster: tuple[Processes, dict]) -> None:
    procs, ports = cluster
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic("fo-events", 1, 3)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": servers, "acks": "all"})
    for i in range(RECORDS):
        producer.produce("fo-events", value=str(i).encode())
    assert producer.flush(30) == 0
    consumer = Consumer({
        "bootstrap.servers": servers, "group.id": GROUP, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
    })  # fmt: skip
    consumer.subscribe(["fo-events"])
    acknowledged: list[int] = []
    killed = None
    deadline = time.monotonic() + 90
    while (not acknowledged or acknowledged[-1] < RECORDS) and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None or message.error() is not None:
            continue
        try:
            done = consumer.commit(message=message, asynchronous=False)
        except KafkaException:
            continue  # not acknowledged: may or may not be kept
        if done[0].error is None:
            acknowledged.append(done[0].offset)
        if killed is None and len(acknowledged) == 30:
            killed = wait_until(lambda: coordinator_of(servers), "a coordinator")
            procs.kill(killed)
    consumer.close()
    assert killed is not None and acknowledged[-1] == RECORDS
    alive = tuple(b for b in BROKERS if b != killed)
    moved = wait_until(lambda: coordinator_of(bootstrap(ports, alive)), "the group moves")
    assert moved != killed
    reader = Consumer({"bootstrap.servers": bootstrap(ports, alive), "group.id": GROUP})
    committed = reader.committed([TopicPartition("fo-events", 0)], timeout=20)[0].offset
    reader.close()
    assert committed == RECORDS  # the last acknowledged commit, on the new coordinator
    assert acknowledged == sorted(acknowledged)
