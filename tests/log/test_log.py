"""The Log: offsets assigned or kept, reads, rolls, truncation, log start offset, retention,
delayed file deletion, flush and disk failures."""

from __future__ import annotations

import asyncio
import errno
import random
import selectors
from collections.abc import Coroutine
from dataclasses import replace
from typing import Any

import pytest

from log.batch import encode_batch, iter_batches, validate_batch
from log.config import LogConfig
from log.errors import CorruptRecordError, InvalidRecordError
from log.log import (
    KafkaStorageError,
    Log,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from log.records import Record
from log.runtime import Runtime
from sim.disk import SimDisk

DIR = "/data/topic-0"
NOW_MS = 1_700_000_000_000


class FakeClock:
    """A WallClock the test moves by hand."""

    def __init__(self, now_ms: int = NOW_MS) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


class _VirtualSelector(selectors.DefaultSelector):
    """Instead of blocking for ``timeout``, advance the loop's virtual clock by it."""

    loop: VirtualTimeLoop

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None:
            raise RuntimeError("virtual loop would block forever")
        self.loop.virtual_now += max(0.0, timeout)
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose sleeps and timers take no wall time."""

    def __init__(self) -> None:
        self.virtual_now = 0.0
        selector = _VirtualSelector()
        selector.loop = self
        super().__init__(selector)

    def time(self) -> float:
        return self.virtual_now


def run_virtual(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def make_runtime(seed: int = 0) -> tuple[SimDisk, Runtime, FakeClock]:
    disk = SimDisk(random.Random(seed))
    clock = FakeClock()
    fs = disk.fs()
    fs.mkdir("/data")
    return disk, Runtime(fs, clock, random.Random(seed)), clock


def batch(records: int = 2, *, ts: int = NOW_MS, value: bytes = b"v" * 30, **kwargs: Any) -> bytes:
    return encode_batch([Record(b"k", value, ts + i) for i in range(records)], **kwargs)


def config(**overrides: Any) -> LogConfig:
    return LogConfig(**{"file_delete_delay_ms": 0, **overrides})


def all_batches(log: Log) -> list[tuple[int, int, int]]:
    """(base offset, last offset, leader epoch) of every batch, read through Log.read."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:  # bounded: reads always make progress
        result = log.read(offset, 1 << 20)
        records = bytes(result.records)
        assert len(records) > 0
        for position, _ in iter_batches(records):
            header = validate_batch(records, position)
            out.append((header.base_offset, header.last_offset, header.partition_leader_epoch))
        offset = result.next_offset
    return out


def test_leader_append_assigns_offsets_and_epoch_in_place() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        data = bytearray(batch(3) + batch(2))
        info = log.append_as_leader(data, leader_epoch=5)
        assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (
            0,
            4,
            2,
            5,
        )
        assert info.last_offset_of_first_batch == 2
        assert info.max_timestamp == NOW_MS + 2 and info.offset_of_max_timestamp == 2
        assert [h.base_offset for _, h in iter_batches(data)] == [0, 3]  # stamped in place
        info = log.append_as_leader(batch(1), leader_epoch=6)
        assert info.first_offset == 5
        assert log.log_end_offset == 6
        assert all_batches(log) == [(0, 2, 5), (3, 4, 5), (5, 5, 6)]
        assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [
            (5, 0),
            (6, 5),
        ]

    asyncio.run(run())


def test_leader_append_rejects_bad_batches_without_appending() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config(max_message_bytes=500, segment_bytes=2000))
        corrupt = bytearray(batch(1))
        corrupt[-1] ^= 0xFF
        with pytest.raises(CorruptRecordError):
            log.append_as_leader(batch(1) + bytes(corrupt), 0)
        with pytest.raises(CorruptRecordError):
            log.append_as_leader(batch(1) + batch(1)[:30], 0)  # partial trailing batch
        with pytest.raises(RecordTooLargeError):
            log.append_as_leader(batch(1, value=b"x" * 600), 0)
        with pytest.raises(RecordBatchTooLargeError):
            log.append_as_leader(b"".join(batch(3) for _ in range(20)), 0)
        gappy = encode_batch(
            [Record(None, b"a", 1, offset_delta=0), Record(None, b"b", 1, offset_delta=2)]
        )
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(gappy, 0)
        assert log.log_end_offset == 0 and log.size == 0

    asyncio.run(run())


