"""MetadataLoader: committed batches become published images, whole batches at a time; a
record that cannot be applied is fatal; snapshots are taken on the byte and time limits and a
node restarted from one serves the image a node replaying the whole log serves."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from log.records import Record
from log.runtime import real_runtime
from metadata.delta import MetadataStateError
from metadata.image import EMPTY, MetadataImage
from metadata.loader import MetadataLoader
from metadata.records import (
    Config,
    FeatureLevel,
    Listener,
    MetadataRecord,
    MetadataRecordError,
    NoOp,
    Partition,
    PartitionChange,
    ProducerIds,
    RegisterBroker,
    RemoveTopic,
    Topic,
    UnfenceBroker,
    decode_record,
    encode_record,
)
from metadata.snapshot import image_records
from raft.core import RaftConfig, Role, RoleChanged
from raft.disk_log import DiskLog
from raft.driver import CommittedBatch, RaftNode, RaftNodeConfig
from raft.snapshot import SnapshotId

T1 = uuid.UUID(int=1)


def register(broker_id: int, epoch: int) -> RegisterBroker:
    listeners = (Listener("PLAINTEXT", "localhost", 9092 + broker_id),)
    return RegisterBroker(broker_id, uuid.UUID(int=broker_id), epoch, listeners, (), None)


def data(base_offset: int, *records: MetadataRecord, epoch: int = 1) -> CommittedBatch:
    values = tuple(Record(None, encode_record(r), 0) for r in records)
    return CommittedBatch(base_offset, epoch, False, values)


def control(base_offset: int, epoch: int) -> CommittedBatch:
    return CommittedBatch(base_offset, epoch, True, (Record(b"\x00\x00\x00\x02", b"x", 0),))


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[MetadataImage, MetadataImage, bool]] = []

    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        self.calls.append((before, after, from_snapshot))


def test_data_batches_are_applied_whole_and_published() -> None:
    loader, recorder = MetadataLoader(), Recorder()
    loader.add_publisher(recorder)
    loader.handle_commit(data(0, register(1, 0), Topic("t", T1), epoch=2))
    loader.handle_commit(data(2, Partition(T1, 0, (1,), (1,), 1), epoch=2))
    image = loader.image
    assert (image.offset, image.epoch) == (3, 2)
    assert image.topics.get("t") is not None and 1 in image.cluster.brokers
    assert [(b.offset, a.offset, s) for b, a, s in recorder.calls] == [(0, 2, False), (2, 3, False)]
    assert recorder.calls[1][1] is image


def test_control_batches_only_move_the_offset_and_epoch() -> None:
    loader = MetadataLoader()
    loader.handle_commit(data(0, register(1, 0)))
    before = loader.image
    loader.handle_commit(control(1, 4))
    after = loader.image
    assert (after.offset, after.epoch) == (2, 4)
    assert after.cluster is before.cluster and after.topics is before.topics
    assert dataclasses.replace(after, offset=1, epoch=1) == before


def test_a_batch_that_does_not_follow_the_image_is_fatal() -> None:
    loader = MetadataLoader()
    loader.handle_commit(data(0, NoOp()))
    with pytest.raises(MetadataStateError, match=r"^offset 5: batch does not follow"):
        loader.handle_commit(data(5, NoOp()))


def test_an_undecodable_record_is_fatal_and_names_its_offset() -> None:
    loader = MetadataLoader()
    bad = CommittedBatch(
        10, 1, False, (Record(None, encode_record(NoOp()), 0), Record(None, b"\x93", 0))
    )
    loader.handle_load_snapshot(SnapshotId(10, 1), [])
    with pytest.raises(MetadataRecordError, match=r"^offset 11: "):
        loader.handle_commit(bad)
    assert loader.image.offset == 10


def test_an_illegal_record_is_fatal_and_no_part_of_its_batch_is_published() -> None:
    loader, recorder = MetadataLoader(), Recorder()
    loader.add_publisher(recorder)
    with pytest.raises(MetadataStateError, match=r"^offset 1: .*unknown topic"):
        loader.handle_commit(data(0, Topic("t", T1), RemoveTopic(uuid.UUID(int=9))))
    assert loader.image is EMPTY and recorder.calls == []


def test_a_loaded_snapshot_replaces_the_image_and_commits_resume_at_its_end() -> None:
    source = MetadataLoader()
    source.handle_commit(data(0, register(1, 0), Topic("t", T1), FeatureLevel("x", 2)))
    source.handle_commit(data(3, Partition(T1, 0, (1,), (1,), 1), Config(2, "t", "k", "v")))
    snapshot = [Record(None, encode_record(r), 0) for r in image_records(source.image)]

    loader, recorder = MetadataLoader(), Recorder()
    loader.handle_commit(data(0, register(7, 0)))  # state the snapshot replaces
    loader.add_publisher(recorder)
    loader.handle_load_snapshot(SnapshotId(5, 1), snapshot)
    assert loader.image == source.image
    assert recorder.calls[-1][2] is True and recorder.calls[-1][0].offset == 1
    loader.handle_commit(data(5, PartitionChange(T1, 0, bump_leader_epoch=True)))
    assert loader.image.topics.by_id[T1].partitions[0].leader_epoch == 1


def test_a_corrupt_snapshot_is_fatal_and_names_the_snapshot() -> None:
    records = [Record(None, encode_record(RemoveTopic(T1)), 0)]
    with pytest.raises(MetadataStateError, match=r"^snapshot 0+4-0+1\.checkpoint: offset 0: "):
        MetadataLoader().handle_load_snapshot(SnapshotId(4, 1), records)


class FakeSnapshotter:
    """Records calls; each snapshot completes when the test says so."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, list[MetadataRecord]]] = []
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def __call__(self, end_offset: int, records: Sequence[Record]) -> None:
        self.calls.append((end_offset, [decode_record(r.value or b"", 0) for r in records]))
        await self.release.wait()
        if self.fail is not None:
            raise self.fail


