"""One contract, two filesystems: the real one and the simulator's behave the same. Plus
where the real one syncs (on the loop or on a thread)."""

from __future__ import annotations

import asyncio
import errno
import os
import random
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from log.fs import (
    INLINE_FSYNC_MAX_BYTES,
    FileHandle,
    FileSystem,
    RealFileSystem,
    read_all,
    write_atomic,
)
from sim.disk import SimDisk


@pytest.fixture(params=["real", "sim"])
def fs_root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[FileSystem, str]]:
    if request.param == "real":
        yield RealFileSystem(), str(tmp_path)
    else:
        yield SimDisk(random.Random(1)).fs(), "/root"


def test_append_pread_pwrite_truncate(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    fs.mkdir(root + "/d/e")
    handle = fs.open(root + "/d/e/f.log")
    assert handle.append(b"hello") == 0
    assert handle.append(b" world") == 5
    handle.pwrite(0, b"J")
    assert handle.pread(0, 100) == b"Jello world"
    assert handle.pread(6, 3) == b"wor"
    handle.pwrite(13, b"!")
    assert handle.pread(11, 3) == b"\0\0!"
    handle.truncate(5)
    assert handle.size() == 5
    assert fs.file_size(root + "/d/e/f.log") == 5
    asyncio.run(handle.fsync())
    handle.close()
    with pytest.raises(OSError) as info:
        handle.pread(0, 1)
    assert info.value.errno == errno.EBADF


def test_a_dup_reads_the_file_after_its_name_is_removed_and_the_first_handle_closed(
    fs_root: tuple[FileSystem, str],
) -> None:
    """What a fetch's sendfile relies on: the segment it serves may be deleted meanwhile."""
    fs, root = fs_root
    fs.mkdir(root)
    handle = fs.open(root + "/seg.log")
    handle.append(b"records")
    dup = handle.dup()
    fs.remove(root + "/seg.log")
    handle.close()
    assert not fs.exists(root + "/seg.log")
    assert dup.pread(0, 100) == b"records"
    dup.close()
    with pytest.raises(OSError) as info:
        dup.pread(0, 1)
    assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        handle.dup()  # a closed handle has nothing to share
    assert info.value.errno == errno.EBADF


def test_directory_operations(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    fs.mkdir(root + "/d")
    for name in ("b", "a", "c"):
        fs.open(f"{root}/d/{name}").close()
    assert fs.list_dir(root + "/d") == ["a", "b", "c"]
    fs.rename(root + "/d/a", root + "/d/c")
    assert fs.list_dir(root + "/d") == ["b", "c"]
    fs.remove(root + "/d/b")
    assert fs.exists(root + "/d/c") and not fs.exists(root + "/d/b")
    assert fs.is_dir(root + "/d") and not fs.is_dir(root + "/d/c")
    with pytest.raises(OSError) as info:
        fs.open(root + "/d/missing", create=False)
    assert info.value.errno == errno.ENOENT
    asyncio.run(fs.fsync_dir(root + "/d"))
    fs.remove(root + "/d/c")
    fs.remove_dir(root + "/d")
    assert not fs.exists(root + "/d")


def test_write_atomic_replaces_whole_file(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    fs.mkdir(root)
    asyncio.run(write_atomic(fs, root + "/cp", b"first version, long"))
    asyncio.run(write_atomic(fs, root + "/cp", b"second"))
    assert read_all(fs, root + "/cp") == b"second"
    assert fs.list_dir(root) == ["cp"]


def test_lock_is_exclusive(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    fs.mkdir(root)
    fs.lock(root + "/.lock")
    other = RealFileSystem() if isinstance(fs, RealFileSystem) else fs
    with pytest.raises(OSError) as info:
        other.lock(root + "/.lock")
    assert info.value.errno == errno.EAGAIN


def _completes_without_suspending(coroutine: Coroutine[Any, Any, None]) -> bool:
    """Whether the coroutine finishes on its first step, i.e. never waits for the loop."""
    try:
        coroutine.send(None)
    except StopIteration:
        return True
    coroutine.close()
    return False


async def sync_is_inline(handle: FileHandle) -> bool:
    """Whether an fsync completes on its first step, syncing for real if it did not."""
    inline = _completes_without_suspending(handle.fsync())
    if not inline:
        await handle.fsync()  # the abandoned one may not have finished its sync
    return inline


def test_real_fsync_of_a_small_write_stays_on_the_loop_and_a_big_one_goes_to_a_thread(
    tmp_path: Path,
) -> None:
    """A metadata-log group commit is synced where it is asked for (no executor round trip
    on every voter's commit path); many megabytes are not, so they cannot stall the loop."""
    handle = RealFileSystem().open(str(tmp_path / "f"))
    try:
        handle.append(b"x" * INLINE_FSYNC_MAX_BYTES)
        assert _completes_without_suspending(handle.fsync())
        handle.append(b"x" * (INLINE_FSYNC_MAX_BYTES + 1))
        assert not asyncio.run(sync_is_inline(handle))
        assert _completes_without_suspending(handle.fsync())  # nothing left to sync
    finally:
        handle.close()


def test_real_fsync_failure_leaves_the_data_counted_as_unsynced(tmp_path: Path) -> None:
    handle = RealFileSystem().open(str(tmp_path / "f"))
    handle.append(b"x" * (INLINE_FSYNC_MAX_BYTES - 10))
    os.close(handle._fd)  # the descriptor fails under it, as a dead disk's would
    with pytest.raises(OSError):
        asyncio.run(handle.fsync())
    handle._fd = os.open(str(tmp_path / "f"), os.O_RDWR)
    try:
        handle.append(b"x" * 20)  # with what failed to sync, too much to sync inline now
        assert not asyncio.run(sync_is_inline(handle))
    finally:
        handle.close()


def test_open_descriptors_count_handles_dups_and_locks(fs_root: tuple[FileSystem, str]) -> None:
    """What the descriptor reserve (log/descriptors.py) counts on, on both filesystems."""
    fs, root = fs_root
    fs.mkdir(root + "/d")
    base = fs.open_descriptors()
    first = fs.open(root + "/d/a")
    second = first.dup()
    fs.lock(root + "/d/.lock")
    assert fs.open_descriptors() == base + 3
    first.close()
    first.close()  # a second close releases nothing more
    second.close()
    assert fs.open_descriptors() == base + 1
    assert fs.descriptor_limit() > fs.open_descriptors()


def test_the_simulated_disk_refuses_opens_past_its_descriptor_limit() -> None:
    disk = SimDisk(random.Random(1))
    fs = disk.fs()
    fs.mkdir("/d")
    disk.descriptor_limit = fs.open_descriptors() + 2
    kept = [fs.open("/d/a"), fs.open("/d/b")]
    for attempt in (lambda: fs.open("/d/c"), kept[0].dup):
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno == errno.EMFILE
    assert not fs.exists("/d/c")  # a refused open creates nothing
    kept[1].close()
    fs.open("/d/c").close()
    disk.crash()  # a new incarnation holds nothing
    assert disk.fs().open_descriptors() == 0
