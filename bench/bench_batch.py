"""Throughput of the RecordBatch v2 codec's hot paths, each beside a floor measured in the
same run on the same bytes, so the ratio says how much Python overhead the codec adds:

- validate_batch (header parse + CRC-32C) against a bare crc32c over the batch's CRC range,
  for a small batch, a 16 x 1 KiB-record batch and a 256 KiB batch;
- decode_batch (decompress + every record) in each codec against kafka-python's decoder;
- encode_batch in each codec against kafka-python's builder.

Run: .venv/bin/python bench/bench_batch.py
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from log.batch import BATCH_HEADER_SIZE, Compression, decode_batch, encode_batch, validate_batch
from log.records import Header, Record

MEASURE_SECONDS = 0.4
ROUNDS_MAX = 40  # each round doubles the iteration count, so this never runs away
WORDS = [b"kafka", b"raft", b"broker", b"offset", b"epoch", b"leader", b"replica", b"isr"]


def ops_per_second(operation: Callable[[], object]) -> float:
    """Best-effort rate: grow the iteration count until one timing lasts MEASURE_SECONDS."""
    iterations = 1
    for _ in range(ROUNDS_MAX):
        start = time.perf_counter()
        for _ in range(iterations):
            operation()
        elapsed = time.perf_counter() - start
        if elapsed >= MEASURE_SECONDS:
            return iterations / elapsed
        iterations *= 2
    return iterations / elapsed


def make_records(count: int, value_bytes: int, rng: random.Random) -> list[Record]:
    """Text-like values (compressible, as real payloads are), fixed by the seed."""
    records = []
    for index in range(count):
        words = b" ".join(rng.choice(WORDS) for _ in range(value_bytes // 4))
        records.append(
            Record(
                key=b"key-%06d" % index,
                value=words[:value_bytes],
                timestamp=1_700_000_000_000 + index,
                headers=(Header("trace", b"%016x" % rng.getrandbits(64)),),
            )
        )
    return records


def kafka_python_build(records: list[Record], codec: Compression) -> bytes:
    builder = DefaultRecordBatchBuilder(2, int(codec), False, -1, -1, -1, 1 << 30)
    for index, record in enumerate(records):
        headers = [(h.key, h.value) for h in record.headers]
        builder.append(index, record.timestamp, record.key, record.value, headers)
    return bytes(builder.build())


def kafka_python_decode(batch: bytes) -> list[object]:
    return list(DefaultRecordBatch(batch))


def row(label: str, rate: float, unit_bytes: int, baseline: float, baseline_label: str) -> None:
    mib_per_s = rate * unit_bytes / (1 << 20)
    print(
        f"  {label:<40} {rate:>12,.0f}/s {mib_per_s:>9,.1f} MiB/s   "
        f"{baseline_label} {baseline:>12,.0f}/s   ratio {rate / baseline:5.2f}"
    )


def bench_validate(rng: random.Random) -> None:
    print("validate_batch (header + CRC-32C) vs bare crc32c over the same CRC range")
    cases = [
        ("1 record x 100 B", make_records(1, 100, rng)),
        ("16 records x 1 KiB", make_records(16, 1024, rng)),
        ("256 KiB batch (248 x 1 KiB)", make_records(248, 1024, rng)),
    ]
    for label, records in cases:
        batch = encode_batch(records)
        view = memoryview(batch)[21:]
        validate_rate = ops_per_second(lambda batch=batch: validate_batch(batch))
        crc_rate = ops_per_second(lambda view=view: crc32c(view))
        row(f"{label} ({len(batch):,} B)", validate_rate, len(batch), crc_rate, "crc32c")


def bench_decode(rng: random.Random) -> None:
    print("decode_batch, 16 records x 1 KiB (MiB/s of uncompressed records) vs kafka-python")
    records = make_records(16, 1024, rng)
    records_bytes = len(encode_batch(records)) - BATCH_HEADER_SIZE
    for codec in Compression:
        batch = encode_batch(records, compression=codec)
        ours = ops_per_second(lambda batch=batch: decode_batch(batch))
        theirs = ops_per_second(lambda batch=batch: kafka_python_decode(batch))
        row(f"{codec.name} ({len(batch):,} B on the wire)", ours, records_bytes, theirs, "kafka-py")
        print(f"  {'':<40} {ours * len(records):>12,.0f} records/s")


def bench_encode(rng: random.Random) -> None:
    print("encode_batch, 16 records x 1 KiB (MiB/s of uncompressed records) vs kafka-python")
    records = make_records(16, 1024, rng)
    records_bytes = len(encode_batch(records)) - BATCH_HEADER_SIZE
    for codec in Compression:
        ours = ops_per_second(lambda codec=codec: encode_batch(records, compression=codec))
        theirs = ops_per_second(lambda codec=codec: kafka_python_build(records, codec))
        row(codec.name, ours, records_bytes, theirs, "kafka-py")


def main() -> None:
    rng = random.Random(20_240_601)
    bench_validate(rng)
    bench_decode(rng)
    bench_encode(rng)


if __name__ == "__main__":
    main()
