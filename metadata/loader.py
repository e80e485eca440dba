"""MetadataLoader: turns committed ``__cluster_metadata`` batches into published images.

It listens to the RaftNode (a voter's or an observer's) and replays each committed data batch
through one MetadataDelta, so a batch is applied whole or not at all: the controller writes
the records of one operation (a topic and its partitions) in one batch, and no reader may see
half of it. A record that does not decode, or is illegal in the current image, is fatal: the
node would otherwise serve an image its peers do not have.

It also decides when to snapshot (``metadata.log.max.record.bytes.between.snapshots`` and
``metadata.log.max.snapshot.interval.ms``), handing the image's records to the snapshotter
(RaftNode.snapshot), one snapshot at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

from log.records import Record
from metadata.delta import MetadataDelta, MetadataStateError
from metadata.image import EMPTY, MetadataImage
from metadata.records import MetadataRecord, MetadataRecordError, decode_record
from metadata.snapshot import image_log_records
from raft.core import Event
from raft.driver import CommittedBatch
from raft.snapshot import SnapshotId

Snapshotter = Callable[[int, Sequence[Record]], Coroutine[Any, Any, object]]


class MetadataPublisher(Protocol):
    """Something that acts on new images (the metadata cache, the replica manager)."""

    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        """``after`` replaced ``before``; ``from_snapshot`` when a snapshot was loaded (the
        two images may then be far apart)."""


class MetadataLoader:
    """A RaftListener that keeps the current MetadataImage and publishes every new one."""

    def __init__(
        self,
        snapshotter: Snapshotter | None = None,
        max_bytes_between_snapshots: int = 20 * 1024 * 1024,
        max_interval_ms: int = 3_600_000,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        """``max_interval_ms`` of 0 turns time-based snapshots off, as in Kafka."""
        if snapshotter is not None and now_ms is None:
            raise ValueError("a snapshotter needs a clock (now_ms)")
        self._image = EMPTY
        self._publishers: list[MetadataPublisher] = []
        self._snapshotter = snapshotter
        self._max_bytes = max_bytes_between_snapshots
        self._max_interval_ms = max_interval_ms
        self._now_ms = now_ms
        self._bytes_since_snapshot = 0
        self._batches_since_snapshot = 0
        self._last_snapshot_ms: int | None = None
        self._snapshot_task: asyncio.Task[object] | None = None

    @property
    def image(self) -> MetadataImage:
        return self._image

    def add_publisher(self, publisher: MetadataPublisher) -> None:
        self._publishers.append(publisher)

    # ---- RaftListener ------------------------------------------------------------------------
    def handle_commit(self, batch: CommittedBatch) -> None:
        """Apply one committed batch: control batches move the offset only."""
        before = self._image
        if batch.base_offset != before.offset:
            raise MetadataStateError(
                f"offset {batch.base_offset}: batch does not follow the image at {before.offset}"
            )
        end_offset = batch.base_offset + len(batch.records)
        if batch.is_control:
            after = dataclasses.replace(before, offset=end_offset, epoch=batch.epoch)
        else:
            delta = MetadataDelta(before)
            for index, log_record in enumerate(batch.records):
                offset = batch.base_offset + index
                value = log_record.value or b""
                _replay_at(delta, decode_record(value, offset), offset)
                self._bytes_since_snapshot += len(value)
            after = delta.apply(end_offset, batch.epoch)
            self._batches_since_snapshot += 1
        self._publish(before, after, from_snapshot=False)
        self._maybe_snapshot()

    def handle_event(self, event: Event) -> None:
        """Nothing to do: the loader follows committed batches only, never the raw log."""

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        """Replace the image with the snapshot's (loaded at start, or sent by the leader)."""
        delta = MetadataDelta(EMPTY)
        try:
            for index, log_record in enumerate(records):  # offsets in errors: record positions
                _replay_at(delta, decode_record(log_record.value or b"", index), index)
        except (MetadataRecordError, MetadataStateError) as error:
            raise type(error)(f"snapshot {snapshot.file_name}: {error}") from None
        after = delta.apply(snapshot.end_offset, snapshot.epoch)
        self._bytes_since_snapshot = 0
        self._batches_since_snapshot = 0
        self._publish(self._image, after, from_snapshot=True)

    # ---- internals ---------------------------------------------------------------------------
    def _publish(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        self._image = after
        for publisher in self._publishers:
            publisher.on_image(before, after, from_snapshot)

    def _maybe_snapshot(self) -> None:
        if self._snapshotter is None or self._batches_since_snapshot == 0:
            return
        assert self._now_ms is not None
        now_ms = self._now_ms()
        if self._last_snapshot_ms is None:
            self._last_snapshot_ms = now_ms  # the interval counts from the first batch
        task = self._snapshot_task
        if task is not None:
            if not task.done():
                return  # one at a time: the next check comes with the next batch
            task.result()  # a snapshot that failed (disk error) is fatal, like any write
            self._snapshot_task = None
        interval_due = 0 < self._max_interval_ms <= now_ms - self._last_snapshot_ms
        if self._bytes_since_snapshot < self._max_bytes and not interval_due:
            return
        image = self._image
        self._snapshot_task = asyncio.get_running_loop().create_task(
            self._snapshotter(image.offset, image_log_records(image, now_ms))
        )
        self._bytes_since_snapshot = 0
        self._batches_since_snapshot = 0
        self._last_snapshot_ms = now_ms

    async def close(self) -> None:
        """Stop a snapshot in progress (its file is written aside and renamed only when
        complete, so stopping it loses nothing); re-raises a snapshot that failed."""
        task, self._snapshot_task = self._snapshot_task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _replay_at(delta: MetadataDelta, record: MetadataRecord, offset: int) -> None:
    try:
        delta.replay(record)
    except MetadataStateError as error:
        raise MetadataStateError(f"offset {offset}: {error}") from None
