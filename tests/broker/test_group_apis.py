"""The group APIs' request and response shapes, and the errors Kafka gives for bad input."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.group.apis import CREATE_TOPICS_VERSION, GroupApis
from broker.group.coordinator import OFFSETS_TOPIC
from metadata.image import BrokerRegistration, ClusterImage, MetadataImage
from metadata.records import Listener
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module, response_module
from tests.broker.fakes import ask_group
from tests.broker.test_group_coordinator import NODE, Clock, Partitions, image, started

LISTENER = "PLAINTEXT"


def with_broker(base: MetadataImage) -> MetadataImage:
    broker = BrokerRegistration(
        NODE, uuid.UUID(int=1), 1, (Listener(LISTENER, "h1", 9092),), (), None, False, False
    )
    return dataclasses.replace(base, cluster=ClusterImage({NODE: broker}))


def request(api_key: int, version: int, name: str, fields: dict[str, Any]) -> Any:
    return make(getattr(request_module(api_key, version), name), fields)


def run(body: Callable[[GroupApis], Coroutine[Any, Any, None]]) -> None:
    """``body`` against GroupApis over a loaded coordinator and an offsets topic led here."""

    async def main() -> None:
        coordinator = await started(Partitions(), Clock())
        current = with_broker(image(NODE))

        async def forward(sent: object) -> object:
            raise AssertionError(f"nothing is forwarded when the topic exists: {sent}")

        apis = GroupApis(coordinator, lambda: current, forward)
        try:
            await body(apis)
        finally:
            await apis.close()
            await coordinator.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_find_coordinator_answers_the_partition_leader_for_each_batched_key() -> None:
    async def body(apis: GroupApis) -> None:
        find = request(ApiKey.FIND_COORDINATOR, 4, "FindCoordinatorRequest",
                       {"key_type": 0, "coordinator_keys": ("a", "b")})  # fmt: skip
        answer = await ask_group(apis, ApiKey.FIND_COORDINATOR, 4, find, LISTENER, "c")
        assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in answer.coordinators] == [
            ("a", NODE, "h1", 9092, ErrorCode.none),
            ("b", NODE, "h1", 9092, ErrorCode.none),
        ]
        transactional = request(ApiKey.FIND_COORDINATOR, 3, "FindCoordinatorRequest",
                                {"key": "tx", "key_type": 1})  # fmt: skip
        answer = await ask_group(apis, ApiKey.FIND_COORDINATOR, 3, transactional, LISTENER, "c")
        assert answer.error_code is ErrorCode.invalid_request  # no transaction coordinator

    run(body)


def test_the_first_find_coordinator_creates_the_offsets_topic_with_kafkas_settings() -> None:
    async def main() -> None:
        coordinator = await started(Partitions(), Clock(), offsets_topic_replication_factor=1)
        forwarded: list[Any] = []
        created = asyncio.Event()

        async def forward(sent: object) -> object:
            forwarded.append(sent)
            created.set()
            raise OSError("no controller in this test")

        apis = GroupApis(coordinator, lambda: with_broker(MetadataImage()), forward)
        find = request(ApiKey.FIND_COORDINATOR, 0, "FindCoordinatorRequest", {"key": "g"})
        answer = await ask_group(apis, ApiKey.FIND_COORDINATOR, 0, find, LISTENER, "c")
        assert answer.error_code is ErrorCode.coordinator_not_available
        await created.wait()
        (topic,) = forwarded[0].topics
        assert (topic.name, topic.num_partitions, topic.replication_factor) == (
            OFFSETS_TOPIC,
            3,
            1,
        )
        assert {c.name: c.value for c in topic.configs}["cleanup.policy"] == "compact"
        await apis.close()
        await coordinator.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_bad_group_requests_get_kafkas_errors() -> None:
    async def body(apis: GroupApis) -> None:
        join = request(ApiKey.JOIN_GROUP, 0, "JoinGroupRequest", {
            "group_id": "", "session_timeout": timedelta(seconds=10), "member_id": "",
            "protocol_type": "consumer", "protocols": (),
        })  # fmt: skip
        answer = await ask_group(apis, ApiKey.JOIN_GROUP, 0, join, LISTENER, "c")
        assert answer.error_code is ErrorCode.invalid_group_id
        module = request_module(ApiKey.OFFSET_COMMIT, 2)
        partitions = (
            make(module.OffsetCommitRequestPartition,
                 {"partition_index": 0, "committed_offset": 5, "committed_metadata": "x" * 5000}),
            make(module.OffsetCommitRequestPartition,
                 {"partition_index": 1, "committed_offset": 6, "committed_metadata": ""}),
        )  # fmt: skip
        commit = make(module.OffsetCommitRequest, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "",
            "retention_time": timedelta(milliseconds=-1),
            "topics": (make(module.OffsetCommitRequestTopic,
                            {"name": OFFSETS_TOPIC, "partitions": partitions}),),
        })  # fmt: skip
        answer = await ask_group(apis, ApiKey.OFFSET_COMMIT, 2, commit, LISTENER, "c")
        assert [p.error_code for p in answer.topics[0].partitions] == [
            ErrorCode.offset_metadata_too_large,
            ErrorCode.none,
        ]
        fetch_module = request_module(ApiKey.OFFSET_FETCH, 8)
        fetch = make(fetch_module.OffsetFetchRequest, {"require_stable": False, "groups": (
            make(fetch_module.OffsetFetchRequestGroup, {"group_id": "g", "topics": None}),
            make(fetch_module.OffsetFetchRequestGroup, {"group_id": "other", "topics": None}),
        )})  # fmt: skip
        answer = await ask_group(apis, ApiKey.OFFSET_FETCH, 8, fetch, LISTENER, "c")
        assert [
            (g.group_id, [(p.partition_index, p.committed_offset) for t in g.topics
                          for p in t.partitions])
            for g in answer.groups
        ] == [("g", [(1, 6)]), ("other", [])]  # fmt: skip
        delete = request(
            ApiKey.DELETE_GROUPS, 2, "DeleteGroupsRequest", {"groups_names": ("nope",)}
        )
        answer = await ask_group(apis, ApiKey.DELETE_GROUPS, 2, delete, LISTENER, "c")
        assert answer.results[0].error_code is ErrorCode.group_id_not_found
        wanted = {"groups": ("nope", "g"), "include_authorized_operations": False}
        describe = request(ApiKey.DESCRIBE_GROUPS, 5, "DescribeGroupsRequest", wanted)
        answer = await ask_group(apis, ApiKey.DESCRIBE_GROUPS, 5, describe, LISTENER, "c")
        assert [(g.group_id, g.group_state) for g in answer.groups] == [
            ("nope", "Dead"),
            ("g", "Empty"),
        ]

    run(body)


def test_a_failed_offsets_topic_creation_is_logged_once_a_minute_however_often_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        coordinator = await started(Partitions(), Clock())  # replication factor 3, one broker
        response_type = response_module(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION)
        refused = make(response_type.CreateTopicsResponse, {"topics": (
            make(response_type.CreatableTopicResult, {
                "name": OFFSETS_TOPIC, "error_code": ErrorCode.invalid_replication_factor,
                "error_message": "Unable to replicate the partition 3 time(s)",
            }),
        )})  # fmt: skip
        attempts: list[object] = []

        async def forward(sent: object) -> object:
            attempts.append(sent)
            return refused

        apis = GroupApis(coordinator, lambda: with_broker(MetadataImage()), forward)
        find = request(ApiKey.FIND_COORDINATOR, 0, "FindCoordinatorRequest", {"key": "g"})
        for _ in range(3):
            answer = await ask_group(apis, ApiKey.FIND_COORDINATOR, 0, find, LISTENER, "c")
            assert answer.error_code is ErrorCode.coordinator_not_available
            # This attempt ends before the next request starts another.
            await apis._creating[OFFSETS_TOPIC]
        assert len(attempts) == 3
        await apis.close()
        await coordinator.close()

    with caplog.at_level(logging.WARNING, logger="broker.group.apis"):
        asyncio.run(asyncio.wait_for(main(), 10))
    warnings = [
        r.getMessage() for r in caplog.records if "invalid_replication_factor" in r.getMessage()
    ]
    assert len(warnings) == 1 and "replication factor 3" in warnings[0]
