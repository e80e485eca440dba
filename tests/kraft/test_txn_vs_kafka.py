"""Transactions from real clients, side by side on kraft-py and on Apache Kafka 4.1.0 (issue
24: "commit, abort and read_committed exactly as against Apache Kafka").

The same script runs against a single kraft-server node and a single Apache Kafka node
(scripts/kafka-dist.sh's jars, installed on first use): librdkafka, aiokafka and
kafka-python transactional producers commit and abort transactions over two partitions,
with group offsets sent in them, beside a plain idempotent producer, and leave one
transaction open. Everything a client can observe is then recorded: the offset each
produced record got (so where every commit and abort marker went), the group offsets each
outcome left, the earliest, latest and last stable offsets ListOffsets gives, what
read_committed consumers of every client read (librdkafka, kafka-python, aiokafka, kcat and
Kafka's Java console consumer) and what a read_uncommitted one reads; then the open
transaction commits and a read_committed consumer reads on. The two records must be equal,
and the test checks on its own that they show what the script did (aborted and open records
hidden, committed ones visible), so two equally wrong answers cannot pass.

Producer ids and timestamps are not compared: they are each cluster's own."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata as AioOffsetAndMetadata
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata
from kafka.structs import TopicPartition as KpTopicPartition

from jepsen.servers import KRAFT_PY, ApacheKafka, NodeProgram
from tests import kafka_tools as tools
from tests.kafka_tools import (
    kafka_dist_lib,
    kafka_tools,  # noqa: F401  (pytest fixture: installs once)
)
from tests.kraft.procs import single_node, wait_until

TOPIC = "cmp"
PARTITIONS = (0, 1)
GROUP = "cmp-group"
DEADLINE_S = 60.0
# One node: the internal topics must fit it (the same keys on both servers).
PROPS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.num.partitions": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}

Read = tuple[tuple[int, int, str], ...]  # (partition, offset, value) in partition, offset order


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything the script lets a client see on one server."""

    produced: tuple[tuple[str, int, int], ...]  # (value, partition, offset) as acknowledged
    group_offsets: tuple[int, ...]  # GROUP's committed offset per partition (-1001: none)
    # per partition: (earliest, latest read_uncommitted, latest read_committed)
    list_offsets: tuple[tuple[int, int, int], ...]
    read_committed: dict[str, Read]  # per client, while one transaction is still open
    read_uncommitted: Read
    after_commit: Read  # read_committed once the open transaction committed


def librdkafka_transactions(bootstrap: str, produced: list[tuple[str, int, int]]) -> Producer:
    """Commit ``r1`` (offsets 5/7 in it), abort ``r2`` (offset 9 in it), then begin ``r3``
    and leave it open; the producer of the open transaction."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cmp-rdkafka"})

    def delivered(error: object, message: Message) -> None:
        assert error is None, error
        value = message.value()
        assert value is not None and message.partition() is not None
        offset = message.offset()
        assert offset is not None
        produced.append((value.decode(), message.partition(), offset))

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    metadata = consumer.consumer_group_metadata()
    consumer.close()
    producer.init_transactions(DEADLINE_S)
    for name, commit, offsets in (("r1", True, (5, 7)), ("r2", False, (9, 9))):
        producer.begin_transaction()
        for partition in PARTITIONS:
            for index in range(2):
                value = f"{name}-{partition}-{index}".encode()
                producer.produce(TOPIC, value, partition=partition, on_delivery=delivered)
        producer.flush(DEADLINE_S)
        positions = [TopicPartition(TOPIC, p, o) for p, o in zip(PARTITIONS, offsets, strict=True)]
        producer.send_offsets_to_transaction(positions, metadata, DEADLINE_S)
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"r3-open", partition=0, on_delivery=delivered)
    assert producer.flush(DEADLINE_S) == 0
    return producer


def plain_records(bootstrap: str, produced: list[tuple[str, int, int]]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, acks="all")
    try:
        for partition in PARTITIONS:
            value = f"plain-{partition}"
            sent = producer.send(TOPIC, value.encode(), partition=partition).get(DEADLINE_S)
            produced.append((value, sent.partition, sent.offset))
    finally:
        producer.close()


def kafka_python_transactions(bootstrap: str, produced: list[tuple[str, int, int]]) -> None:
    """Abort ``k1``, commit ``k2`` (offset 11 on partition 1 in it)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="cmp-kafka-python")
    try:
        producer.init_transactions()
        for name, commit in (("k1", False), ("k2", True)):
            producer.begin_transaction()
            value = f"{name}-1"
            sent = producer.send(TOPIC, value.encode(), partition=1).get(DEADLINE_S)
            produced.append((value, sent.partition, sent.offset))
            offsets = {KpTopicPartition(TOPIC, 1): KpOffsetAndMetadata(11, "", -1)}
            producer.send_offsets_to_transaction(offsets, GROUP)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()


