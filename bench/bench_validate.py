"""What the produce-path LogValidator (log/validator.py) costs, in records/s, each figure
beside baselines measured in the same run on the same bytes:

1. per batch shape and codec: validate_records (every record parsed, compressed payloads
   inflated) against the bare CRC-32C pass over the batch and against main's pre-append
   check (validate_batch: header + CRC, records unread);
2. the append path: Log.append_as_leader alone (main's produce path) against
   validate_records + append_as_leader, into a real log in a temporary directory;
3. what the topic configs cost when they change the batch: LogAppendTime (header rewrite
   and CRC) and a compression.type that recompresses.

Run: PYTHONPATH=. .venv/bin/python bench/bench_validate.py
"""

from __future__ import annotations

import asyncio
import random
import tempfile

from bench_batch import make_records, ops_per_second
from crc32c import crc32c

from log.batch import Compression, encode_batch, validate_batch
from log.config import LogConfig
from log.log import Log
from log.runtime import real_runtime
from log.validator import validate_records

NOW = 1_700_000_000_000
SHAPES = [(1000, 10), (100, 100), (16, 1024)]  # (records per batch, value bytes)
CONFIG = LogConfig()


def row(label: str, records_per_s: float, baselines: list[tuple[str, float]]) -> None:
    ratios = "   ".join(
        f"{name} {rate:>12,.0f}/s (x{records_per_s / rate:.3g})" for name, rate in baselines
    )
    print(f"  {label:<30} {records_per_s:>12,.0f} records/s   {ratios}")


def bench_shapes(rng: random.Random) -> None:
    print("validate_records vs the bare CRC-32C pass and main's header+CRC check (records/s)")
    for count, size in SHAPES:
        records = make_records(count, size, rng)
        for codec in (
            Compression.NONE,
            Compression.LZ4,
            Compression.ZSTD,
            Compression.GZIP,
            Compression.SNAPPY,
        ):
            batch = encode_batch(
                records, compression=codec, producer_id=1, producer_epoch=0, base_sequence=0
            )
            view = memoryview(batch)[21:]
            crc = ops_per_second(lambda view=view: crc32c(view)) * count
            check = ops_per_second(lambda batch=batch: validate_batch(batch)) * count
            full = ops_per_second(lambda batch=batch: validate_records(batch, CONFIG, NOW)) * count
            row(f"{count} x {size} B {codec.name}", full, [("crc32c", crc), ("main check", check)])


async def append_rates(batch: bytes, count: int) -> tuple[float, float]:
    """(records/s appending as main does, records/s validating then appending)."""
    with tempfile.TemporaryDirectory() as directory:
        runtime = real_runtime(seed=1)
        config = LogConfig(segment_bytes=256 << 20)
        plain = await Log.open(runtime, f"{directory}/plain-0", config)
        checked = await Log.open(runtime, f"{directory}/checked-0", config)
        try:
            main_rate = ops_per_second(lambda: plain.append_as_leader(batch, 0))
            ours = ops_per_second(
                lambda: checked.append_as_leader(validate_records(batch, CONFIG, NOW).records, 0)
            )
        finally:
            await plain.close()
            await checked.close()
    return main_rate * count, ours * count


def bench_append(rng: random.Random) -> None:
    print("Log.append_as_leader: main's path vs validate_records + append (records/s)")
    for count, size in [(100, 100), (16, 1024)]:
        records = make_records(count, size, rng)
        for codec in (Compression.NONE, Compression.ZSTD):
            batch = encode_batch(records, compression=codec)
            main_rate, ours = asyncio.run(append_rates(batch, count))
            row(f"{count} x {size} B {codec.name}", ours, [("main append", main_rate)])


def bench_configs(rng: random.Random) -> None:
    print("topic configs that change the batch, 100 x 100 B (records/s)")
    records = make_records(100, 100, rng)
    plain = encode_batch(records)
    zstd = encode_batch(records, compression=Compression.ZSTD)
    keep = ops_per_second(lambda: validate_records(plain, CONFIG, NOW)) * 100
    cases = [
        ("LogAppendTime, NONE", plain, LogConfig(message_timestamp_type="LogAppendTime")),
        ("compression.type=zstd, NONE in", plain, LogConfig(compression_type="zstd")),
        ("compression.type=lz4, ZSTD in", zstd, LogConfig(compression_type="lz4")),
    ]
    for label, batch, config in cases:
        rate = ops_per_second(lambda b=batch, c=config: validate_records(b, c, NOW)) * 100
        row(label, rate, [("unchanged NONE", keep)])


def main() -> None:
    rng = random.Random(20_261_123)
    bench_shapes(rng)
    bench_append(rng)
    bench_configs(rng)


if __name__ == "__main__":
    main()
