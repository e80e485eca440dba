"""The simulated disk's power-cut model, directory journal and injected faults."""

from __future__ import annotations

import asyncio
import errno
import random

import pytest

from sim.disk import SimDisk


def fresh_file(seed: int) -> tuple[SimDisk, bytes, bytes]:
    """A disk whose /f holds 8 synced bytes followed by 8 unsynced ones."""
    disk = SimDisk(random.Random(seed))
    fs = disk.fs()
    handle = fs.open("/f")
    asyncio.run(fs.fsync_dir("/"))
    synced, unsynced = b"SYNCED!!", b"unsynced"
    handle.append(synced)
    asyncio.run(handle.fsync())
    handle.append(unsynced)
    return disk, synced, unsynced


def test_crash_loses_exactly_the_unsynced_bytes() -> None:
    outcomes = set()
    for seed in range(200):
        disk, synced, unsynced = fresh_file(seed)
        disk.crash()
        data = disk.fs().open("/f").pread(0, 100)
        assert data.startswith(synced)
        tail = data[len(synced) :]
        assert unsynced.startswith(tail)
        outcomes.add("lost" if not tail else "kept" if tail == unsynced else "torn")
    # Every outcome a power cut can have shows up across seeds.
    assert outcomes == {"lost", "kept", "torn"}


def test_synced_file_survives_every_crash() -> None:
    for seed in range(50):
        disk, synced, _ = fresh_file(seed)
        handle = disk.fs().open("/f")
        asyncio.run(handle.fsync())
        disk.crash()
        assert disk.fs().open("/f").pread(0, 100) == synced + b"unsynced"


def test_new_name_needs_a_directory_fsync() -> None:
    kept = set()
    for seed in range(100):
        disk = SimDisk(random.Random(seed))
        fs = disk.fs()
        handle = fs.open("/new")
        handle.append(b"data")
        asyncio.run(handle.fsync())
        disk.crash()
        kept.add(disk.fs().exists("/new"))
    assert kept == {True, False}
    disk = SimDisk(random.Random(0))
    fs = disk.fs()
    fs.open("/new").close()
    asyncio.run(fs.fsync_dir("/"))
    disk.crash()
    assert disk.fs().exists("/new")


def test_rename_is_atomic_across_a_crash() -> None:
    for seed in range(100):
        disk = SimDisk(random.Random(seed))
        fs = disk.fs()
        old = fs.open("/cp")
        old.append(b"old")
        asyncio.run(old.fsync())
        asyncio.run(fs.fsync_dir("/"))
        tmp = fs.open("/cp.tmp")
        tmp.append(b"new")
        asyncio.run(tmp.fsync())
        fs.rename("/cp.tmp", "/cp")
        disk.crash()
        assert disk.fs().open("/cp").pread(0, 10) in (b"old", b"new")


def test_fsync_failure_surfaces_and_leaves_data_unsynced() -> None:
    disk = SimDisk(random.Random(3))
    fs = disk.fs()
    handle = fs.open("/f")
    asyncio.run(fs.fsync_dir("/"))
    handle.append(b"abc")
    disk.fail_fsyncs(1)
    with pytest.raises(OSError) as info:
        asyncio.run(handle.fsync())
    assert info.value.errno == errno.EIO
    assert disk.durable_snapshot() == {"/f": b""}
    asyncio.run(handle.fsync())
    assert disk.durable_snapshot() == {"/f": b"abc"}


def test_write_failure_changes_nothing() -> None:
    disk = SimDisk(random.Random(3))
    handle = disk.fs().open("/f")
    handle.append(b"abc")
    disk.fail_writes(errno.ENOSPC)
    with pytest.raises(OSError) as info:
        handle.append(b"def")
    assert info.value.errno == errno.ENOSPC
    disk.fail_writes(None)
    assert handle.pread(0, 10) == b"abc"


def test_handles_of_a_crashed_incarnation_are_dead() -> None:
    disk = SimDisk(random.Random(3))
    fs = disk.fs()
    handle = fs.open("/f")
    disk.crash()
    for call in (lambda: handle.append(b"x"), lambda: fs.open("/g"), lambda: handle.size()):
        with pytest.raises(OSError) as info:
            call()
        assert info.value.errno == errno.EBADF


def test_a_stalled_fsync_returns_when_the_stall_ends_and_a_crash_meanwhile_loses_it() -> None:
    async def stalled_then(crash: bool) -> tuple[float, object]:
        loop = asyncio.get_running_loop()
        disk = SimDisk(random.Random(1))
        fs = disk.fs()
        handle = fs.open("/f")
        await fs.fsync_dir("/")
        handle.append(b"abc")
        started = loop.time()
        disk.stall_fsyncs(started + 0.05)
        sync = loop.create_task(handle.fsync())
        await asyncio.sleep(0.01)
        assert not sync.done()  # still hanging inside the stall
        if crash:
            disk.crash()
        [outcome] = await asyncio.gather(sync, return_exceptions=True)
        durable = disk.durable_snapshot() if not crash else None
        return loop.time() - started, outcome if crash else durable

    waited, durable = asyncio.run(stalled_then(crash=False))
    assert waited >= 0.05 and durable == {"/f": b"abc"}
    # The power cut came first: the fsync never succeeded (what survives is the crash's
    # random prefix of the unsynced writes, as for any crash).
    _, error = asyncio.run(stalled_then(crash=True))
    assert isinstance(error, OSError) and error.errno == errno.EBADF
