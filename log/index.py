"""Sparse per-segment indexes: OffsetIndex (.index) and TimeIndex (.timeindex).

On-disk layout, big-endian, exactly Kafka's:
- ``.index``: 8-byte entries, relativeOffset u32 (offset - segment base) + position u32;
- ``.timeindex``: 12-byte entries, timestamp i64 + relativeOffset u32.

Differences from Kafka, both deliberate:
- Files are appended, not preallocated and mmapped: the FileSystem seam has no mmap, and an
  appended file is always exactly ``entries * entry_size`` long, so there is nothing to trim
  on roll and a reader never confuses preallocated zeros with entries. ``segment.index.bytes``
  still bounds the entries (``is_full`` rolls the segment, as in Kafka).
- Entries are kept in memory (two compact arrays, 8 or 12 bytes per entry, loaded lazily on
  first use, as Kafka's LazyIndex) and written to the file in batches (``write_pending``).
  Index files are derived data: recovery rebuilds the indexes of every segment it rescans,
  and the Log fsyncs a segment's index files before its recovery point passes the segment,
  so a lost tail of index writes costs a rebuild, never a wrong answer.

Invariants (asserted on append, checked on load): offsets strictly increase, positions
strictly increase, timestamps strictly increase in the time index.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_left, bisect_right

from log.fs import FileHandle, FileSystem

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
NO_TIMESTAMP = -1
REL_OFFSET_MAX = (1 << 31) - 1  # Kafka keeps relative offsets in a signed int
_PENDING_FLUSH_BYTES = 4096
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_BIG_ENDIAN_HOST = sys.byteorder == "big"


class CorruptIndexError(Exception):
    """An index file's contents cannot be right; the segment rebuilds it from the log."""


class _SparseIndex:
    """What both indexes share: the file of fixed-size entries, written in buffered batches
    after the entries already in it, and the lazy load flag. Subclasses keep the entries."""

    __slots__ = ("_handle", "_loaded", "_pending", "_written", "base_offset", "max_entries", "path")
    ENTRY_SIZE = 0

    def __init__(self, fs: FileSystem, path: str, base_offset: int, max_index_size: int) -> None:
        """Open (creating if missing) the index of the segment starting at ``base_offset``."""
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.ENTRY_SIZE)
        self._handle: FileHandle = fs.open(path, create=True)
        self._pending = bytearray()
        self._written = 0
        self._loaded = False
        self._clear()

    def _clear(self) -> None:
        """Drop the in-memory entries."""
        raise NotImplementedError

    def _count(self) -> int:
        raise NotImplementedError

    def file_entries(self) -> int:
        """Entries in the file (O(1)); CorruptIndexError if its size is not a whole number."""
        size = self._handle.size()
        if size % self.ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self.path}: size {size} is not a multiple of {self.ENTRY_SIZE}"
            )
        return size // self.ENTRY_SIZE

    def _read_file(self) -> tuple[int, bytes]:
        """(entries, their bytes) of the whole file, for ``load``."""
        count = self.file_entries()
        data = self._handle.pread(0, count * self.ENTRY_SIZE)
        if len(data) != count * self.ENTRY_SIZE:
            raise CorruptIndexError(f"{self.path}: short read")
        return count, data

    def _loaded_from_file(self, count: int) -> None:
        self._written = count
        self._pending = bytearray()
        self._loaded = True

    def reset(self) -> None:
        """Empty the index (before a rebuild)."""
        self._handle.truncate(0)
        self._clear()
        self._loaded_from_file(0)

    @property
    def loaded(self) -> bool:
        return self._loaded

    @property
    def entries(self) -> int:
        assert self._loaded, self.path
        return self._count()

    def is_full(self) -> bool:
        return self._count() >= self.max_entries

    def _buffer(self, entry: bytes) -> None:
        self._pending += entry
        if len(self._pending) >= _PENDING_FLUSH_BYTES:
            self.write_pending()

    def _truncate_file(self, keep: int) -> None:
        """Cut the on-disk entries and the write buffer to ``keep`` entries in total."""
        if keep < self._written:
            self._handle.truncate(keep * self.ENTRY_SIZE)
            self._pending, self._written = bytearray(), keep
        else:
            self._pending = self._pending[: (keep - self._written) * self.ENTRY_SIZE]

    def write_pending(self) -> None:
        """Write buffered entries to the file (page cache; fsync is separate)."""
        if self._pending:
            self._handle.pwrite(self._written * self.ENTRY_SIZE, memoryview(self._pending))
            self._written += len(self._pending) // self.ENTRY_SIZE
            self._pending = bytearray()

    async def fsync(self) -> None:
        self.write_pending()
        await self._handle.fsync()

    def close(self) -> None:
        self._handle.close()


