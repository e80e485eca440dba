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
closed and the clean shutdown marker written), read only when the log dir had that marker:
after an unclean shutdown the state is rebuilt from the log, which also repairs the
``.txnindex``. Reading removes the snapshots, so one can never describe a log that changed
after it was written. A snapshot whose CRC, version or size is wrong is ignored (the log is
read instead).
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
    """Replace the partition's snapshots with one at ``offset``, durably (the directory
    fsync of the atomic write makes the removals of older ones durable too)."""
    for old in _snapshot_offsets(fs, dir_path):
        if old != offset:
            fs.remove(snapshot_path(dir_path, old))
    await write_atomic(fs, snapshot_path(dir_path, offset), encode_snapshot(entries))


def take_snapshot(fs: FileSystem, dir_path: str) -> tuple[int, list[SnapshotEntry]] | None:
    """The latest readable snapshot (offset, entries), removing every snapshot file: each
    is read at most once (module docstring). None when there is none to trust."""
    found = None
    for offset in reversed(_snapshot_offsets(fs, dir_path)):
        path = snapshot_path(dir_path, offset)
        if found is None:
            try:
                found = (offset, decode_snapshot(read_all(fs, path)))
            except CorruptSnapshotError:
                found = None
        fs.remove(path)
    return found


def remove_snapshots(fs: FileSystem, dir_path: str) -> None:
    """Forget every snapshot (an unclean start: the log is the truth)."""
    for offset in _snapshot_offsets(fs, dir_path):
        fs.remove(snapshot_path(dir_path, offset))
