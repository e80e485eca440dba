"""A read_committed librdkafka consumer against a real kraft-server: transactional batches
produced and commit/abort markers written by hand through the wire (Produce and
WriteTxnMarkers, as the transaction coordinator will send them), and the consumer sees the
committed and plain records only, stops at the last stable offset while a transaction is
open, and reads on once its marker is written. A read_uncommitted consumer sees every
record. kafka-python, aiokafka and Kafka's Java console consumer, read_committed, stop at
the last stable offset with the committed and plain records only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AIOTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from log.batch import encode_batch
from log.records import Record
from protocol.entities import make, request_module
from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node
from tests.kraft.wire_client import RETRIABLE, connect, wait_for_leader

TOPIC = "txn"
OTHERS = "txn-others"  # the other clients' topic
HANGING = "txn-hanging"  # kafka-transactions' topic
FIND_HANGING = "txn-find-hanging"  # kafka-transactions find-hanging's (two partitions)
E2E = "txn-e2e"  # a real transactional producer's (two partitions)
# One node: the internal topics must fit it.
PROPS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.min.isr": "1",
}
DEADLINE_S = 30.0
PRODUCE, WRITE_TXN_MARKERS = 0, 27


async def produce(
    connection: KafkaConnection,
    producer_id: int,
    sequence: int,
    value: bytes,
    txn: bool,
    topic: str = TOPIC,
    timestamp_ms: int | None = None,
) -> int:
    """The offset of one record produced (transactionally if ``txn``) with acks=all, stamped
    ``timestamp_ms`` (default: now)."""
    module: Any = request_module(PRODUCE, 9)
    stamp = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    records = encode_batch(
        [Record(None, value, stamp)],
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
        is_transactional=txn,
    )
    data = make(module.PartitionProduceData, {"index": 0, "records": records})
    request = make(
        module.ProduceRequest,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": timedelta(seconds=5),
            "topic_data": (
                make(module.TopicProduceData, {"name": topic, "partition_data": (data,)}),
            ),
        },
    )
    deadline = time.monotonic() + DEADLINE_S
    while True:  # as a producer retries until the new partition's log exists
        response: Any = await connection.request(request, DEADLINE_S)
        answer = response.responses[0].partition_responses[0]
        if answer.error_code not in RETRIABLE or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert answer.error_code == ErrorCode.none, answer
    return answer.base_offset


async def end_transaction(
    connection: KafkaConnection, producer_id: int, commit: bool, topic_name: str = TOPIC
) -> None:
    module: Any = request_module(WRITE_TXN_MARKERS, 1)
    topic = make(module.WritableTxnMarkerTopic, {"name": topic_name, "partition_indexes": (0,)})
    marker = make(
        module.WritableTxnMarker,
        {
            "producer_id": producer_id,
            "producer_epoch": 0,
            "transaction_result": commit,
            "coordinator_epoch": 0,
            "topics": (topic,),
        },
    )
    request = make(module.WriteTxnMarkersRequest, {"markers": (marker,)})
    response: Any = await connection.request(request, DEADLINE_S)
    assert response.markers[0].topics[0].partitions[0].error_code == ErrorCode.none, response


def consumer(bootstrap: str, isolation: str, topic: str = TOPIC) -> Consumer:
    client = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"unused-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    client.assign([TopicPartition(topic, 0, 0)])
    return client


def poll_values(client: Consumer, count: int, quiet_s: float) -> list[tuple[int, bytes]]:
    """``count`` records, then nothing more for ``quiet_s`` (or until the deadline)."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + DEADLINE_S
    quiet_until = None
    while time.monotonic() < deadline:
        message = client.poll(0.2)
        if message is not None:
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value()))
            continue
        if len(got) >= count:
            quiet_until = quiet_until or time.monotonic() + quiet_s
            if time.monotonic() >= quiet_until:
                break
    return got


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs, address = single_node(tmp_path_factory.mktemp("data"), PROPS)
    try:
        admin = AdminClient({"bootstrap.servers": address})
        topics = [NewTopic(t, 1, 1) for t in (TOPIC, OTHERS, HANGING)] + [
            NewTopic(t, 2, 1) for t in (E2E, FIND_HANGING)
        ]
        for future in admin.create_topics(topics).values():
            future.result(DEADLINE_S)
        yield address
    finally:
        procs.cleanup()


async def write_steps(
    bootstrap: str, steps: list[tuple[str, int, int, bytes]], topic: str = TOPIC
) -> list[int]:
    """Produce (kind "txn" or "plain") and end transactions ("commit", "abort") in order;
    the offsets of the records produced."""
    host, port = bootstrap.rsplit(":", 1)
    connection = await connect(host, int(port))
    try:
        await wait_for_leader(connection, topic)
        offsets = []
        for kind, producer_id, sequence, value in steps:
            if kind in ("commit", "abort"):
                await end_transaction(connection, producer_id, kind == "commit", topic)
            else:
                txn = kind == "txn"
                offsets.append(await produce(connection, producer_id, sequence, value, txn, topic))
        return offsets
    finally:
        await connection.close()


