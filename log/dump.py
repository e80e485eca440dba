"""kafka-dump-log for this broker's files: print what a segment or index holds.

Output follows Kafka's DumpLogSegments closely so operators can diff the two tools:

    Dumping /data/t-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1 producerId: -1 ...
    | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 5 sequence: -1 headerKeys: [] ...

It never crashes on bad input: a torn tail or a batch failing its CRC is reported as
``found corrupt batch at position N: <why>``. A missing or unsupported file prints one error
line and makes the exit code 1; corruption alone does not (as kafka-dump-log).
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from typing import TextIO

from log.batch import (
    BATCH_HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    BatchHeader,
    decode_batch,
    parse_header,
    validate_batch,
)
from log.end_txn_marker import decode_marker
from log.errors import RecordError
from log.fs import FileHandle, FileSystem, RealFileSystem, read_all
from log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, parse_base_offset
from log.txn_index import (
    ABORTED_TXN_VERSION,
    TXN_INDEX_SUFFIX,
    CorruptTxnIndexError,
    TransactionIndex,
)

_CHUNK_BYTES = 1024 * 1024
_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
_CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_INT32_MAX = (1 << 31) - 1


def dump_files(
    paths: list[str],
    *,
    print_records: bool,
    index_sanity_check: bool,
    out: TextIO,
    fs: FileSystem | None = None,
) -> int:
    """Dump each file; returns the exit code (1 if a file was missing or unsupported)."""
    fs = fs or RealFileSystem()
    exit_code = 0
    for path in paths:
        if not fs.exists(path) or fs.is_dir(path):
            out.write(f"error: {path}: no such file\n")
            exit_code = 1
            continue
        try:
            if path.endswith(LOG_SUFFIX):
                out.write(f"Dumping {path}\n")
                _dump_log(fs, path, print_records, out)
            elif path.endswith(INDEX_SUFFIX):
                out.write(f"Dumping {path}\n")
                exit_code |= _dump_offset_index(fs, path, index_sanity_check, out)
            elif path.endswith(TIME_INDEX_SUFFIX):
                out.write(f"Dumping {path}\n")
                exit_code |= _dump_time_index(fs, path, index_sanity_check, out)
            elif path.endswith(TXN_INDEX_SUFFIX):
                out.write(f"Dumping {path}\n")
                exit_code |= _dump_txn_index(fs, path, out)
            else:
                out.write(f"error: {path}: not a .log, .index, .timeindex or .txnindex file\n")
                exit_code = 1
        except OSError as exc:
            out.write(f"error: {path}: {exc.strerror or exc}\n")
            exit_code = 1
    return exit_code


# ---- .log ---------------------------------------------------------------------------------
def _iter_raw_batches(handle: FileHandle) -> Iterator[tuple[int, bytes | str]]:
    """(position, whole batch bytes) per batch, or (position, reason) once, at a torn or
    impossible batch, after which nothing follows."""
    size = handle.size()
    position = 0
    while position < size:  # bounded: position grows by a whole batch per pass
        head = handle.pread(position, LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            yield position, f"torn batch: {len(head)} bytes remain, {LOG_OVERHEAD} needed"
            return
        (batch_length,) = struct.unpack_from(">i", head, 8)
        batch_size = batch_length + LOG_OVERHEAD
        if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD:
            yield position, f"impossible batch length {batch_length}"
            return
        if position + batch_size > size:
            yield position, f"torn batch: claims {batch_size} bytes, {size - position} remain"
            return
        yield position, handle.pread(position, batch_size)
        position += batch_size


def _batch_line(header: BatchHeader, position: int, valid: bool) -> str:
    last_sequence = -1
    if header.base_sequence >= 0:
        last_sequence = (header.base_sequence + header.last_offset_delta) % (_INT32_MAX + 1)
    time_type = "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"
    codec = _CODEC_NAMES.get(header.attributes & 0x07, f"unknown({header.attributes & 0x07})")
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.records_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} "
        f"partitionLeaderEpoch: {header.partition_leader_epoch} "
        f"isTransactional: {str(header.is_transactional).lower()} "
        f"isControl: {str(header.is_control).lower()} position: {position} "
        f"{time_type}: {header.max_timestamp} size: {header.size} magic: {header.magic} "
        f"compresscodec: {codec} crc: {header.crc} isvalid: {str(valid).lower()}"
    )


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", errors="backslashreplace")


def _dump_log(fs: FileSystem, path: str, print_records: bool, out: TextIO) -> None:
    base = parse_base_offset(os.path.basename(path))
    out.write(f"Log starting offset: {base if base is not None else 'unknown'}\n")
    handle = fs.open(path, create=False)
    try:
        for position, item in _iter_raw_batches(handle):  # bounded by the file size
            if isinstance(item, str):
                out.write(f"found corrupt batch at position {position}: {item}\n")
                return
            try:
                header = validate_batch(item)
            except RecordError as exc:
                with contextlib.suppress(RecordError):
                    out.write(_batch_line(parse_header(item), position, valid=False) + "\n")
                out.write(f"found corrupt batch at position {position}: {exc}\n")
                continue
            out.write(_batch_line(header, position, valid=True) + "\n")
            if print_records:
                _print_records(item, header, position, out)
    finally:
        handle.close()


def _print_records(data: bytes, header: BatchHeader, position: int, out: TextIO) -> None:
    try:
        _, records = decode_batch(data)
    except RecordError as exc:
        out.write(f"found corrupt batch at position {position}: {exc}\n")
        return
    time_type = "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"
    control = ""
    with contextlib.suppress(RecordError):
        marker = decode_marker(data, 0, header)
        if marker is not None:  # Kafka's DumpLogSegments shows the marker of a control batch
            kind = "COMMIT" if marker.commit else "ABORT"
            control = f" endTxnMarker: {kind} coordinatorEpoch: {marker.coordinator_epoch}"
    for index, record in enumerate(records):
        delta = record.offset_delta if record.offset_delta is not None else index
        sequence = header.base_sequence + delta if header.base_sequence >= 0 else -1
        header_keys = ", ".join(h.key for h in record.headers)
        headers = ", ".join(f"{h.key}={_text(h.value)}" for h in record.headers)
        out.write(
            f"| offset: {header.base_offset + delta} {time_type}: {record.timestamp} "
            f"keySize: {len(record.key) if record.key is not None else -1} "
            f"valueSize: {len(record.value) if record.value is not None else -1} "
            f"sequence: {sequence} headerKeys: [{header_keys}] key: {_text(record.key)} "
            f"payload: {_text(record.value)} headers: [{headers}]{control}\n"
        )


# ---- indexes ------------------------------------------------------------------------------
def _dump_txn_index(fs: FileSystem, path: str, out: TextIO) -> int:
    """Kafka's dumpTxnIndex: one line per aborted transaction."""
    try:
        entries = TransactionIndex(fs, path).entries
    except CorruptTxnIndexError as exc:
        out.write(f"found corrupt index {path}: {exc}\n")
        return 1
    for entry in entries:
        out.write(
            f"version: {ABORTED_TXN_VERSION} producerId: {entry.producer_id} "
            f"firstOffset: {entry.first_offset} lastOffset: {entry.last_offset} "
            f"lastStableOffset: {entry.last_stable_offset}\n"
        )
    return 0


