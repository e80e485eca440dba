"""Log cleaner benchmark: one compaction pass against a plain copy of the same segments.

Run: ``python bench/bench_cleaner.py [--records N] [--keys K]``. One run
- appends N records (100-byte values, keys drawn from K, 10 records a batch) to a
  compacted log on the real filesystem in a temp dir, 1 MiB segments, all fsynced;
- baseline: copies every inactive segment file to a new file (pread, write, fsync), the
  I/O floor of any rewrite;
- then runs one cleaning pass (log/cleaner.py clean_log: offset map, rewrite, fsync, swap)
  over the same segments, and prints records/s and MB/s read for both, and the ratio
  cleaner / copy (in MB/s of input).
Three rounds; the best of each is reported (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from log.batch import encode_batch
from log.cleaner import clean_log
from log.config import LogConfig
from log.log import Log
from log.records import Record
from log.runtime import real_runtime

MIB = 1024 * 1024
ROUNDS = 3
RECORDS_PER_BATCH = 10
CONFIG = LogConfig(cleanup_policy=("compact",), segment_bytes=MIB, file_delete_delay_ms=0)


async def build(dir_path: str, records: int, keys: int, rng: random.Random) -> Log:
    log = await Log.open(real_runtime(0), dir_path, CONFIG)
    now_ms = 1_700_000_000_000
    for first in range(0, records, RECORDS_PER_BATCH):
        batch = [
            Record(b"key-%d" % rng.randrange(keys), rng.randbytes(100), now_ms + first + i)
            for i in range(RECORDS_PER_BATCH)
        ]
        log.append_as_leader(encode_batch(batch), 0)
    log.roll()
    await log.flush()
    return log


def copy_segments(log: Log) -> tuple[float, int]:
    """Seconds to copy every inactive segment (read, write, fsync); bytes copied."""
    start, copied = time.perf_counter(), 0
    for segment in log.segments[:-1]:
        data = segment.log.pread(0, segment.size)
        path = segment.log.path + ".copy"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        copied += len(data)
        os.remove(path)
    return time.perf_counter() - start, copied


async def one_round(records: int, keys: int) -> tuple[float, float, int, int, int]:
    """(copy seconds, clean seconds, bytes in, bytes out, records kept)."""
    root = tempfile.mkdtemp(prefix="bench-cleaner-")
    try:
        log = await build(os.path.join(root, "t-0"), records, keys, random.Random(1))
        copy_s, copied = copy_segments(log)
        start = time.perf_counter()
        result = await clean_log(log, 0, now_ms=1_800_000_000_000)
        clean_s = time.perf_counter() - start
        assert result is not None and result.bytes_read == copied, (result, copied)
        await log.close()
        return copy_s, clean_s, copied, result.bytes_written, result.records_kept
    finally:
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=5_000)
    args = parser.parse_args()
    rounds = [asyncio.run(one_round(args.records, args.keys)) for _ in range(ROUNDS)]
    copy_s = min(r[0] for r in rounds)
    clean_s = min(r[1] for r in rounds)
    _, _, bytes_in, bytes_out, kept = rounds[0]
    print(f"{args.records} records, {args.keys} keys, {bytes_in / MIB:.1f} MiB in segments")
    print(
        f"copy baseline: {bytes_in / MIB / copy_s:8.1f} MB/s  "
        f"{args.records / copy_s:12,.0f} records/s"
    )
    print(
        f"cleaner:       {bytes_in / MIB / clean_s:8.1f} MB/s  "
        f"{args.records / clean_s:12,.0f} records/s  "
        f"(kept {kept} records, {bytes_out / MIB:.2f} MiB)"
    )
    print(f"ratio cleaner / copy: {copy_s / clean_s:.3f}")


if __name__ == "__main__":
    main()
