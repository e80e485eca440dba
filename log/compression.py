"""The five compression codecs a v2 batch may name, in the exact framings Kafka clients write.

Compressed batches come from the network, so decompression is bounded: output is written
into a buffer of at most ``max_size + 1`` bytes and a payload that would need more is a
decompression bomb, reported as CorruptRecordError rather than exhausting memory. Every
library failure is bad input from our point of view and becomes CorruptRecordError too, so
callers handle exactly one family of exceptions.

Framings (what Apache Kafka's clients and brokers read and write):
- gzip: RFC 1952 members (several members concatenate, as with GZIPInputStream).
- snappy: snappy-java's "xerial" stream (magic, version, compat, then length-prefixed raw
  blocks) as the Java client writes; raw snappy as librdkafka writes. Both are read.
- lz4: the LZ4 frame format (Kafka >= 0.10) with independent blocks, because Kafka's
  Lz4BlockInputStream decompresses every block on its own.
- zstd: standard zstd frames.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Callable

import cramjam
import zstandard

from log.errors import CorruptRecordError, UnsupportedCompressionError
from log.records import Buffer


class Compression(enum.IntEnum):
    """Codec ids as stored in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Far above message.max.bytes (1 MiB) times any realistic compression ratio, yet small
# enough that a hostile batch cannot take the process down.
DECOMPRESSED_SIZE_BYTES_MAX = 64 * 1024 * 1024

GZIP_LEVEL = 6  # Kafka's compression.gzip.level default (-1) means zlib's level 6
ZSTD_LEVEL = 3  # Kafka's compression.zstd.level default
SNAPPY_BLOCK_BYTES = 32 * 1024  # snappy-java's SnappyOutputStream default block size
LZ4_BLOCK_BYTES = 64 * 1024  # Kafka's Lz4BlockOutputStream default (BD = 64 KiB)

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)  # version 1, compatible since 1
_XERIAL_HEADER_SIZE = len(_XERIAL_HEADER)
_BLOCK_LENGTH = struct.Struct(">i")

_LZ4_MAGIC = 0x184D2204
_LZ4_FLG_CONTENT_SIZE = 0x08
# FLG 0x60 = version 01 + independent blocks, no checksums or content size, like Kafka's
# writer; BD 0x40 = 64 KiB blocks; 0x82 is the descriptor checksum, (xxh32(FLG BD) >> 8) & 0xFF.
_LZ4_FRAME_HEADER = struct.pack("<IBBB", _LZ4_MAGIC, 0x60, 0x40, 0x82)
_LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_BLOCK_LENGTH = struct.Struct("<I")
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000

_GZIP_SIZE_MIN = 18  # 10-byte header + 8-byte trailer
_LZ4_HEADER_WITH_SIZE = 15  # magic 4 + FLG + BD + content size 8 + HC
# A guess for payloads that do not state their size; the buffer doubles from here.
_INITIAL_CAPACITY_MIN = 64 * 1024
_INITIAL_EXPANSION = 4
_GROWTH_STEPS_MAX = 64  # capacity doubles each step, so 64 steps pass any int64 size

_STREAM_DECOMPRESSORS: dict[Compression, Callable[[Buffer, bytearray], int]] = {
    Compression.GZIP: cramjam.gzip.decompress_into,
    Compression.LZ4: cramjam.lz4.decompress_into,
    Compression.ZSTD: cramjam.zstd.decompress_into,
}


def compress(codec: Compression, data: Buffer) -> bytes:
    """Compress a records payload in the framing Kafka's Java client writes for ``codec``."""
    codec = _known_codec(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        # zlib writes mtime 0 in the gzip header, so the output is deterministic.
        deflater = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return deflater.compress(data) + deflater.flush()
    if codec is Compression.SNAPPY:
        return _xerial_compress(memoryview(data))
    if codec is Compression.LZ4:
        return _lz4_frame_compress(memoryview(data))
    return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))


def decompress(
    codec: Compression, data: Buffer, *, max_size: int = DECOMPRESSED_SIZE_BYTES_MAX
) -> bytes:
    """Decompress a whole records payload; CorruptRecordError if it is invalid or over max_size."""
    if max_size < 0:
        raise ValueError(f"max_size must not be negative, got {max_size}")
    codec = _known_codec(codec)
    if codec is Compression.NONE:
        if len(data) > max_size:
            raise CorruptRecordError(f"payload of {len(data)} bytes exceeds {max_size}")
        return bytes(data)
    if codec is Compression.SNAPPY:
        return _snappy_decompress(memoryview(data), max_size)
    return _stream_decompress(codec, data, _size_hint(codec, memoryview(data)), max_size)


def _known_codec(codec: int) -> Compression:
    try:
        return Compression(codec)
    except ValueError:
        raise UnsupportedCompressionError(f"unknown compression codec id {codec}") from None


