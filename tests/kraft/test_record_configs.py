"""Topic record configs are honoured as Apache Kafka honours them, seen by real clients
against the single combined node: compression.type makes the broker store its codec,
message.timestamp.type=LogAppendTime makes producers and consumers see the broker's time,
and message.timestamp.after.max.ms refuses a producer's far-future timestamp."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import InvalidTimestampError

from log.batch import Compression, iter_batches
from tests.kraft.procs import Processes, single_node

DEADLINE_S = 30.0
HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, str]]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("data"))
    try:
        yield procs, bootstrap
    finally:
        procs.cleanup()


def create(bootstrap: str, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        future.result(DEADLINE_S)


def consume(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, tuple[int, int]]]:
    """(value, (timestamp type, timestamp)) of the first ``count`` records, by librdkafka."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[bytes, tuple[int, int]]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.value(), message.timestamp()))
    finally:
        consumer.close()
    return got


def stored_codecs(root: Path, topic: str) -> list[Compression]:
    data = (root / "data1" / f"{topic}-0" / f"{0:020d}.log").read_bytes()
    return [header.compression for _, header in iter_batches(data)]


def test_compression_type_and_log_append_time_are_applied_by_the_broker(
    single: tuple[Processes, str],
) -> None:
    procs, bootstrap = single
    # retention.ms=-1: the CreateTime below is long ago, and the retention task must not
    # delete the records between the produce and the reads.
    create(bootstrap, "stored-zstd", {"compression.type": "zstd", "retention.ms": "-1"})
    create(bootstrap, "append-time", {"message.timestamp.type": "LogAppendTime"})
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "gzip"})
    reports: list[tuple[object, tuple[int, int]]] = []
    before_ms = int(time.time() * 1000)
    for topic in ("stored-zstd", "append-time"):
        for i in range(20):
            producer.produce(
                topic,
                value=f"{topic}-{i}".encode(),
                timestamp=1_000 + i,  # the producer's CreateTime, long ago
                on_delivery=lambda err, msg: reports.append((err, msg.timestamp())),
            )
        assert producer.flush(DEADLINE_S) == 0
    after_ms = int(time.time() * 1000)
    assert [err for err, _ in reports] == [None] * 40

    zstd = consume(bootstrap, "stored-zstd", 20)
    assert [value for value, _ in zstd] == [f"stored-zstd-{i}".encode() for i in range(20)]
    assert [timestamp for _, (_, timestamp) in zstd] == [1_000 + i for i in range(20)]
    assert set(stored_codecs(procs.root, "stored-zstd")) == {Compression.ZSTD}

    stamped = consume(bootstrap, "append-time", 20)
    assert [value for value, _ in stamped] == [f"append-time-{i}".encode() for i in range(20)]
    kinds = {kind for _, (kind, _) in stamped}
    times = {timestamp for _, (_, timestamp) in stamped}
    assert kinds == {TIMESTAMP_LOG_APPEND_TIME}
    assert all(before_ms - 1_000 <= t <= after_ms + 1_000 for t in times), times
    # The producer learns the broker's time from the Produce response too.
    acknowledged = {timestamp for _, (kind, timestamp) in reports[20:]}
    assert {kind for _, (kind, _) in reports[20:]} == {TIMESTAMP_LOG_APPEND_TIME}
    assert acknowledged == times


def test_a_timestamp_past_message_timestamp_after_max_ms_is_refused(
    single: tuple[Processes, str],
) -> None:
    _, bootstrap = single
    create(bootstrap, "strict-time", {"message.timestamp.after.max.ms": "60000"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        future = producer.send(
            "strict-time", b"late", timestamp_ms=int(time.time() * 1000) + HOUR_MS
        )
        with pytest.raises(InvalidTimestampError):
            future.get(DEADLINE_S)
        ok = producer.send("strict-time", b"now").get(DEADLINE_S)
    finally:
        producer.close()
    assert ok.offset == 0  # the refused batch took no offset
    assert [value for value, _ in consume(bootstrap, "strict-time", 1)] == [b"now"]
