"""Fuzzing: whatever bytes arrive from a client or a damaged disk, the batch codec either
succeeds or raises a RecordError subclass (which the broker turns into an error code), never
IndexError, struct.error, a library exception or MemoryError."""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable

from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from log.batch import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    Compression,
    decode_batch,
    encode_batch,
    iter_batches,
    parse_header,
    validate_batch,
)
from log.errors import RecordError
from log.records import Header, Record

FUZZ = settings(max_examples=250, deadline=None)
ATTRIBUTES_AT = 21
CRC_AT = 17
BATCH_LENGTH_AT = 8
# Decoding must stay bounded even for payloads that claim to inflate enormously.
DECOMPRESSED_BYTES_MAX = 1 << 20


def reseal(batch: bytearray) -> None:
    """Fix the length and CRC so mutations reach the checks behind them."""
    struct.pack_into(">i", batch, BATCH_LENGTH_AT, len(batch) - LOG_OVERHEAD)
    struct.pack_into(">I", batch, CRC_AT, crc32c(bytes(batch[ATTRIBUTES_AT:])))


def decode(buf: bytes | bytearray, pos: int = 0) -> None:
    decode_batch(buf, pos, max_decompressed_bytes=DECOMPRESSED_BYTES_MAX)


def walk(buf: bytes | bytearray, pos: int = 0) -> None:
    previous = -1
    for batch_pos, header in iter_batches(buf, pos):
        assert batch_pos > previous and batch_pos + header.size <= len(buf)
        previous = batch_pos


READERS: list[Callable[[bytes | bytearray], object]] = [parse_header, validate_batch, walk, decode]


def assert_only_record_errors(buf: bytes | bytearray) -> None:
    """Every reader either accepts buf or raises RecordError; acceptance is consistent."""
    for reader in READERS:
        with contextlib.suppress(RecordError):
            reader(buf)
    try:
        header, records = decode_batch(buf, max_decompressed_bytes=DECOMPRESSED_BYTES_MAX)
    except RecordError:
        return
    assert validate_batch(buf) == header and len(records) == header.records_count


record_strategy = st.builds(
    Record,
    key=st.none() | st.binary(max_size=16),
    value=st.none() | st.binary(max_size=64) | st.just(b"abcabcabc" * 20),
    timestamp=st.integers(0, 1 << 41),
    headers=st.lists(
        st.builds(Header, key=st.text(max_size=4), value=st.none() | st.binary(max_size=8)),
        max_size=2,
    ).map(tuple),
)
valid_batch = st.builds(
    lambda records, codec, base_offset: encode_batch(
        records, base_offset=base_offset, compression=codec
    ),
    st.lists(record_strategy, min_size=1, max_size=6),
    st.sampled_from(Compression),
    st.integers(0, 1 << 40),
)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_record_errors(data: bytes) -> None:
    assert_only_record_errors(data)


@FUZZ
@given(
    section=st.binary(max_size=200),
    attributes=st.integers(0, 0x7F),
    count=st.integers(-2, 20),
    last_offset_delta=st.integers(-2, 20),
)
def test_random_records_sections_behind_a_valid_crc_raise_only_record_errors(
    section: bytes, attributes: int, count: int, last_offset_delta: int
) -> None:
    batch = bytearray(encode_batch([Record(None, None, 0)]))
    del batch[BATCH_HEADER_SIZE:]
    batch += section
    struct.pack_into(">h", batch, ATTRIBUTES_AT, attributes)
    struct.pack_into(">i", batch, 23, last_offset_delta)
    struct.pack_into(">i", batch, 57, count)
    reseal(batch)
    assert_only_record_errors(batch)


@FUZZ
@given(batch=valid_batch, data=st.data())
def test_bit_flips_raise_only_record_errors(batch: bytes, data: st.DataObject) -> None:
    damaged = bytearray(batch)
    flips = data.draw(st.lists(st.integers(0, 8 * len(batch) - 1), min_size=1, max_size=4))
    for bit in flips:
        damaged[bit // 8] ^= 1 << (bit % 8)
    assert_only_record_errors(damaged)
    if len(damaged) >= BATCH_HEADER_SIZE:
        reseal(damaged)  # now the damage must be caught by decoding, not by the CRC
        assert_only_record_errors(damaged)


@FUZZ
@given(batch=valid_batch, data=st.data())
def test_overwritten_bytes_behind_a_valid_crc_raise_only_record_errors(
    batch: bytes, data: st.DataObject
) -> None:
    damaged = bytearray(batch)
    at = data.draw(st.integers(ATTRIBUTES_AT, len(batch) - 1))
    patch = data.draw(st.binary(min_size=1, max_size=8))
    damaged[at : at + len(patch)] = patch
    reseal(damaged)
    assert_only_record_errors(damaged)


@FUZZ
@given(batch=valid_batch, data=st.data())
def test_truncations_raise_only_record_errors(batch: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(batch) - 1))
    assert_only_record_errors(batch[:cut])
    if cut >= BATCH_HEADER_SIZE:
        shortened = bytearray(batch[:cut])
        reseal(shortened)
        assert_only_record_errors(shortened)


@FUZZ
@given(first=valid_batch, second=valid_batch, data=st.data())
def test_splices_of_two_batches_raise_only_record_errors(
    first: bytes, second: bytes, data: st.DataObject
) -> None:
    head = data.draw(st.integers(0, len(first)))
    tail = data.draw(st.integers(0, len(second)))
    spliced = bytearray(first[:head] + second[tail:])
    assert_only_record_errors(spliced)
    if len(spliced) >= BATCH_HEADER_SIZE:
        reseal(spliced)
        assert_only_record_errors(spliced)


@FUZZ
@given(batches=st.lists(valid_batch, min_size=1, max_size=4), data=st.data())
def test_walking_a_damaged_log_raises_only_record_errors(
    batches: list[bytes], data: st.DataObject
) -> None:
    log = bytearray(b"".join(batches))
    at = data.draw(st.integers(0, len(log) - 1))
    log[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(log)))
    start = data.draw(st.integers(0, len(log)))
    with contextlib.suppress(RecordError):
        walk(log[:cut], start)
