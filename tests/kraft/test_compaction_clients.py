"""Log compaction seen by a real client: librdkafka (confluent-kafka) produces keyed records
and tombstones to compacted topics with small segments on the single combined node; once
the broker's background cleaner has run, a consumer reading from the start sees only the
latest record of every key, at its original offset (kafka-python reads the same). A
tombstone is still served while delete.retention.ms has not passed (so a consumer learns of
the deletion) and is gone after.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from tests.kraft.procs import Processes, single_node, wait_until

DEADLINE_S = 30.0
KEYS = 20
ROUNDS = 8
DELETED = range(5)  # keys 0..4 end with a tombstone
# The broker's cleaner looks for dirty logs every 100 ms from the start (Kafka: 15 s, 30 s).
BROKER = {"log.cleaner.backoff.ms": "100", "log.initial.task.delay.ms": "0"}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "1024",
    "min.cleanable.dirty.ratio": "0.01",
}


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, str]]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("data"), BROKER)
    try:
        yield procs, bootstrap
    finally:
        procs.cleanup()


def produce(producer: Producer, topic: str, records: list[tuple[bytes, bytes | None]]) -> None:
    """One batch per record (flushed each), so the records spread over many segments."""
    errors: list[object] = []
    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=lambda e, _m: errors.append(e))
        assert producer.flush(DEADLINE_S) == 0
    assert errors == [None] * len(records)


def read_from_start(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of everything up to the high watermark, by librdkafka."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), DEADLINE_S)
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[int, bytes, bytes | None]] = []
        deadline = time.monotonic() + DEADLINE_S
        while (not got or got[-1][0] < high - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            assert message.error() is None, message.error()
            got.append((message.offset(), message.key(), message.value()))
        assert got and got[-1][0] == high - 1, (got[-1:], high)
        return got
    finally:
        consumer.close()


def read_with_kafka_python(
    bootstrap: str, topic: str, end: int
) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of everything below ``end``, by kafka-python (pure Python)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    try:
        consumer.assign([KTopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got: list[tuple[int, bytes, bytes | None]] = []
        for message in consumer:  # ends after 5 s without a record
            got.append((message.offset, message.key, message.value))
            if message.offset >= end - 1:
                break
        return got
    finally:
        consumer.close()


def key(index: int) -> bytes:
    return b"key-%d" % index


def latest_per_key() -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {key(k): b"v%d-%d" % (ROUNDS - 1, k) for k in range(KEYS)}
    latest.update({key(k): None for k in DELETED})
    return latest


def compacted(records: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, bytes | None] | None:
    """The keyed records read, as key -> value, if no key appears twice (else None)."""
    keyed = [(k, v) for _, k, v in records if k.startswith(b"key-")]
    result = dict(keyed)
    return result if len(result) == len(keyed) else None


def test_a_consumer_from_the_start_sees_the_latest_value_of_every_key(
    single: tuple[Processes, str],
) -> None:
    procs, bootstrap = single
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = {
        "compacted-keep": {**TOPIC_CONFIG, "delete.retention.ms": "3600000"},
        "compacted-drop": {**TOPIC_CONFIG, "delete.retention.ms": "0"},
    }
    new = [NewTopic(name, 1, 1, config=config) for name, config in topics.items()]
    for future in admin.create_topics(new).values():
        future.result(DEADLINE_S)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    updates = [(key(k), b"v%d-%d" % (r, k)) for r in range(ROUNDS) for k in range(KEYS)]
    tombstones: list[tuple[bytes, bytes | None]] = [(key(k), None) for k in DELETED]
    # Unique keys after the real ones, so those all leave the active segment (never cleaned).
    padding = [(b"pad-%d" % i, b"x" * 100) for i in range(12)]
    for topic in topics:
        produce(producer, topic, [*updates, *tombstones, *padding])
    produced = len(updates) + len(tombstones) + len(padding)

    records = wait_until(
        lambda: (r := read_from_start(bootstrap, "compacted-keep")) and compacted(r) and r,
        "the cleaner compacts compacted-keep",
    )
    assert compacted(records) == latest_per_key()  # tombstones still served
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(offsets) and offsets[-1] == produced - 1  # offsets kept
    assert len(records) < produced
    assert read_with_kafka_python(bootstrap, "compacted-keep", produced) == records
    # delete.retention.ms=0: the pass after the one that saw a tombstone removes it.
    without_deleted = {k: v for k, v in latest_per_key().items() if v is not None}
    wait_until(
        lambda: compacted(read_from_start(bootstrap, "compacted-drop")) == without_deleted,
        "the expired tombstones are removed",
    )

    # More dirty data makes the cleaner pass over compacted-keep again: its tombstones,
    # an hour from their horizon, stay.
    produce(producer, "compacted-keep", [(b"pad-more-%d" % i, b"y" * 100) for i in range(24)])
    wait_until(
        lambda: first_dirty_offset(procs, "compacted-keep") > produced,
        "the cleaner passes over compacted-keep again",
    )
    assert compacted(read_from_start(bootstrap, "compacted-keep")) == latest_per_key()


def first_dirty_offset(procs: Processes, topic: str) -> int:
    """The broker's cleaner-offset-checkpoint entry for ``topic``-0 (-1 if none yet)."""
    path = procs.root / "data1" / "cleaner-offset-checkpoint"
    lines = path.read_text().splitlines() if path.exists() else []
    entries = {tuple(line.split()[:2]): int(line.split()[2]) for line in lines[2:]}
    return entries.get((topic, "0"), -1)
