"""Consumers read back byte for byte what the zero-copy fetch path serves (sendfile of
segment regions of 256 KiB or more, a read for smaller ones): librdkafka, kafka-python and
Kafka's Java console consumer, over batches of about 1 MiB and over many small ones."""

from __future__ import annotations

import random
import string
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node

DEADLINE_S = 60.0
# name: (values, producer batch.size, linger.ms): 1 MiB batches of 150 KiB values; then
# 1,500 values of about 100 bytes, each its own batch or a few.
TOPICS = {"large": (40, 150_000, 1 << 20, 100), "small": (1_500, 100, 1, 0)}


@pytest.fixture(scope="module")
def produced(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, dict[str, list[bytes]]]]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("data"))
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
            future.result(DEADLINE_S)
        rng = random.Random(7)
        values = {}
        for topic, (count, size, batch_size, linger_ms) in TOPICS.items():
            # Printable values, so the console consumer's lines compare as they are.
            values[topic] = [
                f"{i:06d}".encode() + "".join(rng.choices(string.ascii_letters, k=size)).encode()
                for i in range(count)
            ]
            producer = Producer(
                {
                    "bootstrap.servers": bootstrap,
                    "batch.size": batch_size,
                    "linger.ms": linger_ms,
                    "message.max.bytes": 2 << 20,
                }
            )
            for value in values[topic]:
                producer.produce(topic, value)
            assert producer.flush(DEADLINE_S) == 0
        yield bootstrap, values
    finally:
        procs.cleanup()


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_librdkafka_reads_every_value_byte_exact(
    produced: tuple[str, dict[str, list[bytes]]], topic: str
) -> None:
    bootstrap, values = produced
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < len(values[topic]) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    assert got == list(enumerate(values[topic]))


@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_kafka_python_reads_every_value_byte_exact(
    produced: tuple[str, dict[str, list[bytes]]], topic: str
) -> None:
    bootstrap, values = produced
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=int(DEADLINE_S * 1000),
        max_partition_fetch_bytes=4 << 20,
    )
    partition = KTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek_to_beginning(partition)
    got: list[tuple[int, bytes]] = []
    try:
        for message in consumer:
            got.append((message.offset, message.value))
            if len(got) == len(values[topic]):
                break
    finally:
        consumer.close()
    assert got == list(enumerate(values[topic]))


@pytest.mark.usefixtures("kafka_tools")
@pytest.mark.parametrize("topic", sorted(TOPICS))
def test_java_console_consumer_reads_every_value_byte_exact(
    produced: tuple[str, dict[str, list[bytes]]], topic: str
) -> None:
    bootstrap, values = produced
    out = tools.run(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
        "--partition", "0", "--offset", "earliest", "--max-messages", str(len(values[topic])),
        "--timeout-ms", "30000", "--consumer-property", "max.partition.fetch.bytes=4194304",
    )  # fmt: skip
    assert out.stdout.encode().splitlines() == values[topic], out.stderr[-3000:]
