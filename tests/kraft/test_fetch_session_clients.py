"""Real consumers over fetch sessions (KIP-227) against real broker processes: one
controller and three brokers, a topic of three partitions with replication factor 3.

The Java consumer (Kafka's console consumer: Fetch v13, sessions keyed by topic id) and
kafka-python (Fetch v12, sessions keyed by name) open incremental sessions; librdkafka
(confluent-kafka) and aiokafka fetch sessionless (epoch -1), which must keep working. All four
read every record exactly once while the leader of one partition is SIGKILLed mid-stream and
restarted: the consumers move that partition to the new leader's session, and back.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioPartition
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KpPartition

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import Processes, free_port, port_open, wait_until

CONTROLLER = 1
BROKERS = (2, 3, 4)
TOPIC = "sessions"
PARTITIONS = 3
PER_PHASE = 150  # records per partition in each of the two phases
TOTAL = 2 * PER_PHASE * PARTITIONS
DEADLINE_S = 90.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, dict]]:
    root = tmp_path_factory.mktemp("fetch-sessions")
    host = "127.0.0.1"
    ports = {node: free_port(host) for node in (CONTROLLER, *BROKERS)}
    nodes: dict[int, dict[str, str]] = {}
    for node, port in ports.items():
        controller = node == CONTROLLER
        nodes[node] = {
            "process.roles": "controller" if controller else "broker",
            "node.id": str(node),
            "controller.quorum.voters": f"{CONTROLLER}@{host}:{ports[CONTROLLER]}",
            "listeners": f"{'CONTROLLER' if controller else 'PLAINTEXT'}://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(root / f"data{node}"),
            "broker.heartbeat.interval.ms": "500",
            "replica.lag.time.max.ms": "3000",
            "offsets.topic.replication.factor": "3",
            "auto.leader.rebalance.enable": "false",
        }
    procs = Processes(root, nodes)
    try:
        for node in nodes:
            procs.start(node)
        for node in BROKERS:
            wait_until(lambda n=node: port_open(host, ports[n]), f"broker {node}", DEADLINE_S)
        yield procs, {node: (host, port) for node, port in ports.items()}
    finally:
        procs.cleanup()


def bootstrap(ports: dict, brokers: tuple[int, ...] = BROKERS) -> str:
    return ",".join(f"{ports[b][0]}:{ports[b][1]}" for b in brokers)


def leader_of(servers: str, partition: int) -> int | None:
    try:
        topic = AdminClient({"bootstrap.servers": servers}).list_topics(TOPIC, timeout=5)
    except KafkaException:  # a broker mid-restart: ask again
        return None
    found = topic.topics[TOPIC].partitions.get(partition) if TOPIC in topic.topics else None
    if found is None or found.leader < 0 or len(found.isrs) != len(BROKERS):
        return None
    return int(found.leader)


def produce(servers: str, phase: str) -> None:
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 5})
    errors: list[object] = []
    for partition in range(PARTITIONS):
        for i in range(PER_PHASE):
            value = f"{phase}-{partition}-{i}".encode()
            producer.produce(
                TOPIC, value=value, partition=partition, on_delivery=lambda e, _m: errors.append(e)
            )
            producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0
    assert [e for e in errors if e is not None] == []


def expected() -> set[bytes]:
    return {
        f"{phase}-{p}-{i}".encode()
        for phase in ("a", "b")
        for p in range(PARTITIONS)
        for i in range(PER_PHASE)
    }


Read = list[tuple[int, int, bytes]]  # (partition, offset, value)


def librdkafka(servers: str, out: Read) -> None:
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "rdkafka"})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(out) < TOTAL and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                out.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()


def kafka_python(servers: str, out: Read) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=servers.split(","), enable_auto_commit=False, group_id=None
    )
    consumer.assign([KpPartition(TOPIC, p) for p in range(PARTITIONS)])
    for p in range(PARTITIONS):
        consumer.seek(KpPartition(TOPIC, p), 0)
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(out) < TOTAL and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=200).values():
                out.extend((m.partition, m.offset, m.value) for m in batch)
    finally:
        consumer.close()


def aiokafka(servers: str, out: Read) -> None:
    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=servers, enable_auto_commit=False)
        await consumer.start()
        try:
            consumer.assign([AioPartition(TOPIC, p) for p in range(PARTITIONS)])
            for p in range(PARTITIONS):
                consumer.seek(AioPartition(TOPIC, p), 0)
            deadline = time.monotonic() + DEADLINE_S
            while len(out) < TOTAL and time.monotonic() < deadline:
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    out.extend((m.partition, m.offset, m.value) for m in batch)
        finally:
            await consumer.stop()

    asyncio.run(main())


def java_consumer(servers: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(tools.SCRIPT), "console-consumer", "--bootstrap-server", servers,
         "--topic", TOPIC, "--group", "java-sessions", "--from-beginning",
         "--max-messages", str(TOTAL), "--timeout-ms", str(int(DEADLINE_S * 1000)),
         "--property", "print.partition=true", "--property", "print.offset=true"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def check(name: str, got: Read) -> None:
    values = [value for _, _, value in got]
    assert len(values) == TOTAL and set(values) == expected(), (name, len(values))
    for p in range(PARTITIONS):
        offsets = [offset for partition, offset, _ in got if partition == p]
        assert offsets == list(range(2 * PER_PHASE)), (name, p)  # in order, once each


@pytest.mark.usefixtures("kafka_tools")
def test_consumers_read_everything_once_over_sessions_through_a_leader_change(
    cluster: tuple[Processes, dict],
) -> None:
    procs, ports = cluster
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(DEADLINE_S)
    leader = wait_until(lambda: leader_of(servers, 0), "partition 0 in sync", DEADLINE_S)
    produce(servers, "a")

    reads: dict[str, Read] = {"librdkafka": [], "kafka-python": [], "aiokafka": []}
    threads = [
        threading.Thread(target=librdkafka, args=(servers, reads["librdkafka"])),
        threading.Thread(target=kafka_python, args=(servers, reads["kafka-python"])),
        threading.Thread(target=aiokafka, args=(servers, reads["aiokafka"])),
    ]
    java = java_consumer(servers)
    for thread in threads:
        thread.start()
    wait_until(
        lambda: all(len(r) >= PER_PHASE for r in reads.values()), "consumers read", DEADLINE_S
    )

    # Mid-stream, partition 0's leader dies; the rest is written to the new leaders.
    procs.kill(leader)
    survivors = tuple(b for b in BROKERS if b != leader)
    produce(bootstrap(ports, survivors), "b")
    procs.start(leader)
    for thread in threads:
        thread.join(DEADLINE_S)
    stdout, stderr = java.communicate(timeout=DEADLINE_S)
    assert java.returncode == 0, stderr
    for name, got in reads.items():
        check(name, got)
    java_read = [
        (int(m[1]), int(m[2]), m[3].encode())
        for m in re.finditer(r"Partition:(\d+)\s+Offset:(\d+)\s+(\S+)", stdout)
    ]
    check("java", java_read)

    # The session-keeping clients did keep sessions: Java by topic id, kafka-python by name.
    logs = "".join(procs.log(b) for b in BROKERS)
    created = re.findall(r"Created fetch session \d+ for a (\w+) .*topic ids: (\w+)", logs)
    assert ("consumer", "True") in created, created
    assert ("consumer", "False") in created, created
    assert ("follower", "False") in created, created
