"""The ReplicaManager and the Produce/Fetch/ListOffsets handlers over a real LogManager:
partitions follow the metadata image (logs created, deleted, strays set aside), produce and
fetch obey the high watermark, and every bad request gets Kafka's error code."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from broker import data_plane
from broker.fetch_session import FetchSessionCache
from broker.replica_manager import PARTITION_METADATA_FILE, ReplicaManager
from log.batch import decode_batch, encode_batch, iter_batches
from log.clock import WallClock
from log.config import LogConfig
from log.fs import FileRegion
from log.manager import LogManager
from log.records import Record
from log.runtime import real_runtime
from metadata.image import MetadataImage, PartitionRegistration, TopicImage, TopicsImage
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from protocol.server import NO_RESPONSE

ME = 1
T = TypeVar("T")
TOPIC_A = uuid.UUID(int=0xA)


def partition(leader: int, isr: tuple[int, ...], epoch: int = 3) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=tuple(sorted(set(isr) | {leader})),
        isr=isr,
        leader=leader,
        leader_epoch=epoch,
        partition_epoch=epoch,
    )


def image(
    offset: int,
    topics: dict[str, tuple[uuid.UUID, dict[int, PartitionRegistration]]],
    configs: dict[str, dict[str, str]] | None = None,
) -> MetadataImage:
    by_id = {tid: TopicImage(name, tid, parts) for name, (tid, parts) in topics.items()}
    return MetadataImage(
        offset=offset,
        topics=TopicsImage(by_id=by_id, by_name={name: tid for name, (tid, _) in topics.items()}),
        configs={(2, name): values for name, values in (configs or {}).items()},
    )


def batch(*values: bytes) -> bytes:
    return encode_batch([Record(b"k", value, 1_000 + i) for i, value in enumerate(values)])


def values_of(records: bytes | FileRegion) -> list[bytes]:
    data = bytes(records)
    out = []
    for position, _ in iter_batches(data):
        _, records = decode_batch(data, position)
        out.extend(record.value or b"" for record in records)
    return out


def run(
    root: Path,
    body: Callable[[ReplicaManager], Awaitable[T]],
    first: MetadataImage,
    clock: WallClock | None = None,
) -> T:
    """``body`` against a ReplicaManager over log dir ``root``, started at ``first``."""

    async def main() -> T:
        runtime = real_runtime(seed=5)
        if clock is not None:
            runtime = dataclasses.replace(runtime, clock=clock)
        logs = LogManager(runtime, [str(root)], LogConfig())
        await logs.startup()
        replicas = ReplicaManager(ME, logs, LogConfig(), runtime.rng, runtime.clock)
        replicas.start(first)
        await replicas.wait_reconciled(first.offset)
        try:
            return await asyncio.wait_for(body(replicas), 20)
        finally:
            await replicas.close()
            await logs.shutdown()

    return asyncio.run(main())


async def reconcile(replicas: ReplicaManager, after: MetadataImage) -> None:
    replicas.on_image(after, after, from_snapshot=False)
    await replicas.wait_reconciled(after.offset)


SOLE = image(5, {"a": (TOPIC_A, {0: partition(ME, (ME,)), 1: partition(2, (2, ME))})})


def test_a_sole_in_sync_leader_commits_what_it_appends(tmp_path: Path) -> None:
    async def body(replicas: ReplicaManager) -> None:
        first = await replicas.append("a", 0, batch(b"x", b"y"), acks=-1, timeout_s=5)
        second = await replicas.append("a", 0, batch(b"z"), acks=1, timeout_s=5)
        assert (first.error, first.base_offset, second.base_offset) == (ErrorCode.none, 0, 2)
        read = replicas.read("a", 0, 0, 1 << 20, -1, min_one_message=True)
        assert (read.error, read.high_watermark, read.log_start_offset) == (ErrorCode.none, 3, 0)
        assert values_of(read.records) == [b"x", b"y", b"z"]
        assert values_of(replicas.read("a", 0, 2, 1 << 20, 3, min_one_message=True).records) == [
            b"z"
        ]
        earliest = replicas.list_offset("a", 0, -2, -1)
        latest = replicas.list_offset("a", 0, -1, -1)
        by_time = replicas.list_offset("a", 0, 1_001, -1)  # records at 1000, 1001, then 1000
        newest = replicas.list_offset("a", 0, -3, -1)
        assert (earliest.offset, latest.offset, latest.leader_epoch) == (0, 3, 3)
        assert (by_time.offset, by_time.timestamp) == (1, 1_001)
        assert (newest.offset, newest.timestamp) == (1, 1_001)
        assert replicas.list_offset("a", 0, 5_000, -1).offset == -1

    run(tmp_path, body, SOLE)
    assert os.path.exists(tmp_path / "a-0" / PARTITION_METADATA_FILE)
    assert os.path.exists(tmp_path / "a-1")  # a follower replica gets its log too


def test_requests_get_kafka_error_codes(tmp_path: Path) -> None:
    async def body(replicas: ReplicaManager) -> dict[str, ErrorCode]:
        await replicas.append("a", 0, batch(b"x"), acks=1, timeout_s=5)
        corrupt = bytearray(batch(b"y"))
        corrupt[-1] ^= 0xFF
        return {
            "follower": (await replicas.append("a", 1, batch(b"x"), 1, 5)).error,
            "unknown": (await replicas.append("nope", 0, batch(b"x"), 1, 5)).error,
            "no such partition": replicas.read("a", 9, 0, 100, -1, min_one_message=True).error,
            "corrupt": (await replicas.append("a", 0, bytes(corrupt), 1, 5)).error,
            "past hw": replicas.read("a", 0, 2, 100, -1, min_one_message=True).error,
            "old epoch": replicas.read("a", 0, 0, 100, 2, min_one_message=True).error,
            "new epoch": replicas.list_offset("a", 0, -1, 4).error,
            "bad timestamp": replicas.list_offset("a", 0, -7, -1).error,
            # The corrupt batch was not appended: the high watermark is still 1.
            "after": replicas.list_offset("a", 0, -1, -1).error
            if replicas.list_offset("a", 0, -1, -1).offset == 1
            else ErrorCode.unknown_server_error,
        }

    assert run(tmp_path, body, SOLE) == {
        "follower": ErrorCode.not_leader_or_follower,
        "unknown": ErrorCode.unknown_topic_or_partition,
        "no such partition": ErrorCode.unknown_topic_or_partition,
        "corrupt": ErrorCode.corrupt_message,
        "past hw": ErrorCode.offset_out_of_range,
        "old epoch": ErrorCode.fenced_leader_epoch,
        "new epoch": ErrorCode.unknown_leader_epoch,
        "bad timestamp": ErrorCode.invalid_request,
        "after": ErrorCode.none,
    }


def test_without_replication_other_in_sync_replicas_hold_the_high_watermark(
    tmp_path: Path,
) -> None:
    shared = image(
        5,
        {"a": (TOPIC_A, {0: partition(ME, (ME, 2))})},
        configs={"a": {"min.insync.replicas": "3"}},
    )

    async def body(replicas: ReplicaManager) -> tuple[object, ...]:
        acked = await replicas.append("a", 0, batch(b"x"), acks=-1, timeout_s=5)
        leader_only = await replicas.append("a", 0, batch(b"y"), acks=1, timeout_s=0.05)
        await reconcile(replicas, image(6, {"a": (TOPIC_A, {0: partition(ME, (ME, 2))})}))
        timed_out = await replicas.append("a", 0, batch(b"z"), acks=-1, timeout_s=0.05)
        read = replicas.read("a", 0, 0, 100, -1, min_one_message=True)
        uncommitted = replicas.read("a", 0, 1, 100, -1, min_one_message=True)
        assert (uncommitted.error, bytes(uncommitted.records)) == (ErrorCode.none, b"")
        return (
            acked.error,
            leader_only.base_offset,
            timed_out,
            read.high_watermark,
            bytes(read.records),
        )

    not_enough, offset, timed_out, hw, records = run(tmp_path, body, shared)
    assert not_enough == ErrorCode.not_enough_replicas  # refused before appending
    assert offset == 0
    assert timed_out.error == ErrorCode.request_timed_out and timed_out.base_offset == 1
    assert (hw, records) == (0, b"")  # nothing committed, nothing served


def test_partitions_leaving_the_broker_lose_their_logs_and_a_recreated_name_starts_empty(
    tmp_path: Path,
) -> None:
    recreated_id = uuid.UUID(int=0xB)

    async def body(replicas: ReplicaManager) -> int:
        await replicas.append("a", 0, batch(b"old"), acks=1, timeout_s=5)
        moved = {0: partition(ME, (ME,)), 1: partition(2, (2, 3))}  # a-1 leaves this broker
        await reconcile(replicas, image(6, {"a": (TOPIC_A, moved)}))
        assert replicas.logs.get_log("a", 1) is None
        assert replicas.logs.get_log("a", 0) is not None
        await reconcile(replicas, image(7, {}))
        assert replicas.logs.get_log("a", 0) is None
        await replicas.append("a", 0, batch(b"old"), acks=1, timeout_s=5)
        await reconcile(replicas, image(8, {"a": (recreated_id, {0: partition(ME, (ME,))})}))
        return (await replicas.append("a", 0, batch(b"new"), acks=1, timeout_s=5)).base_offset

    assert run(tmp_path, body, SOLE) == 0
    marker = (tmp_path / "a-0" / PARTITION_METADATA_FILE).read_text()
    assert marker.startswith("version: 0\ntopic_id: ")


def test_logs_of_another_topic_id_found_at_start_are_set_aside_not_served(
    tmp_path: Path,
) -> None:
    async def write_old(replicas: ReplicaManager) -> None:
        await replicas.append("a", 0, batch(b"old"), acks=1, timeout_s=5)

    run(tmp_path, write_old, SOLE)
    recreated = image(9, {"a": (uuid.UUID(int=0xC), {0: partition(ME, (ME,))})})

    async def read_new(replicas: ReplicaManager) -> bytes:
        return bytes(replicas.read("a", 0, 0, 100, -1, min_one_message=True).records)

    assert run(tmp_path, read_new, recreated) == b""
    strays = sorted(name for name in os.listdir(tmp_path) if name.endswith("-stray"))
    assert [name.split(".")[0] for name in strays] == ["a-0", "a-1"]  # a-1: no longer assigned
    (stray_a0,) = [tmp_path / name for name in strays if name.startswith("a-0.")]
    assert os.path.getsize(stray_a0 / "00000000000000000000.log") > 0  # the data is kept


def test_a_partition_that_cannot_be_opened_goes_offline_and_the_rest_are_served(
    tmp_path: Path,
) -> None:
    """An image written before today's checks (by main: a __cluster_metadata topic, a
    config the log refuses) must not stop the reconciler or make the node crash-loop: each
    bad partition answers KAFKA_STORAGE_ERROR, and no partition log is ever written into
    the metadata log's directory."""
    metadata_log = tmp_path / "__cluster_metadata-0"
    metadata_log.mkdir()
    (metadata_log / "00000000000000000000.log").write_bytes(b"raft's")
    poisoned = image(
        5,
        {
            "__cluster_metadata": (uuid.UUID(int=0xD), {0: partition(ME, (ME,))}),
            "b": (uuid.UUID(int=0xB), {0: partition(ME, (ME,))}),
            "a": (TOPIC_A, {0: partition(ME, (ME,))}),
        },
        configs={"b": {"segment.bytes": "1"}},
    )

    async def body(replicas: ReplicaManager) -> list[ErrorCode]:
        codes = [
            (await replicas.append(topic, 0, batch(b"x"), acks=1, timeout_s=5)).error
            for topic in ("__cluster_metadata", "b", "a")
        ]
        # A later config the log refuses takes that topic's partitions offline too.
        bad = image(6, {"a": (TOPIC_A, {0: partition(ME, (ME,))})}, {"a": {"segment.ms": "0"}})
        await reconcile(replicas, bad)
        codes.append(replicas.read("a", 0, 0, 100, -1, min_one_message=True).error)
        return codes

    expected = [ErrorCode.kafka_storage_error, ErrorCode.kafka_storage_error, ErrorCode.none]
    assert run(tmp_path, body, poisoned) == [*expected, ErrorCode.kafka_storage_error]
    assert run(tmp_path, body, poisoned)[:3] == expected  # the restart comes up the same
    assert sorted(os.listdir(metadata_log)) == ["00000000000000000000.log"]
    assert (metadata_log / "00000000000000000000.log").read_bytes() == b"raft's"


