"""LogLoader: turn a partition directory into LogSegments, recovering after a crash.

Steps (Kafka's LogLoader, simplified to what this broker writes):
0. Complete an interrupted cleaner swap (log/cleaner.py): a ``<base>.log.swap`` is a whole,
   fsynced cleaned segment (it is only renamed from ``.cleaned`` after its fsync), so the
   originals it replaces, every segment with a base in [base, its next offset), are
   removed with their indexes and it takes the ``.log`` name (Kafka's LogLoader does the
   same). Its indexes are rebuilt when it is opened.
1. Remove leftovers of interrupted operations: ``.deleted`` (segment deletion that had
   renamed but not removed), ``.cleaned`` (a cleaning that had not reached its swap) and
   ``.tmp`` (an interrupted write_atomic), plus index files whose ``.log`` is gone.
2. Open every ``.log`` in base-offset order; a missing or implausible index is rebuilt.
3. After an unclean shutdown, recover every segment from the one holding the recovery point:
   validate each batch (CRC-32C, header, increasing offsets), cut the file at the first
   invalid or torn batch, rebuild its indexes, and re-assign leader epochs the batches carry.
   Once a segment had to be cut, or its last offset does not meet the next segment's base
   (the later file survived the crash but this one's tail did not), every later segment is
   deleted: the log must stay a prefix of what was appended. Only unflushed data can be
   lost this way, since everything below the recovery point was fsynced before the point
   moved, and segments always roll at the log end offset.
4. Make the recovery durable (fsync of the recovered files and the directory), so the new
   recovery point is the log end offset.
"""

from __future__ import annotations

import bisect
import logging
import os
from dataclasses import dataclass

from log.batch import BATCH_HEADER_SIZE, LOG_OVERHEAD, BatchHeader
from log.config import LogConfig
from log.epoch_cache import LeaderEpochFileCache
from log.fs import FileSystem
from log.runtime import Runtime
from log.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SEGMENT_SUFFIXES,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_base_offset,
    segment_path,
)
from log.txn_index import TXN_INDEX_SUFFIX

logger = logging.getLogger(__name__)

LEFTOVER_SUFFIXES = (DELETED_SUFFIX, ".cleaned", SWAP_SUFFIX, ".tmp")