def test_follower_append_keeps_offsets_and_refuses_to_go_back() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        data = batch(2, base_offset=0, partition_leader_epoch=1) + batch(
            3, base_offset=2, partition_leader_epoch=3
        )
        info = log.append_as_follower(data)
        assert (info.first_offset, info.last_offset) == (0, 4)
        assert log.log_end_offset == 5
        assert all_batches(log) == [(0, 1, 1), (2, 4, 3)]
        assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries()] == [
            (1, 0),
            (3, 2),
        ]
        with pytest.raises(UnexpectedAppendOffsetError):
            log.append_as_follower(batch(1, base_offset=4, partition_leader_epoch=3))
        with pytest.raises(UnexpectedAppendOffsetError):
            log.append_as_follower(batch(1, base_offset=6) + batch(1, base_offset=6))
        assert log.log_end_offset == 5

    asyncio.run(run())


def test_read_outside_the_log_is_offset_out_of_range() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        log.append_as_leader(batch(2), 0)
        assert len(log.read(2, 1000).records) == 0  # at the LEO: empty, not an error
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(3, 1000)
        assert info.value.kafka_error_code == 1
        await log.delete_records(1)
        with pytest.raises(OffsetOutOfRangeError):
            log.read(0, 1000)
        assert log.read(1, 1000).next_offset == 2  # the batch holding the start offset

    asyncio.run(run())


def test_read_honours_max_bytes_max_offset_and_first_oversized_batch() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        sizes = []
        for _ in range(5):
            data = batch(2)
            sizes.append(len(data))
            log.append_as_leader(data, 0)
        assert len(log.read(0, sizes[0] * 2 + 5).records) == sizes[0] * 2
        assert len(log.read(0, 10).records) == sizes[0]
        assert len(log.read(0, 10, min_one_message=False).records) == 0
        bounded = log.read(0, 1 << 20, max_offset=5)  # high watermark 5 splits batch 4..5
        assert [h.base_offset for _, h in iter_batches(bytes(bounded.records))] == [0, 2]
        assert bounded.next_offset == 4
        assert len(log.read(6, 1 << 20, max_offset=6).records) == 0

    asyncio.run(run())


def test_roll_on_segment_bytes() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        size = len(batch(2))
        log = await Log.open(runtime, DIR, config(segment_bytes=3 * size))
        for _ in range(10):
            log.append_as_leader(batch(2), 0)
        assert [s.base_offset for s in log.segments] == [0, 6, 12, 18]
        assert all(s.size <= 3 * size for s in log.segments)
        assert [b[0] for b in all_batches(log)] == list(range(0, 20, 2))
        assert runtime.fs.list_dir(DIR)[:3] == [
            "00000000000000000000.index",
            "00000000000000000000.log",
            "00000000000000000000.timeindex",
        ]

    asyncio.run(run())


def test_roll_on_segment_ms_by_wall_clock_when_batches_carry_no_timestamp() -> None:
    async def run() -> None:
        _, runtime, clock = make_runtime()
        log = await Log.open(runtime, DIR, config(segment_ms=60_000))
        log.append_as_leader(batch(1, ts=-1), 0)
        clock.now += 60_000
        log.append_as_leader(batch(1, ts=-1), 0)
        assert len(log.segments) == 1
        clock.now += 1
        log.append_as_leader(batch(1, ts=-1), 0)
        assert [s.base_offset for s in log.segments] == [0, 2]

    asyncio.run(run())


