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

METADATA_LOG_CONFIG = LogConfig(segment_bytes=8 * 1024 * 1024, segment_index_bytes=1024 * 1024)


class DiskLog:
    """A ReplicatedLog backed by a segmented Kafka log."""

    def __init__(self, log: Log) -> None:
        self._log = log

    @classmethod
    async def open(cls, runtime: Runtime, directory: str) -> DiskLog:
        """Open (recovering after a crash) the log in ``directory``."""
        return cls(await Log.open(runtime, directory, METADATA_LOG_CONFIG))

    @property
    def storage(self) -> Log:
        return self._log

    def start_offset(self) -> int:
        return self._log.log_start_offset

    def end_offset(self) -> int:
        return self._log.log_end_offset

    def last_fetched_epoch(self) -> int:
        epoch = self._log.latest_epoch
        return 0 if epoch is None else epoch

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
