"""A replica's transactions over a real log: a follower replays the leader's markers into
its producer state and ``.txnindex``, and every truncation rebuilds the producer state (it
was built only when the log was opened, so a truncated batch could still be answered as a
duplicate, and a truncated transaction stayed open forever)."""

from __future__ import annotations

import asyncio
import uuid

from kio.schema.errors import ErrorCode

from broker.bugs import IDEMPOTENT_STALE_DUPLICATE
from broker.partition import Partition
from broker.producer_state import ProducerState
from log.batch import encode_batch, parse_header
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.log import Log
from log.records import Record
from log.txn_index import AbortedTxn
from tests.log.test_log import DIR, config, make_runtime

ME = 1


def at(data: bytes, base_offset: int, epoch: int = 0) -> bytes:
    """A batch as the leader stamped it (offset and leader epoch sit outside the CRC)."""
    out = bytearray(data)
    out[0:8] = base_offset.to_bytes(8, "big")
    out[12:16] = epoch.to_bytes(4, "big")
    return bytes(out)


def produced(producer_id: int, sequence: int, *, transactional: bool = False) -> bytes:
    return encode_batch(
        [Record(None, b"v", 1_000)],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=transactional,
    )


def marker(producer_id: int, commit: bool) -> bytes:
    return encode_marker_batch(producer_id, 0, EndTransactionMarker(commit, 0), 1_000)


async def follower() -> Partition:
    _, runtime, _ = make_runtime()
    log = await Log.open(runtime, DIR, config())
    return Partition("t", 0, uuid.UUID(int=1), log, ProducerState.from_log(log), ME)


def test_a_follower_replays_markers_into_its_producer_state_and_txnindex() -> None:
    async def run() -> None:
        partition = await follower()
        partition.append_as_follower(
            at(produced(7, 0, transactional=True), 0)
            + at(produced(8, 0, transactional=True), 1)
            + at(marker(7, False), 2)
            + at(produced(9, 0), 3),
            now_ms=1_000,
        )
        assert partition.producers.open_transactions == {8: 1}
        assert partition.log.aborted_txns() == [AbortedTxn(7, 0, 2, 1)]
        partition.follower_high_watermark(4)
        assert partition.last_stable_offset == 1  # 8 is still open
        partition.append_as_follower(at(marker(8, True), 4), now_ms=1_000)
        partition.follower_high_watermark(5)
        assert partition.last_stable_offset == 5

    asyncio.run(run())


def test_truncation_rebuilds_the_producer_state() -> None:
    async def run() -> None:
        partition = await follower()
        partition.append_as_follower(
            at(produced(7, 0), 0)
            + at(produced(7, 1), 1)
            + at(produced(8, 0, transactional=True), 2)
            + at(marker(8, False), 3),
            now_ms=1_000,
        )
        assert partition.log.aborted_txns() == [AbortedTxn(8, 2, 3, 4)]
        assert partition.producers.check(parse_header(produced(7, 1))).duplicate_of == 1
        # The new leader's log diverges from offset 1: the follower cuts there.
        assert await partition.truncate_to(1)
        # Sequence 1 is no longer in the log: it must be appended, not answered as a
        # duplicate at an offset that now holds something else (a lost write).
        verdict = partition.producers.check(parse_header(produced(7, 1)))
        assert (verdict.error, verdict.append) == (ErrorCode.none, True)
        assert partition.producers.open_transactions == {}
        assert partition.log.aborted_txns() == []
        # A cut inside a transaction leaves it open, at its first offset.
        partition.append_as_follower(
            at(produced(7, 1), 1) + at(produced(8, 0, transactional=True), 2), now_ms=1_000
        )
        partition.append_as_follower(at(marker(8, True), 3), now_ms=1_000)
        await partition.truncate_to(3)
        assert partition.producers.open_transactions == {8: 2}
        partition.follower_high_watermark(3)
        assert partition.last_stable_offset == 2
        await partition.truncate_fully_and_start_at(10)
        assert partition.producers.open_transactions == {} and len(partition.producers) == 0
        assert partition.last_stable_offset == partition.high_watermark  # nothing open

    asyncio.run(run())


def test_the_planted_stale_duplicate_bug_keeps_the_producer_state_of_before_the_cut() -> None:
    """``idempotent-stale-duplicate`` re-creates the fixed bug for the simulator to catch
    (the kafka scenario's ``duplicate-offset`` check): the cut batch is still answered as
    a duplicate, at an offset the next append fills with another batch."""

    async def run() -> None:
        partition = await follower()
        partition.bugs = frozenset({IDEMPOTENT_STALE_DUPLICATE})
        partition.append_as_follower(at(produced(7, 0), 0) + at(produced(7, 1), 1), now_ms=1_000)
        assert await partition.truncate_to(1)
        assert partition.log.log_end_offset == 1
        assert partition.producers.check(parse_header(produced(7, 1))).duplicate_of == 1

    asyncio.run(run())


def test_the_lso_never_stays_below_the_log_start() -> None:
    """A transaction whose first records were deleted (DeleteRecords, retention) holds
    read_committed consumers at the log start at most, as Kafka's first unstable offset."""

    async def run() -> None:
        partition = await follower()
        partition.append_as_follower(
            at(produced(9, 0), 0)
            + at(produced(8, 0, transactional=True), 1)
            + at(produced(9, 1), 2)
            + at(produced(9, 2), 3),
            now_ms=1_000,
        )
        partition.follower_high_watermark(4)
        assert partition.last_stable_offset == 1
        await partition.log.delete_records(3)
        assert partition.last_stable_offset == 3
        partition.append_as_follower(at(marker(8, False), 4), now_ms=1_000)
        partition.follower_high_watermark(5)
        assert partition.last_stable_offset == 5

    asyncio.run(run())


def test_a_roll_snapshots_the_state_and_a_truncation_removes_the_snapshots_above_it() -> None:
    """Each segment roll writes the producer state at the new segment's base (none at the
    log start); a truncation removes those above its target (they describe a log that is
    gone), keeps those at or below it; emptying the log removes them all."""

    async def run() -> None:
        partition = await follower()
        log = partition.log

        def snapshots() -> list[int]:
            return sorted(int(n[:20]) for n in log.fs.list_dir(DIR) if n.endswith(".snapshot"))

        partition.append_as_follower(at(produced(7, 0, transactional=True), 0), now_ms=1_000)
        for offset in (1, 2):
            log.roll()
            partition.append_as_follower(at(produced(8, offset - 1), offset), now_ms=1_000)
        assert snapshots() == [1, 2]
        assert await partition.truncate_to(1)
        assert snapshots() == [1]
        assert partition.producers.open_transactions == {7: 0}
        await partition.truncate_fully_and_start_at(5)
        assert snapshots() == []

    asyncio.run(run())