def test_read_committed_librdkafka_sees_committed_records_and_stops_at_the_lso(
    bootstrap: str,
) -> None:
    def write(steps: list[tuple[str, int, int, bytes]]) -> Any:
        return write_steps(bootstrap, steps)

    offsets = asyncio.run(
        write(
            [
                ("txn", 1000, 0, b"aborted-a"),  # 0
                ("txn", 1000, 1, b"aborted-b"),  # 1
                ("plain", -1, -1, b"plain-1"),  # 2
                ("txn", 1001, 0, b"committed"),  # 3
                ("abort", 1000, 0, b""),  # 4
                ("commit", 1001, 0, b""),  # 5
                ("txn", 1002, 0, b"open"),  # 6: stays open, the LSO
                ("plain", -1, -1, b"plain-2"),  # 7
            ]
        )
    )
    assert offsets == [0, 1, 2, 3, 6, 7]

    committed = consumer(bootstrap, "read_committed")
    uncommitted = consumer(bootstrap, "read_uncommitted")
    try:
        assert poll_values(committed, 2, quiet_s=3.0) == [(2, b"plain-1"), (3, b"committed")]
        low, high = committed.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        assert (low, high) == (0, 6)  # ListOffsets read_committed: the LSO
        everything = poll_values(uncommitted, 6, quiet_s=0.5)
        assert [value for _, value in everything] == [
            b"aborted-a",
            b"aborted-b",
            b"plain-1",
            b"committed",
            b"open",
            b"plain-2",
        ]
        low, high = uncommitted.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        assert high == 8  # the high watermark: six records and two markers

        asyncio.run(write([("commit", 1002, 0, b"")]))
        assert poll_values(committed, 2, quiet_s=0.5) == [(6, b"open"), (7, b"plain-2")]
    finally:
        committed.close()
        uncommitted.close()


@pytest.fixture(scope="module")
def others(bootstrap: str) -> str:
    """OTHERS holds an aborted, a committed, a plain and an open transaction's records."""
    offsets = asyncio.run(
        write_steps(
            bootstrap,
            [
                ("txn", 2000, 0, b"aborted"),  # 0
                ("plain", -1, -1, b"plain"),  # 1
                ("txn", 2001, 0, b"committed"),  # 2
                ("abort", 2000, 0, b""),  # 3
                ("commit", 2001, 0, b""),  # 4
                ("txn", 2002, 0, b"open"),  # 5: the LSO
                ("plain", -1, -1, b"late"),  # 6
            ],
            OTHERS,
        )
    )
    assert offsets == [0, 1, 2, 5, 6]
    return bootstrap


def test_read_committed_kafka_python_and_aiokafka_stop_at_the_lso(others: str) -> None:
    consumer = KafkaConsumer(
        bootstrap_servers=others,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3_000,  # iteration ends after this long without a record
    )
    try:
        consumer.assign([KTopicPartition(OTHERS, 0)])
        consumer.seek(KTopicPartition(OTHERS, 0), 0)
        got = [(message.offset, message.value) for message in consumer]
        assert got == [(1, b"plain"), (2, b"committed")]
        assert consumer.position(KTopicPartition(OTHERS, 0)) == 5
    finally:
        consumer.close()

    async def aiokafka_reads() -> list[tuple[int, bytes]]:
        reader = AIOKafkaConsumer(
            bootstrap_servers=others, isolation_level="read_committed", enable_auto_commit=False
        )
        await reader.start()
        try:
            partition = AIOTopicPartition(OTHERS, 0)
            reader.assign([partition])
            reader.seek(partition, 0)
            got: list[tuple[int, bytes]] = []
            while True:
                batches = await reader.getmany(timeout_ms=3_000)
                if not batches:
                    return got
                got += [(m.offset, m.value) for ms in batches.values() for m in ms]
        finally:
            await reader.stop()

    assert asyncio.run(aiokafka_reads()) == [(1, b"plain"), (2, b"committed")]


