"""Partition replication between real broker processes: the shipped 3-controller + 3-broker
layout (config/cluster/, on free ports), a topic with replication factor 3 and
min.insync.replicas=2, confluent-kafka producing with acks=all.

One scenario, step by step, each step's ISR read back from Metadata (librdkafka) and from
Kafka's own ``kafka-topics --describe`` (Java) and checked:
- the partition leader is SIGKILLed mid-stream (confluent-kafka and the Java console
  producer both writing) and restarted: every acknowledged record is read back exactly once
  at its acknowledged offset, and the old leader (which truncates whatever it had beyond the
  new leader's log) rejoins the ISR;
- a follower is SIGSTOPped: the ISR shrinks once replica.lag.time.max.ms passes and acks=all
  keeps working; SIGCONT: it rejoins;
- two of the three brokers down: acks=all fails with NOT_ENOUGH_REPLICAS.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kraft.properties import parse_properties
from tests import kafka_tools as tools
from tests.kafka_tools import (
    SCRIPT,
    kafka_tools,  # noqa: F401  (pytest fixture: installs once)
)
from tests.kraft.procs import Processes, free_port, port_open, wait_until

CLUSTER = Path(__file__).resolve().parents[2] / "config" / "cluster"
CONTROLLERS = (1, 2, 3)
BROKERS = (4, 5, 6)
TOPIC = "replicated"
LAG_MS = 2000  # well inside broker.session.timeout.ms (9 s): the leader shrinks, not fencing
DEADLINE_S = 60.0


def cluster_nodes(root: Path) -> tuple[dict[int, dict[str, str]], dict[int, tuple[str, int]]]:
    """The shipped configs with free ports and a low lag time."""
    nodes: dict[int, dict[str, str]] = {}
    ports = {}
    for node in CONTROLLERS + BROKERS:
        kind = "controller" if node in CONTROLLERS else "broker"
        text = (CLUSTER / f"{kind}-{node}.properties").read_text()
        nodes[node] = dict(parse_properties(text))
        host = nodes[node]["listeners"].split("://")[1].rsplit(":", 1)[0]
        ports[node] = (host, free_port(host))
    voters = ",".join(f"{n}@{ports[n][0]}:{ports[n][1]}" for n in CONTROLLERS)
    for node, props in nodes.items():
        host, port = ports[node]
        name = "CONTROLLER" if node in CONTROLLERS else "PLAINTEXT"
        props["controller.quorum.voters"] = voters
        props["listeners"] = f"{name}://{host}:{port}"
        props.pop("advertised.listeners", None)
        props["log.dirs"] = str(root / f"data{node}")
        props["replica.lag.time.max.ms"] = str(LAG_MS)
        props["broker.heartbeat.interval.ms"] = "500"
        props["metrics.listener"] = f"http://{host}:{free_port(host)}"  # shipped: 9404
    return nodes, ports


@contextlib.contextmanager
def running_cluster(
    root: Path, broker_props: dict[str, str], deadline_s: float | None = None
) -> Iterator[tuple[Processes, dict[int, tuple[str, int]]]]:
    """The shipped layout (``cluster_nodes``) with ``broker_props`` added to every broker,
    started until each broker serves; every process cleaned up on exit."""
    nodes, ports = cluster_nodes(root)
    for node in BROKERS:
        nodes[node] |= broker_props
    procs = Processes(root, nodes)
    try:
        for node in nodes:
            procs.start(node)
        for node in BROKERS:
            serves = f"broker {node} serves"
            if deadline_s is None:
                wait_until(lambda n=node: port_open(*ports[n]), serves)
            else:
                wait_until(lambda n=node: port_open(*ports[n]), serves, deadline_s)
        yield procs, ports
    finally:
        procs.cleanup()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, dict]]:
    root = tmp_path_factory.mktemp("replication")
    nodes, ports = cluster_nodes(root)
    procs = Processes(root, nodes)
    try:
        for node in nodes:
            procs.start(node)
        for node in BROKERS:
            wait_until(lambda n=node: port_open(*ports[n]), f"broker {node} serves", DEADLINE_S)
        yield procs, ports
    finally:
        procs.cleanup()


def bootstrap(ports: dict, brokers: tuple[int, ...] = BROKERS) -> str:
    return ",".join(f"{ports[b][0]}:{ports[b][1]}" for b in brokers)


def partition_state(servers: str) -> tuple[int, tuple[int, ...]] | None:
    """(leader, ISR) of the topic's partition 0 as Metadata reports it."""
    admin = AdminClient({"bootstrap.servers": servers})
    metadata = admin.list_topics(TOPIC, timeout=5)
    topic = metadata.topics.get(TOPIC)
    if topic is None or topic.error is not None or 0 not in topic.partitions:
        return None
    found = topic.partitions[0]
    return found.leader, tuple(sorted(found.isrs))


def wait_isr(servers: str, isr: tuple[int, ...], what: str) -> int:
    """Until Metadata shows exactly ``isr`` with a leader in it; the leader."""

    def check() -> int | None:
        try:
            state = partition_state(servers)
        except KafkaException:  # a broker mid-restart: ask again
            return None
        if state is not None and state[1] == isr and state[0] in isr:
            return state[0]
        return None

    return wait_until(check, what, DEADLINE_S)


def java_isr(servers: str) -> tuple[int, ...]:
    """The ISR of partition 0 as Kafka's own kafka-topics --describe prints it."""
    described = tools.run("topics", "--bootstrap-server", servers, "--describe", "--topic", TOPIC)
    found = re.search(r"Partition: 0\s+Leader: \S+\s+Replicas: \S+\s+Isr: (\S+)", described.stdout)
    assert found is not None, described.stdout
    return tuple(sorted(int(b) for b in found.group(1).split(",")))


