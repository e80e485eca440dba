//! kraft_native: the per-record hot path of produce validation, called once per batch.
//!
//! `log/validator.py` is the executable specification: `validate` here makes the same
//! checks in the same order and reaches the same verdict (the same error class, hence the
//! same Kafka error code, and the same messages where the Python builds them from numbers)
//! for every input; tests/log/test_native_validator.py feeds both the same random and
//! mutated batches to hold it to that. The module parses hostile bytes, which is why it is
//! safe Rust: every read is bounds-checked, every length is checked before it is used, and
//! inflation stops one byte past the caller's bound.
//!
//! What stays in Python: recompression (a topic whose compression.type differs from the
//! producer's), so the bytes written are exactly those `log/compression.py` writes, and the
//! raising of the exception classes, which live in `log/errors.py`.

use std::cell::RefCell;
use std::io::{Read, Write};

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

const BATCH_HEADER_SIZE: usize = 61;
const LOG_OVERHEAD: i64 = 12;
const BATCH_LENGTH_MIN: i64 = (BATCH_HEADER_SIZE as i64) - LOG_OVERHEAD;
const MAGIC_VALUE_V2: i8 = 2;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const MAX_TIMESTAMP_OFFSET: usize = 35;
const COMPRESSION_CODEC_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_MASK: i16 = 0x08;
const CODEC_ID_MAX: i16 = 4;
const CODEC_NONE: i16 = 0;
const CODEC_GZIP: i16 = 1;
const CODEC_SNAPPY: i16 = 2;
const CODEC_LZ4: i16 = 3;
const LOG_APPEND_TIME: i32 = 1;
const NO_TIMESTAMP: i128 = -1;
const RECORD_SIZE_MIN: usize = 7;
const VARINT_SIZE_MAX: usize = 5;
const VARLONG_SIZE_MAX: usize = 10;
const XERIAL_MAGIC: &[u8] = b"\x82SNAPPY\x00";
const XERIAL_HEADER_SIZE: usize = 16;

/// How a batch failed: the class in log/errors.py (and log/validator.py) that Python raises.
/// The discriminants are the kinds `validate` returns; log/validator.py maps them back.
enum Failure {
    Corrupt(String),                  // 1: CorruptRecordError, CORRUPT_MESSAGE
    Invalid(String),                  // 2: InvalidRecordError, INVALID_RECORD
    Unsupported(String),              // 3: UnsupportedCompressionError
    TooLarge(String),                 // 4: RecordTooLargeError, MESSAGE_TOO_LARGE
    Timestamps(Vec<(usize, String)>), // 5: RecordValidationError, INVALID_TIMESTAMP
    Keyless(i64),                     // 6: RecordValidationError, INVALID_RECORD
}

type Checked<T> = Result<T, Failure>;

/// The 61-byte v2 batch header (log/batch.py's BatchHeader, the fields validation reads).
struct Header {
    base_offset: i64,
    batch_length: i64,
    crc: u32,
    attributes: i16,
    last_offset_delta: i32,
    base_timestamp: i64,
    max_timestamp: i64,
    records_count: i32,
}

impl Header {
    fn size(&self) -> i64 {
        self.batch_length + LOG_OVERHEAD
    }
    fn codec(&self) -> i16 {
        self.attributes & COMPRESSION_CODEC_MASK
    }
    fn timestamp_type(&self) -> i32 {
        ((self.attributes & TIMESTAMP_TYPE_MASK) >> 3) as i32
    }
}

fn be_i64(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}
fn be_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}
fn be_i16(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes(buf[at..at + 2].try_into().expect("2 bytes"))
}