async def aiokafka_transactions(bootstrap: str, produced: list[tuple[str, int, int]]) -> None:
    """Commit ``a1`` (offset 13 on partition 1 in it), abort ``a2`` (offset 15 in it)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="cmp-aiokafka")
    await producer.start()
    try:
        for name, commit, offset in (("a1", True, 13), ("a2", False, 15)):
            await producer.begin_transaction()
            for partition in PARTITIONS:
                value = f"{name}-{partition}"
                sent = await producer.send_and_wait(TOPIC, value.encode(), partition=partition)
                produced.append((value, sent.partition, sent.offset))
            offsets = {AioTopicPartition(TOPIC, 1): AioOffsetAndMetadata(offset, "")}
            await producer.send_offsets_to_transaction(offsets, GROUP)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()


def list_offsets(bootstrap: str) -> tuple[tuple[int, int, int], ...]:
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def ask(spec: OffsetSpec, isolation: IsolationLevel) -> dict[int, int]:
        wanted = {TopicPartition(TOPIC, p): spec for p in PARTITIONS}
        futures = admin.list_offsets(wanted, isolation_level=isolation)
        return {tp.partition: f.result(DEADLINE_S).offset for tp, f in futures.items()}

    earliest = ask(OffsetSpec.earliest(), IsolationLevel.READ_UNCOMMITTED)
    latest = ask(OffsetSpec.latest(), IsolationLevel.READ_UNCOMMITTED)
    stable = ask(OffsetSpec.latest(), IsolationLevel.READ_COMMITTED)
    return tuple((earliest[p], latest[p], stable[p]) for p in PARTITIONS)


def group_offsets(bootstrap: str) -> tuple[int, ...]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    try:
        found = consumer.committed([TopicPartition(TOPIC, p) for p in PARTITIONS], DEADLINE_S)
        return tuple(tp.offset for tp in found)
    finally:
        consumer.close()


def ordered(rows: list[tuple[int, int, str]]) -> Read:
    return tuple(sorted(rows))


def librdkafka_read(bootstrap: str, isolation: str, ends: dict[int, int]) -> Read:
    """Every record before ``ends`` (partition -> offset), read from offset 0."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cmp-reader-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    rows: list[tuple[int, int, str]] = []
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in PARTITIONS])

        def caught_up() -> bool:
            message = consumer.poll(0.2)
            if message is not None:
                if message.error() is not None:
                    raise KafkaException(message.error())
                value, partition, offset = message.value(), message.partition(), message.offset()
                assert value is not None and partition is not None and offset is not None
                rows.append((partition, offset, value.decode()))
            positions = consumer.position([TopicPartition(TOPIC, p) for p in PARTITIONS])
            return all(tp.offset >= ends[tp.partition] for tp in positions)

        wait_until(caught_up, f"librdkafka ({isolation}) reads up to {ends}", DEADLINE_S)
    finally:
        consumer.close()
    return ordered(rows)


def kafka_python_read(bootstrap: str, ends: dict[int, int]) -> Read:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    rows: list[tuple[int, int, str]] = []
    try:
        partitions = [KpTopicPartition(TOPIC, p) for p in PARTITIONS]
        consumer.assign(partitions)
        for partition in partitions:
            consumer.seek(partition, 0)

        def caught_up() -> bool:
            for messages in consumer.poll(timeout_ms=200).values():
                rows.extend((m.partition, m.offset, m.value.decode()) for m in messages)
            return all(consumer.position(tp) >= ends[tp.partition] for tp in partitions)

        wait_until(caught_up, f"kafka-python reads up to {ends}", DEADLINE_S)
    finally:
        consumer.close()
    return ordered(rows)


async def aiokafka_read(bootstrap: str, ends: dict[int, int]) -> Read:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await consumer.start()
    rows: list[tuple[int, int, str]] = []
    try:
        partitions = [AioTopicPartition(TOPIC, p) for p in PARTITIONS]
        consumer.assign(partitions)
        for partition in partitions:
            consumer.seek(partition, 0)
        deadline = time.monotonic() + DEADLINE_S
        while not all([await consumer.position(tp) >= ends[tp.partition] for tp in partitions]):
            assert time.monotonic() < deadline, f"aiokafka reads up to {ends}"
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                rows.extend((m.partition, m.offset, m.value.decode()) for m in messages)
    finally:
        await consumer.stop()
    return ordered(rows)


def kcat_read(bootstrap: str) -> Read:
    """kcat exits at each partition's end, which for read_committed is the last stable
    offset (librdkafka's end of partition)."""
    done = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", TOPIC, "-o", "beginning", "-e", "-q",
         "-X", "isolation.level=read_committed", "-f", "%p %o %s\\n"],
        capture_output=True, text=True, timeout=DEADLINE_S, check=True,
    )  # fmt: skip
    rows = [line.split(" ", 2) for line in done.stdout.splitlines()]
    return ordered([(int(p), int(o), value) for p, o, value in rows])


