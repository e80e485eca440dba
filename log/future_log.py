"""A future replica: a copy of a partition's log being made in another log dir of the same
broker while the current log keeps serving (KIP-113: Kafka's future log, filled by its
ReplicaAlterLogDirsThread).

The copy is logical, as Kafka's is: whole batches are read from the current log and
appended to the future one with the offsets and leader epochs they have (the follower's
append), in slices of ``COPY_SLICE_BYTES``, so the future log builds its own segments and
indexes, its leader-epoch cache follows the batches, and the aborted transactions whose
markers a slice copies are indexed there too. What the Log does not make itself (the
``partition.metadata`` file, producer snapshots) is copied file by file. Every byte goes
through the filesystem seam, so the simulator's disk sees the copy like any other write.

What happens to the current log meanwhile is followed, never raced: appends are simply
copied by later slices; a truncation (the ``truncations`` counter moved) or a log start
beyond what was copied (retention, DeleteRecords) starts the copy again from the current
log start, as Kafka's thread truncates its future log then.

The end (``finish``) is synchronous, so no append can interleave: it copies what is still
missing, gives the future log the current one's epoch cache and log start, and reports
whether the two now hold the same log. The caller renames and swaps in the same step.

The future dir is ``<topic>-<partition>.<uniqueId>-future``. A crash at any moment of the
copy leaves the current log as it was; at start-up the LogManager loads the copy again (as
Kafka does) and keeps it only if it is still a prefix of the current log by their leader
epochs (``follows_source``): a truncation of the current log before the crash leaves no
other trace, and the same epoch at the same offset means the same batches.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from log.checkpoint import LEADER_EPOCH_CHECKPOINT
from log.cleaner import CLEANED_SUFFIX
from log.fs import read_all, write_atomic
from log.log import Log
from log.segment import DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX
from log.txn_index import TXN_INDEX_SUFFIX

FUTURE_DIR_SUFFIX = "-future"  # Kafka's LogManager.FutureDirSuffix
# Bytes of batches one slice copies before the copier yields to the event loop (Kafka's
# replica.fetch.max.bytes default, what its thread asks its own log for in one fetch): a
# slice costs a read and an append of at most this much, about a millisecond of page cache.
COPY_SLICE_BYTES = 1 << 20
# Slices ``finish`` may copy on the spot; a current log further ahead than that (a produce
# burst during the last flush) is left to more asynchronous slices and finish is tried
# again, so a swap never holds the loop for more than a few megabytes of copying.
FINISH_SLICES_MAX = 4
# Files of a partition dir that the Log makes, rebuilds or leaves behind itself: never
# copied. Every other regular file (partition.metadata, producer snapshots) is.
_LOG_OWNED = (
    LOG_SUFFIX,
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    CLEANED_SUFFIX,
    ".tmp",
)


def future_dir_name(partition_dir: str, unique_id: str) -> str:
    """Kafka's future dir name for the partition dir ``<topic>-<partition>``."""
    return f"{partition_dir}.{unique_id}{FUTURE_DIR_SUFFIX}"


@dataclass(slots=True)
class FutureLog:
    """The copy of ``source`` being made in ``log_dir`` (``log`` lives in its future dir)."""

    source: Log
    log: Log
    log_dir: str
    # ``source.truncations`` when the copy (re)started: any change means the copied
    # prefix may no longer be the source's.
    source_truncations: int

    @property
    def caught_up(self) -> bool:
        """Whether the copy holds every offset the source does, as of now."""
        return (
            self.source_truncations == self.source.truncations
            and self.log.log_end_offset == self.source.log_end_offset
        )

    def follows_source(self) -> bool:
        """Whether the copy is still a prefix of the source, judged by leader epochs as a
        follower judges its log against its leader's (OffsetForLeaderEpoch): the source
        ends the copy's latest epoch at or after the copy's log end. An empty copy always
        is; one holding batches but no epoch cannot be judged and is not."""
        log, source = self.log, self.source
        if log.log_end_offset > source.log_end_offset:
            return False
        latest = log.latest_epoch
        if latest is None:
            return log.log_end_offset == log.log_start_offset
        epoch, end = source.end_offset_for_epoch(latest)
        return epoch == latest and end >= log.log_end_offset

    async def copy_slice(self, max_bytes: int = COPY_SLICE_BYTES) -> int:
        """Copy at most ``max_bytes`` of batches (one batch at least); the bytes copied.
        Restarts the copy from the source's log start when the source was truncated or
        its log start passed what was copied. OSError from either disk."""
        if self._diverged():
            await self._restart()
        return self._copy(max_bytes)

    def _diverged(self) -> bool:
        source, log = self.source, self.log
        return (
            self.source_truncations != source.truncations
            or log.log_end_offset > source.log_end_offset
            or log.log_end_offset < source.log_start_offset
        )

    async def _restart(self) -> None:
        self.source_truncations = self.source.truncations
        await self.log.truncate_fully_and_start_at(self.source.log_start_offset)

    def _copy(self, max_bytes: int) -> int:
        """One slice, synchronously: the batches of one source segment from the copy's log
        end, then the aborted transactions whose markers they hold."""
        source, log = self.source, self.log
        start = log.log_end_offset
        if start >= source.log_end_offset:
            return 0
        data = bytes(source.read(start, max_bytes).records)
        if not data:
            # Nothing readable below the source's end: an empty gap the log cleaner left at
            # the very end of a segment. Not copyable batch by batch; the caller gives up.
            raise ValueError(f"{source.name}: no batch between {start} and the log end")
        log.append_as_follower(data)
        end = log.log_end_offset
        for entry in source.collect_aborted_txns(start, end):
            if start <= entry.last_offset < end:
                log.append_aborted_txn(entry)
        return len(data)

    async def copy_files(self) -> None:
        """Copy the regular files of the source dir the Log does not make itself
        (``partition.metadata``, producer snapshots), each written atomically; a file
        the source removes meanwhile is skipped."""
        fs = self.source.fs
        source_dir = self.source.dir_path
        for name in fs.list_dir(source_dir):  # bounded by the partition dir's files
            if name == LEADER_EPOCH_CHECKPOINT or name.endswith(_LOG_OWNED):
                continue
            path = os.path.join(source_dir, name)
            if fs.is_dir(path):
                continue
            try:
                data = read_all(fs, path)
            except FileNotFoundError:
                continue
            await write_atomic(fs, os.path.join(self.log.dir_path, name), data)

    def finish(self) -> bool:
        """Synchronously (nothing appends meanwhile): copy what the source holds beyond
        the copy (at most FINISH_SLICES_MAX slices), then give the copy the source's epoch
        cache and log start. True when the copy is now the same log as the source; False
        (nothing changed beyond copied batches) when it diverged or is too far behind."""
        if self._diverged():
            return False
        for _ in range(FINISH_SLICES_MAX):  # bounded: see FINISH_SLICES_MAX
            if self.log.log_end_offset == self.source.log_end_offset:
                break
            self._copy(COPY_SLICE_BYTES)
        if not self.caught_up:
            return False
        source, log = self.source, self.log
        # An epoch the source began as leader at its log end and has not appended in yet
        # has no batch to carry it: the cache itself is copied.
        log.leader_epoch_cache.replace_entries(source.leader_epoch_cache.entries())
        log.advance_log_start_offset(source.log_start_offset)
        assert log.log_end_offset == source.log_end_offset, (log, source)
        assert log.log_start_offset == source.log_start_offset, (log, source)
        return True