class OffsetIndex(_SparseIndex):
    """Maps offsets to file positions in one segment; lookups binary-search in memory."""

    __slots__ = ("_positions", "_rel_offsets")
    ENTRY_SIZE = OFFSET_ENTRY_SIZE

    def _clear(self) -> None:
        self._rel_offsets = array("I")
        self._positions = array("I")

    def _count(self) -> int:
        return len(self._rel_offsets)

    def load(self, log_size: int) -> None:
        """Read the file into memory and check it against a log of ``log_size`` bytes."""
        if self._loaded:
            return
        count, data = self._read_file()
        raw = array("I")
        raw.frombytes(data)
        if not _BIG_ENDIAN_HOST:
            raw.byteswap()
        rel_offsets, positions = raw[0::2], raw[1::2]
        previous_rel, previous_pos = -1, -1
        for index in range(count):  # bounded by the file size
            rel, pos = rel_offsets[index], positions[index]
            if rel <= previous_rel or pos <= previous_pos:
                raise CorruptIndexError(f"{self.path}: entry {index} is not increasing")
            if rel > REL_OFFSET_MAX or pos >= log_size:
                raise CorruptIndexError(f"{self.path}: entry {index} ({rel}, {pos}) out of range")
            previous_rel, previous_pos = rel, pos
        self._rel_offsets, self._positions = rel_offsets, positions
        self._loaded_from_file(count)

    # ---- queries ------------------------------------------------------------------------
    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (as Kafka)."""
        assert self._loaded, self.path
        return self.base_offset + self._rel_offsets[-1] if self._rel_offsets else self.base_offset

    def entry(self, n: int) -> tuple[int, int]:
        """The n-th entry as (absolute offset, position)."""
        assert self._loaded, self.path
        return self.base_offset + self._rel_offsets[n], self._positions[n]

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= target, or (base_offset, 0) if none is."""
        assert self._loaded, self.path
        relative = target_offset - self.base_offset
        if relative < 0:
            return self.base_offset, 0
        index = bisect_right(self._rel_offsets, min(relative, 0xFFFFFFFF)) - 1
        if index < 0:
            return self.base_offset, 0
        return self.base_offset + self._rel_offsets[index], self._positions[index]

    def entry_at_or_before_position(self, position: int) -> int:
        """The number of the last entry whose position is <= ``position`` (-1 if none)."""
        assert self._loaded, self.path
        return bisect_right(self._positions, position) - 1

    # ---- mutation -----------------------------------------------------------------------
    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must exceed the last entry's."""
        assert self._loaded, self.path
        relative = offset - self.base_offset
        assert 0 <= relative <= REL_OFFSET_MAX, (self.path, offset)
        assert 0 <= position <= 0xFFFFFFFF, (self.path, position)
        if self._rel_offsets:
            assert relative > self._rel_offsets[-1], (self.path, offset, self.last_offset)
            assert position > self._positions[-1], (self.path, position)
        self._rel_offsets.append(relative)
        self._positions.append(position)
        self._buffer(_OFFSET_ENTRY.pack(relative, position))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        assert self._loaded, self.path
        keep = bisect_left(self._rel_offsets, max(0, offset - self.base_offset))
        del self._rel_offsets[keep:], self._positions[keep:]
        self._truncate_file(keep)


class TimeIndex(_SparseIndex):
    """Maps timestamps to offsets in one segment: entries only when the max timestamp grows."""

    __slots__ = ("_rel_offsets", "_timestamps")
    ENTRY_SIZE = TIME_ENTRY_SIZE

    def _clear(self) -> None:
        self._timestamps = array("q")
        self._rel_offsets = array("I")

    def _count(self) -> int:
        return len(self._timestamps)

    def load(self, last_offset: int) -> None:
        """Read the file into memory; entries must lie in [base, ``last_offset``]."""
        if self._loaded:
            return
        count, data = self._read_file()
        timestamps, rel_offsets = array("q"), array("I")
        previous_ts, previous_rel = NO_TIMESTAMP, -1
        for index, (timestamp, rel) in enumerate(_TIME_ENTRY.iter_unpack(data)):
            if timestamp <= previous_ts or rel < previous_rel:
                raise CorruptIndexError(f"{self.path}: entry {index} is not increasing")
            if self.base_offset + rel > last_offset:
                raise CorruptIndexError(f"{self.path}: entry {index} points past the log end")
            timestamps.append(timestamp)
            rel_offsets.append(rel)
            previous_ts, previous_rel = timestamp, rel
        self._timestamps, self._rel_offsets = timestamps, rel_offsets
        self._loaded_from_file(count)

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (NO_TIMESTAMP, base) when empty."""
        assert self._loaded, self.path
        if not self._timestamps:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[-1], self.base_offset + self._rel_offsets[-1]

    def entry(self, n: int) -> tuple[int, int]:
        assert self._loaded, self.path
        return self._timestamps[n], self.base_offset + self._rel_offsets[n]

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """The entry with the largest timestamp <= target, or (NO_TIMESTAMP, base) if none."""
        assert self._loaded, self.path
        index = bisect_right(self._timestamps, target_timestamp) - 1
        if index < 0:
            return NO_TIMESTAMP, self.base_offset
        return self._timestamps[index], self.base_offset + self._rel_offsets[index]

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add (timestamp, offset) if the timestamp exceeds the last entry's (Kafka's rule)."""
        assert self._loaded, self.path
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        if timestamp < 0:
            return
        relative = offset - self.base_offset
        assert 0 <= relative <= REL_OFFSET_MAX, (self.path, offset)
        if self._rel_offsets:
            assert relative >= self._rel_offsets[-1], (self.path, offset)
        self._timestamps.append(timestamp)
        self._rel_offsets.append(relative)
        self._buffer(_TIME_ENTRY.pack(timestamp, relative))

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset``."""
        assert self._loaded, self.path
        keep = bisect_left(self._rel_offsets, max(0, offset - self.base_offset))
        del self._timestamps[keep:], self._rel_offsets[keep:]
        self._truncate_file(keep)
