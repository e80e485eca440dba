"""Raft snapshots (KIP-630): files named ``<endOffset:020d>-<epoch:010d>.checkpoint``.

A snapshot holds the state machine's records as of ``end_offset`` (everything below it) in
v2 batches: a SnapshotHeader control batch first, the state's records, a SnapshotFooter
control batch last. The footer makes a truncated file detectable, and every batch carries its
CRC, so a torn or corrupt snapshot is refused rather than loaded. Files are written to
``.part`` and renamed into place after an fsync, so a visible ``.checkpoint`` is complete;
a follower downloading one (FetchSnapshot) writes its chunks to the ``.part`` file too.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.serial import entity_writer
from kio.static.primitive import i16, i64

from log.batch import decode_batch, encode_batch, iter_batches
from log.errors import RecordError
from log.fs import FileSystem, read_all
from log.records import ControlRecordType, Record, decode_control_key, encode_control_key
from raft.voters import QuorumControl, VoterSetError, control_in_records

SUFFIX = ".checkpoint"
PARTIAL = ".part"
MAX_RECORDS_PER_BATCH = 1000


class SnapshotError(Exception):
    """A snapshot file that is torn, corrupt or not a snapshot."""


@dataclass(frozen=True, slots=True, order=True)
class SnapshotId:
    """The snapshot of everything below ``end_offset``, whose last record has ``epoch``."""

    end_offset: int
    epoch: int

    @property
    def file_name(self) -> str:
        return f"{self.end_offset:020d}-{self.epoch:010d}{SUFFIX}"

    @staticmethod
    def parse(name: str) -> SnapshotId | None:
        """The id a file name stands for, or None if it is not a snapshot name."""
        if not name.endswith(SUFFIX):
            return None
        stem = name[: -len(SUFFIX)]
        offset, dash, epoch = stem.partition("-")
        if not dash or len(offset) != 20 or not offset.isdigit() or not epoch.isdigit():
            return None
        return SnapshotId(int(offset), int(epoch))


def list_snapshots(fs: FileSystem, directory: str) -> list[SnapshotId]:
    """Complete snapshots in ``directory``, oldest first."""
    if not fs.is_dir(directory):
        return []
    found = [SnapshotId.parse(name) for name in fs.list_dir(directory)]
    return sorted(s for s in found if s is not None)


def _control(
    record_type: ControlRecordType, entity: Any, timestamp_ms: int, more: Sequence[Record] = ()
) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    record = Record(encode_control_key(record_type), buffer.getvalue(), timestamp_ms)
    return encode_batch([record, *more], is_control=True)


def encode_snapshot(
    records: Sequence[Record], timestamp_ms: int, control: Sequence[Record] = ()
) -> bytes:
    """The bytes of a snapshot file holding ``records``. ``control`` are the quorum's
    KRaftVersion and Voters records (a dynamic quorum's voter set as of the snapshot's end):
    as in Kafka, they ride in the header's control batch, right after the header."""
    header = SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(timestamp_ms))
    parts = [_control(ControlRecordType.SNAPSHOT_HEADER, header, timestamp_ms, control)]
    offset = 1 + len(control)
    for start in range(0, len(records), MAX_RECORDS_PER_BATCH):
        chunk = records[start : start + MAX_RECORDS_PER_BATCH]
        parts.append(encode_batch(chunk, base_offset=offset))
        offset += len(chunk)
    footer = SnapshotFooterRecord(version=i16(0))
    parts.append(_control(ControlRecordType.SNAPSHOT_FOOTER, footer, timestamp_ms))
    return b"".join(parts)


def decode_snapshot(data: bytes, name: str = "snapshot") -> list[Record]:
    """The state records of a snapshot; SnapshotError if it is torn or corrupt."""
    return _decode(data, name)[0]


def decode_snapshot_control(data: bytes, name: str = "snapshot") -> QuorumControl:
    """The kraft.version and voter set a snapshot holds (None for each it does not)."""
    return _decode(data, name)[1]


