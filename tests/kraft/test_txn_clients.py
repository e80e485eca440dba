"""Transactional producers of real clients against one kraft-server process: the coordinator
side of transactions (issue 24).

confluent-kafka (librdkafka), aiokafka and kafka-python init, begin, produce, send offsets,
commit and abort; committed offsets appear only once a transaction commits, never for an
aborted one; the transaction's states are what DescribeTransactions shows and what
``__transaction_state`` keeps across a SIGKILL; a second producer with the same
transactional.id fences the first, whose commit then fails. (Whether read_committed
consumers see the records is the partition side's, not tested here.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.structs import OffsetAndMetadata as KpOffsetAndMetadata
from kafka.structs import TopicPartition as KpTopicPartition

from broker.group.records import Reader
from protocol import wire
from protocol.entities import make, request_module
from tests.kraft.procs import Processes, port_open, single_node, wait_until

DESCRIBE_TRANSACTIONS = 65
DEADLINE_S = 30.0
TOPIC = "txn-input"
PROPS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, str]]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("data"), PROPS)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
            future.result(DEADLINE_S)
        yield procs, bootstrap
    finally:
        procs.cleanup()


@dataclass(frozen=True, slots=True)
class Described:
    """One DescribeTransactions v0 answer."""

    error_code: int
    transaction_state: str
    start_ms: int
    producer_id: int
    producer_epoch: int
    partitions: frozenset[tuple[str, int]]


def describe(bootstrap: str, transactional_id: str) -> Described:
    """DescribeTransactions of one id over the wire (one node: it is the coordinator). The
    answer is read by hand: kio refuses the -1 start time Kafka sends without a
    transaction."""

    async def ask() -> bytes:
        host, port = bootstrap.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            module: Any = request_module(DESCRIBE_TRANSACTIONS, 0)
            request = make(
                module.DescribeTransactionsRequest, {"transactional_ids": (transactional_id,)}
            )
            writer.write(
                wire.encode_request(
                    wire.RequestHeader(DESCRIBE_TRANSACTIONS, 0, 1, "txn-test"), request
                )
            )
            return await wire.read_frame(reader)
        finally:
            writer.close()

    frame = Reader(asyncio.run(ask()), flexible=True)
    frame.take(4)  # correlation id
    frame.skip_tags()
    frame.i32()  # throttle time
    assert frame.array_length() == 1
    error, _, state = frame.i16(), frame.string(), frame.string()
    frame.i32()  # timeout
    start_ms, producer_id, epoch = frame.i64(), frame.i64(), frame.i16()
    partitions = set()
    for _ in range(frame.array_length()):
        topic = frame.string()
        partitions |= {(topic, frame.i32()) for _ in range(frame.array_length())}
        frame.skip_tags()
    return Described(error, state, start_ms, producer_id, epoch, frozenset(partitions))


def settled(bootstrap: str, transactional_id: str, state: str) -> Described:
    """The description once the transaction reaches ``state`` (EndTxn is answered when the
    decision is written; the markers and the Complete state follow)."""
    return wait_until(
        lambda: (
            (found := describe(bootstrap, transactional_id)).transaction_state == state and found
        ),
        f"{transactional_id} reaches {state}",
    )


def committed(bootstrap: str, group: str, partition: int, *, stable: bool = True) -> int:
    """The group's committed offset. A read_committed consumer (librdkafka's default) asks
    with require_stable and so waits while a transaction holds the offset (KIP-447);
    ``stable`` False reads what is committed now."""
    isolation = "read_committed" if stable else "read_uncommitted"
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation}
    )
    try:
        (found,) = consumer.committed([TopicPartition(TOPIC, partition)], DEADLINE_S)
        return found.offset
    finally:
        consumer.close()


def transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(DEADLINE_S)
    return producer


def group_metadata(bootstrap: str, group: str) -> Any:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    metadata = consumer.consumer_group_metadata()
    consumer.close()
    return metadata


def test_confluent_kafka_commits_and_aborts_offsets_in_transactions(
    node: tuple[Processes, str],
) -> None:
    procs, bootstrap = node
    producer = transactional(bootstrap, "ck-1")
    first = describe(bootstrap, "ck-1")
    assert (first.error_code, first.transaction_state, first.producer_epoch) == (0, "Empty", 0)
    metadata = group_metadata(bootstrap, "ck-group")

    producer.begin_transaction()
    producer.produce(TOPIC, b"a", partition=0)
    producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 5)], metadata, DEADLINE_S)
    ongoing = describe(bootstrap, "ck-1")
    assert ongoing.transaction_state == "Ongoing"
    assert (TOPIC, 0) in ongoing.partitions and ongoing.start_ms > 0
    assert committed(bootstrap, "ck-group", 0, stable=False) < 0  # pending until the commit
    producer.commit_transaction(DEADLINE_S)
    done = settled(bootstrap, "ck-1", "CompleteCommit")
    assert (done.producer_id, done.producer_epoch) == (first.producer_id, 0)
    assert committed(bootstrap, "ck-group", 0) == 5

    producer.begin_transaction()
    producer.produce(TOPIC, b"b", partition=1)
    producer.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 9)], metadata, DEADLINE_S)
    producer.abort_transaction(DEADLINE_S)
    settled(bootstrap, "ck-1", "CompleteAbort")
    assert committed(bootstrap, "ck-group", 0) == 5  # the aborted offset never shows

    # The coordinator's state is in __transaction_state: a SIGKILLed node loads it back.
    procs.kill(1)
    procs.start(1)
    host, port = bootstrap.rsplit(":", 1)
    wait_until(lambda: port_open(host, int(port)), "the node serves again")
    reloaded = wait_until(
        lambda: (found := describe(bootstrap, "ck-1")).error_code == 0 and found,
        "the coordinator loaded",
    )
    assert (reloaded.transaction_state, reloaded.producer_id, reloaded.producer_epoch) == (
        "CompleteAbort",
        first.producer_id,
        0,
    )
    assert committed(bootstrap, "ck-group", 0) == 5
    again = transactional(bootstrap, "ck-1")  # a new instance: the next epoch
    assert describe(bootstrap, "ck-1").producer_epoch == 1
    again.begin_transaction()
    again.send_offsets_to_transaction([TopicPartition(TOPIC, 0, 12)], metadata, DEADLINE_S)
    again.commit_transaction(DEADLINE_S)
    assert committed(bootstrap, "ck-group", 0) == 12


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(
    node: tuple[Processes, str],
) -> None:
    _, bootstrap = node
    zombie = transactional(bootstrap, "ck-fence")
    metadata = group_metadata(bootstrap, "fence-group")
    zombie.begin_transaction()
    zombie.produce(TOPIC, b"z", partition=0)
    zombie.send_offsets_to_transaction([TopicPartition(TOPIC, 1, 3)], metadata, DEADLINE_S)
    # The new instance's init_transactions waits while the zombie's transaction is aborted.
    successor = transactional(bootstrap, "ck-fence")
    described = settled(bootstrap, "ck-fence", "Empty")
    assert described.producer_epoch == 2  # one bump to fence, one for the new instance
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(DEADLINE_S)
    error: KafkaError = raised.value.args[0]
    assert error.fatal() and error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)
    assert committed(bootstrap, "fence-group", 1) < 0  # the zombie's offset was aborted
    successor.begin_transaction()
    successor.send_offsets_to_transaction([TopicPartition(TOPIC, 1, 4)], metadata, DEADLINE_S)
    successor.commit_transaction(DEADLINE_S)
    assert committed(bootstrap, "fence-group", 1) == 4


def test_aiokafka_commits_and_aborts(node: tuple[Processes, str]) -> None:
    _, bootstrap = node

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio-1")
        await producer.start()
        try:
            offsets = {AioTopicPartition(TOPIC, 1): OffsetAndMetadata(21, "")}
            async with producer.transaction():
                await producer.send_and_wait(TOPIC, b"x", partition=1)
                await producer.send_offsets_to_transaction(offsets, "aio-group")
            await producer.begin_transaction()
            await producer.send_and_wait(TOPIC, b"y", partition=0)
            later = {AioTopicPartition(TOPIC, 1): OffsetAndMetadata(30, "")}
            await producer.send_offsets_to_transaction(later, "aio-group")
            await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    settled(bootstrap, "aio-1", "CompleteAbort")
    assert committed(bootstrap, "aio-group", 1) == 21


def test_kafka_python_commits_and_aborts(node: tuple[Processes, str]) -> None:
    _, bootstrap = node
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="kp-1")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(TOPIC, b"p", partition=0).get(DEADLINE_S)
        offsets = {KpTopicPartition(TOPIC, 0): KpOffsetAndMetadata(33, "", -1)}
        producer.send_offsets_to_transaction(offsets, "kp-group")
        producer.commit_transaction()
        settled(bootstrap, "kp-1", "CompleteCommit")
        assert committed(bootstrap, "kp-group", 0) == 33
        producer.begin_transaction()
        producer.send(TOPIC, b"q", partition=1).get(DEADLINE_S)
        later = {KpTopicPartition(TOPIC, 0): KpOffsetAndMetadata(40, "", -1)}
        producer.send_offsets_to_transaction(later, "kp-group")
        producer.abort_transaction()
    finally:
        producer.close()
    settled(bootstrap, "kp-1", "CompleteAbort")
    assert committed(bootstrap, "kp-group", 0) == 33
