"""kraft_native against its specification, log/validator.py's Python path: the same random
and mutated batches (every codec; bad CRCs, varints, counts, lengths, truncations, bombs over
the bound, out-of-range and LogAppendTime timestamps, keyless records on compacted topics,
unknown codecs, random bytes) under random topic configs reach the same verdict: the same
stored bytes and LogAppendTime, or the same error class, Kafka error code and record_errors
(and the same message, except for a codec library's own words in CORRUPT_MESSAGE).

Also: which path validate_records runs (KRAFT_NATIVE, one log line when it is Python), and
what only the native path could get wrong (bytearray input, the unchanged batch returned
as is, a bomb refused without inflating it whole)."""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import log.validator as validator
from log.batch import (
    BATCH_HEADER_SIZE,
    CREATE_TIME,
    LOG_APPEND_TIME,
    Compression,
    encode_batch,
    parse_header,
)
from log.compression import compress
from log.config import LogConfig
from log.config_defs import COMPRESSION_TYPES
from log.errors import CorruptRecordError, RecordError
from log.records import Header, Record, encode_record
from log.validator import (
    PRODUCE_DECOMPRESSED_BYTES_MAX,
    ValidatedBatch,
    validate_records_native,
    validate_records_python,
)

NOW = 1_700_000_000_000
INT64_MAX = (1 << 63) - 1
EXAMPLES = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Outcome = tuple[object, ...]
Validator = Callable[..., ValidatedBatch]


def outcome(validate: Validator, batch: bytes, config: LogConfig, max_bytes: int) -> Outcome:
    """What a validator decided, in a form two validators can be compared by."""
    try:
        validated = validate(batch, config, NOW, max_decompressed_bytes=max_bytes)
    except RecordError as error:
        # A codec library's words differ between crates; its verdict and class may not.
        message = None if isinstance(error, CorruptRecordError) else str(error)
        return ("refused", type(error), error.kafka_error_code, message, error.record_errors)
    return ("stored", bytes(validated.records), validated.log_append_time_ms)


def assert_same_verdict(batch: bytes, config: LogConfig, max_bytes: int) -> Outcome:
    expected = outcome(validate_records_python, batch, config, max_bytes)
    assert outcome(validate_records_native, batch, config, max_bytes) == expected
    return expected


# ---- batches --------------------------------------------------------------------------------

timestamps = st.one_of(
    st.integers(NOW - 10**7, NOW + 10**5),
    st.sampled_from([-1, 0, NOW - 10**12, NOW + 10**10, INT64_MAX, -(1 << 63)]),
)


def record_lists(timestamp: st.SearchStrategy[int]) -> st.SearchStrategy[list[Record]]:
    return st.lists(
        st.builds(
            Record,
            key=st.one_of(st.binary(max_size=12), st.binary(min_size=1, max_size=4), st.none()),
            value=st.none() | st.binary(max_size=200),
            timestamp=timestamp,
            headers=st.lists(
                st.builds(Header, st.text(max_size=4), st.none() | st.binary(max_size=4)),
                max_size=2,
            ).map(tuple),
        ),
        min_size=1,
        max_size=40,
    )


records_strategy = record_lists(timestamps)
# Bytes a mutation writes: varint continuation bits, zigzag -1 (null), 0 and anything.
mutation_bytes = st.one_of(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]), st.integers(0, 255))


def raw_payload(records: list[Record]) -> bytes:
    """The uncompressed records section encode_batch would write, timestamp deltas and all."""
    base = records[0].timestamp
    parts = []
    for index, record in enumerate(records):
        delta = record.timestamp - base
        if not -(1 << 63) <= delta <= INT64_MAX:  # keep the delta encodable
            record = Record(record.key, record.value, base, record.headers)
            delta = 0
        parts.append(encode_record(record, index, delta))
    return b"".join(parts)


def forge(
    payload: bytes,
    count: int,
    codec: int,
    *,
    last_offset_delta: int | None = None,
    attributes_extra: int = 0,
    base_timestamp: int = NOW,
    max_timestamp: int = NOW,
) -> bytearray:
    """A batch with a correct CRC around ``payload`` (compressed as ``codec`` when it is one
    of the five), whatever its header claims."""
    body = compress(Compression(codec), payload) if codec <= Compression.ZSTD else payload
    out = bytearray(encode_batch([Record(b"k", b"", NOW)])[:BATCH_HEADER_SIZE]) + body
    struct.pack_into(">h", out, 21, (codec & 0x07) | attributes_extra)
    struct.pack_into(">i", out, 23, count - 1 if last_offset_delta is None else last_offset_delta)
    struct.pack_into(">q", out, 27, base_timestamp)
    struct.pack_into(">q", out, 35, max_timestamp)
    struct.pack_into(">i", out, 57, count)
    reseal(out)
    return out


