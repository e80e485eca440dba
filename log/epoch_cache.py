"""LeaderEpochFileCache: which leader epoch wrote which offsets, as Kafka keeps it.

Each entry is (epoch, startOffset): the first offset a leader of that epoch appended. Epochs
and start offsets both strictly increase. Followers ask the leader OffsetForLeaderEpoch
(end_offset_for) to find where their logs diverge, and truncate there.

Durability: mutations change memory at once and are written to ``leader-epoch-checkpoint``
by ``flush()``. The Log calls flush before it advances its recovery point past the data the
entries describe and on every truncation, so a crash can only lose entries for unflushed
data, and recovery re-assigns those from the batches it rescans (Kafka's recoverSegment
does the same). That keeps an fsync off the append path, as Kafka 3.7+ does.
"""

from __future__ import annotations

import asyncio
import bisect
import logging

from log.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from log.fs import FileSystem

logger = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochFileCache:
    """Epoch -> start offset, backed by a leader-epoch-checkpoint file."""

    __slots__ = ("_checkpoint", "_dirty", "_entries", "_lock")

    def __init__(self, fs: FileSystem, path: str) -> None:
        """Load the cache from ``path`` (empty if missing; CheckpointError if garbled)."""
        self._checkpoint = LeaderEpochCheckpointFile(fs, path)
        self._entries: list[EpochEntry] = self._checkpoint.read()
        self._dirty = False
        self._lock = asyncio.Lock()
        self._check_invariants()

    @property
    def path(self) -> str:
        return self._checkpoint.path

    @property
    def dirty(self) -> bool:
        """True while memory holds changes the checkpoint file does not."""
        return self._dirty

    def entries(self) -> list[EpochEntry]:
        """A copy of all entries, oldest first."""
        return list(self._entries)

    def is_empty(self) -> bool:
        return not self._entries

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The epoch of the newest entry, None when the cache is empty."""
        return self._entries[-1].epoch if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        As Kafka's assign: a negative epoch is ignored; the same epoch at a later offset is
        ignored (only the first offset of an epoch matters); otherwise every entry whose
        epoch is >= ``epoch`` or whose start offset is >= ``start_offset`` is removed first,
        so the cache stays monotone even when a stale epoch is replayed after a truncation.
        """
        if epoch < 0 or start_offset < 0:
            if epoch >= 0:
                raise ValueError(f"negative start offset {start_offset} for epoch {epoch}")
            return False
        entries = self._entries
        if entries:
            latest = entries[-1]
            if latest.epoch == epoch and start_offset >= latest.start_offset:
                return False
            if epoch < latest.epoch:
                logger.warning(
                    "%s: epoch %d at offset %d is below the latest %s; truncating the cache",
                    self.path,
                    epoch,
                    start_offset,
                    latest,
                )
        keep = len(entries)
        while keep > 0 and (
            entries[keep - 1].epoch >= epoch or entries[keep - 1].start_offset >= start_offset
        ):
            keep -= 1
        del entries[keep:]
        entries.append(EpochEntry(epoch, start_offset))
        self._dirty = True
        self._check_invariants()
        return True

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch that wrote ``offset`` (the entry with the largest start <= offset)."""
        index = bisect.bisect_right(self._entries, offset, key=lambda e: e.start_offset) - 1
        return self._entries[index].epoch if index >= 0 else None

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetForLeaderEpoch answer: (epoch, end offset).

        - UNDEFINED requested epoch, an empty cache, or an epoch above the latest one:
          (-1, -1);
        - the latest epoch: (latest, log_end_offset);
        - otherwise the largest known epoch <= requested, ended by the start offset of the
          next known epoch; when requested is below every known epoch, Kafka answers
          (requested, start offset of the first epoch), because that data is already gone.
        """
        entries = self._entries
        if requested_epoch == UNDEFINED_EPOCH or not entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        higher = bisect.bisect_right(entries, requested_epoch, key=lambda e: e.epoch)
        if higher == len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, entries[0].start_offset
        return entries[higher - 1].epoch, entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was cut there)."""
        entries = self._entries
        if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
            return
        keep = bisect.bisect_left(entries, end_offset, key=lambda e: e.start_offset)
        del entries[keep:]
        self._dirty = True
        self._check_invariants()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset``; the epoch covering it now starts there."""
        entries = self._entries
        removed = bisect.bisect_right(entries, start_offset, key=lambda e: e.start_offset)
        if removed == 0:
            return
        covering = entries[removed - 1]
        del entries[:removed]
        entries.insert(0, EpochEntry(covering.epoch, start_offset))
        self._dirty = True
        self._check_invariants()

    def clear(self) -> None:
        """Forget every entry (truncate_fully_and_start_at)."""
        if self._entries:
            self._entries.clear()
            self._dirty = True

    def moved_to(self, path: str) -> None:
        """Its log's dir was renamed: the checkpoint is now at ``path``."""
        self._checkpoint.path = path

    def replace_entries(self, entries: list[EpochEntry]) -> None:
        """Hold exactly ``entries`` (a copy of another replica's cache of the same log)."""
        self._entries = list(entries)
        self._dirty = True
        self._check_invariants()

    async def flush(self) -> None:
        """Write the checkpoint if memory changed; OSError if the disk fails (stays dirty)."""
        async with self._lock:
            if not self._dirty:
                return
            snapshot = list(self._entries)
            self._dirty = False
            try:
                await self._checkpoint.write(snapshot)
            except BaseException:
                self._dirty = True
                raise

    def _check_invariants(self) -> None:
        entries = self._entries
        for index in range(1, len(entries)):
            previous, entry = entries[index - 1], entries[index]
            assert entry.epoch > previous.epoch, (previous, entry)
            assert entry.start_offset > previous.start_offset, (previous, entry)
