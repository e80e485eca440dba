"""Varints, the record layout and control-record keys (log.records)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.errors import CorruptRecordError, InvalidRecordError
from log.records import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    ControlRecordType,
    Header,
    Record,
    decode_control_key,
    decode_records,
    decode_varint,
    decode_varlong,
    encode_control_key,
    encode_record,
    encode_varint,
    encode_varlong,
    scan_record_keys,
)

# Zigzag varints as Kafka's ByteUtils writes them.
VARINT_VECTORS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (-65, "8101"),
    (300, "d804"),
    (INT32_MAX, "feffffff0f"),
    (INT32_MIN, "ffffffff0f"),
]
VARLONG_VECTORS = [
    *VARINT_VECTORS,
    (INT64_MAX, "feffffffffffffffff01"),
    (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "encoded"), VARINT_VECTORS)
def test_varint_matches_kafka_zigzag_encoding(value: int, encoded: str) -> None:
    assert encode_varint(value).hex() == encoded
    assert decode_varint(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@pytest.mark.parametrize(("value", "encoded"), VARLONG_VECTORS)
def test_varlong_matches_kafka_zigzag_encoding(value: int, encoded: str) -> None:
    assert encode_varlong(value).hex() == encoded
    assert decode_varlong(bytes.fromhex(encoded), 0) == (value, len(encoded) // 2)


@given(st.integers(INT32_MIN, INT32_MAX), st.binary(max_size=4))
def test_varint_round_trips_at_any_position(value: int, prefix: bytes) -> None:
    buf = prefix + encode_varint(value) + b"trailing"
    assert decode_varint(buf, len(prefix)) == (value, len(buf) - len(b"trailing"))


@given(st.integers(INT64_MIN, INT64_MAX))
def test_varlong_round_trips(value: int) -> None:
    encoded = encode_varlong(value)
    assert decode_varlong(memoryview(encoded), 0) == (value, len(encoded))


@pytest.mark.parametrize(
    "encoded",
    [
        "ffffffff1f",  # 5 bytes, but the value needs 33 bits
        "ffffffffff01",  # 6 bytes
        "8080808080808080808000",  # 11 bytes is too long even for a varlong
    ],
)
def test_varint_overflow_is_corrupt(encoded: str) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(bytes.fromhex(encoded), 0)


@pytest.mark.parametrize(
    "encoded",
    ["ffffffffffffffffff02", "ffffffffffffffffffff01", "8080808080808080808000"],
)
def test_varlong_overflow_is_corrupt(encoded: str) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varlong(bytes.fromhex(encoded), 0)


@pytest.mark.parametrize("encoded", ["", "80", "ffff", "ffffffff"])
def test_truncated_varint_is_corrupt(encoded: str) -> None:
    with pytest.raises(CorruptRecordError):
        decode_varint(bytes.fromhex(encoded), 0)
    with pytest.raises(CorruptRecordError):
        decode_varlong(bytes.fromhex(encoded), 0)


def test_encoding_values_outside_the_type_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        encode_varint(INT32_MAX + 1)
    with pytest.raises(ValueError):
        encode_varlong(INT64_MIN - 1)


header_strategy = st.builds(
    Header, key=st.text(max_size=8), value=st.none() | st.binary(max_size=16)
)
record_strategy = st.builds(
    Record,
    key=st.none() | st.binary(max_size=40),
    value=st.none() | st.binary(max_size=300),
    timestamp=st.integers(0, 1 << 45),
    headers=st.lists(header_strategy, max_size=4).map(tuple),
    attributes=st.integers(-128, 127),
)


@given(st.lists(record_strategy, min_size=1, max_size=12), st.integers(0, 1 << 40))
def test_records_round_trip(records: list[Record], base_timestamp: int) -> None:
    payload = b"".join(
        encode_record(record, 3 * index, record.timestamp - base_timestamp)
        for index, record in enumerate(records)
    )
    decoded = decode_records(payload, len(records), 0, base_timestamp)
    assert decoded == [
        Record(r.key, r.value, r.timestamp, r.headers, 3 * index, r.attributes)
        for index, r in enumerate(records)
    ]


@given(st.lists(record_strategy, min_size=1, max_size=12), st.integers(0, 1 << 40))
def test_the_cleaners_key_scan_agrees_with_the_full_decode(
    records: list[Record], base_timestamp: int
) -> None:
    payload = b"".join(
        encode_record(record, 2 * index, record.timestamp - base_timestamp)
        for index, record in enumerate(records)
    )
    assert scan_record_keys(payload, len(records)) == [
        (2 * index, r.key, r.value is not None) for index, r in enumerate(records)
    ]
    with pytest.raises((CorruptRecordError, InvalidRecordError)):
        scan_record_keys(payload[:-1], len(records))  # a record cut short


def test_log_append_time_replaces_every_record_timestamp() -> None:
    payload = encode_record(Record(b"k", b"v", 5), 0, 5) + encode_record(
        Record(b"k", b"v", 9), 1, 9
    )
    decoded = decode_records(payload, 2, 0, 0, log_append_time_ms=1234)
    assert [r.timestamp for r in decoded] == [1234, 1234]


def test_record_wire_layout_matches_kafka() -> None:
    record = Record(b"k", b"vv", 0, (Header("h", None),), attributes=0)
    # length 9, attrs, tsDelta 1, offsetDelta 2, key, value, 1 header ("h", null)
    assert encode_record(record, 2, 1).hex() == "18" + "000204026b04767602026801"


ONE_RECORD = encode_record(Record(b"key", b"value", 10, (Header("h", b"x"),)), 0, 0)


def test_fewer_records_than_declared_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        decode_records(ONE_RECORD * 2, 3, 0, 0)
    with pytest.raises(InvalidRecordError):
        decode_records(ONE_RECORD, 1000, 0, 0)


def test_bytes_after_the_declared_records_are_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        decode_records(ONE_RECORD * 2, 1, 0, 0)


def test_negative_record_count_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_records(ONE_RECORD, -1, 0, 0)


def test_record_length_longer_than_the_payload_is_corrupt() -> None:
    lying = encode_varint(len(ONE_RECORD) + 5) + ONE_RECORD[1:]
    with pytest.raises(CorruptRecordError):
        decode_records(lying, 1, 0, 0)


def test_record_length_disagreeing_with_its_fields_is_corrupt() -> None:
    body = ONE_RECORD[1:]
    short = encode_varint(len(body) - 1) + body[:-1] + encode_record(Record(None, None, 0), 1, 0)
    with pytest.raises(CorruptRecordError):
        decode_records(short, 2, 0, 0)
    long = encode_varint(len(body) + 1) + body + b"\x00"
    with pytest.raises(CorruptRecordError):
        decode_records(long, 1, 0, 0)


def record_bytes(*fields: bytes) -> bytes:
    body = b"".join(fields)
    return encode_varint(len(body)) + body


@pytest.mark.parametrize(
    "fields",
    [
        (b"\x00", b"\x00", b"\x00", encode_varint(-2), b"\x00", b"\x00"),  # key length -2
        (b"\x00", b"\x00", b"\x00", b"\x01", encode_varint(-5), b"\x00"),  # value length -5
        (b"\x00", b"\x00", b"\x00", encode_varint(50), b"abc", b"\x00\x00"),  # key too long
        (b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_varint(-1)),  # header count -1
        (b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", b"\x02", b"\x01", b"\x01"),  # null hdr key
        (b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", b"\x02", b"\x04\xff\xfe", b"\x01"),  # utf-8
        (b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", b"\x02\x00", b"\x07"),  # header value -4
        (b"\x00", b"\x00", b"\x00", b"\x01", b"\x01", encode_varint(1000)),  # header count lie
        (b"\x00", bytes.fromhex("ffffffffffffffffffff01"), b"\x00", b"\x01", b"\x01", b"\x00"),
        (b"\x00", b"\x00", bytes.fromhex("ffffffffff01"), b"\x01", b"\x01", b"\x00"),
        (b"\x00", b"\x00", b"\x00", b"\x04ab", b"\x01"),  # missing header count
    ],
    ids=[
        "key-length",
        "value-length",
        "key-past-end",
        "header-count",
        "null-header-key",
        "header-key-not-utf8",
        "header-value-length",
        "header-count-past-end",
        "timestamp-varlong-overflow",
        "offset-varint-overflow",
        "truncated",
    ],
)
def test_malformed_record_fields_are_corrupt(fields: tuple[bytes, ...]) -> None:
    with pytest.raises(CorruptRecordError):
        decode_records(record_bytes(*fields), 1, 0, 0)


def test_empty_record_is_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        decode_records(b"\x00" * 7, 1, 0, 0)


@pytest.mark.parametrize("record_type", list(ControlRecordType))
def test_control_key_is_version_then_type(record_type: ControlRecordType) -> None:
    key = encode_control_key(record_type)
    assert key == b"\x00\x00" + int(record_type).to_bytes(2, "big")
    assert decode_control_key(key) is record_type


def test_control_key_from_a_later_version_with_extra_fields_is_read() -> None:
    assert decode_control_key(b"\x00\x01\x00\x01extra") is ControlRecordType.COMMIT


@pytest.mark.parametrize(
    "key", [None, b"", b"\x00\x00\x00", b"\x00\x00\x00\x63", b"\xff\xff\x00\x01"]
)
def test_unreadable_control_keys_are_invalid(key: bytes | None) -> None:
    with pytest.raises(InvalidRecordError):
        decode_control_key(key)
