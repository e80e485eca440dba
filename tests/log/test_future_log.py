"""Moving a partition's log to another log dir (AlterReplicaLogDirs, KIP-113): the copy, the
swap, and what a crash at each step leaves."""

from __future__ import annotations

import asyncio
import errno

from log.checkpoint import LEADER_EPOCH_CHECKPOINT
from log.future_log import FUTURE_DIR_SUFFIX, FutureLog
from log.log import Log
from log.manager import LogManager
from log.txn_index import AbortedTxn
from tests.log.test_manager import Node, batch


def all_batches(log: Log) -> bytes:
    """Every batch of ``log`` from its start, as stored."""
    out = bytearray()
    offset = log.log_start_offset
    while offset < log.log_end_offset:  # bounded: each read moves past one batch at least
        info = log.read(offset, 1 << 20)
        data = bytes(info.records)
        assert data, (log, offset)
        out += data
        offset = _next(data)
    return bytes(out)


def _next(data: bytes) -> int:
    """The offset after the last batch of ``data`` (whole batches)."""
    position, last = 0, -1
    while position < len(data):
        base = int.from_bytes(data[position : position + 8], "big")
        length = int.from_bytes(data[position + 8 : position + 12], "big")
        delta = int.from_bytes(data[position + 23 : position + 27], "big")
        last = base + delta
        position += 12 + length
    return last + 1


