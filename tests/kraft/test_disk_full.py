"""A full disk: the producer is told KAFKA_STORAGE_ERROR, the log dir goes offline, the node
stops with one clear line and a non-zero exit, and after space is freed and the node
restarted every acknowledged record is there.

The node runs in this process (``kraft.server.serve``, the code ``kraft-server start`` runs)
on a filesystem seam that turns every write into ENOSPC on demand, as a full device does.
On main the producer's connection was dropped (the raw OSError escaped the handler), nothing
was logged, and a full metadata log killed the process with a traceback.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import random
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from kraft.config import ServerConfig, load_config
from kraft.server import serve
from log.clock import SystemClock
from log.fs import FileHandle, RealFileSystem
from log.runtime import Runtime
from tests.kraft import inprocess
from tests.kraft.wire_client import connect, create_topic, produce, read_all, wait_for_leader

DEADLINE_S = 30.0


def _no_space(path: str) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)


class FillableFile:
    """A real file whose writes fail with ENOSPC while its filesystem is full."""

    def __init__(self, fs: FillableFileSystem, handle: FileHandle) -> None:
        self._fs = fs
        self._handle = handle
        self.path = handle.path

    def _check(self) -> None:
        if self._fs.full:
            raise _no_space(self.path)

    def size(self) -> int:
        return self._handle.size()

    def append(self, data: bytes | memoryview) -> int:
        self._check()
        return self._handle.append(data)

    def pread(self, position: int, size: int) -> bytes:
        return self._handle.pread(position, size)

    def pwrite(self, position: int, data: bytes | memoryview) -> None:
        self._check()
        self._handle.pwrite(position, data)

    def truncate(self, size: int) -> None:
        if size > self._handle.size():
            self._check()
        self._handle.truncate(size)

    async def fsync(self) -> None:
        await self._handle.fsync()

    def close(self) -> None:
        self._handle.close()

    def dup(self) -> FileHandle:
        return self._handle.dup()


class FillableFileSystem(RealFileSystem):
    """The real filesystem, except that while ``full`` nothing new can be written: file
    writes, new files and new directories fail with ENOSPC."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def open(self, path: str, *, create: bool = True) -> FileHandle:
        if self.full and create and not self.exists(path):
            raise _no_space(path)
        return FillableFile(self, super().open(path, create=create))

    def exit_process(self) -> None:
        """What the process's exit does to its directory locks: release them."""
        for fd in self._locks.values():
            os.close(fd)
        self._locks.clear()

    def mkdir(self, path: str) -> None:
        if self.full and not self.exists(path):
            raise _no_space(path)
        super().mkdir(path)


def format_node(root: Path) -> tuple[ServerConfig, int]:
    path, port = inprocess.format_node(root)
    return load_config(str(path)), port


def runtime(fs: FillableFileSystem) -> Runtime:
    return Runtime(fs=fs, clock=SystemClock(), rng=random.Random(5))


def stop_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "kraft.server" and r.levelno >= logging.ERROR
    ]


def test_a_full_disk_answers_storage_error_stops_cleanly_and_loses_nothing_acknowledged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config, port = format_node(tmp_path)
    fs = FillableFileSystem()

    async def before_and_during() -> tuple[list[bytes], ErrorCode, int]:
        server = asyncio.get_running_loop().create_task(serve(config, runtime(fs)))
        connection = await connect("127.0.0.1", port)
        assert await create_topic(connection, "orders") == ErrorCode.none
        await wait_for_leader(connection, "orders")
        acknowledged: list[bytes] = []
        for i in range(20):
            values = [f"v{i}-{j}".encode() for j in range(5)]
            code, _ = await produce(connection, "orders", values)
            assert code == ErrorCode.none
            acknowledged.extend(values)
        fs.full = True
        refused, _ = await produce(connection, "orders", [b"no room"])
        exit_code = await asyncio.wait_for(server, DEADLINE_S)
        assert connection.closed  # the node closed it as it stopped
        return acknowledged, refused, exit_code

    with caplog.at_level(logging.INFO):
        acknowledged, refused, exit_code = asyncio.run(before_and_during())
    assert refused == ErrorCode.kafka_storage_error
    assert exit_code == 1
    (stop,) = stop_lines(caplog)
    assert "No space left on device" in stop, stop
    offline = [
        r.getMessage() for r in caplog.records if "is offline after a disk error" in r.getMessage()
    ]
    assert len(offline) == 1, offline
    assert not [r for r in caplog.records if r.exc_info], "no tracebacks, one clear line"

    fs.exit_process()
    fs.full = False  # space freed: restart and read everything back

    async def after() -> list[bytes]:
        server = asyncio.get_running_loop().create_task(serve(config, runtime(fs)))
        connection = await connect("127.0.0.1", port)
        await wait_for_leader(connection, "orders")
        # A started node leaves its start-up heap out of full collections (issue 22)...
        assert gc.get_freeze_count() > 0
        values = await read_all(connection, "orders")
        await connection.close()
        os.kill(os.getpid(), 15)  # SIGTERM: the controlled shutdown ``serve`` handles
        assert await asyncio.wait_for(server, DEADLINE_S) == 0
        assert gc.get_freeze_count() == 0  # ...and gives it back when it stops
        return values

    stored = asyncio.run(after())
    assert stored[: len(acknowledged)] == acknowledged
    assert b"no room" not in stored


def test_a_full_metadata_log_stops_the_node_with_one_line_and_a_non_zero_exit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """No produce at all: the controller's next NoOp (written every 500 ms when idle) meets
    the full disk in the metadata log, and the node stops."""
    config, port = format_node(tmp_path)
    fs = FillableFileSystem()

    async def scenario() -> int:
        server = asyncio.get_running_loop().create_task(serve(config, runtime(fs)))
        connection = await connect("127.0.0.1", port)
        await connection.close()
        fs.full = True
        return await asyncio.wait_for(server, DEADLINE_S)

    with caplog.at_level(logging.INFO):
        assert asyncio.run(scenario()) == 1
    (stop,) = stop_lines(caplog)
    assert "the metadata log in" in stop and "No space left on device" in stop, stop
    assert not [r for r in caplog.records if r.exc_info], "no tracebacks, one clear line"
