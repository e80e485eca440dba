"""Kafka's text checkpoint files: exact format, round trips, atomic replacement, and a
specific error (file and line) for anything that does not parse."""

from __future__ import annotations

import asyncio
import random

import pytest

from log.checkpoint import (
    CheckpointError,
    EpochEntry,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
)
from log.fs import read_all
from sim.disk import SimDisk


def _disk_and_fs():
    disk = SimDisk(random.Random(0))
    fs = disk.fs()
    fs.mkdir("/d")
    return disk, fs


def test_offset_checkpoint_has_kafkas_text_format_and_round_trips() -> None:
    _, fs = _disk_and_fs()
    checkpoint = OffsetCheckpointFile(fs, "/d/recovery-point-offset-checkpoint")
    offsets = {("topic2", 0): 2, ("__consumer_offsets", 22): 3, ("topic1", 0): 45}
    asyncio.run(checkpoint.write(offsets))
    assert read_all(fs, checkpoint.path) == (
        b"0\n3\n__consumer_offsets 22 3\ntopic1 0 45\ntopic2 0 2\n"
    )
    assert checkpoint.read() == offsets


def test_missing_checkpoint_reads_as_empty() -> None:
    _, fs = _disk_and_fs()
    assert OffsetCheckpointFile(fs, "/d/none").read() == {}
    assert LeaderEpochCheckpointFile(fs, "/d/none").read() == []


def test_checkpoint_replacement_is_atomic_across_a_crash() -> None:
    disk, fs = _disk_and_fs()
    asyncio.run(OffsetCheckpointFile(fs, "/d/cp").write({("a", 0): 1}))
    fs.open("/d/cp.tmp").pwrite(0, b"garbage")  # an interrupted later write
    disk.crash()
    assert OffsetCheckpointFile(disk.fs(), "/d/cp").read() == {("a", 0): 1}


@pytest.mark.parametrize(
    ("content", "line"),
    [
        (b"1\n0\n", 1),  # unknown version
        (b"0\n", 2),  # no count line
        (b"0\nx\n", 2),  # count not a number
        (b"0\n2\na 0 1\n", 4),  # fewer entries than counted
        (b"0\n1\na 0 1\nb 0 2\n", 4),  # more entries than counted
        (b"0\n1\na 0\n", 3),  # missing field
        (b"0\n1\na zero 1\n", 3),  # partition not a number
        (b"0\n2\na 0 1\na 0 2\n", 4),  # duplicate partition
        (b"0\n1\na 0 1", 3),  # torn: no final newline
        (b"\xff\n", 1),  # not text
    ],
)
def test_garbled_offset_checkpoint_names_file_and_line(content: bytes, line: int) -> None:
    _, fs = _disk_and_fs()
    fs.open("/d/cp").pwrite(0, content)
    with pytest.raises(CheckpointError) as info:
        OffsetCheckpointFile(fs, "/d/cp").read()
    assert info.value.path == "/d/cp"
    assert info.value.line_number == line
    assert "/d/cp" in str(info.value)


def test_leader_epoch_checkpoint_round_trips() -> None:
    _, fs = _disk_and_fs()
    checkpoint = LeaderEpochCheckpointFile(fs, "/d/leader-epoch-checkpoint")
    entries = [EpochEntry(0, 0), EpochEntry(3, 120), EpochEntry(4, 500)]
    asyncio.run(checkpoint.write(entries))
    assert read_all(fs, checkpoint.path) == b"0\n3\n0 0\n3 120\n4 500\n"
    assert checkpoint.read() == entries


def test_leader_epoch_checkpoint_that_is_not_monotone_is_corrupt() -> None:
    _, fs = _disk_and_fs()
    fs.open("/d/lec").pwrite(0, b"0\n2\n3 100\n2 200\n")
    with pytest.raises(CheckpointError) as info:
        LeaderEpochCheckpointFile(fs, "/d/lec").read()
    assert info.value.line_number == 4


def test_topic_names_that_would_break_the_format_are_refused() -> None:
    _, fs = _disk_and_fs()
    with pytest.raises(ValueError):
        asyncio.run(OffsetCheckpointFile(fs, "/d/cp").write({("a b", 0): 1}))
