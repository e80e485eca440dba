"""A produced batch of many records is validated in slices (issue 22).

On main, storing the worst legal batch (1 MiB of zstd inflating to 16 MiB: 1.78M records)
took 7.9 s in one step of the loop. validate_records_in_slices walks WALK_SLICE_RECORDS
records per turn and answers exactly what validate_records answers.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from log.batch import encode_batch
from log.compression import Compression
from log.config import LogConfig
from log.errors import RecordError
from log.records import Record
from log.validator import WALK_SLICE_RECORDS, validate_records, validate_records_in_slices

NOW_MS = 1_767_225_600_000
STEP_CPU_BOUND_S = 0.25  # a slice is ~30 ms of CPU on an idle core


async def longest_step(work: object) -> tuple[float, object]:
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
    try:
        result = await work  # type: ignore[misc]
    finally:
        done = True
        await task
    return longest, result


def test_a_batch_of_a_million_records_is_validated_in_slices_as_in_one_piece() -> None:
    records = [Record(None, b"", NOW_MS) for _ in range(1_000_000)]
    batch = encode_batch(records, compression=Compression.ZSTD)
    config = LogConfig()
    whole = validate_records(batch, config, NOW_MS)

    async def run() -> tuple[float, object]:
        return await longest_step(validate_records_in_slices(batch, config, NOW_MS))

    longest, sliced = asyncio.run(run())
    assert len(records) > 10 * WALK_SLICE_RECORDS
    assert sliced == whole
    assert longest < STEP_CPU_BOUND_S, f"a validation step took {longest * 1000:.0f} ms of CPU"


def test_a_sliced_validation_refuses_what_the_whole_one_refuses() -> None:
    """State carried across slices: a compacted topic refuses a keyless record found in
    the third slice, naming the same record."""
    keyless = 2 * WALK_SLICE_RECORDS + 5
    records = [
        Record(None if i == keyless else b"k", b"v", NOW_MS) for i in range(3 * WALK_SLICE_RECORDS)
    ]
    batch = encode_batch(records)
    config = LogConfig(cleanup_policy=("compact",), max_message_bytes=16 << 20)
    with pytest.raises(RecordError) as whole:
        validate_records(batch, config, NOW_MS)
    with pytest.raises(RecordError) as sliced:
        asyncio.run(validate_records_in_slices(batch, config, NOW_MS))
    assert sliced.value.record_errors == whole.value.record_errors
    assert whole.value.record_errors[0][0] == keyless