def test_snapshots_follow_the_byte_limit_one_at_a_time() -> None:
    async def run() -> None:
        snapshotter = FakeSnapshotter()
        loader = MetadataLoader(
            snapshotter, max_bytes_between_snapshots=100, max_interval_ms=0, now_ms=lambda: 0
        )
        loader.handle_commit(data(0, NoOp()))  # under 100 bytes of values
        await asyncio.sleep(0)
        assert snapshotter.calls == []
        loader.handle_commit(data(1, *[ProducerIds(1, 0, n) for n in range(1, 11)]))
        await asyncio.sleep(0)
        assert snapshotter.calls == [(11, image_records(loader.image))]
        loader.handle_commit(data(11, *[ProducerIds(1, 0, n) for n in range(11, 21)]))
        await asyncio.sleep(0)
        assert len(snapshotter.calls) == 1  # the first is still being written
        snapshotter.release.set()
        await asyncio.sleep(0)
        loader.handle_commit(data(21, NoOp()))  # the bytes since the first count
        await asyncio.sleep(0)
        assert [offset for offset, _ in snapshotter.calls] == [11, 22]
        await loader.close()

    asyncio.run(run())


def test_snapshots_follow_the_interval_once_something_was_applied() -> None:
    async def run() -> None:
        now = [1000]
        snapshotter = FakeSnapshotter()
        snapshotter.release.set()
        loader = MetadataLoader(
            snapshotter,
            max_bytes_between_snapshots=10**9,
            max_interval_ms=60,
            now_ms=lambda: now[0],
        )
        loader.handle_commit(data(0, NoOp()))
        now[0] += 59
        loader.handle_commit(data(1, NoOp()))
        assert snapshotter.calls == []
        now[0] += 1
        loader.handle_commit(control(2, 1))
        await asyncio.sleep(0)
        assert [offset for offset, _ in snapshotter.calls] == [3]
        now[0] += 100
        loader.handle_commit(control(3, 1))
        await asyncio.sleep(0)
        assert len(snapshotter.calls) == 1  # nothing applied since the last one
        loader.handle_commit(data(4, NoOp()))
        await asyncio.sleep(0)
        assert [offset for offset, _ in snapshotter.calls] == [3, 5]
        await loader.close()

    asyncio.run(run())


def test_a_failed_snapshot_is_raised_by_the_next_batch() -> None:
    async def run() -> None:
        snapshotter = FakeSnapshotter()
        snapshotter.fail = OSError("fsync failed")
        snapshotter.release.set()
        loader = MetadataLoader(
            snapshotter, max_bytes_between_snapshots=1, max_interval_ms=0, now_ms=lambda: 0
        )
        loader.handle_commit(data(0, NoOp()))
        await asyncio.sleep(0)
        with pytest.raises(OSError, match="fsync failed"):
            loader.handle_commit(data(1, NoOp()))

    asyncio.run(run())


