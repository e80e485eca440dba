"""Records inside a v2 batch: zigzag varints, the record layout, and control-record keys.

Record (all lengths zigzag varints, -1 meaning null where a field is nullable):
    length, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength, key, valueLength, value, headersCount,
    headers: [keyLength (never null), key utf-8, valueLength, value]

Input comes from the network and from disks that may have torn or rotted bytes, so every
length is checked against the bytes that remain before it is used, and varints are limited
to Kafka's 5 (varint) and 10 (varlong) bytes. Any violation raises CorruptRecordError; a
payload whose records disagree with the count the batch declares raises InvalidRecordError.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import TypeAlias

from log.errors import CorruptRecordError, InvalidRecordError

Buffer: TypeAlias = bytes | bytearray | memoryview

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
VARINT_SIZE_MAX = 5
VARLONG_SIZE_MAX = 10

# length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headersCount:
# a record can never be shorter, which bounds how many records a payload can hold.
RECORD_SIZE_MIN = 7
# keyLength + valueLength of an empty header.
_HEADER_SIZE_MIN = 2
_NULL_LENGTH = -1
_SINGLE_BYTES = tuple(bytes((i,)) for i in range(0x80))
_NULL_LENGTH_BYTE = b"\x01"  # zigzag(-1)
_ZIGZAG_BYTE = tuple((byte >> 1) ^ -(byte & 1) for byte in range(0x80))  # one-byte varints


@dataclass(frozen=True, slots=True)
class Header:
    """A record header: a UTF-8 key that is never null and an optional value."""

    key: str
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Record:
    """One record: timestamp in absolute ms; offset_delta is its offset minus the batch base."""

    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: tuple[Header, ...] = ()
    offset_delta: int | None = None
    attributes: int = 0


class ControlRecordType(enum.IntEnum):
    """The type in a control record's key (Kafka's ControlRecordType ids)."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6


CONTROL_RECORD_KEY_VERSION = 0
_CONTROL_KEY = struct.Struct(">hh")


def encode_control_key(record_type: ControlRecordType) -> bytes:
    """The key of a control record: int16 version (0) followed by int16 type."""
    return _CONTROL_KEY.pack(CONTROL_RECORD_KEY_VERSION, ControlRecordType(record_type))


def decode_control_key(key: bytes | None) -> ControlRecordType:
    """The type a control record's key names; InvalidRecordError if it names none we know."""
    # Kafka lets later key versions append fields, so only the first 4 bytes are read.
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecordError(f"control record key {key!r} is shorter than 4 bytes")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"control record key has negative version {version}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        raise InvalidRecordError(f"unknown control record type {type_id}") from None


def encode_varint(value: int) -> bytes:
    """Kafka's varint: an int32, zigzag encoded in 1-5 bytes."""
    if not INT32_MIN <= value <= INT32_MAX:
        raise ValueError(f"varint {value} is outside int32")
    return _encode_unsigned((value << 1) ^ (value >> 31))


def encode_varlong(value: int) -> bytes:
    """Kafka's varlong: an int64, zigzag encoded in 1-10 bytes."""
    if not INT64_MIN <= value <= INT64_MAX:
        raise ValueError(f"varlong {value} is outside int64")
    return _encode_unsigned((value << 1) ^ (value >> 63))