def reseal(batch: bytearray) -> None:
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    """One produced batch: well formed, or damaged in one of the ways a client or a hostile
    peer can damage it."""
    records = draw(records_strategy)
    codec = draw(st.sampled_from(list(Compression)))
    timestamp_type = draw(st.sampled_from([CREATE_TIME, CREATE_TIME, LOG_APPEND_TIME]))
    payload = raw_payload(records)
    count = len(records)
    base = records[0].timestamp
    mutation = draw(
        st.sampled_from(
            [
                "none",
                "payload-bytes",
                "payload-splice",
                "payload-truncate",
                "compressed-bytes",
                "bad-crc",
                "count",
                "header-field",
                "codec",
                "trailing",
                "bomb",
                "random",
                "max-timestamp",
            ]
        )
    )
    extra = 0x08 if timestamp_type == LOG_APPEND_TIME else 0
    if mutation == "none":
        return bytes(
            forge(
                payload,
                count,
                codec,
                attributes_extra=extra,
                base_timestamp=base,
                max_timestamp=max(r.timestamp for r in records),
            )
        )
    if mutation == "max-timestamp":  # any maxTimestamp: LogAppendTime batches report it
        max_timestamp = draw(timestamps)
        return bytes(
            forge(
                payload,
                count,
                codec,
                attributes_extra=extra,
                base_timestamp=base,
                max_timestamp=max_timestamp,
            )
        )
    if mutation in ("payload-bytes", "payload-splice", "payload-truncate"):
        damaged = bytearray(payload)
        if mutation == "payload-bytes":
            for _ in range(draw(st.integers(1, 4))):
                damaged[draw(st.integers(0, len(damaged) - 1))] = draw(mutation_bytes)
        elif mutation == "payload-splice":
            at = draw(st.integers(0, len(damaged)))
            cut = draw(st.integers(0, 3))
            damaged[at : at + cut] = bytes(draw(st.lists(mutation_bytes, max_size=6)))
        else:
            del damaged[draw(st.integers(0, len(damaged) - 1)) :]
        return bytes(
            forge(bytes(damaged), count, codec, attributes_extra=extra, base_timestamp=base)
        )
    batch = forge(payload, count, codec, attributes_extra=extra, base_timestamp=base)
    if mutation == "compressed-bytes":
        for _ in range(draw(st.integers(1, 3))):
            batch[draw(st.integers(BATCH_HEADER_SIZE, len(batch) - 1))] = draw(mutation_bytes)
        reseal(batch)
    elif mutation == "bad-crc":
        at = draw(st.integers(21, len(batch) - 1))
        batch[at] ^= draw(st.integers(1, 255))
    elif mutation == "count":
        count = draw(st.integers(-2, count + 3))
        delta = draw(st.sampled_from([count - 1, count, count - 2, -1]))
        struct.pack_into(">i", batch, 57, count)
        struct.pack_into(">i", batch, 23, delta)
        reseal(batch)
    elif mutation == "header-field":  # length, epoch, magic, attributes, sequence fields...
        at = draw(st.integers(8, BATCH_HEADER_SIZE - 1))
        batch[at] = draw(mutation_bytes)
        if at >= 21 or draw(st.booleans()):
            batch[17:21] = struct.pack(">I", crc32c(bytes(batch[21:])))
    elif mutation == "codec":  # a codec id 5-7, or a payload labelled with the wrong codec
        struct.pack_into(">h", batch, 21, draw(st.integers(0, 7)) | extra)
        reseal(batch)
    elif mutation == "trailing":
        batch += bytes(draw(st.lists(mutation_bytes, min_size=1, max_size=8)))
        if draw(st.booleans()):
            reseal(batch)
    elif mutation == "bomb":  # a payload that inflates far past any bound the test uses
        big = encode_record(
            Record(b"k", bytes(draw(st.sampled_from([70_000, 300_000]))), NOW), 0, 0
        )
        batch = forge(big, 1, draw(st.sampled_from(list(Compression)[1:])))
    else:
        return draw(st.binary(max_size=200))
    return bytes(batch)


