"""RecordBatch v2 framing: header parsing, CRC validation, log walking, offset assignment,
and encode/decode round trips in every codec (log.batch)."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from log.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    assign_offsets,
    decode_batch,
    encode_batch,
    iter_batches,
    parse_header,
    validate_batch,
)
from log.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionError
from log.records import (
    ControlRecordType,
    Header,
    Record,
    decode_control_key,
    encode_control_key,
    encode_record,
)

RECORDS = [
    Record(b"k0", b"v0", 1_000, (Header("h", b"1"),)),
    Record(None, b"v1", 1_010),
    Record(b"k2", None, 990),
]

# Field offsets within a batch, for tests that forge headers.
BATCH_LENGTH_AT = 8
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
RECORDS_COUNT_AT = 57


def reseal(batch: bytearray, pos: int = 0) -> None:
    """Recompute the CRC after a deliberate edit, so a test reaches the check behind it."""
    (length,) = struct.unpack_from(">i", batch, pos + BATCH_LENGTH_AT)
    crc = crc32c(bytes(batch[pos + ATTRIBUTES_AT : pos + LOG_OVERHEAD + length]))
    struct.pack_into(">I", batch, pos + CRC_AT, crc)


def forged(batch: bytes, at: int, fmt: str, value: int) -> bytearray:
    out = bytearray(batch)
    struct.pack_into(fmt, out, at, value)
    reseal(out)
    return out


def test_header_fields_and_derived_properties() -> None:
    batch = encode_batch(
        RECORDS,
        base_offset=500,
        partition_leader_epoch=9,
        compression=Compression.GZIP,
        producer_id=77,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
    )
    header = parse_header(batch)
    assert header == validate_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch, header.magic) == (500, 9, 2)
    assert header.size == len(batch) == header.batch_length + LOG_OVERHEAD
    assert (header.last_offset_delta, header.last_offset, header.next_offset) == (2, 502, 503)
    assert header.records_count == 3
    assert (header.base_timestamp, header.max_timestamp) == (1_000, 1_010)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 3, 11)
    assert header.compression is Compression.GZIP
    assert header.is_transactional and not header.is_control
    assert header.timestamp_type == 0 and not header.has_delete_horizon


def test_attribute_bits_follow_kafka() -> None:
    batch = encode_batch(
        [Record(encode_control_key(ControlRecordType.COMMIT), b"", 5)],
        compression=Compression.ZSTD,
        is_control=True,
        is_transactional=True,
        timestamp_type=1,
    )
    header = validate_batch(batch)
    assert header.attributes == 0x04 | 0x08 | 0x10 | 0x20
    assert header.is_control and header.timestamp_type == 1
    _, [record] = decode_batch(batch)
    assert decode_control_key(record.key) is ControlRecordType.COMMIT
    with_horizon = BatchHeader(**{**_fields(header), "attributes": 0x40})
    assert with_horizon.has_delete_horizon and with_horizon.compression is Compression.NONE


def _fields(header: BatchHeader) -> dict[str, int]:
    return {name: getattr(header, name) for name in BatchHeader.__dataclass_fields__}


def test_header_size_constants() -> None:
    assert BATCH_HEADER_SIZE == 61 and LOG_OVERHEAD == 12
    assert len(encode_batch([Record(None, None, 0)])) == BATCH_HEADER_SIZE + 7


def test_offset_deltas_default_to_index_and_can_be_given() -> None:
    gapped = [Record(b"a", b"1", 0, offset_delta=0), Record(b"b", b"2", 0, offset_delta=5)]
    header, decoded = decode_batch(encode_batch(gapped))
    assert header.last_offset_delta == 5 and header.records_count == 2
    assert [r.offset_delta for r in decoded] == [0, 5]
    _, decoded = decode_batch(encode_batch(RECORDS))
    assert [r.offset_delta for r in decoded] == [0, 1, 2]


def test_timestamps_are_deltas_from_the_first_record() -> None:
    header, decoded = decode_batch(encode_batch(RECORDS))
    assert header.base_timestamp == 1_000 and header.max_timestamp == 1_010
    assert [r.timestamp for r in decoded] == [1_000, 1_010, 990]


def test_log_append_time_batches_report_max_timestamp_for_every_record() -> None:
    _, decoded = decode_batch(encode_batch(RECORDS, timestamp_type=1))
    assert [r.timestamp for r in decoded] == [1_010] * 3


@pytest.mark.parametrize(
    ("records", "options"),
    [
        ([], {}),
        (RECORDS, {"timestamp_type": 2}),
        ([Record(None, None, 0, offset_delta=1), Record(None, None, 0, offset_delta=1)], {}),
        ([Record(None, None, 0, offset_delta=-1)], {}),
        (RECORDS, {"producer_epoch": 1 << 15}),
        (RECORDS, {"partition_leader_epoch": 1 << 31}),
        ([Record(None, None, 1 << 63)], {}),
    ],
    ids=["empty", "timestamp-type", "repeated-delta", "negative-delta", "epoch", "ple", "ts"],
)
def test_encoding_impossible_batches_is_a_value_error(
    records: list[Record], options: dict[str, int]
) -> None:
    with pytest.raises(ValueError):
        encode_batch(records, **options)  # type: ignore[arg-type]


def test_encoding_an_unknown_codec_is_unsupported() -> None:
    with pytest.raises(UnsupportedCompressionError):
        encode_batch(RECORDS, compression=6)  # type: ignore[arg-type]


# ---- parse_header / validate_batch on malformed input ---------------------------------

BATCH = encode_batch(RECORDS, base_offset=10)


@pytest.mark.parametrize("length", [0, 1, LOG_OVERHEAD, BATCH_HEADER_SIZE - 1, len(BATCH) - 1])
def test_short_buffer_is_corrupt(length: int) -> None:
    with pytest.raises(CorruptRecordError):
        parse_header(BATCH[:length])
    with pytest.raises(CorruptRecordError):
        validate_batch(BATCH[:length])


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_other_magic_values_are_corrupt(magic: int) -> None:
    with pytest.raises(CorruptRecordError):
        parse_header(forged(BATCH, MAGIC_AT, ">b", magic))


@pytest.mark.parametrize("length", [-1, 0, BATCH_HEADER_SIZE - LOG_OVERHEAD - 1, 1 << 30])
def test_lying_batch_length_is_corrupt(length: int) -> None:
    with pytest.raises(CorruptRecordError):
        parse_header(forged(BATCH, BATCH_LENGTH_AT, ">i", length))


def test_a_flipped_bit_anywhere_in_the_crc_range_fails_validation() -> None:
    for at in range(ATTRIBUTES_AT, len(BATCH)):
        damaged = bytearray(BATCH)
        damaged[at] ^= 0x10
        with pytest.raises(CorruptRecordError):
            validate_batch(damaged)


def test_bad_crc_is_corrupt_but_parse_header_does_not_look() -> None:
    damaged = bytearray(BATCH)
    damaged[CRC_AT] ^= 0xFF
    assert parse_header(damaged).crc != validate_batch(BATCH).crc
    with pytest.raises(CorruptRecordError):
        validate_batch(damaged)
    with pytest.raises(CorruptRecordError):
        decode_batch(damaged)


def test_negative_counts_are_corrupt() -> None:
    with pytest.raises(CorruptRecordError):
        validate_batch(forged(BATCH, RECORDS_COUNT_AT, ">i", -1))
    with pytest.raises(CorruptRecordError):
        validate_batch(forged(BATCH, LAST_OFFSET_DELTA_AT, ">i", -1))


def test_more_records_than_offsets_is_invalid() -> None:
    with pytest.raises(InvalidRecordError):
        validate_batch(forged(BATCH, LAST_OFFSET_DELTA_AT, ">i", 1))


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_codec_is_unsupported_compression(codec_id: int) -> None:
    batch = forged(BATCH, ATTRIBUTES_AT, ">h", codec_id)
    with pytest.raises(UnsupportedCompressionError):
        validate_batch(batch)
    with pytest.raises(UnsupportedCompressionError):
        decode_batch(batch)
    with pytest.raises(UnsupportedCompressionError):
        _ = parse_header(batch).compression


def test_errors_carry_kafka_error_codes() -> None:
    assert CorruptRecordError.kafka_error_code == 2
    assert InvalidRecordError.kafka_error_code == 87
    assert UnsupportedCompressionError.kafka_error_code == 76


# ---- decode_batch consistency checks -------------------------------------------------


def batch_with_records_section(section: bytes, count: int, last_offset_delta: int) -> bytearray:
    """A valid-CRC batch whose records section and counts are whatever the test says."""
    batch = bytearray(encode_batch([Record(None, None, 0)]))
    del batch[BATCH_HEADER_SIZE:]
    batch += section
    struct.pack_into(">i", batch, BATCH_LENGTH_AT, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">i", batch, LAST_OFFSET_DELTA_AT, last_offset_delta)
    struct.pack_into(">i", batch, RECORDS_COUNT_AT, count)
    reseal(batch)
    return batch


def test_record_count_mismatch_is_invalid() -> None:
    two = encode_record(RECORDS[0], 0, 0) + encode_record(RECORDS[1], 1, 0)
    with pytest.raises(InvalidRecordError):
        decode_batch(batch_with_records_section(two, 3, 2))
    with pytest.raises(InvalidRecordError):
        decode_batch(batch_with_records_section(two, 1, 2))


def test_trailing_garbage_after_records_is_invalid() -> None:
    one = encode_record(RECORDS[0], 0, 0)
    with pytest.raises(InvalidRecordError):
        decode_batch(batch_with_records_section(one + b"\x00" * 9, 1, 0))


@pytest.mark.parametrize(
    ("deltas", "last_offset_delta"),
    [((0, 0), 1), ((1, 0), 1), ((0, 2), 1), ((-1, 0), 1)],
    ids=["repeated", "decreasing", "past-last-offset-delta", "negative"],
)
def test_bad_record_offsets_are_invalid(deltas: tuple[int, int], last_offset_delta: int) -> None:
    section = b"".join(encode_record(RECORDS[0], delta, 0) for delta in deltas)
    with pytest.raises(InvalidRecordError):
        decode_batch(batch_with_records_section(section, 2, last_offset_delta))


def test_compacted_batch_with_offset_gaps_and_no_records_decodes() -> None:
    gapped = encode_record(RECORDS[0], 1, 0) + encode_record(RECORDS[1], 4, 0)
    header, decoded = decode_batch(batch_with_records_section(gapped, 2, 6))
    assert header.next_offset == 7 and [r.offset_delta for r in decoded] == [1, 4]
    header, decoded = decode_batch(batch_with_records_section(b"", 0, 6))
    assert header.records_count == 0 and decoded == []


def test_lying_record_length_inside_a_valid_batch_is_corrupt() -> None:
    record = bytearray(encode_record(RECORDS[0], 0, 0))
    record[0] = 0x7E  # length 63, more than the section holds
    with pytest.raises(CorruptRecordError):
        decode_batch(batch_with_records_section(bytes(record), 1, 0))


# ---- iter_batches --------------------------------------------------------------------


def a_log(count: int) -> bytes:
    return b"".join(
        encode_batch(RECORDS[: 1 + i % 3], base_offset=10 * i, compression=Compression(i % 5))
        for i in range(count)
    )


def test_iter_batches_walks_every_batch() -> None:
    log = a_log(7)
    positions = [pos for pos, _ in iter_batches(log)]
    headers = [header for _, header in iter_batches(log)]
    assert [h.base_offset for h in headers] == [10 * i for i in range(7)]
    assert positions[0] == 0 and positions[-1] + headers[-1].size == len(log)
    assert all(validate_batch(log, pos) == h for pos, h in zip(positions, headers, strict=True))
    assert [h.base_offset for _, h in iter_batches(log, positions[3])] == [30, 40, 50, 60]


def test_iter_batches_stops_quietly_at_a_torn_tail() -> None:
    log = a_log(3)
    positions = [pos for pos, _ in iter_batches(log)]
    last = positions[-1]
    for cut in [0, 1, 5, LOG_OVERHEAD, 17, BATCH_HEADER_SIZE, len(log) - last - 1]:
        assert [pos for pos, _ in iter_batches(log[: last + cut])] == positions[:-1]


def test_iter_batches_on_empty_or_tiny_buffers_yields_nothing() -> None:
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(BATCH[: LOG_OVERHEAD - 1])) == []
    assert list(iter_batches(BATCH, len(BATCH))) == []


def test_iter_batches_rejects_an_impossible_length_or_a_bad_complete_header() -> None:
    with pytest.raises(CorruptRecordError):
        list(iter_batches(BATCH + forged(BATCH, BATCH_LENGTH_AT, ">i", 10)))
    with pytest.raises(CorruptRecordError):
        list(iter_batches(BATCH + forged(BATCH, MAGIC_AT, ">b", 1)))


def test_iter_batches_does_not_check_crcs() -> None:
    damaged = bytearray(BATCH)
    damaged[-1] ^= 1
    assert len(list(iter_batches(damaged))) == 1


# ---- assign_offsets ------------------------------------------------------------------


def test_assign_offsets_rewrites_only_base_offset_and_leader_epoch() -> None:
    log = bytearray(a_log(3))
    second = [pos for pos, _ in iter_batches(log)][1]
    before = bytes(log)
    assign_offsets(log, second, 1_000_000, 42)
    header = validate_batch(log, second)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 42)
    changed = [i for i in range(len(log)) if log[i] != before[i]]
    assert all(second <= i < second + 16 for i in changed)
    assert decode_batch(log, second)[1] == decode_batch(before, second)[1]


def test_assign_offsets_through_a_memoryview() -> None:
    log = bytearray(BATCH)
    with memoryview(log) as view:
        assign_offsets(view, 0, 7, 1)
    assert validate_batch(log).base_offset == 7


@pytest.mark.parametrize(("base_offset", "epoch"), [(-1, 0), (1 << 63, 0), (0, -2), (0, 1 << 31)])
def test_assign_offsets_refuses_impossible_values(base_offset: int, epoch: int) -> None:
    with pytest.raises(ValueError):
        assign_offsets(bytearray(BATCH), 0, base_offset, epoch)


def test_assign_offsets_refuses_what_is_not_a_batch() -> None:
    with pytest.raises(CorruptRecordError):
        assign_offsets(bytearray(BATCH[:30]), 0, 1, 1)
    with pytest.raises(CorruptRecordError):
        assign_offsets(forged(BATCH, MAGIC_AT, ">b", 1), 0, 1, 1)


# ---- properties ----------------------------------------------------------------------

header_strategy = st.builds(
    Header, key=st.text(max_size=6), value=st.none() | st.binary(max_size=12)
)
record_strategy = st.builds(
    Record,
    key=st.none() | st.binary(max_size=24),
    value=st.none() | st.binary(max_size=200) | st.just(b"repetitive " * 30),
    timestamp=st.integers(0, 1 << 42),
    headers=st.lists(header_strategy, max_size=3).map(tuple),
    attributes=st.integers(-128, 127),
)


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(record_strategy, min_size=1, max_size=20),
    codec=st.sampled_from(Compression),
    base_offset=st.integers(0, 1 << 50),
    producer=st.tuples(st.integers(-1, 1 << 40), st.integers(-1, 32767), st.integers(-1, 1 << 30)),
    transactional=st.booleans(),
)
def test_encode_decode_round_trip_in_every_codec(
    records: list[Record],
    codec: Compression,
    base_offset: int,
    producer: tuple[int, int, int],
    transactional: bool,
) -> None:
    producer_id, producer_epoch, base_sequence = producer
    batch = encode_batch(
        records,
        base_offset=base_offset,
        compression=codec,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )
    header, decoded = decode_batch(batch)
    assert header.compression is codec and header.is_transactional is transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == producer
    assert header.records_count == len(records) and header.size == len(batch)
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert decoded == [
        Record(r.key, r.value, r.timestamp, r.headers, index, r.attributes)
        for index, r in enumerate(records)
    ]


@settings(max_examples=60, deadline=None)
@given(
    codec=st.sampled_from(Compression),
    base_offset=st.integers(0, (1 << 63) - 1),
    epoch=st.integers(-1, (1 << 31) - 1),
    leading=st.binary(max_size=30),
)
def test_assign_offsets_keeps_the_crc_valid(
    codec: Compression, base_offset: int, epoch: int, leading: bytes
) -> None:
    batch = encode_batch(RECORDS, compression=codec)
    buf = bytearray(leading + batch)
    assign_offsets(buf, len(leading), base_offset, epoch)
    header, decoded = decode_batch(buf, len(leading))
    assert (header.base_offset, header.partition_leader_epoch) == (base_offset, epoch)
    assert decoded == decode_batch(batch)[1]
