"""The aborted-transaction index (.txnindex) and the commit/abort markers, byte for byte as
Kafka writes them, and their life with the log: per segment, searched across segments,
truncated with the log, cut by recovery, deleted with segments, repaired, kept by the
cleaner's segment swap."""

from __future__ import annotations

import asyncio

import pytest

from log.batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    decode_batch,
    encode_batch,
    parse_header,
)
from log.cleaner import clean_log, first_uncleanable_offset
from log.end_txn_marker import EndTransactionMarker, decode_marker, encode_marker_batch
from log.log import Log
from log.records import ControlRecordType, Record, encode_control_key
from log.segment import DELETED_SUFFIX, segment_path
from log.txn_index import (
    ENTRY_SIZE,
    TXN_INDEX_SUFFIX,
    AbortedTxn,
    CorruptTxnIndexError,
    TransactionIndex,
)
from tests.log.test_log import DIR, NOW_MS, batch, config, make_runtime

PATH = "/data/00000000000000000000.txnindex"


def test_an_entry_is_kafkas_34_bytes() -> None:
    """Kafka's AbortedTxn: version i16 at 0, producerId i64 at 2, firstOffset i64 at 10,
    lastOffset i64 at 18, lastStableOffset i64 at 26; 34 bytes, big-endian."""
    entry = AbortedTxn(0x0102030405060708, 5, 9, 10)
    golden = bytes.fromhex("0000010203040506070800000000000000050000000000000009000000000000000a")
    assert entry.encode() == golden and len(golden) == ENTRY_SIZE
    assert AbortedTxn.decode(golden) == entry
    with pytest.raises(CorruptTxnIndexError):
        AbortedTxn.decode(b"\x00\x01" + golden[2:])  # an unknown version


def test_the_index_file_exists_once_it_has_an_entry_and_survives_a_reopen() -> None:
    _, runtime, _ = make_runtime()
    fs = runtime.fs
    index = TransactionIndex(fs, PATH)
    assert index.entries == [] and not fs.exists(PATH)
    index.truncate_to(0)  # nothing to cut: still no file
    assert not fs.exists(PATH)
    first, second = AbortedTxn(7, 0, 4, 5), AbortedTxn(8, 2, 9, 10)
    index.append(first)
    index.append(second)
    with pytest.raises(ValueError, match="does not follow"):
        index.append(AbortedTxn(9, 3, 9, 10))  # markers come in offset order
    index.close()
    assert fs.file_size(PATH) == 2 * ENTRY_SIZE
    assert TransactionIndex(fs, PATH).entries == [first, second]


def test_a_torn_or_disordered_index_is_reported_corrupt() -> None:
    _, runtime, _ = make_runtime()
    fs = runtime.fs
    handle = fs.open(PATH)
    handle.append(AbortedTxn(7, 0, 4, 5).encode()[:20])
    with pytest.raises(CorruptTxnIndexError, match="not whole entries"):
        _ = TransactionIndex(fs, PATH).entries
    handle.truncate(0)
    handle.append(AbortedTxn(7, 0, 9, 10).encode() + AbortedTxn(8, 0, 4, 5).encode())
    with pytest.raises(CorruptTxnIndexError, match="out of order"):
        _ = TransactionIndex(fs, PATH).entries


def test_recovery_cuts_a_torn_last_entry_and_keeps_the_whole_ones() -> None:
    """A power cut that tore the last append (found by kraft-sim --transactions, kafka
    seed 3: the broker died at start-up on "1025 bytes is not whole entries")."""
    _, runtime, _ = make_runtime()
    fs = runtime.fs
    handle = fs.open(PATH)
    kept = AbortedTxn(7, 0, 4, 5)
    handle.append(kept.encode() + AbortedTxn(8, 0, 9, 10).encode()[:20])
    index = TransactionIndex(fs, PATH)
    assert index.cut_torn_tail() == 20
    assert index.entries == [kept]
    assert fs.file_size(PATH) == ENTRY_SIZE
    assert TransactionIndex(fs, PATH).cut_torn_tail() == 0


