"""Unclean start of a partition: its producer state from a roll snapshot against a read of
the whole log.

Run: ``python bench/bench_producer_snapshot.py [--batches N] [--producers P]``. One run
- appends N small batches (one record each, idempotent, P producers in turn, every tenth
  batch transactional and every tenth after it a commit marker) to a partition on the
  real filesystem in a temp dir, 1 MiB segments, as a follower does (broker/partition.py):
  each segment roll writes a producer snapshot at the new segment's base;
- baseline: the producer state rebuilt from the log start (every batch header read), what
  every unclean start did before roll snapshots;
- then the same state rebuilt as an unclean start now does: the latest snapshot at or below
  the recovery point (broker/producer_snapshot.py latest_snapshot), then the batch headers
  after it; both must give the same snapshot entries.
Prints the time of each, the batches each read, and the ratio baseline / snapshot. Three
rounds; the best of each is reported (the machine is shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from broker.partition import Partition
from broker.producer_snapshot import latest_snapshot
from broker.producer_state import ProducerState
from log.batch import encode_batch
from log.config import LogConfig
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.log import Log
from log.records import Record
from log.runtime import real_runtime

MIB = 1024 * 1024
ROUNDS = 3
CONFIG = LogConfig(segment_bytes=MIB, file_delete_delay_ms=0)
NOW_MS = 1_700_000_000_000


def stamped(data: bytes, offset: int) -> bytes:
    """A batch as its leader stamped it (the base offset sits outside the CRC)."""
    out = bytearray(data)
    out[0:8] = offset.to_bytes(8, "big")
    return bytes(out)


async def build(dir_path: str, batches: int, producers: int) -> Log:
    log = await Log.open(real_runtime(0), dir_path, CONFIG)
    partition = Partition("bench", 0, uuid.UUID(int=1), log, ProducerState(), 1)
    sequences = [0] * producers
    open_txn = [False] * producers
    for offset in range(batches):
        producer = offset % producers
        if open_txn[producer] and offset % 10 == 1:
            data = encode_marker_batch(producer, 0, EndTransactionMarker(True, 0), NOW_MS)
            open_txn[producer] = False
        else:
            txn = offset % 10 == 0
            data = encode_batch(
                [Record(None, b"v" * 100, NOW_MS + offset)],
                producer_id=producer,
                producer_epoch=0,
                base_sequence=sequences[producer],
                is_transactional=txn or open_txn[producer],
            )
            open_txn[producer] = open_txn[producer] or txn
            sequences[producer] += 1
        partition.append_as_follower(stamped(data, offset), NOW_MS)
    await log.flush()
    return log


def timed_rebuild(log: Log, from_snapshot: bool) -> tuple[float, list[object], int]:
    start = time.perf_counter()
    snapshot = None
    if from_snapshot:
        snapshot = latest_snapshot(log.fs, log.dir_path, log.recovery_point)
        assert snapshot is not None, "no roll snapshot was written"
    state = ProducerState.from_log(log, high_watermark=log.log_end_offset, snapshot=snapshot)
    elapsed = time.perf_counter() - start
    read_from = snapshot[0] if snapshot is not None else log.log_start_offset
    return elapsed, list(state.snapshot_entries()), log.log_end_offset - read_from


async def one_round(batches: int, producers: int) -> tuple[float, float, int, int, int]:
    root = tempfile.mkdtemp(prefix="bench-producer-snapshot-")
    try:
        log = await build(os.path.join(root, "bench-0"), batches, producers)
        try:
            full_s, full_state, full_read = timed_rebuild(log, from_snapshot=False)
            snap_s, snap_state, snap_read = timed_rebuild(log, from_snapshot=True)
            assert snap_state == full_state, "the snapshot start rebuilt a different state"
            return full_s, snap_s, full_read, snap_read, len(log.segments)
        finally:
            await log.close()
    finally:
        shutil.rmtree(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--producers", type=int, default=100)
    args = parser.parse_args()
    rounds = [asyncio.run(one_round(args.batches, args.producers)) for _ in range(ROUNDS)]
    full_s = min(r[0] for r in rounds)
    snap_s = min(r[1] for r in rounds)
    _, _, full_read, snap_read, segments = rounds[0]
    print(f"{args.batches} batches, {args.producers} producers, {segments} segments of 1 MiB")
    print(f"whole log (before):  {full_s * 1000:9.1f} ms  {full_read} batches read")
    print(f"roll snapshot (now): {snap_s * 1000:9.1f} ms  {snap_read} batches read")
    print(f"ratio whole log / roll snapshot: {full_s / snap_s:.1f}x")


if __name__ == "__main__":
    main()