configs = st.builds(
    LogConfig,
    max_message_bytes=st.sampled_from([1_048_588, 1_048_588, 200]),
    cleanup_policy=st.sampled_from([("delete",), ("delete",), ("compact",), ("compact", "delete")]),
    compression_type=st.sampled_from(sorted(COMPRESSION_TYPES)),
    message_timestamp_type=st.sampled_from(["CreateTime", "CreateTime", "LogAppendTime"]),
    message_timestamp_before_max_ms=st.sampled_from([INT64_MAX, 10**6, 10**8, 0]),
    message_timestamp_after_max_ms=st.sampled_from([3_600_000, 0, 10**12, INT64_MAX]),
)
bounds = st.sampled_from([PRODUCE_DECOMPRESSED_BYTES_MAX, 65_536, 1_000])


@EXAMPLES
@given(batch=batches(), config=configs, max_bytes=bounds)
def test_native_and_python_reach_the_same_verdict_on_any_batch(
    batch: bytes, config: LogConfig, max_bytes: int
) -> None:
    assert_same_verdict(batch, config, max_bytes)


@settings(max_examples=100, deadline=None)
@given(
    records=record_lists(st.integers(NOW - 10**7, NOW + 10**5) | st.just(-1)),
    codec=st.sampled_from(list(Compression)),
    config=configs,
)
def test_well_formed_batches_are_stored_identically(
    records: list[Record], codec: Compression, config: LogConfig
) -> None:
    batch = encode_batch(records, compression=codec, producer_id=7, producer_epoch=0)
    assert_same_verdict(batch, config, PRODUCE_DECOMPRESSED_BYTES_MAX)


@settings(max_examples=100, deadline=None)
@given(
    records=record_lists(st.integers(NOW - 10**7, NOW + 10**5) | st.just(-1)),
    codec=st.sampled_from(list(Compression)),
    config=configs,
    given_header=st.booleans(),
    as_bytearray=st.booleans(),
)
def test_the_validated_header_is_the_stored_batchs_own(
    records: list[Record],
    codec: Compression,
    config: LogConfig,
    given_header: bool,
    as_bytearray: bool,
) -> None:
    """Log.append_validated stamps and stores a batch by ValidatedBatch.header without
    parsing it again (issue 23: one parse per produced batch): on both paths, whether the
    caller parsed the header or not, and when LogAppendTime restamps or compression.type
    recompresses the batch, that header must be the one of the bytes to be stored."""
    encoded = encode_batch(records, compression=codec, producer_id=7, producer_epoch=0)
    batch: bytes | bytearray = bytearray(encoded) if as_bytearray else encoded
    header = parse_header(batch) if given_header else None
    for validate in (validate_records_native, validate_records_python):
        try:
            validated = validate(batch, config, NOW, header=header)
        except RecordError:
            continue
        assert validated.header == parse_header(validated.records)


# ---- examples of each verdict, so a regression names itself ---------------------------------


def keyed(count: int, timestamp: int = NOW) -> list[Record]:
    return [Record(b"k%d" % i, b"v" * 30, timestamp + i) for i in range(count)]


@pytest.mark.parametrize("codec", list(Compression))
def test_each_codec_stores_a_good_batch_byte_for_byte(codec: Compression) -> None:
    batch = encode_batch(keyed(50), compression=codec)
    verdict = assert_same_verdict(batch, LogConfig(), PRODUCE_DECOMPRESSED_BYTES_MAX)
    assert verdict == ("stored", batch, -1)


@pytest.mark.parametrize("codec", list(Compression)[1:])
def test_a_bomb_over_the_bound_is_corrupt_message_on_both_paths(codec: Compression) -> None:
    batch = bytes(forge(encode_record(Record(b"k", bytes(1 << 20), NOW), 0, 0), 1, codec))
    verdict = assert_same_verdict(batch, LogConfig(), 4096)
    assert verdict[:3] == ("refused", CorruptRecordError, 2)


def test_out_of_range_timestamps_are_named_record_by_record_on_both_paths() -> None:
    records = [*keyed(3), Record(b"late", b"", NOW - 10**10), Record(b"x", b"", -1)]
    batch = encode_batch(records)
    config = LogConfig(message_timestamp_before_max_ms=10**6)
    verdict = assert_same_verdict(batch, config, PRODUCE_DECOMPRESSED_BYTES_MAX)
    assert verdict[2] == 32
    assert [index for index, _ in verdict[4]] == [3]


def test_a_keyless_record_on_a_compacted_topic_is_invalid_record_on_both_paths() -> None:
    batch = encode_batch([*keyed(2), Record(None, b"v", NOW)], compression=Compression.LZ4)
    config = LogConfig(cleanup_policy=("compact",))
    verdict = assert_same_verdict(batch, config, PRODUCE_DECOMPRESSED_BYTES_MAX)
    assert verdict[2:] == (
        87,
        "Compacted topic cannot accept message without key",
        ((2, "Compacted topic cannot accept message without key"),),
    )


