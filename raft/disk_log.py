"""The metadata log on disk: the Raft ReplicatedLog over the storage engine's Log.

``__cluster_metadata-0`` is an ordinary partition directory (segments, indexes, leader-epoch
checkpoint), so ``kraft-server dump-log`` and Kafka's own tools can read it. Its segments are
smaller than a data partition's (Kafka's metadata.log.segment.bytes floor is 8 MiB) because
the log is small and snapshots will let old segments go.
"""

from __future__ import annotations

from collections.abc import Sequence

from log.batch import encode_batch
from log.config import LogConfig
from log.log import Log, OffsetOutOfRangeError
from log.records import Record
from log.runtime import Runtime
from raft import snapshot as snapshots
from raft.snapshot import SnapshotId
from raft.voters import QuorumControl

METADATA_LOG_CONFIG = LogConfig(segment_bytes=8 * 1024 * 1024, segment_index_bytes=1024 * 1024)
# Planted bugs of the log's own (off unless a simulation asks for them).
LOG_BUGS = {
    "snapshot-keeps-log-start": "a node loading its snapshot at start-up keeps the log below "
    "it: its log start offset is not moved to the snapshot's end",
}


class DiskLog:
    """A ReplicatedLog backed by a segmented Kafka log, plus the snapshots beside it."""

    def __init__(self, log: Log, snapshot: SnapshotId | None) -> None:
        self._log = log
        self._fs = log.fs
        self._dir = log.dir_path
        self._snapshot = snapshot

    @classmethod
    async def open(
        cls, runtime: Runtime, directory: str, *, bugs: frozenset[str] = frozenset()
    ) -> DiskLog:
        """Open (recovering after a crash) the log in ``directory``; the log starts no
        earlier than the latest snapshot, which holds everything before it."""
        found = snapshots.list_snapshots(runtime.fs, directory)
        latest = found[-1] if found else None
        start = latest.end_offset if latest is not None else 0
        log = await Log.open(runtime, directory, METADATA_LOG_CONFIG)
        if log.log_end_offset < start:
            # A downloaded snapshot was published but the crash came before the log was
            # restarted at its end: finish that step now.
            await log.truncate_fully_and_start_at(start)
        elif log.log_start_offset < start and "snapshot-keeps-log-start" not in bugs:
            await log.delete_records(start)
        return cls(log, latest)

    @property
    def storage(self) -> Log:
        return self._log

    def start_offset(self) -> int:
        return self._log.log_start_offset

    def end_offset(self) -> int:
        return self._log.log_end_offset

    def last_fetched_epoch(self) -> int:
        if self._snapshot is not None and self.end_offset() == self._snapshot.end_offset:
            return self._snapshot.epoch
        epoch = self._log.latest_epoch
        return 0 if epoch is None else epoch

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the record at ``offset`` (from the snapshot if it is below the log)."""
        if self._snapshot is not None and offset == self._snapshot.end_offset - 1:
            return self._snapshot.epoch
        epoch = self._log.leader_epoch_cache.epoch_for_offset(offset)
        return 0 if epoch is None else epoch

    # ---- snapshots ---------------------------------------------------------------------
    def latest_snapshot(self) -> SnapshotId | None:
        return self._snapshot

    def snapshot_size(self, snapshot: SnapshotId) -> int:
        return snapshots.snapshot_size(self._fs, self._dir, snapshot)

    def read_snapshot_chunk(self, snapshot: SnapshotId, position: int, max_bytes: int) -> bytes:
        return snapshots.read_chunk(self._fs, self._dir, snapshot, position, max_bytes)

    def write_snapshot_chunk(self, snapshot: SnapshotId, position: int, data: bytes) -> None:
        snapshots.write_chunk(self._fs, self._dir, snapshot, position, data)

    def load_snapshot(self, snapshot: SnapshotId) -> list[Record]:
        return snapshots.read_snapshot(self._fs, self._dir, snapshot)

    def load_snapshot_control(self, snapshot: SnapshotId) -> QuorumControl:
        return snapshots.read_snapshot_control(self._fs, self._dir, snapshot)

    async def save_snapshot(self, snapshot: SnapshotId, data: bytes) -> None:
        """Publish a snapshot this node made, then let the log before it go."""
        await snapshots.write_snapshot(self._fs, self._dir, snapshot, data)
        self._publish(snapshot)
        await self._log.delete_records(snapshot.end_offset)

    async def install_snapshot(self, snapshot: SnapshotId) -> list[Record]:
        """Publish a downloaded snapshot and restart the log at its end; its records."""
        records = await snapshots.finish_download(self._fs, self._dir, snapshot)
        self._publish(snapshot)
        await self._log.truncate_fully_and_start_at(snapshot.end_offset)
        return records

    def _publish(self, snapshot: SnapshotId) -> None:
        self._snapshot = snapshot
        snapshots.delete_older(self._fs, self._dir, snapshot)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._log.end_offset_for_epoch(epoch)

    def append_as_leader(
        self, records: Sequence[Record], epoch: int, *, control: bool = False
    ) -> tuple[int, int]:
        data = bytearray(encode_batch(records, partition_leader_epoch=epoch, is_control=control))
        info = self._log.append_as_leader(data, epoch)
        return info.first_offset, info.last_offset

    def append_as_follower(self, data: bytes) -> int:
        self._log.append_as_follower(data)
        return self._log.log_end_offset

    def read(self, offset: int, max_bytes: int) -> bytes:
        try:
            return bytes(self._log.read(offset, max_bytes).records)
        except OffsetOutOfRangeError:
            return b""

    async def truncate_to(self, offset: int) -> None:
        await self._log.truncate_to(offset)

    async def flush(self) -> int:
        end = self._log.log_end_offset
        await self._log.flush(end)
        return end

    async def close(self) -> None:
        await self._log.close()
