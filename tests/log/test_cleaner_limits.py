"""The cleaner's memory and loop time (issue 22).

On main the offset map charged 24 bytes plus the key per entry, so 4.5M 4-byte keys took
306 MB against a 128 MiB log.cleaner.dedupe.buffer.size, and one batch's keys were scanned,
mapped and checked in single steps that held the loop up to 2.7 s.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc

from log.batch import encode_batch
from log.cleaner import OffsetMap, clean_log, map_entry_bytes
from log.compression import Compression
from log.config import LogConfig
from log.records import Record
from tests.log.test_cleaner import open_log

STEP_CPU_BOUND_S = 0.25  # ~0.03 s a slice on an idle core; generous for a loaded host


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


def test_a_pass_over_a_batch_of_400k_records_yields_the_loop() -> None:
    records = [Record(i.to_bytes(4, "big"), b"v", 0) for i in range(400_000)]

    async def run() -> tuple[float, int]:
        clock, log = await open_log(3, LogConfig(cleanup_policy=("compact",)))
        log.append_as_leader(encode_batch(records, compression=Compression.ZSTD), 0)
        # A later record of another key: the big batch is mapped, scanned and kept whole.
        # (A batch that must be rewritten is still decoded and encoded in one step.)
        log.append_as_leader(encode_batch([Record(b"other", b"w", 0)]), 0)
        log.roll()
        await log.flush()
        longest = 0.0
        done = False

        async def probe() -> None:
            nonlocal longest
            last = time.thread_time()
            while not done:
                await asyncio.sleep(0)
                now = time.thread_time()
                longest, last = max(longest, now - last), now

        task = asyncio.get_running_loop().create_task(probe())
        await asyncio.sleep(0)
        result = await clean_log(log, 0, now_ms=clock.now, dedupe_buffer_bytes=128 << 20)
        done = True
        await task
        assert result is not None
        return longest, result.records_read

    longest, read = asyncio.run(run())
    assert read >= 400_000
    assert longest < STEP_CPU_BOUND_S, f"a cleaner step took {longest * 1000:.0f} ms of CPU"
