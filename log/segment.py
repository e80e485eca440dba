"""LogSegment: one ``<baseOffset:020d>.log`` file plus its offset and time indexes.

A segment only ever grows at the end (append) or shrinks from the end (truncate_to, recover);
its batches are whole Kafka v2 batches whose offsets increase. Reads find a position through
the sparse offset index and a short scan of batch headers (baseOffset, batchLength,
lastOffsetDelta): never per-record work, never a CRC on the read path (the CRC was checked
when the batch was appended or recovered).
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from log.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader, validate_batch
from log.errors import CorruptRecordError, RecordError
from log.fs import FileHandle, FileRegion, FileSystem
from log.index import (
    NO_TIMESTAMP,
    REL_OFFSET_MAX,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
)
from log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex, TxnIndexSearch

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
SWAP_SUFFIX = ".swap"  # a cleaned segment being swapped in (log/cleaner.py)
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

_BATCH_LENGTH_MIN = BATCH_HEADER_SIZE - LOG_OVERHEAD
_BASE_AND_LENGTH = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_LAST_OFFSET_DELTA_AT = 23
_MAX_TIMESTAMP_AT = 35
_SCAN_CHUNK_BYTES = 64 * 1024
# Header walks that find one batch (a lookup, the end of a fetch) read this much at a time:
# the default index.interval.bytes, so a walk from an index entry is about one read, and a
# walk over large batches reads a few KiB per header, not 64 KiB of records it will not use.
_HEADER_CHUNK_BYTES = 4096
_RECOVER_CHUNK_BYTES = 1024 * 1024
# Locations of the newest appended batches kept in memory. Reads cluster at the log end
# (followers fetching what was just appended, the committed-records reader right behind
# them), and answering those from memory saves an index lookup plus a scan of up to
# index.interval.bytes of headers on every fetch.
_TAIL_BATCHES = 64


def segment_path(dir_path: str, base_offset: int, suffix: str) -> str:
    """``dir/<baseOffset:020d><suffix>``, Kafka's file naming."""
    return os.path.join(dir_path, f"{base_offset:020d}{suffix}")


def parse_base_offset(name: str) -> int | None:
    """The base offset a segment file name encodes, or None if it is not one."""
    stem = name.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


@dataclass(frozen=True, slots=True)
class BatchLocation:
    """Where a batch sits in a segment, from its header alone."""

    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int


def _last_offset(batch: BatchLocation) -> int:
    return batch.last_offset


def _end(batch: BatchLocation) -> int:
    return batch.position + batch.size


@dataclass(frozen=True, slots=True)
class SegmentRead:
    """Whole batches of one segment, as a region of its file (empty when none fit)."""

    records: FileRegion
    first_offset: int
    next_offset: int


