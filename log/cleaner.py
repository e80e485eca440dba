"""Log compaction: Kafka's LogCleaner for ``cleanup.policy=compact`` (and ``compact,delete``).

One cleaning pass over a log (Kafka's Cleaner.doClean):
1. The cleanable range ends at the first uncleanable offset: the active segment's base, the
   recovery point (only fsynced data is rewritten), the last stable offset (the high
   watermark, or the first offset of a transaction still open or not yet replicated),
   and the first segment younger than ``min.compaction.lag.ms``.
2. The offset map (key -> latest offset) is built over the dirty section, from the cleaner
   checkpoint's first dirty offset on, whole segments at a time (the first one up to its
   last whole batch that fits, if it does not fit whole), its memory bounded by
   ``log.cleaner.dedupe.buffer.size``. Any entry names a later record that exists, so a
   record it supersedes may go whatever else the map holds; nothing at or past the end of
   the map goes (a tombstone there was not mapped, so its key's older records stayed).
3. Every segment from the log start up to the end of the map is rewritten, grouped so a
   group fits one segment: a record stays if no later record has its key; a tombstone
   (null value) gets a delete horizon (KIP-534: now + ``delete.retention.ms``, stored in
   its batch's baseTimestamp) when first cleaned and goes at a clean after the horizon.
   Offsets and timestamps are kept (gaps allowed, as in Kafka). A batch whose records all
   go is kept empty when it is its producer id's last batch (the idempotence state is
   rebuilt from it) or the last batch of its group (so the cleaned segment ends where the
   group did and the swap recovery below knows which originals it replaces).
4. Each group is written as ``<base>.log.cleaned``, fsynced, then swapped in by
   ``Log.replace_segments`` (``.swap``, originals to ``.deleted``, ``.swap`` to ``.log``);
   ``log/loader.py`` completes a swap a crash interrupted.

The work runs on the event loop and yields to it every ``_YIELD_EVERY_BYTES`` of batches, so
one large log never holds up heartbeats or fetches.

A log being copied into another log dir (AlterReplicaLogDirs, log/future_log.py) is not
cleaned, and a pass under way when its copy begins swaps nothing more in (Kafka's
abortAndPauseCleaning until the copy is swapped in or dropped): the copy then follows a
log whose segments do not change under it, and a pass never rewrites a log that is being
renamed away.

Transactions (as Kafka's cleaner): the records of aborted transactions (the log's
``.txnindex`` names them: producer id, first offset, marker offset) never enter the offset
map, so an aborted write cannot make a committed one with its key go, and they are removed
(the batch kept empty when it is its producer's last, as above). Commit and abort markers
are kept as they are, and so are the index entries of the segments a swap replaces
(``Log.replace_segments``). Kafka also removes a marker once its transaction's data is all
gone and delete.retention.ms has passed; here markers stay.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from log.batch import (
    BatchHeader,
    batch_key_scan,
    check_key_deltas,
    decode_batch,
    encode_batch,
)
from log.checkpoint import TopicPartition
from log.errors import RecordError
from log.index import REL_OFFSET_MAX
from log.log import Log
from log.records import RecordKey
from log.segment import LogSegment
from log.txn_index import AbortedTxn

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
# What one map entry really costs in this process, so log.cleaner.dedupe.buffer.size bounds
# the memory the map takes (Kafka's SkimpyOffsetMap budgets 24 bytes an entry for a hash and
# an offset in one preallocated buffer; on main, 24 bytes plus the key were charged here and
# 4.5M 4-byte keys took 306 MB of a 128 MiB budget): the key's bytes object (rounded to the
# allocator's 8 bytes), its offset's int object, and the dict's slot with the headroom a
# resize needs (the table doubles; measured with tracemalloc, the peak stays at or below
# 0.85 of the budget for 4- and 40-byte keys). A 4-byte key costs 168 bytes.
_MAP_OFFSET_INT_BYTES = 32
_MAP_DICT_SLOT_BYTES = 96
_YIELD_EVERY_BYTES = 256 * 1024
_INT64_MAX = (1 << 63) - 1
# Records whose keys are scanned between turns of the loop: a compressed batch of 1 MiB may
# hold 1.78M records (16 MiB inflated), seconds of scanning in one step.
YIELD_EVERY_RECORDS = 20_000


def map_entry_bytes(key: bytes) -> int:
    """What mapping ``key`` costs the offset map, in bytes of this process's memory."""
    return (sys.getsizeof(key) + 7) // 8 * 8 + _MAP_OFFSET_INT_BYTES + _MAP_DICT_SLOT_BYTES


