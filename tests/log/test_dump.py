"""dump_files (kafka-dump-log): batch and record lines, index dumps, the index sanity check,
and reports (not crashes) for torn or corrupt data and missing files."""

from __future__ import annotations

import asyncio
import io
import random
import struct

from log.batch import encode_batch
from log.config import LogConfig
from log.dump import dump_files
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.log import Log
from log.records import Header, Record
from log.runtime import Runtime
from log.txn_index import AbortedTxn
from sim.disk import SimDisk

DIR = "/data/t-0"
LOG = f"{DIR}/00000000000000000000.log"
INDEX = f"{DIR}/00000000000000000000.index"
TIME_INDEX = f"{DIR}/00000000000000000000.timeindex"


class Clock:
    def now_ms(self) -> int:
        return 1_700_000_000_000


def _written_log():
    disk = SimDisk(random.Random(0))
    fs = disk.fs()
    fs.mkdir("/data")
    runtime = Runtime(fs, Clock(), random.Random(0))

    async def write() -> None:
        log = await Log.open(runtime, DIR, LogConfig(index_interval_bytes=50))
        log.append_as_leader(
            encode_batch(
                [
                    Record(b"key", b"hello", 1000, (Header("h", b"x"),)),
                    Record(None, b"world", 1001),
                ],
                producer_id=7,
                producer_epoch=1,
                base_sequence=0,
            ),
            leader_epoch=3,
        )
        for n in range(5):
            log.append_as_leader(encode_batch([Record(b"k", b"v" * 30, 2000 + n)]), 3)
        await log.close()

    asyncio.run(write())
    return fs


def _dump(fs, paths, **flags) -> tuple[int, list[str]]:
    out = io.StringIO()
    code = dump_files(
        paths,
        print_records=flags.get("print_records", False),
        index_sanity_check=flags.get("index_sanity_check", False),
        out=out,
        fs=fs,
    )
    return code, out.getvalue().splitlines()


def test_log_dump_prints_one_line_per_batch_like_kafka() -> None:
    fs = _written_log()
    code, lines = _dump(fs, [LOG])
    assert code == 0
    assert lines[0] == f"Dumping {LOG}"
    assert lines[1] == "Log starting offset: 0"
    assert lines[2].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 7 "
        "producerEpoch: 1 partitionLeaderEpoch: 3 isTransactional: false isControl: false "
        "position: 0 CreateTime: 1001 size: "
    )
    assert lines[2].endswith("isvalid: true")
    assert "compresscodec: none" in lines[2]
    assert len(lines) == 2 + 6


def test_print_records_shows_offset_timestamp_key_value_and_headers() -> None:
    fs = _written_log()
    _, lines = _dump(fs, [LOG], print_records=True)
    assert lines[3] == (
        "| offset: 0 CreateTime: 1000 keySize: 3 valueSize: 5 sequence: 0 headerKeys: [h] "
        "key: key payload: hello headers: [h=x]"
    )
    assert lines[4].startswith("| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 5")
    assert "key: null payload: world" in lines[4]


def test_torn_tail_and_bad_crc_are_reported_not_fatal() -> None:
    fs = _written_log()
    handle = fs.open(LOG)
    size = handle.size()
    handle.pwrite(70, b"\xff")  # inside the first batch's CRC range
    handle.append(b"\x00" * 20)  # torn tail
    code, lines = _dump(fs, [LOG])
    assert code == 0
    assert "isvalid: false" in lines[2]
    assert lines[3].startswith("found corrupt batch at position 0: ")
    assert lines[-1].startswith(f"found corrupt batch at position {size}: ")


def test_index_dump_and_sanity_check() -> None:
    fs = _written_log()
    code, lines = _dump(fs, [INDEX, TIME_INDEX])
    assert code == 0
    assert lines[0] == f"Dumping {INDEX}"
    offset_lines = [line for line in lines if line.startswith("offset: ")]
    assert offset_lines and all(" position: " in line for line in offset_lines)
    assert any(line.startswith("timestamp: ") for line in lines)
    code, lines = _dump(fs, [INDEX, TIME_INDEX], index_sanity_check=True)
    assert code == 0
    assert any(line.endswith("passed sanity check: " + line.split(": ")[-1]) for line in lines)
    assert not any("Mismatches" in line for line in lines)


def test_sanity_check_reports_an_entry_that_points_at_the_wrong_batch() -> None:
    fs = _written_log()
    handle = fs.open(INDEX)
    rel, position = struct.unpack(">II", handle.pread(0, 8))
    handle.pwrite(0, struct.pack(">II", rel + 100, position))
    _, lines = _dump(fs, [INDEX], index_sanity_check=True)
    assert f"Mismatches in :{INDEX}" in lines
    assert f"  Index offset: {rel + 100}, log offset: {rel}" in lines
    assert lines[-1].startswith(f"{INDEX} failed sanity check")


def test_missing_or_unsupported_file_is_one_line_and_exit_code_1() -> None:
    fs = _written_log()
    code, lines = _dump(fs, [f"{DIR}/nope.log", LOG])
    assert code == 1
    assert lines[0] == f"error: {DIR}/nope.log: no such file"
    assert lines[1] == f"Dumping {LOG}"
    code, lines = _dump(fs, [f"{DIR}/leader-epoch-checkpoint"])
    assert code == 1 and len(lines) == 1


def test_markers_and_the_txnindex_are_dumped_like_kafka() -> None:
    disk = SimDisk(random.Random(0))
    fs = disk.fs()
    fs.mkdir("/data")
    runtime = Runtime(fs, Clock(), random.Random(0))

    async def write() -> None:
        log = await Log.open(runtime, DIR, LogConfig())
        marker = encode_marker_batch(7, 1, EndTransactionMarker(False, 4), 1000)
        log.append_as_leader(bytearray(marker), leader_epoch=3)
        log.append_aborted_txn(AbortedTxn(7, 0, 0, 1))
        await log.close()

    asyncio.run(write())
    code, lines = _dump(fs, [LOG], print_records=True)
    assert code == 0 and "isTransactional: true isControl: true" in lines[2]
    assert lines[3].endswith("endTxnMarker: ABORT coordinatorEpoch: 4")
    code, lines = _dump(fs, [f"{DIR}/00000000000000000000.txnindex"])
    assert (code, lines[1]) == (
        0,
        "version: 0 producerId: 7 firstOffset: 0 lastOffset: 0 lastStableOffset: 1",
    )
    fs.open(f"{DIR}/00000000000000000000.txnindex").append(b"\x00")  # torn
    code, lines = _dump(fs, [f"{DIR}/00000000000000000000.txnindex"])
    assert code == 1 and "not whole entries" in lines[1]