/// log.batch.parse_header at position 0.
fn parse_header(buf: &[u8]) -> Checked<Header> {
    let available = buf.len();
    if available < BATCH_HEADER_SIZE {
        return Err(Failure::Corrupt(format!(
            "batch at 0 needs {} header bytes, {} remain",
            BATCH_HEADER_SIZE, available
        )));
    }
    let magic = buf[16] as i8;
    if magic != MAGIC_VALUE_V2 {
        return Err(Failure::Corrupt(format!(
            "batch at 0 has magic {}, only v2 is supported",
            magic
        )));
    }
    let batch_length = be_i32(buf, 8) as i64;
    if batch_length < BATCH_LENGTH_MIN {
        return Err(Failure::Corrupt(format!(
            "batch at 0 has length {} < {}",
            batch_length, BATCH_LENGTH_MIN
        )));
    }
    if batch_length + LOG_OVERHEAD > available as i64 {
        return Err(Failure::Corrupt(format!(
            "batch at 0 claims {} bytes, {} remain",
            batch_length + LOG_OVERHEAD,
            available
        )));
    }
    Ok(Header {
        base_offset: be_i64(buf, 0),
        batch_length,
        crc: u32::from_be_bytes(buf[CRC_OFFSET..CRC_OFFSET + 4].try_into().expect("4 bytes")),
        attributes: be_i16(buf, ATTRIBUTES_OFFSET),
        last_offset_delta: be_i32(buf, 23),
        base_timestamp: be_i64(buf, 27),
        max_timestamp: be_i64(buf, MAX_TIMESTAMP_OFFSET),
        records_count: be_i32(buf, 57),
    })
}

/// log.batch.validate_batch at position 0: the header, the CRC-32C and header sanity.
fn validate_batch(buf: &[u8]) -> Checked<Header> {
    let header = parse_header(buf)?;
    let crc = crc32c::crc32c(&buf[ATTRIBUTES_OFFSET..header.size() as usize]);
    if crc != header.crc {
        return Err(Failure::Corrupt(format!(
            "batch at 0 has CRC {:#010x}, its bytes give {:#010x}",
            header.crc, crc
        )));
    }
    if header.records_count < 0 || header.last_offset_delta < 0 {
        return Err(Failure::Corrupt(format!(
            "batch at 0 has records count {} and last offset delta {}",
            header.records_count, header.last_offset_delta
        )));
    }
    if header.records_count as i64 > header.last_offset_delta as i64 + 1 {
        return Err(Failure::Invalid(format!(
            "batch at 0 declares {} records in an offset range of {}",
            header.records_count,
            header.last_offset_delta as i64 + 1
        )));
    }
    if header.codec() > CODEC_ID_MAX {
        return Err(Failure::Unsupported(format!(
            "batch at 0 uses compression codec id {}",
            header.codec()
        )));
    }
    Ok(header)
}

// ---- inflation (log/compression.py's decompress), bounded ---------------------------------

fn codec_name(codec: i16) -> &'static str {
    match codec {
        CODEC_GZIP => "GZIP",
        CODEC_SNAPPY => "SNAPPY",
        CODEC_LZ4 => "LZ4",
        _ => "ZSTD",
    }
}

/// A writer that refuses to hold more than ``limit`` bytes: the decoders write into it, so a
/// bomb stops at the bound instead of exhausting memory (cramjam's fixed buffer in Python).
struct Bounded {
    out: Vec<u8>,
    limit: usize,
}

impl Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() > self.limit - self.out.len() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "output exceeds the bound",
            ));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Inflate with cramjam's own decoder for the codec (log/compression.py's
/// _stream_decompress): any failure, the bound's included, is CORRUPT_MESSAGE.
fn decompress(codec: i16, data: &[u8], max_size: usize) -> Checked<Vec<u8>> {
    if codec == CODEC_SNAPPY {
        return snappy_decompress(data, max_size);
    }
    let mut sink = Bounded {
        out: Vec::with_capacity(data.len().saturating_mul(4).min(max_size)),
        limit: max_size,
    };
    let result = match codec {
        CODEC_GZIP => libcramjam::gzip::decompress(data, &mut sink),
        CODEC_LZ4 => libcramjam::lz4::decompress(data, &mut sink),
        _ => zstd_decompress(data, &mut sink).map(|written| written as usize),
    };
    match result {
        Ok(_) => Ok(sink.out),
        Err(exc) => Err(Failure::Corrupt(format!(
            "{} payload is invalid or exceeds {} bytes: {}",
            codec_name(codec),
            max_size,
            exc
        ))),
    }
}