class OffsetMap:
    """Key -> offset of its latest record, bounded in bytes (Kafka's OffsetMap)."""

    __slots__ = ("_bytes", "_offsets", "max_bytes")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._offsets: dict[bytes, int] = {}
        self._bytes = 0

    @property
    def used_bytes(self) -> int:
        return self._bytes

    def put(self, key: bytes, offset: int) -> bool:
        """Record ``offset`` as the latest of ``key``; False (nothing stored) when full."""
        if key not in self._offsets:
            cost = map_entry_bytes(key)
            if self._bytes + cost > self.max_bytes:
                return False
            self._bytes += cost
        self._offsets[key] = offset
        return True

    def get(self, key: bytes) -> int:
        """The latest offset of ``key``, -1 if unknown."""
        return self._offsets.get(key, -1)

    def __len__(self) -> int:
        return len(self._offsets)


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one pass did; ``next_dirty_offset`` is the cleaner checkpoint's new value."""

    next_dirty_offset: int
    segments_cleaned: int
    records_read: int
    records_kept: int
    bytes_read: int
    bytes_written: int
    # The earliest delete horizon of a tombstone left in the cleaned range (None: none
    # left): once it passes, the log is worth a pass even with nothing dirty (KIP-534).
    delete_horizon_ms: int | None = None


def first_uncleanable_offset(log: Log, now_ms: int, high_watermark: int | None) -> int:
    """Kafka's firstUncleanableDirtyOffset; ``high_watermark`` is the partition's last
    stable offset (no record of an unfinished transaction is cleaned)."""
    segments = log.segments
    bound = min(log.active_segment.base_offset, log.recovery_point)
    if high_watermark is not None:
        bound = min(bound, high_watermark)
    lag_ms = log.config.min_compaction_lag_ms
    for index, segment in enumerate(segments[:-1]):  # bounded by the segment count
        end = segments[index + 1].base_offset
        if end > bound or (lag_ms > 0 and segment.largest_timestamp > now_ms - lag_ms):
            return segment.base_offset
    return segments[-1].base_offset if bound >= segments[-1].base_offset else bound


def dirty_ratio(log: Log, first_dirty_offset: int, uncleanable: int) -> float:
    """Bytes of whole segments in [first dirty, uncleanable) over bytes below uncleanable."""
    clean = dirty = 0
    segments = log.segments
    for index, segment in enumerate(segments[:-1]):  # bounded by the segment count
        if segments[index + 1].base_offset > uncleanable:
            break
        if segment.base_offset >= first_dirty_offset:
            dirty += segment.size
        else:
            clean += segment.size
    return dirty / (clean + dirty) if dirty else 0.0


async def _batch_keys(data: bytes) -> tuple[BatchHeader, list[RecordKey]]:
    """decode_batch_keys, scanning YIELD_EVERY_RECORDS records per turn of the loop."""
    header, scan = batch_key_scan(data)
    while True:
        scan.scan(YIELD_EVERY_RECORDS)
        if scan.done:
            break
        await asyncio.sleep(0)
    keys = scan.finish()
    if len(keys) > YIELD_EVERY_RECORDS:
        await asyncio.sleep(0)
    return header, check_key_deltas(header, keys)