def test_search_returns_overlapping_entries_and_stops_at_the_stable_offset() -> None:
    _, runtime, _ = make_runtime()
    index = TransactionIndex(runtime.fs, PATH)
    # 7: [0, 4], 8: [2, 9] (the LSO after 8's abort was 6: 9's transaction was open),
    # 9: [6, 12].
    entries = [AbortedTxn(7, 0, 4, 2), AbortedTxn(8, 2, 9, 6), AbortedTxn(9, 6, 12, 13)]
    for entry in entries:
        index.append(entry)
    assert index.collect(5, 6).aborted == (entries[1],)  # 7 ended before 5; 9 began at 6
    assert index.collect(5, 6).complete  # 8's stable offset 6 reaches the bound
    assert index.collect(0, 3).aborted == (entries[0], entries[1])
    assert not index.collect(10, 20).complete  # a later segment may hold more
    assert index.collect(10, 20).aborted == (entries[2],)
    index.truncate_to(9)  # the log lost offset 9 on: 8's and 9's markers are gone
    assert index.entries == [entries[0]]


def test_markers_are_kafkas_end_transaction_marker_control_batches() -> None:
    data = encode_marker_batch(42, 3, EndTransactionMarker(True, 5), NOW_MS)
    header = parse_header(data)
    assert header.attributes == TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK  # and no codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, -1)
    assert (header.records_count, header.last_offset_delta) == (1, 0)
    (record,) = decode_batch(data)[1]
    assert record.key == bytes.fromhex("00000001")  # version 0, COMMIT
    assert record.value == bytes.fromhex("000000000005")  # version 0, coordinator epoch
    assert record.timestamp == NOW_MS and record.headers == ()
    assert decode_marker(data, 0, header) == EndTransactionMarker(True, 5)
    abort = encode_marker_batch(42, 3, EndTransactionMarker(False, 0), NOW_MS)
    assert decode_batch(abort)[1][0].key == bytes.fromhex("00000000")
    assert decode_marker(abort, 0, parse_header(abort)) == EndTransactionMarker(False, 0)
    # Not a marker: a data batch, or another kind of control record.
    plain = batch(1)
    assert decode_marker(plain, 0, parse_header(plain)) is None
    other = encode_batch(
        [Record(encode_control_key(ControlRecordType.LEADER_CHANGE), b"\x00\x00", NOW_MS)],
        is_control=True,
    )
    assert decode_marker(other, 0, parse_header(other)) is None


def test_the_log_indexes_aborts_per_segment_and_searches_across_them() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        fs = runtime.fs
        log = await Log.open(runtime, DIR, config(segment_bytes=400))  # 2 batches each
        for _ in range(6):
            log.append_as_leader(batch(2), 0)
        assert [(s.base_offset, s.next_offset) for s in log.segments] == [(0, 4), (4, 8), (8, 12)]
        spanning = AbortedTxn(1, 2, 7, 8)  # began in the first segment, marker in the second
        later = AbortedTxn(2, 9, 11, 12)
        log.append_aborted_txn(spanning)
        log.append_aborted_txn(later)
        files = [fs.exists(segment_path(DIR, b, TXN_INDEX_SUFFIX)) for b in (0, 4, 8)]
        assert files == [False, True, True]  # only segments with entries have a file
        # A fetch of the first segment alone finds the transaction whose marker is later.
        assert log.collect_aborted_txns(0, 4) == [spanning]
        assert log.collect_aborted_txns(0, 12) == [spanning, later]
        assert log.collect_aborted_txns(8, 9) == []  # 2's begins at 9
        assert log.collect_aborted_txns(11, 12) == [later]
        # Truncation drops entries with their markers; retention drops files with segments.
        await log.truncate_to(11)
        assert log.aborted_txns() == [spanning]
        await log.delete_records(8)
        await log.delete_old_segments()
        assert [s.base_offset for s in log.segments] == [8]
        assert not fs.exists(segment_path(DIR, 4, TXN_INDEX_SUFFIX))
        assert not fs.exists(segment_path(DIR, 4, TXN_INDEX_SUFFIX) + DELETED_SUFFIX)
        await log.close()

    asyncio.run(run())


