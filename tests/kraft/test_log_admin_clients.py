"""DescribeLogDirs and DeleteRecords from real admin clients against a real single node:
kafka-python's describe_log_dirs and delete_records, confluent-kafka's delete_records, and
Kafka's own Java tools, ``kafka-log-dirs --describe`` and ``kafka-delete-records``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as ConfluentPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from kafka.structs import TopicPartition

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node

RECORDS = 50


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A single node; (bootstrap, its log dir)."""
    root = tmp_path_factory.mktemp("log-admin")
    log_dir = root / "logs"
    procs, bootstrap = single_node(root, {"log.dirs": str(log_dir)})
    try:
        yield bootstrap, log_dir
    finally:
        procs.cleanup()


def fill(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, f"record-{i}".encode())
    assert producer.flush(30) == 0


def first_offset(bootstrap: str, topic: str) -> int:
    """The earliest offset a consumer is told about."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        low, _ = consumer.get_watermark_offsets(ConfluentPartition(topic, 0), timeout=10)
        return int(low)
    finally:
        consumer.close()


def test_kafka_python_describes_log_dirs_and_deletes_records(node: tuple[str, Path]) -> None:
    bootstrap, log_dir = node
    fill(bootstrap, "kp")
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        (described,) = client.describe_log_dirs()
        (result,) = described["log_dirs"]
        assert result["error_code"] == 0 and result["log_dir"] == str(log_dir)
        topics = {topic["name"]: topic for topic in result["topics"]}
        (partition,) = topics["kp"]["partitions"]
        assert partition["partition_index"] == 0 and partition["partition_size"] > 0
        deleted = client.delete_records({TopicPartition("kp", 0): 20})
        assert deleted[TopicPartition("kp", 0)]["low_watermark"] == 20
    finally:
        client.close()
    assert first_offset(bootstrap, "kp") == 20


def test_confluent_kafka_deletes_records_and_gets_kafkas_errors(node: tuple[str, Path]) -> None:
    bootstrap, _ = node
    fill(bootstrap, "ck")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([ConfluentPartition("ck", 0, 35)]).values()
    assert future.result(30).low_watermark == 35
    (beyond,) = admin.delete_records([ConfluentPartition("ck", 0, RECORDS + 1)]).values()
    with pytest.raises(KafkaException, match="OFFSET_OUT_OF_RANGE"):
        beyond.result(30)
    assert first_offset(bootstrap, "ck") == 35


@pytest.mark.usefixtures("kafka_tools")
def test_kafkas_log_dirs_and_delete_records_tools(node: tuple[str, Path], tmp_path: Path) -> None:
    bootstrap, log_dir = node
    fill(bootstrap, "java")
    described = tools.run("log-dirs", "--bootstrap-server", bootstrap, "--describe")
    report = json.loads(described.stdout.strip().splitlines()[-1])
    (broker,) = report["brokers"]
    (dirs,) = broker["logDirs"]
    assert dirs["logDir"] == str(log_dir) and dirs["error"] is None
    java = next(p for p in dirs["partitions"] if p["partition"] == "java-0")
    assert java["size"] > 0 and java["offsetLag"] == 0 and java["isFuture"] is False

    offsets = tmp_path / "offsets.json"
    offsets.write_text(
        json.dumps({"partitions": [{"topic": "java", "partition": 0, "offset": 30}], "version": 1})
    )
    deleted = tools.run(
        "delete-records", "--bootstrap-server", bootstrap, "--offset-json-file", str(offsets)
    )
    assert "partition: java-0\tlow_watermark: 30" in deleted.stdout
    assert first_offset(bootstrap, "java") == 30
