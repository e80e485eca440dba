"""Partition log files that give their descriptor back when idle, so a node can host more
segment files than its open-files limit (Kafka keeps every segment open and asks operators
for a high limit).

``PooledFileSystem`` wraps the filesystem seam for the LogManager's logs: every file it
opens is a ``LazyFile``, a FileHandle that holds an OS handle only while it is needed. When
the node's descriptors run into the reserve (log/descriptors.py), the least recently used
idle files are closed; touching one again reopens it by name. The active segment, being
written, stays near the front and is never closed with writes not yet synced.

What is never closed early, and why:
- a file with writes since its last fsync: after a close, a writeback error (EIO) would be
  reported to no descriptor, and a later fsync on a new one would succeed over lost data
  (PostgreSQL's "fsyncgate");
- a file in the middle of an fsync (the executor still uses its descriptor);
- a file whose name was removed (it could not be reopened).

A rename through this filesystem moves the name of every LazyFile on it (segments renamed
``.deleted``, ``.cleaned`` swapped in), so a closed one reopens under its current name.
"""

from __future__ import annotations

import collections
import errno
import os
from collections.abc import Callable

from log.fs import FileHandle, FileSystem

# Files one reclaim looks at before giving up (see PooledFileSystem.reclaim).
RECLAIM_SCAN_MAX = 64


class LazyFile:
    """A FileHandle that (re)opens its file on use and may be closed while idle."""

    __slots__ = ("_busy", "_closed", "_dirty", "_inner", "_pool", "_unlinked", "path")

    def __init__(self, pool: PooledFileSystem, path: str, inner: FileHandle) -> None:
        self._pool = pool
        self.path = path
        self._inner: FileHandle | None = inner
        self._busy = 0
        self._dirty = False
        self._closed = False
        self._unlinked = False

    # ---- the pool's side ------------------------------------------------------------------
    @property
    def evictable(self) -> bool:
        return self._inner is not None and not self._busy and not self._dirty and not self._unlinked

    def evict(self) -> None:
        assert self.evictable, self.path
        assert self._inner is not None
        self._inner.close()
        self._inner = None

    def _handle(self) -> FileHandle:
        if self._closed:
            raise OSError(errno.EBADF, "file is closed", self.path)
        if self._inner is None:
            self._inner = self._pool.reopen(self.path)
        self._pool.touch(self)
        return self._inner

    # ---- FileHandle ---------------------------------------------------------------------------
    def size(self) -> int:
        return self._handle().size()

    def append(self, data: bytes | memoryview) -> int:
        handle = self._handle()
        self._dirty = True
        return handle.append(data)

    def pread(self, position: int, size: int) -> bytes:
        return self._handle().pread(position, size)

    def pwrite(self, position: int, data: bytes | memoryview) -> None:
        handle = self._handle()
        self._dirty = True
        handle.pwrite(position, data)

    def truncate(self, size: int) -> None:
        handle = self._handle()
        self._dirty = True
        handle.truncate(size)

    async def fsync(self) -> None:
        handle = self._handle()
        self._busy += 1
        dirty, self._dirty = self._dirty, False
        try:
            await handle.fsync()
        except BaseException:
            self._dirty = self._dirty or dirty
            raise
        finally:
            self._busy -= 1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.forget(self)
        if self._inner is not None:
            self._inner.close()
            self._inner = None

    def dup(self) -> FileHandle:
        return self._handle().dup()

    def __getattr__(self, name: str) -> object:
        # ``fileno`` where the file underneath has one (sendfile), and only there.
        if name == "fileno":
            try:
                handle = self._handle()
            except OSError:
                raise AttributeError(name) from None  # the caller reads it instead
            return handle.fileno  # type: ignore[attr-defined]
        raise AttributeError(name)