def test_logs_take_cluster_wide_dynamic_defaults_under_their_topics_own_configs(
    tmp_path: Path,
) -> None:
    """kafka-configs --entity-type brokers --entity-default --alter log.retention.ms=...:
    DescribeConfigs shows it as every topic's value, so the logs must apply it (main
    stored it and ignored it)."""
    two = {
        "a": (TOPIC_A, {0: partition(ME, (ME,))}),
        "b": (uuid.UUID(int=0xB), {0: partition(ME, (ME,))}),
    }

    def with_defaults(offset: int, defaults: dict[str, str]) -> MetadataImage:
        base = image(offset, two, {"b": {"retention.ms": "5"}})
        return dataclasses.replace(base, configs={**base.configs, (4, ""): defaults})

    def configs(replicas: ReplicaManager) -> list[tuple[int, int]]:
        logs = [replicas.logs.get_log(topic, 0) for topic in ("a", "b")]
        return [(log.config.retention_ms, log.config.segment_bytes) for log in logs if log]

    async def changes(replicas: ReplicaManager) -> list[tuple[int, int]]:
        seen = configs(replicas)
        for offset, defaults in ((6, {"log.segment.bytes": "4096"}), (7, {})):
            await reconcile(replicas, with_defaults(offset, defaults))
            seen += configs(replicas)
        return seen

    week = 7 * 24 * 3600 * 1000
    first = with_defaults(5, {"log.retention.ms": "1234", "log.segment.bytes": "2048"})
    assert run(tmp_path, changes, first) == [
        (1234, 2048),  # a: the cluster defaults
        (5, 2048),  # b: its own retention.ms wins
        (week, 4096),
        (5, 4096),
        (week, 1 << 30),  # defaults removed: server.properties (Kafka's) again
        (5, 1 << 30),
    ]