def java_read(bootstrap: str, count: int) -> Read:
    """Kafka's Java console consumer, read_committed, stopping after ``count`` records (the
    number librdkafka read on the same server) or 10 s without one."""
    rows: list[tuple[int, int, str]] = []
    for partition in PARTITIONS:
        done = tools.run(
            "console-consumer", "--bootstrap-server", bootstrap, "--topic", TOPIC,
            "--partition", str(partition), "--offset", "earliest",
            "--isolation-level", "read_committed", "--timeout-ms", "10000",
            "--property", "print.offset=true", "--property", "print.partition=true",
        )  # fmt: skip
        for line in done.stdout.splitlines():
            # "Partition:0\tOffset:5\tr1-0-0"
            fields = dict(part.split(":", 1) for part in line.split("\t")[:2])
            rows.append((int(fields["Partition"]), int(fields["Offset"]), line.split("\t")[2]))
    assert len(rows) == count, rows
    return ordered(rows)


def observe(bootstrap: str) -> Observed:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, len(PARTITIONS), 1)]).values():
        future.result(DEADLINE_S)
    produced: list[tuple[str, int, int]] = []
    open_producer = None
    try:
        plain_records(bootstrap, produced)
        kafka_python_transactions(bootstrap, produced)
        asyncio.run(asyncio.wait_for(aiokafka_transactions(bootstrap, produced), DEADLINE_S))
        open_producer = librdkafka_transactions(bootstrap, produced)
        offsets = list_offsets(bootstrap)
        stable = {p: offsets[p][2] for p in PARTITIONS}
        committed_reads = librdkafka_read(bootstrap, "read_committed", stable)
        read_committed = {
            "librdkafka": committed_reads,
            "kafka-python": kafka_python_read(bootstrap, stable),
            "aiokafka": asyncio.run(asyncio.wait_for(aiokafka_read(bootstrap, stable), 90)),
            "kcat": kcat_read(bootstrap),
            "java": java_read(bootstrap, len(committed_reads)),
        }
        uncommitted = librdkafka_read(
            bootstrap, "read_uncommitted", {p: offsets[p][1] for p in PARTITIONS}
        )
        groups = group_offsets(bootstrap)
        open_producer.commit_transaction(DEADLINE_S)
        open_producer = None
        latest = {
            p: end for p, (_, end, _) in zip(PARTITIONS, list_offsets(bootstrap), strict=True)
        }
        wait_until(
            lambda: all(lso == latest[p] for p, (_, _, lso) in enumerate(list_offsets(bootstrap))),
            "the last stable offsets reach the log ends once the open transaction committed",
        )
        after = librdkafka_read(bootstrap, "read_committed", latest)
    finally:
        if open_producer is not None:
            open_producer.abort_transaction(DEADLINE_S)
    return Observed(tuple(sorted(produced)), groups, offsets, read_committed, uncommitted, after)


def run_on(program: NodeProgram, root: Path) -> Observed:
    procs, bootstrap = single_node(root, PROPS, program=program)
    try:
        return observe(bootstrap)
    finally:
        procs.cleanup()


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Observed]]:
    tools.install()  # the Java console consumer
    kafka = ApacheKafka(kafka_dist_lib())
    yield {
        "kraft-py": run_on(KRAFT_PY, tmp_path_factory.mktemp("kraft-py")),
        "kafka": run_on(kafka, tmp_path_factory.mktemp("kafka")),
    }


def values(read: Read) -> set[str]:
    return {value for _, _, value in read}


def test_every_client_observes_the_same_transactions_as_on_apache_kafka(
    observed: dict[str, Observed],
) -> None:
    ours, kafkas = observed["kraft-py"], observed["kafka"]
    assert ours.produced == kafkas.produced
    assert ours.group_offsets == kafkas.group_offsets
    assert ours.list_offsets == kafkas.list_offsets
    assert ours.read_uncommitted == kafkas.read_uncommitted
    assert ours.after_commit == kafkas.after_commit
    for client, read in kafkas.read_committed.items():
        assert ours.read_committed[client] == read, client


def test_what_both_servers_showed_is_what_the_script_did(observed: dict[str, Observed]) -> None:
    """The comparison above is only worth something if the answers are right."""
    for server, seen in observed.items():
        produced = {value for value, _, _ in seen.produced}
        committed = {v for v in produced if v.split("-")[0] in ("r1", "k2", "a1", "plain")}
        for client, read in seen.read_committed.items():
            assert values(read) == committed, (server, client)
        assert values(seen.read_uncommitted) == produced, server
        assert values(seen.after_commit) == committed | {"r3-open"}, server
        # k2's 11 on partition 1, then a1's 13, then r1's 5 and 7 (librdkafka's last); k1,
        # a2 and r2 aborted theirs.
        assert seen.group_offsets == (5, 7), server
        (open_partition, open_offset) = next((p, o) for v, p, o in seen.produced if v == "r3-open")
        assert seen.list_offsets[open_partition][2] == open_offset, server
        assert seen.list_offsets[1][2] == seen.list_offsets[1][1], server
