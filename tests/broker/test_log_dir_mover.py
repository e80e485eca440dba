"""AlterReplicaLogDirs on a ReplicaManager over two log dirs: Kafka's answers for each kind
of request, the copy listed as a future replica while it is made, produces during the copy
kept, and a replica not hosted yet created in the dir asked for."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import random
import uuid
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.log_admin import describe_log_dirs
from broker.replica_manager import ReplicaManager
from log.checkpoint import OffsetCheckpointFile
from log.config import LogConfig
from log.manager import LogManager
from log.runtime import Runtime, real_runtime
from metadata.config_defs import ALTER_LOG_DIRS_THROTTLE as THROTTLE
from metadata.image import MetadataImage
from metadata.records import BROKER_RESOURCE
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from sim.disk import SimDisk
from tests.broker.test_replica_manager import (
    ME,
    TOPIC_A,
    batch,
    image,
    partition,
    reconcile,
    values_of,
)
from tests.log.test_manager import FakeClock, run_virtual

TOPIC_B = uuid.UUID(int=0xB)


def listed(replicas: ReplicaManager) -> dict[str, list[tuple[str, int, bool]]]:
    """log dir -> [(topic, partition, is future)] as DescribeLogDirs v4 answers."""
    module: Any = request_module(ApiKey.DESCRIBE_LOG_DIRS, 4)
    request = make(module.DescribeLogDirsRequest, {"topics": None})
    response: Any = describe_log_dirs(replicas, request, 4)
    return {
        result.log_dir: [
            (t.name, p.partition_index, p.is_future_key)
            for t in result.topics
            for p in t.partitions
        ]
        for result in response.results
    }


def test_alter_replica_log_dirs_moves_a_replica_and_answers_as_kafka(tmp_path: Path) -> None:
    first, second = str(tmp_path / "d1"), str(tmp_path / "d2")
    start = image(
        5,
        {
            "a": (TOPIC_A, {0: partition(ME, (ME,))}),
            "b": (TOPIC_B, {0: partition(2, (2, 3))}),  # no replica here
        },
    )

    async def main() -> None:
        runtime = real_runtime(seed=5)
        logs = LogManager(runtime, [first, second], LogConfig(segment_bytes=2048))
        await logs.startup()
        replicas = ReplicaManager(
            ME, logs, LogConfig(segment_bytes=2048), runtime.rng, runtime.clock
        )
        moved = asyncio.Event()
        replicas.log_dir_mover.on_moved = moved.set
        replicas.start(start)
        await replicas.wait_reconciled(start.offset)
        try:
            assert logs.log_dir_of("a", 0) == first
            sent = []
            for i in range(40):
                values = [f"v{i}-{j}".encode() * 20 for j in range(3)]
                result = await replicas.append("a", 0, batch(*values), acks=-1, timeout_s=5)
                assert result.error == ErrorCode.none
                sent += values
            alter = replicas.alter_replica_log_dir
            assert await alter("a", 0, str(tmp_path / "d3")) == ErrorCode.log_dir_not_found
            assert await alter("nope", 0, second) == ErrorCode.unknown_topic_or_partition
            assert await alter("x" * 249, 0, second) == ErrorCode.invalid_topic_exception
            assert await alter("a", 0, first) == ErrorCode.none  # there already: nothing to do
            assert logs.future_log_of("a", 0) is None

            assert await alter("a", 0, second) == ErrorCode.none
            # The copy exists before the mover has run a slice: listed as a future replica.
            assert listed(replicas) == {first: [("a", 0, False)], second: [("a", 0, True)]}
            for i in range(5):  # produced while the copy is made
                result = await replicas.append(
                    "a", 0, batch(f"during-{i}".encode()), acks=-1, timeout_s=5
                )
                assert result.error == ErrorCode.none
                sent.append(f"during-{i}".encode())
            await asyncio.wait_for(moved.wait(), 20)
            assert listed(replicas) == {first: [], second: [("a", 0, False)]}
            assert logs.log_dir_of("a", 0) == second
            # Its high watermark is checkpointed in its new dir at once, not in the old one.
            fs = runtime.fs
            hw_file = "replication-offset-checkpoint"
            assert OffsetCheckpointFile(fs, f"{second}/{hw_file}").read() == {("a", 0): len(sent)}
            assert ("a", 0) not in OffsetCheckpointFile(fs, f"{first}/{hw_file}").read()
            read = replicas.read("a", 0, 0, 1 << 24, -1, min_one_message=True)
            values = []
            offset = 0
            while offset < read.high_watermark:  # bounded: each read moves past a batch
                part = replicas.read("a", 0, offset, 1 << 24, -1, min_one_message=True)
                values += values_of(part.records)
                offset = len(values)
            assert values == sent
            after = await replicas.append("a", 0, batch(b"after"), acks=-1, timeout_s=5)
            assert (after.error, after.base_offset) == (ErrorCode.none, len(sent))

            # Not hosted here yet: remembered, and its log is made there when it comes.
            assert await alter("b", 0, second) == ErrorCode.replica_not_available
            await reconcile(
                replicas,
                image(
                    6,
                    {
                        "a": (TOPIC_A, {0: partition(ME, (ME,))}),
                        "b": (TOPIC_B, {0: partition(ME, (ME, 2))}),
                    },
                ),
            )
            assert logs.log_dir_of("b", 0) == second  # the fewest logs were in d1

            # A dir that failed takes no replica.
            logs.fail_log_dir(first, OSError(errno.EIO, "I/O error"))
            assert await alter("b", 0, first) == ErrorCode.kafka_storage_error
        finally:
            await replicas.close()
            await logs.shutdown()

    asyncio.run(main())


def test_a_replica_taking_produces_all_along_its_move_loses_none_of_them(tmp_path: Path) -> None:
    """A producer appends between every two slices of the copy, and after the swap too: the
    move still completes, and the moved log holds every acknowledged record in order."""
    first, second = str(tmp_path / "d1"), str(tmp_path / "d2")
    start = image(5, {"a": (TOPIC_A, {0: partition(ME, (ME,))})})
    config = LogConfig(segment_bytes=256 * 1024)

    async def main() -> None:
        runtime = real_runtime(seed=5)
        logs = LogManager(runtime, [first, second], config)
        await logs.startup()
        replicas = ReplicaManager(ME, logs, config, runtime.rng, runtime.clock)
        moved = asyncio.Event()
        replicas.log_dir_mover.on_moved = moved.set
        replicas.start(start)
        await replicas.wait_reconciled(start.offset)
        sent: list[bytes] = []

        async def produce(value: bytes) -> None:
            result = await replicas.append("a", 0, batch(value), acks=1, timeout_s=5)
            assert (result.error, result.base_offset) == (ErrorCode.none, len(sent))
            sent.append(value)

        try:
            for i in range(300):  # about 3 MB: a dozen segments, several slices
                await produce(f"before-{i}-".encode() + b"x" * 10_000)
            assert await replicas.alter_replica_log_dir("a", 0, second) == ErrorCode.none
            during = 0
            while not moved.is_set():  # bounded: the swap happens between two of these
                await produce(f"during-{during}".encode())
                during += 1
                assert during < 100_000, "the move never completed"
                await asyncio.sleep(0)
            for i in range(10):
                await produce(f"after-{i}".encode())
            assert logs.log_dir_of("a", 0) == second
            values: list[bytes] = []
            while len(values) < len(sent):  # bounded: each read returns a batch at least
                read = replicas.read("a", 0, len(values), 1 << 20, -1, min_one_message=True)
                assert read.error == ErrorCode.none
                values += values_of(read.records)
            assert values == sent
            # A slice per segment, a produce after each: they did land while it was copied.
            assert during >= 10
        finally:
            await replicas.close()
            await logs.shutdown()

    asyncio.run(main())


def test_a_move_cut_short_by_a_restart_is_resumed_when_the_partition_opens(
    tmp_path: Path,
) -> None:
    first, second = str(tmp_path / "d1"), str(tmp_path / "d2")
    start = image(5, {"a": (TOPIC_A, {0: partition(ME, (ME,))})})
    config = LogConfig(segment_bytes=2048)

    async def life(body: Any) -> None:
        runtime = real_runtime(seed=5)
        logs = LogManager(runtime, [first, second], config)
        await logs.startup()
        replicas = ReplicaManager(ME, logs, config, runtime.rng, runtime.clock)
        try:
            await body(logs, replicas)
        finally:
            await replicas.close()
            await logs.shutdown()

    sent = [f"v{i}".encode() * 50 for i in range(60)]

    async def first_life(logs: LogManager, replicas: ReplicaManager) -> None:
        replicas.start(start)
        await replicas.wait_reconciled(start.offset)
        for value in sent:
            result = await replicas.append("a", 0, batch(value), acks=-1, timeout_s=5)
            assert result.error == ErrorCode.none
        await replicas.log_dir_mover.close()  # the copy is begun, but never gets a slice
        assert await replicas.alter_replica_log_dir("a", 0, second) == ErrorCode.none
        future = logs.future_log_of("a", 0)
        assert future is not None
        await future.copy_slice(1000)  # part of it, then the broker stops

    async def second_life(logs: LogManager, replicas: ReplicaManager) -> None:
        resumed = logs.future_log_of("a", 0)
        assert resumed is not None and 0 < resumed.log.log_end_offset < len(sent)
        assert logs.log_dir_of("a", 0) == first
        moved = asyncio.Event()
        replicas.log_dir_mover.on_moved = moved.set
        replicas.start(start)
        await replicas.wait_reconciled(start.offset)
        await asyncio.wait_for(moved.wait(), 20)
        assert logs.log_dir_of("a", 0) == second
        read = replicas.read("a", 0, 0, 1 << 20, -1, min_one_message=True)
        values = values_of(read.records)
        while len(values) < len(sent):  # bounded: each read returns a batch at least
            more = replicas.read("a", 0, len(values), 1 << 20, -1, min_one_message=True)
            values += values_of(more.records)
        assert values == sent

    asyncio.run(life(first_life))
    asyncio.run(life(second_life))


def test_the_alter_log_dirs_throttle_paces_the_copy_and_its_lag_is_a_metric() -> None:
    """replica.alter.log.dirs.io.max.bytes.per.second, as kafka-reassign-partitions
    --replica-alter-log-dirs-throttle sets it on the broker: about 1 MB moved at 100 KB/s
    takes about 10 s of (virtual) time, at 0 the copy waits, and without it the same move
    takes no time. Kafka's ReplicaAlterLogDirsManager MaxLag shows the copy behind and
    FailedPartitionsCount a move given up."""
    first, second = "/d1", "/d2"
    topics = {"a": (TOPIC_A, {0: partition(ME, (ME,))})}

    def throttled(offset: int, rate: int | None) -> MetadataImage:
        configs = {} if rate is None else {(BROKER_RESOURCE, str(ME)): {THROTTLE: str(rate)}}
        return dataclasses.replace(image(offset, topics), configs=configs)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        clock = FakeClock()
        runtime = Runtime(SimDisk(random.Random(7)).fs(), clock, random.Random(7))
        config = LogConfig(segment_bytes=256 * 1024)
        logs = LogManager(runtime, [first, second], config)
        await logs.startup()
        replicas = ReplicaManager(ME, logs, config, runtime.rng, runtime.clock)
        mover = replicas.log_dir_mover
        moved = asyncio.Event()
        mover.on_moved = moved.set
        start = throttled(5, 0)
        replicas.start(start)
        await replicas.wait_reconciled(start.offset)
        try:
            for i in range(100):  # 100 batches of 10 KB
                result = await replicas.append(
                    "a", 0, batch(b"%05d" % i + b"x" * 10_000), acks=1, timeout_s=5
                )
                assert result.error == ErrorCode.none
            size = logs.get_log("a", 0).size  # type: ignore[union-attr]

            assert await replicas.alter_replica_log_dir("a", 0, second) == ErrorCode.none
            await asyncio.sleep(5)
            future = logs.future_log_of("a", 0)
            assert future is not None and future.log.log_end_offset == 0  # held at 0
            assert mover.max_lag() == 100

            began = loop.time()
            await reconcile(replicas, throttled(6, 100_000))
            await asyncio.sleep(2)
            assert 0 < future.log.log_end_offset < 100  # a few slices so far
            assert mover.max_lag() == 100 - future.log.log_end_offset
            await asyncio.wait_for(moved.wait(), 60)
            took = loop.time() - began  # from the throttle's change, read within a second
            assert size / 100_000 <= took <= size / 100_000 + 1.5, (size, took)
            assert logs.log_dir_of("a", 0) == second and mover.max_lag() == 0

            moved.clear()
            await reconcile(replicas, throttled(7, None))
            began = loop.time()
            assert await replicas.alter_replica_log_dir("a", 0, first) == ErrorCode.none
            await asyncio.wait_for(moved.wait(), 60)
            assert loop.time() - began < 0.1 and logs.log_dir_of("a", 0) == first

            # A move whose target dir fails is given up and counted (FailedPartitionsCount)
            # until the replica is asked to move again.
            await reconcile(replicas, throttled(8, 0))
            assert await replicas.alter_replica_log_dir("a", 0, second) == ErrorCode.none
            logs.fail_log_dir(second, OSError(errno.EIO, "I/O error"))
            await asyncio.sleep(2)
            assert mover.failed_partitions == {("a", 0)} and logs.future_log_of("a", 0) is None
            assert logs.log_dir_of("a", 0) == first
        finally:
            await replicas.close()
            await logs.shutdown()

    run_virtual(main())