def test_recovery_cuts_entries_whose_marker_was_lost_and_repair_adds_lost_entries() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config())
        log.append_as_leader(batch(2), 0)  # 0-1
        kept = log.size
        log.append_as_leader(batch(2), 0)  # 2-3
        log.append_aborted_txn(AbortedTxn(5, 0, 1, 2))
        log.append_aborted_txn(AbortedTxn(6, 2, 3, 4))
        # A crash kept the index but not the log's tail (unclean: no close, recovery).
        runtime.fs.open(segment_path(DIR, 0, ".log"), create=False).truncate(kept)
        reopened = await Log.open(runtime, DIR, config())
        assert reopened.log_end_offset == 2
        assert reopened.aborted_txns() == [AbortedTxn(5, 0, 1, 2)]
        # The other way round: data that survived, an entry that did not.
        assert reopened.repair_txn_indexes([AbortedTxn(5, 0, 1, 2)]) == 0
        reopened.segments[0].txn_index.replace([])
        assert reopened.repair_txn_indexes([AbortedTxn(5, 0, 1, 2)]) == 1
        assert reopened.aborted_txns() == [AbortedTxn(5, 0, 1, 2)]
        await reopened.close()

    asyncio.run(run())


def test_the_cleaner_removes_aborted_records_keeps_markers_and_their_index() -> None:
    """An aborted write of a key never makes the committed one go (it is not in the offset
    map), its records are removed, markers stay, and the .txnindex entries survive the
    swap of the cleaned segments."""

    def txn(producer_id: int, key: bytes, value: bytes) -> bytes:
        record = Record(key, value, NOW_MS)
        return encode_batch(
            [record],
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=0,
            is_transactional=True,
        )

    def plain(key: bytes, value: bytes) -> bytes:
        return encode_batch([Record(key, value, NOW_MS)])

    def marker(producer_id: int, commit: bool) -> bytes:
        return encode_marker_batch(producer_id, 0, EndTransactionMarker(commit, 0), NOW_MS)

    async def run() -> None:
        _, runtime, _ = make_runtime()
        compact = config(cleanup_policy=("compact",), segment_bytes=300)
        log = await Log.open(runtime, DIR, compact)
        for data in (
            plain(b"k", b"committed"),  # 0
            txn(7, b"k", b"aborted"),  # 1
            marker(7, False),  # 2
            txn(8, b"j", b"j-old"),  # 3
            marker(8, True),  # 4
            plain(b"j", b"j-new"),  # 5
            plain(b"x", b"x"),  # 6
            plain(b"y", b"y"),  # 7
        ):
            log.append_as_leader(bytearray(data), 0)
        log.append_aborted_txn(AbortedTxn(7, 1, 2, 3))
        await log.flush()
        assert len(log.segments) >= 3
        aborted_before = log.aborted_txns()
        result = await clean_log(log, 0, now_ms=NOW_MS, high_watermark=log.log_end_offset)
        assert result is not None and result.segments_cleaned >= 2
        kept: list[tuple[int, bytes | None, bytes | None]] = []
        controls = []
        for segment in log.segments:
            for location in segment.batch_locations():
                data = segment.log.pread(location.position, location.size)
                header, records = decode_batch(data)
                if header.is_control:
                    controls.append(header.base_offset)
                kept += [
                    (header.base_offset, r.key, r.value) for r in records if not header.is_control
                ]
        assert controls == [2, 4]  # markers stay
        assert (0, b"k", b"committed") in kept  # the aborted write of k did not shadow it
        assert all(value != b"aborted" for _, _, value in kept)  # aborted records are gone
        assert (3, b"j", b"j-old") not in kept and (5, b"j", b"j-new") in kept
        assert log.aborted_txns() == aborted_before == [AbortedTxn(7, 1, 2, 3)]
        await log.close()

    asyncio.run(run())


def test_the_cleaner_stops_at_the_last_stable_offset() -> None:
    async def run() -> None:
        _, runtime, _ = make_runtime()
        log = await Log.open(runtime, DIR, config(cleanup_policy=("compact",), segment_bytes=300))
        for _ in range(8):
            log.append_as_leader(bytearray(batch(1)), 0)
        await log.flush()
        bases = [s.base_offset for s in log.segments]
        assert len(bases) >= 3
        # An open transaction from the second segment on: only the first may be cleaned.
        assert first_uncleanable_offset(log, NOW_MS, bases[1] + 1) == bases[1]
        assert first_uncleanable_offset(log, NOW_MS, log.log_end_offset) == bases[-1]
        await log.close()

    asyncio.run(run())