def test_log_append_time_and_recompression_write_the_same_bytes_on_both_paths() -> None:
    batch = encode_batch(keyed(20), compression=Compression.SNAPPY)
    for config in (
        LogConfig(message_timestamp_type="LogAppendTime"),
        LogConfig(compression_type="zstd", message_timestamp_type="LogAppendTime"),
        LogConfig(compression_type="uncompressed"),
    ):
        verdict = assert_same_verdict(batch, config, PRODUCE_DECOMPRESSED_BYTES_MAX)
        assert verdict[0] == "stored"
        assert verdict[1] != batch


def test_a_header_key_that_is_not_utf8_fails_the_timestamp_pass_on_both_paths() -> None:
    # Only the second pass (timestamps out of range) decodes header keys, as in the Python.
    record = encode_record(Record(b"k", b"v", NOW - 10**10, (Header("ab", b""),)), 0, 0)
    record = record.replace(b"ab", b"\xff\xfe")
    batch = bytes(forge(record, 1, Compression.NONE, base_timestamp=NOW - 10**10))
    config = LogConfig(message_timestamp_before_max_ms=10**6)
    verdict = assert_same_verdict(batch, config, PRODUCE_DECOMPRESSED_BYTES_MAX)
    assert verdict[:3] == ("refused", CorruptRecordError, 2)


# ---- the native path's own obligations and the dispatch -------------------------------------


def test_the_native_path_returns_an_unchanged_batch_itself_and_reads_bytearrays() -> None:
    batch = encode_batch(keyed(5))
    assert validate_records_native(batch, LogConfig(), NOW).records is batch
    mutable = bytearray(batch)
    assert validate_records_native(mutable, LogConfig(), NOW).records is mutable


def test_validate_records_runs_native_unless_kraft_native_is_0(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert validator.native_available()  # the set-up builds it; the suite runs against it
    assert validator._choose({}).native is not None
    assert validator._choose({"KRAFT_NATIVE": "1"}).native is not None
    forced = validator._choose({"KRAFT_NATIVE": "0"})
    assert forced.native is None
    monkeypatch.setattr(validator, "_dispatch", forced)
    calls: list[str] = []
    monkeypatch.setattr(
        validator,
        "validate_records_python",
        lambda *args, **kwargs: calls.append("python") or validate_records_python(*args, **kwargs),
    )
    batch = encode_batch(keyed(3))
    with caplog.at_level(logging.WARNING, logger="log.validator"):
        for _ in range(3):
            assert validator.validate_records(batch, LogConfig(), NOW).records == batch
    assert calls == ["python"] * 3
    lines = [r.getMessage() for r in caplog.records if r.name == "log.validator"]
    assert lines == ["Produced batches are validated in Python: KRAFT_NATIVE=0"]


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_concatenated_frames_and_garbage_after_them_get_the_same_verdict(
    codec: Compression,
) -> None:
    payload = raw_payload(keyed(10))
    half = len(payload) // 2
    frames = compress(codec, payload[:half]) + compress(codec, payload[half:])
    for body, stored in ((frames, True), (frames + b"\x00garbage", False)):
        batch = forge(b"", 10, 7)  # codec id 7 leaves the body as given; set the real one
        batch[BATCH_HEADER_SIZE:] = body
        struct.pack_into(">h", batch, 21, codec)
        reseal(batch)
        verdict = assert_same_verdict(bytes(batch), LogConfig(), PRODUCE_DECOMPRESSED_BYTES_MAX)
        assert (verdict[0] == "stored") is stored


def test_a_failed_zstd_payload_leaves_nothing_behind_for_the_next_batch() -> None:
    # kraft_native keeps one libzstd context between batches.
    good = encode_batch(keyed(30), compression=Compression.ZSTD)
    truncated = bytearray(good[:-7])
    reseal(truncated)
    for _ in range(3):
        refusal = outcome(validate_records_native, bytes(truncated), LogConfig(), 1 << 20)
        assert refusal[:3] == ("refused", CorruptRecordError, 2)
        assert validate_records_native(good, LogConfig(), NOW).records is good


@pytest.mark.parametrize("codec", list(Compression)[1:])
def test_a_payload_inflating_to_exactly_the_bound_passes_and_one_byte_more_does_not(
    codec: Compression,
) -> None:
    payload = raw_payload(keyed(40))
    batch = bytes(forge(payload, 40, codec))
    at_bound = assert_same_verdict(batch, LogConfig(), len(payload))
    assert at_bound[0] == "stored"
    over = assert_same_verdict(batch, LogConfig(), len(payload) - 1)
    assert over[:3] == ("refused", CorruptRecordError, 2)