thread_local! {
    /// A libzstd decompression context kept between batches: creating one costs more than
    /// inflating a batch of a few KiB. One per thread; the broker validates on one.
    static ZSTD_CONTEXT: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> =
        const { RefCell::new(None) };
}

/// A context that grew past this (a frame with a large window) is dropped, not kept.
const ZSTD_CONTEXT_KEEP_BYTES: usize = 4 << 20;

/// libcramjam::zstd::decompress (every frame to the end of the input, as
/// zstd::stream::read::Decoder reads them) on a reused context: Decoder::with_context
/// resets its session, so nothing of an earlier, perhaps failed, payload carries over.
fn zstd_decompress(data: &[u8], sink: &mut Bounded) -> std::io::Result<u64> {
    let kept = ZSTD_CONTEXT.with(|cell| cell.borrow_mut().take());
    let mut context = match kept {
        Some(context) => context,
        None => {
            let mut context = zstd::zstd_safe::DCtx::create();
            context.init().map_err(|code| {
                std::io::Error::other(zstd::zstd_safe::get_error_name(code).to_string())
            })?;
            context
        }
    };
    let result = {
        let decoder = zstd::stream::read::Decoder::with_context(data, &mut context);
        // Read straight into the output (sized by the frame's claimed content size, which is
        // only a hint) rather than through io::copy's 8 KiB buffer: half the time per batch.
        let limit = sink.limit - sink.out.len();
        if let Ok(Some(claimed)) = zstd::zstd_safe::get_frame_content_size(data) {
            sink.out
                .reserve((claimed as usize).min(limit.saturating_add(1)));
        }
        let before = sink.out.len();
        match decoder.take(limit as u64 + 1).read_to_end(&mut sink.out) {
            Ok(_) if sink.out.len() - before > limit => Err(std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                "output exceeds the bound",
            )),
            Ok(read) => Ok(read as u64),
            Err(exc) => Err(exc),
        }
    };
    if context.sizeof() <= ZSTD_CONTEXT_KEEP_BYTES {
        ZSTD_CONTEXT.with(|cell| *cell.borrow_mut() = Some(context));
    }
    result
}

/// snappy-java's xerial stream, else raw snappy (log/compression.py's _snappy_decompress).
fn snappy_decompress(data: &[u8], max_size: usize) -> Checked<Vec<u8>> {
    if data.len() < XERIAL_HEADER_SIZE || &data[..XERIAL_MAGIC.len()] != XERIAL_MAGIC {
        let mut out = Vec::new();
        snappy_raw_decompress(data, max_size, &mut out)?;
        return Ok(out);
    }
    let mut out = Vec::new();
    let mut pos = XERIAL_HEADER_SIZE;
    let end = data.len();
    while pos < end {
        if end - pos < 4 {
            return Err(Failure::Corrupt(
                "xerial snappy stream ends inside a block length".to_string(),
            ));
        }
        let block_length = be_i32(data, pos) as i64;
        pos += 4;
        if block_length <= 0 || block_length > (end - pos) as i64 {
            return Err(Failure::Corrupt(format!(
                "xerial snappy block length {} is invalid",
                block_length
            )));
        }
        let block = &data[pos..pos + block_length as usize];
        snappy_raw_decompress(block, max_size - out.len(), &mut out)?;
        pos += block_length as usize;
    }
    Ok(out)
}

