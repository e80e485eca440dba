"""Byte compatibility with a real Kafka client (kafka-python) in every codec, pinned by fixed
vectors, plus the compression framings and bounds of log.compression on their own."""

from __future__ import annotations

import gzip
import random
import struct

import cramjam
import lz4.frame
import pytest
import zstandard
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from log.batch import Compression, decode_batch, encode_batch, validate_batch
from log.compression import XERIAL_MAGIC, compress, decompress
from log.errors import CorruptRecordError, UnsupportedCompressionError
from log.records import Header, Record

ALL_CODECS = list(Compression)
COMPRESSED_CODECS = [codec for codec in Compression if codec is not Compression.NONE]

# kafka-python wants (offset, timestamp, key, value, [(header key, header value)]).
KafkaRecord = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def sample_records(count: int = 12) -> list[Record]:
    """Varied records, compressible enough that kafka-python keeps its compressed batch."""
    base_ms = 1_700_000_000_000
    records = []
    for index in range(count):
        headers = (Header("trace-id", b"%08d" % index), Header("nullable", None))
        records.append(
            Record(
                key=None if index % 5 == 3 else b"key-%d" % index,
                value=None if index % 7 == 6 else b"payload %d " % index * 20,
                timestamp=base_ms + (index * 37) % 11 - 5,
                headers=headers if index % 2 else (),
            )
        )
    return records


def as_kafka_python(records: list[Record]) -> list[KafkaRecord]:
    return [
        (index, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers])
        for index, r in enumerate(records)
    ]


def build_with_kafka_python(
    records: list[Record], codec: Compression, *, transactional: bool = False
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=transactional,
        producer_id=4321,
        producer_epoch=7,
        base_sequence=100,
        batch_size=1 << 20,
    )
    for kafka_record in as_kafka_python(records):
        assert builder.append(*kafka_record) is not None
    return bytes(builder.build())


def read_with_kafka_python(batch: bytes) -> tuple[DefaultRecordBatch, list[KafkaRecord]]:
    kafka_batch = DefaultRecordBatch(batch)
    assert kafka_batch.validate_crc()
    read = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kafka_batch]
    return kafka_batch, read


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_batches_built_by_kafka_python_decode_identically(codec: Compression) -> None:
    records = sample_records()
    batch = build_with_kafka_python(records, codec, transactional=True)

    header, decoded = decode_batch(batch)

    assert header.compression is codec
    assert header.is_transactional and not header.is_control
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4321, 7, 100)
    assert header.records_count == len(records) and header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0].timestamp
    assert header.max_timestamp == max(r.timestamp for r in records)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded] == [
        (r.key, r.value, r.timestamp, r.headers) for r in records
    ]
    assert [r.offset_delta for r in decoded] == list(range(len(records)))


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_batches_we_encode_are_accepted_by_kafka_python(codec: Compression) -> None:
    records = sample_records()
    batch = encode_batch(
        records,
        base_offset=1000,
        partition_leader_epoch=3,
        compression=codec,
        producer_id=99,
        producer_epoch=2,
        base_sequence=17,
        is_transactional=True,
    )

    kafka_batch, read = read_with_kafka_python(batch)

    assert kafka_batch.compression_type == codec
    assert (kafka_batch.base_offset, kafka_batch.leader_epoch) == (1000, 3)
    assert (kafka_batch.producer_id, kafka_batch.producer_epoch) == (99, 2)
    assert kafka_batch.base_sequence == 17 and kafka_batch.is_transactional
    assert kafka_batch.max_timestamp == max(r.timestamp for r in records)
    assert read == [
        (1000 + offset, ts, key, value, headers)
        for offset, ts, key, value, headers in as_kafka_python(records)
    ]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_large_batches_round_trip_through_kafka_python_both_ways(codec: Compression) -> None:
    # Several compression blocks (snappy 32 KiB, lz4 64 KiB) and incompressible stretches.
    records = [
        Record(b"k%d" % i, bytes(range(256)) * 300 + i.to_bytes(4, "big"), 1_000 + i)
        for i in range(8)
    ]
    ours = encode_batch(records, compression=codec)
    _, read = read_with_kafka_python(ours)
    assert [value for _, _, _, value, _ in read] == [r.value for r in records]

    theirs = build_with_kafka_python(records, codec)
    _, decoded = decode_batch(theirs)
    assert [r.value for r in decoded] == [r.value for r in records]


