"""Producer-state snapshots (``<offset>.snapshot``), in Kafka's ProducerStateManager format.

A snapshot holds the producer state of a partition as of ``offset`` (the log end when it was
written), so a start-up after a clean shutdown need not read every batch header of the log
to rebuild it. Layout, big-endian (Kafka's PID_SNAPSHOT_MAP_SCHEMA, version 1)::

    version int16 (1)  crc uint32 (CRC-32C of everything after it)  count int32
    count entries of 46 bytes:
        producerId int64  epoch int16  lastSequence int32  lastOffset int64
        offsetDelta int32  timestamp int64  coordinatorEpoch int32
        currentTxnFirstOffset int64 (-1: none)

As in Kafka only each producer's last batch is kept (``lastSequence - offsetDelta`` is its
first sequence, ``lastOffset - offsetDelta`` its first offset): after a restart a retry of
that batch is still answered as a duplicate, older ones are out of order. The last marker
written for a producer is not kept either, so the coordinator's retry of it after a restart
writes a second marker, as Kafka's would.

Written when the broker shuts down cleanly (``ReplicaManager.close``, before the logs are
closed and the clean shutdown marker written), and, as Kafka's, at every segment roll of a
partition (``Partition.checkpoint_if_rolled``: the state at the new segment's base offset,
before the batches that rolled it), the ``SNAPSHOTS_KEPT`` latest kept. A roll's snapshot is
written on the append path without an fsync (Kafka too writes it there and flushes it
later): a crash that tears it or loses its contents leaves a file the CRC refuses.

Read at start-up, and kept (a later unclean start may use it too). After a clean shutdown the
latest one (at the log end) is read. After an unclean one only a snapshot at or below both
the checkpointed recovery point (``Log.opened_recovery_point``, not the log end the recovery
moves it to: the log below it survived the crash, so the snapshot describes it) and the
checkpointed high watermark (a snapshot does not keep the transactions whose marker is not
replicated yet: none may lie below it) is used, the latest such; those above the recovery
point are removed (the crash may have changed the log they describe), a corrupt one is
removed and the next older tried; the batch headers after it are then read, which also
repairs the ``.txnindex`` there.
A truncation removes the snapshots above its target before it cuts the log (the cut's
directory fsync makes that durable), so none ever describes a log that changed after it was
written. A snapshot whose CRC, version or size is wrong is never used (the log is read).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass

from crc32c import crc32c

from log.fs import FileSystem, read_all, write_atomic
from log.segment import parse_base_offset

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
# Roll snapshots kept per partition (the latest ones; Kafka keeps one per segment): a few
# bound the disk they take, and the newest at or below the recovery point and the high
# watermark is nearly always among them.
SNAPSHOTS_KEPT = 3
_HEAD = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(Exception):
    """A snapshot file that cannot be trusted."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer, as Kafka's ProducerStateEntry is written."""

    producer_id: int
    epoch: int
    last_sequence: int  # -1: no batch remembered
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int  # -1: no open transaction


def encode_snapshot(entries: list[SnapshotEntry]) -> bytes:
    body = struct.pack(">i", len(entries)) + b"".join(
        _ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        for e in entries
    )
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body


def decode_snapshot(data: bytes) -> list[SnapshotEntry]:
    """The entries of a snapshot file; CorruptSnapshotError if it cannot be right."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{len(data)} bytes is shorter than a snapshot header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"snapshot version {version}")
    if crc32c(data[6:]) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError(f"{count} entries do not fill {len(data)} bytes")
    return [
        SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + index * _ENTRY.size))
        for index in range(count)
    ]


def snapshot_path(dir_path: str, offset: int) -> str:
    return os.path.join(dir_path, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def _snapshot_offsets(fs: FileSystem, dir_path: str) -> list[int]:
    offsets = []
    for name in fs.list_dir(dir_path):
        offset = parse_base_offset(name)
        if offset is not None and name.endswith(SNAPSHOT_SUFFIX):
            offsets.append(offset)
    return sorted(offsets)


async def write_snapshot(
    fs: FileSystem, dir_path: str, offset: int, entries: list[SnapshotEntry]
) -> None:
    """The clean shutdown's snapshot at ``offset`` (the log end), durably. The latest
    rolls' stay beside it (should the clean shutdown marker never be written, an unclean
    start may still use one of them), older ones beyond ``SNAPSHOTS_KEPT`` go: a partition
    restarted often without a roll keeps no more."""
    await write_atomic(fs, snapshot_path(dir_path, offset), encode_snapshot(entries))
    _prune(fs, dir_path, log_start=0)


def put_snapshot(
    fs: FileSystem, dir_path: str, offset: int, entries: list[SnapshotEntry], log_start: int
) -> None:
    """A segment roll's snapshot at ``offset``, written without an fsync (temp file, then
    rename, so a reader never sees half of one); the older ones below ``log_start`` or
    beyond the ``SNAPSHOTS_KEPT`` latest removed. OSError (a full or failing disk): the
    caller goes on without it, a start-up then reads more of the log."""
    tmp = snapshot_path(dir_path, offset) + ".tmp"  # the log loader removes a leftover
    handle = fs.open(tmp)
    try:
        handle.truncate(0)
        handle.pwrite(0, encode_snapshot(entries))
    finally:
        handle.close()
    fs.rename(tmp, snapshot_path(dir_path, offset))
    _prune(fs, dir_path, log_start)


def _prune(fs: FileSystem, dir_path: str, log_start: int) -> None:
    """Keep the ``SNAPSHOTS_KEPT`` latest snapshots, none below ``log_start``."""
    offsets = _snapshot_offsets(fs, dir_path)
    for old in offsets[:-SNAPSHOTS_KEPT] + [o for o in offsets[-SNAPSHOTS_KEPT:] if o < log_start]:
        fs.remove(snapshot_path(dir_path, old))


def latest_snapshot(
    fs: FileSystem, dir_path: str, bound: int
) -> tuple[int, list[SnapshotEntry]] | None:
    """The latest readable snapshot (offset, entries) at or below ``bound`` (a clean start:
    the log end; an unclean one: module docstring), kept for the next start; corrupt ones
    are removed on the way. None when there is none to trust."""
    for offset in reversed(_snapshot_offsets(fs, dir_path)):
        if offset > bound:
            continue
        path = snapshot_path(dir_path, offset)
        try:
            return offset, decode_snapshot(read_all(fs, path))
        except CorruptSnapshotError:
            fs.remove(path)
    return None


def remove_snapshots_after(fs: FileSystem, dir_path: str, offset: int) -> None:
    """Forget the snapshots above ``offset``: a truncation to it, or an unclean start whose
    recovery point it is (the log they describe may have changed)."""
    for found in _snapshot_offsets(fs, dir_path):
        if found > offset:
            fs.remove(snapshot_path(dir_path, found))