/// One raw snappy block appended to ``out``; it states its length, checked before allocating.
fn snappy_raw_decompress(block: &[u8], max_size: usize, out: &mut Vec<u8>) -> Checked<()> {
    let size = snap::raw::decompress_len(block)
        .map_err(|exc| Failure::Corrupt(format!("invalid snappy block: {}", exc)))?;
    if size > max_size {
        return Err(Failure::Corrupt(format!(
            "snappy block of {} bytes exceeds the {} limit",
            size, max_size
        )));
    }
    let start = out.len();
    out.resize(start + size, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|exc| Failure::Corrupt(format!("invalid snappy block: {}", exc)))?;
    if written != size {
        return Err(Failure::Corrupt(format!(
            "snappy block decoded to {} of {} bytes",
            written, size
        )));
    }
    Ok(())
}

// ---- the record walk (log/validator.py's walk_records) -------------------------------------

/// A read past the payload (Python's IndexError) or a malformed varint (CorruptRecordError):
/// walk_records turns both into InvalidRecordError.
enum Stop {
    Eof,
    Varint(String),
}

#[inline(always)]
fn byte_at(data: &[u8], pos: usize) -> Result<u8, Stop> {
    data.get(pos).copied().ok_or(Stop::Eof)
}

/// log.records.decode_varint / decode_varlong: zigzag, at most 5 (10) bytes, within 32 (64)
/// bits. Returns (value, position after it). walk_records reads the first ``inline`` bytes of
/// a field itself (a missing one is its IndexError, premature EOF) before it hands a longer
/// varint to decode_varint (a missing byte is then "runs past the end"): both are mirrored so
/// the messages match too.
#[inline(always)]
fn read_varint(
    data: &[u8],
    pos: usize,
    inline: usize,
    size_max: usize,
    bits: u32,
) -> Result<(i64, usize), Stop> {
    let first = byte_at(data, pos)?;
    if first < 0x80 {
        let u = first as u64;
        return Ok((((u >> 1) as i64) ^ -((u & 1) as i64), pos + 1));
    }
    let mut unsigned: u64 = 0;
    for index in 0..size_max {
        let byte = match data.get(pos + index) {
            Some(byte) => *byte as u64,
            None if index < inline => return Err(Stop::Eof),
            None => return Err(Stop::Varint(format!("varint at {} runs past the end", pos))),
        };
        let shift = 7 * index as u32;
        let bits_here = byte & 0x7F;
        // Bits that land at or above 64 (only the tenth byte of a varlong can carry them).
        let overflow = shift + 7 > 64 && (bits_here >> (64 - shift)) != 0;
        unsigned |= bits_here << shift;
        if byte < 0x80 {
            if overflow || (bits < 64 && unsigned >> bits != 0) {
                return Err(Stop::Varint(format!(
                    "varint at {} overflows {} bits",
                    pos, bits
                )));
            }
            let value = ((unsigned >> 1) as i64) ^ -((unsigned & 1) as i64);
            return Ok((value, pos + index + 1));
        }
    }
    Err(Stop::Varint(format!(
        "varint at {} is longer than {} bytes",
        pos, size_max
    )))
}

/// A record field's varint (walk_records reads its first two bytes inline).
#[inline(always)]
fn varint(data: &[u8], pos: usize) -> Result<(i64, usize), Stop> {
    read_varint(data, pos, 2, VARINT_SIZE_MAX, 32)
}

/// The offset delta (three bytes inline: batches of many tiny records).
#[inline(always)]
fn varint3(data: &[u8], pos: usize) -> Result<(i64, usize), Stop> {
    read_varint(data, pos, 3, VARINT_SIZE_MAX, 32)
}

/// A header's key or value length (one byte inline).
#[inline(always)]
fn varint1(data: &[u8], pos: usize) -> Result<(i64, usize), Stop> {
    read_varint(data, pos, 1, VARINT_SIZE_MAX, 32)
}

#[inline(always)]
fn varlong(data: &[u8], pos: usize) -> Result<(i64, usize), Stop> {
    read_varint(data, pos, 2, VARLONG_SIZE_MAX, 64)
}