class LogSegment:
    """A segment file with its indexes; Kafka's LogSegment."""

    __slots__ = (
        "_bytes_since_last_index_entry",
        "_max_timestamp",
        "_next_offset",
        "_offset_of_max_timestamp",
        "_rolling_based_timestamp",
        "_size",
        "_tail",
        "base_offset",
        "created_ms",
        "deleted",
        "dir_path",
        "fs",
        "index_interval_bytes",
        "log",
        "offset_index",
        "roll_jitter_ms",
        "time_index",
        "txn_index",
    )

    def __init__(
        self,
        fs: FileSystem,
        dir_path: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        roll_jitter_ms: int,
        created_ms: int,
        create: bool,
        indexes_expected: bool = True,
    ) -> None:
        """Open the segment's files; ``create`` starts a fresh, empty segment (replacing any
        leftover files of that name, as Kafka's roll does). ``indexes_expected`` False (a
        segment the log cleaner just wrote) builds missing indexes without a warning."""
        assert base_offset >= 0, base_offset
        self.fs = fs
        self.dir_path = dir_path
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.roll_jitter_ms = roll_jitter_ms
        self.created_ms = created_ms
        self.deleted = False
        index_path = segment_path(dir_path, base_offset, INDEX_SUFFIX)
        time_index_path = segment_path(dir_path, base_offset, TIME_INDEX_SUFFIX)
        indexes_missing = not (fs.exists(index_path) and fs.exists(time_index_path))
        self.log: FileHandle = fs.open(
            segment_path(dir_path, base_offset, LOG_SUFFIX), create=create
        )
        self.offset_index = OffsetIndex(fs, index_path, base_offset, max_index_size)
        self.time_index = TimeIndex(fs, time_index_path, base_offset, max_index_size)
        txn_index_path = segment_path(dir_path, base_offset, TXN_INDEX_SUFFIX)
        if create and fs.exists(txn_index_path):
            fs.remove(txn_index_path)  # a leftover of an earlier segment of this name
        self.txn_index = TransactionIndex(fs, txn_index_path)
        self._size = self.log.size()
        self._bytes_since_last_index_entry = 0
        self._rolling_based_timestamp: int | None = None
        self._next_offset: int | None = None
        self._max_timestamp: int | None = None  # None: not loaded yet
        self._offset_of_max_timestamp = base_offset
        self._tail: list[BatchLocation] = []
        if create:
            self.log.truncate(0)
            self._size = 0
            self.offset_index.reset()
            self.time_index.reset()
            self._max_timestamp = NO_TIMESTAMP
            self._next_offset = base_offset
        elif indexes_missing and not indexes_expected:
            self.rebuild_indexes()
        elif indexes_missing or not self._indexes_look_sane():
            logger.warning("rebuilding missing or corrupt indexes of %s", self.log.path)
            self.rebuild_indexes()

    # ---- properties ---------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes in the .log file."""
        return self._size

    @property
    def next_offset(self) -> int:
        """One past the last offset in the segment (base_offset when empty)."""
        if self._next_offset is None:
            self._next_offset = self._read_next_offset()
        return self._next_offset

    @property
    def max_timestamp(self) -> int:
        """Largest batch maxTimestamp in the segment, NO_TIMESTAMP when none has one."""
        if self._max_timestamp is None:
            self._load_largest_timestamp()
        assert self._max_timestamp is not None
        return self._max_timestamp

    @property
    def largest_timestamp(self) -> int:
        """What retention.ms compares against: the max timestamp, or the creation time when
        no batch carries one (Kafka uses the file's mtime, which the seam does not expose)."""
        timestamp = self.max_timestamp
        return timestamp if timestamp >= 0 else self.created_ms

    # ---- index maintenance --------------------------------------------------------------
    def _indexes_look_sane(self) -> bool:
        """Kafka's cheap start-up sanityCheck: sizes are whole entries, the last offset index
        entry lies inside the log. Full checks happen when an index is first loaded."""
        try:
            entries = self.offset_index.file_entries()
            self.time_index.file_entries()
        except CorruptIndexError:
            return False
        return entries == 0 or self._size > 0

    def _ensure_indexes(self) -> None:
        if self.offset_index.loaded and self.time_index.loaded:
            return
        try:
            self.offset_index.load(self._size)
            self.time_index.load(self.base_offset + REL_OFFSET_MAX)
        except CorruptIndexError as exc:
            logger.warning("%s; rebuilding the indexes of %s", exc, self.log.path)
            self.rebuild_indexes()

    def rebuild_indexes(self) -> None:
        """Recreate both indexes from the batches in the log (no CRC checks: the log itself
        is trusted here; recover() is the path that distrusts it)."""
        self.offset_index.reset()
        self.time_index.reset()
        self._tail.clear()
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        next_offset = self.base_offset
        for batch in self._scan(0):
            self._index_batch(batch.position, batch.size, batch.last_offset, batch.max_timestamp)
            next_offset = batch.last_offset + 1
        self._next_offset = next_offset
        self.offset_index.write_pending()
        self.time_index.write_pending()

    def _index_batch(self, position: int, size: int, last_offset: int, max_timestamp: int) -> None:
        """Kafka's per-batch index rule: an entry once more than index.interval.bytes were
        appended since the previous one, keyed by the batch's last offset."""
        assert self._max_timestamp is not None
        if max_timestamp > self._max_timestamp:
            self._max_timestamp = max_timestamp
            self._offset_of_max_timestamp = last_offset
        if self._bytes_since_last_index_entry > self.index_interval_bytes:
            # A full index stays sparse rather than failing the append; the next append rolls.
            if not self.offset_index.is_full():
                self.offset_index.append(last_offset, position)
            if not self.time_index.is_full():
                self.time_index.maybe_append(self._max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    # ---- append -------------------------------------------------------------------------
    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= REL_OFFSET_MAX

    def append(
        self, data: bytes | bytearray | memoryview, batches: list[tuple[int, int, int]]
    ) -> int:
        """Write ``data`` (whole batches) at the end; ``batches`` gives each batch's (size,
        last offset, max timestamp) for the indexes. Returns the position written at.

        On a write error the file is cut back to its old size and the OSError propagates,
        so a failed append leaves no partial batch behind.
        """
        self._ensure_indexes()
        assert batches, "empty append"
        last_offset = batches[-1][1]
        assert self.can_convert_to_relative_offset(last_offset), (self.base_offset, last_offset)
        assert last_offset >= self.next_offset, (last_offset, self.next_offset)
        if self._max_timestamp is None:
            self._load_largest_timestamp()
        position = self._size
        try:
            written_at = self.log.append(memoryview(data))
        except OSError:
            self._cut_back(position)
            raise
        assert written_at == position, (written_at, position)
        if position == 0:
            self._rolling_based_timestamp = max(b[2] for b in batches)
        self._size = position + len(data)
        tail = self._tail
        for size, last, max_timestamp in batches:
            self._index_batch(position, size, last, max_timestamp)
            (base,) = _INT64.unpack_from(data, position - written_at)
            tail.append(BatchLocation(position, base, last, size, max_timestamp))
            position += size
        if len(tail) > 2 * _TAIL_BATCHES:
            del tail[:-_TAIL_BATCHES]
        assert position == self._size, (position, self._size)
        self._next_offset = last_offset + 1
        return written_at

    def _cut_back(self, size: int) -> None:
        try:
            self.log.truncate(size)
        except OSError:
            logger.exception("could not cut %s back to %d bytes", self.log.path, size)
            raise

    # ---- roll ---------------------------------------------------------------------------
    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """Kafka's rule: measured in record time from the first batch's timestamp when there
        is one, else in wall-clock time since the segment was created."""
        if self._rolling_based_timestamp is None and self._size > 0:
            first = next(self._scan(0), None)
            self._rolling_based_timestamp = first.max_timestamp if first else None
        if self._rolling_based_timestamp is not None and self._rolling_based_timestamp >= 0:
            return message_timestamp - self._rolling_based_timestamp
        return now_ms - self.created_ms

    def should_roll(
        self,
        *,
        segment_bytes: int,
        segment_ms: int,
        messages_size: int,
        max_timestamp_in_messages: int,
        max_offset_in_messages: int,
        now_ms: int,
    ) -> bool:
        """Kafka's shouldRoll: full by bytes, old by segment.ms (minus jitter), a full index,
        or an offset whose relative value would not fit the index."""
        self._ensure_indexes()
        # Cheapest checks first: this runs on every append.
        return (
            self._size > segment_bytes - messages_size
            or not 0 <= max_offset_in_messages - self.base_offset <= REL_OFFSET_MAX
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or (
                self._size > 0
                and self.time_waited_for_roll(now_ms, max_timestamp_in_messages)
                > segment_ms - self.roll_jitter_ms
            )
        )

    def on_become_inactive(self) -> None:
        """Final time index entry (so retention sees the true max) and buffered entries out."""
        self._ensure_indexes()
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
        self.offset_index.write_pending()
        self.time_index.write_pending()

    # ---- read ---------------------------------------------------------------------------
    def _scan(
        self, position: int, end: int | None = None, chunk_bytes: int = _SCAN_CHUNK_BYTES
    ) -> Iterator[BatchLocation]:
        """Headers of whole batches from ``position`` (a batch boundary) up to ``end``."""
        end = self._size if end is None else end
        chunk = b""
        chunk_position = position
        while position < end:  # bounded: position grows by >= BATCH_HEADER_SIZE per pass
            at = position - chunk_position
            if len(chunk) - at < BATCH_HEADER_SIZE:
                chunk = self.log.pread(position, min(chunk_bytes, end - position))
                chunk_position, at = position, 0
                if len(chunk) < BATCH_HEADER_SIZE:
                    return  # a torn tail; recovery deals with it
            base_offset, batch_length = _BASE_AND_LENGTH.unpack_from(chunk, at)
            if batch_length < _BATCH_LENGTH_MIN:
                raise CorruptRecordError(
                    f"{self.log.path}: batch at {position} has length {batch_length}"
                )
            size = batch_length + LOG_OVERHEAD
            if position + size > end:
                return
            (delta,) = _INT32.unpack_from(chunk, at + _LAST_OFFSET_DELTA_AT)
            (max_timestamp,) = _INT64.unpack_from(chunk, at + _MAX_TIMESTAMP_AT)
            yield BatchLocation(position, base_offset, base_offset + delta, size, max_timestamp)
            position += size

    def batch_locations(self) -> Iterator[BatchLocation]:
        """Every whole batch of the segment, from its headers alone (the log cleaner's walk)."""
        return self._scan(0)

    def translate_offset(self, offset: int) -> BatchLocation | None:
        """The first batch whose last offset is >= ``offset`` (None if there is none)."""
        tail = self._tail
        if tail and offset >= tail[0].base_offset:
            # No batch before the tail reaches ``offset``, so the answer is in the tail (or
            # nowhere): no index lookup and no scan of up to index.interval.bytes of headers.
            index = bisect.bisect_left(tail, offset, key=_last_offset)
            return tail[index] if index < len(tail) else None
        self._ensure_indexes()
        _, position = self.offset_index.lookup(offset)
        for batch in self._scan(position, None, _HEADER_CHUNK_BYTES):
            if batch.last_offset >= offset:
                return batch
        return None

    def read(
        self,
        start_offset: int,
        max_size: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> SegmentRead | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_size`` bytes
        (but the first batch whole when ``min_one_message``, as Kafka does) and only batches
        that end below ``max_offset``. None if the segment has nothing at/after the offset.

        The answer names a region of the file and reads none of it: its ends are found from
        batch headers (the in-memory tail, the offset index, then a walk of at most about
        index.interval.bytes of headers), so a fetch can be sent with sendfile(2)."""
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        if max_offset is not None and first.last_offset >= max_offset:
            return SegmentRead(self._region(first.position, 0), first.base_offset, start_offset)
        if first.size > max_size:
            if not min_one_message:
                return SegmentRead(self._region(first.position, 0), first.base_offset, start_offset)
            return SegmentRead(
                self._region(first.position, first.size), first.base_offset, first.last_offset + 1
            )
        limit = min(first.position + max_size, self._size)
        if max_offset is not None:
            beyond = self.translate_offset(max_offset)  # the first batch reaching max_offset
            if beyond is not None:
                limit = min(limit, beyond.position)
        last = self._last_batch_within(first, limit)
        end = last.position + last.size
        return SegmentRead(
            self._region(first.position, end - first.position),
            first.base_offset,
            last.last_offset + 1,
        )

    def _region(self, position: int, size: int) -> FileRegion:
        return FileRegion(self.log, position, size)

    def _last_batch_within(self, first: BatchLocation, limit: int) -> BatchLocation:
        """The last batch from ``first`` on that ends at or before ``limit`` (``first`` does).

        From the tail when it reaches back that far; otherwise from the offset index entry
        two before ``limit`` (a batch boundary whose batch ends before ``limit``), walking
        headers from there: bounded by about two index intervals, whatever ``limit`` is."""
        tail = self._tail
        if tail and (first.position >= tail[0].position or _end(tail[0]) <= limit):
            return tail[bisect.bisect_right(tail, limit, key=_end) - 1]
        self._ensure_indexes()
        entry = self.offset_index.entry_at_or_before_position(limit) - 1
        start = first.position
        if entry >= 0:
            start = max(start, self.offset_index.entry(entry)[1])
        last = first
        for batch in self._scan(start, limit, _HEADER_CHUNK_BYTES):
            last = batch
        assert last.position + last.size <= limit, (self.log.path, last, limit)
        return last

    def _read_next_offset(self) -> int:
        self._ensure_indexes()
        _last_indexed, position = self.offset_index.lookup(self.base_offset + REL_OFFSET_MAX)
        next_offset = self.base_offset
        for batch in self._scan(position):
            next_offset = batch.last_offset + 1
        return next_offset

    def _load_largest_timestamp(self) -> None:
        """Kafka's loadLargestTimestamp: the last time index entry, then a scan of the
        batches after the offset index entry that precedes it."""
        self._ensure_indexes()
        timestamp, offset = self.time_index.last_entry()
        _, position = self.offset_index.lookup(offset)
        for batch in self._scan(position):
            if batch.max_timestamp > timestamp:
                timestamp, offset = batch.max_timestamp, batch.last_offset
        self._max_timestamp = timestamp
        self._offset_of_max_timestamp = offset

    def find_offset_by_timestamp(self, timestamp: int) -> BatchLocation | None:
        """The first batch whose max timestamp is >= ``timestamp``."""
        self._ensure_indexes()
        _, offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(offset)
        for batch in self._scan(position):
            if batch.max_timestamp >= timestamp:
                return batch
        return None

    # ---- recovery and truncation --------------------------------------------------------
    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Revalidate every batch (CRC, offsets), cut the log at the first bad or torn one,
        rebuild both indexes; returns the number of bytes cut."""
        self._tail.clear()
        self.offset_index.reset()
        self.time_index.reset()
        self._max_timestamp = NO_TIMESTAMP
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_last_index_entry = 0
        file_size = self.log.size()
        position = 0
        next_offset = self.base_offset
        buf = b""
        buf_position = 0
        while position < file_size:  # bounded: each pass consumes a batch or stops
            at = position - buf_position
            if len(buf) - at < LOG_OVERHEAD:
                buf = self.log.pread(position, min(_RECOVER_CHUNK_BYTES, file_size - position))
                buf_position, at = position, 0
                if len(buf) < LOG_OVERHEAD:
                    break
            (batch_length,) = _INT32.unpack_from(buf, at + 8)
            size = batch_length + LOG_OVERHEAD
            if batch_length < _BATCH_LENGTH_MIN or position + size > file_size:
                break
            if at + size > len(buf):
                buf = self.log.pread(
                    position, max(size, min(_RECOVER_CHUNK_BYTES, file_size - position))
                )
                buf_position, at = position, 0
                if len(buf) < size:
                    break
            try:
                header = validate_batch(buf, at)
            except RecordError as exc:
                logger.warning("%s: invalid batch at %d: %s", self.log.path, position, exc)
                break
            if header.base_offset < next_offset or not self.can_convert_to_relative_offset(
                header.last_offset
            ):
                logger.warning(
                    "%s: batch at %d has offsets %d..%d, expected >= %d",
                    self.log.path,
                    position,
                    header.base_offset,
                    header.last_offset,
                    next_offset,
                )
                break
            self._index_batch(position, size, header.last_offset, header.max_timestamp)
            if on_batch is not None:
                on_batch(header)
            next_offset = header.last_offset + 1
            position += size
        truncated = file_size - position
        if truncated:
            logger.warning(
                "%s: truncating %d invalid bytes at %d", self.log.path, truncated, position
            )
            self.log.truncate(position)
        self._size = position
        self._next_offset = next_offset
        self._rolling_based_timestamp = None
        torn = self.txn_index.cut_torn_tail()
        if torn:
            logger.warning(
                "%s: truncating a torn %d-byte entry off its .txnindex", self.log.path, torn
            )
        self.txn_index.truncate_to(next_offset)  # markers that did not survive
        self.offset_index.write_pending()
        self.time_index.write_pending()
        return truncated

    def truncate_to(self, offset: int, now_ms: int) -> int:
        """Drop every batch whose last offset is >= ``offset``; returns bytes removed."""
        first = self.translate_offset(offset)
        if first is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        removed = self._size - first.position
        self._tail = [batch for batch in self._tail if batch.position < first.position]
        self.log.truncate(first.position)
        self._size = first.position
        self._bytes_since_last_index_entry = 0
        self._next_offset = None
        self._max_timestamp = None
        if self._size == 0:
            self.created_ms = now_ms
            self._rolling_based_timestamp = None
        assert self.next_offset <= max(offset, self.base_offset), (self.next_offset, offset)
        return removed

    # ---- aborted transactions -----------------------------------------------------------
    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Index a transaction whose abort marker this segment holds (Kafka's
        updateTxnIndex)."""
        assert self.base_offset <= entry.last_offset < self.next_offset, (self, entry)
        self.txn_index.append(entry)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        return self.txn_index.collect(fetch_offset, upper_bound_offset)

    # ---- durability and lifecycle -------------------------------------------------------
    async def flush(self, *, include_indexes: bool) -> None:
        """fsync the log file (and the index files when asked); OSError on failure."""
        await self.log.fsync()
        # With the log, not only with the other indexes: a marker's entry is rarely
        # written, and one that survives a crash saves rebuilding it.
        await self.txn_index.fsync()
        if include_indexes:
            self._ensure_indexes()
            await self.offset_index.fsync()
            await self.time_index.fsync()

    def write_pending_index_entries(self) -> None:
        if self.offset_index.loaded:
            self.offset_index.write_pending()
        if self.time_index.loaded:
            self.time_index.write_pending()

    def rename_to_deleted(self) -> None:
        """Kafka's first deletion step: ``.deleted`` names, so a restart finishes the job."""
        for suffix in SEGMENT_SUFFIXES:
            path = segment_path(self.dir_path, self.base_offset, suffix)
            if self.fs.exists(path):
                self.fs.rename(path, path + DELETED_SUFFIX)
        self.txn_index.renamed(self.txn_index.path + DELETED_SUFFIX)
        self.deleted = True

    def moved_to(self, dir_path: str) -> None:
        """Its partition dir was renamed ``dir_path`` (the handles stay open): later
        renames, deletions and a transaction index opened later find the files there."""
        self.dir_path = dir_path
        suffix = DELETED_SUFFIX if self.deleted else ""
        base = self.base_offset
        self.offset_index.path = segment_path(dir_path, base, INDEX_SUFFIX) + suffix
        self.time_index.path = segment_path(dir_path, base, TIME_INDEX_SUFFIX) + suffix
        self.txn_index.path = segment_path(dir_path, base, TXN_INDEX_SUFFIX) + suffix

    def delete_files(self) -> None:
        """Close the handles and remove the (renamed) files."""
        self.close()
        for suffix in SEGMENT_SUFFIXES:
            path = segment_path(self.dir_path, self.base_offset, suffix)
            if self.deleted:
                path += DELETED_SUFFIX
            if self.fs.exists(path):
                self.fs.remove(path)

    def close(self) -> None:
        """Close the handles (writes of buffered index entries are the caller's)."""
        self.log.close()
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def __repr__(self) -> str:
        return f"LogSegment({self.dir_path!r}, base={self.base_offset}, size={self._size})"
