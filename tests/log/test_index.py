"""OffsetIndex and TimeIndex: Kafka's byte layout, binary-search lookups, truncation, and
detection of files that cannot be right."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from log.fs import read_all
from log.index import CorruptIndexError, OffsetIndex, TimeIndex
from sim.disk import SimDisk


def _fs():
    fs = SimDisk(random.Random(0)).fs()
    fs.mkdir("/d")
    return fs


def _offset_index(fs, base: int = 100, max_size: int = 1024) -> OffsetIndex:
    index = OffsetIndex(fs, "/d/x.index", base, max_size)
    index.load(log_size=1 << 30)
    return index


def test_offset_index_lookup_returns_largest_entry_not_above_target() -> None:
    index = _offset_index(_fs())
    for n in range(10):
        index.append(100 + 10 * n + 5, 1000 * (n + 1))
    assert index.lookup(0) == (100, 0)  # below the base
    assert index.lookup(104) == (100, 0)  # below the first entry
    assert index.lookup(105) == (105, 1000)
    assert index.lookup(114) == (105, 1000)
    assert index.lookup(115) == (115, 2000)
    assert index.lookup(10_000) == (195, 10_000)
    assert index.last_offset == 195
    assert index.entries == 10


def test_offset_index_file_uses_kafkas_big_endian_relative_entries() -> None:
    fs = _fs()
    index = _offset_index(fs)
    index.append(103, 4096)
    index.append(107, 8192)
    index.write_pending()
    assert read_all(fs, "/d/x.index") == struct.pack(">IIII", 3, 4096, 7, 8192)


def test_offset_index_rejects_non_increasing_entries() -> None:
    index = _offset_index(_fs())
    index.append(105, 100)
    with pytest.raises(AssertionError):
        index.append(105, 200)
    with pytest.raises(AssertionError):
        index.append(106, 100)


def test_offset_index_truncate_removes_entries_at_or_above_offset() -> None:
    fs = _fs()
    index = _offset_index(fs)
    for n in range(6):
        index.append(100 + n * 2, 100 * (n + 1))
    index.write_pending()
    index.truncate_to(105)
    assert index.entries == 3
    assert index.last_offset == 104
    assert fs.file_size("/d/x.index") == 3 * 8
    index.append(105, 400)
    index.truncate_to(0)
    index.write_pending()
    assert index.entries == 0
    assert fs.file_size("/d/x.index") == 0


def test_offset_index_round_trips_through_the_file() -> None:
    fs = _fs()
    index = _offset_index(fs)
    entries = [(100 + n * 3 + 1, 50 * (n + 1)) for n in range(700)]
    for offset, position in entries:
        index.append(offset, position)
    asyncio.run(index.fsync())
    index.close()
    reopened = OffsetIndex(fs, "/d/x.index", 100, 1 << 20)
    reopened.load(log_size=1 << 20)
    assert [reopened.entry(n) for n in range(reopened.entries)] == entries


def test_offset_index_is_full_at_segment_index_bytes() -> None:
    index = _offset_index(_fs(), max_size=24)
    for n in range(3):
        assert not index.is_full()
        index.append(101 + n, 10 + n)
    assert index.is_full()


@pytest.mark.parametrize(
    ("content", "log_size"),
    [
        (b"\x00" * 12, 1000),  # not whole entries
        (struct.pack(">IIII", 5, 10, 5, 20), 1000),  # offsets not increasing
        (struct.pack(">IIII", 5, 20, 6, 10), 1000),  # positions not increasing
        (struct.pack(">II", 5, 2000), 1000),  # position past the log end
    ],
)
def test_offset_index_detects_impossible_files(content: bytes, log_size: int) -> None:
    fs = _fs()
    fs.open("/d/x.index").pwrite(0, content)
    index = OffsetIndex(fs, "/d/x.index", 100, 1024)
    with pytest.raises(CorruptIndexError):
        index.load(log_size)


def test_time_index_appends_only_growing_timestamps_and_looks_up() -> None:
    fs = _fs()
    index = TimeIndex(fs, "/d/x.timeindex", 100, 1200)
    index.load(last_offset=1 << 40)
    assert index.last_entry() == (-1, 100)
    index.maybe_append(1000, 101)
    index.maybe_append(1000, 102)  # not larger: ignored
    index.maybe_append(900, 103)  # ignored
    index.maybe_append(2000, 105)
    assert index.entries == 2
    assert index.lookup(999) == (-1, 100)
    assert index.lookup(1000) == (1000, 101)
    assert index.lookup(1999) == (1000, 101)
    assert index.lookup(5000) == (2000, 105)
    index.write_pending()
    assert read_all(fs, "/d/x.timeindex") == struct.pack(">qIqI", 1000, 1, 2000, 5)
    index.truncate_to(105)
    assert index.last_entry() == (1000, 101)
    assert fs.file_size("/d/x.timeindex") == 12


def test_time_index_detects_decreasing_timestamps() -> None:
    fs = _fs()
    fs.open("/d/x.timeindex").pwrite(0, struct.pack(">qIqI", 2000, 1, 1000, 2))
    with pytest.raises(CorruptIndexError):
        TimeIndex(fs, "/d/x.timeindex", 100, 1200).load(last_offset=1000)
