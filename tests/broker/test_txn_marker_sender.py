"""The marker sender (broker/txn/markers.py) over scripted leaders: retriable answers are
asked again at whatever leader the latest metadata names, a deleted topic or a log that
cannot hold markers needs none, a fenced answer stops the round, and nothing is sent once
the coordinator no longer holds the transaction."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.txn.markers import MarkerSender
from broker.txn.state import TxnMetadata, TxnState
from metadata.image import MetadataImage, PartitionRegistration, TopicImage, TopicsImage
from protocol.entities import make, response_module

WRITE_TXN_MARKERS = 27


def image(leaders: dict[tuple[str, int], int]) -> MetadataImage:
    by_topic: dict[str, dict[int, PartitionRegistration]] = {}
    for (topic, index), leader in leaders.items():
        by_topic.setdefault(topic, {})[index] = PartitionRegistration((1, 2), (1, 2), leader, 0, 0)
    topics = [
        TopicImage(name, uuid.UUID(int=i + 1), parts)
        for i, (name, parts) in enumerate(sorted(by_topic.items()))
    ]
    return MetadataImage(
        topics=TopicsImage(
            by_id={t.topic_id: t for t in topics}, by_name={t.name: t.topic_id for t in topics}
        )
    )


class Leader:
    """A broker's WriteTxnMarkers answers, from ``answer(topic, partition) -> error``."""

    closed = False

    def __init__(self, broker_id: int, answer: Callable[[str, int], ErrorCode]) -> None:
        self.broker_id = broker_id
        self.answer = answer
        self.asked: list[tuple[str, int]] = []

    async def request(self, entity: Any, timeout_s: float) -> object:
        module: Any = response_module(WRITE_TXN_MARKERS, 1)
        results = []
        for marker in entity.markers:
            topics = []
            for topic in marker.topics:
                parts = []
                for index in topic.partition_indexes:
                    self.asked.append((topic.name, index))
                    parts.append(
                        make(
                            module.WritableTxnMarkerPartitionResult,
                            {
                                "partition_index": index,
                                "error_code": self.answer(topic.name, index),
                            },
                        )
                    )
                topics.append(
                    make(
                        module.WritableTxnMarkerTopicResult,
                        {"name": topic.name, "partitions": tuple(parts)},
                    )
                )
            results.append(
                make(
                    module.WritableTxnMarkerResult,
                    {"producer_id": marker.producer_id, "topics": tuple(topics)},
                )
            )
        return make(module.WriteTxnMarkersResponse, {"markers": tuple(results)})


def prepared(*partitions: tuple[str, int]) -> TxnMetadata:
    return TxnMetadata("tx", 7, 3, 60_000, TxnState.PREPARE_COMMIT, frozenset(partitions), 1, 2)


def sender(current: list[MetadataImage], leaders: dict[int, Leader]) -> MarkerSender:
    markers = MarkerSender(1, lambda: current[0], lambda broker: ("h", broker), 0.001)

    async def connection(broker_id: int) -> Leader:
        return leaders[broker_id]

    markers._connection = connection  # type: ignore[assignment,method-assign]
    return markers


def test_retriable_answers_follow_the_leader_and_finished_partitions_are_not_asked_again() -> None:
    async def body() -> None:
        current = [image({("a", 0): 1, ("a", 1): 1, ("b", 0): 2})]

        def from_one(topic: str, index: int) -> ErrorCode:
            if (topic, index) == ("a", 1):
                current[0] = image({("a", 0): 1, ("a", 1): 2, ("b", 0): 2})  # it moves
                return ErrorCode.not_leader_or_follower
            return ErrorCode.none

        leaders = {1: Leader(1, from_one), 2: Leader(2, lambda t, i: ErrorCode.none)}
        done = await sender(current, leaders).send(
            prepared(("a", 0), ("a", 1), ("b", 0)), 5, lambda: True
        )
        assert done
        assert leaders[1].asked == [("a", 0), ("a", 1)]
        assert leaders[2].asked == [("b", 0), ("a", 1)]

    asyncio.run(asyncio.wait_for(body(), 5))


def test_deleted_topics_and_logs_without_markers_are_skipped_and_fencing_stops() -> None:
    async def body() -> None:
        current = [image({("a", 0): 1})]  # "gone" was deleted
        unsupported = Leader(1, lambda t, i: ErrorCode.unsupported_for_message_format)
        assert await sender(current, {1: unsupported}).send(
            prepared(("a", 0), ("gone", 0)), 5, lambda: True
        )
        assert unsupported.asked == [("a", 0)]
        fenced = Leader(1, lambda t, i: ErrorCode.transaction_coordinator_fenced)
        assert not await sender(current, {1: fenced}).send(prepared(("a", 0)), 5, lambda: True)
        assert fenced.asked == [("a", 0)]

    asyncio.run(asyncio.wait_for(body(), 5))


def test_nothing_is_sent_once_the_coordinator_lost_the_transaction() -> None:
    async def body() -> None:
        current = [image({("a", 0): 1})]
        holding = [True]

        def busy(topic: str, index: int) -> ErrorCode:
            holding[0] = False  # leadership of __transaction_state moved meanwhile
            return ErrorCode.not_enough_replicas

        leader = Leader(1, busy)
        assert not await sender(current, {1: leader}).send(
            prepared(("a", 0)), 5, lambda: holding[0]
        )
        assert leader.asked == [("a", 0)]

    asyncio.run(asyncio.wait_for(body(), 5))