def _xerial_compress(data: memoryview) -> bytes:
    parts = [_XERIAL_HEADER]
    for start in range(0, len(data), SNAPPY_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start : start + SNAPPY_BLOCK_BYTES]))
        parts.append(_BLOCK_LENGTH.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _lz4_frame_compress(data: memoryview) -> bytes:
    parts = [_LZ4_FRAME_HEADER]
    for start in range(0, len(data), LZ4_BLOCK_BYTES):
        chunk = data[start : start + LZ4_BLOCK_BYTES]
        block = bytes(cramjam.lz4.compress_block(chunk, store_size=False))
        if len(block) < len(chunk):
            parts.append(_LZ4_BLOCK_LENGTH.pack(len(block)))
            parts.append(block)
        else:  # incompressible: the frame format stores such a block verbatim
            parts.append(_LZ4_BLOCK_LENGTH.pack(len(chunk) | _LZ4_UNCOMPRESSED_BLOCK))
            parts.append(bytes(chunk))
    parts.append(_LZ4_END_MARK)
    return b"".join(parts)


def _snappy_decompress(data: memoryview, max_size: int) -> bytes:
    if len(data) < _XERIAL_HEADER_SIZE or data[: len(XERIAL_MAGIC)] != XERIAL_MAGIC:
        return bytes(_snappy_raw_decompress(data, max_size))
    # The version and compat words are ignored on purpose: some producers (Redpanda) write
    # them little-endian, and there has only ever been one xerial block format.
    parts: list[bytearray] = []
    total = 0
    pos = _XERIAL_HEADER_SIZE
    end = len(data)
    while pos < end:  # every pass consumes at least 4 bytes, so this ends
        if end - pos < _BLOCK_LENGTH.size:
            raise CorruptRecordError("xerial snappy stream ends inside a block length")
        (block_length,) = _BLOCK_LENGTH.unpack_from(data, pos)
        pos += _BLOCK_LENGTH.size
        if block_length <= 0 or block_length > end - pos:
            raise CorruptRecordError(f"xerial snappy block length {block_length} is invalid")
        block = _snappy_raw_decompress(data[pos : pos + block_length], max_size - total)
        total += len(block)
        parts.append(block)
        pos += block_length
    return b"".join(parts)


def _snappy_raw_decompress(block: memoryview, max_size: int) -> bytearray:
    # Raw snappy states its decompressed length up front, so the bound is checked before
    # anything is allocated.
    try:
        size = cramjam.snappy.decompress_raw_len(block)
    except Exception as exc:  # any library failure means the input is not snappy
        raise CorruptRecordError(f"invalid snappy block: {exc}") from exc
    if size > max_size:
        raise CorruptRecordError(f"snappy block of {size} bytes exceeds the {max_size} limit")
    out = bytearray(size)
    try:
        written = cramjam.snappy.decompress_raw_into(block, out)
    except Exception as exc:  # any library failure means the input is not snappy
        raise CorruptRecordError(f"invalid snappy block: {exc}") from exc
    if written != size:
        raise CorruptRecordError(f"snappy block decoded to {written} of {size} bytes")
    return out


def _size_hint(codec: Compression, data: memoryview) -> int | None:
    """The decompressed size the payload claims, if its framing records one (untrusted)."""
    if codec is Compression.GZIP:
        if len(data) >= _GZIP_SIZE_MIN:
            return int.from_bytes(data[-4:], "little")  # ISIZE of the last member
        return None
    if codec is Compression.LZ4:
        if (
            len(data) >= _LZ4_HEADER_WITH_SIZE
            and int.from_bytes(data[:4], "little") == _LZ4_MAGIC
            and data[4] & _LZ4_FLG_CONTENT_SIZE
        ):
            return int.from_bytes(data[6:14], "little")
        return None
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        return None  # not a frame header; decompression below reports it
    return size if size >= 0 else None


def _stream_decompress(codec: Compression, data: Buffer, hint: int | None, max_size: int) -> bytes:
    decompress_into = _STREAM_DECOMPRESSORS[codec]
    if hint is None:
        capacity = max(_INITIAL_CAPACITY_MIN, _INITIAL_EXPANSION * len(data))
    else:
        capacity = hint + 1
    capacity = min(capacity, max_size + 1)
    for _ in range(_GROWTH_STEPS_MAX):
        out = bytearray(capacity)
        try:
            written = decompress_into(data, out)
        except Exception as exc:  # full buffer or bad input: the library does not say which
            if capacity > max_size:
                raise CorruptRecordError(
                    f"{codec.name} payload is invalid or exceeds {max_size} bytes: {exc}"
                ) from exc
            capacity = min(2 * capacity, max_size + 1)
            continue
        if written > max_size:
            raise CorruptRecordError(f"{codec.name} payload exceeds {max_size} bytes")
        with memoryview(out) as view:
            return view[:written].tobytes()
    raise CorruptRecordError(f"{codec.name} payload did not fit in {capacity} bytes")
