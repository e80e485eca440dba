"""What the produce-path LogValidator (log/validator.py) costs, in records/s, with the
kraft_native build (native/) and the pure-Python specification side by side, each figure
beside baselines measured in the same run on the same bytes:

1. per batch shape and codec: validate_records (every record parsed, compressed payloads
   inflated), native and Python, against the bare CRC-32C pass over the batch and against
   the header+CRC check alone (validate_batch: records unread);
2. the append path: Log.append_as_leader alone (records unvalidated) against
   validate_records + append_as_leader, native and Python, into a real log in a temporary
   directory;
3. what the topic configs cost when they change the batch: LogAppendTime (header rewrite
   and CRC) and a compression.type that recompresses.

Run: PYTHONPATH=. .venv/bin/python bench/bench_validate.py
"""

from __future__ import annotations

import asyncio
import random
import tempfile
from collections.abc import Callable

from bench_batch import make_records, ops_per_second
from crc32c import crc32c

from log.batch import Compression, encode_batch, validate_batch
from log.config import LogConfig
from log.log import Log
from log.runtime import real_runtime
from log.validator import validate_records_native, validate_records_python

NOW = 1_700_000_000_000
SHAPES = [(1000, 10), (100, 100), (16, 1024)]  # (records per batch, value bytes)
CONFIG = LogConfig()


def rates(*operations: Callable[[], object], rounds: int = 3) -> list[float]:
    """Each operation's best rate over ``rounds`` interleaved measurements: on a shared
    machine the load changes between rows, and interleaving exposes both sides to it."""
    best = [0.0] * len(operations)
    for _ in range(rounds):
        for index, operation in enumerate(operations):
            best[index] = max(best[index], ops_per_second(operation))
    return best


def row(label: str, records_per_s: float, baselines: list[tuple[str, float]]) -> None:
    ratios = "   ".join(
        f"{name} {rate:>12,.0f}/s (x{records_per_s / rate:.3g})" for name, rate in baselines
    )
    print(f"  {label:<30} {records_per_s:>12,.0f} records/s   {ratios}")


def bench_shapes(rng: random.Random) -> None:
    print("validate_records, native vs Python, and the bare CRC-32C and header+CRC checks")
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
            native, python, crc, check = (
                rate * count
                for rate in rates(
                    lambda batch=batch: validate_records_native(batch, CONFIG, NOW),
                    lambda batch=batch: validate_records_python(batch, CONFIG, NOW),
                    lambda view=view: crc32c(view),
                    lambda batch=batch: validate_batch(batch),
                )
            )
            row(
                f"{count} x {size} B {codec.name}",
                native,
                [("python", python), ("crc32c", crc), ("header+crc", check)],
            )


async def append_rates(batch: bytes, count: int) -> tuple[float, float, float]:
    """Records/s appending unvalidated, validating natively then appending, and validating
    in Python then appending."""
    with tempfile.TemporaryDirectory() as directory:
        runtime = real_runtime(seed=1)
        config = LogConfig(segment_bytes=256 << 20)
        logs = [await Log.open(runtime, f"{directory}/log{i}-0", config) for i in range(3)]
        plain, native_log, python_log = logs
        try:
            bare, native, python = rates(
                lambda: plain.append_as_leader(batch, 0),
                lambda: native_log.append_as_leader(
                    validate_records_native(batch, CONFIG, NOW).records, 0
                ),
                lambda: python_log.append_as_leader(
                    validate_records_python(batch, CONFIG, NOW).records, 0
                ),
            )
        finally:
            for log in logs:
                await log.close()
    return bare * count, native * count, python * count


def bench_append(rng: random.Random) -> None:
    print("Log.append_as_leader after validate_records, native vs Python vs unvalidated")
    for count, size in [(100, 100), (16, 1024)]:
        records = make_records(count, size, rng)
        for codec in (Compression.NONE, Compression.ZSTD):
            batch = encode_batch(records, compression=codec)
            bare, native, python = asyncio.run(append_rates(batch, count))
            row(
                f"{count} x {size} B {codec.name}",
                native,
                [("python", python), ("unvalidated", bare)],
            )


def bench_configs(rng: random.Random) -> None:
    print("topic configs that change the batch, 100 x 100 B, native vs Python (records/s)")
    records = make_records(100, 100, rng)
    plain = encode_batch(records)
    zstd = encode_batch(records, compression=Compression.ZSTD)
    cases = [
        ("LogAppendTime, NONE", plain, LogConfig(message_timestamp_type="LogAppendTime")),
        ("compression.type=zstd, NONE in", plain, LogConfig(compression_type="zstd")),
        ("compression.type=lz4, ZSTD in", zstd, LogConfig(compression_type="lz4")),
    ]
    for label, batch, config in cases:
        native, python = rates(
            lambda b=batch, c=config: validate_records_native(b, c, NOW),
            lambda b=batch, c=config: validate_records_python(b, c, NOW),
        )
        row(label, native * 100, [("python", python * 100)])


def main() -> None:
    rng = random.Random(20_261_123)
    bench_shapes(rng)
    bench_append(rng)
    bench_configs(rng)


if __name__ == "__main__":
    main()
