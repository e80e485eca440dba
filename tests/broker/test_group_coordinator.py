"""The group coordinator over a stand-in for the ReplicaManager: commits are visible only once
their write is acknowledged, a shard is dropped when leadership moves and rebuilt from the
partition's records, and offsets retention expires an empty group's offsets and the group.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.delayed_produce import AppendResult
from broker.group.classic import GroupState, JoinRequest
from broker.group.config import GroupCoordinatorConfig
from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from broker.group.shard import OffsetCommit
from log.batch import assign_offsets, parse_header
from metadata.image import MetadataImage, PartitionRegistration, TopicImage, TopicsImage
from protocol.wire import MAX_STRING_BYTES

NODE = 1
PARTITIONS = 3
GROUP = "g"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def now_ms(self) -> int:
        return self.ms


class Partitions:
    """What the coordinator needs of the ReplicaManager (and its LogManager): one log per
    offsets partition.
    ``committing`` False holds the high watermark, so acks=all appends time out; a ``gate``
    holds every append's answer until it is set."""

    def __init__(self) -> None:
        self.data: dict[int, bytearray] = {p: bytearray() for p in range(PARTITIONS)}
        self.next_offset = dict.fromkeys(range(PARTITIONS), 0)
        self.committing = True
        self.gate: asyncio.Event | None = None
        self.parked = asyncio.Event()  # an append waits on the gate

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
        assert (topic, acks) == (OFFSETS_TOPIC, -1)
        batch = bytearray(records)
        base = self.next_offset[index]
        assign_offsets(batch, 0, base, 0)
        self.data[index] += batch
        self.next_offset[index] = parse_header(batch).next_offset
        if self.gate is not None:
            self.parked.set()
            await self.gate.wait()
        if not self.committing:
            return AppendResult(ErrorCode.request_timed_out, base)
        return AppendResult(ErrorCode.none, base, 0)

    @property
    def logs(self) -> Partitions:  # the LogManager's get_log, here on the same object
        return self

    def get_log(self, topic: str, index: int) -> PartitionLog:
        assert topic == OFFSETS_TOPIC
        return PartitionLog(self, index)


@dataclass
class PartitionLog:
    """The part of log.Log that loading reads: whole batches from an offset to the end."""

    partitions: Partitions
    index: int
    log_start_offset: int = 0

    def read(self, offset: int, max_bytes: int) -> SimpleNamespace:
        data, pos = bytes(self.partitions.data[self.index]), 0
        while pos < len(data) and parse_header(data, pos).next_offset <= offset:
            pos += parse_header(data, pos).size
        end = pos
        while end < len(data) and (end == pos or end - pos < max_bytes):
            end += parse_header(data, end).size
        return SimpleNamespace(records=memoryview(data[pos:end]))


def image(leader: int, epoch: int = 0, *, with_t: bool = True) -> MetadataImage:
    """The offsets topic led by ``leader`` at ``epoch`` and (unless deleted) topic "t"."""
    registration = PartitionRegistration((NODE,), (NODE,), leader, epoch, epoch)
    names = [OFFSETS_TOPIC, "t"] if with_t else [OFFSETS_TOPIC]
    topics = [
        TopicImage(name, uuid.UUID(int=7 + i), dict.fromkeys(range(PARTITIONS), registration))
        for i, name in enumerate(names)
    ]
    return MetadataImage(
        offset=epoch + 1,
        topics=TopicsImage(
            by_id={t.topic_id: t for t in topics}, by_name={t.name: t.topic_id for t in topics}
        ),
    )


def run(body: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(body, 10))


async def started(partitions: Partitions, clock: Clock, **config: int) -> GroupCoordinator:
    coordinator = GroupCoordinator(
        NODE,
        partitions,  # type: ignore[arg-type]
        GroupCoordinatorConfig(offsets_topic_num_partitions=PARTITIONS, **config),
        random.Random(1),
        clock,
    )
    await move(coordinator, image(NODE))
    return coordinator


