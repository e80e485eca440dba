"""A node's simulated disk: the FileSystem seam with a power-cut model.

Model (docs/simulation.md repeats it for users):
- File data: each file keeps its durable bytes and the list of writes/truncates since its last
  fsync. ``fsync`` makes them durable. A crash keeps a random prefix of the unsynced
  operations and may tear the next one at a random byte, so a crash loses or tears exactly
  the unsynced data and never touches a synced byte (tests/sim/test_disk_model.py checks this
  against a model with hypothesis).
- Names: creates, renames (of files and of whole directories) and removes go to an ordered
  journal. ``fsync_dir`` commits the whole journal (what ext4/xfs do in practice); a crash
  keeps a random prefix of the uncommitted journal. A file fsync does *not* commit its name:
  POSIX does not promise it, so the code above must fsync the directory after creating or
  renaming a file it relies on.
- Faults: the next N fsyncs can fail (EIO by default, data stays unsynced); writes can fail
  with ENOSPC or EIO until cleared. A failed write changes nothing.
- Every handle belongs to one incarnation of the node; after a crash old handles raise EBADF,
  so a crashed node's unwinding tasks cannot write into its next life.
"""

from __future__ import annotations

import asyncio
import errno
import posixpath
import random
from dataclasses import dataclass, field

_DIR = -1


@dataclass(slots=True)
class _Inode:
    durable: bytearray = field(default_factory=bytearray)
    current: bytearray = field(default_factory=bytearray)
    # ("w", position, data) or ("t", size) since the last fsync, in order
    pending: list[tuple] = field(default_factory=list)


def _apply(data: bytearray, op: tuple) -> None:
    if op[0] == "w":
        _, position, chunk = op
        if position > len(data):
            data.extend(bytes(position - len(data)))
        data[position : position + len(chunk)] = chunk
    else:
        size = op[1]
        if size < len(data):
            del data[size:]
        else:
            data.extend(bytes(size - len(data)))


def _norm(path: str) -> str:
    return posixpath.normpath(posixpath.join("/", path))


class SimDisk:
    """The disk of one simulated node; survives the node's crashes, unlike its processes."""

    def __init__(
        self, rng: random.Random, *, fsync_latency_s: tuple[float, float] = (0.0, 0.0)
    ) -> None:
        self._rng = rng
        # Each fsync takes a seeded time in this range: a real device's sync is never free,
        # and the window it opens (written, acknowledged, not yet durable) is where
        # durability bugs live.
        self.fsync_latency_s = fsync_latency_s
        self.incarnation = 0
        self._inodes: dict[int, _Inode] = {}
        self._next_inode = 1
        self._names: dict[str, int] = {"/": _DIR}
        self._durable_names: dict[str, int] = {"/": _DIR}
        self._journal: list[tuple] = []
        self._locks: dict[str, int] = {}
        self._fsync_failures_left = 0
        self._fsync_errno = errno.EIO
        self._write_errno: int | None = None
        self._stalled_until_s = 0.0
        self.fsyncs = 0
        # The process's open-files limit, and the handles its current incarnation holds:
        # opening past the limit fails with EMFILE, as a real process's open does.
        self.descriptor_limit = 1 << 20
        self.open_handles = 0

    # ---- faults -------------------------------------------------------------------------
    def fail_fsyncs(self, count: int = 1, err: int = errno.EIO) -> None:
        """Make the next ``count`` fsyncs (file or directory) fail with ``err``."""
        self._fsync_failures_left = count
        self._fsync_errno = err

    def stall_fsyncs(self, until_s: float) -> None:
        """Make every fsync (file or directory) hang until virtual time ``until_s``, as a
        disk in trouble does for seconds: what is written meanwhile stays unsynced."""
        self._stalled_until_s = until_s

    def fail_writes(self, err: int | None = errno.ENOSPC) -> None:
        """Make every write fail with ``err`` until called again with None."""
        self._write_errno = err

    def crash(self) -> None:
        """Power cut: keep synced state, a random prefix (maybe torn) of the rest."""
        rng = self._rng
        keep = rng.randint(0, len(self._journal))
        names = dict(self._durable_names)
        for op in self._journal[:keep]:
            self._apply_name_op(names, op)
        self._names = names
        self._durable_names = dict(names)
        self._journal = []
        live = {inode for inode in names.values() if inode != _DIR}
        for inode_id in list(self._inodes):
            if inode_id not in live:
                del self._inodes[inode_id]
                continue
            inode = self._inodes[inode_id]
            data = inode.durable
            keep_ops = rng.randint(0, len(inode.pending))
            for op in inode.pending[:keep_ops]:
                _apply(data, op)
            if keep_ops < len(inode.pending) and rng.random() < 0.5:
                op = inode.pending[keep_ops]
                if op[0] == "w" and len(op[2]) > 1:
                    _apply(data, ("w", op[1], op[2][: rng.randint(1, len(op[2]) - 1)]))
            inode.current = bytearray(data)
            inode.pending = []
        self._locks = {}
        self._stalled_until_s = 0.0  # a power cycle ends a stall
        self.open_handles = 0
        self.incarnation += 1

    def process_exited(self) -> None:
        """The process died but the machine did not: its unsynced writes stay in the page
        cache, but its open handles die with it."""
        self._locks = {}
        self.open_handles = 0
        self.incarnation += 1

    def _take_descriptor(self, path: str) -> None:
        if self.open_handles >= self.descriptor_limit:
            raise OSError(errno.EMFILE, "Too many open files", path)
        self.open_handles += 1

    # ---- helpers used by SimFile -------------------------------------------------------
    def _check_write(self, path: str) -> None:
        if self._write_errno is not None:
            raise OSError(self._write_errno, "simulated write failure", path)

    async def _sync_point(self, path: str, incarnation: int) -> None:
        low, high = self.fsync_latency_s
        if high > 0:
            await asyncio.sleep(self._rng.uniform(low, high))
        stalled_s = self._stalled_until_s - asyncio.get_running_loop().time()
        if stalled_s > 0:
            await asyncio.sleep(stalled_s)
        if incarnation != self.incarnation:
            raise OSError(errno.EBADF, "node crashed during fsync", path)
        if self._fsync_failures_left:
            self._fsync_failures_left -= 1
            raise OSError(self._fsync_errno, "simulated fsync failure", path)
        self.fsyncs += 1

    def _fsync_inode(self, inode: _Inode) -> None:
        inode.durable = bytearray(inode.current)
        inode.pending = []

    @staticmethod
    def _apply_name_op(names: dict[str, int], op: tuple) -> None:
        kind = op[0]
        if kind in ("create", "mkdir"):
            names[op[1]] = op[2]
        elif kind == "rename":
            src, dst = op[1], op[2]
            names[dst] = names.pop(src)
            if names[dst] == _DIR:  # a directory takes its whole subtree along
                prefix = src + "/"
                for name in [n for n in names if n.startswith(prefix)]:
                    names[dst + name[len(src) :]] = names.pop(name)
        else:
            names.pop(op[1], None)

    def _name_op(self, op: tuple) -> None:
        self._apply_name_op(self._names, op)
        self._journal.append(op)

    # ---- the FileSystem seam, bound to one incarnation ---------------------------------
    def fs(self) -> SimFileSystem:
        """The FileSystem the node's current incarnation sees."""
        return SimFileSystem(self, self.incarnation)

    def durable_snapshot(self) -> dict[str, bytes]:
        """Every file's synced content under its synced name (for tests and checkers)."""
        return {
            path: bytes(self._inodes[inode].durable)
            for path, inode in sorted(self._durable_names.items())
            if inode != _DIR
        }


