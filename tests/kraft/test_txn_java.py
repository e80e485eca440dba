"""Apache Kafka's own Java client and tools with the transaction coordinator, one node.

Kafka's KafkaProducer (4.1.0) commits and aborts transactions with offsets, and a second
producer with its transactional.id fences it, under transaction version 2 (KIP-890 part 2,
the cluster's default: an epoch bump per EndTxn, partitions and offsets added by Produce v12
and TxnOffsetCommit v5) and, once ``kafka-features`` downgrades it, version 1;
``kafka-transactions`` lists and describes transactions; Kafka's
TransactionLogMessageFormatter reads ``__transaction_state`` (our records are Kafka's format)
and shows each state the coordinator went through.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node
from tests.kraft.test_txn_clients import DEADLINE_S, PROPS, committed, settled

pytestmark = pytest.mark.usefixtures("kafka_tools")
PRODUCER = Path(__file__).resolve().parent.parent / "java" / "TxnProducer.java"
TOPIC = "txn-input"  # the name committed() reads offsets of
FEATURE = "org.apache.kafka.tools.FeatureCommand"  # kafka-features


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs, address = single_node(tmp_path_factory.mktemp("data"), PROPS)
    try:
        admin = AdminClient({"bootstrap.servers": address})
        for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
            future.result(DEADLINE_S)
        yield address
    finally:
        procs.cleanup()


def test_kafkas_java_producer_commits_aborts_and_is_fenced(bootstrap: str) -> None:
    out = tools.run(str(PRODUCER), bootstrap, TOPIC, "java-tx", "java-group").stdout
    assert out.splitlines() == [
        "committed",
        "aborted",
        "successor initialised",
        "zombie refused: ProducerFencedException",
        "successor committed",
    ]
    assert committed(bootstrap, "java-group", 0) == 11  # never 9, the aborted one
    # Transaction version 2 (the cluster's default, which the 4.1 client uses): epoch 0 for
    # the first producer, 1 after its commit, 2 after its abort, 3 to fence it, 4 for the
    # successor, 5 after the successor's commit.
    assert settled(bootstrap, "java-tx", "CompleteCommit").producer_epoch == 5
    # Its offsets reached the group with TxnOffsetCommit v5 alone (no AddOffsetsToTxn).
    assert read_committed(bootstrap, TOPIC, 0) == ["committed"]  # the zombie's "zombie" aborted
    assert read_committed(bootstrap, TOPIC, 1) == []  # "aborted"


def read_committed(bootstrap: str, topic: str, partition: int) -> list[str]:
    """The values a read_committed consumer reads from ``topic``-``partition`` (to its
    end)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{topic}-{partition}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        values: list[str] = []
        while True:
            message = consumer.poll(DEADLINE_S)
            assert message is not None, "no end of partition within the deadline"
            error = message.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                return values
            values.append((message.value() or b"").decode())
    finally:
        consumer.close()


def feature_level(bootstrap: str, name: str) -> str:
    out = tools.run(FEATURE, "--bootstrap-server", bootstrap, "describe").stdout
    found = re.search(rf"Feature: {re.escape(name)}\t.*FinalizedVersionLevel: (\d+)", out)
    assert found is not None, out
    return found.group(1)


def test_a_transaction_version_1_cluster_keeps_the_epoch_per_producer(bootstrap: str) -> None:
    """kafka-features shows transaction.version 2 for a new cluster; downgraded to 1, the
    same Java client falls back to TV1 (AddPartitionsToTxn, EndTxn v4): no bump per
    transaction, and a successor's fencing as before."""
    assert feature_level(bootstrap, "transaction.version") == "2"
    feature = "transaction.version=1"
    tools.run(FEATURE, "--bootstrap-server", bootstrap, "downgrade", "--feature", feature)
    try:
        assert feature_level(bootstrap, "transaction.version") == "1"
        out = tools.run(str(PRODUCER), bootstrap, TOPIC, "java-tv1", "java-tv1-group").stdout
        assert out.splitlines()[-1] == "successor committed"
        assert committed(bootstrap, "java-tv1-group", 0) == 11
        # Epoch 0 throughout the first producer's two transactions, 1 to fence it, 2 for
        # the successor, which its commit keeps.
        assert settled(bootstrap, "java-tv1", "CompleteCommit").producer_epoch == 2
    finally:
        feature = "transaction.version=2"
        tools.run(FEATURE, "--bootstrap-server", bootstrap, "upgrade", "--feature", feature)
    assert feature_level(bootstrap, "transaction.version") == "2"


def transactions_tool(bootstrap: str, *args: str) -> list[list[str]]:
    out = tools.run("org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server",
                    bootstrap, *args).stdout  # fmt: skip
    return [line.split() for line in out.splitlines()[1:] if line.strip()]


def test_kafka_transactions_lists_and_describes_and_the_log_is_kafkas_format(
    bootstrap: str,
) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tool-tx"})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(TOPIC, b"v", partition=1)
    assert producer.flush(DEADLINE_S) == 0
    pid = settled(bootstrap, "tool-tx", "Ongoing").producer_id
    listed = transactions_tool(bootstrap, "list")
    assert ["tool-tx", "1", str(pid), "Ongoing"] in listed
    ((coordinator, txn_id, producer_id, epoch, state, timeout, *_, partitions),) = (
        transactions_tool(bootstrap, "describe", "--transactional-id", "tool-tx")
    )
    assert (coordinator, txn_id, producer_id, epoch, state, timeout, partitions) == (
        "1", "tool-tx", str(pid), "0", "Ongoing", "60000", f"{TOPIC}-1",
    )  # fmt: skip
    producer.commit_transaction(DEADLINE_S)
    settled(bootstrap, "tool-tx", "CompleteCommit")
    out = tools.run(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", "__transaction_state",
        "--from-beginning", "--timeout-ms", "5000",
        "--formatter", "org.apache.kafka.tools.consumer.TransactionLogMessageFormatter",
    ).stdout  # fmt: skip
    decoder = json.JSONDecoder()
    records, pos = [], 0
    while pos < len(out):  # the formatter prints JSON objects back to back
        if out[pos].isspace():
            pos += 1
            continue
        record, pos = decoder.raw_decode(out, pos)
        records.append(record)
    states = [
        (r["value"]["data"]["transactionStatus"], r["value"]["data"]["transactionPartitions"])
        for r in records
        if r["key"]["data"]["transactionalId"] == "tool-tx"
    ]
    partitions = [{"topic": TOPIC, "partitionIds": [1]}]
    # Empty, Ongoing, PrepareCommit, CompleteCommit (Kafka's TransactionState ids).
    assert states == [(0, None), (1, partitions), (2, partitions), (4, [])]
