"""LogSegment: append, reads bounded by bytes and offsets, roll conditions, recovery of a
torn tail, and rebuilding of missing or corrupt indexes."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from log.batch import assign_offsets, encode_batch, iter_batches, validate_batch
from log.records import Record
from log.segment import LogSegment
from sim.disk import SimDisk

BASE = 1000


def _fs():
    fs = SimDisk(random.Random(0)).fs()
    fs.mkdir("/d")
    return fs


def _segment(fs, *, create: bool = True, interval: int = 0, max_index: int = 1 << 20) -> LogSegment:
    return LogSegment(
        fs,
        "/d",
        BASE,
        index_interval_bytes=interval,
        max_index_size=max_index,
        roll_jitter_ms=0,
        created_ms=5_000,
        create=create,
    )


def _batch(base_offset: int, records: int = 2, *, value: bytes = b"v" * 20, ts: int = 100) -> bytes:
    buf = bytearray(encode_batch([Record(b"k", value, ts + i) for i in range(records)]))
    assign_offsets(buf, 0, base_offset, 1)
    return bytes(buf)


def _fill(segment: LogSegment, count: int, *, records: int = 2) -> list[bytes]:
    batches = []
    offset = segment.next_offset
    for _ in range(count):
        data = _batch(offset, records, ts=100 + offset)
        header = validate_batch(data)
        segment.append(data, [(header.size, header.last_offset, header.max_timestamp)])
        batches.append(data)
        offset = header.next_offset
    return batches


def _bases(view) -> list[int]:
    return [h.base_offset for _, h in iter_batches(view)]


def test_read_returns_whole_batches_from_the_one_holding_the_offset() -> None:
    segment = _segment(_fs())
    batches = _fill(segment, 20)
    result = segment.read(BASE + 7, 10_000)
    assert result is not None
    assert bytes(result.records) == b"".join(batches[3:])
    assert result.first_offset == BASE + 6
    assert result.next_offset == BASE + 40
    assert segment.read(BASE + 40, 10_000) is None


def test_read_cuts_at_the_last_batch_that_fits_max_size() -> None:
    segment = _segment(_fs())
    batches = _fill(segment, 10)
    size = len(batches[0])
    result = segment.read(BASE, 3 * size + size // 2)
    assert result is not None
    assert bytes(result.records) == b"".join(batches[:3])
    assert result.next_offset == BASE + 6


def test_first_batch_larger_than_max_size_is_returned_whole_only_with_min_one_message() -> None:
    segment = _segment(_fs())
    batches = _fill(segment, 3)
    whole = segment.read(BASE + 2, 10, min_one_message=True)
    assert whole is not None and bytes(whole.records) == batches[1]
    empty = segment.read(BASE + 2, 10, min_one_message=False)
    assert empty is not None and len(empty.records) == 0


def test_read_stops_before_a_batch_reaching_max_offset() -> None:
    segment = _segment(_fs())
    batches = _fill(segment, 5)
    result = segment.read(BASE, 10_000, max_offset=BASE + 5)  # batch 2 holds 1004..1005
    assert result is not None and bytes(result.records) == b"".join(batches[:2])
    nothing = segment.read(BASE, 10_000, max_offset=BASE + 1)
    assert nothing is not None and len(nothing.records) == 0


def test_index_lookup_plus_scan_finds_every_offset() -> None:
    segment = _segment(_fs(), interval=150)
    _fill(segment, 50)
    assert segment.offset_index.entries > 5
    for offset in range(BASE, BASE + 100):
        location = segment.translate_offset(offset)
        assert location is not None
        assert location.base_offset <= offset <= location.last_offset


def test_should_roll_on_bytes_time_full_index_and_offset_overflow() -> None:
    segment = _segment(_fs(), max_index=16)
    args = {
        "segment_bytes": 1000,
        "segment_ms": 1000,
        "messages_size": 100,
        "max_timestamp_in_messages": 150,
        "max_offset_in_messages": BASE + 10,
        "now_ms": 5_000,
    }
    assert not segment.should_roll(**args)
    assert segment.should_roll(**{**args, "messages_size": 1001})
    assert segment.should_roll(**{**args, "max_offset_in_messages": BASE + (1 << 31)})
    # An empty segment never rolls by time, however old.
    assert not segment.should_roll(**{**args, "now_ms": 10**9})
    _fill(segment, 1)  # first batch max timestamp 100 + BASE + 1
    # Record time: roll once a message is more than segment.ms newer than the first batch.
    assert not segment.should_roll(**{**args, "max_timestamp_in_messages": 2101})
    assert segment.should_roll(**{**args, "max_timestamp_in_messages": 2102})
    for n in range(2):
        segment.offset_index.append(BASE + 10 + n, 1000 + n)
    assert segment.offset_index.is_full()
    assert segment.should_roll(**args)


def test_time_roll_uses_segment_age_when_batches_have_no_timestamp() -> None:
    segment = _segment(_fs())
    data = _batch(BASE, 1, ts=-1)
    header = validate_batch(data)
    segment.append(data, [(header.size, header.last_offset, header.max_timestamp)])
    args = {
        "segment_bytes": 1 << 20,
        "segment_ms": 1000,
        "messages_size": 10,
        "max_timestamp_in_messages": -1,
        "max_offset_in_messages": BASE + 1,
    }
    assert not segment.should_roll(**args, now_ms=6_000)
    assert segment.should_roll(**args, now_ms=6_001)


def test_recover_cuts_a_torn_tail_and_rebuilds_identical_indexes() -> None:
    fs = _fs()
    segment = _segment(fs, interval=100)
    batches = _fill(segment, 30)
    expected = [segment.offset_index.entry(n) for n in range(segment.offset_index.entries)]
    good_size = segment.size
    segment.log.append(batches[0][:40])  # a torn write after the last batch
    truncated = segment.recover()
    assert truncated == 40
    assert segment.size == good_size == fs.file_size("/d/00000000000000001000.log")
    assert [segment.offset_index.entry(n) for n in range(segment.offset_index.entries)] == expected
    assert segment.next_offset == BASE + 60


def test_recover_stops_at_a_batch_with_a_bad_crc() -> None:
    segment = _segment(_fs())
    batches = _fill(segment, 5)
    position = 2 * len(batches[0])
    segment.log.pwrite(position + 70, b"\xff")  # inside the third batch's CRC range
    assert segment.recover() == 3 * len(batches[0])
    assert segment.next_offset == BASE + 4


def test_missing_index_is_rebuilt_on_open() -> None:
    fs = _fs()
    segment = _segment(fs, interval=100)
    _fill(segment, 30)
    segment.on_become_inactive()
    expected = [segment.offset_index.entry(n) for n in range(segment.offset_index.entries)]
    segment.close()
    fs.remove("/d/00000000000000001000.index")
    reopened = _segment(fs, create=False, interval=100)
    assert [reopened.offset_index.entry(n) for n in range(reopened.offset_index.entries)] == (
        expected
    )
    assert reopened.next_offset == BASE + 60


def test_corrupt_index_is_rebuilt_when_first_loaded() -> None:
    fs = _fs()
    segment = _segment(fs, interval=100)
    _fill(segment, 30)
    segment.on_become_inactive()
    expected = [segment.offset_index.entry(n) for n in range(segment.offset_index.entries)]
    segment.close()
    fs.open("/d/00000000000000001000.index").pwrite(0, b"\xff" * 8)  # first entry garbage
    reopened = _segment(fs, create=False, interval=100)
    assert reopened.translate_offset(BASE + 31) is not None
    assert [reopened.offset_index.entry(n) for n in range(reopened.offset_index.entries)] == (
        expected
    )


def test_truncate_to_cuts_log_and_indexes() -> None:
    segment = _segment(_fs(), interval=100)
    batches = _fill(segment, 30)
    removed = segment.truncate_to(BASE + 20, now_ms=9_000)
    assert removed == 20 * len(batches[0])
    assert segment.next_offset == BASE + 20
    assert segment.offset_index.last_offset < BASE + 20
    assert segment.time_index.last_entry()[1] < BASE + 20
    assert segment.max_timestamp == max(100 + o for o in range(BASE, BASE + 20, 2)) + 1
    asyncio.run(segment.flush(include_indexes=True))


def _locations(segment: LogSegment, offsets: range) -> list[object]:
    return [segment.translate_offset(offset) for offset in offsets]


def test_newest_batches_answer_like_the_index_and_scan_through_appends_and_truncation() -> None:
    """The in-memory tail (the newest batches' locations) must give exactly what the index
    lookup plus scan gives a freshly opened segment, which has no tail, for every offset:
    below the tail, inside it, past the end, and after a truncation into it."""
    fs = _fs()
    segment = _segment(fs, interval=150)
    offsets = range(BASE - 1, BASE + 2 * 200 + 3)
    _fill(segment, 200)  # more than the tail keeps, so some reads fall below it
    asyncio.run(segment.flush(include_indexes=True))
    segment.write_pending_index_entries()
    assert _locations(segment, offsets) == _locations(_segment(fs, create=False), offsets)
    segment.truncate_to(BASE + 2 * 190 + 1, now_ms=9_000)  # mid-batch, inside the tail
    _fill(segment, 5, records=3)
    segment.write_pending_index_entries()
    reopened = _segment(fs, create=False)
    assert reopened.next_offset == segment.next_offset
    assert _locations(segment, offsets) == _locations(reopened, offsets)


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 120), min_size=1, max_size=40),
    interval=st.sampled_from([0, 64, 300, 4096]),
    reopen=st.booleans(),
    data=st.data(),
)
def test_read_ends_where_whole_batches_fit_whatever_the_index_and_tail_hold(
    sizes, interval, reopen, data
) -> None:
    """The end of a read is found from headers only (tail, index, a short walk); it must be
    the same cut as walking every batch: the last whole batch within max_size and below
    max_offset. Reopening drops the in-memory tail, so the index path is taken."""
    fs = _fs()
    segment = _segment(fs, interval=interval)
    batches, offset = [], BASE
    for records in sizes:
        batch = _batch(offset, 1, value=b"v" * records * 7)
        header = validate_batch(batch)
        segment.append(batch, [(header.size, header.last_offset, header.max_timestamp)])
        batches.append((header, batch))
        offset = header.next_offset
    if reopen:
        segment.write_pending_index_entries()
        segment.close()
        segment = _segment(fs, create=False, interval=interval)
    start = data.draw(st.integers(BASE, offset - 1))
    max_size = data.draw(st.integers(1, sum(len(b) for _, b in batches) + 10))
    max_offset = data.draw(st.none() | st.integers(BASE, offset + 1))
    result = segment.read(start, max_size, max_offset=max_offset)
    assert result is not None
    expected, size = [], 0
    for header, batch in batches:
        if header.last_offset < start:
            continue
        if max_offset is not None and header.last_offset >= max_offset:
            break
        if size + len(batch) > max_size and (expected or len(batch) <= max_size):
            break
        expected.append(batch)
        size += len(batch)
        if size > max_size:
            break  # the first batch alone, larger than max_size (min_one_message)
    assert bytes(result.records) == b"".join(expected)
    next_offset = validate_batch(expected[-1]).next_offset if expected else start
    assert result.next_offset == next_offset