def _log_path_for(path: str, suffix: str) -> str:
    return path[: -len(suffix)] + LOG_SUFFIX


def _last_offset_at(handle: FileHandle, position: int) -> int | None:
    """Last offset of the batch starting at ``position``, None if none plausibly does."""
    head = handle.pread(position, BATCH_HEADER_SIZE)
    if len(head) < BATCH_HEADER_SIZE:
        return None
    base_offset, batch_length, _, magic = struct.unpack_from(">qiib", head)
    if batch_length < BATCH_HEADER_SIZE - LOG_OVERHEAD or magic != 2:
        return None
    (last_offset_delta,) = struct.unpack_from(">i", head, 23)
    return base_offset + last_offset_delta


def _dump_offset_index(fs: FileSystem, path: str, sanity_check: bool, out: TextIO) -> int:
    base = parse_base_offset(os.path.basename(path)) or 0
    data = read_all(fs, path)
    entries = [
        (base + rel, pos) for rel, pos in _OFFSET_ENTRY.iter_unpack(data[: len(data) // 8 * 8])
    ]
    if len(data) % 8:
        out.write(f"found {len(data) % 8} trailing bytes in {path}: not a whole entry\n")
    if not sanity_check:
        for offset, position in entries:
            out.write(f"offset: {offset} position: {position}\n")
        return 0
    log_path = _log_path_for(path, INDEX_SUFFIX)
    if not fs.exists(log_path):
        out.write(f"error: {path}: cannot check, {log_path} is missing\n")
        return 1
    mismatches: list[str] = []
    handle = fs.open(log_path, create=False)
    try:
        previous = (-1, -1)
        for offset, position in entries:  # bounded by the file size
            if offset <= previous[0] or position <= previous[1]:
                mismatches.append(f"  Index entry ({offset}, {position}) follows {previous}")
            previous = (offset, position)
            last_offset = _last_offset_at(handle, position)
            if last_offset is None:
                mismatches.append(f"  Index offset: {offset}, no batch at position {position}")
            elif last_offset != offset:
                mismatches.append(f"  Index offset: {offset}, log offset: {last_offset}")
    finally:
        handle.close()
    _report(path, entries, mismatches, len(data) % 8 == 0, out)
    return 0


def _dump_time_index(fs: FileSystem, path: str, sanity_check: bool, out: TextIO) -> int:
    base = parse_base_offset(os.path.basename(path)) or 0
    data = read_all(fs, path)
    entries = [
        (ts, base + rel) for ts, rel in _TIME_ENTRY.iter_unpack(data[: len(data) // 12 * 12])
    ]
    if len(data) % 12:
        out.write(f"found {len(data) % 12} trailing bytes in {path}: not a whole entry\n")
    if not sanity_check:
        for timestamp, offset in entries:
            out.write(f"timestamp: {timestamp} offset: {offset}\n")
        return 0
    log_path = _log_path_for(path, TIME_INDEX_SUFFIX)
    if not fs.exists(log_path):
        out.write(f"error: {path}: cannot check, {log_path} is missing\n")
        return 1
    by_last_offset: dict[int, int] = {}
    handle = fs.open(log_path, create=False)
    try:
        for _, item in _iter_raw_batches(handle):  # bounded by the file size
            if isinstance(item, bytes):
                header = parse_header(item)
                by_last_offset[header.last_offset] = header.max_timestamp
    finally:
        handle.close()
    mismatches: list[str] = []
    previous = -1
    for timestamp, offset in entries:
        if timestamp <= previous:
            mismatches.append(
                f"  Index timestamp: {timestamp}, Previously indexed timestamp: {previous}"
            )
        previous = max(previous, timestamp)
        if offset not in by_last_offset:
            mismatches.append(f"  Index offset: {offset}, no batch ends at that offset")
        elif by_last_offset[offset] != timestamp:
            mismatches.append(
                f"  Index timestamp: {timestamp}, log timestamp: {by_last_offset[offset]}"
            )
    _report(path, entries, mismatches, len(data) % 12 == 0, out)
    return 0


def _report(path: str, entries: list, mismatches: list[str], whole: bool, out: TextIO) -> None:
    if mismatches or not whole:
        out.write(f"Mismatches in :{path}\n")
        for line in mismatches:
            out.write(line + "\n")
        out.write(f"{path} failed sanity check: {len(mismatches)} of {len(entries)} entries\n")
    else:
        out.write(f"{path} passed sanity check: {len(entries)} entries\n")