def java_producer(servers: str, count: int) -> subprocess.Popen[str]:
    """Kafka's console producer (acks=all, idempotent: the Java client's defaults), writing
    ``java-0`` .. ``java-{count-1}``; it exits once every record is acknowledged."""
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "console-producer", "--bootstrap-server", servers,
         "--topic", TOPIC, "--producer-property", "acks=all",
         "--producer-property", "delivery.timeout.ms=60000"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write("".join(f"java-{i}\n" for i in range(count)))
    proc.stdin.close()
    return proc


class Acked:
    """Delivery reports of one producer: (offset, value) of every acknowledged record."""

    def __init__(self) -> None:
        self.records: dict[bytes, int] = {}
        self.errors: list[KafkaError] = []

    def __call__(self, error: KafkaError | None, message: object) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.records[message.value()] = message.offset()  # type: ignore[attr-defined]


def produce(producer: Producer, acked: Acked, prefix: str, count: int) -> None:
    for i in range(count):
        producer.produce(TOPIC, value=f"{prefix}-{i}".encode(), partition=0, on_delivery=acked)
        producer.poll(0)
        time.sleep(0.002)  # a steady stream, so a crash lands mid-flight
    assert producer.flush(DEADLINE_S) == 0


def read_all(servers: str, end: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.usefixtures("kafka_tools")
def test_acks_all_survives_leader_crash_follower_stall_and_refuses_without_min_isr(
    cluster: tuple[Processes, dict],
) -> None:
    procs, ports = cluster
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    topic = NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[TOPIC].result(DEADLINE_S)
    leader = wait_isr(servers, BROKERS, "all three replicas in sync")
    assert java_isr(servers) == BROKERS

    # 1. SIGKILL the leader mid-stream, restart it.
    acked = Acked()
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
        }
    )
    java = java_producer(servers, 2000)
    produce(producer, acked, "before", 300)
    procs.kill(leader)
    survivors = tuple(b for b in BROKERS if b != leader)
    produce(producer, acked, "during", 300)
    new_leader = wait_isr(bootstrap(ports, survivors), survivors, "the ISR drops the leader")
    assert new_leader != leader
    assert java_isr(bootstrap(ports, survivors)) == survivors
    procs.start(leader)
    wait_isr(servers, BROKERS, "the old leader rejoins the ISR")
    assert java_isr(servers) == BROKERS
    produce(producer, acked, "after", 300)
    assert java.stderr is not None
    java.wait(timeout=DEADLINE_S * 2)
    java_errors = java.stderr.read()
    assert java.returncode == 0 and "Error" not in java_errors, java_errors
    assert acked.errors == []
    assert len(acked.records) == 900
    end = max(acked.records.values()) + 1
    got = read_all(servers, end)
    offsets = [offset for offset, _ in got]
    assert offsets == list(range(end))  # dense: one record per offset, none missing
    by_value = {value: offset for offset, value in got}
    assert len(by_value) == len(got)  # no record twice
    assert {v: by_value.get(v) for v in acked.records} == acked.records
    java_values = {v for v in by_value if v.startswith(b"java-")}
    assert java_values == {f"java-{i}".encode() for i in range(2000)}

    # 2. SIGSTOP a follower: the ISR shrinks after the lag time, acks=all still works.
    leader = wait_isr(servers, BROKERS, "all in sync")
    follower = next(b for b in BROKERS if b != leader)
    procs.procs[follower].send_signal(signal.SIGSTOP)
    try:
        # Writes keep coming (an idle partition never leaves a follower behind, as in
        # Kafka): they wait for the stalled follower until the leader drops it.
        stalled = Acked()
        for i in range(50):
            producer.produce(TOPIC, value=f"stalled-{i}".encode(), partition=0, on_delivery=stalled)
        producer.poll(0)
        rest = tuple(b for b in BROKERS if b != follower)
        wait_isr(bootstrap(ports, rest), rest, "the stalled follower leaves the ISR")
        # The leader removed it (lag), not the controller (fencing comes later).
        assert "Shrinking ISR" in procs.log(leader)
        # (No kafka-topics here: the Java admin client may pick the stopped broker, which
        # accepts connections and never answers, and time out, as it would against Kafka.)
        assert producer.flush(DEADLINE_S) == 0
        assert stalled.errors == [] and len(stalled.records) == 50
    finally:
        procs.procs[follower].send_signal(signal.SIGCONT)
    wait_isr(servers, BROKERS, "the resumed follower rejoins")

    # 3. Two of three brokers down: acks=all is refused, nothing acknowledged.
    leader = wait_isr(servers, BROKERS, "all in sync")
    others = [b for b in BROKERS if b != leader]
    for broker in others:
        procs.kill(broker)
    wait_isr(bootstrap(ports, (leader,)), (leader,), "the ISR is the leader alone")
    assert java_isr(bootstrap(ports, (leader,))) == (leader,)
    refused = Acked()
    strict = Producer(
        {
            "bootstrap.servers": bootstrap(ports, (leader,)),
            "acks": "all",
            "retries": 0,
            "message.timeout.ms": 10_000,
        }
    )
    strict.produce(TOPIC, value=b"refused", partition=0, on_delivery=refused)
    strict.flush(DEADLINE_S)
    assert refused.records == {}
    assert [e.code() for e in refused.errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
