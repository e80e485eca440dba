"""KIP-848 through the group APIs: ConsumerGroupHeartbeat and ConsumerGroupDescribe shapes,
member-epoch checks on OffsetCommit/OffsetFetch, ListGroups types, stored records that
rebuild the group after a leadership move, and fencing by the coordinator's timers."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.group.apis import GroupApis
from broker.group.config import GroupCoordinatorConfig
from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from broker.group.records import GroupKey, GroupValue, encode_group_key, encode_group_value
from log.batch import encode_batch
from log.records import Record
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.broker.fakes import ask_group
from tests.broker.test_group_apis import LISTENER, request, with_broker
from tests.broker.test_group_coordinator import NODE, Clock, Partitions, image, move, started

T = image(NODE).topics.by_name["t"]


def heartbeat(member: str, epoch: int, **fields: Any) -> Any:
    module = request_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
    owned = fields.pop("owned", None)
    values = {
        "group_id": "g",
        "member_id": member,
        "member_epoch": epoch,
        "rebalance_timeout": timedelta(seconds=30 if epoch == 0 else -0.001),
        "subscribed_topic_names": ("t",) if epoch == 0 else None,
        "topic_partitions": None
        if owned is None
        else (make(module.TopicPartitions, {"topic_id": T, "partitions": tuple(owned)}),),
        **fields,
    }
    return make(module.ConsumerGroupHeartbeatRequest, values)


def assigned(answer: Any) -> list[int] | None:
    if answer.assignment is None:
        return None
    return sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)


def offset_commit(member: str, epoch: int, offset: int) -> Any:
    module = request_module(ApiKey.OFFSET_COMMIT, 9)
    partition = make(
        module.OffsetCommitRequestPartition,
        {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""},
    )
    return make(
        module.OffsetCommitRequest,
        {
            "group_id": "g",
            "generation_id_or_member_epoch": epoch,
            "member_id": member,
            "topics": (
                make(module.OffsetCommitRequestTopic, {"name": "t", "partitions": (partition,)}),
            ),
        },
    )


def run(body: Any, partitions: Partitions | None = None) -> None:
    async def main() -> None:
        coordinator = await started(partitions or Partitions(), Clock())
        current = with_broker(image(NODE))

        async def forward(sent: object) -> object:
            raise AssertionError(sent)

        apis = GroupApis(coordinator, lambda: current, forward)
        try:
            await body(apis, coordinator)
        finally:
            await apis.close()
            await coordinator.close()

    asyncio.run(asyncio.wait_for(main(), 10))


async def beat(apis: GroupApis, member: str, epoch: int, **fields: Any) -> Any:
    answer = await ask_group(apis, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1,
                               heartbeat(member, epoch, **fields),
                               LISTENER, "client-" + member)  # fmt: skip
    return answer


def test_two_members_split_a_topic_through_heartbeats_and_commit_at_their_epoch() -> None:
    async def body(apis: GroupApis, coordinator: GroupCoordinator) -> None:
        a = await beat(apis, "a", 0)
        assert (a.error_code, a.member_epoch, assigned(a)) == (ErrorCode.none, 1, [0, 1, 2])
        assert a.heartbeat_interval == timedelta(seconds=5)
        b = await beat(apis, "b", 0)
        assert (b.member_epoch, assigned(b)) == (2, [])  # a still holds them
        a = await beat(apis, "a", 1, owned=[0, 1, 2])
        kept = assigned(a)
        assert a.member_epoch == 1 and kept is not None and len(kept) == 2  # revoke one
        a = await beat(apis, "a", 1, owned=kept)  # acknowledged
        assert a.member_epoch == 2
        b = await beat(apis, "b", 2, owned=[])
        assert assigned(b) == sorted({0, 1, 2} - set(kept))
        ok = await ask_group(
            apis, ApiKey.OFFSET_COMMIT, 9, offset_commit("a", 2, 40), LISTENER, "c"
        )
        stale = await ask_group(
            apis, ApiKey.OFFSET_COMMIT, 9, offset_commit("a", 1, 41), LISTENER, "c"
        )
        stranger = await ask_group(
            apis, ApiKey.OFFSET_COMMIT, 9, offset_commit("x", 2, 42), LISTENER, "c"
        )
        assert [r.topics[0].partitions[0].error_code for r in (ok, stale, stranger)] == [
            ErrorCode.none,
            ErrorCode.stale_member_epoch,
            ErrorCode.unknown_member_id,
        ]
        fetch_module = request_module(ApiKey.OFFSET_FETCH, 9)
        fetches = [
            make(fetch_module.OffsetFetchRequestGroup,
                 {"group_id": "g", "member_id": member, "member_epoch": epoch, "topics": None})
            for member, epoch in (("a", 2), ("a", 1))
        ]  # fmt: skip
        fetch = make(fetch_module.OffsetFetchRequest, {"require_stable": True, "groups": fetches})
        answer = await ask_group(apis, ApiKey.OFFSET_FETCH, 9, fetch, LISTENER, "c")
        assert [g.error_code for g in answer.groups] == [
            ErrorCode.none,
            ErrorCode.stale_member_epoch,
        ]
        assert answer.groups[0].topics[0].partitions[0].committed_offset == 40
        listed = await ask_group(apis, ApiKey.LIST_GROUPS, 5,
                                   request(ApiKey.LIST_GROUPS, 5, "ListGroupsRequest",
                                           {"types_filter": ("consumer",)}),
                                   LISTENER, "c")  # fmt: skip
        assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
            ("g", "consumer", "Stable")
        ]
        wanted = {"group_ids": ("g", "nope"), "include_authorized_operations": False}
        describe = request(
            ApiKey.CONSUMER_GROUP_DESCRIBE, 1, "ConsumerGroupDescribeRequest", wanted
        )
        described = await ask_group(
            apis, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, describe, LISTENER, "c"
        )
        group, missing = described.groups
        assert (group.group_state, group.group_epoch, group.assignor_name) == (
            "Stable",
            2,
            "uniform",
        )
        assert [(m.member_id, m.client_id, m.member_epoch) for m in group.members] == [
            ("a", "client-a", 2),
            ("b", "client-b", 2),
        ]
        assert group.members[0].assignment.topic_partitions[0].topic_name == "t"
        assert missing.error_code is ErrorCode.group_id_not_found
        join = request(ApiKey.JOIN_GROUP, 5, "JoinGroupRequest", {
            "group_id": "g", "session_timeout": timedelta(seconds=10), "member_id": "",
            "rebalance_timeout": timedelta(seconds=10), "protocol_type": "consumer",
            "protocols": (),
        })  # fmt: skip
        joined = await ask_group(apis, ApiKey.JOIN_GROUP, 5, join, LISTENER, "c")
        assert joined.error_code is ErrorCode.inconsistent_group_protocol

        # The stored records rebuild the same group on the next leader.
        before = coordinator.describe_consumer("g")
        assert before is not None and not isinstance(before, ErrorCode)
        members, target = dict(before.members), dict(before.target)
        await move(coordinator, image(2, epoch=1))
        await move(coordinator, image(NODE, epoch=2))
        after = coordinator.describe_consumer("g")
        assert after is not None and not isinstance(after, ErrorCode)
        assert (after.members, after.target) == (members, target)
        assert sorted(after.session_deadlines) == ["a", "b"]  # fresh sessions

        left = await beat(apis, "b", -1)
        assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
        a = await beat(apis, "a", 2, owned=kept)
        assert assigned(a) == [0, 1, 2]

    run(body)


def test_a_failed_write_changes_nothing_and_a_silent_member_is_fenced() -> None:
    partitions = Partitions()

    async def body(apis: GroupApis, coordinator: GroupCoordinator) -> None:
        await beat(apis, "a", 0)
        partitions.committing = False
        refused = await beat(apis, "b", 0)
        assert refused.error_code is ErrorCode.coordinator_not_available
        group = coordinator.describe_consumer("g")
        assert group is not None and not isinstance(group, ErrorCode)
        assert list(group.members) == ["a"] and group.group_epoch == 1
        partitions.committing = True
        await beat(apis, "b", 0)
        shard = coordinator.shard_for("g")
        assert not isinstance(shard, ErrorCode)
        far = asyncio.get_running_loop().time() + 46
        coordinator.consumer.due(shard, far)  # both sessions are over by then
        await coordinator.consumer.fenced()
        assert group.members == {} and group.state.value == "Empty"
        delete = request(ApiKey.DELETE_GROUPS, 2, "DeleteGroupsRequest", {"groups_names": ("g",)})
        answer = await ask_group(apis, ApiKey.DELETE_GROUPS, 2, delete, LISTENER, "c")
        assert answer.results[0].error_code is ErrorCode.none
        assert coordinator.describe_consumer("g") is None
        again = await beat(apis, "a", 3, owned=[])
        assert again.error_code is ErrorCode.unknown_member_id

    run(body, partitions)


def test_a_fence_due_while_the_members_heartbeat_is_stored_is_dropped() -> None:
    """Kafka drops a timer's write that waited while the timer was overridden: a member
    whose deadline passed while its own heartbeat's records were being stored is not fenced
    once that heartbeat restarted its deadlines (the simulator's exclusive-assignment check
    found a member fenced right after being answered its partitions, kafka seed 6)."""
    partitions = Partitions()

    async def body(apis: GroupApis, coordinator: GroupCoordinator) -> None:
        await beat(apis, "a", 0)
        await beat(apis, "b", 0)  # a must give partitions up to b
        partitions.gate = asyncio.Event()
        revoking = asyncio.ensure_future(beat(apis, "a", 1, owned=[0, 1, 2]))
        await partitions.parked.wait()  # a's records are being stored
        shard = coordinator.shard_for("g")
        assert not isinstance(shard, ErrorCode)
        far = asyncio.get_running_loop().time() + 46
        coordinator.consumer.due(shard, far)  # both sessions are over by then
        partitions.gate.set()
        answer = await revoking
        assert answer.error_code is ErrorCode.none
        await coordinator.consumer.fenced()
        group = coordinator.describe_consumer("g")
        assert group is not None and not isinstance(group, ErrorCode)
        assert list(group.members) == ["a"]  # b, silent, is fenced; a heartbeated meanwhile

    run(body, partitions)


def test_group_consumer_settings_are_read_and_checked() -> None:
    config = GroupCoordinatorConfig.from_properties(
        {
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.assignors": "org.apache.kafka.coordinator.group.assignor.RangeAssignor,"
            " uniform",
        }
    )
    limits = config.consumer_limits()
    assert (limits.session_timeout_ms, limits.heartbeat_interval_ms) == (6000, 500)
    assert limits.assignors == ("range", "uniform")
    with pytest.raises(ValueError, match=r"group\.consumer\.assignors: unknown assignor 'sticky'"):
        GroupCoordinatorConfig.from_properties({"group.consumer.assignors": "sticky"})
    with pytest.raises(ValueError, match=r"group\.consumer\.session\.timeout\.ms"):
        GroupCoordinatorConfig.from_properties({"group.consumer.session.timeout.ms": "0"})


def test_retention_expires_unsubscribed_offsets_then_the_empty_consumer_group() -> None:
    async def main() -> None:
        clock = Clock()
        coordinator = await started(Partitions(), clock, offsets_retention_minutes=1)
        apis = GroupApis(coordinator, lambda: with_broker(image(NODE)), forward_nothing)
        try:
            await beat(apis, "a", 0)
            await ask_group(apis, ApiKey.OFFSET_COMMIT, 9, offset_commit("a", 1, 5), LISTENER, "c")
            clock.ms += 61_000
            await coordinator.expire_offsets()  # "t" is subscribed: kept
            kept = coordinator.fetch_offsets("g", None, "a", 1)
            assert not isinstance(kept, ErrorCode)
            assert [(t, p, v.offset) for t, parts in kept for p, v in parts if v] == [("t", 0, 5)]
            await beat(apis, "a", -1)
            await coordinator.expire_offsets()  # Empty: its offsets and then itself go
            assert coordinator.describe_consumer("g") is None
            assert coordinator.fetch_offsets("g", None) == []
        finally:
            await apis.close()
            await coordinator.close()

    asyncio.run(asyncio.wait_for(main(), 10))


async def forward_nothing(sent: object) -> object:
    raise AssertionError(sent)


def test_a_shard_with_a_late_classic_record_for_a_consumer_group_loads_the_consumer_group() -> None:
    partitions = Partitions()

    async def body(apis: GroupApis, coordinator: GroupCoordinator) -> None:
        await beat(apis, "a", 0)
        shard = coordinator.shard_for("g")
        assert not isinstance(shard, ErrorCode)
        empty = GroupValue("consumer", 1, None, None, 0, ())
        record = Record(encode_group_key(GroupKey("g")), encode_group_value(empty), 0)
        await partitions.append(OFFSETS_TOPIC, shard.partition, encode_batch([record]), -1, 5)
        await move(coordinator, image(2, epoch=1))
        await move(coordinator, image(NODE, epoch=2))
        group = coordinator.describe_consumer("g")
        assert (
            group is not None and not isinstance(group, ErrorCode) and list(group.members) == ["a"]
        )
        assert coordinator.describe("g") is None

    run(body, partitions)


def test_v0_members_get_an_id_and_bad_heartbeats_get_kafkas_errors() -> None:
    async def body(apis: GroupApis, coordinator: GroupCoordinator) -> None:
        module = request_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0)
        v0 = make(module.ConsumerGroupHeartbeatRequest, {
            "group_id": "g", "member_id": "", "member_epoch": 0,
            "rebalance_timeout": timedelta(seconds=30), "subscribed_topic_names": ("t",),
            "topic_partitions": None,
        })  # fmt: skip
        joined = await ask_group(apis, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, v0, LISTENER, "c")
        assert joined.error_code is ErrorCode.none and len(joined.member_id) == 36
        no_id = await beat(apis, "", 0)
        no_group = await ask_group(
            apis, ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, heartbeat("m", 0, group_id=""), LISTENER, "c"
        )
        bad_assignor = await beat(apis, "m", 0, server_assignor="sticky")
        bad_epoch = await beat(apis, joined.member_id, 9, owned=[])
        assert [(a.error_code, a.error_message) for a in (no_id, no_group)] == [
            (ErrorCode.invalid_request, "MemberId can't be empty."),
            (ErrorCode.invalid_request, "GroupId can't be empty."),
        ]
        assert bad_assignor.error_code is ErrorCode.unsupported_assignor
        assert bad_epoch.error_code is ErrorCode.fenced_member_epoch

    run(body)