def test_this_brokers_dynamic_configs_sit_between_the_cluster_defaults_and_topic_configs(
    tmp_path: Path,
) -> None:
    """kafka-configs --entity-type brokers --entity-name <id> --alter: DescribeConfigs of
    that broker shows the value, so its logs apply it over the cluster-wide default; another
    broker's override does not reach this one."""
    topics = {"a": (TOPIC_A, {0: partition(ME, (ME,))})}

    def with_broker_configs(offset: int, layers: dict[str, dict[str, str]]) -> MetadataImage:
        base = image(offset, topics)
        extra = {(4, name): values for name, values in layers.items()}
        return dataclasses.replace(base, configs={**base.configs, **extra})

    async def changes(replicas: ReplicaManager) -> list[tuple[int, int]]:
        seen = []
        for offset, layers in (
            (6, {"": {"log.retention.ms": "1000"}, str(ME + 1): {"log.retention.ms": "7"}}),
            (7, {"": {"log.retention.ms": "1000"}, str(ME): {"log.retention.ms": "2000"}}),
            (8, {str(ME): {"min.insync.replicas": "2"}}),
        ):
            await reconcile(replicas, with_broker_configs(offset, layers))
            log = replicas.logs.get_log("a", 0)
            assert log is not None
            seen.append((log.config.retention_ms, replicas._min_insync_replicas("a")))
        return seen

    week = 7 * 24 * 3600 * 1000
    assert run(tmp_path, changes, with_broker_configs(5, {})) == [
        (1000, 1),  # the cluster default; broker ME+1's own value is not ours
        (2000, 1),  # ours wins over the cluster default
        (week, 2),  # every layer removed but min.insync.replicas for this broker
    ]