class PooledFileSystem:
    """The FileSystem seam with LazyFiles: closes idle ones while ``short()`` says the
    node is short of descriptors (into its reserve)."""

    def __init__(self, inner: FileSystem, short: Callable[[], bool]) -> None:
        self.inner = inner
        self._short = short
        self._open: collections.OrderedDict[LazyFile, None] = collections.OrderedDict()
        self._by_path: dict[str, list[LazyFile]] = {}
        self.evictions = 0

    # ---- the pool -----------------------------------------------------------------------------
    def touch(self, lazy: LazyFile) -> None:
        self._open[lazy] = None
        self._open.move_to_end(lazy)

    def forget(self, lazy: LazyFile) -> None:
        self._open.pop(lazy, None)
        same = self._by_path.get(lazy.path)
        if same is not None and lazy in same:
            same.remove(lazy)
            if not same:
                del self._by_path[lazy.path]

    def reopen(self, path: str) -> FileHandle:
        self.reclaim()
        return self.inner.open(path, create=False)

    def reclaim(self, wanted: int = 0) -> None:
        """Close least recently used idle files while the node is short of descriptors (or
        until ``wanted`` were closed). Files that cannot be closed now (unsynced writes, an
        fsync under way) move to the back of the line, and one call looks at no more than
        RECLAIM_SCAN_MAX of them: a node whose files are all busy pays a bounded price per
        open, not one proportional to its files."""
        closed = 0
        for _ in range(min(RECLAIM_SCAN_MAX, len(self._open))):
            if not (closed < wanted or self._short()):
                return
            lazy = next(iter(self._open))
            if lazy.evictable:
                lazy.evict()
                del self._open[lazy]
                self.evictions += 1
                closed += 1
            else:
                self._open.move_to_end(lazy)

    @property
    def open_files(self) -> int:
        """LazyFiles holding an OS handle now."""
        return sum(1 for lazy in self._open if lazy._inner is not None)

    # ---- FileSystem -----------------------------------------------------------------------------
    def open(self, path: str, *, create: bool = True) -> LazyFile:
        self.reclaim()
        lazy = LazyFile(self, path, self.inner.open(path, create=create))
        self._by_path.setdefault(path, []).append(lazy)
        self.touch(lazy)
        return lazy

    def rename(self, src: str, dst: str) -> None:
        self.inner.rename(src, dst)
        for lazy in self._by_path.pop(dst, []):
            lazy._unlinked = True  # its file lost its name: it cannot be reopened
        moved = self._by_path.pop(src, [])
        for lazy in moved:
            lazy.path = dst
        if moved:
            self._by_path[dst] = moved

    def moved_dir(self, src: str, dst: str) -> None:
        """The dir ``src`` was renamed ``dst`` (``rename``): its files, evicted or not,
        reopen from there. Scans every tracked path, so only for a rare rename of a whole
        partition dir (a replica moved between log dirs), never per segment."""
        prefix = src.rstrip("/") + "/"
        for path in [p for p in self._by_path if p.startswith(prefix)]:
            moved = self._by_path.pop(path)
            new_path = os.path.join(dst, path[len(prefix) :])
            for lazy in moved:
                lazy.path = new_path
            self._by_path.setdefault(new_path, []).extend(moved)

    def remove(self, path: str) -> None:
        self.inner.remove(path)
        for lazy in self._by_path.pop(path, []):
            lazy._unlinked = True

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)

    def list_dir(self, path: str) -> list[str]:
        return self.inner.list_dir(path)

    def mkdir(self, path: str) -> None:
        self.inner.mkdir(path)

    def remove_dir(self, path: str) -> None:
        self.inner.remove_dir(path)

    async def fsync_dir(self, path: str) -> None:
        await self.inner.fsync_dir(path)

    def file_size(self, path: str) -> int:
        return self.inner.file_size(path)

    def lock(self, path: str) -> None:
        self.inner.lock(path)

    def open_descriptors(self) -> int:
        return self.inner.open_descriptors()

    def descriptor_limit(self) -> int:
        return self.inner.descriptor_limit()
