"""A produced batch of many records is validated in slices (issue 22).

On main, storing the worst legal batch (1 MiB of zstd inflating to 16 MiB: 1.78M records)
took 7.9 s in one step of the loop. validate_records_in_slices walks WALK_SLICE_RECORDS
records per turn and answers exactly what validate_records answers. The test counts the
records each turn of the loop walks (the CPU a turn takes is printed by
bench/bench_slices.py).
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from log import validator
from log.batch import encode_batch
from log.compression import Compression
from log.config import LogConfig
from log.errors import RecordError
from log.records import Record
from log.validator import (
    NATIVE_ENV,
    WALK_SLICE_RECORDS,
    RecordWalk,
    validate_records,
    validate_records_in_slices,
)
from tests.loop_turns import busy, most, work_per_turn

NOW_MS = 1_767_225_600_000
RECORDS = 1_000_000


def count_walked(monkeypatch: pytest.MonkeyPatch, tally: Counter[str]) -> None:
    """Validation runs the Python walk (kraft_native validates a batch in one call, the
    slicing is the Python path's), which counts the records it walks in tally["walked"]."""

    class CountingWalk(RecordWalk):
        __slots__ = ("walked",)

        def __init__(self, data: bytes, count: int, base_timestamp: int) -> None:
            super().__init__(data, count, base_timestamp)
            self.walked = 0

        def step(self, records: int) -> None:
            super().step(records)
            walked, self.walked = self.walked, min(self.count, self.walked + records)
            tally["walked"] += self.walked - walked

    monkeypatch.setattr(validator, "_dispatch", validator._choose({NATIVE_ENV: "0"}))
    monkeypatch.setattr(validator, "RecordWalk", CountingWalk)


def test_a_batch_of_a_million_records_is_validated_in_slices_as_in_one_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    records = [Record(None, b"", NOW_MS) for _ in range(RECORDS)]
    batch = encode_batch(records, compression=Compression.ZSTD)
    config = LogConfig()
    whole = validate_records(batch, config, NOW_MS)
    tally: Counter[str] = Counter()
    count_walked(monkeypatch, tally)

    async def run() -> tuple[list[Counter[str]], object]:
        return await work_per_turn(validate_records_in_slices(batch, config, NOW_MS), tally)

    turns, sliced = asyncio.run(run())
    assert RECORDS > 10 * WALK_SLICE_RECORDS
    assert sliced == whole
    # Every record walked once, at most WALK_SLICE_RECORDS of them per turn of the loop.
    assert tally["walked"] == RECORDS
    assert most(turns, "walked") == WALK_SLICE_RECORDS
    assert busy(turns, "walked") == RECORDS // WALK_SLICE_RECORDS > 10


def test_a_sliced_validation_refuses_what_the_whole_one_refuses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
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
    tally: Counter[str] = Counter()
    count_walked(monkeypatch, tally)
    with pytest.raises(RecordError) as sliced:
        asyncio.run(validate_records_in_slices(batch, config, NOW_MS))
    assert sliced.value.record_errors == whole.value.record_errors
    assert whole.value.record_errors[0][0] == keyless
    assert tally["walked"] == len(records)  # walked in Python, three slices