class SimFile:
    """A FileHandle on a SimDisk."""

    __slots__ = ("_closed", "_disk", "_incarnation", "_inode", "path")

    def __init__(self, disk: SimDisk, incarnation: int, inode: _Inode, path: str) -> None:
        self._disk = disk
        self._incarnation = incarnation
        self._inode = inode
        self._closed = False
        self.path = path

    def _live(self) -> _Inode:
        if self._closed or self._incarnation != self._disk.incarnation:
            raise OSError(errno.EBADF, "stale or closed file handle", self.path)
        return self._inode

    def size(self) -> int:
        return len(self._live().current)

    def append(self, data: bytes | memoryview) -> int:
        position = len(self._live().current)
        self.pwrite(position, data)
        return position

    def pread(self, position: int, size: int) -> bytes:
        return bytes(self._live().current[position : position + size])

    def pwrite(self, position: int, data: bytes | memoryview) -> None:
        inode = self._live()
        self._disk._check_write(self.path)
        op = ("w", position, bytes(data))
        _apply(inode.current, op)
        inode.pending.append(op)

    def truncate(self, size: int) -> None:
        inode = self._live()
        op = ("t", size)
        _apply(inode.current, op)
        inode.pending.append(op)

    async def fsync(self) -> None:
        inode = self._live()
        await self._disk._sync_point(self.path, self._incarnation)
        self._disk._fsync_inode(inode)

    def close(self) -> None:
        if not self._closed and self._incarnation == self._disk.incarnation:
            self._disk.open_handles -= 1
        self._closed = True

    def dup(self) -> SimFile:
        """A handle on the same inode: it reads the file after its name is removed, as a
        POSIX descriptor does (a crash still ends it, like every handle of the incarnation)."""
        inode = self._live()
        self._disk._take_descriptor(self.path)
        return SimFile(self._disk, self._incarnation, inode, self.path)