def test_a_stray_that_cannot_be_set_aside_is_offline_never_served_as_the_new_topic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def write_old(replicas: ReplicaManager) -> None:
        await replicas.append("a", 0, batch(b"old"), acks=1, timeout_s=5)

    run(tmp_path, write_old, SOLE)

    async def rename_fails(*_args: object) -> str:
        raise OSError(errno.EIO, "rename failed")

    monkeypatch.setattr(LogManager, "mark_stray", rename_fails)
    recreated = image(9, {"a": (uuid.UUID(int=0xC), {0: partition(ME, (ME,))})})

    async def use_new(replicas: ReplicaManager) -> tuple[ErrorCode, ErrorCode]:
        read = replicas.read("a", 0, 0, 100, -1, min_one_message=True)
        return read.error, (await replicas.append("a", 0, batch(b"new"), 1, 5)).error

    assert run(tmp_path, use_new, recreated) == (
        ErrorCode.kafka_storage_error,
        ErrorCode.kafka_storage_error,
    )
    assert b"old" in (tmp_path / "a-0" / "00000000000000000000.log").read_bytes()
    assert b"new" not in (tmp_path / "a-0" / "00000000000000000000.log").read_bytes()


def request(api_key: int, version: int, name: str, values: dict[str, Any]) -> Any:
    return make(getattr(request_module(api_key, version), name), values)


