"""LazyFile and PooledFileSystem: which files may give their descriptor back, and that a
closed one reads and writes on as if it had stayed open."""

from __future__ import annotations

import asyncio
import random

from log.lazy_files import PooledFileSystem
from sim.disk import SimDisk


def pool() -> tuple[SimDisk, PooledFileSystem, list[bool]]:
    disk = SimDisk(random.Random(1))
    short = [False]
    files = PooledFileSystem(disk.fs(), lambda: short[0])
    files.mkdir("/d")
    return disk, files, short


def test_idle_synced_files_close_oldest_first_and_reopen_on_use() -> None:
    disk, files, short = pool()
    old, new = files.open("/d/old"), files.open("/d/new")
    assert disk.open_handles == 2
    files.reclaim(wanted=1)  # not short: only what was asked for
    assert files.evictions == 1 and disk.open_handles == 1  # the least recently used
    assert old.pread(0, 1) == b"" and disk.open_handles == 2  # reopened on use
    new.append(b"x")
    asyncio.run(new.fsync())
    short[0] = True
    files.reclaim()  # short: every idle, synced file goes
    assert disk.open_handles == 0 and files.evictions == 3
    assert new.pread(0, 1) == b"x"


def test_unsynced_busy_and_unlinked_files_keep_their_descriptor() -> None:
    disk, files, short = pool()
    dirty, renamed, replaced = files.open("/d/a"), files.open("/d/b"), files.open("/d/c")
    dirty.append(b"not synced")
    files.rename("/d/b", "/d/b2")  # a closed file reopens under its new name
    files.rename("/d/b2", "/d/c")  # and the file it replaced has no name left
    short[0] = True
    files.reclaim()
    assert disk.open_handles == 2  # "dirty" and "replaced" stay open
    assert renamed.path == "/d/c" and renamed.pread(0, 1) == b""
    assert replaced.size() == 0 and dirty.pread(0, 3) == b"not"

    async def fsync_while_reclaiming() -> None:
        syncing = asyncio.ensure_future(dirty.fsync())
        await asyncio.sleep(0)
        files.reclaim()  # the fsync is under way: its handle stays
        await syncing

    asyncio.run(fsync_while_reclaiming())
    files.reclaim()  # synced and idle now
    assert disk.open_handles == 1  # only "replaced", which could not be reopened
    assert dirty.pread(0, 3) == b"not"
    for handle in (dirty, renamed, replaced):
        handle.close()
    assert disk.open_handles == 0