/// What one pass over a batch's records learned (timestamp deltas, relative to the base).
struct Walk {
    min_delta: i64,
    max_delta: i64,
    contiguous: bool,
    keyless: i64,
}

fn walk_records(data: &[u8], count: i64) -> Checked<Walk> {
    let eof = || Failure::Invalid("Incorrect declared batch size, premature EOF reached".into());
    let end = data.len();
    if count < 0 || count > (end / RECORD_SIZE_MIN) as i64 {
        return Err(eof());
    }
    match walk_body(data, count as usize) {
        Ok(walk) => Ok(walk),
        Err(WalkError::Stop(Stop::Eof)) => Err(eof()),
        Err(WalkError::Stop(Stop::Varint(message))) => {
            Err(Failure::Invalid(format!("Invalid record: {}", message)))
        }
        Err(WalkError::Failure(failure)) => Err(failure),
    }
}

enum WalkError {
    Stop(Stop),
    Failure(Failure),
}

impl From<Stop> for WalkError {
    fn from(stop: Stop) -> Self {
        WalkError::Stop(stop)
    }
}

fn invalid(message: String) -> WalkError {
    WalkError::Failure(Failure::Invalid(message))
}

fn walk_body(data: &[u8], count: usize) -> Result<Walk, WalkError> {
    let end = data.len();
    let mut pos: usize = 0;
    let mut min_delta = i64::MAX;
    let mut max_delta = i64::MIN;
    let mut contiguous = true;
    let mut keyless: i64 = -1;
    for index in 0..count {
        let (size, after) = varint(data, pos)?;
        pos = after;
        // Python's pos + size: size may be negative, so judge it in i64.
        let record_end = pos as i64 + size;
        if record_end > end as i64 {
            return Err(WalkError::Stop(Stop::Eof));
        }
        if size < 6 {
            return Err(invalid(format!("Invalid record size {}", size)));
        }
        let record_end = record_end as usize;
        pos += 1; // attributes: unused by v2 records
        let (timestamp_delta, after) = varlong(data, pos)?;
        pos = after;
        let (offset_delta, after) = varint3(data, pos)?;
        pos = after;
        if offset_delta != index as i64 {
            contiguous = false;
        }
        let (length, after) = varint(data, pos)?;
        pos = after;
        if length >= 0 {
            pos += length as usize; // the key
        } else if length != -1 {
            return Err(invalid(format!("Invalid negative key size {}", length)));
        } else if keyless < 0 {
            keyless = offset_delta;
        }
        let (length, after) = varint(data, pos)?;
        pos = after;
        if length >= 0 {
            pos += length as usize; // the value
        } else if length != -1 {
            return Err(invalid(format!("Invalid negative value size {}", length)));
        }
        let (header_count, after) = varint(data, pos)?;
        pos = after;
        if header_count != 0 {
            if header_count < 0 || 2 * header_count > record_end as i64 - pos as i64 {
                return Err(invalid(format!(
                    "Found invalid number of record headers {}",
                    header_count
                )));
            }
            for _ in 0..header_count {
                let (length, after) = varint1(data, pos)?; // key length: never null
                pos = after;
                if length < 0 {
                    return Err(invalid(format!(
                        "Invalid negative header key size {}",
                        length
                    )));
                }
                pos += length as usize;
                let (length, after) = varint1(data, pos)?; // value length
                pos = after;
                if length >= 0 {
                    pos += length as usize;
                } else if length != -1 {
                    return Err(invalid(format!(
                        "Invalid negative header value size {}",
                        length
                    )));
                }
            }
        }
        if pos != record_end {
            return Err(invalid(format!(
                "Invalid record size: expected to read {} bytes in record payload, but instead \
                 read {}",
                size,
                pos as i64 - record_end as i64 + size
            )));
        }
        min_delta = min_delta.min(timestamp_delta);
        max_delta = max_delta.max(timestamp_delta);
    }
    if pos != end {
        return Err(invalid(
            "Incorrect declared batch size, records still remaining in file".into(),
        ));
    }
    Ok(Walk {
        min_delta,
        max_delta,
        contiguous,
        keyless,
    })
}