def test_kafka_python_memory_records_reads_a_log_of_our_batches() -> None:
    records = sample_records(4)
    log = b"".join(
        encode_batch(records, base_offset=4 * i, compression=codec)
        for i, codec in enumerate(ALL_CODECS)
    )
    memory_records = MemoryRecords(log)
    offsets = []
    while (kafka_batch := memory_records.next_batch()) is not None:
        offsets.extend(record.offset for record in kafka_batch)
    assert offsets == list(range(4 * len(ALL_CODECS)))


def test_kafka_python_memory_records_builder_output_validates() -> None:
    builder = MemoryRecordsBuilder(
        magic=2, compression_type=int(Compression.ZSTD), batch_size=1 << 20
    )
    for _, timestamp, key, value, headers in as_kafka_python(sample_records()):
        assert builder.append(timestamp, key, value, headers) is not None
    builder.close()
    header, decoded = decode_batch(builder.buffer())
    assert header.compression is Compression.ZSTD and len(decoded) == len(sample_records())


# Derived once from kafka-python 3.0.12 (DefaultRecordBatchBuilder, magic 2, producer id
# 1234, epoch 5, base sequence 42) for the three records in FIXED_VECTOR_RECORDS, so
# compatibility stays pinned even if the library changes. gzip's header carries an mtime.
FIXED_VECTORS = {
    Compression.NONE: (
        "0000000000000000000000d000000000025362e4120000000000020000018bcfe568000000018bcfe568"
        "0700000000000004d200050000002a00000003a2010000000a6b65792d306c6b726166742d7079206b72"
        "6166742d7079206b726166742d7079206b726166742d7079206b726166742d7079206b726166742d7079"
        "20040a747261636506616263086e756c6c0178000e02016c6b726166742d7079206b726166742d707920"
        "6b726166742d7079206b726166742d7079206b726166742d7079206b726166742d707920001c0013040a"
        "6b65792d320102026800"
    ),
    Compression.GZIP: (
        "00000000000000000000008200000000022c112d510001000000020000018bcfe568000000018bcfe568"
        "0700000000000004d200050000002a000000031f8b0800cb72026b02ff5bc4c8c0c0c0959d5aa96b9093"
        "5d949856a25b50a940128385aba4283139952d31299923af342787b182818f89914cc31864188459c0ce"
        "31626462ca6000001d29cac39f000000"
    ),
    Compression.SNAPPY: (
        "00000000000000000000008b00000000024fd5db070002000000020000018bcfe568000000018bcfe568"
        "0700000000000004d200050000002a0000000382534e41505059000000000100000001000000469f0150"
        "a2010000000a6b65792d306c6b726166742d707920b2090054040a747261636506616263086e756c6c01"
        "78000e0201da4d003c001c0013040a6b65792d320102026800"
    ),
    Compression.LZ4: (
        "00000000000000000000008f00000000029a230f770003000000020000018bcfe568000000018bcfe568"
        "0700000000000004d200050000002a0000000304224d1868409f000000000000007647000000ff06a201"
        "0000000a6b65792d306c6b726166742d70792009001aff07040a747261636506616263086e756c6c0178"
        "000e02014d0024f001001c0013040a6b65792d32010202680000000000"
    ),
    Compression.ZSTD: (
        "00000000000000000000007d00000000021cb45f670004000000020000018bcfe568000000018bcfe568"
        "0700000000000004d200050000002a0000000328b52ffd209f1d02006403a2010000000a6b65792d306c"
        "6b726166742d707920040a747261636506616263086e756c6c0178000e0201001c001304320102026800"
        "030012133442e16ca55998"
    ),
}
FIXED_VECTOR_RECORDS = [
    Record(
        b"key-0",
        b"kraft-py " * 6,
        1_700_000_000_000,
        (Header("trace", b"abc"), Header("null", None)),
    ),
    Record(None, b"kraft-py " * 6, 1_700_000_000_007),
    Record(b"key-2", None, 1_699_999_999_990, (Header("h", b""),)),
]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_fixed_kafka_python_vectors_decode(codec: Compression) -> None:
    header, decoded = decode_batch(bytes.fromhex(FIXED_VECTORS[codec]))

    assert header.compression is codec
    assert (header.base_offset, header.partition_leader_epoch) == (0, 0)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (1234, 5, 42)
    assert (header.base_timestamp, header.max_timestamp) == (1_700_000_000_000, 1_700_000_000_007)
    assert [(r.key, r.value, r.timestamp, r.headers) for r in decoded] == [
        (r.key, r.value, r.timestamp, r.headers) for r in FIXED_VECTOR_RECORDS
    ]


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_we_encode_the_same_records_section_as_the_fixed_vectors(codec: Compression) -> None:
    """Uncompressed, our batch is byte-identical; compressed, the inner records are."""
    ours = encode_batch(
        FIXED_VECTOR_RECORDS,
        partition_leader_epoch=0,
        compression=codec,
        producer_id=1234,
        producer_epoch=5,
        base_sequence=42,
    )
    theirs = bytes.fromhex(FIXED_VECTORS[codec])
    if codec is Compression.NONE:
        assert ours == theirs
    assert ours[:8] == theirs[:8]  # baseOffset
    assert ours[12:17] == theirs[12:17]  # partitionLeaderEpoch, magic
    assert ours[21:61] == theirs[21:61]  # attributes .. recordsCount
    assert decompress(codec, ours[61:]) == decompress(codec, theirs[61:])


