"""Directory renames on the simulated disk: the same contract as the real file system, and
the power-cut semantics of every other name change (atomic; durable once the parent
directory is fsynced). A broker setting a stray partition aside depends on them."""

from __future__ import annotations

import asyncio
import errno
import random
import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.replica_manager import ReplicaManager
from log.config import LogConfig
from log.fs import FileSystem
from log.manager import LogManager
from log.runtime import Runtime
from metadata.image import MetadataImage, PartitionRegistration, TopicImage, TopicsImage
from sim.disk import SimDisk
from sim.world import World
from tests import test_fs_contract

fs_root = test_fs_contract.fs_root  # the same contract, on the real and the simulated disk


def test_a_directory_rename_moves_its_whole_subtree(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    fs.mkdir(root + "/t0-0/sub")
    fs.open(root + "/t0-0/0.log").append(b"data")
    fs.open(root + "/t0-0/sub/x").close()
    fs.rename(root + "/t0-0", root + "/t0-0.abc-stray")
    assert not fs.exists(root + "/t0-0")
    assert fs.list_dir(root + "/t0-0.abc-stray") == ["0.log", "sub"]
    assert fs.list_dir(root + "/t0-0.abc-stray/sub") == ["x"]
    assert fs.open(root + "/t0-0.abc-stray/0.log").pread(0, 10) == b"data"
    assert sorted(fs.list_dir(root)) == ["t0-0.abc-stray"]


def test_directory_rename_refusals_match_posix(fs_root: tuple[FileSystem, str]) -> None:
    fs, root = fs_root
    fs.mkdir(root + "/a/inner")
    fs.mkdir(root + "/full")
    fs.open(root + "/full/f").close()
    fs.mkdir(root + "/empty")
    fs.open(root + "/file").close()
    for src, dst, code in [
        ("/a", "/full", errno.ENOTEMPTY),
        ("/a", "/file", errno.ENOTDIR),
        ("/file", "/empty", errno.EISDIR),
        ("/a", "/a/inner/deeper", errno.EINVAL),
    ]:
        with pytest.raises(OSError) as info:
            fs.rename(root + src, root + dst)
        assert info.value.errno == code, (src, dst)
    fs.rename(root + "/a", root + "/empty")  # onto an empty directory: replaces it
    assert fs.list_dir(root + "/empty") == ["inner"] and not fs.exists(root + "/a")


def _partition_dir(seed: int) -> SimDisk:
    disk = SimDisk(random.Random(seed))
    fs = disk.fs()
    fs.mkdir("/data/t0-0")
    handle = fs.open("/data/t0-0/0.log")
    handle.append(b"records")
    asyncio.run(handle.fsync())
    asyncio.run(fs.fsync_dir("/data/t0-0"))
    return disk


def test_a_directory_rename_is_atomic_across_a_power_cut() -> None:
    outcomes = set()
    for seed in range(60):
        disk = _partition_dir(seed)
        disk.fs().rename("/data/t0-0", "/data/t0-0.x-stray")
        disk.crash()
        fs = disk.fs()
        names = fs.list_dir("/data")
        assert names in (["t0-0"], ["t0-0.x-stray"]), names
        assert fs.open(f"/data/{names[0]}/0.log").pread(0, 10) == b"records"
        outcomes.add(names[0])
    assert outcomes == {"t0-0", "t0-0.x-stray"}  # not durable before the parent's fsync


def test_a_directory_rename_is_durable_once_its_parent_is_fsynced() -> None:
    for seed in range(20):
        disk = _partition_dir(seed)
        fs = disk.fs()
        fs.rename("/data/t0-0", "/data/t0-0.x-stray")
        asyncio.run(fs.fsync_dir("/data"))
        disk.crash()
        assert disk.fs().list_dir("/data") == ["t0-0.x-stray"]
        assert disk.fs().open("/data/t0-0.x-stray/0.log").pread(0, 10) == b"records"


ME = 1
TOPIC_A, TOPIC_B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


def _image(offset: int, topic_id: uuid.UUID) -> MetadataImage:
    registration = PartitionRegistration((ME,), (ME,), ME, 1, 1)
    topic = TopicImage("a", topic_id, {0: registration})
    return MetadataImage(offset=offset, topics=TopicsImage({topic_id: topic}, {"a": topic_id}))


def test_a_broker_sets_a_stray_aside_on_the_simulated_disk_and_never_serves_it_meanwhile() -> None:
    """Restarting with the log of a topic id the image no longer has: the broker renames
    the directory aside. While the disk refuses writes the partition is offline
    (KAFKA_STORAGE_ERROR) and no log of the new topic is created or served; once the disk
    recovers, the next start creates the new topic's log beside the stray."""
    with World(seed=3) as world:
        process = world.add_process("n1")
        outcome: dict[str, object] = {}

        async def start(
            runtime: Runtime, image: MetadataImage, write_errno: int | None = None
        ) -> ReplicaManager:
            logs = LogManager(runtime, ["/data"], LogConfig())
            await logs.startup()
            process.disk.fail_writes(write_errno)
            replicas = ReplicaManager(ME, logs, LogConfig(), runtime.rng, runtime.clock)
            replicas.start(image)
            await asyncio.wait_for(replicas.wait_reconciled(image.offset), 5.0)
            return replicas

        async def stop(replicas: ReplicaManager) -> None:
            await replicas.close()
            await replicas.logs.shutdown()

        async def broker(runtime: Runtime) -> None:
            await stop(await start(runtime, _image(1, TOPIC_A)))
            failing = await start(runtime, _image(5, TOPIC_B), errno.ENOSPC)
            outcome["during"] = runtime.fs.list_dir("/data")
            outcome["answer"] = failing._leader("a", 0)
            await failing.close()
            process.disk.fail_writes(None)
            await failing.logs.shutdown()
            replicas = await start(runtime, _image(5, TOPIC_B))
            outcome["after"] = runtime.fs.list_dir("/data")
            outcome["log"] = replicas.logs.get_log("a", 0) is not None
            outcome["served"] = not isinstance(replicas._leader("a", 0), ErrorCode)

        process.start(broker)
        world.run(asyncio.sleep(30))
        assert world.failures == []
        assert outcome["answer"] == ErrorCode.kafka_storage_error
        during = outcome["during"]
        assert isinstance(during, list)
        assert "a-0" not in during  # the new topic's log is not created over a failing disk
        after = outcome["after"]
        assert isinstance(after, list)
        assert "a-0" in after and any(n.startswith("a-0.") and n.endswith("-stray") for n in after)
        assert outcome["log"] is True
        assert outcome["served"] is True