@dataclass(slots=True)
class LoadedSegments:
    """What a partition directory holds once loaded and, if needed, recovered."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    recovered_segments: int
    truncated_bytes: int


async def load_segments(
    runtime: Runtime,
    dir_path: str,
    config: LogConfig,
    epoch_cache: LeaderEpochFileCache,
    *,
    recovery_point: int,
    log_start_offset: int,
    had_clean_shutdown: bool,
) -> LoadedSegments:
    """Open (and after an unclean shutdown, recover) the segments of ``dir_path``."""
    fs = runtime.fs
    await _complete_swaps(fs, dir_path)
    names = fs.list_dir(dir_path)
    log_bases: list[int] = []
    for name in names:  # names are sorted, so removal order is deterministic
        base = parse_base_offset(name)
        if name.endswith(LEFTOVER_SUFFIXES):
            logger.info("%s: removing leftover %s", dir_path, name)
            fs.remove(os.path.join(dir_path, name))
        elif base is not None and name.endswith(LOG_SUFFIX):
            log_bases.append(base)
    for name in names:
        base = parse_base_offset(name)
        index_file = base is not None and name.endswith(
            (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
        )
        if index_file and base not in log_bases:
            logger.info("%s: removing orphaned index %s", dir_path, name)
            fs.remove(os.path.join(dir_path, name))
    log_bases.sort()
    segments = [_open_segment(runtime, dir_path, config, base, create=False) for base in log_bases]
    recovered = truncated = 0
    if segments and not had_clean_shutdown:
        recovered, truncated = await _recover(
            runtime, dir_path, segments, epoch_cache, recovery_point
        )
    start = max(log_start_offset, segments[0].base_offset if segments else log_start_offset)
    if segments and start > segments[-1].next_offset:
        # Data the checkpointed log start offset covers is gone (lost unflushed tail): the
        # log restarts empty at the start offset, as after truncate_fully_and_start_at.
        logger.warning("%s: log start offset %d is past the log end; emptying", dir_path, start)
        for segment in segments:
            segment.delete_files()
        segments = []
        epoch_cache.clear()
    if not segments:
        segments = [_open_segment(runtime, dir_path, config, start, create=True)]
        await fs.fsync_dir(dir_path)
    log_end = segments[-1].next_offset
    # After a recovery everything up to the log end was made durable by _recover.
    point = min(recovery_point, log_end) if had_clean_shutdown else log_end
    return LoadedSegments(segments, start, point, recovered, truncated)


async def _complete_swaps(fs: FileSystem, dir_path: str) -> None:
    swap_suffix = LOG_SUFFIX + SWAP_SUFFIX
    swaps = [n for n in fs.list_dir(dir_path) if n.endswith(swap_suffix)]
    for name in swaps:  # sorted by base offset
        base = parse_base_offset(name)
        if base is None:
            continue
        swap = os.path.join(dir_path, name)
        end = _next_offset(fs, swap, base)
        if end == base:
            continue  # holds no batch, so not a cleaned segment: removed as a leftover
        for other in fs.list_dir(dir_path):
            other_base = parse_base_offset(other)
            if (
                other_base is not None
                and base <= other_base < end
                and other.endswith(SEGMENT_SUFFIXES)
            ):
                fs.remove(os.path.join(dir_path, other))
        fs.rename(swap, segment_path(dir_path, base, LOG_SUFFIX))
        logger.info("%s: completed the swap of cleaned segment %d..%d", dir_path, base, end)
    if swaps:
        await fs.fsync_dir(dir_path)


def _next_offset(fs: FileSystem, path: str, base: int) -> int:
    """One past the last offset in a segment file, from its batch headers (a ``.swap`` is
    fsynced whole, so there is no torn tail to expect)."""
    handle = fs.open(path, create=False)
    try:
        size = handle.size()
        position, next_offset = 0, base
        while position + BATCH_HEADER_SIZE <= size:  # bounded: each batch >= 61 bytes
            raw = handle.pread(position, 27)
            batch_base = int.from_bytes(raw[0:8], "big", signed=True)
            length = int.from_bytes(raw[8:12], "big", signed=True)
            delta = int.from_bytes(raw[23:27], "big", signed=True)
            if length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
                break
            next_offset = batch_base + delta + 1
            position += length + LOG_OVERHEAD
        return next_offset
    finally:
        handle.close()


def _open_segment(
    runtime: Runtime, dir_path: str, config: LogConfig, base: int, *, create: bool
) -> LogSegment:
    jitter = 0
    if config.segment_jitter_ms > 0:
        jitter = runtime.rng.randrange(min(config.segment_jitter_ms, config.segment_ms))
    return LogSegment(
        runtime.fs,
        dir_path,
        base,
        index_interval_bytes=config.index_interval_bytes,
        max_index_size=config.segment_index_bytes,
        roll_jitter_ms=jitter,
        created_ms=runtime.clock.now_ms(),
        create=create,
    )


async def _recover(
    runtime: Runtime,
    dir_path: str,
    segments: list[LogSegment],
    epoch_cache: LeaderEpochFileCache,
    recovery_point: int,
) -> tuple[int, int]:
    """Recover segments[from the recovery point's segment:] in place; (count, bytes cut)."""

    def on_batch(header: BatchHeader) -> None:
        # Kafka's recover only assigns newer epochs: older ones are already in the cache.
        epoch = header.partition_leader_epoch
        latest = epoch_cache.latest_epoch
        if epoch >= 0 and (latest is None or epoch > latest):
            epoch_cache.assign(epoch, header.base_offset)

    bases = [s.base_offset for s in segments]
    first = max(0, bisect.bisect_right(bases, recovery_point) - 1)
    recovered: list[LogSegment] = []
    truncated_total = 0
    index = first
    while index < len(segments):  # bounded: index grows or the list is cut
        segment = segments[index]
        truncated = segment.recover(on_batch)
        truncated_total += truncated
        recovered.append(segment)
        following = segments[index + 1] if index + 1 < len(segments) else None
        if following is not None and (truncated or segment.next_offset != following.base_offset):
            logger.warning(
                "%s: segment %d ends at %d, next starts at %d; deleting %d later segments",
                dir_path,
                segment.base_offset,
                segment.next_offset,
                following.base_offset,
                len(segments) - index - 1,
            )
            for doomed in segments[index + 1 :]:
                doomed.delete_files()
            del segments[index + 1 :]
        index += 1
    for segment in recovered:
        await segment.flush(include_indexes=True)
    await runtime.fs.fsync_dir(dir_path)
    logger.info(
        "%s: recovered %d segments from offset %d, cut %d bytes",
        dir_path,
        len(recovered),
        recovery_point,
        truncated_total,
    )
    return len(recovered), truncated_total
