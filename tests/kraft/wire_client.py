"""A few Kafka operations over broker/client.py, for tests that drive a real node by wire:
create a topic, produce a batch, read a partition back."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from log.batch import decode_batch, encode_batch, iter_batches
from log.records import Record
from protocol.entities import make, request_module

CREATE_TOPICS, PRODUCE, FETCH, METADATA = 19, 0, 1, 3
TIMEOUT_S = 10.0
# What a new partition answers until this broker has its log (the metadata said it leads).
RETRIABLE = (
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.leader_not_available,
    ErrorCode.not_leader_or_follower,
)


async def connect(host: str, port: int, deadline_s: float = 30.0) -> KafkaConnection:
    """A connection to a listener, retried until it opens or ``deadline_s`` passes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s
    while True:
        connection = KafkaConnection("wire-client")
        try:
            await connection.connect(host, port, 1.0)
            return connection
        except OSError:
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


async def create_topic(connection: KafkaConnection, name: str, partitions: int = 1) -> ErrorCode:
    module: Any = request_module(CREATE_TOPICS, 7)
    topic = make(
        module.CreatableTopic,
        {"name": name, "num_partitions": partitions, "replication_factor": 1},
    )
    request = make(
        module.CreateTopicsRequest, {"topics": (topic,), "timeout": timedelta(seconds=10)}
    )
    response: Any = await connection.request(request, TIMEOUT_S)
    return response.topics[0].error_code


async def wait_for_leader(connection: KafkaConnection, topic: str) -> None:
    """Until Metadata shows every partition of ``topic`` with a leader."""
    module: Any = request_module(METADATA, 12)
    request = make(
        module.MetadataRequest,
        {"topics": (make(module.MetadataRequestTopic, {"name": topic, "topic_id": None}),)},
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while True:
        response: Any = await connection.request(request, TIMEOUT_S)
        (answer,) = response.topics
        if answer.error_code == ErrorCode.none and all(
            p.error_code == ErrorCode.none for p in answer.partitions
        ):
            return
        assert loop.time() < deadline, f"{topic} has no leader: {answer}"
        await asyncio.sleep(0.05)


async def leader_epochs(connection: KafkaConnection, topic: str) -> tuple[int, ...]:
    """The leader epoch of each partition of ``topic``, as Metadata gives it: a broker
    fenced (its session lost) and unfenced in between moves them, whatever the clock says."""
    module: Any = request_module(METADATA, 12)
    request = make(
        module.MetadataRequest,
        {"topics": (make(module.MetadataRequestTopic, {"name": topic, "topic_id": None}),)},
    )
    response: Any = await connection.request(request, TIMEOUT_S)
    (answer,) = response.topics
    return tuple(p.leader_epoch for p in answer.partitions)


async def produce(
    connection: KafkaConnection, topic: str, values: list[bytes], acks: int = -1
) -> tuple[ErrorCode, int]:
    """(error, base offset) of one batch of ``values`` produced to partition 0."""
    module: Any = request_module(PRODUCE, 9)
    # Stamped now: a fixed old timestamp is past retention.ms, and the retention task (every
    # log.retention.check.interval.ms) would delete the records under the reader.
    now_ms = int(time.time() * 1000)
    records = bytes(encode_batch([Record(None, v, now_ms) for v in values]))
    data = make(module.PartitionProduceData, {"index": 0, "records": records})
    request = make(
        module.ProduceRequest,
        {
            "acks": acks,
            "timeout": timedelta(seconds=5),
            "topic_data": (
                make(module.TopicProduceData, {"name": topic, "partition_data": (data,)}),
            ),
        },
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + TIMEOUT_S
    while True:  # a client retries what Kafka calls retriable, as a producer would
        response: Any = await connection.request(request, TIMEOUT_S)
        answer = response.responses[0].partition_responses[0]
        if answer.error_code not in RETRIABLE or loop.time() > deadline:
            return answer.error_code, answer.base_offset
        await asyncio.sleep(0.05)


async def read_all(connection: KafkaConnection, topic: str) -> list[bytes]:
    """Every value of partition 0, from offset 0 to the high watermark."""
    module: Any = request_module(FETCH, 12)
    values: list[bytes] = []
    offset = 0
    while True:
        wanted = make(
            module.FetchPartition,
            {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20},
        )
        request = make(
            module.FetchRequest,
            {
                "replica_id": -1,
                "max_wait": timedelta(milliseconds=0),
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "topics": (make(module.FetchTopic, {"topic": topic, "partitions": (wanted,)}),),
            },
        )
        response: Any = await connection.request(request, TIMEOUT_S)
        answer = response.responses[0].partitions[0]
        assert answer.error_code == ErrorCode.none, (
            f"{answer.error_code!r} at offset {offset}: high watermark {answer.high_watermark}, "
            f"log start {answer.log_start_offset}"
        )
        data = answer.records or b""
        batches = [decode_batch(data, pos) for pos, _ in iter_batches(data)]
        if not batches:
            assert offset == answer.high_watermark, (offset, answer.high_watermark)
            return values
        for header, records in batches:
            values.extend(r.value or b"" for r in records)
            offset = header.last_offset + 1
