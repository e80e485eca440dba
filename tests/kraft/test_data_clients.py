"""Real Kafka producers and consumers against the README's single combined node.

kcat, confluent-kafka (librdkafka) and kafka-python produce (acks 0, 1 and all; no, gzip and
zstd compression) and consume what was committed, in order per partition; offsets by time and
the watermarks come back as Kafka gives them; the data survives a SIGKILL and restart; and a
deleted topic's data is gone when the name is created again.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KTopicPartition

from tests.kraft.procs import Processes, port_open, single_node, wait_until

KCAT = shutil.which("kcat") or "kcat"  # scripts/test.sh installs it
DEADLINE_S = 30.0


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, str]]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("data"))
    try:
        yield procs, bootstrap
    finally:
        procs.cleanup()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(DEADLINE_S)


def wait_open(bootstrap: str, name: str) -> None:
    """Until partition 0 of ``name`` answers ListOffsets from its leader. Metadata names a
    leader once the controller has placed it, before the leader's replica manager has
    opened the partition (Kafka's order too); a produce in between is refused with a
    retriable error, which an acks=0 producer never sees: its records are gone, as with
    Kafka. The acks=0 test waits this out before producing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:

        def opened() -> bool:
            try:
                consumer.get_watermark_offsets(TopicPartition(name, 0), timeout=5)
            except KafkaException:
                return False
            return True

        wait_until(opened, f"{name} is open on its leader")
    finally:
        consumer.close()


def consume_all(
    bootstrap: str, topic: str, partitions: int, count: int
) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of ``count`` records read from the start, by librdkafka."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.partition(), message.offset(), message.value()))
    finally:
        consumer.close()
    return got


def test_librdkafka_produces_with_acks_all_and_zstd_and_consumes_in_order(
    single: tuple[Processes, str],
) -> None:
    _, bootstrap = single
    create_topic(bootstrap, "events", 3)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "compression.type": "zstd"})
    reports: list[tuple[object, int, int]] = []
    for i in range(600):
        producer.produce(
            "events",
            key=f"user-{i % 11}".encode(),
            value=f"event-{i}".encode(),
            on_delivery=lambda err, msg: reports.append((err, msg.partition(), msg.offset())),
        )
    assert producer.flush(DEADLINE_S) == 0
    assert [err for err, _, _ in reports if err is not None] == []
    got = consume_all(bootstrap, "events", 3, 600)
    assert sorted(value for _, _, value in got) == sorted(f"event-{i}".encode() for i in range(600))
    for partition in range(3):
        offsets = [offset for p, offset, _ in got if p == partition]
        assert offsets == list(range(len(offsets)))  # dense, in order, from 0
    acked = {(p, o) for _, p, o in reports}
    assert acked == {(p, o) for p, o, _ in got}  # every acknowledged offset holds its record

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition("events", 0), DEADLINE_S)
        assert (low, high) == (0, sum(1 for p, _, _ in got if p == 0))
    finally:
        consumer.close()


def test_kafka_python_produces_gzip_and_reads_offsets_by_time(
    single: tuple[Processes, str],
) -> None:
    _, bootstrap = single
    create_topic(bootstrap, "metrics", 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, compression_type="gzip")
    # An hour ago: inside retention.ms (a week), so the retention task cannot delete them
    # between the produce and the reads (stamps in 1970 made this test flaky).
    base = int(time.time() * 1000) - 3_600_000
    sent = [
        producer.send("metrics", value=f"m{i}".encode(), partition=i % 2, timestamp_ms=base + i)
        for i in range(40)
    ]
    producer.flush()
    offsets = [future.get(DEADLINE_S).offset for future in sent]
    assert offsets[:4] == [0, 0, 1, 1]
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=5000
    )
    try:
        partitions = [KTopicPartition("metrics", p) for p in (0, 1)]
        consumer.assign(partitions)
        values = [record.value for record in consumer]
        assert sorted(values) == sorted(f"m{i}".encode() for i in range(40))
        assert consumer.end_offsets(partitions) == {p: 20 for p in partitions}
        by_time = consumer.offsets_for_times({partitions[1]: base + 21})
        assert (by_time[partitions[1]].offset, by_time[partitions[1]].timestamp) == (10, base + 21)
        assert consumer.offsets_for_times({partitions[0]: base + 99_999}) == {partitions[0]: None}
    finally:
        consumer.close()


def test_kcat_round_trip_with_acks_0_survives_a_sigkill_and_restart(
    single: tuple[Processes, str],
) -> None:
    procs, bootstrap = single
    create_topic(bootstrap, "lines", 1)
    wait_open(bootstrap, "lines")
    lines = "".join(f"line {i}\n" for i in range(50))
    subprocess.run(
        [KCAT, "-b", bootstrap, "-P", "-t", "lines", "-X", "acks=0"],
        input=lines,
        text=True,
        check=True,
        timeout=DEADLINE_S,
    )

    def read() -> str:
        result = subprocess.run(
            [KCAT, "-b", bootstrap, "-C", "-t", "lines", "-e", "-q", "-f", "%o %s\n"],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        return result.stdout

    expected = "".join(f"{i} line {i}\n" for i in range(50))
    assert wait_until(lambda: read() == expected, "kcat reads the 50 lines") is True
    procs.kill(1)
    procs.start(1)
    host, port = bootstrap.split(":")
    wait_until(lambda: port_open(host, int(port)), "the restarted broker listens")
    assert read() == expected


def test_a_deleted_topic_name_comes_back_empty(single: tuple[Processes, str]) -> None:
    _, bootstrap = single
    create_topic(bootstrap, "scratch", 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce("scratch", value=b"old")
    assert producer.flush(DEADLINE_S) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(["scratch"]).values():
        future.result(DEADLINE_S)
    wait_until(
        lambda: "scratch" not in admin.list_topics(timeout=DEADLINE_S).topics,
        "the deletion is visible",
    )
    create_topic(bootstrap, "scratch", 1)
    producer.produce("scratch", value=b"new")
    assert producer.flush(DEADLINE_S) == 0
    assert consume_all(bootstrap, "scratch", 1, 1) == [(0, 0, b"new")]


def test_default_idempotent_producers_and_auto_created_topics(
    single: tuple[Processes, str],
) -> None:
    """kafka-python 3 and librdkafka with enable.idempotence ask InitProducerId and number
    their batches; kcat producing to a topic nobody created gets it auto-created, as with
    Kafka's defaults."""
    _, bootstrap = single
    producer = KafkaProducer(bootstrap_servers=bootstrap)  # idempotent by default
    offsets = [producer.send("auto-a", f"k{i}".encode()).get(DEADLINE_S).offset for i in range(5)]
    producer.close()
    assert offsets == [0, 1, 2, 3, 4]
    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    errors: list[object] = []
    for i in range(200):
        idempotent.produce("auto-a", f"c{i}".encode(), on_delivery=lambda e, _m: errors.append(e))
    assert idempotent.flush(DEADLINE_S) == 0
    assert errors == [None] * 200
    got = consume_all(bootstrap, "auto-a", 1, 205)
    assert [offset for _, offset, _ in got] == list(range(205))  # each record once
    subprocess.run(
        [KCAT, "-b", bootstrap, "-P", "-t", "auto-b"],
        input="one\ntwo\n",
        text=True,
        check=True,
        timeout=DEADLINE_S,
    )
    assert consume_all(bootstrap, "auto-b", 1, 2) == [(0, 0, b"one"), (0, 1, b"two")]