def test_close_stops_a_snapshot_in_progress() -> None:
    async def run() -> None:
        snapshotter = FakeSnapshotter()
        loader = MetadataLoader(
            snapshotter, max_bytes_between_snapshots=1, max_interval_ms=0, now_ms=lambda: 0
        )
        loader.handle_commit(data(0, NoOp()))
        await asyncio.sleep(0)
        assert len(snapshotter.calls) == 1
        await loader.close()  # would hang if it waited for the unreleased snapshot

    asyncio.run(asyncio.wait_for(run(), 5))


# ---- end to end: a single-voter quorum on a real disk ----------------------------------------


class Node:
    """A one-voter RaftNode with a loader; publishes every image and signals leadership."""

    def __init__(self, directory: Path, max_snapshot_bytes: int) -> None:
        self.directory = directory
        self.max_snapshot_bytes = max_snapshot_bytes
        self.images: list[tuple[MetadataImage, bool]] = []
        self.leading = asyncio.Event()
        self.snapshots: list[SnapshotId] = []
        self.snapshot_taken = asyncio.Event()

    async def start(self) -> None:
        runtime = real_runtime(seed=1)
        self.log = await DiskLog.open(runtime, str(self.directory / "__cluster_metadata-0"))
        self.raft = RaftNode(
            runtime,
            RaftNodeConfig(
                node_id=1,
                voters={1: ("127.0.0.1", 1)},
                cluster_id="c",
                metadata_dir=str(self.directory / "__cluster_metadata-0"),
                raft=RaftConfig(election_timeout_ms=20, election_backoff_max_ms=20),
            ),
            self.log,
        )
        self.loader = MetadataLoader(
            self._snapshot,
            max_bytes_between_snapshots=self.max_snapshot_bytes,
            now_ms=runtime.clock.now_ms,
        )
        self.loader.add_publisher(self)
        self.raft.add_listener(self.loader)
        self.raft.add_listener(self)
        await self.raft.start()
        await self.leading.wait()

    async def _snapshot(self, end_offset: int, records: Sequence[Record]) -> SnapshotId:
        snapshot = await self.raft.snapshot(end_offset, records)
        self.snapshots.append(snapshot)
        self.snapshot_taken.set()
        return snapshot

    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        self.images.append((after, from_snapshot))

    def handle_event(self, event: object) -> None:
        if isinstance(event, RoleChanged) and event.role is Role.LEADER:
            self.leading.set()

    def handle_commit(self, batch: CommittedBatch) -> None:
        """The loader is the listener that acts on commits."""

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        """The loader is the listener that loads snapshots."""

    async def propose(self, *records: MetadataRecord) -> None:
        values = [Record(None, encode_record(r), 0) for r in records]
        await self.raft.propose_and_wait(values)

    async def stop(self) -> None:
        await self.raft.close()
        await self.loader.close()
        await self.log.close()


def test_a_restarted_node_rebuilds_from_snapshot_and_log_the_image_of_a_full_replay(
    tmp_path: Path,
) -> None:
    async def run() -> tuple[MetadataImage, Node]:
        # The first three proposals carry 1,040 bytes of records and the three after the
        # snapshot 586: exactly one snapshot, after the third, however fast the disk is.
        first = Node(tmp_path, max_snapshot_bytes=1000)
        await first.start()
        await first.propose(FeatureLevel("metadata.version", 1), register(1, 1), register(2, 2))
        await first.propose(UnfenceBroker(1, 1), UnfenceBroker(2, 2))
        await first.propose(
            Topic("t", T1),
            Partition(T1, 0, (1, 2), (1, 2), 1),
            Partition(T1, 1, (2, 1), (2, 1), 2),
            Config(2, "t", "retention.ms", "1000"),
        )
        await first.snapshot_taken.wait()
        # After the snapshot: more history that only the log holds.
        await first.propose(PartitionChange(T1, 0, isr=(1,)))
        await first.propose(PartitionChange(T1, 1, leader=1), ProducerIds(1, 1, 1000))
        await first.propose(
            Topic("u", uuid.UUID(int=2)), Partition(uuid.UUID(int=2), 0, (2,), (2,), 2)
        )
        final = first.loader.image
        assert all(not from_snapshot for _, from_snapshot in first.images)
        await first.stop()
        assert len(first.snapshots) == 1 and first.snapshots[0].end_offset < final.offset

        second = Node(tmp_path, max_snapshot_bytes=10**9)
        await second.start()
        await second.propose(NoOp())  # commits everything the first node left
        await second.stop()
        return final, second

    final, second = asyncio.run(asyncio.wait_for(run(), 30))
    loaded, from_snapshot = second.images[0]
    assert from_snapshot and loaded.offset < final.offset
    at_final = [image for image, _ in second.images if image.offset == final.offset]
    assert at_final == [final]