async def move(coordinator: GroupCoordinator, after: MetadataImage) -> None:
    """Publish a new image and wait until the coordinator has acted on it."""
    coordinator.on_image(MetadataImage(), after, False)
    if after.offset == 1:
        coordinator.start(after)
    await coordinator.wait_applied(after.offset)


def commit(offset: int, partition: int = 0) -> list[OffsetCommit]:
    return [OffsetCommit("t", partition, offset, 3, "meta")]


def fetched(coordinator: GroupCoordinator) -> dict[int, int]:
    result = coordinator.fetch_offsets(GROUP, None)
    assert not isinstance(result, ErrorCode), result
    return {p: value.offset for _, parts in result for p, value in parts if value is not None}


def known(topic: str, partition: int) -> bool:
    return topic == "t"


def test_a_commit_is_visible_only_once_its_write_is_acknowledged() -> None:
    async def body() -> None:
        partitions, clock = Partitions(), Clock()
        coordinator = await started(partitions, clock)
        assert await coordinator.commit_offsets(GROUP, "", None, -1, commit(5), known) == [
            ErrorCode.none
        ]
        partitions.committing = False
        errors = await coordinator.commit_offsets(GROUP, "", None, -1, commit(9), known)
        assert errors == [ErrorCode.coordinator_not_available]
        assert fetched(coordinator) == {0: 5}
        partitions.committing = True
        unknown = [OffsetCommit("u", 0, 1, -1, "")]
        errors = await coordinator.commit_offsets(GROUP, "", None, -1, unknown, known)
        assert errors == [ErrorCode.unknown_topic_or_partition]
        await coordinator.close()

    run(body())


def test_a_shard_is_dropped_when_leadership_moves_and_rebuilt_from_its_records() -> None:
    async def body() -> None:
        partitions, clock = Partitions(), Clock()
        # (the default initial rebalance delay, 3 s, stays: it delays the join only)
        coordinator = await started(partitions, clock, group_min_session_timeout_ms=10)
        request = JoinRequest("", None, "c", "/h", 5000, 5000, "consumer", (("range", b""),),
                              False, True)  # fmt: skip
        joined = await coordinator.join(GROUP, request)
        synced = await coordinator.sync(
            GROUP, joined.member_id, None, joined.generation, None, None, {joined.member_id: b"a"}
        )
        assert synced.assignment == b"a"
        await coordinator.commit_offsets(
            GROUP, joined.member_id, None, joined.generation, commit(7), known
        )
        await move(coordinator, image(2, epoch=1))  # another broker leads
        assert coordinator.shard_for(GROUP) is ErrorCode.not_coordinator
        await move(coordinator, image(NODE, epoch=2))  # and back to us
        assert fetched(coordinator) == {0: 7}
        group = coordinator.describe(GROUP)
        assert not isinstance(group, ErrorCode) and group is not None
        assert group.state is GroupState.STABLE and group.generation == joined.generation
        assert group.members[joined.member_id].assignment == b"a"
        await coordinator.close()

    run(body())


def test_retention_expires_an_empty_groups_offsets_then_the_group() -> None:
    async def body() -> None:
        partitions, clock = Partitions(), Clock()
        coordinator = await started(partitions, clock, offsets_retention_minutes=1)
        await coordinator.commit_offsets(GROUP, "", None, -1, commit(1, 0), known)
        clock.ms += 30_000
        await coordinator.commit_offsets(GROUP, "", None, -1, commit(2, 1), known)
        clock.ms += 40_000  # the first commit is 70 s old, the second 40 s
        await coordinator.expire_offsets()
        assert fetched(coordinator) == {1: 2}
        clock.ms += 30_000
        await coordinator.expire_offsets()
        assert coordinator.describe(GROUP) is None
        # The tombstones are in the log: a reload finds nothing either.
        await move(coordinator, image(2, epoch=1))
        await move(coordinator, image(NODE, epoch=2))
        assert fetched(coordinator) == {} and coordinator.describe(GROUP) is None
        await coordinator.close()

    run(body())


