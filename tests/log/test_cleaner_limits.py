"""The cleaner's memory and loop time (issue 22).

On main the offset map charged 24 bytes plus the key per entry, so 4.5M 4-byte keys took
306 MB against a 128 MiB log.cleaner.dedupe.buffer.size, and one batch's keys were scanned,
mapped and checked in single steps that held the loop up to 2.7 s. The loop test counts the
keys each turn of the loop scans, maps and looks up (the CPU a turn takes is printed by
bench/bench_slices.py).
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections import Counter

import pytest

import log.batch
import log.cleaner
from log.batch import encode_batch
from log.cleaner import YIELD_EVERY_RECORDS, OffsetMap, clean_log, map_entry_bytes
from log.compression import Compression
from log.config import LogConfig
from log.records import Record, RecordKeyScan
from tests.log.test_cleaner import open_log
from tests.loop_turns import busy, work_per_turn

RECORDS = 400_000


def test_the_offset_map_stays_within_its_budget_in_real_bytes() -> None:
    budget = 8 << 20
    tracemalloc.start()
    try:
        offset_map = OffsetMap(budget)
        index = 0
        while offset_map.put(index.to_bytes(4, "big"), 10**10 + index):
            index += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert index == len(offset_map) > 40_000
    assert offset_map.used_bytes <= budget
    assert peak <= budget, f"{peak / 2**20:.1f} MiB for a map of {budget / 2**20:.0f} MiB"
    assert map_entry_bytes(b"abcd") == 168


def count_key_work(monkeypatch: pytest.MonkeyPatch, tally: Counter[str]) -> None:
    """The cleaner's key scans and offset map count what they do in ``tally``: records
    "scanned", keys "mapped" (put), keys "looked up" (get)."""

    class CountingScan(RecordKeyScan):
        __slots__ = ()

        def scan(self, records: int) -> None:
            before = len(self.keys)
            super().scan(records)
            tally["scanned"] += len(self.keys) - before

    class CountingMap(OffsetMap):
        __slots__ = ()

        def put(self, key: bytes, offset: int) -> bool:
            tally["mapped"] += 1
            return super().put(key, offset)

        def get(self, key: bytes) -> int:
            tally["looked up"] += 1
            return super().get(key)

    monkeypatch.setattr(log.batch, "RecordKeyScan", CountingScan)
    monkeypatch.setattr(log.cleaner, "OffsetMap", CountingMap)


def test_a_pass_over_a_batch_of_400k_records_yields_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = [Record(i.to_bytes(4, "big"), b"v", 0) for i in range(RECORDS)]
    tally: Counter[str] = Counter()

    async def run() -> tuple[list[Counter[str]], int]:
        clock, log = await open_log(3, LogConfig(cleanup_policy=("compact",)))
        log.append_as_leader(encode_batch(records, compression=Compression.ZSTD), 0)
        # A later record of another key: the big batch is mapped, scanned and kept whole.
        # (A batch that must be rewritten is still decoded and encoded in one step.)
        log.append_as_leader(encode_batch([Record(b"other", b"w", 0)]), 0)
        log.roll()
        await log.flush()
        count_key_work(monkeypatch, tally)
        clean = clean_log(log, 0, now_ms=clock.now, dedupe_buffer_bytes=128 << 20)
        turns, result = await work_per_turn(clean, tally)
        assert result is not None
        return turns, result.records_read

    turns, read = asyncio.run(run())
    assert read == RECORDS + 1 and RECORDS > 10 * YIELD_EVERY_RECORDS
    # Every record's key scanned twice (to map it, to clean it), mapped once, looked up once.
    expected = {"scanned": 2 * (RECORDS + 1), "mapped": RECORDS + 1, "looked up": RECORDS + 1}
    assert dict(tally) == expected
    # At most YIELD_EVERY_RECORDS units of key work a turn, beside the one-record batch's
    # (its scan and its put may share the turn that starts the next pass's scan).
    assert max(sum(turn.values()) for turn in turns) <= YIELD_EVERY_RECORDS + 2
    for unit, total in expected.items():
        assert busy(turns, unit) >= total // YIELD_EVERY_RECORDS > 10, unit
