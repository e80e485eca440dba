"""The log cleaner (log/cleaner.py) against a model, and its swap under power cuts.

Model: every appended record (offset, key, value, timestamp) in order. After every step:
- every record the log serves sits at its original offset with its original key, value and
  timestamp (offsets and timestamps are kept; only whole records go);
- the latest record of every key is served, except a tombstone once delete.retention.ms has
  passed since it was appended (its delete horizon is at least that late), and then no
  record of that key is (an older value never outlives its tombstone, whatever the size
  of the key map);
- below the end of the last cleaned range each key appears at most once;
- each cleaned segment ends where the next one starts (the group's last batch is kept).
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from log.batch import decode_batch, encode_batch, iter_batches
from log.checkpoint import OffsetCheckpointFile
from log.cleaner import LogCleaner, clean_log, map_entry_bytes
from log.config import LogConfig, LogManagerConfig
from log.log import Log
from log.manager import LogManager
from log.records import Record
from log.runtime import Runtime
from sim.disk import SimDisk
from tests.log.test_manager import FakeClock, run_virtual

DIR = "/data/compact-0"
RETENTION_MS = 1_000
CONFIG = LogConfig(
    cleanup_policy=("compact",),
    segment_bytes=600,
    index_interval_bytes=100,
    delete_retention_ms=RETENTION_MS,
    file_delete_delay_ms=0,
)
KEYS = [b"a", b"b", b"c", b"d", b"e"]


async def open_log(seed: int, config: LogConfig = CONFIG) -> tuple[FakeClock, Log]:
    """A fresh log on a simulated disk, with the clock it reads."""
    clock, disk = FakeClock(), SimDisk(random.Random(seed))
    fs = disk.fs()
    fs.mkdir("/data")
    return clock, await Log.open(Runtime(fs, clock, random.Random(seed)), DIR, config)


@dataclass(frozen=True, slots=True)
class Appended:
    offset: int
    key: bytes
    value: bytes | None
    timestamp: int
    # The broker's clock at the append: a delete horizon counts from a clean, never earlier
    # (a record's own timestamp may be ahead of the clock).
    appended_ms: int


def served(log: Log) -> list[tuple[int, Record]]:
    """Every record the log serves, with its absolute offset."""
    out: list[tuple[int, Record]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:  # bounded: each read moves past >= 1 batch
        info = log.read(offset, 1 << 20)
        assert info.records, offset
        data = bytes(info.records)
        for position, header in iter_batches(data):
            _, records = decode_batch(data, position)
            out.extend((header.base_offset + (r.offset_delta or 0), r) for r in records)
        offset = info.next_offset
    return out


def check_against_model(log: Log, history: list[Appended], now_ms: int, cleaned_to: int) -> None:
    by_offset = {a.offset: a for a in history}
    got = served(log)
    seen_below: set[bytes] = set()
    for offset, record in got:
        appended = by_offset[offset]
        assert (record.key, record.value, record.timestamp) == (
            appended.key,
            appended.value,
            appended.timestamp,
        ), offset
        if offset < cleaned_to:
            assert record.key not in seen_below, (record.key, offset, cleaned_to)
            assert record.key is not None
            seen_below.add(record.key)
    offsets = {offset for offset, _ in got}
    latest = {a.key: a for a in history}
    for key, appended in latest.items():
        if appended.offset in offsets:
            continue
        assert appended.value is None, (key, appended)
        assert now_ms - appended.appended_ms >= RETENTION_MS, (key, appended)
        # Its tombstone gone, no older value of the key may be served (a resurrection).
        assert all(record.key != key for _, record in got), (key, appended)
    segments = log.segments
    for segment, following in itertools.pairwise(segments):
        assert segment.next_offset == following.base_offset, (segment, following)


class CleanerModelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.disk = SimDisk(random.Random(0))
        self.clock = FakeClock()
        fs = self.disk.fs()
        fs.mkdir("/data")
        self.runtime = Runtime(fs, self.clock, random.Random(0))
        self.log: Log = self.run(Log.open(self.runtime, DIR, CONFIG))
        self.history: list[Appended] = []
        self.first_dirty = 0
        self.producer_id = 7

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self.run(self.log.close())
        finally:
            self.loop.close()

    @rule(
        entries=st.lists(
            st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(max_size=40))),
            min_size=1,
            max_size=4,
        ),
        idempotent=st.booleans(),
    )
    def append(self, entries: list[tuple[bytes, bytes | None]], idempotent: bool) -> None:
        now = self.clock.now
        records = [Record(k, v, now + i) for i, (k, v) in enumerate(entries)]
        producer = {"producer_id": self.producer_id, "producer_epoch": 0, "base_sequence": 0}
        data = encode_batch(records, **(producer if idempotent else {}))
        info = self.log.append_as_leader(data, 0)
        for i, record in enumerate(records):
            self.history.append(
                Appended(info.first_offset + i, record.key, record.value, record.timestamp, now)  # type: ignore[arg-type]
            )

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.integers(1, 2 * RETENTION_MS))
    def advance_clock(self, ms: int) -> None:
        self.clock.now += ms

    @rule()
    def flush(self) -> None:
        self.run(self.log.flush())

    @rule(keys_fitting=st.sampled_from([2, 3, 1 << 20]))
    def clean(self, keys_fitting: int) -> None:
        """A pass whose key map holds ``keys_fitting`` one-byte keys (few: partly mapped)."""
        result = self.run(
            clean_log(
                self.log,
                self.first_dirty,
                now_ms=self.clock.now,
                dedupe_buffer_bytes=keys_fitting * map_entry_bytes(b"k"),
            )
        )
        if result is not None:
            assert result.next_dirty_offset >= self.first_dirty
            self.first_dirty = result.next_dirty_offset

    @rule()
    def reopen(self) -> None:
        self.run(self.log.close())
        self.log = self.run(
            Log.open(
                self.runtime,
                DIR,
                CONFIG,
                recovery_point=self.log.recovery_point,
                had_clean_shutdown=True,
            )
        )

    @invariant()
    def serves_the_model(self) -> None:
        check_against_model(self.log, self.history, self.clock.now, self.first_dirty)


CleanerModelMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_cleaner_matches_model = CleanerModelMachine.TestCase


def test_tombstone_is_removed_only_after_delete_retention() -> None:
    async def run() -> None:
        clock, log = await open_log(1)
        log.append_as_leader(encode_batch([Record(b"k", b"v", clock.now)]), 0)
        log.append_as_leader(encode_batch([Record(b"k", None, clock.now)]), 0)
        log.roll()
        log.append_as_leader(encode_batch([Record(b"other", b"x", clock.now)]), 0)
        await log.flush()
        first = await clean_log(log, 0, now_ms=clock.now)
        assert first is not None
        assert [(o, r.value) for o, r in served(log)] == [(1, None), (2, b"x")]
        clock.now += RETENTION_MS - 1
        await clean_log(log, first.next_dirty_offset, now_ms=clock.now)
        assert [o for o, _ in served(log)] == [1, 2]  # the horizon has not passed
        clock.now += 1
        await clean_log(log, first.next_dirty_offset, now_ms=clock.now)
        assert [o for o, _ in served(log)] == [2]
        assert log.log_end_offset == 3
        await log.close()

    asyncio.run(run())


def test_min_compaction_lag_keeps_young_segments_dirty() -> None:
    async def run() -> None:
        clock, log = await open_log(
            2, LogConfig(cleanup_policy=("compact",), min_compaction_lag_ms=500)
        )
        for value in (b"1", b"2"):
            log.append_as_leader(encode_batch([Record(b"k", value, clock.now)]), 0)
        log.roll()
        log.append_as_leader(encode_batch([Record(b"z", b"z", clock.now)]), 0)
        await log.flush()
        assert await clean_log(log, 0, now_ms=clock.now + 499) is None
        assert len(served(log)) == 3
        assert await clean_log(log, 0, now_ms=clock.now + 500) is not None
        assert [(o, r.value) for o, r in served(log)] == [(1, b"2"), (2, b"z")]
        await log.close()

    asyncio.run(run())


class _PowerCut(Exception):
    """Raised into the cleaner at the moment the disk lost power."""


class _CrashingFile:
    """A file handle whose fsync may be the step at which the power goes."""

    def __init__(self, inner: Any, fs: _CrashingFs) -> None:
        self._inner = inner
        self._fs = fs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def fsync(self) -> None:
        self._fs.step()
        await self._inner.fsync()


class _CrashingFs:
    """The seam over a SimDisk, cutting the power before its ``crash_at``-th durable step
    (open, rename, remove, file or directory fsync)."""

    def __init__(self, disk: SimDisk, crash_at: int) -> None:
        self._inner = disk.fs()
        self._disk = disk
        self.crash_at = crash_at
        self.steps = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps == self.crash_at:
            self._disk.crash()
            raise _PowerCut

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def open(self, path: str, *, create: bool = True) -> Any:
        self.step()
        return _CrashingFile(self._inner.open(path, create=create), self)

    def rename(self, src: str, dst: str) -> None:
        self.step()
        self._inner.rename(src, dst)

    def remove(self, path: str) -> None:
        self.step()
        self._inner.remove(path)

    async def fsync_dir(self, path: str) -> None:
        self.step()
        await self._inner.fsync_dir(path)


async def _crash_cleaning_at(crash_at: int, seed: int) -> bool:
    """Build a flushed log of duplicate keys, clean it with the power cut at step
    ``crash_at``, restart, check. True if the cleaning finished before that step."""
    clock = FakeClock()
    disk = SimDisk(random.Random(seed))
    setup_fs = disk.fs()
    setup_fs.mkdir("/data")
    await setup_fs.fsync_dir("/")
    rng = random.Random(seed)
    log = await Log.open(Runtime(setup_fs, clock, random.Random(seed)), DIR, CONFIG)
    history: list[Appended] = []
    for _ in range(30):
        records = [
            Record(rng.choice(KEYS), rng.choice([None, rng.randbytes(20)]), clock.now)
            for _ in range(rng.randint(1, 3))
        ]
        info = log.append_as_leader(encode_batch(records), 0)
        history.extend(
            Appended(info.first_offset + i, r.key, r.value, r.timestamp, clock.now)  # type: ignore[arg-type]
            for i, r in enumerate(records)
        )
    log.roll()
    await log.close()
    fs = _CrashingFs(disk, crash_at)
    runtime = Runtime(fs, clock, random.Random(seed))  # type: ignore[arg-type]
    crashed = False
    try:
        log = await Log.open(runtime, DIR, CONFIG, recovery_point=1 << 62, had_clean_shutdown=True)
        await clean_log(log, 0, now_ms=clock.now)
        await log.close()
    except (_PowerCut, OSError):
        crashed = True
    if not crashed:
        disk.crash()  # even after a finished clean, unsynced state may go
    restarted = await Log.open(Runtime(disk.fs(), clock, random.Random(seed)), DIR, CONFIG)
    # Nothing half-written is served: every served record is the model's, every key's
    # latest value is there (no tombstone is old enough to go), segments meet end to end.
    check_against_model(restarted, history, clock.now, 0)
    if not crashed:
        assert len(served(restarted)) < len(history)  # the clean did remove duplicates
    assert not [n for n in disk.fs().list_dir(DIR) if n.endswith((".cleaned", ".swap", ".deleted"))]
    await restarted.close()
    return not crashed


def test_a_power_cut_at_any_step_of_a_clean_loses_no_latest_value() -> None:
    async def run() -> None:
        for seed in range(3):
            crash_at = 1
            while not await _crash_cleaning_at(crash_at, seed):  # bounded by the clean's steps
                crash_at += 1
            assert crash_at > 5, crash_at  # the clean really went through several steps

    asyncio.run(run())


# ---- the LogManager's background cleaner ---------------------------------------------------


def _compacted_manager(disk: SimDisk, clock: FakeClock, **manager_config: Any) -> LogManager:
    runtime = Runtime(disk.fs(), clock, random.Random(4))
    config = LogManagerConfig(initial_task_delay_ms=0, cleaner_backoff_ms=100, **manager_config)
    return LogManager(runtime, ["/data"], CONFIG, manager_config=config)


async def _fill_with_updates(log: Log, clock: FakeClock, updates: int) -> None:
    """``updates`` values of the five KEYS in turn, over many segments, all fsynced."""
    for index in range(updates):
        key = KEYS[index % len(KEYS)]
        log.append_as_leader(encode_batch([Record(key, b"v%d" % index, clock.now)]), 0)
    log.roll()
    await log.flush()


def test_the_managers_cleaner_compacts_in_the_background_and_checkpoints() -> None:
    """The high watermark provider set after construction (as the broker does) bounds the
    cleaner; the cleaner-offset-checkpoint survives a restart; a truncation below it pulls
    it back, on disk too."""

    async def run() -> None:
        disk, clock = SimDisk(random.Random(4)), FakeClock()
        manager = _compacted_manager(disk, clock)
        await manager.startup()
        log = await manager.get_or_create_log("compact", 0)
        await _fill_with_updates(log, clock, 60)
        high_watermark = [30]
        manager.high_watermark_provider = lambda _tp: high_watermark[0]
        for _ in range(50):  # bounded poll in virtual time
            if manager.cleaner.first_dirty.get(("compact", 0), 0) > 0:
                break
            await asyncio.sleep(0.1)
        first_dirty = manager.cleaner.first_dirty[("compact", 0)]
        assert 0 < first_dirty <= 30
        clean_keys = [r.key for o, r in served(log) if o < first_dirty]
        assert sorted(clean_keys) == sorted(set(clean_keys))  # once each below first dirty
        assert [o for o, _ in served(log) if o >= 30] == list(range(30, 60))  # above the HW
        high_watermark[0] = log.log_end_offset
        for _ in range(50):
            if manager.cleaner.first_dirty[("compact", 0)] == log.log_end_offset:
                break
            await asyncio.sleep(0.1)
        assert [o for o, _ in served(log)] == list(range(55, 60))
        checkpoint = OffsetCheckpointFile(disk.fs(), "/data/cleaner-offset-checkpoint")
        assert checkpoint.read() == {("compact", 0): 60}
        await manager.shutdown()

        manager = _compacted_manager(disk, clock)
        await manager.startup()
        assert manager.cleaner.first_dirty == {("compact", 0): 60}
        log = manager.get_log("compact", 0)
        assert log is not None
        await log.truncate_to(57)
        assert manager.cleaner.first_dirty == {("compact", 0): 57}
        assert checkpoint.read() == {("compact", 0): 57}
        await manager.delete_log("compact", 0, "d1")
        assert checkpoint.read() == {}  # a topic made again with this name starts dirty
        await manager.shutdown()

    run_virtual(run())


def test_log_cleaner_enable_false_runs_no_cleaner() -> None:
    async def run() -> None:
        disk, clock = SimDisk(random.Random(5)), FakeClock()
        manager = _compacted_manager(disk, clock, cleaner_enable=False)
        await manager.startup()
        log = await manager.get_or_create_log("compact", 0)
        await _fill_with_updates(log, clock, 60)
        await asyncio.sleep(10)  # a hundred backoffs of virtual time
        assert len(served(log)) == 60
        assert await manager.clean_dirtiest_log() is not None  # it was dirty enough
        assert len(served(log)) == 5
        await manager.shutdown()

    run_virtual(run())


def test_a_log_being_copied_to_another_dir_is_not_cleaned_until_its_copy_is_done() -> None:
    """Kafka's abortAndPauseCleaning for AlterReplicaLogDirs: no pass picks a log whose copy
    into another dir is being made, and a pass under way when the copy begins swaps
    nothing in; once the copy is swapped in (or dropped) the log is cleaned again."""

    async def run() -> None:
        disk, clock = SimDisk(random.Random(6)), FakeClock()
        runtime = Runtime(disk.fs(), clock, random.Random(6))
        manager = LogManager(runtime, ["/d1", "/d2"], CONFIG)
        await manager.load_logs()
        log = await manager.get_or_create_log("compact", 0)
        await _fill_with_updates(log, clock, 60)
        before = served(log)
        future = await manager.create_future_log("compact", 0, "/d2", "u1")
        assert await manager.clean_dirtiest_log() is None
        assert served(log) == before

        # A pass that had begun: the copy's start is seen before the first swap.
        checks = iter([False])
        result = await clean_log(log, 0, now_ms=clock.now, paused=lambda: next(checks, True))
        assert result is None and served(log) == before
        assert not [n for n in disk.fs().list_dir(log.dir_path) if n.endswith(".cleaned")]

        while not future.caught_up:  # bounded: each slice copies a batch at least
            await future.copy_slice(1024)
        assert await manager.promote_future_log("compact", 0, "u2", lambda _log: None) == "/d2"
        moved = manager.get_log("compact", 0)
        assert moved is not None and served(moved) == before
        assert await manager.clean_dirtiest_log() is not None
        after = served(moved)
        assert len(after) < len(before) and after[-5:] == before[-5:]  # the latest stay
        await manager.shutdown()

    run_virtual(run())


def test_max_compaction_lag_rolls_and_cleans_a_log_below_its_dirty_ratio() -> None:
    lagging = LogConfig(cleanup_policy=("compact",), max_compaction_lag_ms=1000)
    assert lagging.max_segment_ms == 1000  # the active segment rolls by it too
    assert LogConfig(max_compaction_lag_ms=1000).max_segment_ms == LogConfig().segment_ms

    async def run() -> None:
        clock, log = await open_log(
            6,
            LogConfig(
                cleanup_policy=("compact",),
                min_cleanable_dirty_ratio=0.9,
                max_compaction_lag_ms=1000,
                segment_ms=500,
            ),
        )
        cleaner = LogCleaner(now_ms=clock.now_ms, dedupe_buffer_bytes=1 << 20)
        tp = ("compact", 0)
        for index in range(40):
            log.append_as_leader(encode_batch([Record(b"k%d" % index, b"v", clock.now)]), 0)
        clock.now += 501
        log.append_as_leader(encode_batch([Record(b"k0", b"new", clock.now)]), 0)
        await log.flush()
        assert cleaner.dirtiest([(tp, log)]) == (tp, log)  # all dirty: ratio 1
        await cleaner.clean(tp, log)
        assert cleaner.first_dirty == {tp: 40}
        clock.now += 501
        log.append_as_leader(encode_batch([Record(b"k1", b"new", clock.now)]), 0)
        await log.flush()
        # k0's update is dirty, a small part of the bytes, and younger than the lag ...
        assert cleaner.dirtiest([(tp, log)]) is None
        clock.now += 499
        assert cleaner.dirtiest([(tp, log)]) == (tp, log)  # ... and now older than it
        await cleaner.clean(tp, log)
        assert [r.key for _, r in served(log)].count(b"k0") == 1
        await log.close()

    asyncio.run(run())


def test_an_idle_log_is_cleaned_again_once_its_tombstones_expire() -> None:
    async def run() -> None:
        clock, log = await open_log(7)
        cleaner = LogCleaner(now_ms=clock.now_ms, dedupe_buffer_bytes=1 << 20)
        tp = ("compact", 0)
        log.append_as_leader(encode_batch([Record(b"k", b"v", clock.now)]), 0)
        log.append_as_leader(encode_batch([Record(b"k", None, clock.now)]), 0)
        log.roll()
        await log.flush()
        await cleaner.clean(tp, log)
        assert cleaner.delete_horizon == {tp: clock.now + RETENTION_MS}
        assert [o for o, _ in served(log)] == [1]
        clock.now += RETENTION_MS - 1
        assert cleaner.dirtiest([(tp, log)]) is None  # nothing dirty, horizon ahead
        clock.now += 1
        assert cleaner.dirtiest([(tp, log)]) == (tp, log)
        await cleaner.clean(tp, log)
        assert served(log) == [] and cleaner.delete_horizon == {}
        assert cleaner.dirtiest([(tp, log)]) is None
        await log.close()

    asyncio.run(run())


def test_a_consumers_read_steps_over_batches_the_cleaner_emptied() -> None:
    """librdkafka cannot move past a fetch answer of record-less batches; replicas and the
    producer state rebuild still read them."""

    async def run() -> None:
        clock, log = await open_log(8, LogConfig(cleanup_policy=("compact",), segment_bytes=100))
        for key, value in ((b"a", b"1"), (b"a", b"2"), (b"b", b"1")):  # one segment each
            log.append_as_leader(encode_batch([Record(key, value, clock.now)]), 0)
        await log.flush()
        assert [s.base_offset for s in log.segments] == [0, 1, 2]
        assert await clean_log(log, 0, now_ms=clock.now) is not None
        emptied = decode_batch(bytes(log.read(0, 1 << 20).records))
        assert emptied[0].base_offset == 0 and emptied[1] == []  # kept: its segment's end
        consumer = log.read(0, 1 << 20, max_offset=log.log_end_offset, skip_emptied=True)
        header, records = decode_batch(bytes(consumer.records))
        assert (header.base_offset, [r.value for r in records]) == (1, [b"2"])
        await log.close()

    asyncio.run(run())


def test_a_full_key_map_never_lets_an_old_value_outlive_its_tombstone() -> None:
    """log.cleaner.dedupe.buffer.size smaller than a segment's keys: the pass maps what fits
    and cleans only up to there, so a tombstone it did not map is never removed while an
    older value of its key stays behind."""

    async def run() -> None:
        clock, log = await open_log(9)
        three_keys = 3 * map_entry_bytes(b"k")
        log.append_as_leader(encode_batch([Record(b"k", b"old", clock.now)]), 0)
        log.roll()
        await log.flush()
        first = await clean_log(log, 0, now_ms=clock.now, dedupe_buffer_bytes=three_keys)
        assert first is not None and first.next_dirty_offset == 1  # "old" is clean now
        for key in (b"a", b"b", b"c", b"d"):
            log.append_as_leader(encode_batch([Record(key, b"x", clock.now)]), 0)
        log.append_as_leader(encode_batch([Record(b"k", None, clock.now)]), 0)  # offset 5
        log.roll()
        await log.flush()
        first_dirty = 1
        for _ in range(6):  # passes, with the clock past every delete horizon in between
            result = await clean_log(
                log, first_dirty, now_ms=clock.now, dedupe_buffer_bytes=three_keys
            )
            if result is not None:
                assert result.next_dirty_offset > first_dirty or result.segments_cleaned
                first_dirty = result.next_dirty_offset
            clock.now += 2 * RETENTION_MS
            values = [r.value for _, r in served(log) if r.key == b"k"]
            assert values in ([b"old", None], [None], []), values  # never "old" alone
        assert first_dirty == 6  # every pass moved on, a partly mapped segment included
        assert [r.key for _, r in served(log)] == [b"a", b"b", b"c", b"d"]
        await log.close()

    asyncio.run(run())