def test_roll_on_segment_ms_by_record_time_with_jitter_from_the_injected_random() -> None:
    async def run() -> tuple[list[int], int]:
        _, runtime, _ = make_runtime(seed=7)
        log = await Log.open(runtime, DIR, config(segment_ms=1000, segment_jitter_ms=500))
        jitter = log.active_segment.roll_jitter_ms
        assert 0 <= jitter < 500
        log.append_as_leader(batch(1, ts=NOW_MS), 0)
        log.append_as_leader(batch(1, ts=NOW_MS + 1000 - jitter), 0)
        assert len(log.segments) == 1
        log.append_as_leader(batch(1, ts=NOW_MS + 1001 - jitter), 0)
        return [s.base_offset for s in log.segments], jitter

    first = asyncio.run(run())
    assert first[0] == [0, 2]
    assert asyncio.run(run()) == first  # same seed, same jitter


def test_roll_when_the_offset_index_is_full() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config(segment_index_bytes=24, index_interval_bytes=0))
        for _ in range(7):
            log.append_as_leader(batch(1), 0)
        # Entries go to every batch but a segment's first; three entries fill a 24-byte index.
        assert [s.base_offset for s in log.segments] == [0, 4]
        assert log.segments[0].offset_index.is_full()

    asyncio.run(run())


def test_truncate_to_cuts_segments_indexes_and_epoch_cache() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        size = len(batch(2))
        log = await Log.open(runtime, DIR, config(segment_bytes=3 * size, index_interval_bytes=0))
        for epoch in range(10):
            log.append_as_leader(batch(2), epoch)
        await log.flush()
        assert await log.truncate_to(9)  # inside batch 8..9: the whole batch goes
        assert log.log_end_offset == 8
        assert log.recovery_point == 8
        assert [s.base_offset for s in log.segments] == [0, 6]
        assert log.active_segment.offset_index.last_offset < 8
        assert log.latest_epoch == 3
        assert log.end_offset_for_epoch(3) == (3, 8)
        assert not any(n.startswith("00000000000000000012") for n in runtime.fs.list_dir(DIR))
        assert not await log.truncate_to(100)
        log.append_as_leader(batch(2), 11)
        assert all_batches(log)[-2:] == [(6, 7, 3), (8, 9, 11)]

    asyncio.run(run())


def test_truncate_fully_and_start_at_empties_the_log() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config(segment_bytes=500))
        for _ in range(10):
            log.append_as_leader(batch(2), 1)
        await log.truncate_fully_and_start_at(1000)
        assert (log.log_start_offset, log.log_end_offset, log.recovery_point) == (1000, 1000, 1000)
        assert log.leader_epoch_cache.is_empty()
        assert [s.base_offset for s in log.segments] == [1000]
        log.append_as_follower(batch(1, base_offset=1000, partition_leader_epoch=4))
        assert all_batches(log) == [(1000, 1000, 4)]

    asyncio.run(run())


def test_delete_records_advances_start_offset_drops_segments_and_checkpoints() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        calls: list[int] = []

        async def hook(log: Log) -> None:
            calls.append(log.log_start_offset)

        log = await Log.open(runtime, DIR, config(segment_bytes=3 * len(batch(2))))
        log.checkpoint_hook = hook
        for epoch in range(10):
            log.append_as_leader(batch(2), epoch)
        assert await log.delete_records(13) == 13
        assert calls == [13]
        assert log.segments[0].base_offset == 12
        assert log.leader_epoch_cache.entries()[0].start_offset == 13
        assert await log.delete_records(5) == 13  # never backwards
        with pytest.raises(OffsetOutOfRangeError):
            await log.delete_records(21)
        with pytest.raises(OffsetOutOfRangeError):
            await log.delete_records(15, high_watermark=14)

    asyncio.run(run())


def test_retention_by_time_uses_the_largest_timestamp_of_each_segment() -> None:
    async def run() -> None:
        _, runtime, clock = make_runtime()
        size = len(batch(2))
        log = await Log.open(runtime, DIR, config(segment_bytes=2 * size, retention_ms=10_000))
        for n in range(6):
            log.append_as_leader(batch(2, ts=NOW_MS + n * 1000), 0)
        assert [s.base_offset for s in log.segments] == [0, 4, 8]
        clock.now = NOW_MS + 11_001 + 1  # segment 0's newest record (t+1001) is now too old
        assert await log.delete_old_segments() == 1
        assert log.log_start_offset == 4
        clock.now = NOW_MS + 100_000
        # Everything expired: the active segment goes too, after a roll keeps the log whole.
        assert await log.delete_old_segments() == 2
        assert [s.base_offset for s in log.segments] == [12]
        assert log.log_start_offset == log.log_end_offset == 12

    asyncio.run(run())