def _decode(data: bytes, name: str) -> tuple[list[Record], QuorumControl]:
    records: list[Record] = []
    control: list[Record] = []
    kinds: list[ControlRecordType] = []
    end = 0
    try:
        for position, _header in iter_batches(data):
            header, batch = decode_batch(data, position)
            end = position + header.size
            if header.is_control:
                for record in batch:
                    kind = decode_control_key(record.key)
                    kinds.append(kind)
                    if kind in (ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS):
                        control.append(record)
            else:
                records.extend(batch)
        quorum = control_in_records(control)
    except (RecordError, VoterSetError) as error:
        raise SnapshotError(f"{name}: corrupt batch ({error})") from None
    if end != len(data) or not kinds or kinds[0] is not ControlRecordType.SNAPSHOT_HEADER:
        raise SnapshotError(f"{name}: no snapshot header, or bytes after the last batch")
    if kinds[-1] is not ControlRecordType.SNAPSHOT_FOOTER:
        raise SnapshotError(f"{name}: no snapshot footer (torn file)")
    return records, quorum


async def write_snapshot(fs: FileSystem, directory: str, snapshot: SnapshotId, data: bytes) -> None:
    """Write a complete snapshot durably: ``.part``, fsync, rename, directory fsync."""
    partial = os.path.join(directory, snapshot.file_name + PARTIAL)
    handle = fs.open(partial)
    try:
        handle.truncate(0)
        handle.pwrite(0, data)
        await handle.fsync()
    finally:
        handle.close()
    fs.rename(partial, os.path.join(directory, snapshot.file_name))
    await fs.fsync_dir(directory)


def read_snapshot(fs: FileSystem, directory: str, snapshot: SnapshotId) -> list[Record]:
    """Load a complete snapshot's records."""
    path = os.path.join(directory, snapshot.file_name)
    return decode_snapshot(read_all(fs, path), path)


def read_snapshot_control(fs: FileSystem, directory: str, snapshot: SnapshotId) -> QuorumControl:
    """The kraft.version and voter set in a complete snapshot."""
    path = os.path.join(directory, snapshot.file_name)
    return decode_snapshot_control(read_all(fs, path), path)


def snapshot_size(fs: FileSystem, directory: str, snapshot: SnapshotId) -> int:
    return fs.file_size(os.path.join(directory, snapshot.file_name))


def read_chunk(
    fs: FileSystem, directory: str, snapshot: SnapshotId, position: int, max_bytes: int
) -> bytes:
    """Bytes of a snapshot file for FetchSnapshot (unaligned: any position, any length)."""
    handle = fs.open(os.path.join(directory, snapshot.file_name), create=False)
    try:
        return handle.pread(position, max_bytes)
    finally:
        handle.close()


def write_chunk(
    fs: FileSystem, directory: str, snapshot: SnapshotId, position: int, data: bytes
) -> None:
    """Add a downloaded chunk to the snapshot's ``.part`` file."""
    handle = fs.open(os.path.join(directory, snapshot.file_name + PARTIAL))
    try:
        if position == 0:
            handle.truncate(0)
        handle.pwrite(position, data)
    finally:
        handle.close()


async def finish_download(fs: FileSystem, directory: str, snapshot: SnapshotId) -> list[Record]:
    """Verify a downloaded ``.part`` file and publish it; its records."""
    partial = os.path.join(directory, snapshot.file_name + PARTIAL)
    data = read_all(fs, partial)
    records = decode_snapshot(data, partial)
    handle = fs.open(partial)
    try:
        await handle.fsync()
    finally:
        handle.close()
    fs.rename(partial, os.path.join(directory, snapshot.file_name))
    await fs.fsync_dir(directory)
    return records


def delete_older(fs: FileSystem, directory: str, keep: SnapshotId) -> None:
    """Remove snapshots older than ``keep`` and stale partial downloads."""
    for name in fs.list_dir(directory):
        snapshot = SnapshotId.parse(name)
        if (snapshot is not None and snapshot < keep) or name.endswith(PARTIAL):
            fs.remove(os.path.join(directory, name))
