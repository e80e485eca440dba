"""The filesystem seam: every byte kraft-py puts on disk goes through these two protocols.

Why a seam: the simulator swaps in a disk that remembers which bytes were fsynced, so a crash
can drop or tear exactly the unsynced ones. The real implementation writes straight into the
page cache (an executor hop per small write would cost more than the write), and so does
an fsync of a few kilobytes (see ``INLINE_FSYNC_MAX_BYTES``); only a sync of more, which can
block for long, runs in an executor.

Contract shared by both implementations (tests/test_fs_contract.py runs it against each):
- paths are plain strings; ``list_dir`` returns names sorted, so callers never depend on
  directory order;
- ``append`` writes at the end and returns the position it wrote at;
- ``rename`` atomically replaces the target; the new name is durable only after
  ``fsync_dir`` of its directory (the simulated disk enforces this);
- errors are ``OSError`` with a real errno (ENOENT, EEXIST, EIO, ENOSPC, EBADF).
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import resource
from dataclasses import dataclass
from typing import Protocol


class FileHandle(Protocol):
    """An open file: positional reads and writes, append, truncate, awaitable fsync."""

    path: str

    def size(self) -> int:
        """Current logical size, including unsynced writes."""

    def append(self, data: bytes | memoryview) -> int:
        """Write ``data`` at the end; return the position it was written at."""

    def pread(self, position: int, size: int) -> bytes:
        """Read up to ``size`` bytes at ``position`` (shorter at end of file)."""

    def pwrite(self, position: int, data: bytes | memoryview) -> None:
        """Write ``data`` at ``position``, extending the file if needed."""

    def truncate(self, size: int) -> None:
        """Cut (or zero-extend) the file to ``size`` bytes."""

    async def fsync(self) -> None:
        """Make every write so far durable; raises OSError (EIO) if the device fails."""

    def close(self) -> None:
        """Release the handle; further calls raise OSError(EBADF)."""

    def dup(self) -> FileHandle:
        """Another handle on the same open file, closed on its own: it stays readable after
        this one is closed or the file's name is removed (POSIX keeps an open file alive)."""


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes at ``position`` of an open file, named rather than read: Kafka's
    FileRecords slice. A fetch answer carries regions so the network layer can send them
    with sendfile(2), from the page cache to the socket; ``bytes(region)`` reads them."""

    handle: FileHandle
    position: int
    size: int

    def __len__(self) -> int:
        return self.size

    def __bytes__(self) -> bytes:
        return self.read()

    def read(self) -> bytes:
        """The region's bytes (fewer if the file was truncated since)."""
        return self.handle.pread(self.position, self.size) if self.size else b""


class FileSystem(Protocol):
    """Directory operations plus ``open``; one instance per node."""

    def open(self, path: str, *, create: bool = True) -> FileHandle:
        """Open ``path`` read-write; create it when ``create`` (else ENOENT if missing)."""

    def exists(self, path: str) -> bool:
        """True if a file or directory is at ``path``."""

    def is_dir(self, path: str) -> bool:
        """True if ``path`` is a directory."""

    def list_dir(self, path: str) -> list[str]:
        """Names in directory ``path``, sorted."""

    def mkdir(self, path: str) -> None:
        """Create ``path`` and missing parents; no error if it exists."""

    def remove(self, path: str) -> None:
        """Delete the file at ``path``."""

    def remove_dir(self, path: str) -> None:
        """Delete the empty directory at ``path``."""

    def rename(self, src: str, dst: str) -> None:
        """Atomically move ``src`` to ``dst``, replacing ``dst``."""

    async def fsync_dir(self, path: str) -> None:
        """Make the directory's entries (creates, renames, removes) durable."""

    def file_size(self, path: str) -> int:
        """Size of the file at ``path``."""

    def lock(self, path: str) -> None:
        """Take an exclusive advisory lock file at ``path`` for this process.

        Raises OSError(EAGAIN) when another process (or simulated node incarnation) holds it.
        """

    def open_descriptors(self) -> int:
        """How many descriptors this filesystem holds open (handles, dups, lock files): what
        the node's files cost the process, counted without asking the kernel."""

    def descriptor_limit(self) -> int:
        """How many descriptors the process may hold in all (the soft RLIMIT_NOFILE; the
        simulated disk's own limit); opening past it fails with EMFILE."""


