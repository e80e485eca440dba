"""Producer-state snapshots: Kafka's file layout, the state they bring back (each
producer's last batch, open transactions, coordinator epochs), corrupt files ignored, and
a clean restart of a real replica manager that starts from one (and keeps it), and unclean
restarts that start from the latest roll snapshot they may trust."""

from __future__ import annotations

import asyncio
import struct
import time
from pathlib import Path

from crc32c import crc32c
from kio.schema.errors import ErrorCode

from broker.producer_snapshot import (
    SnapshotEntry,
    decode_snapshot,
    encode_snapshot,
    latest_snapshot,
    put_snapshot,
    snapshot_path,
    write_snapshot,
)
from broker.producer_state import ProducerState
from broker.replica_manager import ReplicaManager
from log.batch import encode_batch, parse_header
from log.checkpoint import RECOVERY_POINT_CHECKPOINT
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.log import Log
from log.manager import CLEAN_SHUTDOWN_FILE
from log.records import Record
from tests.broker.test_replica_manager import SOLE, run
from tests.log.test_log import DIR, config, make_runtime


def batch(producer_id: int, sequence: int, count: int = 1, *, txn: bool = False) -> bytes:
    return encode_batch(
        [Record(None, b"v", 1_000 + i) for i in range(count)],
        producer_id=producer_id,
        producer_epoch=2,
        base_sequence=sequence,
        is_transactional=txn,
    )


def test_a_snapshot_is_kafkas_layout() -> None:
    entry = SnapshotEntry(7, 2, 4, 10, 2, 1_000, 5, -1)
    data = encode_snapshot([entry])
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 7, 2, 4, 10, 2, 1_000, 5, -1)
    assert data == struct.pack(">hI", 1, crc32c(body)) + body  # version 1, CRC-32C of the rest
    assert len(body) == 4 + 46 and decode_snapshot(data) == [entry]


def test_a_snapshot_brings_back_the_last_batches_and_transactions() -> None:
    async def run_it() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        for data in (
            batch(7, 0, 3),  # 0-2
            batch(7, 3, 2),  # 3-4: 7's last batch
            batch(8, 0, txn=True),  # 5: 8 opens
            encode_marker_batch(9, 2, EndTransactionMarker(False, 5), 1_000),  # 6
        ):
            log.append_as_leader(bytearray(data), 0)
        before = ProducerState.from_log(log)
        await write_snapshot(runtime.fs, DIR, log.log_end_offset, before.snapshot_entries())
        assert latest_snapshot(runtime.fs, DIR, 6) is None  # none at or below 6
        taken = latest_snapshot(runtime.fs, DIR, log.log_end_offset)
        assert taken is not None and taken[0] == 7
        assert runtime.fs.exists(snapshot_path(DIR, 7))  # kept for the next start
        after = ProducerState.from_log(log, snapshot=taken)
        assert after.snapshot_entries() == before.snapshot_entries()
        assert after.open_transactions == {8: 5}
        assert after.check(parse_header(batch(7, 3, 2))).duplicate_of == 3
        assert after.check(parse_header(batch(7, 5))).append
        fenced = after.check_marker(9, 2, EndTransactionMarker(True, 4))
        assert fenced.error == ErrorCode.transaction_coordinator_fenced
        await log.close()

    asyncio.run(run_it())


def test_a_corrupt_snapshot_is_ignored_and_removed() -> None:
    async def run_it() -> None:
        _, runtime, _ = make_runtime()
        fs = runtime.fs
        fs.mkdir(DIR)
        await write_snapshot(fs, DIR, 3, [SnapshotEntry(7, 0, 0, 0, 0, 0, -1, -1)])
        handle = fs.open(snapshot_path(DIR, 3), create=False)
        handle.pwrite(10, b"\xff")  # one flipped byte: the CRC no longer matches
        handle.close()
        assert latest_snapshot(fs, DIR, 3) is None
        assert [n for n in fs.list_dir(DIR) if n.endswith(".snapshot")] == []

    asyncio.run(run_it())