def _encode_unsigned(unsigned: int) -> bytes:
    if unsigned < 0x80:
        return _SINGLE_BYTES[unsigned]
    out = bytearray()
    while unsigned >= 0x80:  # at most 9 passes: callers pass values below 2**64
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def decode_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a varint at pos: (value, position after it). CorruptRecordError if over int32."""
    try:
        byte = buf[pos]
    except IndexError:
        raise CorruptRecordError(f"varint at {pos} starts past the end") from None
    if byte < 0x80:  # the common case: one byte, values -64..63
        return (byte >> 1) ^ -(byte & 1), pos + 1
    unsigned, pos = _decode_unsigned(buf, pos, VARINT_SIZE_MAX, 32)
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def decode_varlong(buf: Buffer, pos: int) -> tuple[int, int]:
    """Read a varlong at pos: (value, position after it). CorruptRecordError if over int64."""
    try:
        byte = buf[pos]
    except IndexError:
        raise CorruptRecordError(f"varlong at {pos} starts past the end") from None
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos + 1
    unsigned, pos = _decode_unsigned(buf, pos, VARLONG_SIZE_MAX, 64)
    return (unsigned >> 1) ^ -(unsigned & 1), pos


def _decode_unsigned(buf: Buffer, pos: int, size_max: int, bits: int) -> tuple[int, int]:
    unsigned = 0
    for index in range(size_max):
        try:
            byte = buf[pos + index]
        except IndexError:
            raise CorruptRecordError(f"varint at {pos} runs past the end") from None
        unsigned |= (byte & 0x7F) << (7 * index)
        if byte < 0x80:
            if unsigned >> bits:
                raise CorruptRecordError(f"varint at {pos} overflows {bits} bits")
            return unsigned, pos + index + 1
    raise CorruptRecordError(f"varint at {pos} is longer than {size_max} bytes")


def encode_record(record: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    """One record in wire form, its length prefix included."""
    if not -128 <= record.attributes <= 127:
        raise ValueError(f"record attributes {record.attributes} do not fit in int8")
    body = bytearray((record.attributes & 0xFF,))
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    _append_nullable(body, record.key)
    _append_nullable(body, record.value)
    body += encode_varint(len(record.headers))
    for header in record.headers:
        key = header.key.encode("utf-8")
        body += encode_varint(len(key))
        body += key
        _append_nullable(body, header.value)
    return encode_varint(len(body)) + body


def _append_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _NULL_LENGTH_BYTE
    else:
        out += encode_varint(len(data))
        out += data


def decode_records(
    payload: Buffer,
    count: int,
    base_offset: int,
    base_timestamp: int,
    *,
    log_append_time_ms: int | None = None,
) -> list[Record]:
    """Decode exactly ``count`` records filling ``payload`` (an uncompressed records section).

    base_offset only names records in error messages. A log-append-time batch passes its
    maxTimestamp as log_append_time_ms: as in Kafka, that is then every record's timestamp.
    """
    # One copy up front: indexing and slicing bytes is much cheaper than a memoryview, and
    # keys and values must become bytes anyway.
    data = payload if type(payload) is bytes else bytes(payload)
    end = len(data)
    if count < 0:
        raise CorruptRecordError(f"negative record count {count}")
    if count > end // RECORD_SIZE_MIN:
        raise InvalidRecordError(
            f"batch declares {count} records but its {end} bytes hold at most "
            f"{end // RECORD_SIZE_MIN}"
        )
    records: list[Record] = []
    pos = 0
    for index in range(count):
        if pos >= end:
            raise InvalidRecordError(f"batch declares {count} records but holds {index}")
        length, pos = decode_varint(data, pos)
        record_end = pos + length
        if length <= 0 or record_end > end:
            raise CorruptRecordError(
                f"record at offset {base_offset + index} claims {length} bytes, {end - pos} remain"
            )
        try:
            record, pos = _decode_record(data, pos, record_end, base_timestamp, log_append_time_ms)
        except IndexError:
            raise CorruptRecordError(
                f"record at offset {base_offset + index} runs past the end of the batch"
            ) from None
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"record at offset {base_offset + index}: {exc}") from None
        if pos != record_end:
            raise CorruptRecordError(
                f"record at offset {base_offset + index} is {length} bytes but its fields "
                f"take {length + pos - record_end}"
            )
        records.append(record)
    if pos != end:
        raise InvalidRecordError(
            f"{end - pos} bytes remain after the {count} records the batch declares"
        )
    return records


RecordKey: TypeAlias = tuple[int, bytes | None, bool]  # (offset delta, key, has a value)


def scan_record_keys(payload: Buffer, count: int) -> list[RecordKey]:
    """Each of ``count`` records' (offset delta, key, whether its value is non-null), all
    that the log cleaner decides on: values and headers are stepped over by the record's
    length, which is checked against the payload as decode_records checks it."""
    scan = RecordKeyScan(payload, count)
    scan.scan(count)
    return scan.finish()


class RecordKeyScan:
    """scan_record_keys a part at a time (``scan``), so a caller can serve its event loop
    between parts: a batch of 1 MiB may hold 1.78M records."""

    __slots__ = ("_data", "_end", "_index", "_pos", "count", "keys")

    def __init__(self, payload: Buffer, count: int) -> None:
        self._data = payload if type(payload) is bytes else bytes(payload)
        self._end = len(self._data)
        if not 0 <= count <= self._end // RECORD_SIZE_MIN:
            raise InvalidRecordError(f"batch declares {count} records in {self._end} bytes")
        self.count = count
        self.keys: list[RecordKey] = []
        self._pos = 0
        self._index = 0

    @property
    def done(self) -> bool:
        return self._index >= self.count

    def scan(self, records: int) -> None:
        """Scan up to ``records`` more records."""
        data, end, pos, keys = self._data, self._end, self._pos, self.keys
        stop = min(self.count, self._index + records)
        for index in range(self._index, stop):
            length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length <= 0 or record_end > end:
                raise CorruptRecordError(
                    f"record {index} claims {length} bytes, {end - pos} remain"
                )
            try:
                _, pos = decode_varlong(data, pos + 1)  # after the attributes: timestamp delta
                offset_delta, pos = decode_varint(data, pos)
                key, pos = _read_nullable(data, pos, record_end)
                value_length, _ = decode_varint(data, pos)
            except IndexError:
                raise CorruptRecordError(f"record {index} runs past the end of the batch") from None
            keys.append((offset_delta, key, value_length != _NULL_LENGTH))
            pos = record_end
        self._pos, self._index = pos, stop

    def finish(self) -> list[RecordKey]:
        """The keys, once every record is scanned and nothing follows the last."""
        assert self.done
        if self._pos != self._end:
            raise InvalidRecordError(
                f"{self._end - self._pos} bytes remain after the {self.count} records"
            )
        return self.keys


def _decode_record(
    data: bytes, pos: int, end: int, base_timestamp: int, log_append_time_ms: int | None
) -> tuple[Record, int]:
    """Decode the record body in data[pos:end] (after its length): (record, position after).

    This is the per-record inner loop, so one-byte varints (nearly every length and delta)
    are decoded inline; longer ones go through decode_varint. Varints may read past ``end``
    into the next record: the caller's position check then rejects the record, so only the
    slices need an explicit bound here. Reading past the payload raises IndexError, which
    the caller turns into CorruptRecordError.
    """
    attributes = data[pos]
    timestamp_delta, pos = decode_varlong(data, pos + 1)
    byte = data[pos]
    if byte < 0x80:
        offset_delta, pos = _ZIGZAG_BYTE[byte], pos + 1
    else:
        offset_delta, pos = decode_varint(data, pos)
    key, pos = _read_nullable(data, pos, end)
    value, pos = _read_nullable(data, pos, end)
    byte = data[pos]
    if byte < 0x80:
        header_count, pos = _ZIGZAG_BYTE[byte], pos + 1
    else:
        header_count, pos = decode_varint(data, pos)
    if header_count < 0 or header_count > (end - pos) // _HEADER_SIZE_MIN:
        raise CorruptRecordError(f"invalid header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        key_length, pos = decode_varint(data, pos)
        if key_length < 0 or pos + key_length > end:
            raise CorruptRecordError(f"invalid header key length {key_length}")
        try:
            header_key = data[pos : pos + key_length].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"header key is not UTF-8: {exc}") from None
        header_value, pos = _read_nullable(data, pos + key_length, end)
        headers.append(Header(header_key, header_value))
    timestamp = (
        base_timestamp + timestamp_delta if log_append_time_ms is None else log_append_time_ms
    )
    signed_attributes = attributes - 256 if attributes > 127 else attributes
    return Record(key, value, timestamp, tuple(headers), offset_delta, signed_attributes), pos


def _read_nullable(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    byte = data[pos]
    if byte < 0x80:
        length, pos = _ZIGZAG_BYTE[byte], pos + 1
    else:
        length, pos = decode_varint(data, pos)
    if length >= 0:
        if pos + length > end:
            raise CorruptRecordError(f"length {length} at {pos} runs past the record")
        return data[pos : pos + length], pos + length
    if length == _NULL_LENGTH:
        return None, pos
    raise CorruptRecordError(f"invalid length {length} at {pos}")
