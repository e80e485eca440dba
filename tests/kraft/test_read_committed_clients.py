"""A read_committed librdkafka consumer against a real kraft-server: transactional batches
produced and commit/abort markers written by hand through the wire (Produce and
WriteTxnMarkers, as the transaction coordinator will send them), and the consumer sees the
committed and plain records only, stops at the last stable offset while a transaction is
open, and reads on once its marker is written. A read_uncommitted consumer sees every
record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from log.batch import encode_batch
from log.records import Record
from protocol.entities import make, request_module
from tests.kraft.procs import single_node
from tests.kraft.wire_client import RETRIABLE, connect, wait_for_leader

TOPIC = "txn"
DEADLINE_S = 30.0
PRODUCE, WRITE_TXN_MARKERS = 0, 27


async def produce(
    connection: KafkaConnection, producer_id: int, sequence: int, value: bytes, txn: bool
) -> int:
    """The offset of one record produced (transactionally if ``txn``) with acks=all."""
    module: Any = request_module(PRODUCE, 9)
    records = encode_batch(
        [Record(None, value, int(time.time() * 1000))],
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
                make(module.TopicProduceData, {"name": TOPIC, "partition_data": (data,)}),
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


async def end_transaction(connection: KafkaConnection, producer_id: int, commit: bool) -> None:
    module: Any = request_module(WRITE_TXN_MARKERS, 1)
    topic = make(module.WritableTxnMarkerTopic, {"name": TOPIC, "partition_indexes": (0,)})
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


def consumer(bootstrap: str, isolation: str) -> Consumer:
    client = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"unused-{isolation}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    client.assign([TopicPartition(TOPIC, 0, 0)])
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
    procs, address = single_node(tmp_path_factory.mktemp("data"))
    try:
        admin = AdminClient({"bootstrap.servers": address})
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result(DEADLINE_S)
        yield address
    finally:
        procs.cleanup()


def test_read_committed_librdkafka_sees_committed_records_and_stops_at_the_lso(
    bootstrap: str,
) -> None:
    host, port = bootstrap.rsplit(":", 1)

    async def write(steps: list[tuple[str, int, int, bytes]]) -> list[int]:
        connection = await connect(host, int(port))
        try:
            await wait_for_leader(connection, TOPIC)
            offsets = []
            for kind, producer_id, sequence, value in steps:
                if kind in ("commit", "abort"):
                    await end_transaction(connection, producer_id, kind == "commit")
                else:
                    offsets.append(
                        await produce(connection, producer_id, sequence, value, kind == "txn")
                    )
            return offsets
        finally:
            await connection.close()

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
