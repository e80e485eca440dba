"""The produce-path LogValidator: well-formed batches from our encoder pass byte for byte,
every class of malformed batch (lying record count, trailing garbage, truncated or bombing
compressed payload, random damage behind a good CRC) is refused with a RecordError, and the
topic's compression.type and message.timestamp.* configs change the batch as Kafka does."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from log.batch import (
    BATCH_HEADER_SIZE,
    CREATE_TIME,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    Compression,
    decode_batch,
    encode_batch,
    validate_batch,
)
from log.compression import compress
from log.config import LogConfig
from log.errors import CorruptRecordError, InvalidRecordError, RecordError
from log.records import Header, Record, encode_record
from log.validator import RecordValidationError, validate_records, walk_records

NOW = 1_700_000_000_000
SMALL_BOMB_LIMIT = 1 << 20
CORRUPT_MESSAGE, INVALID_RECORD, INVALID_TIMESTAMP = 2, 87, 32
EXAMPLES = settings(max_examples=60, deadline=None)
ANY_TIME = LogConfig(
    message_timestamp_before_max_ms=1 << 62, message_timestamp_after_max_ms=1 << 62
)

records_strategy = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=40),
        value=st.none() | st.binary(max_size=300),
        timestamp=st.integers(NOW - 10**9, NOW + 10**6),
        headers=st.lists(
            st.builds(Header, st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
        ).map(tuple),
    ),
    min_size=1,
    max_size=150,
)
codecs = st.sampled_from(list(Compression))


def forge(payload: bytes, count: int, codec: Compression = Compression.NONE) -> bytearray:
    """A batch with a correct header and CRC around ``payload`` (uncompressed records, which
    are compressed with ``codec``), declaring ``count`` records."""
    out = bytearray(encode_batch([Record(None, b"", NOW)], compression=codec)[:BATCH_HEADER_SIZE])
    out += compress(codec, payload)
    struct.pack_into(">i", out, 23, count - 1)  # lastOffsetDelta
    struct.pack_into(">i", out, 57, count)
    reseal(out)
    return out


def reseal(batch: bytearray) -> None:
    struct.pack_into(">i", batch, 8, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


def raw(records: list[Record]) -> bytes:
    base = records[0].timestamp
    return b"".join(encode_record(r, i, r.timestamp - base) for i, r in enumerate(records))


def refused(batch: bytes | bytearray, config: LogConfig = ANY_TIME) -> RecordError:
    with pytest.raises(RecordError) as caught:
        validate_records(batch, config, NOW, max_decompressed_bytes=SMALL_BOMB_LIMIT)
    return caught.value


@EXAMPLES
@given(records_strategy, codecs)
def test_batches_from_the_encoder_pass_byte_for_byte(records: list[Record], codec: int) -> None:
    batch = encode_batch(
        records, compression=codec, producer_id=4, producer_epoch=0, base_sequence=9
    )
    validated = validate_records(batch, ANY_TIME, NOW)
    assert validated.records is batch
    assert validated.log_append_time_ms == -1


@EXAMPLES
@given(records_strategy, codecs, st.integers(-3, 3).filter(bool))
def test_a_lying_record_count_is_invalid_record(
    records: list[Record], codec: Compression, lie: int
) -> None:
    declared = max(1, len(records) + lie)
    if declared == len(records):
        declared += 1
    error = refused(forge(raw(records), declared, codec))
    assert error.kafka_error_code == INVALID_RECORD
    assert "Incorrect declared batch size" in str(error)


@EXAMPLES
@given(records_strategy, codecs, st.binary(min_size=1, max_size=20))
def test_trailing_garbage_after_the_records_is_invalid_record(
    records: list[Record], codec: Compression, garbage: bytes
) -> None:
    error = refused(forge(raw(records) + garbage, len(records), codec))
    assert error.kafka_error_code == INVALID_RECORD


@EXAMPLES
@given(records_strategy, st.sampled_from([c for c in Compression if c]), st.data())
def test_a_truncated_compressed_payload_is_refused(
    records: list[Record], codec: Compression, data: st.DataObject
) -> None:
    batch = forge(raw(records), len(records), codec)
    cut = data.draw(st.integers(1, len(batch) - BATCH_HEADER_SIZE))
    truncated = batch[: len(batch) - cut]
    reseal(truncated)
    assert refused(truncated).kafka_error_code in (CORRUPT_MESSAGE, INVALID_RECORD)


@pytest.mark.parametrize("codec", [c for c in Compression if c])
def test_a_compression_bomb_is_corrupt_message_without_inflating_it(codec: Compression) -> None:
    # 8 MiB of one record's worth of zeros: a few KiB compressed, far over the 1 MiB bound.
    bomb = forge(b"\x00" * (8 << 20), 1, codec)
    assert len(bomb) < 1 << 20
    error = refused(bomb)
    assert isinstance(error, CorruptRecordError)
    assert error.kafka_error_code == CORRUPT_MESSAGE


@settings(max_examples=300, deadline=None)
@given(records_strategy, st.data())
def test_damage_behind_a_good_crc_is_refused_or_decodes(
    records: list[Record], data: st.DataObject
) -> None:
    batch = bytearray(encode_batch(records))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1))
        batch[at] = data.draw(st.integers(0, 255))
    reseal(batch)
    try:
        validated = validate_records(batch, ANY_TIME, NOW)
    except RecordError:
        return
    # Accepted: a reader gets every declared record. The one thing Kafka accepts that our
    # full decoder refuses is a header key that is not UTF-8 (Java decodes it leniently).
    try:
        header, decoded = decode_batch(validated.records)
    except CorruptRecordError as error:
        assert "not UTF-8" in str(error)
        return
    assert len(decoded) == header.records_count


def test_record_sizes_that_disagree_with_their_fields_use_kafkas_message() -> None:
    record = bytearray(encode_record(Record(b"k", b"v", NOW), 0, 0))
    record[0] += 2  # zigzag: the length claims one byte more than its fields take
    error = refused(forge(bytes(record) + b"\x00\x00", 1))
    assert str(error) == (
        "Invalid record size: expected to read 9 bytes in record payload, but instead read 8"
    )


def test_create_time_outside_the_configured_window_is_invalid_timestamp() -> None:
    config = LogConfig(message_timestamp_before_max_ms=1_000, message_timestamp_after_max_ms=500)
    records = [
        Record(None, b"a", NOW),
        Record(None, b"b", NOW + 501),
        Record(None, b"c", NOW - 1001),
    ]
    error = refused(encode_batch(records), config)
    assert isinstance(error, RecordValidationError)
    assert error.kafka_error_code == INVALID_TIMESTAMP
    window = f"[{NOW - 1_000}, {NOW + 500}]"
    assert error.record_errors == (
        (
            1,
            f"Timestamp {NOW + 501} of message with offset 1 is out of range. "
            f"The timestamp should be within {window}",
        ),
        (
            2,
            f"Timestamp {NOW - 1001} of message with offset 2 is out of range. "
            f"The timestamp should be within {window}",
        ),
    )
    # Records without a timestamp (-1) are never out of range, as in Kafka.
    validate_records(encode_batch([Record(None, b"a", -1)]), config, NOW)


def test_producers_may_not_send_log_append_time_batches_to_log_append_time_topics() -> None:
    batch = encode_batch([Record(None, b"a", NOW - 3)], timestamp_type=LOG_APPEND_TIME)
    error = refused(batch, LogConfig(message_timestamp_type="LogAppendTime"))
    assert error.kafka_error_code == INVALID_TIMESTAMP
    assert [index for index, _ in error.record_errors] == [0]
    # Under CreateTime Kafka reads each record's time as the batch's maxTimestamp, checks
    # that, and stores the batch as CreateTime.
    header = validate_batch(validate_records(batch, ANY_TIME, NOW).records)
    assert (header.timestamp_type, header.max_timestamp) == (CREATE_TIME, NOW - 3)
    late = LogConfig(message_timestamp_before_max_ms=1)
    assert refused(batch, late).kafka_error_code == INVALID_TIMESTAMP


@EXAMPLES
@given(records_strategy, codecs)
def test_log_append_time_stamps_the_batch_in_place(records: list[Record], codec: int) -> None:
    batch = encode_batch(records, compression=codec)
    config = LogConfig(message_timestamp_type="LogAppendTime")
    validated = validate_records(batch, config, NOW + 7)
    header, decoded = decode_batch(validated.records)
    assert (header.timestamp_type, header.max_timestamp) == (LOG_APPEND_TIME, NOW + 7)
    assert validated.log_append_time_ms == NOW + 7
    assert bytes(validated.records[BATCH_HEADER_SIZE:]) == batch[BATCH_HEADER_SIZE:]
    assert {record.timestamp for record in decoded} == {NOW + 7}


@EXAMPLES
@given(records_strategy, codecs, st.sampled_from(["uncompressed", "gzip", "snappy", "lz4", "zstd"]))
def test_a_topic_codec_other_than_the_batchs_recompresses_it(
    records: list[Record], codec: int, topic_codec: str
) -> None:
    batch = encode_batch(
        records, compression=codec, producer_id=3, producer_epoch=1, base_sequence=5
    )
    validated = validate_records(batch, LogConfig(compression_type=topic_codec), NOW)
    target = Compression.NONE if topic_codec == "uncompressed" else Compression[topic_codec.upper()]
    header, decoded = decode_batch(validated.records)
    before, original = decode_batch(batch)
    assert header.compression == target
    assert (validated.records is batch) == (target == codec)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (3, 1, 5)
    assert (header.records_count, header.max_timestamp) == (
        before.records_count,
        before.max_timestamp,
    )
    assert [(r.key, r.value, r.headers, r.timestamp, r.offset_delta) for r in decoded] == [
        (r.key, r.value, r.headers, r.timestamp, r.offset_delta) for r in original
    ]


def test_recompressing_under_log_append_time_stamps_the_new_batch() -> None:
    batch = encode_batch([Record(b"k", b"v" * 100, NOW - 5)] * 3, compression=Compression.GZIP)
    config = LogConfig(compression_type="zstd", message_timestamp_type="LogAppendTime")
    header, decoded = decode_batch(validate_records(batch, config, NOW).records)
    assert (header.compression, header.timestamp_type, header.max_timestamp) == (
        Compression.ZSTD,
        LOG_APPEND_TIME,
        NOW,
    )
    assert [r.value for r in decoded] == [b"v" * 100] * 3


def test_a_wrong_max_timestamp_is_rewritten_as_kafka_does() -> None:
    stamped = bytearray(encode_batch([Record(None, b"a", NOW), Record(None, b"b", NOW + 9)]))
    struct.pack_into(">q", stamped, 35, NOW - 50)  # a maxTimestamp the records contradict
    reseal(stamped)
    fixed = validate_records(stamped, ANY_TIME, NOW).records
    header = validate_batch(fixed)
    assert (header.timestamp_type, header.max_timestamp) == (CREATE_TIME, NOW + 9)
    assert fixed[BATCH_HEADER_SIZE:] == stamped[BATCH_HEADER_SIZE:]


def test_offset_deltas_other_than_0_to_n_minus_1_are_invalid_record() -> None:
    records = [Record(None, b"a", NOW, offset_delta=0), Record(None, b"b", NOW, offset_delta=3)]
    gappy = bytearray(encode_batch(records))
    struct.pack_into(">i", gappy, 23, 1)  # lastOffsetDelta 1 for 2 records, deltas 0 and 3
    reseal(gappy)
    assert refused(gappy).kafka_error_code == INVALID_RECORD


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_a_compacted_topic_refuses_a_record_without_a_key(codec: Compression) -> None:
    compacted = LogConfig(cleanup_policy=("compact",), message_timestamp_after_max_ms=1 << 62)
    records = [Record(b"k", b"a", NOW), Record(None, b"b", NOW), Record(None, b"c", NOW)]
    error = refused(encode_batch(records, compression=codec), compacted)
    assert error.kafka_error_code == INVALID_RECORD
    assert isinstance(error, RecordValidationError)
    assert error.record_errors == ((1, "Compacted topic cannot accept message without key"),)
    keyed = encode_batch([Record(b"k", None, NOW)], compression=codec)  # a tombstone
    assert bytes(validate_records(keyed, compacted, NOW).records) == keyed
    both = replace(compacted, cleanup_policy=("compact", "delete"))
    assert refused(encode_batch(records), both).kafka_error_code == INVALID_RECORD
    validate_records(encode_batch(records), ANY_TIME, NOW)  # keys are optional elsewhere


def test_more_than_one_batch_or_a_zero_count_is_invalid_record() -> None:
    one = encode_batch([Record(None, b"a", NOW)])
    assert refused(one + one).kafka_error_code == INVALID_RECORD
    empty = forge(b"", 1)
    struct.pack_into(">i", empty, 57, 0)  # no records in an offset range of one
    reseal(empty)
    assert refused(empty).kafka_error_code == INVALID_RECORD


def test_the_walk_finds_the_first_record_at_or_after_a_timestamp() -> None:
    records = [Record(None, b"x", NOW + t) for t in (5, 1, 9, 9, 2)]
    payload = raw(records)
    found = walk_records(payload, 5, NOW + 5, stop_at_timestamp=NOW + 9).found
    assert found == (2, NOW + 9)
    assert walk_records(
        payload, 5, NOW + 5, stop_at_timestamp=NOW + 9, min_offset_delta=3
    ).found == (
        3,
        NOW + 9,
    )
    assert walk_records(payload, 5, NOW + 5, stop_at_timestamp=NOW + 10).found is None


def test_a_bad_varint_is_invalid_record() -> None:
    error = refused(forge(b"\x0c" + b"\x00" + b"\xff" * 11, 1))
    assert isinstance(error, InvalidRecordError)


def test_a_batch_over_max_message_bytes_is_refused_before_it_is_inflated() -> None:
    bomb = forge(b"\x00" * (8 << 20), 1, Compression.ZSTD)  # would be CORRUPT_MESSAGE if inflated
    error = refused(bomb, LogConfig(max_message_bytes=len(bomb) - 1))
    assert error.kafka_error_code == 10  # MESSAGE_TOO_LARGE
