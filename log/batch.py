"""Kafka RecordBatch v2 (magic 2): the unit the log stores, replicates and serves.

Layout, big-endian (offsets from the start of the batch):
     0 baseOffset int64            8 batchLength int32 (bytes after this field)
    12 partitionLeaderEpoch int32 16 magic int8 (= 2)
    17 crc uint32: CRC-32C (Castagnoli) of everything from attributes to the end
    21 attributes int16: bits 0-2 codec, 3 timestampType, 4 transactional, 5 control,
                         6 hasDeleteHorizon
    23 lastOffsetDelta int32      27 baseTimestamp int64     35 maxTimestamp int64
    43 producerId int64           51 producerEpoch int16     53 baseSequence int32
    57 recordsCount int32         61 records (one compressed blob when codec != none)

baseOffset and partitionLeaderEpoch sit before the CRC range, so the broker assigns them in
place (assign_offsets) without recomputing the checksum: the append hot path never touches
the records. The hot-path checks (parse_header, validate_batch, iter_batches) read only the
61-byte header plus one CRC pass over a zero-copy slice; decode_batch is for the few callers
that need the records themselves (metadata replay, compaction, tests).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from crc32c import crc32c

from log.compression import DECOMPRESSED_SIZE_BYTES_MAX, Compression, compress, decompress
from log.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from log.records import (
    Buffer,
    Record,
    RecordKey,
    RecordKeyScan,
    decode_records,
    encode_record,
)

BATCH_HEADER_SIZE = 61
LOG_OVERHEAD = 12
MAGIC_VALUE_V2 = 2

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_BATCH_LENGTH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_PARTITION_LEADER_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_BATCH_LENGTH_OFFSET = 8
_PARTITION_LEADER_EPOCH_OFFSET = 12
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_BATCH_LENGTH_MIN = BATCH_HEADER_SIZE - LOG_OVERHEAD
_INT32_MAX = (1 << 31) - 1
_INT64_MAX = (1 << 63) - 1
_CODEC_ID_MAX = max(Compression)

assert _HEADER.size == BATCH_HEADER_SIZE


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61 fixed bytes at the start of a batch, with Kafka's derived views of them."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, from baseOffset to its last record."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The codec; UnsupportedCompressionError for ids 5-7."""
        codec_id = self.attributes & COMPRESSION_CODEC_MASK
        if codec_id > _CODEC_ID_MAX:
            raise UnsupportedCompressionError(f"unknown compression codec id {codec_id}")
        return Compression(codec_id)

    @property
    def timestamp_type(self) -> int:
        """CREATE_TIME (0) or LOG_APPEND_TIME (1)."""
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """Set by compaction: base_timestamp then holds the tombstone delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch at pos, without a CRC check; the whole batch must be in buf."""
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    available = len(buf) - pos
    if available < BATCH_HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at {pos} needs {BATCH_HEADER_SIZE} header bytes, {max(available, 0)} remain"
        )
    fields = _HEADER.unpack_from(buf, pos)
    magic = fields[3]
    if magic != MAGIC_VALUE_V2:
        raise CorruptRecordError(f"batch at {pos} has magic {magic}, only v2 is supported")
    batch_length = fields[1]
    if batch_length < _BATCH_LENGTH_MIN:
        raise CorruptRecordError(f"batch at {pos} has length {batch_length} < {_BATCH_LENGTH_MIN}")
    if batch_length + LOG_OVERHEAD > available:
        raise CorruptRecordError(
            f"batch at {pos} claims {batch_length + LOG_OVERHEAD} bytes, {available} remain"
        )
    return BatchHeader(*fields)