def fetch_request(offset: int, max_wait_ms: int, version: int = 12) -> Any:
    module = request_module(ApiKey.FETCH, version)
    wanted = make(
        module.FetchPartition,
        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20},
    )
    return make(
        module.FetchRequest,
        {
            "replica_id": -1,
            "max_wait": timedelta(milliseconds=max_wait_ms),
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "topics": (make(module.FetchTopic, {"topic": "a", "partitions": (wanted,)}),),
        },
    )


async def fetch(replicas: ReplicaManager, request: Any, version: int) -> Any:
    """A sessionless Fetch through the data plane (fetch sessions: test_fetch_session.py)."""
    sessions = FetchSessionCache(0, random.Random(0), lambda: 0.0)
    return await data_plane.fetch(replicas, sessions, lambda _id: None, request, version)


def produce_request(acks: int, version: int = 9) -> Any:
    module = request_module(ApiKey.PRODUCE, version)
    data = make(module.PartitionProduceData, {"index": 0, "records": batch(b"p")})
    return make(
        module.ProduceRequest,
        {
            "acks": acks,
            "timeout": timedelta(seconds=5),
            "topic_data": (
                make(module.TopicProduceData, {"name": "a", "partition_data": (data,)}),
            ),
        },
    )


def test_a_waiting_fetch_returns_as_soon_as_a_produce_commits(tmp_path: Path) -> None:
    async def body(replicas: ReplicaManager) -> tuple[Any, Any, object, list[bytes]]:
        waiting = asyncio.ensure_future(fetch(replicas, fetch_request(0, 15_000), 12))
        await asyncio.sleep(0)  # the fetch finds nothing and parks
        assert not waiting.done()
        produced = await data_plane.produce(replicas, produce_request(-1), 9)
        fetched = await asyncio.wait_for(waiting, 5)  # long before its 15 s max wait
        silent = await data_plane.produce(replicas, produce_request(0), 9)
        return produced, fetched, silent, values_of(fetched.responses[0].partitions[0].records)

    produced, fetched, silent, values = run(tmp_path, body, SOLE)
    (answer,) = produced.responses[0].partition_responses
    assert (answer.error_code, answer.base_offset) == (ErrorCode.none, 0)
    (data,) = fetched.responses[0].partitions
    assert (data.error_code, data.high_watermark, data.last_stable_offset) == (0, 1, 1)
    assert values == [b"p"]
    assert fetched.session_id == 0  # no fetch sessions: full fetches only
    assert silent is NO_RESPONSE  # acks=0: the client reads no response


def test_protocol_level_refusals(tmp_path: Path) -> None:
    async def body(replicas: ReplicaManager) -> tuple[Any, Any]:
        bad_acks = await data_plane.produce(replicas, produce_request(2), 9)
        follower = dataclasses.replace(fetch_request(0, 0), replica_id=2)
        return bad_acks, await fetch(replicas, follower, 12)

    bad_acks, from_broker = run(tmp_path, body, SOLE)
    assert bad_acks.responses[0].partition_responses[0].error_code == (
        ErrorCode.invalid_required_acks
    )
    # Broker 2 holds no replica of a-0: its follower fetch is refused for that partition.
    assert from_broker.responses[0].partitions[0].error_code == ErrorCode.not_leader_or_follower


