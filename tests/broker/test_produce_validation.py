"""Produce through the ReplicaManager runs Kafka's LogValidator: a batch whose records do
not parse, or whose compressed payload does not inflate within the bound, gets Kafka's error
and leaves the log untouched; the topic's compression.type and message.timestamp.* configs
change what is stored and answered; ListOffsets by time walks a batch without building a
record object per record."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from broker import data_plane
from broker.replica_manager import ReplicaManager
from log.batch import (
    BATCH_HEADER_SIZE,
    LOG_APPEND_TIME,
    Compression,
    decode_batch,
    encode_batch,
    iter_batches,
)
from log.compression import compress
from log.records import Record, encode_record
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.broker.test_replica_manager import ME, TOPIC_A, image, partition
from tests.broker.test_replica_manager import run as run_replicas

NOW = 1_700_000_000_000
T = TypeVar("T")


class FixedClock:
    def now_ms(self) -> int:
        return NOW


def run(root: Path, body: Callable[[ReplicaManager], Awaitable[T]], configs: dict[str, str]) -> T:
    first = image(5, {"a": (TOPIC_A, {0: partition(ME, (ME,))})}, configs={"a": configs})
    return run_replicas(root, body, first, FixedClock())


def forge(payload: bytes, count: int, codec: Compression, max_timestamp: int = NOW) -> bytes:
    """A batch with a good header and CRC around any records payload."""
    out = bytearray(encode_batch([Record(None, b"", NOW)], compression=codec)[:BATCH_HEADER_SIZE])
    out += compress(codec, payload)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">q", out, 35, max_timestamp)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def good(*values: bytes, codec: Compression = Compression.NONE, timestamp: int = NOW) -> bytes:
    return encode_batch(
        [Record(b"k", v, timestamp + i) for i, v in enumerate(values)], compression=codec
    )


def stored(replicas: ReplicaManager) -> list[tuple[Any, list[Record]]]:
    data = bytes(replicas.read("a", 0, 0, 1 << 30, -1, min_one_message=True).records)
    return [decode_batch(data, position) for position, _ in iter_batches(data)]


def produce_request(records: bytes, version: int) -> Any:
    module = request_module(ApiKey.PRODUCE, version)
    data = make(module.PartitionProduceData, {"index": 0, "records": records})
    topic = make(module.TopicProduceData, {"name": "a", "partition_data": (data,)})
    return make(
        module.ProduceRequest,
        {"acks": 1, "timeout": timedelta(seconds=5), "topic_data": (topic,)},
    )


def test_a_batch_whose_records_do_not_parse_is_refused_and_nothing_is_appended(
    tmp_path: Path,
) -> None:
    records = b"".join(encode_record(Record(b"k", b"v%d" % i, NOW), i, 0) for i in range(3))
    truncated = bytearray(forge(records, 3, Compression.ZSTD))[:-4]
    struct.pack_into(">i", truncated, 8, len(truncated) - 12)
    struct.pack_into(">I", truncated, 17, crc32c(bytes(truncated[21:])))
    bad = {
        "count lies": forge(records, 4, Compression.NONE),
        "garbage after the records": forge(records + b"\x07junk", 3, Compression.NONE),
        "count lies inside gzip": forge(records, 2, Compression.GZIP),
        "truncated zstd": bytes(truncated),
        "zstd bomb": forge(b"\x00" * (32 << 20), 1, Compression.ZSTD),
    }

    async def body(replicas: ReplicaManager) -> dict[str, ErrorCode]:
        assert (await replicas.append("a", 0, good(b"ok"), 1, 5)).error == ErrorCode.none
        answers = {name: (await replicas.append("a", 0, b, 1, 5)).error for name, b in bad.items()}
        log = replicas.logs.get_log("a", 0)
        assert log is not None and log.log_end_offset == 1
        assert [[r.value for r in rs] for _, rs in stored(replicas)] == [[b"ok"]]
        return answers

    assert run(tmp_path, body, {}) == {
        "count lies": ErrorCode.invalid_record,
        "garbage after the records": ErrorCode.invalid_record,
        "count lies inside gzip": ErrorCode.invalid_record,
        "truncated zstd": ErrorCode.corrupt_message,
        "zstd bomb": ErrorCode.corrupt_message,
    }


def test_out_of_range_timestamps_get_invalid_timestamp_with_each_record_named(
    tmp_path: Path,
) -> None:
    batch = good(b"now", b"too late", timestamp=NOW + 999)  # NOW + 999, NOW + 1000

    async def body(replicas: ReplicaManager) -> tuple[Any, Any]:
        v9 = await data_plane.produce(replicas, produce_request(batch, 9), 9)
        v7 = await data_plane.produce(replicas, produce_request(batch, 7), 7)
        assert stored(replicas) == []
        return v9.responses[0].partition_responses[0], v7.responses[0].partition_responses[0]

    v9, v7 = run(tmp_path, body, {"message.timestamp.after.max.ms": "999"})
    assert (v9.error_code, v9.base_offset) == (ErrorCode.invalid_timestamp, -1)
    assert v9.error_message == "One or more records have been rejected due to invalid timestamp"
    assert [(e.batch_index, e.batch_index_error_message) for e in v9.record_errors] == [
        (
            1,
            f"Timestamp {NOW + 1000} of message with offset 1 is out of range. "
            f"The timestamp should be within [{NOW - (1 << 63) + 1}, {NOW + 999}]",
        )
    ]
    assert v7.error_code == ErrorCode.invalid_timestamp


def test_compression_type_and_log_append_time_topics_store_what_kafka_stores(
    tmp_path: Path,
) -> None:
    async def body(replicas: ReplicaManager) -> tuple[Any, list[tuple[Any, list[Record]]]]:
        answer = await data_plane.produce(
            replicas, produce_request(good(b"a", b"b", timestamp=5), 9), 9
        )
        await replicas.append("a", 0, good(b"c", codec=Compression.GZIP, timestamp=7), 1, 5)
        return answer.responses[0].partition_responses[0], stored(replicas)

    answer, batches = run(
        tmp_path,
        body,
        {"compression.type": "zstd", "message.timestamp.type": "LogAppendTime"},
    )
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    assert answer.log_append_time == datetime.fromtimestamp(NOW / 1000, tz=UTC)
    assert [
        (h.compression, h.timestamp_type, h.max_timestamp, [(r.value, r.timestamp) for r in rs])
        for h, rs in batches
    ] == [
        (Compression.ZSTD, LOG_APPEND_TIME, NOW, [(b"a", NOW), (b"b", NOW)]),
        (Compression.ZSTD, LOG_APPEND_TIME, NOW, [(b"c", NOW)]),
    ]


def test_list_offsets_by_time_walks_a_batch_of_tiny_records_in_bounded_memory(
    tmp_path: Path,
) -> None:
    count = 100_000  # 7-byte records: 0.7 MB inflated; a record object each is over 15 MB
    records = b"".join(encode_record(Record(None, b"", 0), i, i >> 14) for i in range(count))
    batch = forge(records, count, Compression.ZSTD, NOW + 6)  # valid, if unusual

    async def body(replicas: ReplicaManager) -> tuple[int, int, int]:
        assert (await replicas.append("a", 0, batch, 1, 5)).error == ErrorCode.none
        tracemalloc.start()
        try:
            found = replicas.list_offset("a", 0, NOW + 6, -1)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        return found.offset, found.timestamp, peak

    offset, timestamp, peak = run(tmp_path, body, {})
    assert (offset, timestamp) == (6 << 14, NOW + 6)
    assert peak < 4 << 20, peak


def test_list_offsets_on_a_stored_bomb_answers_corrupt_message(tmp_path: Path) -> None:
    bomb = forge(b"\x00" * (65 << 20), 1, Compression.ZSTD)  # over the 64 MiB read bound

    async def body(replicas: ReplicaManager) -> tuple[ErrorCode, ErrorCode]:
        log = replicas.logs.get_log("a", 0)
        assert log is not None
        log.append_as_leader(bomb, 3)  # as a broker that did not validate stored it
        await replicas.append("a", 0, good(b"after"), 1, 5)
        return (
            replicas.list_offset("a", 0, NOW, -1).error,
            replicas.list_offset("a", 0, -1, -1).error,
        )

    assert run(tmp_path, body, {}) == (ErrorCode.corrupt_message, ErrorCode.none)