// ---- per-record timestamp errors (log/validator.py's _record_errors) ----------------------

/// Each record's timestamp delta, and whether its header keys are UTF-8 (decode_records
/// rejects a batch whose are not): only called for a payload walk_records accepted.
fn record_timestamp_deltas(data: &[u8], count: usize, base_offset: i64) -> Checked<Vec<i64>> {
    let mut deltas = Vec::with_capacity(count);
    let mut pos = 0usize;
    let walked = |result: Result<(i64, usize), Stop>| -> (i64, usize) {
        match result {
            Ok(pair) => pair,
            Err(_) => unreachable!("walk_records accepted this payload"),
        }
    };
    for index in 0..count {
        let (size, after) = walked(varint(data, pos));
        let record_end = after + size as usize;
        pos = after + 1;
        let (timestamp_delta, after) = walked(varlong(data, pos));
        let (_, after) = walked(varint(data, after)); // offset delta
        pos = after;
        for _ in 0..2 {
            let (length, after) = walked(varint(data, pos)); // key, value
            pos = after + length.max(0) as usize;
        }
        let (header_count, after) = walked(varint(data, pos));
        pos = after;
        for _ in 0..header_count {
            let (length, after) = walked(varint(data, pos));
            let key = &data[after..after + length as usize];
            if let Err(exc) = std::str::from_utf8(key) {
                return Err(Failure::Corrupt(format!(
                    "record at offset {}: header key is not UTF-8: {}",
                    base_offset as i128 + index as i128,
                    exc
                )));
            }
            let (length, after) = walked(varint(data, after + length as usize));
            pos = after + length.max(0) as usize;
        }
        debug_assert_eq!(pos, record_end);
        pos = record_end;
        deltas.push(timestamp_delta);
    }
    Ok(deltas)
}

struct Limits {
    compact: bool,
    timestamp_type: i32,
    before_max_ms: i64,
    after_max_ms: i64,
    now_ms: i64,
}

fn record_errors(
    payload: &[u8],
    header: &Header,
    walk: &Walk,
    limits: &Limits,
) -> Checked<Vec<(usize, String)>> {
    let batch_log_append_time = header.timestamp_type() == LOG_APPEND_TIME;
    let now = limits.now_ms as i128;
    // Clamped to int64 as in the Python: no record passes with a timestamp no header holds.
    let low = (now - limits.before_max_ms as i128).max(i64::MIN as i128);
    let high = (now + limits.after_max_ms as i128).min(i64::MAX as i128);
    let base = header.base_timestamp as i128;
    let (min, max) = (base + walk.min_delta as i128, base + walk.max_delta as i128);
    if !batch_log_append_time
        && (limits.timestamp_type == LOG_APPEND_TIME || (low <= min && min <= max && max <= high))
    {
        return Ok(Vec::new());
    }
    let count = header.records_count as usize;
    let deltas = record_timestamp_deltas(payload, count, header.base_offset)?;
    let mut errors = Vec::new();
    for (index, delta) in deltas.into_iter().enumerate() {
        let offset = header.base_offset as i128 + index as i128;
        let timestamp = if batch_log_append_time {
            header.max_timestamp as i128
        } else {
            base + delta as i128
        };
        if limits.timestamp_type != LOG_APPEND_TIME && timestamp != NO_TIMESTAMP {
            if !(low <= timestamp && timestamp <= high) {
                errors.push((
                    index,
                    format!(
                        "Timestamp {} of message with offset {} is out of range. The timestamp \
                         should be within [{}, {}]",
                        timestamp, offset, low, high
                    ),
                ));
            }
        } else if batch_log_append_time {
            errors.push((
                index,
                format!(
                    "Invalid timestamp type in message at offset {}. Producer should not set \
                     timestamp type to LogAppendTime.",
                    offset
                ),
            ));
        }
    }
    Ok(errors)
}