class _Yielder:
    """Hands the loop back after every ``_YIELD_EVERY_BYTES`` of work."""

    __slots__ = ("_since",)

    def __init__(self) -> None:
        self._since = 0

    async def done(self, size: int) -> None:
        self._since += size
        if self._since >= _YIELD_EVERY_BYTES:
            self._since = 0
            await asyncio.sleep(0)


async def clean_log(
    log: Log,
    first_dirty_offset: int,
    *,
    now_ms: int,
    high_watermark: int | None = None,
    dedupe_buffer_bytes: int = 128 * 1024 * 1024,
    paused: Callable[[], bool] = lambda: False,
) -> CleanResult | None:
    """One cleaning pass over ``log``; None when nothing is cleanable, or when ``paused()``
    turned true (checked before each group is written and again before it is swapped in).
    OSError if the disk fails (the swap then takes the log offline) or a segment vanished
    under it (retention or truncation ran meanwhile: the pass is simply over, the next one
    starts afresh)."""
    truncations = log.truncations
    uncleanable = first_uncleanable_offset(log, now_ms, high_watermark)
    start = max(first_dirty_offset, log.log_start_offset)
    segments = [s for s in log.segments if s.base_offset < uncleanable][: len(log.segments) - 1]
    dirty = [s for s in segments if s.base_offset >= start or _ends_after(log, s, start)]
    yielder = _Yielder()
    offset_map = OffsetMap(dedupe_buffer_bytes)
    # With nothing dirty the clean section is still rewritten: its tombstones may have
    # passed their delete horizon.
    aborted = _AbortedTxns(log.aborted_txns())
    map_end = start
    if dirty:
        map_end = await _build_offset_map(log, dirty, start, offset_map, aborted, yielder)
    if dirty and map_end == start:
        logger.warning("%s: not one batch's keys fit log.cleaner.dedupe.buffer.size", log.name)
        return None
    last_of_producer = await _last_batch_of_producers(log, yielder)
    to_clean = [s for s in segments if s.base_offset < map_end]
    if not to_clean:
        return None
    horizon_ms = now_ms + log.config.delete_retention_ms
    totals = [0, 0, 0, 0]
    earliest_horizon: int | None = None
    for group in _group_segments(log, to_clean, log.config.segment_bytes):
        if paused():
            return None
        path = _cleaned_path(group[0])
        handle = log.fs.open(path, create=True)
        changed = len(group) > 1  # merging small cleaned segments is worth a swap too
        group_last_offset = _group_end(log, group) - 1
        try:
            handle.truncate(0)
            for segment in group:
                for location in segment.batch_locations():  # bounded by the segment
                    data = segment.log.pread(location.position, location.size)
                    if location.base_offset >= map_end:  # not mapped: kept as it is
                        handle.append(data)
                        totals[2] += len(data)
                        totals[3] += len(data)
                        continue
                    out, read, kept, horizon = await _clean_batch(
                        data,
                        offset_map,
                        last_of_producer,
                        now_ms=now_ms,
                        horizon_ms=horizon_ms,
                        keep_empty=location.last_offset == group_last_offset,
                        aborted=aborted,
                    )
                    if out:
                        handle.append(out)
                    changed = changed or out is not data
                    if horizon is not None:
                        earliest_horizon = min(horizon, earliest_horizon or horizon)
                    totals[0] += read
                    totals[1] += kept
                    totals[2] += len(data)
                    totals[3] += len(out)
                    await yielder.done(len(data))
            await handle.fsync()
        except BaseException:
            handle.close()
            if log.fs.exists(path):
                log.fs.remove(path)
            raise
        handle.close()
        if not changed:
            log.fs.remove(path)  # one segment whose batches all stay: nothing to swap
        elif paused():
            log.fs.remove(path)  # its copy into another log dir began meanwhile
            return None
        elif not await log.replace_segments(group, path, truncations=truncations):
            return None  # the log changed under us: the next pass starts afresh
    if log.truncations != truncations:
        return None  # what was mapped may be gone: the checkpoint must not pass it
    records_read, records_kept, bytes_read, bytes_written = totals
    return CleanResult(
        map_end,
        len(to_clean),
        records_read,
        records_kept,
        bytes_read,
        bytes_written,
        delete_horizon_ms=earliest_horizon,
    )


