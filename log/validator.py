"""Kafka's LogValidator for the produce path: every record of a produced batch is parsed
before anything is appended, and the topic's record configs are applied to the batch.

What a produced v2 batch must pass (otherwise nothing of it is stored):
- the header and CRC-32C (log.batch.validate_batch), count == lastOffsetDelta + 1 > 0;
- a compressed payload inflates within ``max_decompressed_bytes`` (a bomb is CORRUPT_MESSAGE);
- exactly ``recordsCount`` records fill the payload: every length and varint in range,
  nothing left over (INVALID_RECORD, with the messages Kafka's DefaultRecordBatch gives), and
  offset deltas 0..n-1, which every v2 client writes (Kafka would rewrite other deltas);
- per record, as Kafka's validateRecord: under CreateTime a timestamp within
  [now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms], and no
  LogAppendTime batches from producers to LogAppendTime topics (INVALID_TIMESTAMP, each
  record named by its index in the batch for Produce v8+'s record_errors).

What the broker then changes, as Kafka does:
- compression.type names a codec other than the batch's (``producer`` keeps it,
  ``uncompressed`` means none): the records are recompressed as they are;
- maxTimestamp becomes the records' largest timestamp (CreateTime) or the broker's clock
  (message.timestamp.type=LogAppendTime, which also sets the attribute bit); the CRC is
  recomputed only when a header byte changed, so a well-formed batch passes byte for byte.

The per-record walk is the hot loop of the produce path: it reads only lengths and deltas
(one- and two-byte varints inline), builds no objects, and keeps min/max timestamps so the
range check is two comparisons per batch; record errors are worked out in a second pass only
when a batch fails. In Python, a batch of more than WALK_SLICE_RECORDS records is walked in
slices between turns of the loop (validate_records_in_slices), one such batch at a time (the
ReplicaManager's lock); no await happens while any other payload is inflated, so the broker
holds at most one big inflated payload and one small one: the per-batch bound is also the
broker-wide bound on decompression memory.

This module is also the executable specification of ``kraft_native`` (native/, Rust): the
broker's validate_records runs that build's one-call-per-batch port when it is importable
and KRAFT_NATIVE is not 0, and this Python otherwise; tests/log/test_native_validator.py
holds both to the same verdict on random and mutated batches (docs/performance.md). The
native walk of the largest legal batch takes milliseconds, so it is never sliced.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import types
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from types import ModuleType

from crc32c import crc32c

from log.batch import (
    BATCH_HEADER_SIZE,
    COMPRESSION_CODEC_MASK,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    parse_header,
    validate_batch,
)
from log.compression import DECOMPRESSED_SIZE_BYTES_MAX, Compression, compress, decompress
from log.config import LogConfig
from log.config_defs import COMPRESSION_TYPES, TIMESTAMP_TYPES
from log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from log.records import INT64_MAX, INT64_MIN, decode_records, decode_varint, decode_varlong

_kraft_native: types.ModuleType | None
try:  # the Rust build of the per-record work (native/); this module stays its specification
    import kraft_native as _kraft_native
except ImportError as exc:  # not built on this machine: the Python path below does it all
    _kraft_native = None
    _NATIVE_MISSING = f"kraft_native is not importable ({exc})"
else:
    _NATIVE_MISSING = ""

logger = logging.getLogger(__name__)

NO_TIMESTAMP = -1
INVALID_TIMESTAMP = 32  # Kafka's error codes
INVALID_RECORD = 87
# The most a produced compressed batch may inflate to. Kafka streams and sets none; here a
# batch is inflated whole and walked on the event loop, so this bounds both the memory and
# the time one batch can take (a second or two for 16 MiB of the smallest records).
PRODUCE_DECOMPRESSED_BYTES_MAX = 16 * 1024 * 1024
# Records validate_records_in_slices walks per turn of the loop (~20-40 ms of CPU).
WALK_SLICE_RECORDS = 50_000

# The codec each compression.type makes the broker write (None: the producer's).
_TARGET_CODECS: dict[str, Compression | None] = {
    "producer": None,
    "uncompressed": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
_TIMESTAMP_TYPE_IDS = {"CreateTime": CREATE_TIME, "LogAppendTime": LOG_APPEND_TIME}
assert set(_TARGET_CODECS) == set(COMPRESSION_TYPES)
assert set(_TIMESTAMP_TYPE_IDS) == set(TIMESTAMP_TYPES)

_BATCH_LENGTH = struct.Struct(">i")
_BATCH_LENGTH_OFFSET = 8
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_MAX_TIMESTAMP_OFFSET = 35
_ATTRIBUTES = struct.Struct(">h")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")
# Zigzag-decoded one- and two-byte varints: nearly every length and delta in a batch.
_ZIGZAG = tuple((u >> 1) ^ -(u & 1) for u in range(1 << 7))
_ZIGZAG2 = tuple((u >> 1) ^ -(u & 1) for u in range(1 << 14))


class RecordValidationError(RecordError):
    """Records of a well-formed batch that the topic refuses (Kafka's
    RecordValidationException), each named in ``record_errors``."""

    kafka_error_code = INVALID_TIMESTAMP

    def __init__(
        self,
        message: str,
        record_errors: tuple[tuple[int, str], ...],
        kafka_error_code: int = INVALID_TIMESTAMP,
    ) -> None:
        super().__init__(message)
        self.record_errors = record_errors
        self.kafka_error_code = kafka_error_code


@dataclass(frozen=True, slots=True)
class ValidatedBatch:
    """One batch ready for Log.append_validated (CRC, counts, size and every record checked
    against the topic's configs), its header as stored, and the LogAppendTime given to it
    (-1: none)."""

    records: bytes | bytearray
    log_append_time_ms: int
    header: BatchHeader


NATIVE_ENV = "KRAFT_NATIVE"  # "0" forces the Python path (benches, differential runs)


@dataclass(slots=True)
class _Dispatch:
    """Which implementation validate_records runs, and whether that was logged yet."""

    native: ModuleType | None
    why_not: str
    logged: bool = False


def _choose(environ: Mapping[str, str]) -> _Dispatch:
    if environ.get(NATIVE_ENV, "1") == "0":
        return _Dispatch(None, f"{NATIVE_ENV}=0")
    return _Dispatch(_kraft_native, _NATIVE_MISSING)


# Chosen once per process: every node of a simulation validates with the same code.
_dispatch = _choose(os.environ)


def native_available() -> bool:
    """Whether the kraft_native extension is importable (whatever KRAFT_NATIVE says)."""
    return _kraft_native is not None


def validate_records(
    records: bytes | bytearray,
    config: LogConfig,
    now_ms: int,
    *,
    max_decompressed_bytes: int = DECOMPRESSED_SIZE_BYTES_MAX,
    header: BatchHeader | None = None,
) -> ValidatedBatch:
    """Check one produced batch as Kafka's LogValidator does and apply the topic's
    compression.type and message.timestamp.* configs; RecordError if it cannot be stored.

    Runs kraft_native when it is importable and KRAFT_NATIVE is not 0, else the Python
    specification (logging once which and why); both give the same verdict for every input.
    ``header``: the batch's header as the caller parsed it (the produce path parses it once).
    """
    dispatch = _dispatch
    if dispatch.native is not None:
        return validate_records_native(
            records, config, now_ms, max_decompressed_bytes=max_decompressed_bytes, header=header
        )
    if not dispatch.logged:
        dispatch.logged = True
        logger.warning("Produced batches are validated in Python: %s", dispatch.why_not)
    return validate_records_python(
        records, config, now_ms, max_decompressed_bytes=max_decompressed_bytes, header=header
    )


# The error classes kraft_native.validate names by number, in its order.
_NATIVE_ERRORS: dict[int, type[RecordError]] = {
    1: CorruptRecordError,
    2: InvalidRecordError,
    3: UnsupportedCompressionError,
    4: RecordTooLargeError,
}


async def validate_records_in_slices(
    records: bytes | bytearray,
    config: LogConfig,
    now_ms: int,
    *,
    max_decompressed_bytes: int = DECOMPRESSED_SIZE_BYTES_MAX,
    header: BatchHeader | None = None,
) -> ValidatedBatch:
    """validate_records, walking WALK_SLICE_RECORDS records per turn of the loop. Its
    inflated payload lives across those turns: the caller lets one such validation run at
    a time, so the broker still holds at most one big inflated payload. kraft_native, when
    it runs, validates the batch in one call."""
    if _dispatch.native is not None:
        return validate_records_native(
            records, config, now_ms, max_decompressed_bytes=max_decompressed_bytes, header=header
        )
    steps = _validation(records, config, now_ms, max_decompressed_bytes, header)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        await asyncio.sleep(0)


def validate_records_native(
    records: bytes | bytearray,
    config: LogConfig,
    now_ms: int,
    *,
    max_decompressed_bytes: int = DECOMPRESSED_SIZE_BYTES_MAX,
    header: BatchHeader | None = None,
) -> ValidatedBatch:
    """validate_records in kraft_native (one call per batch); recompression stays here so
    the stored bytes are those log/compression.py writes. ImportError if it is not built."""
    if _kraft_native is None:
        raise ImportError(_NATIVE_MISSING)
    target = _TARGET_CODECS[config.compression_type]
    timestamp_type = _TIMESTAMP_TYPE_IDS[config.message_timestamp_type]
    verdict = _kraft_native.validate(
        records,
        config.max_message_bytes,
        config.compact,
        timestamp_type,
        config.message_timestamp_before_max_ms,
        config.message_timestamp_after_max_ms,
        -1 if target is None else int(target),
        now_ms,
        max_decompressed_bytes,
    )
    kind = verdict[0]
    if kind == 0:
        _, out, log_append_time_ms, payload, max_timestamp = verdict
        if out is None:
            assert target is not None  # kraft_native returns no batch only to recompress it
            out = _recompress(records, payload, target, timestamp_type, max_timestamp)
        # kraft_native checked the header; it is parsed here only if the caller had not, or
        # if the batch was rewritten (restamped or recompressed).
        if header is None or out is not records:
            header = parse_header(out)
        return ValidatedBatch(out, log_append_time_ms, header)
    _, message, record_errors = verdict
    if kind == 5:
        raise RecordValidationError(message, tuple(record_errors))
    if kind == 6:
        raise RecordValidationError(message, tuple(record_errors), INVALID_RECORD)
    raise _NATIVE_ERRORS[kind](message)


def validate_records_python(
    records: bytes | bytearray,
    config: LogConfig,
    now_ms: int,
    *,
    max_decompressed_bytes: int = DECOMPRESSED_SIZE_BYTES_MAX,
    header: BatchHeader | None = None,
) -> ValidatedBatch:
    """validate_records in Python: the executable specification of kraft_native."""
    steps = _validation(records, config, now_ms, max_decompressed_bytes, header)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def _validation(
    records: bytes | bytearray,
    config: LogConfig,
    now_ms: int,
    max_decompressed_bytes: int,
    parsed: BatchHeader | None = None,
) -> Generator[None, None, ValidatedBatch]:
    """validate_records as steps: it yields between slices of its walk over the records."""
    header = validate_batch(records, 0, parsed)
    if header.size != len(records):
        raise InvalidRecordError("Compressed outer record has more than one batch")
    if header.size > config.max_message_bytes:  # before any inflating, as Kafka checks
        raise RecordTooLargeError(
            f"batch of {header.size} bytes exceeds max.message.bytes {config.max_message_bytes}"
        )
    count = header.records_count
    if count <= 0 or count != header.last_offset_delta + 1:
        raise InvalidRecordError(
            f"Inconsistent batch offset range [0, {header.last_offset_delta}] and count of "
            f"records {count}"
        )
    source = header.compression
    with memoryview(records) as view:
        if source is Compression.NONE:
            payload = bytes(view[BATCH_HEADER_SIZE:])
        else:
            payload = decompress(source, view[BATCH_HEADER_SIZE:], max_size=max_decompressed_bytes)
    walking = RecordWalk(payload, count, header.base_timestamp)
    while True:
        walking.step(WALK_SLICE_RECORDS)
        if walking.done:
            break
        yield
    walk = walking.result()
    if not walk.contiguous:
        raise InvalidRecordError(f"Record offset deltas are not 0..{count - 1}")
    if config.compact and walk.keyless >= 0:  # a key is all compaction keeps a record by
        raise RecordValidationError(
            "Compacted topic cannot accept message without key",
            ((walk.keyless, "Compacted topic cannot accept message without key"),),
            INVALID_RECORD,
        )
    timestamp_type = _TIMESTAMP_TYPE_IDS[config.message_timestamp_type]
    errors = _record_errors(payload, header, walk, config, now_ms, timestamp_type)
    if errors:
        raise RecordValidationError(
            "One or more records have been rejected due to invalid timestamp", tuple(errors)
        )
    if timestamp_type == LOG_APPEND_TIME:
        max_timestamp = log_append_time_ms = now_ms
    else:
        log_append_time_ms = NO_TIMESTAMP
        # A LogAppendTime batch's records all read as its maxTimestamp, as in Kafka.
        batch_log_append_time = header.timestamp_type == LOG_APPEND_TIME
        max_timestamp = header.max_timestamp if batch_log_append_time else walk.max_timestamp
    target = _TARGET_CODECS[config.compression_type]
    if target is None or target is source:
        out = _restamp(records, header, timestamp_type, max_timestamp)
    else:
        out = _recompress(records, payload, target, timestamp_type, max_timestamp)
    return ValidatedBatch(out, log_append_time_ms, header if out is records else parse_header(out))


@dataclass(frozen=True, slots=True)
class Walk:
    """What one pass over a batch's records learned (timestamps absolute)."""

    min_timestamp: int
    max_timestamp: int
    contiguous: bool  # offset deltas are exactly 0..count-1
    keyless: int  # offset delta of the first record without a key, -1 if every one has one
    found: tuple[int, int] | None  # (offset delta, timestamp) where a search stopped


_NEVER = 1 << 64  # a timestamp delta no record reaches


class RecordWalk:
    """walk_records a part at a time (``step``), so a caller can serve its event loop between
    parts: a produced batch of 1 MiB may inflate to 16 MiB of 1.78M records (7.9 s of loop on
    main). The loop body is walk_records' own, unchanged."""

    __slots__ = (
        "_base_timestamp",
        "_data",
        "_end",
        "_index",
        "_min_offset_delta",
        "_pos",
        "_stop_delta",
        "contiguous",
        "count",
        "found",
        "keyless",
        "max_delta",
        "min_delta",
    )

    def __init__(
        self,
        data: bytes,
        count: int,
        base_timestamp: int,
        *,
        stop_at_timestamp: int | None = None,
        min_offset_delta: int = 0,
    ) -> None:
        self._end = len(data)
        if count < 0 or count > self._end // 7:  # the smallest record is 7 bytes
            raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
        self._data = data
        self.count = count
        self._base_timestamp = base_timestamp
        self._stop_delta = (
            _NEVER if stop_at_timestamp is None else stop_at_timestamp - base_timestamp
        )
        self._min_offset_delta = min_offset_delta
        self._pos = 0
        self._index = 0
        self.min_delta = _NEVER
        self.max_delta = -_NEVER
        self.contiguous = True
        self.keyless = -1
        self.found: tuple[int, int] | None = None

    @property
    def done(self) -> bool:
        return self.found is not None or self._index >= self.count

    def step(self, records: int) -> None:
        """Walk up to ``records`` more records (InvalidRecordError as walk_records)."""
        data, end, base_timestamp = self._data, self._end, self._base_timestamp
        stop_delta, min_offset_delta = self._stop_delta, self._min_offset_delta
        zigzag, zigzag2 = _ZIGZAG, _ZIGZAG2
        pos, min_delta, max_delta = self._pos, self.min_delta, self.max_delta
        contiguous, keyless = self.contiguous, self.keyless
        stop = min(self.count, self._index + records)
        try:
            for index in range(self._index, stop):
                byte = data[pos]
                if byte < 0x80:
                    size, pos = zigzag[byte], pos + 1
                else:
                    second = data[pos + 1]
                    if second < 0x80:
                        size, pos = zigzag2[(byte & 0x7F) | (second << 7)], pos + 2
                    else:
                        size, pos = decode_varint(data, pos)
                record_end = pos + size
                if record_end > end:
                    raise InvalidRecordError("Incorrect declared batch size, premature EOF reached")
                if size < 6:  # attributes, timestampDelta, offsetDelta, key, value, headers
                    raise InvalidRecordError(f"Invalid record size {size}")
                pos += 1  # attributes: unused by v2 records
                byte = data[pos]
                if byte < 0x80:
                    timestamp_delta, pos = zigzag[byte], pos + 1
                else:
                    second = data[pos + 1]
                    if second < 0x80:
                        timestamp_delta, pos = zigzag2[(byte & 0x7F) | (second << 7)], pos + 2
                    else:
                        timestamp_delta, pos = decode_varlong(data, pos)
                byte = data[pos]
                if byte < 0x80:
                    offset_delta, pos = zigzag[byte], pos + 1
                else:
                    second = data[pos + 1]
                    if second < 0x80:
                        offset_delta, pos = zigzag2[(byte & 0x7F) | (second << 7)], pos + 2
                    elif data[pos + 2] < 0x80:  # deltas of 8192 on: batches of many tiny records
                        unsigned = (byte & 0x7F) | (second & 0x7F) << 7 | data[pos + 2] << 14
                        offset_delta, pos = (unsigned >> 1) ^ -(unsigned & 1), pos + 3
                    else:
                        offset_delta, pos = decode_varint(data, pos)
                if offset_delta != index:
                    contiguous = False
                byte = data[pos]
                if byte < 0x80:
                    length, pos = zigzag[byte], pos + 1
                else:
                    second = data[pos + 1]
                    if second < 0x80:
                        length, pos = zigzag2[(byte & 0x7F) | (second << 7)], pos + 2
                    else:
                        length, pos = decode_varint(data, pos)
                if length >= 0:  # the key
                    pos += length
                elif length != -1:
                    raise InvalidRecordError(f"Invalid negative key size {length}")
                elif keyless < 0:
                    keyless = offset_delta
                byte = data[pos]
                if byte < 0x80:
                    length, pos = zigzag[byte], pos + 1
                else:
                    second = data[pos + 1]
                    if second < 0x80:
                        length, pos = zigzag2[(byte & 0x7F) | (second << 7)], pos + 2
                    else:
                        length, pos = decode_varint(data, pos)
                if length >= 0:  # the value
                    pos += length
                elif length != -1:
                    raise InvalidRecordError(f"Invalid negative value size {length}")
                byte = data[pos]
                if byte < 0x80:
                    header_count, pos = zigzag[byte], pos + 1
                else:
                    second = data[pos + 1]
                    if second < 0x80:
                        header_count, pos = zigzag2[(byte & 0x7F) | (second << 7)], pos + 2
                    else:
                        header_count, pos = decode_varint(data, pos)
                if header_count:
                    if header_count < 0 or 2 * header_count > record_end - pos:
                        raise InvalidRecordError(
                            f"Found invalid number of record headers {header_count}"
                        )
                    for _ in range(header_count):
                        byte = data[pos]  # key length: never null
                        if byte < 0x80:
                            length, pos = zigzag[byte], pos + 1
                        else:
                            length, pos = decode_varint(data, pos)
                        if length < 0:
                            raise InvalidRecordError(f"Invalid negative header key size {length}")
                        pos += length
                        byte = data[pos]  # value length
                        if byte < 0x80:
                            length, pos = zigzag[byte], pos + 1
                        else:
                            length, pos = decode_varint(data, pos)
                        if length >= 0:
                            pos += length
                        elif length != -1:
                            raise InvalidRecordError(f"Invalid negative header value size {length}")
                if pos != record_end:
                    raise InvalidRecordError(
                        f"Invalid record size: expected to read {size} bytes in record payload, "
                        f"but instead read {pos - record_end + size}"
                    )
                if timestamp_delta < min_delta:
                    min_delta = timestamp_delta
                if timestamp_delta > max_delta:
                    max_delta = timestamp_delta
                if timestamp_delta >= stop_delta and offset_delta >= min_offset_delta:
                    self.found = (offset_delta, base_timestamp + timestamp_delta)
                    stop = index + 1
                    break
        except IndexError:
            raise InvalidRecordError(
                "Incorrect declared batch size, premature EOF reached"
            ) from None
        except CorruptRecordError as exc:  # a varint over 5 (10) bytes or past int32 (int64)
            raise InvalidRecordError(f"Invalid record: {exc}") from None
        self._pos, self._index = pos, stop
        self.min_delta, self.max_delta = min_delta, max_delta
        self.contiguous, self.keyless = contiguous, keyless

    def result(self) -> Walk:
        """What the walk learned, once ``done``; leftover bytes are refused then."""
        assert self.done
        low = self._base_timestamp + self.min_delta
        high = self._base_timestamp + self.max_delta
        if self.found is None and self._pos != self._end:
            raise InvalidRecordError(
                "Incorrect declared batch size, records still remaining in file"
            )
        return Walk(low, high, self.contiguous, self.keyless, self.found)


def walk_records(
    data: bytes,
    count: int,
    base_timestamp: int,
    *,
    stop_at_timestamp: int | None = None,
    min_offset_delta: int = 0,
) -> Walk:
    """Parse every record of an uncompressed records section without building objects.

    With ``stop_at_timestamp``, stop at the first record at or after it whose offset delta is
    at least ``min_offset_delta`` (ListOffsets by timestamp) and report it in ``found``.
    Raises InvalidRecordError with the messages of Kafka's DefaultRecord/DefaultRecordBatch
    for a record that runs past its length or the payload, and for leftover bytes. Each varint
    read is written out in place on purpose: a helper call per field would cost more than
    the field (bench/bench_validate.py).
    """
    walk = RecordWalk(
        data,
        count,
        base_timestamp,
        stop_at_timestamp=stop_at_timestamp,
        min_offset_delta=min_offset_delta,
    )
    walk.step(count)
    return walk.result()


def _record_errors(
    payload: bytes,
    header: BatchHeader,
    walk: Walk,
    config: LogConfig,
    now_ms: int,
    timestamp_type: int,
) -> list[tuple[int, str]]:
    """(index in batch, message) of each record whose timestamp the topic refuses: usually
    none, decided from the walk's summary without a second pass."""
    batch_log_append_time = header.timestamp_type == LOG_APPEND_TIME
    # Clamped to int64: with a *.max.ms near Long.MAX_VALUE a record could otherwise pass
    # with a timestamp no batch header can hold.
    low = max(now_ms - config.message_timestamp_before_max_ms, INT64_MIN)
    high = min(now_ms + config.message_timestamp_after_max_ms, INT64_MAX)
    if not batch_log_append_time and (
        timestamp_type == LOG_APPEND_TIME or low <= walk.min_timestamp <= walk.max_timestamp <= high
    ):
        return []
    # Some record may fail: name each one, as Kafka's validateTimestamp does.
    records = decode_records(
        payload,
        header.records_count,
        header.base_offset,
        header.base_timestamp,
        log_append_time_ms=header.max_timestamp if batch_log_append_time else None,
    )
    errors: list[tuple[int, str]] = []
    for index, record in enumerate(records):
        offset = header.base_offset + index
        if timestamp_type == CREATE_TIME and record.timestamp != NO_TIMESTAMP:
            if not low <= record.timestamp <= high:
                errors.append(
                    (
                        index,
                        f"Timestamp {record.timestamp} of message with offset {offset} is out "
                        f"of range. The timestamp should be within [{low}, {high}]",
                    )
                )
        elif batch_log_append_time:
            errors.append(
                (
                    index,
                    f"Invalid timestamp type in message at offset {offset}. Producer should "
                    "not set timestamp type to LogAppendTime.",
                )
            )
    return errors


def _attributes(attributes: int, timestamp_type: int, codec: int) -> int:
    attributes = (attributes & ~(TIMESTAMP_TYPE_MASK | COMPRESSION_CODEC_MASK)) | codec
    return attributes | TIMESTAMP_TYPE_MASK if timestamp_type == LOG_APPEND_TIME else attributes


def _restamp(
    records: bytes | bytearray, header: BatchHeader, timestamp_type: int, max_timestamp: int
) -> bytes | bytearray:
    """The batch with this timestamp type and maxTimestamp (Kafka's setMaxTimestamp): the
    same object when nothing changes, else a copy with the CRC recomputed."""
    attributes = _attributes(header.attributes, timestamp_type, header.compression)
    if attributes == header.attributes and max_timestamp == header.max_timestamp:
        return records
    return _seal(bytearray(records), attributes, max_timestamp)


def _recompress(
    records: bytes | bytearray,
    payload: bytes,
    target: Compression,
    timestamp_type: int,
    max_timestamp: int,
) -> bytearray:
    """The batch with its records (as they are) compressed with ``target`` instead."""
    out = bytearray(records[:BATCH_HEADER_SIZE])
    out += compress(target, payload)
    _BATCH_LENGTH.pack_into(out, _BATCH_LENGTH_OFFSET, len(out) - LOG_OVERHEAD)
    (attributes,) = _ATTRIBUTES.unpack_from(out, _ATTRIBUTES_OFFSET)
    return _seal(out, _attributes(attributes, timestamp_type, target), max_timestamp)


def _seal(out: bytearray, attributes: int, max_timestamp: int) -> bytearray:
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_OFFSET, attributes)
    _MAX_TIMESTAMP.pack_into(out, _MAX_TIMESTAMP_OFFSET, max_timestamp)
    with memoryview(out) as view:
        _CRC.pack_into(out, _CRC_OFFSET, crc32c(view[_ATTRIBUTES_OFFSET:]))
    return out
