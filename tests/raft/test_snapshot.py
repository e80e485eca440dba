"""Snapshot files: naming, header/footer framing, torn-file detection, chunked download."""

from __future__ import annotations

import asyncio
import random

import pytest

from log.records import Record
from raft import snapshot as snapshots
from raft.snapshot import SnapshotError, SnapshotId
from sim.disk import SimDisk

RECORDS = [Record(f"{i}:1".encode(), b"v" * (i % 50), 1000 + i) for i in range(2500)]


def test_file_names_follow_kip_630() -> None:
    snapshot = SnapshotId(1234, 7)
    assert snapshot.file_name == "00000000000000001234-0000000007.checkpoint"
    assert SnapshotId.parse(snapshot.file_name) == snapshot
    for other in ("00000000000000001234.log", "1234-7.checkpoint", "x.checkpoint.part"):
        assert SnapshotId.parse(other) is None


def test_encode_decode_round_trip_across_batches() -> None:
    data = snapshots.encode_snapshot(RECORDS, 5000)
    decoded = snapshots.decode_snapshot(data)
    assert [(r.key, r.value) for r in decoded] == [(r.key, r.value) for r in RECORDS]


def test_torn_or_corrupt_snapshots_are_refused() -> None:
    data = snapshots.encode_snapshot(RECORDS, 5000)
    for cut in (len(data) - 1, len(data) // 2, 10):
        with pytest.raises(SnapshotError):
            snapshots.decode_snapshot(data[:cut])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x40
    with pytest.raises(SnapshotError, match="corrupt"):
        snapshots.decode_snapshot(bytes(flipped))


def test_download_in_chunks_then_publish_and_prune() -> None:
    disk = SimDisk(random.Random(1))
    fs = disk.fs()
    fs.mkdir("/leader")
    fs.mkdir("/follower")
    old, new = SnapshotId(10, 1), SnapshotId(2500, 3)
    asyncio.run(snapshots.write_snapshot(fs, "/leader", new, snapshots.encode_snapshot(RECORDS, 1)))
    asyncio.run(snapshots.write_snapshot(fs, "/follower", old, snapshots.encode_snapshot([], 1)))
    size = snapshots.snapshot_size(fs, "/leader", new)
    for position in range(0, size, 4096):
        chunk = snapshots.read_chunk(fs, "/leader", new, position, 4096)
        snapshots.write_chunk(fs, "/follower", new, position, chunk)
    assert snapshots.list_snapshots(fs, "/follower") == [old]  # a .part is not a snapshot
    records = asyncio.run(snapshots.finish_download(fs, "/follower", new))
    assert len(records) == len(RECORDS)
    snapshots.delete_older(fs, "/follower", new)
    assert snapshots.list_snapshots(fs, "/follower") == [new]
    disk.crash()
    # The publish was durable; the prune was not fsynced, so the old one may come back,
    # which is harmless: the newest snapshot is the one used.
    assert snapshots.list_snapshots(disk.fs(), "/follower")[-1] == new
