"""Apache Kafka's own Java client and tools with the transaction coordinator, one node.

Kafka's KafkaProducer (4.1.0) commits and aborts transactions with offsets, and a second
producer with its transactional.id fences it; ``kafka-transactions`` lists and describes
transactions; Kafka's TransactionLogMessageFormatter reads ``__transaction_state`` (our
records are Kafka's format) and shows each state the coordinator went through.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node
from tests.kraft.test_txn_clients import DEADLINE_S, PROPS, committed, settled

pytestmark = pytest.mark.usefixtures("kafka_tools")
PRODUCER = Path(__file__).resolve().parent.parent / "java" / "TxnProducer.java"
TOPIC = "txn-input"  # the name committed() reads offsets of


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
    # Epoch 0 for the first producer, 1 to fence it, 2 for the successor.
    assert settled(bootstrap, "java-tx", "CompleteCommit").producer_epoch == 2


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