def test_a_clean_restart_starts_from_the_snapshot_written_at_shutdown(tmp_path: Path) -> None:
    async def first_life(replicas: ReplicaManager) -> None:
        for data in (batch(7, 0, 2), batch(8, 0, txn=True)):
            assert (await replicas.append("a", 0, data, acks=1, timeout_s=5)).base_offset >= 0

    run(tmp_path, first_life, SOLE)
    path = tmp_path / "a-0" / f"{3:020d}.snapshot"
    assert path.exists()  # written at the clean shutdown, at the log end
    entries = decode_snapshot(path.read_bytes())
    assert [(e.producer_id, e.last_sequence, e.current_txn_first_offset) for e in entries] == [
        (7, 1, -1),
        (8, 0, 2),
    ]

    # A producer only the snapshot knows (its coordinator epoch 9): proof the start used it.
    known = SnapshotEntry(99, 0, -1, -1, 0, int(time.time() * 1000), 9, -1)
    path.write_bytes(encode_snapshot([*entries, known]))

    async def second_life(replicas: ReplicaManager) -> tuple[object, ...]:
        kept = path.exists()
        retry = await replicas.append("a", 0, batch(7, 0, 2), acks=1, timeout_s=5)
        stale = await replicas.write_txn_marker(
            "a", 0, 99, 0, EndTransactionMarker(True, 1), timeout_s=5
        )
        lso = replicas.last_stable_offset_of(("a", 0))
        return kept, retry.error, retry.base_offset, stale.error, lso

    assert run(tmp_path, second_life, SOLE) == (
        True,  # read at the start, and kept
        ErrorCode.none,
        0,  # a retry of 7's last batch, answered with its offset
        ErrorCode.transaction_coordinator_fenced,
        2,  # 8's transaction is still open
    )
    assert path.exists()  # the second clean shutdown wrote it again


def crashed_after_two_rolls(root: Path) -> list[SnapshotEntry]:
    """A first life that rolls the segment twice (snapshots at 3 and 4), left as an unclean
    shutdown would leave it with everything flushed: no clean shutdown marker, no snapshot
    at the log end. The producer state it ended with, as DescribeProducers gives it."""

    async def first_life(replicas: ReplicaManager) -> list[SnapshotEntry]:
        log = replicas.logs.get_log("a", 0)
        assert log is not None
        steps = (
            [batch(7, 0, 2), batch(8, 0, txn=True)],  # 0-1; 2: 8 opens
            [batch(9, 0)],  # 3, after a roll: the snapshot at 3 has 7 and 8
            [batch(7, 2), batch(10, 0, txn=True)],  # 4, after a roll; 5: 10 opens
        )
        for step, batches in enumerate(steps):
            if step:
                log.roll()
            for data in batches:
                assert (await replicas.append("a", 0, data, acks=1, timeout_s=5)).error == (
                    ErrorCode.none
                )
        found = replicas.active_producers("a", 0)
        assert not isinstance(found, ErrorCode)
        return found

    ended_with = run(root, first_life, SOLE)
    (root / CLEAN_SHUTDOWN_FILE).unlink()
    (root / "a-0" / f"{6:020d}.snapshot").unlink()  # the clean shutdown's, at the log end
    assert sorted(p.name for p in (root / "a-0").glob("*.snapshot")) == [
        f"{3:020d}.snapshot",
        f"{4:020d}.snapshot",
    ]
    return ended_with


def plant(root: Path, offset: int, producer_id: int) -> None:
    """A producer only the snapshot at ``offset`` knows (coordinator epoch 9): a start that
    used that snapshot fences a marker of coordinator epoch 1 for it."""
    path = root / "a-0" / f"{offset:020d}.snapshot"
    phantom = SnapshotEntry(producer_id, 0, -1, -1, 0, int(time.time() * 1000), 9, -1)
    path.write_bytes(encode_snapshot([*decode_snapshot(path.read_bytes()), phantom]))


def corrupt(root: Path, offset: int) -> None:
    path = root / "a-0" / f"{offset:020d}.snapshot"
    data = bytearray(path.read_bytes())
    data[10] ^= 0xFF  # the CRC no longer matches
    path.write_bytes(bytes(data))