// ---- the whole batch (log/validator.py's validate_records) ---------------------------------

/// What validation decided for a batch that may be stored.
struct Accepted {
    max_timestamp: i64,
    log_append_time_ms: i64,
    /// Some(payload) when compression.type asks for another codec: Python recompresses.
    recompress: Option<Vec<u8>>,
    /// The attributes the stored batch carries, when no recompression is needed.
    attributes: i16,
    header_max_timestamp: i64,
}

fn with_attributes(attributes: i16, timestamp_type: i32, codec: i16) -> i16 {
    let attributes = (attributes & !(TIMESTAMP_TYPE_MASK | COMPRESSION_CODEC_MASK)) | codec;
    if timestamp_type == LOG_APPEND_TIME {
        attributes | TIMESTAMP_TYPE_MASK
    } else {
        attributes
    }
}

fn check(
    records: &[u8],
    max_message_bytes: i64,
    limits: &Limits,
    target_codec: i16,
    max_decompressed_bytes: usize,
) -> Checked<Accepted> {
    let header = validate_batch(records)?;
    if header.size() != records.len() as i64 {
        return Err(Failure::Invalid(
            "Compressed outer record has more than one batch".into(),
        ));
    }
    if header.size() > max_message_bytes {
        return Err(Failure::TooLarge(format!(
            "batch of {} bytes exceeds max.message.bytes {}",
            header.size(),
            max_message_bytes
        )));
    }
    let count = header.records_count as i64;
    if count <= 0 || count != header.last_offset_delta as i64 + 1 {
        return Err(Failure::Invalid(format!(
            "Inconsistent batch offset range [0, {}] and count of records {}",
            header.last_offset_delta, count
        )));
    }
    let source = header.codec();
    let inflated;
    let payload: &[u8] = if source == CODEC_NONE {
        &records[BATCH_HEADER_SIZE..]
    } else {
        inflated = decompress(
            source,
            &records[BATCH_HEADER_SIZE..],
            max_decompressed_bytes,
        )?;
        &inflated
    };
    let walk = walk_records(payload, count)?;
    if !walk.contiguous {
        return Err(Failure::Invalid(format!(
            "Record offset deltas are not 0..{}",
            count - 1
        )));
    }
    if limits.compact && walk.keyless >= 0 {
        return Err(Failure::Keyless(walk.keyless));
    }
    let errors = record_errors(payload, &header, &walk, limits)?;
    if !errors.is_empty() {
        return Err(Failure::Timestamps(errors));
    }
    let (max_timestamp, log_append_time_ms) = if limits.timestamp_type == LOG_APPEND_TIME {
        (limits.now_ms, limits.now_ms)
    } else if header.timestamp_type() == LOG_APPEND_TIME {
        (header.max_timestamp, -1)
    } else {
        // record_errors held every record within int64 bounds; a record without a timestamp
        // (-1) escapes them, but -1 is never the maximum of timestamps that were out of range.
        let max = header.base_timestamp as i128 + walk.max_delta as i128;
        let max = i64::try_from(max)
            .map_err(|_| Failure::Invalid(format!("maximum timestamp {} is outside int64", max)))?;
        (max, -1)
    };
    let recompress = if target_codec >= 0 && target_codec != source {
        Some(payload.to_vec())
    } else {
        None
    };
    Ok(Accepted {
        max_timestamp,
        log_append_time_ms,
        recompress,
        attributes: with_attributes(header.attributes, limits.timestamp_type, source),
        header_max_timestamp: header.max_timestamp,
    })
}

