"""The Log of one partition: Kafka's UnifiedLog and LocalLog in one class.

A Log is a directory ``<topic>-<partition>/`` of LogSegments ordered by base offset, the last
one active, plus a LeaderEpochFileCache. It assigns offsets (leader) or keeps them
(follower), rolls segments, serves reads of whole batches, truncates, expires old segments
and makes data durable on request.

Durability model (docs/storage.md has the long form):
- appends write to the page cache only (Kafka's default); ``flush(up_to)`` fsyncs the
  segments holding unflushed offsets below ``up_to``, then the directory if a segment was
  created since its last fsync, then the epoch checkpoint, and only then advances
  ``recovery_point``; data below the recovery point survives any crash;
- a failed fsync takes the log offline (KafkaStorageError on every later call), as Kafka
  takes the log dir offline: after a failed fsync the page cache can no longer be trusted;
- truncations are made durable before they return (fsync of the file and the directory),
  so a follower never resurrects a divergent suffix after a crash.

Every method that awaits holds ``_lock``, so flush, truncation, retention and close never
interleave; appends and reads are synchronous and may run while a flush waits on the disk
(they only touch offsets at or above the flush target).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import errno
import itertools
import logging
import os
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass

from log.batch import (
    BATCH_HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
    assign_offsets,
    validate_batch,
)
from log.checkpoint import LEADER_EPOCH_CHECKPOINT
from log.compression import Compression, decompress
from log.config import LogConfig
from log.descriptors import is_out_of_descriptors
from log.epoch_cache import LeaderEpochFileCache
from log.errors import InvalidRecordError, RecordError, RecordTooLargeError
from log.fs import FileRegion
from log.index import REL_OFFSET_MAX
from log.lazy_files import PooledFileSystem
from log.loader import load_segments
from log.rate_limited_log import RateLimitedLog
from log.runtime import Runtime
from log.segment import LOG_SUFFIX, SWAP_SUFFIX, LogSegment, segment_path
from log.txn_index import AbortedTxn
from log.validator import WALK_SLICE_RECORDS, RecordWalk, ValidatedBatch

logger = logging.getLogger(__name__)
_limited = RateLimitedLog(logger)


class KafkaStorageError(OSError):
    """The log is offline after a disk failure; the broker answers KAFKA_STORAGE_ERROR."""

    kafka_error_code = 56


class OffsetOutOfRangeError(Exception):
    """A read or deleteRecords offset outside [log start offset, log end offset]."""

    kafka_error_code = 1


class UnexpectedAppendOffsetError(Exception):
    """A follower append whose offsets start below the log end offset or go backwards."""

    kafka_error_code = -1  # Kafka's UnexpectedAppendOffsetException has no wire code


class RecordBatchTooLargeError(RecordError):
    """An append larger than segment.bytes: it could never fit in a segment."""

    kafka_error_code = 18  # RECORD_LIST_TOO_LARGE


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """What an append did (Kafka's LogAppendInfo); offsets are -1 for an empty append."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int
    log_start_offset: int
    batch_count: int
    record_count: int
    valid_bytes: int
    last_offset_of_first_batch: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Whole batches from one segment starting with the batch that holds fetch_offset."""

    fetch_offset: int
    records: FileRegion  # named, not read: ``bytes(records)`` reads it
    next_offset: int
    segment_base_offset: int
    position: int
    log_start_offset: int
    log_end_offset: int


CheckpointHook = Callable[["Log"], Awaitable[None]]


class Log:
    """One partition's log; build it with ``await Log.open(...)``."""

    def __init__(
        self,
        runtime: Runtime,
        dir_path: str,
        config: LogConfig,
        segments: list[LogSegment],
        epoch_cache: LeaderEpochFileCache,
        *,
        log_start_offset: int,
        recovery_point: int,
        checkpoint_hook: CheckpointHook | None,
    ) -> None:
        """Use Log.open; this only wires loaded parts together."""
        assert segments, dir_path
        self.runtime = runtime
        self.fs = runtime.fs
        self.dir_path = dir_path
        self.config = config
        self.checkpoint_hook = checkpoint_hook
        self.leader_epoch_cache = epoch_cache
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._log_end_offset = segments[-1].next_offset
        self._log_start_offset = log_start_offset
        self._recovery_point = min(recovery_point, self._log_end_offset)
        self._last_flush_ms = runtime.clock.now_ms()
        self._lock = asyncio.Lock()
        self._dir_dirty = False
        self._offline: OSError | None = None
        # Told of the failure that takes this log offline (the LogManager takes its whole
        # log dir offline, as Kafka's LogDirFailureChannel does).
        self.on_offline: Callable[[OSError], None] | None = None
        self._closed = False
        self._flush_request = 0
        self._flush_task: asyncio.Task[None] | None = None
        self._pending_deletes: list[tuple[asyncio.TimerHandle, list[LogSegment]]] = []
        # Bumped by every truncation: a log cleaner pass that read segments before one
        # must not swap its (now stale) rewrite in, nor advance its checkpoint.
        self.truncations = 0
        # The recovery point the log was opened with, before an unclean start's recovery
        # moved it to the log end: what the last life had surely made durable. Files that
        # describe the log up to an offset (producer snapshots) are trusted only up to it.
        self.opened_recovery_point = self._recovery_point
        self._check_invariants()

    # ---- construction -------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        runtime: Runtime,
        dir_path: str,
        config: LogConfig,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        checkpoint_hook: CheckpointHook | None = None,
    ) -> Log:
        """Load (or create) the log in ``dir_path``; after an unclean shutdown, revalidate
        every segment from the recovery point on (Kafka's LogLoader)."""
        fs = runtime.fs
        if not fs.is_dir(dir_path):
            fs.mkdir(dir_path)
            await fs.fsync_dir(os.path.dirname(dir_path.rstrip("/")) or ".")
        epoch_cache = LeaderEpochFileCache(fs, os.path.join(dir_path, LEADER_EPOCH_CHECKPOINT))
        loaded = await load_segments(
            runtime,
            dir_path,
            config,
            epoch_cache,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=had_clean_shutdown,
        )
        log = cls(
            runtime,
            dir_path,
            config,
            loaded.segments,
            epoch_cache,
            log_start_offset=loaded.log_start_offset,
            recovery_point=loaded.recovery_point,
            checkpoint_hook=checkpoint_hook,
        )
        if not had_clean_shutdown:
            log.opened_recovery_point = min(recovery_point, log.log_end_offset)
        epoch_cache.truncate_from_end(log.log_end_offset)
        epoch_cache.truncate_from_start(log.log_start_offset)
        await epoch_cache.flush()
        return log

    # ---- properties ---------------------------------------------------------------------
    @property
    def name(self) -> str:
        return os.path.basename(self.dir_path.rstrip("/"))

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record gets."""
        return self._log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced and survives a crash."""
        return self._recovery_point

    @property
    def last_flush_ms(self) -> int:
        return self._last_flush_ms

    @property
    def unflushed_messages(self) -> int:
        return self._log_end_offset - self._recovery_point

    @property
    def is_online(self) -> bool:
        return self._offline is None and not self._closed

    @property
    def size(self) -> int:
        """Bytes in all segments."""
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[LogSegment]:
        """The live segments, oldest first (a copy)."""
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def latest_epoch(self) -> int | None:
        return self.leader_epoch_cache.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch for this log: (epoch, end offset), (-1, -1) if unknown."""
        return self.leader_epoch_cache.end_offset_for(epoch, self._log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        """Apply a dynamic config change; index sizing applies to segments rolled later."""
        self.config = config

    # ---- append -------------------------------------------------------------------------
    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int
    ) -> LogAppendInfo:
        """Validate every batch (CRC, counts, sizes), stamp offsets from the LEO and the
        leader epoch into the header in place, and append. A bytearray (or writable
        memoryview) argument is modified in place; bytes are copied once."""
        self._check_online()
        buf: bytearray | memoryview | None = records if isinstance(records, bytearray) else None
        if buf is None:
            buf = records if isinstance(records, memoryview) and not records.readonly else None
        if buf is None:
            buf = bytearray(records)
        end = len(buf)
        offset = first_offset = self._log_end_offset
        max_message_bytes = self.config.max_message_bytes
        batches: list[tuple[int, int, int]] = []
        max_timestamp, offset_of_max_timestamp = -1, -1
        record_count = 0
        pos = 0
        while pos < end:  # bounded: each pass consumes a whole batch of >= 61 bytes
            header = validate_batch(buf, pos)
            size = header.batch_length + 12
            if size > max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}"
                )
            count = header.records_count
            if count <= 0 or count != header.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"batch at {pos} has {count} records for {header.last_offset_delta + 1} offsets"
                )
            assign_offsets(buf, pos, offset, leader_epoch)
            last = offset + header.last_offset_delta
            batches.append((size, last, header.max_timestamp))
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = header.max_timestamp, last
            record_count += count
            offset = last + 1
            pos += size
        if not batches:
            return self._empty_append_info()
        self._write(buf, batches, first_offset)
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=offset - 1,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max_timestamp,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            batch_count=len(batches),
            record_count=record_count,
            valid_bytes=end,
            last_offset_of_first_batch=batches[0][1],
        )

    def append_validated(self, batch: ValidatedBatch, leader_epoch: int) -> LogAppendInfo:
        """append_as_leader for one produced batch that log/validator.py has checked (CRC,
        counts, size, records) and parsed: the offsets and the leader epoch are stamped into
        its header and it is appended, with no second parse or CRC pass."""
        self._check_online()
        records = batch.records
        buf = records if isinstance(records, bytearray) else bytearray(records)
        header = batch.header
        first_offset = self._log_end_offset
        last = first_offset + header.last_offset_delta
        assign_offsets(buf, 0, first_offset, leader_epoch)
        self._write(buf, [(header.size, last, header.max_timestamp)], first_offset)
        if leader_epoch >= 0:
            self.leader_epoch_cache.assign(leader_epoch, first_offset)
        return LogAppendInfo(
            first_offset=first_offset,
            last_offset=last,
            max_timestamp=header.max_timestamp,
            offset_of_max_timestamp=last,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            batch_count=1,
            record_count=header.records_count,
            valid_bytes=header.size,
            last_offset_of_first_batch=last,
        )

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo:
        """Append batches with the offsets and epochs the leader gave them (CRC-checked).
        UnexpectedAppendOffsetError if they start below the LEO or are not increasing."""
        self._check_online()
        end = len(records)
        batches: list[tuple[int, int, int]] = []
        epochs: list[tuple[int, int]] = []
        max_timestamp, offset_of_max_timestamp = -1, -1
        record_count = 0
        previous_last = self._log_end_offset - 1
        first: BatchHeader | None = None
        pos = 0
        while pos < end:  # bounded: each pass consumes a whole batch of >= 61 bytes
            header = validate_batch(records, pos)
            if header.base_offset <= previous_last:
                raise UnexpectedAppendOffsetError(
                    f"{self.name}: batch at {pos} starts at offset {header.base_offset}, "
                    f"expected > {previous_last} (log end offset {self._log_end_offset})"
                )
            first = first or header
            last = header.last_offset
            batches.append((header.size, last, header.max_timestamp))
            if header.partition_leader_epoch >= 0 and (
                not epochs or epochs[-1][0] != header.partition_leader_epoch
            ):
                epochs.append((header.partition_leader_epoch, header.base_offset))
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = header.max_timestamp, last
            record_count += header.records_count
            previous_last = last
            pos += header.size
        if first is None:
            return self._empty_append_info()
        self._write(records, batches, first.base_offset)
        for epoch, start_offset in epochs:
            self.leader_epoch_cache.assign(epoch, start_offset)
        return LogAppendInfo(
            first_offset=first.base_offset,
            last_offset=previous_last,
            max_timestamp=max_timestamp,
            offset_of_max_timestamp=offset_of_max_timestamp,
            log_append_time_ms=-1,
            log_start_offset=self._log_start_offset,
            batch_count=len(batches),
            record_count=record_count,
            valid_bytes=end,
            last_offset_of_first_batch=first.last_offset,
        )

    def _empty_append_info(self) -> LogAppendInfo:
        return LogAppendInfo(-1, -1, -1, -1, -1, self._log_start_offset, 0, 0, 0, -1)

    def _write(
        self,
        data: bytes | bytearray | memoryview,
        batches: list[tuple[int, int, int]],
        first_offset: int,
    ) -> None:
        """Roll if needed, append to the active segment, advance the LEO."""
        size = len(data)
        if size > self.config.segment_bytes:
            raise RecordBatchTooLargeError(
                f"append of {size} bytes exceeds segment.bytes {self.config.segment_bytes}"
            )
        last_offset = batches[-1][1]
        if last_offset - first_offset > REL_OFFSET_MAX:
            raise InvalidRecordError(f"append spans offsets {first_offset}..{last_offset}")
        segment = self._maybe_roll(size, max(b[2] for b in batches), first_offset, last_offset)
        try:
            segment.append(data, batches)
        except OSError as exc:
            try:
                consistent = segment.log.size() == segment.size
            except OSError:
                consistent = False
            if not consistent:
                self._mark_offline(exc)
            raise
        assert last_offset >= self._log_end_offset, (last_offset, self._log_end_offset)
        self._log_end_offset = last_offset + 1
        if self.unflushed_messages >= self.config.flush_messages:
            self._request_background_flush(self._log_end_offset)

    def _maybe_roll(
        self, size: int, max_timestamp: int, first_offset: int, last_offset: int
    ) -> LogSegment:
        segment = self._segments[-1]
        config = self.config
        if not segment.should_roll(
            segment_bytes=config.segment_bytes,
            segment_ms=config.max_segment_ms,
            messages_size=size,
            max_timestamp_in_messages=max_timestamp,
            max_offset_in_messages=last_offset,
            now_ms=self.runtime.clock.now_ms(),
        ):
            return segment
        # Kafka rolls at the LEO; only an offset jump too large for u32 relative offsets
        # (possible for followers) starts the new segment at the append's first offset.
        new_base = self._log_end_offset
        if last_offset - new_base > REL_OFFSET_MAX:
            new_base = first_offset
        return self._roll(new_base)

    def roll(self) -> LogSegment:
        """Start a new segment at the LEO now (what Kafka's roll() does on request)."""
        self._check_online()
        if self._segments[-1].size == 0:
            return self._segments[-1]
        return self._roll(self._log_end_offset)

    def _roll(self, new_base: int) -> LogSegment:
        old = self._segments[-1]
        assert new_base >= self._log_end_offset or old.size == 0, (new_base, old)
        if old.size == 0:
            # An empty active segment is replaced rather than left as a hole (KAFKA-6388).
            self._segments.pop()
            self._bases.pop()
            old.delete_files()
        else:
            old.on_become_inactive()
        segment = self._new_segment(new_base)
        self._segments.append(segment)
        self._bases.append(new_base)
        self._dir_dirty = True
        # Kafka flushes the finished segments right after a roll, off the append path.
        self._request_background_flush(new_base)
        return segment

    def _new_segment(self, base_offset: int) -> LogSegment:
        config = self.config
        jitter = 0
        if config.segment_jitter_ms > 0:
            jitter = self.runtime.rng.randrange(
                min(config.segment_jitter_ms, config.max_segment_ms)
            )
        return LogSegment(
            self.fs,
            self.dir_path,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_size=config.segment_index_bytes,
            roll_jitter_ms=jitter,
            created_ms=self.runtime.clock.now_ms(),
            create=True,
        )

    # ---- read ---------------------------------------------------------------------------
    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_message: bool = True,
        skip_emptied: bool = False,
    ) -> FetchDataInfo:
        """Whole batches, as a region of a segment file (unread: ``bytes(info.records)``
        reads it), from the one holding ``offset``: at most ``max_bytes`` (except a
        first batch larger than that when ``min_one_message``), none reaching ``max_offset``
        (the high watermark for consumers). OffsetOutOfRangeError outside [start, LEO].
        ``skip_emptied`` (a consumer's read) steps over batches the log cleaner left without
        records when they are all an answer would hold: librdkafka, kafka-go and others
        cannot move past such an answer (they take it for a truncated large message);
        replicas and the producer state still read them."""
        leo = self._log_end_offset
        if offset < self._log_start_offset or offset > leo:
            raise OffsetOutOfRangeError(
                f"{self.name}: offset {offset} is outside [{self._log_start_offset}, {leo}]"
            )
        index = max(0, bisect.bisect_right(self._bases, offset) - 1)
        if offset < leo and (max_offset is None or offset < max_offset):
            end = leo if max_offset is None else min(leo, max_offset)
            skip_emptied = skip_emptied and self.config.compact
            for segment in self._segments[index:]:  # bounded by the segment count
                position = max(offset, segment.base_offset)
                result = segment.read(
                    position, max_bytes, max_offset=max_offset, min_one_message=min_one_message
                )
                # Bounded: each read starts past the last one, within this segment.
                while (
                    skip_emptied
                    and result is not None
                    and result.next_offset < end
                    and _holds_no_record(result.records)
                ):
                    position = result.next_offset
                    result = segment.read(
                        position, max_bytes, max_offset=max_offset, min_one_message=min_one_message
                    )
                if result is not None:
                    return FetchDataInfo(
                        offset,
                        result.records,
                        result.next_offset,
                        segment.base_offset,
                        result.records.position,
                        self._log_start_offset,
                        leo,
                    )
        segment = self._segments[index]
        return FetchDataInfo(
            offset,
            FileRegion(segment.log, segment.size, 0),
            offset,
            segment.base_offset,
            segment.size,
            self._log_start_offset,
            leo,
        )

    # ---- aborted transactions -----------------------------------------------------------
    def _segment_of(self, offset: int) -> LogSegment:
        return self._segments[max(0, bisect.bisect_right(self._bases, offset) - 1)]

    def append_aborted_txn(self, entry: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its marker (just appended)."""
        self._check_online()
        self._segment_of(entry.last_offset).append_aborted_txn(entry)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), from the
        indexes of the segment holding ``fetch_offset`` on (Kafka's
        collectAbortedTransactions): what a read_committed fetch of that range returns."""
        found: list[AbortedTxn] = []
        start = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
        for segment in self._segments[start:]:  # bounded by the segment count
            search = segment.collect_aborted_txns(fetch_offset, upper_bound_offset)
            found.extend(search.aborted)
            if search.complete:
                break
        return found

    def aborted_txns(self) -> list[AbortedTxn]:
        """Every indexed aborted transaction, in marker order."""
        return [entry for segment in self._segments for entry in segment.txn_index.entries]

    def repair_txn_indexes(self, computed: list[AbortedTxn]) -> int:
        """Add the ``computed`` entries (from a read of the log's batches) that the segments'
        indexes lack: a crash can lose an index write the log's data survived. Stored
        entries stay (a transaction that began below the log start can no longer be
        computed, but its entry is still right). Returns the number of segments rewritten."""
        self._check_online()
        by_segment: dict[int, list[AbortedTxn]] = {}
        for entry in computed:
            if entry.last_offset < self._log_end_offset:
                index = max(0, bisect.bisect_right(self._bases, entry.last_offset) - 1)
                by_segment.setdefault(index, []).append(entry)
        rewritten = 0
        for index, entries in sorted(by_segment.items()):
            txn_index = self._segments[index].txn_index
            stored = {entry.last_offset: entry for entry in txn_index.entries}
            merged = stored | {e.last_offset: e for e in entries if e.last_offset not in stored}
            if len(merged) != len(stored):
                txn_index.replace(merged.values())
                rewritten += 1
        return rewritten

    def fetch_offset_by_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` (ListOffsets)."""
        steps = self.offset_by_timestamp_steps(timestamp)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    def offset_by_timestamp_steps(
        self, timestamp: int
    ) -> Generator[None, None, tuple[int, int] | None]:
        """fetch_offset_by_timestamp as steps: it yields between slices of WALK_SLICE_RECORDS
        records of a batch's walk (a batch may hold 1.78M records: 64 concurrent lookups in
        it kept every other request waiting 5 s), so a caller can serve its loop."""
        for segment in list(self._segments):  # bounded by the segment count
            if segment.max_timestamp < timestamp:
                continue
            location = segment.find_offset_by_timestamp(timestamp)
            if location is None:
                continue
            data = segment.log.pread(location.position, location.size)
            header = validate_batch(data)
            min_delta = max(0, self._log_start_offset - header.base_offset)
            if header.timestamp_type == LOG_APPEND_TIME:  # every record has the batch's time
                if min_delta <= header.last_offset_delta:
                    return header.base_offset + min_delta, header.max_timestamp
                continue
            # Only offset deltas and timestamps are read: no record objects, one bounded
            # payload at a time, so a batch of millions of tiny records costs its bytes only.
            payload = data[BATCH_HEADER_SIZE:]
            if header.compression is not Compression.NONE:
                payload = decompress(header.compression, payload)
            walking = RecordWalk(
                bytes(payload),
                header.records_count,
                header.base_timestamp,
                stop_at_timestamp=timestamp,
                min_offset_delta=min_delta,
            )
            del payload
            while True:
                walking.step(WALK_SLICE_RECORDS)
                if walking.done:
                    break
                yield
            walk = walking.result()
            if walk.found is not None:
                return header.base_offset + walk.found[0], walk.found[1]
        return None

    # ---- flush --------------------------------------------------------------------------
    async def flush(self, up_to_offset: int | None = None) -> None:
        """Make every offset below ``up_to_offset`` (default: the LEO) durable and advance
        the recovery point; OSError if the disk fails (the log then goes offline)."""
        async with self._lock:
            self._check_online()
            await self._flush_locked(up_to_offset)

    async def _flush_locked(self, up_to_offset: int | None) -> None:
        leo = self._log_end_offset
        target = leo if up_to_offset is None else min(up_to_offset, leo)
        recovery_point = self._recovery_point
        if target <= recovery_point and not self._dir_dirty:
            return
        to_flush: list[LogSegment] = []
        for index, segment in enumerate(self._segments):  # bounded by the segment count
            if segment.base_offset >= target and to_flush:
                break
            end = self._bases[index + 1] if index + 1 < len(self._bases) else leo + 1
            if end > recovery_point:
                to_flush.append(segment)
        active = self._segments[-1]
        try:
            for segment in to_flush:
                await segment.flush(include_indexes=segment is not active)
            if self._dir_dirty:
                self._dir_dirty = False
                await self.fs.fsync_dir(self.dir_path)
            await self.leader_epoch_cache.flush()
        except OSError as exc:
            self._mark_offline(exc)
            raise
        if target > self._recovery_point:
            self._recovery_point = target
        self._last_flush_ms = self.runtime.clock.now_ms()

    def _request_background_flush(self, offset: int) -> None:
        """Flush up to ``offset`` soon, off the (synchronous) append path."""
        self._flush_request = max(self._flush_request, offset)
        if self._flush_task is not None and not self._flush_task.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (synchronous use): the next explicit flush covers it
        self._flush_task = loop.create_task(self._background_flush())

    async def _background_flush(self) -> None:
        # Bounded: each pass advances the recovery point or ends the loop.
        while self.is_online and min(self._flush_request, self._log_end_offset) > (
            self._recovery_point
        ):
            try:
                await self.flush(self._flush_request)
            except OSError as exc:
                if is_out_of_descriptors(exc):  # the next flush request tries again
                    _limited.log(
                        "flush-out-of-descriptors",
                        logging.WARNING,
                        "%s: background flush is out of file descriptors (%s); the log stays "
                        "online",
                        self.name,
                        exc,
                    )
                else:
                    logger.exception("%s: background flush failed; the log is offline", self.name)
                return

    # ---- truncation ---------------------------------------------------------------------
    async def truncate_to(self, target_offset: int) -> bool:
        """Remove every batch holding offsets >= ``target_offset`` (follower divergence),
        with the indexes and the epoch cache; durable before it returns. A target inside
        a batch removes that whole batch. True if anything was removed."""
        if target_offset < 0:
            raise ValueError(f"cannot truncate to negative offset {target_offset}")
        async with self._lock:
            self._check_online()
            if target_offset >= self._log_end_offset:
                return False
            self.truncations += 1
            if target_offset < self._segments[0].base_offset:
                await self._truncate_fully_locked(target_offset)
                return True
            # Lower the recovery point durably first: a crash in the middle of the steps
            # below (file cut, renames) must make the next start-up rescan from here, where
            # the loader notices a cut segment followed by stale ones and drops the latter.
            if target_offset < self._recovery_point:
                self._recovery_point = target_offset
                await self._run_checkpoint_hook()
            keep = bisect.bisect_right(self._bases, target_offset)
            doomed = self._segments[keep:]
            del self._segments[keep:]
            del self._bases[keep:]
            segment = self._segments[-1]
            try:
                self._delete_segments_later(doomed)
                segment.truncate_to(target_offset, self.runtime.clock.now_ms())
                self._log_end_offset = segment.next_offset
                self.leader_epoch_cache.truncate_from_end(self._log_end_offset)
                self._log_start_offset = min(self._log_start_offset, self._log_end_offset)
                self._recovery_point = min(self._recovery_point, self._log_end_offset)
                await segment.flush(include_indexes=False)
                await self.fs.fsync_dir(self.dir_path)
                self._dir_dirty = False
                await self.leader_epoch_cache.flush()
            except OSError as exc:
                self._mark_offline(exc)
                raise
            self._check_invariants()
        await self._run_checkpoint_hook()
        return True

    async def truncate_fully_and_start_at(self, new_offset: int) -> None:
        """Drop every segment and restart empty at ``new_offset`` (a follower whose fetch
        offset fell below the leader's log start); durable before it returns."""
        if new_offset < 0:
            raise ValueError(f"negative offset {new_offset}")
        async with self._lock:
            self._check_online()
            await self._truncate_fully_locked(new_offset)
        await self._run_checkpoint_hook()

    async def _truncate_fully_locked(self, new_offset: int) -> None:
        doomed = self._segments
        self.truncations += 1
        try:
            self._delete_segments_later(doomed)
            segment = self._new_segment(new_offset)
            self._segments = [segment]
            self._bases = [new_offset]
            self._log_end_offset = new_offset
            self._log_start_offset = new_offset
            self._recovery_point = new_offset
            self.leader_epoch_cache.clear()
            await self.fs.fsync_dir(self.dir_path)
            self._dir_dirty = False
            await self.leader_epoch_cache.flush()
        except OSError as exc:
            self._mark_offline(exc)
            raise
        self._check_invariants()

    # ---- log start offset and retention -------------------------------------------------
    async def delete_records(self, offset: int, *, high_watermark: int | None = None) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (at most the high
        watermark, default the LEO), drop segments wholly below it, run the checkpoint hook.
        Returns the new log start offset."""
        bound = self._log_end_offset if high_watermark is None else high_watermark
        if offset < 0 or offset > bound:
            raise OffsetOutOfRangeError(
                f"{self.name}: cannot delete records up to {offset}; bound is {bound}"
            )
        async with self._lock:
            self._check_online()
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self.leader_epoch_cache.truncate_from_start(offset)
                self._delete_segments_locked(
                    self._deletable(lambda _s, nxt: nxt is not None and nxt.base_offset <= offset)
                )
        await self._run_checkpoint_hook()
        return self._log_start_offset

    async def delete_old_segments(self, *, high_watermark: int | None = None) -> int:
        """Kafka's deleteOldSegments: segments past retention.ms (by their largest
        timestamp) or beyond retention.bytes when cleanup.policy has delete, and segments
        below the log start offset, never past the high watermark. Files are renamed
        ``.deleted`` and removed file.delete.delay.ms later. Returns the number deleted."""
        async with self._lock:
            self._check_online()
            bound = self._log_end_offset if high_watermark is None else high_watermark
            config = self.config
            deleted = 0
            # A compact-only topic keeps everything retention would delete (Kafka).
            if config.delete and config.retention_ms >= 0:
                now_ms = self.runtime.clock.now_ms()
                deleted += self._delete_segments_locked(
                    self._deletable(
                        lambda s, _n: now_ms - s.largest_timestamp > config.retention_ms, bound
                    )
                )
            if config.delete and config.retention_bytes >= 0:
                excess = [self.size - config.retention_bytes]

                def over_size(segment: LogSegment, _next: LogSegment | None) -> bool:
                    if excess[0] - segment.size < 0:
                        return False
                    excess[0] -= segment.size
                    return True

                deleted += self._delete_segments_locked(self._deletable(over_size, bound))
            start = self._log_start_offset
            deleted += self._delete_segments_locked(
                self._deletable(lambda _s, n: n is not None and n.base_offset <= start, bound)
            )
        return deleted

    def _deletable(
        self,
        predicate: Callable[[LogSegment, LogSegment | None], bool],
        upper_bound: int | None = None,
    ) -> list[LogSegment]:
        bound = self._log_end_offset if upper_bound is None else upper_bound
        result: list[LogSegment] = []
        segments = self._segments
        for index, segment in enumerate(segments):  # bounded by the segment count
            following = segments[index + 1] if index + 1 < len(segments) else None
            if following is None and segment.size == 0:
                break
            end = following.base_offset if following else self._log_end_offset
            if end > bound or not predicate(segment, following):
                break
            result.append(segment)
        return result

    def _delete_segments_locked(self, doomed: list[LogSegment]) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self._segments):
            self._roll(self._log_end_offset)  # never leave the log without a segment
        assert self._segments[: len(doomed)] == doomed
        del self._segments[: len(doomed)]
        del self._bases[: len(doomed)]
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        self._delete_segments_later(doomed)
        self._check_invariants()
        return len(doomed)

    def _delete_segments_later(self, doomed: list[LogSegment]) -> None:
        """Rename to ``.deleted`` now, remove after file.delete.delay.ms (Kafka's
        asyncDeleteSegment): readers holding a segment finish, and a restart in between
        finds the ``.deleted`` names and finishes the job."""
        if not doomed:
            return
        for segment in doomed:
            segment.write_pending_index_entries()
            segment.rename_to_deleted()
        delay_s = self.config.file_delete_delay_ms / 1000
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or delay_s == 0:
            self._delete_files(doomed)
            return
        handle = loop.call_later(delay_s, self._delete_files, doomed)
        self._pending_deletes.append((handle, doomed))

    def _delete_files(self, doomed: list[LogSegment]) -> None:
        self._pending_deletes = [p for p in self._pending_deletes if p[1] is not doomed]
        for segment in doomed:
            try:
                segment.delete_files()
            except OSError:
                # The .deleted files stay; the next start-up removes them.
                logger.exception("%s: could not delete %r", self.name, segment)

    @property
    def pending_deletions(self) -> int:
        """Segments renamed ``.deleted`` whose files are not removed yet."""
        return sum(len(p[1]) for p in self._pending_deletes)

    # ---- compaction ---------------------------------------------------------------------
    async def replace_segments(
        self, old: list[LogSegment], cleaned_path: str, *, truncations: int
    ) -> bool:
        """Swap the fsynced cleaned file ``cleaned_path`` in for the consecutive inactive
        segments ``old`` (Kafka's replaceSegments): ``.cleaned`` -> ``.swap`` (durable),
        originals -> ``.deleted``, ``.swap`` -> ``.log``, then the directory is fsynced.
        A crash at any step leaves the originals or a whole ``.swap`` that the loader
        completes. False (the file removed) if ``old`` is no longer part of the log or
        the log was truncated since the pass read it (``truncations`` then differs)."""
        async with self._lock:
            segments = self._segments
            first = next((i for i, s in enumerate(segments) if s is old[0]), None)
            if (
                self._offline is not None
                or self._closed
                or self.truncations != truncations
                or first is None
                or segments[first : first + len(old)] != old
                or first + len(old) >= len(segments)
            ):
                self.fs.remove(cleaned_path)
                return False
            base = old[0].base_offset
            swap_path = segment_path(self.dir_path, base, LOG_SUFFIX + SWAP_SUFFIX)
            try:
                # The aborted transactions the originals indexed are still in the data.
                aborted = [entry for s in old for entry in s.txn_index.entries]
                self.fs.rename(cleaned_path, swap_path)
                await self.fs.fsync_dir(self.dir_path)
                self._delete_segments_later(old)
                self.fs.rename(swap_path, segment_path(self.dir_path, base, LOG_SUFFIX))
                segment = LogSegment(
                    self.fs,
                    self.dir_path,
                    base,
                    index_interval_bytes=self.config.index_interval_bytes,
                    max_index_size=self.config.segment_index_bytes,
                    roll_jitter_ms=0,
                    created_ms=old[0].created_ms,
                    create=False,
                    indexes_expected=False,
                )
                segment.txn_index.replace(aborted)
                segments[first : first + len(old)] = [segment]
                self._bases = [s.base_offset for s in segments]
                assert segment.next_offset == segments[first + 1].base_offset, segment
                segment.on_become_inactive()
                await segment.flush(include_indexes=True)
                await self.fs.fsync_dir(self.dir_path)
            except OSError as exc:
                self._mark_offline(exc)
                raise
            self._check_invariants()
        return True

    # ---- moving between log dirs (KIP-113) -----------------------------------------------
    def rename_dir(self, new_dir_path: str) -> None:
        """Rename the log's directory (Kafka's renameDir), synchronously, so no append or
        read interleaves with it: the open files stay open and every later file operation
        (a roll, a deletion, a checkpoint) uses the new path. The caller makes the rename
        durable (fsync of the new parent dir) before it relies on it."""
        self._check_online()
        old = self.dir_path
        self.fs.rename(old, new_dir_path)
        if isinstance(self.fs, PooledFileSystem):
            self.fs.moved_dir(old, new_dir_path)
        self.dir_path = new_dir_path
        pending = [segment for _, doomed in self._pending_deletes for segment in doomed]
        for segment in [*self._segments, *pending]:
            segment.moved_to(new_dir_path)
        self.leader_epoch_cache.moved_to(os.path.join(new_dir_path, LEADER_EPOCH_CHECKPOINT))

    def advance_log_start_offset(self, offset: int) -> None:
        """Raise the log start offset to ``offset`` (at most the LEO) at once, synchronously:
        reads below it are refused from now on; the segments wholly below it are deleted by
        the next retention pass (``delete_old_segments``). A copy of another replica takes
        that replica's log start this way at the moment it replaces it."""
        self._check_online()
        if offset > self._log_end_offset:
            raise OffsetOutOfRangeError(f"{self.name}: log start {offset} beyond the log end")
        if offset > self._log_start_offset:
            self._log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)

    # ---- lifecycle ----------------------------------------------------------------------
    async def close(self) -> None:
        """Flush everything, persist the indexes of the active segment, close the files.
        Pending ``.deleted`` files are left for the next start-up to remove."""
        if self._flush_task is not None and not self._flush_task.done():
            self._flush_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush_task
        async with self._lock:
            if self._closed:
                return
            try:
                if self._offline is None:
                    await self._flush_locked(None)
                    active = self._segments[-1]
                    active.on_become_inactive()
                    await active.flush(include_indexes=True)
            except OSError as exc:
                self._mark_offline(exc)
                raise
            finally:
                self._closed = True
                for handle, doomed in self._pending_deletes:
                    handle.cancel()
                    for segment in doomed:
                        segment.close()
                self._pending_deletes = []
                for segment in self._segments:
                    segment.close()

    def _mark_offline(self, exc: OSError) -> None:
        if is_out_of_descriptors(exc):
            # Not a disk failure: what failed is tried again, the log stays online (the
            # caller still gets the error; log/descriptors.py).
            return
        if self._offline is None:
            logger.error("%s: disk failure, taking the log offline: %s", self.name, exc)
            self._offline = exc
            if self.on_offline is not None:
                self.on_offline(exc)

    def take_offline(self, exc: OSError) -> None:
        """Serve nothing more (KafkaStorageError): its log dir failed. Closing it later
        flushes nothing, so no clean shutdown marker is written for what it holds."""
        if self._offline is None:
            self._offline = exc

    def _check_online(self) -> None:
        if self._closed:
            raise KafkaStorageError(errno.EBADF, f"log {self.name} is closed")
        if self._offline is not None:
            raise KafkaStorageError(errno.EIO, f"log {self.name} is offline after: {self._offline}")

    async def _run_checkpoint_hook(self) -> None:
        if self.checkpoint_hook is not None:
            await self.checkpoint_hook(self)

    def _check_invariants(self) -> None:
        bases = self._bases
        assert bases == [s.base_offset for s in self._segments], self.name
        assert all(a < b for a, b in itertools.pairwise(bases)), bases
        assert self._log_start_offset <= self._log_end_offset, (
            self._log_start_offset,
            self._log_end_offset,
        )
        assert self._recovery_point <= self._log_end_offset, self._recovery_point
        assert self._segments[-1].next_offset == self._log_end_offset, self.name

    def __repr__(self) -> str:
        return (
            f"Log({self.dir_path!r}, start={self._log_start_offset}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )


def _holds_no_record(records: FileRegion) -> bool:
    """Whether ``records`` (whole batches) are some, all with a record count of 0; reads
    their headers only (most answers stop at the first)."""
    position, end = records.position, records.position + records.size
    while position + BATCH_HEADER_SIZE <= end:  # bounded: each pass moves past one batch
        header = records.handle.pread(position, BATCH_HEADER_SIZE)
        if len(header) < BATCH_HEADER_SIZE or int.from_bytes(header[57:61], "big") != 0:
            return False
        position += int.from_bytes(header[8:12], "big") + LOG_OVERHEAD
    return position > records.position