def test_a_deleted_topics_offsets_are_removed_from_every_group() -> None:
    async def body() -> None:
        partitions, clock = Partitions(), Clock()
        coordinator = await started(partitions, clock)
        await coordinator.commit_offsets(GROUP, "", None, -1, commit(4), known)
        await coordinator.commit_offsets("other", "", None, -1, commit(5, 1), known)
        await move(coordinator, image(NODE, epoch=1, with_t=False))  # "t" is deleted
        await asyncio.gather(*list(coordinator._writes))  # the tombstones it wrote
        assert fetched(coordinator) == {}
        # and they are in the log: a reload finds none either
        await move(coordinator, image(2, epoch=2, with_t=False))
        await move(coordinator, image(NODE, epoch=3, with_t=False))
        assert fetched(coordinator) == {}
        assert coordinator.fetch_offsets("other", None) == []
        await coordinator.close()

    run(body())


def test_a_stable_groups_offsets_expire_only_for_topics_it_no_longer_subscribes_to() -> None:
    subscription = struct.pack(">hih", 0, 1, 1) + b"t" + struct.pack(">i", -1)  # v0: ["t"]

    async def body() -> None:
        partitions, clock = Partitions(), Clock()
        coordinator = await started(
            partitions, clock, offsets_retention_minutes=1, group_initial_rebalance_delay_ms=0
        )
        request = JoinRequest("", None, "c", "/h", 30_000, 30_000, "consumer",
                              (("range", subscription),), False, True)  # fmt: skip
        joined = await coordinator.join(GROUP, request)
        await coordinator.sync(GROUP, joined.member_id, None, joined.generation, None, None, {})
        commits = [OffsetCommit("t", 0, 3, -1, ""), OffsetCommit("old", 0, 9, -1, "")]
        errors = await coordinator.commit_offsets(
            GROUP, joined.member_id, None, joined.generation, commits, lambda *_: True
        )
        assert errors == [ErrorCode.none, ErrorCode.none]
        clock.ms += 60_000
        await coordinator.expire_offsets()
        result = coordinator.fetch_offsets(GROUP, None)
        assert not isinstance(result, ErrorCode)
        assert [(topic, [p for p, _ in parts]) for topic, parts in result] == [("t", [0])]
        await coordinator.close()

    run(body())


def test_ids_as_long_as_the_protocol_allows_are_stored_and_logged_short(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 22: a member id is its client id (or group.instance.id) plus "-" and a UUID, so
    ids at the protocol's 32,767-byte bound made a 32,804-byte member id that the group
    record could not hold: struct.error in the background write, and the SyncGroup was
    never answered. Every id here is at the bound, in multi-byte characters too."""
    longest = MAX_STRING_BYTES
    client_id = "é" * (longest // 2) + "c"  # 2-byte characters: the cut must not split one
    instance_id = "i" * longest
    protocol = "p" * longest

    async def body() -> None:
        partitions, clock = Partitions(), Clock()
        coordinator = await started(partitions, clock, group_initial_rebalance_delay_ms=0)
        for group_id, instance in (("g" * longest, None), ("h" * longest, instance_id)):
            request = JoinRequest("", instance, client_id, "/h", 30_000, 30_000, "consumer",
                                  ((protocol, b"m"),), False, True)  # fmt: skip
            joined = await coordinator.join(group_id, request)
            assert joined.error is ErrorCode.none
            assert len(joined.member_id.encode()) <= MAX_STRING_BYTES
            synced = await coordinator.sync(
                group_id, joined.member_id, instance, joined.generation, None, None,
                {joined.member_id: b"a"},
            )  # fmt: skip
            assert (synced.error, synced.assignment) == (ErrorCode.none, b"a")
            # The group record holds it: a reload has the member and its assignment.
            epoch = 2 if instance is None else 4
            await move(coordinator, image(2, epoch=epoch - 1))
            await move(coordinator, image(NODE, epoch=epoch))
            group = coordinator.describe(group_id)
            assert not isinstance(group, ErrorCode) and group is not None
            assert group.members[joined.member_id].assignment == b"a"
            assert group.protocol_name == protocol
        await coordinator.close()

    with caplog.at_level(logging.INFO, logger="broker.group.coordinator"):
        run(body())
    assert caplog.records
    assert max(len(record.getMessage()) for record in caplog.records) < 2000