async def _filled(manager: LogManager, batches: int) -> Log:
    await manager.load_logs()
    log = await manager.get_or_create_log("t", 0)
    for index in range(batches):
        log.append_as_leader(batch(), 1 if index < batches // 2 else 2)
    return log


async def _two_dirs(batches: int, **config: int) -> tuple[Node, LogManager, Log]:
    """A node on /d1 and /d2 whose log t-0, in /d1, holds ``batches`` batches."""
    node = Node(dirs=["/d1", "/d2"], **config)
    manager = node.manager()
    return node, manager, await _filled(manager, batches)


async def _move_is(manager: LogManager, future: FutureLog, expected: bytes) -> None:
    """Copy the rest of ``future`` (150 bytes a slice), swap it in, and check that the
    moved log, now in /d2, holds ``expected``."""
    while not future.caught_up:  # bounded: each slice copies one batch at least
        await future.copy_slice(150)
    assert await manager.promote_future_log("t", 0, "u2", lambda _log: None) == "/d2"
    moved = manager.get_log("t", 0)
    assert moved is not None and all_batches(moved) == expected


def test_a_moved_log_is_the_same_log_with_the_appends_made_while_it_was_copied() -> None:
    async def run() -> None:
        node, manager, source = await _two_dirs(20, segment_bytes=400)
        assert manager.log_dir_of("t", 0) == "/d1"
        source.append_aborted_txn(AbortedTxn(7, 2, 5, 2))
        node.disk.fs().open("/d1/t-0/partition.metadata").append(b"version: 0\n")
        future = await manager.create_future_log("t", 0, "/d2", "u1")
        assert future.log.dir_path.endswith(f"t-0.u1{FUTURE_DIR_SUFFIX}")
        appended = 0
        while not future.caught_up:  # bounded: each slice copies one batch at least
            assert await future.copy_slice(150) > 0
            if appended < 10:  # the partition keeps taking appends while it is copied
                source.append_as_leader(batch(), 3)
                appended += 1
        source.append_as_leader(batch(), 3)  # after the last slice: finish copies it
        source.leader_epoch_cache.assign(4, source.log_end_offset)  # an epoch with no batch
        await source.delete_records(3)
        expected = all_batches(source)
        epochs = source.leader_epoch_cache.entries()
        swapped: list[Log] = []

        new_dir = await manager.promote_future_log("t", 0, "u2", swapped.append)

        assert new_dir == "/d2" and manager.log_dir_of("t", 0) == "/d2"
        moved = manager.get_log("t", 0)
        assert moved is not None and swapped == [moved] and moved is future.log
        assert moved.dir_path == "/d2/t-0"
        assert moved.log_end_offset == 31 and moved.log_start_offset == 3
        assert all_batches(moved) == expected
        assert moved.leader_epoch_cache.entries() == epochs
        assert moved.aborted_txns() == [AbortedTxn(7, 2, 5, 2)]
        assert len(moved.segments) > 1
        fs = node.disk.fs()
        assert not any(n.startswith("t-0") for n in fs.list_dir("/d1"))  # -delete removed
        assert "partition.metadata" in fs.list_dir("/d2/t-0")
        assert manager.future_log_of("t", 0) is None and not source.is_online
        # The moved log takes appends (a roll among them) and survives a restart there.
        for _ in range(5):
            moved.append_as_leader(batch(), 4)
        expected = all_batches(moved)
        await manager.shutdown()
        restarted = node.manager()
        await restarted.load_logs()
        again = restarted.get_log("t", 0)
        assert again is not None and restarted.log_dir_of("t", 0) == "/d2"
        assert all_batches(again) == expected and again.log_start_offset == 3
        assert again.leader_epoch_cache.entries()[-1].epoch == 4

    asyncio.run(run())


def test_a_crash_in_the_middle_of_the_copy_leaves_the_original_and_the_copy_resumes() -> None:
    async def run() -> None:
        node, manager, source = await _two_dirs(20, segment_bytes=400)
        await source.flush()
        await manager.checkpoint_log_recovery_offsets()
        expected = all_batches(source)
        future = await manager.create_future_log("t", 0, "/d2", "u1")
        for _ in range(3):
            await future.copy_slice(150)
        await future.log.flush()
        copied = future.log.log_end_offset
        assert 0 < copied < source.log_end_offset
        future.log.append_as_follower(bytes(source.read(copied, 150).records))  # unsynced
        node.disk.crash()

        restarted = node.manager()
        await restarted.load_logs()
        log = restarted.get_log("t", 0)
        assert log is not None and restarted.log_dir_of("t", 0) == "/d1"
        assert all_batches(log) == expected  # the original, whole and where it was
        resumed = restarted.future_log_of("t", 0)
        assert resumed is not None and resumed.log_dir == "/d2" and resumed.source is log
        assert copied <= resumed.log.log_end_offset < log.log_end_offset
        await _move_is(restarted, resumed, expected)

    asyncio.run(run())


def test_a_copy_found_at_start_up_that_no_longer_matches_starts_again() -> None:
    async def run() -> None:
        node, manager, source = await _two_dirs(12, segment_bytes=400)
        future = await manager.create_future_log("t", 0, "/d2", "u1")
        for _ in range(4):
            await future.copy_slice(150)
        await future.log.flush()
        copied = future.log.log_end_offset
        # The original is cut below the copy's end and takes other batches, in a new epoch.
        await source.truncate_to(copied - 2)
        for _ in range(4):
            source.append_as_leader(batch(ts=1), 9)
        await source.flush()
        await manager.checkpoint_log_recovery_offsets()
        expected = all_batches(source)
        node.disk.crash()

        restarted = node.manager()
        await restarted.load_logs()
        resumed = restarted.future_log_of("t", 0)
        assert resumed is not None and resumed.log.log_end_offset == 0  # started again
        await _move_is(restarted, resumed, expected)

    asyncio.run(run())


def test_a_crash_between_the_two_renames_keeps_one_whole_log() -> None:
    async def run() -> None:
        node, manager, source = await _two_dirs(12, segment_bytes=400)
        await source.flush()
        await manager.checkpoint_log_recovery_offsets()
        expected = all_batches(source)
        future = await manager.create_future_log("t", 0, "/d2", "u1")
        while not future.caught_up:
            await future.copy_slice()
        assert future.finish()
        await future.log.flush()
        # The copy took the partition's name, durably; the original was not renamed yet.
        future.log.rename_dir("/d2/t-0")
        await node.disk.fs().fsync_dir("/d2")
        node.disk.crash()

        restarted = node.manager()
        await restarted.load_logs()
        log = restarted.get_log("t", 0)
        assert log is not None and all_batches(log) == expected
        dirs = [d for d in ("/d1", "/d2") if "t-0" in node.disk.fs().list_dir(d)]
        assert dirs == [restarted.log_dir_of("t", 0)]

    asyncio.run(run())


def test_a_truncation_of_the_original_restarts_the_copy() -> None:
    async def run() -> None:
        _, manager, source = await _two_dirs(12, segment_bytes=400)
        future = await manager.create_future_log("t", 0, "/d2", "u1")
        for _ in range(4):
            await future.copy_slice(150)
        copied = future.log.log_end_offset
        await source.truncate_to(copied - 2)  # a follower's divergence, below the copy's end
        for _ in range(3):
            source.append_as_leader(batch(ts=1), 9)  # different batches at those offsets
        assert not future.finish()  # diverged: never swapped as it is
        await _move_is(manager, future, all_batches(source))

    asyncio.run(run())


def test_abandoning_a_copy_removes_it_and_leaves_the_log_serving() -> None:
    async def run() -> None:
        node, manager, source = await _two_dirs(4)
        future = await manager.create_future_log("t", 0, "/d2", "u1")
        await future.copy_slice()
        await manager.abandon_future_log("t", 0)
        assert manager.future_log_of("t", 0) is None
        assert not any("t-0" in n for n in node.disk.fs().list_dir("/d2"))
        source.append_as_leader(batch(), 2)
        assert manager.get_log("t", 0) is source and source.log_end_offset == 5
        await source.flush()
        assert LEADER_EPOCH_CHECKPOINT in node.disk.fs().list_dir("/d1/t-0")

    asyncio.run(run())


def test_a_copy_into_a_dir_that_fails_is_never_swapped_in() -> None:
    async def run() -> None:
        _, manager, source = await _two_dirs(4)
        future = await manager.create_future_log("t", 0, "/d2", "u1")
        while not future.caught_up:
            await future.copy_slice()
        manager.fail_log_dir("/d2", OSError(errno.EIO, "I/O error"))
        assert not future.log.is_online
        assert await manager.promote_future_log("t", 0, "u2", lambda _log: None) is None
        assert manager.get_log("t", 0) is source and manager.log_dir_of("t", 0) == "/d1"
        source.append_as_leader(batch(), 2)  # still serving where it was

    asyncio.run(run())
