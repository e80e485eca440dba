"""What the Raft core needs from a log, and an in-memory log for tests.

The log holds Kafka v2 batches; each batch's partitionLeaderEpoch is the epoch it was written
in. The core only ever appends, reads and truncates whole batches, so truncation points
(epoch boundaries, divergence points) always fall on batch boundaries. Durability is not the
core's business: the driver calls ``flush`` and tells the core how far the log is synced.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from log.batch import encode_batch, iter_batches, validate_batch
from log.records import Record
from raft.snapshot import SnapshotId
from raft.voters import QuorumControl


class LogAppendError(Exception):
    """An append that would break the log (gap, overlap, epoch going backwards)."""


class ReplicatedLog(Protocol):
    """A single-partition log as KRaft's ReplicatedLog sees it."""

    def start_offset(self) -> int:
        """First offset still in the log (after snapshot-driven deletion)."""

    def end_offset(self) -> int:
        """The log end offset: the offset the next record gets."""

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch (0 for an empty log)."""

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= ``epoch``, the offset where it ends); (-1, -1) if none."""

    def append_as_leader(
        self, records: Sequence[Record], epoch: int, *, control: bool = False
    ) -> tuple[int, int]:
        """Append one batch stamped with ``epoch``; returns its (first, last) offsets."""

    def append_as_follower(self, data: bytes) -> int:
        """Append batches fetched from the leader, offsets as given; returns the new end."""

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from ``offset``; at least one batch if any, else up to max_bytes."""

    async def truncate_to(self, offset: int) -> None:
        """Drop everything at and after ``offset`` (a batch boundary), durably."""

    async def flush(self) -> int:
        """Make the whole log durable; returns the end offset it covered."""

    def latest_snapshot(self) -> SnapshotId | None:
        """The newest complete snapshot (it holds everything below the log start)."""

    def snapshot_size(self, snapshot: SnapshotId) -> int:
        """Bytes in a snapshot file (OSError if it is gone)."""

    def read_snapshot_chunk(self, snapshot: SnapshotId, position: int, max_bytes: int) -> bytes:
        """Raw bytes of a snapshot file, for FetchSnapshot."""


class DurableLog(ReplicatedLog, Protocol):
    """What the driver needs beyond the core's view: making, loading and installing
    snapshots, and the epoch of an offset (a snapshot's id carries it)."""

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the record at ``offset``."""

    def write_snapshot_chunk(self, snapshot: SnapshotId, position: int, data: bytes) -> None:
        """Store a downloaded chunk of a snapshot that is not complete yet."""

    async def install_snapshot(self, snapshot: SnapshotId) -> list[Record]:
        """Publish a downloaded snapshot, restart the log at its end; its records."""

    async def save_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Publish a snapshot made here and delete the log before it."""

    def load_snapshot(self, snapshot: SnapshotId) -> list[Record]:
        """A complete snapshot's records."""

    def load_snapshot_control(self, snapshot: SnapshotId) -> QuorumControl:
        """The kraft.version and voter set a complete snapshot holds (KIP-853)."""


class MemoryLog:
    """A ReplicatedLog in memory (the core's tests; nothing survives a crash)."""

    def __init__(self) -> None:
        # (base offset, next offset, epoch, bytes)
        self._batches: list[tuple[int, int, int, bytes]] = []
        self._epochs: list[tuple[int, int]] = []

    def start_offset(self) -> int:
        return 0

    def end_offset(self) -> int:
        return self._batches[-1][1] if self._batches else 0

    def last_fetched_epoch(self) -> int:
        return self._batches[-1][2] if self._batches else 0

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        found = (-1, -1)
        for i, (cached_epoch, _start) in enumerate(self._epochs):
            if cached_epoch > epoch:
                break
            following = self._epochs[i + 1][1] if i + 1 < len(self._epochs) else None
            found = (cached_epoch, following if following is not None else self.end_offset())
        return found

    def _assign_epoch(self, epoch: int, start: int) -> None:
        if self._epochs and epoch < self._epochs[-1][0]:
            raise LogAppendError(f"epoch {epoch} after {self._epochs[-1][0]}")
        if not self._epochs or epoch > self._epochs[-1][0]:
            self._epochs.append((epoch, start))

    def append_as_leader(
        self, records: Sequence[Record], epoch: int, *, control: bool = False
    ) -> tuple[int, int]:
        base = self.end_offset()
        data = encode_batch(
            records, base_offset=base, partition_leader_epoch=epoch, is_control=control
        )
        self._assign_epoch(epoch, base)
        self._batches.append((base, base + len(records), epoch, data))
        return base, base + len(records) - 1

    def append_as_follower(self, data: bytes) -> int:
        for position, header in iter_batches(data):
            validate_batch(data, position)
            if header.base_offset != self.end_offset():
                raise LogAppendError(
                    f"batch at {header.base_offset} does not follow end {self.end_offset()}"
                )
            self._assign_epoch(header.partition_leader_epoch, header.base_offset)
            raw = bytes(data[position : position + header.size])
            self._batches.append(
                (header.base_offset, header.next_offset, header.partition_leader_epoch, raw)
            )
        return self.end_offset()

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for base, _next, _epoch, data in self._batches:
            if base < offset:
                continue
            if out and len(out) + len(data) > max_bytes:
                break
            out += data
        return bytes(out)

    async def truncate_to(self, offset: int) -> None:
        self.truncate_now(offset)

    def truncate_now(self, offset: int) -> None:
        """The synchronous truncation (tests drive the core without an event loop)."""
        while self._batches and self._batches[-1][0] >= offset:
            self._batches.pop()
        assert self.end_offset() <= offset, "truncation inside a batch"
        while self._epochs and self._epochs[-1][1] >= offset:
            self._epochs.pop()

    async def flush(self) -> int:
        return self.end_offset()

    def latest_snapshot(self) -> SnapshotId | None:
        return None

    def snapshot_size(self, snapshot: SnapshotId) -> int:
        raise FileNotFoundError(snapshot.file_name)

    def read_snapshot_chunk(self, snapshot: SnapshotId, position: int, max_bytes: int) -> bytes:
        raise FileNotFoundError(snapshot.file_name)