@pytest.mark.usefixtures("kafka_tools")
def test_read_committed_java_console_consumer_stops_at_the_lso(others: str) -> None:
    # No group (a partition and an offset): it exits after 10 s without a record.
    result = tools.run(
        "console-consumer", "--bootstrap-server", others, "--topic", OTHERS,
        "--partition", "0", "--offset", "earliest", "--isolation-level", "read_committed",
        "--timeout-ms", "10000",
    )  # fmt: skip
    assert result.stdout.splitlines() == ["plain", "committed"], result.stderr


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_transactions_describes_and_aborts_a_hanging_transaction(bootstrap: str) -> None:
    """A transaction no coordinator will end holds read_committed consumers at its first
    offset; Kafka's own kafka-transactions finds it (DescribeProducers) and aborts it
    (WriteTxnMarkers from the admin client), and the consumers read on."""
    offsets = asyncio.run(
        write_steps(
            bootstrap,
            [("txn", 3000, 0, b"hanging"), ("plain", -1, -1, b"after")],  # 0, 1
            HANGING,
        )
    )
    assert offsets == [0, 1]
    described = tools.run(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap,
        "describe-producers", "--topic", HANGING, "--partition", "0",
    )  # fmt: skip
    rows = [line.split() for line in described.stdout.splitlines()]
    assert (
        rows[0][:2] == ["ProducerId", "ProducerEpoch"]
        and "CurrentTransactionStartOffset" in rows[0]
    )
    start_column = rows[0].index("CurrentTransactionStartOffset")
    assert [(row[0], row[start_column]) for row in rows[1:]] == [("3000", "0")]

    reader = consumer(bootstrap, "read_committed", HANGING)
    try:
        assert poll_values(reader, 0, quiet_s=2.0) == []  # held at the hanging transaction
        tools.run(
            "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap,
            "abort", "--topic", HANGING, "--partition", "0", "--start-offset", "0",
        )  # fmt: skip
        assert poll_values(reader, 1, quiet_s=1.0) == [(1, b"after")]
    finally:
        reader.close()


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_transactions_find_hanging_reports_only_the_transaction_no_coordinator_knows(
    bootstrap: str,
) -> None:
    """find-hanging takes every open transaction whose last write is older than
    --max-transaction-timeout (DescribeProducers) and reports those whose producer id no
    coordinator lists (ListTransactions filtered by producer id) or whose coordinator does
    not have the partition in the transaction (DescribeTransactions). Both transactions here
    are open and stamped ten minutes ago, so both are candidates: only the raw producer id's
    is hanging; a real producer's ongoing transaction is not, by topic or by broker."""
    stamp_ms = int(time.time() * 1000) - 10 * 60_000

    async def write_hanging() -> int:
        host, port = bootstrap.rsplit(":", 1)
        connection = await connect(host, int(port))
        try:
            await wait_for_leader(connection, FIND_HANGING)
            return await produce(
                connection, 4000, 0, b"hanging", True, FIND_HANGING, timestamp_ms=stamp_ms
            )
        finally:
            await connection.close()

    assert asyncio.run(write_hanging()) == 0
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-find-hanging"})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce(FIND_HANGING, b"ongoing", partition=partition, timestamp=stamp_ms)
    producer.flush(DEADLINE_S)
    try:
        described = tools.run(
            "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap,
            "describe-producers", "--topic", FIND_HANGING, "--partition", "0",
        )  # fmt: skip
        rows = [line.split() for line in described.stdout.splitlines()]
        start_column = rows[0].index("CurrentTransactionStartOffset")
        time_column = rows[0].index("LastTimestamp")
        # Both open since offsets 0 and 1, both last written ten minutes ago: candidates.
        assert sorted((row[start_column], row[time_column]) for row in rows[1:]) == [
            ("0", str(stamp_ms)),
            ("1", str(stamp_ms)),
        ], described.stdout
        hanging = ["0", "4000", "0", "-1", "0", str(stamp_ms)]  # Partition .. LastTimestamp
        for scope in (["--topic", FIND_HANGING], ["--broker-id", "1"]):
            found = tools.run(
                "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", bootstrap,
                "find-hanging", *scope, "--max-transaction-timeout", "1",
            )  # fmt: skip
            lines = [line.split() for line in found.stdout.splitlines()]
            assert lines[0] == [
                "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                "StartOffset", "LastTimestamp", "Duration(min)",
            ], found.stdout  # fmt: skip
            # By broker every topic is searched: other tests' transactions are not this one's.
            ours = [line for line in lines[1:] if line[0] == FIND_HANGING]
            assert [line[1:7] for line in ours] == [hanging], found.stdout
            assert int(ours[0][7]) >= 10, found.stdout
    finally:
        producer.abort_transaction(DEADLINE_S)


def test_a_transactional_producer_is_read_exactly_by_read_committed_consumers(
    bootstrap: str,
) -> None:
    """librdkafka end to end: five transactions over two partitions, committed and aborted in
    turn (flushed first, so the aborted records are in the logs), then one left open."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-e2e"})
    producer.init_transactions(DEADLINE_S)
    for round_, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(E2E, f"r{round_}-{i}".encode(), partition=i % 2)
        producer.flush(DEADLINE_S)
        if commit:
            producer.commit_transaction(DEADLINE_S)
        else:
            producer.abort_transaction(DEADLINE_S)
    producer.begin_transaction()
    producer.produce(E2E, b"open", partition=0)
    producer.flush(DEADLINE_S)
    try:
        committed = sorted(read_all_values(bootstrap, "read_committed"))
        everything = sorted(read_all_values(bootstrap, "read_uncommitted"))
    finally:
        producer.abort_transaction(DEADLINE_S)
    assert committed == sorted(f"r{r}-{i}".encode() for r in (0, 2, 4) for i in range(5))
    records = [f"r{r}-{i}".encode() for r in range(5) for i in range(5)]
    assert everything == sorted([b"open", *records])


def read_all_values(bootstrap: str, isolation: str) -> list[bytes]:
    """Every value of E2E's two partitions a consumer of ``isolation`` returns, polled
    until nothing more comes for 3 s."""
    client = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"e2e-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    client.assign([TopicPartition(E2E, 0, 0), TopicPartition(E2E, 1, 0)])
    try:
        return [value for _, value in poll_values(client, 1, quiet_s=3.0)]
    finally:
        client.close()