# ---- log.compression on its own -------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024, 200_000])
def test_compress_then_decompress_is_identity(codec: Compression, size: int) -> None:
    data = (b"abcdefgh" * (size // 8 + 1))[:size]
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_reads_xerial_framing_and_raw_snappy() -> None:
    data = b"librdkafka and the Java client frame snappy differently " * 2000
    xerial = compress(Compression.SNAPPY, data)
    assert xerial.startswith(XERIAL_MAGIC)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, xerial) == data
    assert decompress(Compression.SNAPPY, raw) == data


def test_snappy_xerial_header_words_are_not_trusted_for_byte_order() -> None:
    # Redpanda writes version/compat little-endian; Kafka's readers ignore both words.
    data = b"redpanda " * 100
    xerial = compress(Compression.SNAPPY, data)
    little_endian = XERIAL_MAGIC + struct.pack("<ii", 1, 1) + xerial[16:]
    assert decompress(Compression.SNAPPY, little_endian) == data


def test_lz4_writes_the_frame_kafka_java_reads() -> None:
    frame = compress(Compression.LZ4, bytes(200_000))
    # magic, FLG = version 01 + independent blocks, BD = 64 KiB, descriptor checksum.
    assert frame[:7] == bytes.fromhex("04224d18604082")
    assert lz4.frame.decompress(frame) == bytes(200_000)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
def test_incompressible_data_round_trips_and_kafka_python_reads_it(codec: Compression) -> None:
    # LZ4 stores such blocks verbatim (high bit of the block length set).
    noise = random.Random(7).randbytes(150_000)
    records = [Record(b"noise", noise, 0)]
    batch = encode_batch(records, compression=codec)
    assert decode_batch(batch)[1][0].value == noise
    assert read_with_kafka_python(batch)[1][0][3] == noise


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"block_linked": False},
        {"content_checksum": True},
        {"block_checksum": True},
        {"store_size": False, "block_size": lz4.frame.BLOCKSIZE_MAX256KB},
        {"compression_level": lz4.frame.COMPRESSIONLEVEL_MAX},
    ],
    ids=lambda options: ",".join(options) or "defaults",
)
def test_lz4_reads_frames_with_any_frame_options(options: dict[str, object]) -> None:
    data = bytes(range(256)) * 1000 + b"tail" * 10_000
    assert decompress(Compression.LZ4, lz4.frame.compress(data, **options)) == data


def test_gzip_reads_concatenated_members() -> None:
    assert decompress(Compression.GZIP, gzip.compress(b"one ") + gzip.compress(b"two")) == (
        b"one two"
    )