def test_produce_to_internal_topics_is_refused_as_kafka_refuses_it(tmp_path: Path) -> None:
    reserved = ("__consumer_offsets", "__cluster_metadata")
    internal = image(
        5,
        {
            name: (uuid.UUID(int=i + 1), {0: partition(ME, (ME,))})
            for i, name in enumerate(reserved)
        },
    )

    async def body(replicas: ReplicaManager) -> list[tuple[str, ErrorCode, str]]:
        answers = []
        for name in reserved:
            request = dataclasses.replace(
                produce_request(1),
                topic_data=(dataclasses.replace(produce_request(1).topic_data[0], name=name),),
            )
            response = await data_plane.produce(replicas, request, 9)
            (answer,) = response.responses[0].partition_responses
            answers.append((name, answer.error_code, answer.error_message))
        return answers

    assert run(tmp_path, body, internal) == [
        (name, ErrorCode.invalid_topic_exception, f"Cannot append to internal topic {name}")
        for name in reserved
    ]


def corrupt(data: bytes) -> bytes:
    flipped = bytearray(data)
    flipped[-1] ^= 0xFF
    return bytes(flipped)


def idempotent(producer_id: int, epoch: int, sequence: int, *values: bytes) -> bytes:
    records = [Record(None, value, 2_000) for value in values]
    return encode_batch(
        records, producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence
    )


def test_idempotent_producers_get_retries_deduplicated_even_after_a_restart(
    tmp_path: Path,
) -> None:
    async def first_life(replicas: ReplicaManager) -> list[tuple[ErrorCode, int]]:
        answers = []
        for records in (
            idempotent(7, 0, 0, b"a", b"b"),  # offsets 0-1
            idempotent(7, 0, 2, b"c"),  # offset 2
            idempotent(7, 0, 0, b"a", b"b"),  # a retry of the first: its offset, no append
            idempotent(7, 0, 5, b"x"),  # skips sequences 3-4
            idempotent(8, 3, 9, b"d"),  # another producer, first seen mid-stream
            batch(b"plain") + batch(b"two"),  # two batches in one produce
            encode_batch(
                [Record(None, b"t", 0)],
                producer_id=9,
                producer_epoch=0,
                base_sequence=0,
                is_transactional=True,
                is_control=True,
            ),  # markers are the broker's own, never a producer's
        ):
            result = await replicas.append("a", 0, records, acks=-1, timeout_s=5)
            answers.append((result.error, result.base_offset))
        return answers

    assert run(tmp_path, first_life, SOLE) == [
        (ErrorCode.none, 0),
        (ErrorCode.none, 2),
        (ErrorCode.none, 0),
        (ErrorCode.out_of_order_sequence_number, -1),
        (ErrorCode.none, 3),
        (ErrorCode.invalid_record, -1),
        (ErrorCode.invalid_record, -1),
    ]

    async def second_life(replicas: ReplicaManager) -> list[tuple[ErrorCode, int]]:
        answers = []
        for records in (
            corrupt(idempotent(7, 0, 2, b"c")),  # a retry's CRC is checked all the same
            idempotent(7, 0, 2, b"c"),  # retried across the restart: still a duplicate
            idempotent(7, 0, 3, b"e"),  # the next in order
            idempotent(7, 1, 4, b"f"),  # a new epoch must start at sequence 0
            idempotent(7, 1, 0, b"g"),
            idempotent(7, 0, 4, b"h"),  # the old epoch is fenced now
        ):
            result = await replicas.append("a", 0, records, acks=1, timeout_s=5)
            answers.append((result.error, result.base_offset))
        read = replicas.read("a", 0, 0, 1 << 20, -1, min_one_message=True)
        answers.append((read.error, len(values_of(read.records))))
        return answers

    assert run(tmp_path, second_life, SOLE) == [
        (ErrorCode.corrupt_message, -1),
        (ErrorCode.none, 2),
        (ErrorCode.none, 4),
        (ErrorCode.out_of_order_sequence_number, -1),
        (ErrorCode.none, 5),
        (ErrorCode.invalid_producer_epoch, -1),
        (ErrorCode.none, 6),  # a, b, c, d, e, g: each once
    ]


