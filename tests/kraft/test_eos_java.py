"""Exactly-once under faults on real processes (issue 24): Kafka's Java client runs a
consume-transform-produce job (tests/java/EosJob.java: a read_committed consumer, a
transactional producer, the consumed offsets sent to each transaction with the group's
metadata; transaction version 2, the cluster's default) as two members of one group, two
JVMs, on the shipped 3-controller + 3-broker layout (input and output topics of 3
partitions, replication factor 3, min.insync.replicas 2).

While an idempotent producer writes keyed input records (a sequence number per key), one
member is SIGKILLed mid-run and restarted with its transactional id (its open transaction
aborted, its partitions moved to the other member and back), then the broker leading an
input partition is SIGKILLed and restarted. Once the group's committed offsets reach the
input's end: every input record is in the output exactly once for a read_committed reader,
each key's records in their input order.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kafka_tools import (
    SCRIPT,
    kafka_tools,  # noqa: F401  (pytest fixture: installs once)
)
from tests.kraft.procs import Processes, port_open, wait_until
from tests.kraft.test_replication import BROKERS, bootstrap, cluster_nodes

pytestmark = pytest.mark.usefixtures("kafka_tools")
JOB = Path(__file__).resolve().parent.parent / "java" / "EosJob.java"
INPUT = "eos-input"
OUTPUT = "eos-output"
GROUP = "eos-job"
MEMBERS = ("eos-job-a", "eos-job-b")  # each member's transactional.id
PARTITIONS = 3
KEYS = 12
RECORDS = 3000
RATE_PER_S = 100  # the input's pace: the job is mid-stream at every kill
STEP_S = 60.0  # one phase (a JVM start, a leader election, a rebalance) on a loaded machine
DONE_S = 180.0  # the whole job once the input is written


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, dict]]:
    root = tmp_path_factory.mktemp("eos")
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
            wait_until(lambda n=node: port_open(*ports[n]), f"broker {node} serves", STEP_S)
        yield procs, ports
    finally:
        procs.cleanup()


class Member:
    """One job member: a JVM running EosJob.java, its output appended to a log file."""

    def __init__(self, root: Path, servers: str, txn_id: str) -> None:
        self.log = root / f"{txn_id}.log"
        self.args = [servers, INPUT, OUTPUT, GROUP, txn_id, str(root / "stop")]
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "a") as out:  # scripts/kafka-tools.sh execs java: one pid
            self.proc = subprocess.Popen(
                ["bash", str(SCRIPT), str(JOB), *self.args], stdout=out, stderr=subprocess.STDOUT
            )

    def text(self) -> str:
        return self.log.read_text()

    def ready(self) -> bool:
        """Its latest start has initialised its producer and subscribed."""
        return self.text().rsplit("\n--- restarted ---\n", 1)[-1].count("ready") > 0

    def kill(self) -> None:
        assert self.proc is not None and self.proc.poll() is None, self.text()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        with open(self.log, "a") as out:
            out.write("\n--- restarted ---\n")

    def stop(self) -> int:
        assert self.proc is not None
        return self.proc.wait(STEP_S)

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def committed(servers: str) -> dict[int, int] | None:
    """The group's committed input offsets (None while the group coordinator cannot
    answer, a broker down)."""
    admin = AdminClient({"bootstrap.servers": servers})
    request = ConsumerGroupTopicPartitions(
        GROUP, [TopicPartition(INPUT, p) for p in range(PARTITIONS)]
    )
    try:
        found = admin.list_consumer_group_offsets([request])[GROUP].result(10)
    except (KafkaException, TimeoutError):
        return None
    return {tp.partition: max(tp.offset, 0) for tp in found.topic_partitions}


def leader(servers: str, topic: str, partition: int) -> int | None:
    admin = AdminClient({"bootstrap.servers": servers})
    try:
        found = admin.list_topics(topic, timeout=5).topics[topic].partitions.get(partition)
    except KafkaException:
        return None
    return None if found is None or found.leader < 0 else found.leader


class InputWriter(threading.Thread):
    """Writes RECORDS keyed records at RATE_PER_S, idempotently (acks=all): value
    ``k{key}:{seq}``, each key always to partition key % PARTITIONS."""

    def __init__(self, servers: str) -> None:
        super().__init__(daemon=True)
        self.servers = servers
        self.errors: list[KafkaError] = []
        self.written = 0

    def report(self, error: KafkaError | None, _message: object) -> None:
        if error is not None:
            self.errors.append(error)

    def run(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self.servers,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        start = time.monotonic()
        for i in range(RECORDS):
            key, seq = i % KEYS, i // KEYS
            producer.produce(
                INPUT, key=f"k{key:02}", value=f"k{key:02}:{seq}",
                partition=key % PARTITIONS, on_delivery=self.report,
            )  # fmt: skip
            producer.poll(0)
            self.written = i + 1
            time.sleep(max(0.0, start + (i + 1) / RATE_PER_S - time.monotonic()))
        remaining = producer.flush(DONE_S)
        if remaining:
            self.errors.append(KafkaError(KafkaError._TIMED_OUT, f"{remaining} unflushed"))


def read_all(servers: str, topic: str, isolation: str) -> dict[int, list[tuple[str, str]]]:
    """(key, value) of every record of every partition, to its end (the last stable offset
    for read_committed), in offset order."""
    consumer = KafkaConsumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"check-{topic}-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    found: dict[int, list[tuple[str, str]]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        ended: set[int] = set()
        deadline = time.monotonic() + STEP_S
        while len(ended) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: no end of {ended} within {STEP_S}s"
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                ended.add(message.partition())
                continue
            key, value = (message.key() or b"").decode(), (message.value() or b"").decode()
            found[message.partition()].append((key, value))
    finally:
        consumer.close()
    return found


def test_a_consume_transform_produce_job_is_exactly_once_through_member_and_leader_kills(
    cluster: tuple[Processes, dict], tmp_path: Path
) -> None:
    procs, ports = cluster
    servers = bootstrap(ports)
    started = time.monotonic()
    admin = AdminClient({"bootstrap.servers": servers})
    topics = [
        NewTopic(name, PARTITIONS, 3, config={"min.insync.replicas": "2"})
        for name in (INPUT, OUTPUT)
    ]
    for future in admin.create_topics(topics).values():
        future.result(STEP_S)
    for name in (INPUT, OUTPUT):
        for p in range(PARTITIONS):
            wait_until(lambda n=name, q=p: leader(servers, n, q), f"{name}-{p} leads", STEP_S)

    members = [Member(tmp_path, servers, txn_id) for txn_id in MEMBERS]
    writer = InputWriter(servers)
    try:
        for member in members:
            wait_until(member.ready, f"{member.log.name}: ready", STEP_S)
        writer.start()

        def reached(count: int) -> int | None:
            """Records processed (committed by the group), once at least ``count``."""
            found = committed(servers)
            done = 0 if found is None else sum(found.values())
            return done if done >= count else None

        # 1. SIGKILL a member mid-run (its transaction open or committing), restart it.
        member_killed_at = wait_until(lambda: reached(RECORDS // 4), "a quarter done", DONE_S)
        members[0].kill()
        members[0].start()
        wait_until(members[0].ready, "the killed member is back", STEP_S)

        # 2. SIGKILL the broker leading input partition 0, restart it once another leads.
        broker_killed_at = wait_until(lambda: reached(RECORDS // 2), "half done", DONE_S)
        killed = wait_until(lambda: leader(servers, INPUT, 0), "input-0's leader", STEP_S)
        procs.kill(killed)
        survivors = bootstrap(ports, tuple(b for b in BROKERS if b != killed))
        wait_until(
            lambda: leader(survivors, INPUT, 0) not in (None, killed), "a new leader", STEP_S
        )
        procs.start(killed)
        wait_until(lambda: port_open(*ports[killed]), f"broker {killed} serves again", STEP_S)

        # 3. The input written and all of it processed: the group's offsets at its end.
        writer.join(DONE_S)
        assert not writer.is_alive() and writer.errors == []
        ends = {p: end for p, end in enumerate(watermarks(servers))}
        assert sum(ends.values()) == RECORDS  # idempotent: none twice
        wait_until(lambda: committed(servers) == ends, "the group reaches the end", DONE_S)
        (tmp_path / "stop").touch()
        for member in members:
            assert member.stop() == 0, member.text()
    finally:
        for member in members:
            member.cleanup()
    elapsed = time.monotonic() - started

    # Every input record in the output once, transformed, each key in its input order.
    source = read_all(servers, INPUT, "read_uncommitted")
    expected: dict[str, str] = {}  # "partition:offset" of an input record -> output value
    sequences: dict[str, list[int]] = {}
    for partition, records in source.items():
        for offset, (key, value) in enumerate(records):
            expected[f"{partition}:{offset}"] = f"{value.upper()}|{partition}:{offset}"
            sequences.setdefault(key, []).append(int(value.split(":")[1]))
    assert all(seqs == list(range(len(seqs))) for seqs in sequences.values()), sequences
    output = read_all(servers, OUTPUT, "read_committed")
    copies = Counter(value.rsplit("|", 1)[1] for records in output.values() for _, value in records)
    assert {s: n for s, n in copies.items() if n != 1} == {}, "duplicated"
    assert set(expected) - set(copies) == set(), "lost"
    assert set(copies) == set(expected)
    for records in output.values():
        for key, value in records:
            assert expected[value.rsplit("|", 1)[1]] == value and value.startswith(key.upper())
    output_sequences: dict[str, list[int]] = {}
    for records in output.values():
        for key, value in records:
            output_sequences.setdefault(key, []).append(int(value.split("|")[0].split(":")[1]))
    assert output_sequences == sequences  # per key: every record, in input order

    # The faults did abort work: what a read_uncommitted reader of the output sees besides.
    dirty = read_all(servers, OUTPUT, "read_uncommitted")
    dirty_copies = Counter(v.rsplit("|", 1)[1] for records in dirty.values() for _, v in records)
    logs = [member.text() for member in members]
    print(
        f"EOS: {RECORDS} records, member killed at {member_killed_at}, broker {killed} "
        f"killed at {broker_killed_at}, {elapsed:.0f}s; aborted "
        f"{sum(log.count('aborted:') for log in logs)}, restarted "
        f"{sum(log.count('restart:') for log in logs)}; read_uncommitted output "
        f"{sum(dirty_copies.values())} records, "
        f"{sum(n - 1 for n in dirty_copies.values())} extra copies"
    )
    assert member_killed_at < RECORDS and broker_killed_at < RECORDS  # kills were mid-run


def watermarks(servers: str) -> list[int]:
    consumer = KafkaConsumer({"bootstrap.servers": servers, "group.id": "eos-watermarks"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(INPUT, p), timeout=10)[1]
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()