def test_zstd_reads_frames_with_and_without_content_size() -> None:
    data = b"zstd-jni streams omit the content size " * 500
    with_size = zstandard.ZstdCompressor(write_content_size=True).compress(data)
    without_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(Compression.ZSTD, with_size) == data
    assert decompress(Compression.ZSTD, without_size) == data
    assert decompress(Compression.ZSTD, without_size + with_size) == data + data


def bomb(codec: Compression) -> bytes:
    """10 MiB of zeros in ``codec``'s framing, a few KiB on the wire."""
    zeros = bytes(10 * 1024 * 1024)
    if codec is Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(zeros))
    if codec is Compression.ZSTD:  # no content size: the decoder cannot size it up front
        return zstandard.ZstdCompressor(write_content_size=False).compress(zeros)
    return compress(codec, zeros)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
def test_decompression_bomb_is_corrupt_not_memory_error(codec: Compression) -> None:
    payload = bomb(codec)
    with pytest.raises(CorruptRecordError):
        decompress(codec, payload, max_size=1024 * 1024)
    assert len(decompress(codec, payload, max_size=10 * 1024 * 1024)) == 10 * 1024 * 1024


def test_understated_size_hint_still_decodes_everything() -> None:
    # gzip's ISIZE hint comes from the last member only; here it says 1 byte of 2 MiB.
    data = bytes(range(256)) * 8192
    payload = compress(Compression.GZIP, data) + gzip.compress(b"!")
    assert decompress(Compression.GZIP, payload) == data + b"!"


def test_overstated_size_hint_is_bounded_by_max_size() -> None:
    frame = bytearray(zstandard.ZstdCompressor(write_content_size=True).compress(b"tiny"))
    assert frame[4] & 0xC0 == 0  # one-byte content size field, right after the descriptor
    frame[4] |= 0xC0  # widen it to 8 bytes claiming about 2**40 bytes
    frame[5:6] = (1 << 40).to_bytes(8, "little")
    with pytest.raises(CorruptRecordError):
        decompress(Compression.ZSTD, frame, max_size=1024)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize(
    "garbage",
    [b"", b"\xff", b"not compressed at all", bytes(range(256)), XERIAL_MAGIC + b"\xff" * 12],
    ids=["empty", "ff", "text", "bytes", "xerial-ish"],
)
def test_garbage_compressed_payload_is_corrupt(codec: Compression, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
def test_truncated_compressed_payload_is_corrupt(codec: Compression) -> None:
    payload = compress(codec, bytes(range(256)) * 400)
    for cut in (1, 5, len(payload) // 2):
        with pytest.raises(CorruptRecordError):
            decompress(codec, payload[:-cut])


def test_xerial_block_with_lying_length_is_corrupt() -> None:
    xerial = bytearray(compress(Compression.SNAPPY, b"x" * 1000))
    xerial[16:20] = struct.pack(">i", 10_000)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, xerial)
    xerial[16:20] = struct.pack(">i", -1)
    with pytest.raises(CorruptRecordError):
        decompress(Compression.SNAPPY, xerial)


def test_unknown_codec_ids_are_unsupported() -> None:
    for codec_id in (5, 6, 7):
        with pytest.raises(UnsupportedCompressionError):
            compress(codec_id, b"x")  # type: ignore[arg-type]
        with pytest.raises(UnsupportedCompressionError):
            decompress(codec_id, b"x")  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", COMPRESSED_CODECS, ids=lambda c: c.name)
def test_batch_with_garbage_compressed_records_is_corrupt(codec: Compression) -> None:
    batch = bytearray(encode_batch(sample_records(3), compression=codec))
    batch[61:] = bytes(len(batch) - 61)  # zeros where the compressed records were
    reseal(batch)
    validate_batch(batch)  # the CRC is fine: only decoding can tell
    with pytest.raises(CorruptRecordError):
        decode_batch(batch)


def reseal(batch: bytearray) -> None:
    """Recompute the CRC after a deliberate edit, so a test reaches the check behind it."""
    batch[17:21] = struct.pack(">I", crc32c(bytes(batch[21:])))