def validate_batch(buf: Buffer, pos: int = 0, header: BatchHeader | None = None) -> BatchHeader:
    """parse_header plus the CRC-32C check and header sanity; the batch is then safe to store.
    ``header``: the batch's header, already parsed by the caller (not parsed again)."""
    if header is None:
        header = parse_header(buf, pos)
    with memoryview(buf) as view:
        crc = crc32c(view[pos + _ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + header.batch_length])
    if crc != header.crc:
        raise CorruptRecordError(
            f"batch at {pos} has CRC {header.crc:#010x}, its bytes give {crc:#010x}"
        )
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError(
            f"batch at {pos} has records count {header.records_count} and last offset delta "
            f"{header.last_offset_delta}"
        )
    # Deltas strictly increase from 0, so a batch holds at most lastOffsetDelta + 1 records
    # (fewer after compaction removed some).
    if header.records_count > header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"batch at {pos} declares {header.records_count} records in an offset range of "
            f"{header.last_offset_delta + 1}"
        )
    if header.attributes & COMPRESSION_CODEC_MASK > _CODEC_ID_MAX:
        raise UnsupportedCompressionError(
            f"batch at {pos} uses compression codec id {header.attributes & COMPRESSION_CODEC_MASK}"
        )
    return header


def iter_batches(buf: Buffer, pos: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch from pos on, without CRC checks.

    Stops quietly at a partial batch at the end (a torn write); a batch whose length field is
    impossible, or whose header is malformed though all its bytes are present, raises
    CorruptRecordError. As in Kafka's FileLogInputStream, the length is judged before the
    magic, so a torn tail is never mistaken for corruption.
    """
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    end = len(buf)
    while end - pos >= LOG_OVERHEAD:  # pos grows by at least BATCH_HEADER_SIZE per pass
        (batch_length,) = _BATCH_LENGTH.unpack_from(buf, pos + _BATCH_LENGTH_OFFSET)
        if batch_length < _BATCH_LENGTH_MIN:
            raise CorruptRecordError(
                f"batch at {pos} has length {batch_length} < {_BATCH_LENGTH_MIN}"
            )
        if batch_length + LOG_OVERHEAD > end - pos:
            return
        header = parse_header(buf, pos)
        yield pos, header
        pos += header.size


def assign_offsets(
    buf: bytearray | memoryview, pos: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Rewrite baseOffset and partitionLeaderEpoch in place; both lie outside the CRC."""
    if not 0 <= base_offset <= _INT64_MAX:
        raise ValueError(f"base offset {base_offset} is outside 0..int64")
    if not -1 <= partition_leader_epoch <= _INT32_MAX:
        raise ValueError(f"partition leader epoch {partition_leader_epoch} is invalid")
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise CorruptRecordError(f"no batch header at {pos}")
    if buf[pos + _MAGIC_OFFSET] != MAGIC_VALUE_V2:
        raise CorruptRecordError(f"batch at {pos} has magic {buf[pos + _MAGIC_OFFSET]}")
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _PARTITION_LEADER_EPOCH.pack_into(
        buf, pos + _PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch
    )


def encode_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: Compression = Compression.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = CREATE_TIME,
    last_offset_delta: int | None = None,
    empty_max_timestamp: int = -1,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """A complete batch holding ``records``, CRC included.

    Offset deltas are each record's index unless it sets offset_delta (they must increase);
    timestamp deltas are taken from the first record's timestamp, as Kafka's producer does.
    The log cleaner's rewrites also pass ``last_offset_delta`` (a batch keeps its offset
    range when records leave it, and may then hold none, its max timestamp being
    ``empty_max_timestamp``) and ``delete_horizon_ms`` (KIP-534: stored in baseTimestamp,
    which the record deltas are then relative to, with the hasDeleteHorizon flag).
    """
    if not records and last_offset_delta is None:
        raise ValueError("a batch needs at least one record")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp type {timestamp_type} is neither 0 nor 1")
    try:
        codec = Compression(compression)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec {compression}") from None
    max_timestamp = records[0].timestamp if records else empty_max_timestamp
    base_timestamp = max_timestamp if delete_horizon_ms is None else delete_horizon_ms
    previous_delta = -1
    parts: list[bytes] = []
    for index, record in enumerate(records):
        offset_delta = index if record.offset_delta is None else record.offset_delta
        if offset_delta <= previous_delta:
            raise ValueError(f"offset delta {offset_delta} does not exceed {previous_delta}")
        previous_delta = offset_delta
        max_timestamp = max(max_timestamp, record.timestamp)
        parts.append(encode_record(record, offset_delta, record.timestamp - base_timestamp))
    if last_offset_delta is None:
        last_offset_delta = previous_delta
    elif last_offset_delta < previous_delta:
        raise ValueError(f"last offset delta {last_offset_delta} < record delta {previous_delta}")
    payload = compress(codec, b"".join(parts))
    attributes = (
        codec
        | (TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else 0)
        | (TRANSACTIONAL_FLAG_MASK if is_transactional else 0)
        | (CONTROL_FLAG_MASK if is_control else 0)
        | (DELETE_HORIZON_FLAG_MASK if delete_horizon_ms is not None else 0)
    )
    out = bytearray(BATCH_HEADER_SIZE + len(payload))
    try:
        _HEADER.pack_into(
            out,
            0,
            base_offset,
            len(out) - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC_VALUE_V2,
            0,  # the CRC covers the attributes onwards, so it is filled in last
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except struct.error as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None
    out[BATCH_HEADER_SIZE:] = payload
    with memoryview(out) as view:
        _CRC.pack_into(out, _CRC_OFFSET, crc32c(view[_ATTRIBUTES_OFFSET:]))
    return bytes(out)


def decode_batch(
    buf: Buffer, pos: int = 0, *, max_decompressed_bytes: int = DECOMPRESSED_SIZE_BYTES_MAX
) -> tuple[BatchHeader, list[Record]]:
    """Validate the batch at pos and decode all its records (decompressing if needed).

    Records of a LOG_APPEND_TIME batch all carry its maxTimestamp, as Kafka's readers report.
    """
    header = validate_batch(buf, pos)
    with memoryview(buf) as view:
        payload: Buffer = view[pos + BATCH_HEADER_SIZE : pos + header.size]
        codec = header.compression
        if codec is not Compression.NONE:
            payload = decompress(codec, payload, max_size=max_decompressed_bytes)
        records = decode_records(
            payload,
            header.records_count,
            header.base_offset,
            header.base_timestamp,
            log_append_time_ms=(
                header.max_timestamp if header.timestamp_type == LOG_APPEND_TIME else None
            ),
        )
    _check_offset_deltas(records, header, pos)
    return header, records


def decode_batch_keys(buf: Buffer, pos: int = 0) -> tuple[BatchHeader, list[RecordKey]]:
    """Validate the batch at pos and scan its records' keys (scan_record_keys), in order,
    with the offset-delta checks decode_batch makes: the log cleaner's cheaper read."""
    header, scan = batch_key_scan(buf, pos)
    scan.scan(scan.count)
    return header, check_key_deltas(header, scan.finish(), pos)


def batch_key_scan(buf: Buffer, pos: int = 0) -> tuple[BatchHeader, RecordKeyScan]:
    """decode_batch_keys in parts: the validated header and a scan of its (inflated)
    records to run a part at a time, then ``check_key_deltas``."""
    header = validate_batch(buf, pos)
    with memoryview(buf) as view:
        payload: Buffer = view[pos + BATCH_HEADER_SIZE : pos + header.size]
        if header.compression is not Compression.NONE:
            payload = decompress(header.compression, payload, max_size=DECOMPRESSED_SIZE_BYTES_MAX)
        scan = RecordKeyScan(payload, header.records_count)
    return header, scan


def check_key_deltas(header: BatchHeader, keys: list[RecordKey], pos: int = 0) -> list[RecordKey]:
    """``keys`` if their offset deltas increase within the batch's last offset delta."""
    previous = -1
    for delta, _, _ in keys:
        if delta <= previous or delta > header.last_offset_delta:
            raise InvalidRecordError(f"batch at {pos} has offset delta {delta} after {previous}")
        previous = delta
    return keys


def _check_offset_deltas(records: list[Record], header: BatchHeader, pos: int) -> None:
    # Compaction may leave gaps, but deltas always increase and stay within lastOffsetDelta;
    # anything else would give two records one offset or a record past the batch's end.
    previous = -1
    for record in records:
        delta = record.offset_delta
        assert delta is not None  # decode_records always fills it
        if delta <= previous or delta > header.last_offset_delta:
            raise InvalidRecordError(
                f"batch at {pos} has offset delta {delta} after {previous} "
                f"(last offset delta {header.last_offset_delta})"
            )
        previous = delta