def read_all(fs: FileSystem, path: str) -> bytes:
    """Whole contents of the file at ``path``."""
    handle = fs.open(path, create=False)
    try:
        return handle.pread(0, handle.size())
    finally:
        handle.close()


async def write_atomic(fs: FileSystem, path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    Temp file, fsync, rename, fsync of the directory: the recipe Kafka's checkpoint files use.
    """
    tmp = path + ".tmp"
    handle = fs.open(tmp)
    try:
        handle.truncate(0)
        handle.pwrite(0, data)
        await handle.fsync()
    finally:
        handle.close()
    fs.rename(tmp, path)
    await fs.fsync_dir(os.path.dirname(path) or ".")


# An fdatasync of this much freshly written data takes a few hundred microseconds on a
# healthy disk: about what the hand-off to an executor thread and back to the loop costs in
# latency and CPU. The metadata log's group commits are this small, and each one sits on the
# commit path of every voter, so they are synced on the loop, as Kafka's raft thread syncs
# its log on itself. Bigger syncs (a data log flushing many megabytes) go to a thread so they
# cannot stall the loop.
INLINE_FSYNC_MAX_BYTES = 64 * 1024
# What an unlimited RLIMIT_NOFILE means in practice: Linux's fs.nr_open default.
MAX_DESCRIPTORS = 1 << 20


@dataclass(slots=True)
class _OpenCount:
    """The descriptors a RealFileSystem's handles hold, shared with the handles."""

    value: int = 0


class RealFile:
    """A FileHandle over an OS file descriptor."""

    __slots__ = ("_count", "_fd", "_size", "_unsynced", "path")

    def __init__(self, path: str, fd: int, count: _OpenCount | None = None) -> None:
        self.path = path
        self._fd = fd
        self._count = count or _OpenCount()
        try:
            self._size = os.fstat(fd).st_size
        except OSError:
            os.close(fd)
            raise
        self._count.value += 1
        self._unsynced = 0  # bytes written since the last fsync, truncations counted as one

    def _check_open(self) -> int:
        if self._fd < 0:
            raise OSError(errno.EBADF, "file is closed", self.path)
        return self._fd

    def size(self) -> int:
        self._check_open()
        return self._size

    def append(self, data: bytes | memoryview) -> int:
        position = self._size
        self.pwrite(position, data)
        return position

    def pread(self, position: int, size: int) -> bytes:
        return os.pread(self._check_open(), size, position)

    def pwrite(self, position: int, data: bytes | memoryview) -> None:
        fd = self._check_open()
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.pwrite(fd, view[written:], position + written)
        self._size = max(self._size, position + len(view))
        self._unsynced += len(view)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._check_open(), size)
        self._size = size
        self._unsynced += 1

    async def fsync(self) -> None:
        fd = self._check_open()
        unsynced, self._unsynced = self._unsynced, 0
        try:
            if unsynced <= INLINE_FSYNC_MAX_BYTES:
                os.fdatasync(fd)
            else:
                await asyncio.get_running_loop().run_in_executor(None, os.fdatasync, fd)
        except OSError:
            self._unsynced += unsynced  # nothing was made durable (the log goes offline)
            raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._count.value -= 1

    def dup(self) -> RealFile:
        return RealFile(self.path, os.dup(self._check_open()), self._count)

    def fileno(self) -> int:
        """The descriptor, for sendfile(2): only real files have one."""
        return self._check_open()


class RealFileSystem:
    """The FileSystem of the machine we run on."""

    def __init__(self) -> None:
        self._locks: dict[str, int] = {}
        self._open = _OpenCount()

    def open(self, path: str, *, create: bool = True) -> RealFile:
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        return RealFile(path, os.open(path, flags, 0o644), self._open)

    def open_descriptors(self) -> int:
        return self._open.value + len(self._locks)

    def descriptor_limit(self) -> int:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return MAX_DESCRIPTORS if soft == resource.RLIM_INFINITY else soft

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def list_dir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def mkdir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def remove(self, path: str) -> None:
        os.remove(path)

    def remove_dir(self, path: str) -> None:
        os.rmdir(path)

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    async def fsync_dir(self, path: str) -> None:
        def sync() -> None:
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        await asyncio.get_running_loop().run_in_executor(None, sync)

    def file_size(self, path: str) -> int:
        return os.stat(path).st_size

    def lock(self, path: str) -> None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OSError(errno.EAGAIN, "already locked by another process", path) from None
        self._locks[path] = fd