class SimFileSystem:
    """The FileSystem protocol over a SimDisk for one node incarnation."""

    __slots__ = ("_disk", "_incarnation")

    def __init__(self, disk: SimDisk, incarnation: int) -> None:
        self._disk = disk
        self._incarnation = incarnation

    def _names(self, path: str) -> dict[str, int]:
        if self._incarnation != self._disk.incarnation:
            raise OSError(errno.EBADF, "filesystem of a crashed incarnation", path)
        return self._disk._names

    def _parent_must_exist(self, names: dict[str, int], path: str) -> None:
        if names.get(posixpath.dirname(path)) != _DIR:
            raise OSError(errno.ENOENT, "no such directory", posixpath.dirname(path))

    def open(self, path: str, *, create: bool = True) -> SimFile:
        path = _norm(path)
        names = self._names(path)
        disk = self._disk
        inode_id = names.get(path)
        if inode_id == _DIR:
            raise OSError(errno.EISDIR, "is a directory", path)
        if inode_id is None:
            if not create:
                raise OSError(errno.ENOENT, "no such file", path)
            self._parent_must_exist(names, path)
            disk._take_descriptor(path)  # before the name exists, as open(2) fails
            inode_id = disk._next_inode
            disk._next_inode += 1
            disk._inodes[inode_id] = _Inode()
            disk._name_op(("create", path, inode_id))
            return SimFile(disk, self._incarnation, disk._inodes[inode_id], path)
        disk._take_descriptor(path)
        return SimFile(disk, self._incarnation, disk._inodes[inode_id], path)

    def exists(self, path: str) -> bool:
        path = _norm(path)
        return path in self._names(path)

    def is_dir(self, path: str) -> bool:
        path = _norm(path)
        return self._names(path).get(path) == _DIR

    def list_dir(self, path: str) -> list[str]:
        path = _norm(path)
        names = self._names(path)
        if names.get(path) != _DIR:
            raise OSError(errno.ENOENT, "no such directory", path)
        # A prefix test instead of dirname() per name: every node's whole tree is one flat
        # map, and brokers list partition dirs often (log creation and deletion).
        prefix = path if path.endswith("/") else path + "/"
        cut = len(prefix)
        return sorted(
            name[cut:]
            for name in names
            if name.startswith(prefix) and len(name) > cut and "/" not in name[cut:]
        )

    def mkdir(self, path: str) -> None:
        path = _norm(path)
        names = self._names(path)
        if names.get(path) == _DIR:
            return
        if path in names:
            raise OSError(errno.EEXIST, "a file has that name", path)
        self.mkdir(posixpath.dirname(path))
        self._disk._name_op(("mkdir", path, _DIR))

    def remove(self, path: str) -> None:
        path = _norm(path)
        names = self._names(path)
        if path not in names:
            raise OSError(errno.ENOENT, "no such file", path)
        if names[path] == _DIR:
            raise OSError(errno.EISDIR, "is a directory", path)
        self._disk._name_op(("remove", path))

    def remove_dir(self, path: str) -> None:
        path = _norm(path)
        if self.list_dir(path):
            raise OSError(errno.ENOTEMPTY, "directory not empty", path)
        self._disk._name_op(("rmdir", path))

    def rename(self, src: str, dst: str) -> None:
        """POSIX rename: atomic, replacing a file ``dst`` (or an empty directory ``dst`` when
        ``src`` is one); journaled like every name change, so durable once the directory is
        fsynced, and after a crash before that either wholly done or not at all."""
        src, dst = _norm(src), _norm(dst)
        names = self._names(src)
        if src not in names:
            raise OSError(errno.ENOENT, "no such file", src)
        self._parent_must_exist(names, dst)
        if src == dst:
            return
        if names[src] == _DIR:
            if dst.startswith(src + "/"):
                raise OSError(errno.EINVAL, "cannot move a directory into itself", dst)
            if dst in names:
                if names[dst] != _DIR:
                    raise OSError(errno.ENOTDIR, "not a directory", dst)
                if self.list_dir(dst):
                    raise OSError(errno.ENOTEMPTY, "directory not empty", dst)
        elif names.get(dst) == _DIR:
            raise OSError(errno.EISDIR, "is a directory", dst)
        self._disk._name_op(("rename", src, dst))

    async def fsync_dir(self, path: str) -> None:
        path = _norm(path)
        if self._names(path).get(path) != _DIR:
            raise OSError(errno.ENOENT, "no such directory", path)
        disk = self._disk
        await disk._sync_point(path, self._incarnation)
        disk._durable_names = dict(disk._names)
        disk._journal = []

    def file_size(self, path: str) -> int:
        path = _norm(path)
        inode_id = self._names(path).get(path)
        if inode_id is None or inode_id == _DIR:
            raise OSError(errno.ENOENT, "no such file", path)
        return len(self._disk._inodes[inode_id].current)

    def lock(self, path: str) -> None:
        path = _norm(path)
        locks = self._disk._locks
        if locks.get(path) == self._incarnation:
            raise OSError(errno.EAGAIN, "already locked by another process", path)
        self.open(path).close()
        self._disk._take_descriptor(path)  # a real lock holds its file open
        locks[path] = self._incarnation

    def open_descriptors(self) -> int:
        return self._disk.open_handles if self._incarnation == self._disk.incarnation else 0

    def descriptor_limit(self) -> int:
        return self._disk.descriptor_limit