/// The batch with these attributes and maxTimestamp and its CRC recomputed (_seal).
fn seal(records: &[u8], attributes: i16, max_timestamp: i64, out: &mut [u8]) {
    out.copy_from_slice(records);
    out[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
    out[MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8]
        .copy_from_slice(&max_timestamp.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_OFFSET..]);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Validate one produced batch as log/validator.py's validate_records does.
///
/// Returns ``(0, out, log_append_time_ms, payload, max_timestamp)`` when the batch may be
/// stored: ``out`` is ``records`` itself when nothing changes, new bytes when the header was
/// rewritten, or None with the inflated ``payload`` when compression.type asks for another
/// codec (the caller recompresses). Otherwise ``(kind, message, record_errors)``, ``kind``
/// naming the error class (1 corrupt, 2 invalid, 3 unsupported codec, 4 too large,
/// 5 timestamps refused, 6 keyless record on a compacted topic).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (records, max_message_bytes, compact, timestamp_type, before_max_ms, after_max_ms, target_codec, now_ms, max_decompressed_bytes))]
fn validate<'py>(
    py: Python<'py>,
    records: &Bound<'py, PyAny>,
    max_message_bytes: i64,
    compact: bool,
    timestamp_type: i32,
    before_max_ms: i64,
    after_max_ms: i64,
    target_codec: i16,
    now_ms: i64,
    max_decompressed_bytes: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let limits = Limits {
        compact,
        timestamp_type,
        before_max_ms,
        after_max_ms,
        now_ms,
    };
    let buffer: PyBuffer<u8> = PyBuffer::get(records)?;
    if !buffer.is_c_contiguous() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "records must be a contiguous buffer",
        ));
    }
    // SAFETY: the buffer is C-contiguous, held for this call, and nothing runs Python code
    // (which could resize a bytearray) while the slice is alive: the GIL is never released.
    let bytes: &[u8] =
        unsafe { std::slice::from_raw_parts(buffer.buf_ptr() as *const u8, buffer.len_bytes()) };
    let verdict = check(
        bytes,
        max_message_bytes,
        &limits,
        target_codec,
        max_decompressed_bytes,
    );
    let result = match verdict {
        Ok(accepted) => {
            let (out, payload) = match accepted.recompress {
                Some(payload) => (
                    py.None().into_bound(py),
                    PyBytes::new(py, &payload).into_any(),
                ),
                None => {
                    let unchanged = accepted.attributes == be_i16(bytes, ATTRIBUTES_OFFSET)
                        && accepted.max_timestamp == accepted.header_max_timestamp;
                    let out = if unchanged {
                        records.clone()
                    } else {
                        PyBytes::new_with(py, bytes.len(), |out| {
                            seal(bytes, accepted.attributes, accepted.max_timestamp, out);
                            Ok(())
                        })?
                        .into_any()
                    };
                    (out, py.None().into_bound(py))
                }
            };
            PyTuple::new(
                py,
                [
                    0i32.into_pyobject(py)?.into_any(),
                    out,
                    accepted.log_append_time_ms.into_pyobject(py)?.into_any(),
                    payload,
                    accepted.max_timestamp.into_pyobject(py)?.into_any(),
                ],
            )?
        }
        Err(failure) => {
            let (kind, message, errors): (i32, String, Vec<(usize, String)>) = match failure {
                Failure::Corrupt(message) => (1, message, Vec::new()),
                Failure::Invalid(message) => (2, message, Vec::new()),
                Failure::Unsupported(message) => (3, message, Vec::new()),
                Failure::TooLarge(message) => (4, message, Vec::new()),
                Failure::Timestamps(errors) => (
                    5,
                    "One or more records have been rejected due to invalid timestamp".into(),
                    errors,
                ),
                Failure::Keyless(delta) => {
                    let message = "Compacted topic cannot accept message without key";
                    (6, message.into(), vec![(delta as usize, message.into())])
                }
            };
            let errors = PyList::new(py, errors)?;
            PyTuple::new(
                py,
                [
                    kind.into_pyobject(py)?.into_any(),
                    message.into_pyobject(py)?.into_any(),
                    errors.into_any(),
                ],
            )?
        }
    };
    Ok(result)
}

#[pymodule]
fn kraft_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(validate, module)?)?;
    Ok(())
}
