"""One contract, two filesystems: the real one and the simulator's behave the same."""

from __future__ import annotations

import asyncio
import errno
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from log.fs import FileSystem, RealFileSystem, read_all, write_atomic
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