def test_retention_by_bytes_and_high_watermark_bound() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        size = len(batch(2))
        log = await Log.open(
            runtime, DIR, config(segment_bytes=2 * size, retention_bytes=3 * size, retention_ms=-1)
        )
        for _ in range(8):
            log.append_as_leader(batch(2), 0)
        assert log.size == 8 * size
        assert await log.delete_old_segments(high_watermark=4) == 1  # only 0..3 is committed
        assert await log.delete_old_segments() == 1
        assert log.size == 4 * size
        assert log.log_start_offset == 8

    asyncio.run(run())


def test_compact_only_topic_is_never_deleted_by_retention() -> None:
    async def run() -> None:
        _, runtime, clock = make_runtime()
        size = len(batch(2))
        compact = LogConfig.from_properties(
            {"cleanup.policy": "compact", "retention.ms": "1000", "retention.bytes": "1"},
            config(segment_bytes=2 * size),
        )
        log = await Log.open(runtime, DIR, compact)
        for _ in range(6):
            log.append_as_leader(batch(2), 0)
        clock.now = NOW_MS + 100_000
        assert await log.delete_old_segments() == 0
        assert log.log_start_offset == 0
        # compact,delete keeps retention, as in Kafka.
        log.update_config(replace(compact, cleanup_policy=("compact", "delete")))
        assert await log.delete_old_segments() == 3

    asyncio.run(run())


def test_kafkas_smallest_segment_index_bytes_works_in_the_log() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        # segment.index.bytes=4 (Kafka's minimum) holds less than one entry: every
        # segment takes one index entry and then rolls, as in Kafka.
        tiny = LogConfig.from_properties({"segment.index.bytes": "4"}, config())
        log = await Log.open(runtime, DIR, replace(tiny, index_interval_bytes=0))
        for _ in range(5):
            log.append_as_leader(batch(2), 0)
        assert all_batches(log) == [(2 * n, 2 * n + 1, 0) for n in range(5)]
        assert bytes(log.read(6, 1 << 20).records)[:8] == (6).to_bytes(8, "big")

    asyncio.run(run())


def test_log_config_refuses_what_the_topic_config_table_refuses_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"configuration segment\.index\.bytes:"):
        LogConfig.from_properties({"segment.index.bytes": "3"})
    with pytest.raises(ValueError, match=r"configuration log\.cleanup\.policy:"):
        LogConfig.from_properties({"log.cleanup.policy": "shred"})
    assert LogConfig.from_properties({"log.cleanup.policy": "compact"}).compact


def test_deleted_segments_are_renamed_then_removed_after_the_delay() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        size = len(batch(2))
        log = await Log.open(
            runtime, DIR, config(segment_bytes=2 * size, file_delete_delay_ms=60_000)
        )
        for _ in range(4):
            log.append_as_leader(batch(2), 0)
        await log.delete_records(4)
        names = runtime.fs.list_dir(DIR)
        assert "00000000000000000000.log.deleted" in names
        assert "00000000000000000000.index.deleted" in names
        assert "00000000000000000000.log" not in names
        assert log.pending_deletions == 1
        await asyncio.sleep(59.9)
        assert "00000000000000000000.log.deleted" in runtime.fs.list_dir(DIR)
        await asyncio.sleep(0.2)
        assert not any(n.endswith(".deleted") for n in runtime.fs.list_dir(DIR))
        assert log.pending_deletions == 0

    run_virtual(run())


