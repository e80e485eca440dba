"""What a broker reports about its log dirs (KIP-858): the online ones at registration, the
failed ones in heartbeats, and where it put each replica the image has not placed yet."""

from __future__ import annotations

import asyncio
import errno
import uuid
from pathlib import Path

from broker.log_dirs import Assignment, LogDirReport
from log.config import LogConfig
from log.manager import LogManager
from log.runtime import real_runtime
from metadata.image import MetadataImage
from metadata.records import MetadataRecord, Partition, PartitionChange, Topic
from tests.metadata.controller.support import build

ME = 1
TID = uuid.UUID(int=7)
ID_A = uuid.UUID(int=0xA1 << 64)
ID_B = uuid.UUID(int=0xB1 << 64)


def image(*directories: tuple[uuid.UUID, ...]) -> MetadataImage:
    """Topic t: partitions 0 and 1 on brokers (1, 2), with the given dirs (empty: unknown)."""
    records: list[MetadataRecord] = [Topic("t", TID)]
    records += [
        Partition(TID, index, (ME, 2), (ME, 2), ME, directories=dirs)
        for index, dirs in enumerate(directories)
    ]
    return build(*records)


def test_online_offline_and_pending_follow_the_log_manager(tmp_path: Path) -> None:
    first, second = str(tmp_path / "a"), str(tmp_path / "b")

    async def main() -> None:
        logs = LogManager(real_runtime(seed=3), [first, second], LogConfig())
        await logs.startup()
        try:
            await logs.get_or_create_log("t", 0)  # the dir with the fewest logs: a, then b
            await logs.get_or_create_log("t", 1)
            assert (logs.log_dir_of("t", 0), logs.log_dir_of("t", 1)) == (first, second)
            current = image((), ())
            report = LogDirReport(ME, logs, {first: ID_A, second: ID_B}, lambda: current)
            assert (report.online(), report.offline()) == ((ID_A, ID_B), ())
            assert report.pending() == [Assignment(ID_A, TID, 0), Assignment(ID_B, TID, 1)]
            # Once the image places partition 0, only partition 1 is left to send.
            current = build(PartitionChange(TID, 0, directories=(ID_A, ID_B)), image=current)
            assert report.pending() == [Assignment(ID_B, TID, 1)]
            # Dir b fails: it is reported offline, and its replica is still assigned (the
            # controller then moves that replica's leadership).
            logs.fail_log_dir(second, OSError(errno.EIO, "I/O error"))
            assert (report.online(), report.offline()) == ((ID_A,), (ID_B,))
            assert report.pending() == [Assignment(ID_B, TID, 1)]
            # Every dir failed: the node stops, nothing is reported.
            logs.fail_log_dir(first, OSError(errno.EIO, "I/O error"))
            assert (report.online(), report.offline()) == ((), ())
        finally:
            await logs.shutdown()

    asyncio.run(main())


def test_a_single_dir_assigns_nothing(tmp_path: Path) -> None:
    only = str(tmp_path / "a")

    async def main() -> None:
        logs = LogManager(real_runtime(seed=3), [only], LogConfig())
        await logs.startup()
        try:
            await logs.get_or_create_log("t", 0)
            report = LogDirReport(ME, logs, {only: ID_A}, lambda: image(()))
            assert (report.online(), report.pending()) == ((ID_A,), [])
        finally:
            await logs.shutdown()

    asyncio.run(main())
