"""__consumer_offsets is compacted in practice: the group coordinator writes into real logs
(a LogManager on the simulated disk), the log cleaner shrinks them, and a coordinator that
reloads a partition from the cleaned log still finds every group's latest offsets, and
nothing of a deleted group once delete.retention.ms has passed."""

from __future__ import annotations

import asyncio
import random

from kio.schema.errors import ErrorCode

from broker.delayed_produce import AppendResult
from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from log.batch import decode_batch, iter_batches
from log.config import LogConfig, LogManagerConfig
from log.manager import LogManager
from log.runtime import Runtime
from sim.disk import SimDisk
from tests.broker.test_group_coordinator import (
    NODE,
    PARTITIONS,
    Clock,
    commit,
    image,
    known,
    move,
    started,
)

RETENTION_MS = 60_000
# What broker/group/apis.py creates the topic with, with segments small enough to roll often.
OFFSETS_CONFIG = LogConfig(
    cleanup_policy=("compact",),
    compression_type="producer",
    segment_bytes=2048,
    delete_retention_ms=RETENTION_MS,
    file_delete_delay_ms=0,
)
COMMITS = 300


class LogPartitions:
    """The ReplicaManager's append over real partition logs (one replica: acks=all is
    acknowledged once the batch is fsynced, as the HW then covers it)."""

    def __init__(self, logs: LogManager) -> None:
        self.logs = logs

    async def wait_reconciled(self, offset: int) -> None:
        return None

    async def append(
        self,
        topic: str,
        index: int,
        records: bytes,
        acks: int,
        timeout_s: float,
        *,
        coordinator: bool = False,
    ) -> AppendResult:
        log = await self.logs.get_or_create_log(topic, index, OFFSETS_CONFIG)
        info = log.append_as_leader(records, 0)
        await log.flush()
        return AppendResult(ErrorCode.none, info.first_offset, log.log_start_offset)


def offsets_of(coordinator: GroupCoordinator, group: str) -> dict[int, int]:
    result = coordinator.fetch_offsets(group, None)
    assert not isinstance(result, ErrorCode), result
    return {p: value.offset for _, parts in result for p, value in parts if value is not None}


def offsets_log_bytes(logs: LogManager) -> int:
    return sum(log.size for tp, log in logs.all_logs() if tp[0] == OFFSETS_TOPIC)


async def clean_until_idle(logs: LogManager) -> int:
    """Cleaner passes until no offsets log is dirty enough; how many ran (bounded)."""
    for passes in range(4 * PARTITIONS):
        if await logs.clean_dirtiest_log() is None:
            return passes
    raise AssertionError("the cleaner never ran out of dirty logs")


def test_offsets_topic_shrinks_under_the_cleaner_and_reloads_the_latest_offsets() -> None:
    async def body() -> None:
        clock = Clock()
        runtime = Runtime(SimDisk(random.Random(11)).fs(), clock, random.Random(11))
        logs = LogManager(runtime, ["/data"], OFFSETS_CONFIG, manager_config=LogManagerConfig())
        await logs.load_logs()  # no scheduled tasks: the test drives the cleaner
        coordinator = await started(LogPartitions(logs), clock)  # type: ignore[arg-type]
        for index in range(COMMITS):  # the same two partitions' offsets, again and again
            clock.ms += 10
            for group in ("g", "h"):
                errors = await coordinator.commit_offsets(
                    group, "", None, -1, commit(index) + commit(1000 + index, 1), known
                )
                assert errors == [ErrorCode.none, ErrorCode.none]
        await coordinator.commit_offsets("gone", "", None, -1, commit(5), known)
        assert await coordinator.delete_group("gone") is ErrorCode.none
        for _, log in logs.all_logs():
            log.roll()  # what is left in the active segment becomes cleanable
            await log.flush()
        before = offsets_log_bytes(logs)
        segments_before = sum(len(log.segments) for _, log in logs.all_logs())

        assert await clean_until_idle(logs) >= 1
        after = offsets_log_bytes(logs)
        assert after * 10 < before, (before, after)  # 2 x 300 commits of 2 keys: ~4 kept

        await move(coordinator, image(2, epoch=1))  # another broker leads, then us again:
        await move(coordinator, image(NODE, epoch=2))  # every shard reloads from its log
        latest = {0: COMMITS - 1, 1: 1000 + COMMITS - 1}
        assert offsets_of(coordinator, "g") == offsets_of(coordinator, "h") == latest
        assert coordinator.describe("gone") is None

        # The deleted group's tombstones outlive the first clean (a consumer reading the
        # topic meanwhile learns of the deletion) and go once delete.retention.ms passed.
        served = await served_keys(logs)
        assert any(b"gone" in key for key in served)
        clock.ms += RETENTION_MS
        await clean_all(logs)
        assert not any(b"gone" in key for key in await served_keys(logs))
        # This pass also merged the small cleaned segments (grouped by their new sizes).
        assert sum(len(log.segments) for _, log in logs.all_logs()) <= 2 * PARTITIONS
        assert segments_before > 10 * PARTITIONS
        await move(coordinator, image(2, epoch=3))
        await move(coordinator, image(NODE, epoch=4))
        assert offsets_of(coordinator, "g") == latest
        await coordinator.close()
        await logs.shutdown()

    asyncio.run(asyncio.wait_for(body(), 60))


async def clean_all(logs: LogManager) -> None:
    """One pass over every offsets log, dirty enough or not (tombstone expiry)."""
    for tp, log in logs.all_logs():
        await logs.cleaner.clean(tp, log)


async def served_keys(logs: LogManager) -> list[bytes]:
    keys: list[bytes] = []
    for _, log in logs.all_logs():
        offset = log.log_start_offset
        while offset < log.log_end_offset:  # bounded: each read moves on
            data = bytes(log.read(offset, 1 << 20).records)
            for position, header in iter_batches(data):
                keys.extend(r.key for r in decode_batch(data, position)[1] if r.key is not None)
                offset = header.next_offset
    return keys