def test_flush_advances_recovery_point_and_survives_a_crash() -> None:
    async def run() -> None:
        disk, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config(segment_bytes=400))
        for _ in range(10):
            log.append_as_leader(batch(2), 0)
        assert log.recovery_point == 0
        await log.flush(12)
        assert log.recovery_point == 12
        disk.crash()
        runtime2 = Runtime(disk.fs(), runtime.clock, random.Random(1))
        reopened = await Log.open(runtime2, DIR, config(segment_bytes=400))
        assert reopened.log_end_offset >= 12
        assert [b[0] for b in all_batches(reopened)][:6] == [0, 2, 4, 6, 8, 10]

    asyncio.run(run())


def test_failed_fsync_propagates_and_takes_the_log_offline() -> None:
    async def run() -> None:
        disk, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        log.append_as_leader(batch(2), 0)
        disk.fail_fsyncs(1)
        with pytest.raises(OSError) as info:
            await log.flush()
        assert info.value.errno == errno.EIO
        assert log.recovery_point == 0
        assert not log.is_online
        with pytest.raises(KafkaStorageError):
            log.append_as_leader(batch(2), 0)
        with pytest.raises(KafkaStorageError):
            await log.flush()

    asyncio.run(run())


def test_failed_write_leaves_the_log_consistent_and_usable() -> None:
    async def run() -> None:
        disk, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        log.append_as_leader(batch(2), 0)
        disk.fail_writes(errno.ENOSPC)
        with pytest.raises(OSError):
            log.append_as_leader(batch(2), 0)
        disk.fail_writes(None)
        assert log.log_end_offset == 2 and log.is_online
        log.append_as_leader(batch(2), 0)
        assert [b[0] for b in all_batches(log)] == [0, 2]

    asyncio.run(run())


def test_flush_messages_policy_flushes_in_the_background() -> None:
    async def run() -> None:
        disk, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config(flush_messages=4))
        log.append_as_leader(batch(2), 0)
        await asyncio.sleep(0)
        assert log.recovery_point == 0
        fsyncs = disk.fsyncs
        log.append_as_leader(batch(2), 0)
        await asyncio.sleep(0.01)
        assert log.recovery_point == 4
        assert disk.fsyncs > fsyncs

    run_virtual(run())


def test_clean_close_and_reopen_keeps_everything() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        cfg = config(segment_bytes=500, index_interval_bytes=50)
        log = await Log.open(runtime, DIR, cfg)
        for epoch in range(20):
            log.append_as_leader(batch(2), epoch // 5)
        await log.delete_records(3)
        before = all_batches(log)
        entries = log.leader_epoch_cache.entries()
        await log.close()
        reopened = await Log.open(
            runtime,
            DIR,
            cfg,
            recovery_point=log.recovery_point,
            log_start_offset=log.log_start_offset,
            had_clean_shutdown=True,
        )
        assert all_batches(reopened) == before
        assert reopened.leader_epoch_cache.entries() == entries
        assert reopened.recovery_point == reopened.log_end_offset == 40

    asyncio.run(run())


def test_fetch_offset_by_timestamp_finds_the_first_record_at_or_after() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config(segment_bytes=300, index_interval_bytes=0))
        for n in range(10):
            log.append_as_leader(batch(2, ts=NOW_MS + 10 * n), 0)
        assert log.fetch_offset_by_timestamp(NOW_MS + 31) == (7, NOW_MS + 31)
        assert log.fetch_offset_by_timestamp(NOW_MS + 32) == (8, NOW_MS + 40)
        assert log.fetch_offset_by_timestamp(NOW_MS + 1000) is None

    asyncio.run(run())


def test_log_config_maps_kafka_keys_with_topic_keys_overriding_broker_defaults() -> None:
    cfg = LogConfig.from_properties(
        {
            "retention.ms": "5000",
            "log.retention.ms": "9",
            "log.retention.hours": "1",
            "log.segment.bytes": "4096",
            "segment.jitter.ms": "7",
            "num.network.threads": "3",
        }
    )
    assert (cfg.retention_ms, cfg.segment_bytes, cfg.segment_jitter_ms) == (5000, 4096, 7)
    assert LogConfig.from_properties({"log.retention.hours": "2"}).retention_ms == 7_200_000
    assert LogConfig().to_properties()["segment.bytes"] == str(1 << 30)
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=10)
