"""Kafka's own classes (kafka-clients and kafka-storage 4.1.0) agree with kraft-py's
transaction formats byte for byte: the commit and abort markers MemoryRecords writes, the
``.txnindex`` files TransactionIndex reads and writes, and the producer ``.snapshot`` files
ProducerStateManager reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.producer_snapshot import SnapshotEntry, encode_snapshot
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.fs import RealFileSystem
from log.txn_index import AbortedTxn, TransactionIndex
from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)

pytestmark = pytest.mark.usefixtures("kafka_tools")
FORMATS = Path(__file__).resolve().parent.parent / "java" / "TxnFormats.java"
ENTRIES = [AbortedTxn(7, 0, 4, 2), AbortedTxn(2**40 + 3, 2, 9, 6), AbortedTxn(9, 6, 12, 13)]


@pytest.mark.parametrize(
    ("producer_id", "epoch", "commit", "coordinator_epoch"),
    [(42, 3, True, 5), (2**50, 32_000, False, 0), (0, 0, True, 2**31 - 1)],
)
def test_markers_are_the_bytes_kafka_writes(
    producer_id: int, epoch: int, commit: bool, coordinator_epoch: int
) -> None:
    timestamp = 1_700_000_000_123
    args = ["marker", str(producer_id), str(epoch), str(commit).lower()]
    kafka = tools.run(str(FORMATS), *args, str(coordinator_epoch), str(timestamp)).stdout
    ours = encode_marker_batch(
        producer_id, epoch, EndTransactionMarker(commit, coordinator_epoch), timestamp
    )
    assert kafka.strip() == ours.hex()


def test_kafka_reads_our_txnindex_and_we_read_kafkas(tmp_path: Path) -> None:
    ours = tmp_path / "ours.txnindex"
    index = TransactionIndex(RealFileSystem(), str(ours))
    for entry in ENTRIES:
        index.append(entry)
    index.close()
    lines = tools.run(str(FORMATS), "read-index", str(ours)).stdout.splitlines()
    assert lines == [
        f"{e.producer_id} {e.first_offset} {e.last_offset} {e.last_stable_offset}" for e in ENTRIES
    ]
    theirs = tmp_path / "theirs.txnindex"
    entries = [
        f"{e.producer_id}:{e.first_offset}:{e.last_offset}:{e.last_stable_offset}" for e in ENTRIES
    ]
    tools.run(str(FORMATS), "write-index", str(theirs), *entries)
    assert theirs.read_bytes() == ours.read_bytes()
    assert TransactionIndex(RealFileSystem(), str(theirs)).entries == ENTRIES


def test_kafka_reads_our_producer_snapshot(tmp_path: Path) -> None:
    entries = [
        SnapshotEntry(7, 2, 4, 10, 2, 1_700_000_000_000, -1, -1),
        SnapshotEntry(2**40, 32_000, 2**31 - 1, 2**40, 0, 5, 17, 9),
        SnapshotEntry(9, 0, -1, -1, 0, 6, 3, -1),  # only a marker: no batch
    ]
    path = tmp_path / f"{11:020d}.snapshot"
    path.write_bytes(encode_snapshot(entries))
    lines = tools.run(str(FORMATS), "read-snapshot", str(path)).stdout.splitlines()
    expected = [
        f"{e.producer_id} {e.epoch} {e.last_sequence} {e.last_offset} {e.offset_delta} "
        f"{e.timestamp} {e.coordinator_epoch} {e.current_txn_first_offset}"
        for e in entries
    ]
    assert sorted(lines) == sorted(expected)