def _overdue(log: Log, first_dirty_offset: int, now_ms: int) -> bool:
    """Whether the first dirty batch is older than max.compaction.lag.ms (KIP-354)."""
    lag_ms = log.config.max_compaction_lag_ms
    if lag_ms >= now_ms:
        return False  # the default (Long.MAX): never
    segments = log.segments
    index = max(0, bisect.bisect_right([s.base_offset for s in segments], first_dirty_offset) - 1)
    first = next(iter(segments[index].batch_locations()), None)
    return first is not None and 0 <= first.max_timestamp <= now_ms - lag_ms


def _ends_after(log: Log, segment: LogSegment, offset: int) -> bool:
    following = log.segments[log.segments.index(segment) + 1]
    return following.base_offset > offset


def _group_end(log: Log, group: list[LogSegment]) -> int:
    segments = log.segments
    return segments[segments.index(group[-1]) + 1].base_offset


def _cleaned_path(segment: LogSegment) -> str:
    return segment.log.path + CLEANED_SUFFIX


class _AbortedTxns:
    """Which transactional batches belong to an aborted transaction, from the log's
    ``.txnindex`` entries: a batch of producer P from an aborted transaction's first offset
    to its marker (P writes nothing else in between: the leader refuses it)."""

    __slots__ = ("_ranges",)

    def __init__(self, entries: list[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for entry in entries:
            self._ranges.setdefault(entry.producer_id, []).append(
                (entry.first_offset, entry.last_offset)
            )
        for ranges in self._ranges.values():
            ranges.sort()

    def holds(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._ranges.get(header.producer_id)
        if not ranges:
            return False
        index = bisect.bisect_right(ranges, (header.base_offset, _INT64_MAX)) - 1
        return index >= 0 and ranges[index][1] >= header.base_offset


async def _build_offset_map(
    log: Log,
    dirty: list[LogSegment],
    start: int,
    offset_map: OffsetMap,
    aborted: _AbortedTxns,
    yielder: _Yielder,
) -> int:
    """Map the dirty segments' keys; the offset the map covers up to: a segment boundary,
    or, when even the first dirty segment does not fit, the end of its last batch that
    did (Kafka's partially mapped segment). Nothing at or past it may be removed: keys
    there were not mapped, so their older records could outlive a removed tombstone."""
    segments = log.segments
    map_end = start
    for segment in dirty:  # bounded by the segment count
        end = segments[segments.index(segment) + 1].base_offset
        full = False
        mapped_to = map_end
        for location in segment.batch_locations():
            if location.last_offset < start:
                continue
            data = segment.log.pread(location.position, location.size)
            header, keys = await _batch_keys(data)
            skipped = header.is_control or aborted.holds(header)
            for index, (delta, key, _) in enumerate([] if skipped else keys):
                if key is not None and not offset_map.put(key, header.base_offset + delta):
                    full = True
                    break
                if index % YIELD_EVERY_RECORDS == YIELD_EVERY_RECORDS - 1:
                    await asyncio.sleep(0)
            if full:
                break
            mapped_to = location.last_offset + 1
            await yielder.done(len(data))
        if not full:
            map_end = end
            continue
        if map_end == start:  # the partly mapped segment waits, unless it is the first
            map_end = mapped_to
            logger.warning(
                "%s: log.cleaner.dedupe.buffer.size holds %d keys, fewer than one segment has",
                log.name,
                len(offset_map),
            )
        break
    return map_end


async def _last_batch_of_producers(log: Log, yielder: _Yielder) -> dict[int, int]:
    """Producer id -> base offset of its last batch in the log (headers only)."""
    last: dict[int, int] = {}
    for segment in log.segments:  # bounded by the segment count
        for location in segment.batch_locations():
            header = segment.log.pread(location.position, 61)
            producer_id = int.from_bytes(header[43:51], "big", signed=True)
            if producer_id >= 0:
                last[producer_id] = location.base_offset
            await yielder.done(61)
    return last


async def _clean_batch(
    data: bytes,
    offset_map: OffsetMap,
    last_of_producer: Mapping[int, int],
    *,
    now_ms: int,
    horizon_ms: int,
    keep_empty: bool,
    aborted: _AbortedTxns,
) -> tuple[bytes, int, int, int | None]:
    """(the batch's cleaned bytes, b"" to drop it; records read; records kept; the delete
    horizon of the tombstones it keeps, None if it keeps none). Keys are looked at
    YIELD_EVERY_RECORDS per turn of the loop; a batch that must be rewritten is decoded
    and encoded in one step (the remaining long step of a pass: up to seconds for a batch
    of 1.78M records)."""
    header, keys = await _batch_keys(data)  # values and headers only when rewritten
    if header.is_control:
        return data, 0, 0, None
    keep: list[int] = []
    tombstones = False
    for index, (delta, key, has_value) in enumerate([] if aborted.holds(header) else keys):
        if index % YIELD_EVERY_RECORDS == YIELD_EVERY_RECORDS - 1:
            await asyncio.sleep(0)
        if key is not None and offset_map.get(key) > header.base_offset + delta:
            continue  # a later record has this key
        if key is not None and not has_value:
            if header.has_delete_horizon and now_ms >= header.base_timestamp:
                continue  # delete.retention.ms has passed since the tombstone was cleaned
            tombstones = True
        keep.append(index)
    horizon = None
    if tombstones:
        horizon = header.base_timestamp if header.has_delete_horizon else horizon_ms
    if len(keep) == len(keys) and tombstones == header.has_delete_horizon:
        return data, len(keys), len(keep), horizon
    producer_last = last_of_producer.get(header.producer_id) == header.base_offset
    if not keep and not keep_empty and not (header.producer_id >= 0 and producer_last):
        return b"", len(keys), 0, None
    records = decode_batch(data)[1] if keep else []
    kept = [records[index] for index in keep]
    out = encode_batch(
        kept,
        base_offset=header.base_offset,
        partition_leader_epoch=header.partition_leader_epoch,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        timestamp_type=header.timestamp_type,
        last_offset_delta=header.last_offset_delta,
        empty_max_timestamp=header.max_timestamp,
        delete_horizon_ms=horizon,
    )
    return out, len(records), len(kept), horizon


def _group_segments(log: Log, segments: list[LogSegment], max_bytes: int) -> list[list[LogSegment]]:
    """Kafka's groupSegmentsBySize: runs of segments whose bytes fit one segment and whose
    offsets fit its relative-offset index."""
    groups: list[list[LogSegment]] = []
    for segment in segments:  # bounded by the segment count
        group = groups[-1] if groups else None
        if (
            group is not None
            and sum(s.size for s in group) + segment.size <= max_bytes
            and _group_end(log, [segment]) - 1 - group[0].base_offset <= REL_OFFSET_MAX
        ):
            group.append(segment)
        else:
            groups.append([segment])
    return groups


class LogCleaner:
    """Picks the dirtiest compacted log and cleans it (Kafka's LogCleaner with one thread).
    ``first_dirty`` is what each dir's ``cleaner-offset-checkpoint`` holds (topic partition
    firstDirtyOffset); the LogManager reads and writes those files."""

    def __init__(
        self,
        *,
        now_ms: Callable[[], int],
        dedupe_buffer_bytes: int,
        high_watermark: Callable[[TopicPartition], int | None] | None = None,
        paused: Callable[[TopicPartition], bool] = lambda tp: False,
    ) -> None:
        """``paused(tp)``: the log must not be cleaned now (its copy into another log dir is
        being made); read at every pick and by a pass under way."""
        self._now_ms = now_ms
        self._paused = paused
        self._dedupe_buffer_bytes = dedupe_buffer_bytes
        self._high_watermark = high_watermark
        self.first_dirty: dict[TopicPartition, int] = {}
        # Per log, the earliest delete horizon its last pass left a tombstone with.
        self.delete_horizon: dict[TopicPartition, int] = {}
        self.segments_cleaned = 0  # since start-up (a figure for operators and the simulator)

    def first_dirty_offset(self, tp: TopicPartition, log: Log) -> int:
        """Where cleaning resumes; the log start when the checkpoint is out of range."""
        offset = self.first_dirty.get(tp, 0)
        if not log.log_start_offset <= offset <= log.log_end_offset:
            return log.log_start_offset
        return offset

    def dirtiest(self, logs: list[tuple[TopicPartition, Log]]) -> tuple[TopicPartition, Log] | None:
        """Kafka's grabFilthiestCompactedLog: the compacted log with the highest dirty ratio
        among those above their min.cleanable.dirty.ratio or with a dirty record older than
        max.compaction.lag.ms (ties: the first listed); failing that, the first whose kept
        tombstones have passed their delete horizon."""
        best: tuple[float, TopicPartition, Log] | None = None
        expired: tuple[TopicPartition, Log] | None = None
        now_ms = self._now_ms()
        for tp, log in logs:  # bounded by the log count
            if not log.config.compact or not log.is_online or self._paused(tp):
                continue
            first_dirty = self.first_dirty_offset(tp, log)
            uncleanable = first_uncleanable_offset(log, now_ms, self._hw(tp))
            ratio = dirty_ratio(log, first_dirty, uncleanable)
            due = ratio > 0 and _overdue(log, first_dirty, now_ms)
            if (due or ratio > log.config.min_cleanable_dirty_ratio) and (
                best is None or ratio > best[0]
            ):
                best = (ratio, tp, log)
            horizon = self.delete_horizon.get(tp)
            if expired is None and horizon is not None and horizon <= now_ms:
                expired = (tp, log)
        return expired if best is None else (best[1], best[2])

    async def clean(self, tp: TopicPartition, log: Log) -> CleanResult | None:
        """One pass over ``log``; advances its first dirty offset. None if nothing was
        cleanable or the log changed under the pass."""
        try:
            result = await clean_log(
                log,
                self.first_dirty_offset(tp, log),
                now_ms=self._now_ms(),
                high_watermark=self._hw(tp),
                dedupe_buffer_bytes=self._dedupe_buffer_bytes,
                paused=lambda: self._paused(tp),
            )
        except RecordError:
            logger.exception("%s: a corrupt batch stopped its cleaning", log.name)
            return None
        if result is None:
            return None
        self.first_dirty[tp] = result.next_dirty_offset
        if result.delete_horizon_ms is None:
            self.delete_horizon.pop(tp, None)
        else:
            self.delete_horizon[tp] = result.delete_horizon_ms
        self.segments_cleaned += result.segments_cleaned
        assert result.next_dirty_offset <= log.log_end_offset, (result, log)
        logger.info(
            "Cleaned %s: %d segments, %d of %d records kept, %d -> %d bytes",
            log.name,
            result.segments_cleaned,
            result.records_kept,
            result.records_read,
            result.bytes_read,
            result.bytes_written,
        )
        return result

    def truncated(self, tp: TopicPartition, log_end_offset: int) -> None:
        """The log now ends at ``log_end_offset``: the first dirty offset goes no further."""
        if self.first_dirty.get(tp, -1) > log_end_offset:
            self.first_dirty[tp] = log_end_offset

    def forget(self, tp: TopicPartition) -> None:
        """The log is gone from this broker (deleted, or moved away as a stray)."""
        self.first_dirty.pop(tp, None)
        self.delete_horizon.pop(tp, None)

    def checkpoint_entries(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The cleaner-offset-checkpoint lines of one dir's partitions."""
        return {tp: self.first_dirty[tp] for tp in tps if tp in self.first_dirty}

    def _hw(self, tp: TopicPartition) -> int | None:
        return self._high_watermark(tp) if self._high_watermark is not None else None