def test_an_acks_all_produce_appends_every_partition_before_waiting_on_any(
    tmp_path: Path,
) -> None:
    """Kafka appends a whole produce, then waits for its partitions together: a partition
    whose high watermark lags must not hold back the appends to the others."""
    lagging = image(
        5,
        {"a": (TOPIC_A, {0: partition(ME, (ME, 2)), 1: partition(ME, (ME, 2))})},
    )
    module = request_module(ApiKey.PRODUCE, 9)
    parts = tuple(
        make(module.PartitionProduceData, {"index": i, "records": batch(b"v")}) for i in (0, 1)
    )
    request = make(
        module.ProduceRequest,
        {
            "acks": -1,
            "timeout": timedelta(seconds=30),
            "topic_data": (make(module.TopicProduceData, {"name": "a", "partition_data": parts}),),
        },
    )

    async def body(replicas: ReplicaManager) -> list[int]:
        waiting = asyncio.ensure_future(data_plane.produce(replicas, request, 9))
        for _ in range(3):
            await asyncio.sleep(0)
        ends = [replicas.logs.get_log("a", i).log_end_offset for i in (0, 1)]
        assert not waiting.done()  # both wait for replication that does not exist yet
        waiting.cancel()
        return ends

    assert run(tmp_path, body, lagging) == [1, 1]


def test_a_restarted_replica_starts_from_its_checkpointed_high_watermark(tmp_path: Path) -> None:
    async def commit_three(replicas: ReplicaManager) -> None:
        result = await replicas.append("a", 0, batch(b"x", b"y", b"z"), acks=-1, timeout_s=5)
        assert result.error == ErrorCode.none

    run(tmp_path, commit_three, SOLE)  # closing writes replication-offset-checkpoint
    # Back with followers in the ISR whose progress it does not know yet: without the
    # checkpoint its high watermark would restart at 0 and hide committed records.
    shared = image(6, {"a": (TOPIC_A, {0: partition(ME, (ME, 2, 3), epoch=4)})})

    async def high_watermark(replicas: ReplicaManager) -> int | None:
        return replicas.high_watermark_of(("a", 0))

    assert run(tmp_path, high_watermark, shared) == 3


def test_a_waiting_fetch_wakes_for_its_partitions_and_reads_again_only_those(
    tmp_path: Path,
) -> None:
    led = {p: partition(ME, (ME,)) for p in (0, 2, 3)}
    two = image(5, {"a": (TOPIC_A, led)})
    module = request_module(ApiKey.FETCH, 12)
    both = dataclasses.replace(
        fetch_request(0, 15_000),
        topics=(
            make(
                module.FetchTopic,
                {
                    "topic": "a",
                    "partitions": tuple(
                        make(
                            module.FetchPartition,
                            {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20},
                        )
                        for p in (0, 2)
                    ),
                },
            ),
        ),
    )

    async def body(replicas: ReplicaManager) -> tuple[Any, list[int]]:
        reads: list[int] = []
        read = replicas.read

        def counting(topic: str, index: int, *args: Any, **kwargs: Any) -> Any:
            reads.append(index)
            return read(topic, index, *args, **kwargs)

        replicas.read = counting  # type: ignore[method-assign]
        waiting = asyncio.ensure_future(fetch(replicas, both, 12))
        await asyncio.sleep(0)
        await replicas.append("a", 3, batch(b"elsewhere"), acks=1, timeout_s=5)  # not watched
        await asyncio.sleep(0)
        assert not waiting.done()
        await replicas.append("a", 2, batch(b"x"), acks=1, timeout_s=5)
        fetched = await asyncio.wait_for(waiting, 5)
        return [values_of(p.records) for p in fetched.responses[0].partitions], reads

    values, reads = run(tmp_path, body, two)
    assert values == [[], [b"x"]]
    assert reads == [0, 2, 2]  # a-0 did not change: read once