async def second_life(replicas: ReplicaManager) -> tuple[object, ...]:
    """What the unclean start rebuilt: the producers (as DescribeProducers answers), the
    retries of 7's and 9's last batches, the last stable offset, and whether a marker of
    coordinator epoch 1 for 98 and for 99 was fenced."""
    producers = replicas.active_producers("a", 0)
    retries = [
        (await replicas.append("a", 0, data, acks=1, timeout_s=5)).base_offset
        for data in (batch(7, 2), batch(9, 0))
    ]
    lso = replicas.last_stable_offset_of(("a", 0))
    fenced = [
        (
            await replicas.write_txn_marker(
                "a", 0, producer_id, 0, EndTransactionMarker(True, 1), timeout_s=5
            )
        ).error
        == ErrorCode.transaction_coordinator_fenced
        for producer_id in (98, 99)
    ]
    return producers, retries, lso, fenced


def test_an_unclean_start_reads_only_the_log_after_the_latest_roll_snapshot(
    tmp_path: Path,
) -> None:
    """Kafka's recovery: the latest snapshot at or below the recovery point (the roll at 4),
    then the batch headers after it. The same producers, duplicates and open transactions
    as the first life ended with, plus the one only that snapshot knew (so it was used)."""
    ended_with = crashed_after_two_rolls(tmp_path)
    plant(tmp_path, 3, 98)
    plant(tmp_path, 4, 99)
    producers, retries, lso, fenced = run(tmp_path, second_life, SOLE)
    assert [p for p in producers if p.producer_id != 99] == ended_with  # type: ignore[attr-defined]
    assert retries == [4, 3]  # each producer's last batch, answered with its offset
    assert lso == 2  # 8's transaction, open since 2 (and 10's since 5)
    assert fenced == [False, True]  # the snapshot at 4 was used, not the one at 3


def test_an_unclean_start_skips_a_corrupt_snapshot_and_then_reads_the_log(
    tmp_path: Path,
) -> None:
    """A CRC-corrupt snapshot is removed and the next older one used; with none left, the
    whole log is read: the same state either way."""
    ended_with = crashed_after_two_rolls(tmp_path)
    plant(tmp_path, 3, 98)
    corrupt(tmp_path, 4)
    producers, retries, lso, fenced = run(tmp_path, second_life, SOLE)
    assert [p for p in producers if p.producer_id != 98] == ended_with  # type: ignore[attr-defined]
    assert (retries, lso, fenced) == ([4, 3], 2, [True, False])  # from the snapshot at 3

    again = tmp_path / "again"
    ended_with = crashed_after_two_rolls(again)
    corrupt(again, 3)
    corrupt(again, 4)
    producers, retries, lso, fenced = run(again, second_life, SOLE)
    assert producers == ended_with
    assert (retries, lso, fenced) == ([4, 3], 2, [False, False])  # from the log


def test_an_unclean_start_trusts_no_snapshot_above_the_recovery_point(tmp_path: Path) -> None:
    """The last life had made the log durable only up to 3 (its recovery point checkpoint):
    the crash may have changed what lies above, so the snapshot at 4 is removed unread and
    the one at 3 used."""
    ended_with = crashed_after_two_rolls(tmp_path)
    plant(tmp_path, 3, 98)
    plant(tmp_path, 4, 99)
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n1\na 0 3\n")
    producers, retries, lso, fenced = run(tmp_path, second_life, SOLE)
    assert [p for p in producers if p.producer_id != 98] == ended_with  # type: ignore[attr-defined]
    assert (retries, lso, fenced) == ([4, 3], 2, [True, False])
    assert not (tmp_path / "a-0" / f"{4:020d}.snapshot").exists()


def test_a_partition_keeps_its_three_latest_snapshots() -> None:
    """Clean shutdowns without a roll in between, then rolls: never more than three."""

    async def run_it() -> None:
        _, runtime, _ = make_runtime()
        fs = runtime.fs
        fs.mkdir(DIR)
        entry = [SnapshotEntry(7, 0, 0, 0, 0, 0, -1, -1)]
        for offset in (1, 2, 3, 4):
            await write_snapshot(fs, DIR, offset, entry)
        put_snapshot(fs, DIR, 5, entry, log_start=0)
        put_snapshot(fs, DIR, 6, entry, log_start=5)  # 4 is below the log start now
        kept = sorted(n for n in fs.list_dir(DIR) if n.endswith(".snapshot"))
        assert kept == [f"{5:020d}.snapshot", f"{6:020d}.snapshot"]

    asyncio.run(run_it())
