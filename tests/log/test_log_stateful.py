"""Hypothesis stateful test: the Log against a model that is just a list of batches.

Rules append (as leader and follower), read at random offsets and limits, truncate, roll
(tiny segments and indexes), delete records, apply retention, flush, and close and reopen
cleanly. After every step a full scan through Log.read must return exactly the model's
visible batches, byte for byte, and the epoch cache must name each batch's epoch.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from log.batch import encode_batch, iter_batches, validate_batch
from log.config import LogConfig
from log.log import Log, UnexpectedAppendOffsetError
from log.records import Record
from log.runtime import Runtime
from sim.disk import SimDisk

DIR = "/data/model-0"
NOW_MS = 1_700_000_000_000
CONFIG = LogConfig(
    segment_bytes=1400,
    segment_index_bytes=48,  # 6 offset entries, 4 time entries: full indexes roll too
    index_interval_bytes=100,
    retention_ms=-1,
    retention_bytes=3000,
    file_delete_delay_ms=60_000,  # deletions stay pending: close/reopen must clean them up
)


class FakeClock:
    def __init__(self) -> None:
        self.now = NOW_MS

    def now_ms(self) -> int:
        return self.now


@dataclass(frozen=True, slots=True)
class ModelBatch:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class LogModelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.disk = SimDisk(random.Random(0))
        self.clock = FakeClock()
        fs = self.disk.fs()
        fs.mkdir("/data")
        self.runtime = Runtime(fs, self.clock, random.Random(0))
        self.log: Log = self.run(Log.open(self.runtime, DIR, CONFIG))
        self.batches: list[ModelBatch] = []
        self.origin = 0  # LEO of an empty model (changes with truncate_fully_and_start_at)
        self.start = 0
        self.epoch = 0

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            if self.log.is_online:
                self.run(self.log.close())
        finally:
            self.loop.close()

    # ---- model helpers ------------------------------------------------------------------
    @property
    def leo(self) -> int:
        return self.batches[-1].last_offset + 1 if self.batches else self.origin

    def visible(self) -> list[ModelBatch]:
        return [b for b in self.batches if b.last_offset >= self.start]

    def _records(self, count: int, value_size: int) -> list[Record]:
        self.clock.now += 1
        return [Record(b"k", b"x" * value_size, self.clock.now) for _ in range(count)]

    # ---- appends ------------------------------------------------------------------------
    @rule(
        sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 80)), min_size=1, max_size=3),
        new_epoch=st.booleans(),
    )
    def append_as_leader(self, sizes: list[tuple[int, int]], new_epoch: bool) -> None:
        self.epoch += int(new_epoch)
        data = bytearray(b"".join(encode_batch(self._records(c, v)) for c, v in sizes))

        async def append() -> None:
            info = self.log.append_as_leader(data, self.epoch)
            assert info.first_offset == self.leo

        self.run(append())
        for position, header in iter_batches(data):
            raw = bytes(data[position : position + header.size])
            self.batches.append(ModelBatch(header.base_offset, header.last_offset, self.epoch, raw))

    @rule(count=st.integers(1, 4), value_size=st.integers(0, 80), new_epoch=st.booleans())
    def append_as_follower(self, count: int, value_size: int, new_epoch: bool) -> None:
        self.epoch += int(new_epoch)
        data = encode_batch(
            self._records(count, value_size),
            base_offset=self.leo,
            partition_leader_epoch=self.epoch,
        )

        async def append() -> None:
            self.log.append_as_follower(data)

        self.run(append())
        self.batches.append(ModelBatch(self.leo, self.leo + count - 1, self.epoch, data))

    @precondition(lambda self: self.leo > 0)
    @rule(back=st.integers(1, 10))
    def follower_append_below_leo_is_refused(self, back: int) -> None:
        data = encode_batch(self._records(1, 1), base_offset=max(0, self.leo - back))
        try:
            self.log.append_as_follower(data)
        except UnexpectedAppendOffsetError:
            return
        raise AssertionError("append below the LEO was accepted")

    # ---- reads --------------------------------------------------------------------------
    @rule(
        data=st.data(),
        max_bytes=st.integers(1, 1500),
        bounded=st.booleans(),
        min_one=st.booleans(),
    )
    def read(self, data: st.DataObject, max_bytes: int, bounded: bool, min_one: bool) -> None:
        offset = data.draw(st.integers(self.start, self.leo), label="offset")
        max_offset = (
            data.draw(st.integers(offset, self.leo), label="max_offset") if bounded else None
        )
        result = self.log.read(offset, max_bytes, max_offset=max_offset, min_one_message=min_one)
        expected = [b for b in self.visible() if b.last_offset >= offset]
        got = bytes(result.records)
        if not expected or (max_offset is not None and expected[0].last_offset >= max_offset):
            assert got == b""
            return
        first = expected[0]
        if len(first.data) > max_bytes and not min_one:
            assert got == b""
            return
        assert got, "a readable batch was not returned"
        # A contiguous run of model batches, whole, starting at the one holding the offset.
        position = 0
        count = 0
        for model in expected:  # bounded by the model size
            if position == len(got):
                break
            assert got[position : position + len(model.data)] == model.data
            if max_offset is not None:
                assert model.last_offset < max_offset
            position += len(model.data)
            count += 1
        assert position == len(got)
        assert count == 1 or len(got) <= max_bytes
        assert result.next_offset == expected[count - 1].last_offset + 1

    # ---- truncation and start offset ----------------------------------------------------
    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.leo + 2), label="target")
        first_base = self.log.segments[0].base_offset
        changed = self.run(self.log.truncate_to(target))
        assert changed == (target < self.leo)
        if not changed:
            return
        if target < first_base:
            self.batches, self.origin, self.start = [], target, target
            return
        self.batches = [b for b in self.batches if b.last_offset < target]
        if not self.batches:
            self.origin = first_base
        self.start = min(self.start, self.leo)

    @rule(gap=st.integers(0, 50))
    def truncate_fully_and_start_at(self, gap: int) -> None:
        new_offset = self.leo + gap
        self.run(self.log.truncate_fully_and_start_at(new_offset))
        self.batches, self.origin, self.start = [], new_offset, new_offset

    @rule(data=st.data())
    def delete_records(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.leo), label="offset")
        assert self.run(self.log.delete_records(offset)) == max(self.start, offset)
        self.start = max(self.start, offset)

    @rule()
    def retention(self) -> None:
        self.run(self.log.delete_old_segments())
        new_start = self.log.log_start_offset
        assert new_start >= self.start
        assert new_start in {s.base_offset for s in self.log.segments} or new_start == self.start
        self.start = new_start

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        up_to = data.draw(st.integers(0, self.leo + 5), label="up_to")
        before = self.log.recovery_point
        self.run(self.log.flush(up_to))
        assert self.log.recovery_point == max(before, min(up_to, self.leo))

    @rule()
    def close_and_reopen(self) -> None:
        self.run(self.log.close())
        assert self.log.recovery_point == self.leo
        self.log = self.run(
            Log.open(
                self.runtime,
                DIR,
                CONFIG,
                recovery_point=self.log.recovery_point,
                log_start_offset=self.log.log_start_offset,
                had_clean_shutdown=True,
            )
        )
        assert not any(n.endswith(".deleted") for n in self.runtime.fs.list_dir(DIR))

    # ---- invariants ---------------------------------------------------------------------
    @invariant()
    def log_matches_model(self) -> None:
        log = self.log
        assert log.log_end_offset == self.leo
        assert log.log_start_offset == self.start
        scanned: list[bytes] = []
        offset = self.start
        while offset < self.leo:  # bounded: each read returns at least one batch
            result = log.read(offset, 2000)
            records = bytes(result.records)
            assert len(records) > 0
            for position, header in iter_batches(records):
                validate_batch(records, position)
                scanned.append(records[position : position + header.size])
            offset = result.next_offset
        assert scanned == [b.data for b in self.visible()]
        cache = log.leader_epoch_cache
        for model in self.visible():
            if model.base_offset >= self.start:
                assert cache.epoch_for_offset(model.base_offset) == model.epoch, (model, cache)


LogModelMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLogModel = LogModelMachine.TestCase
