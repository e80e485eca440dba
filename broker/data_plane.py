"""Produce, Fetch and ListOffsets: Kafka's request shapes in and out of the ReplicaManager.

Each handler walks the request's topics and partitions in order, asks the ReplicaManager,
and builds the response of the request's version with ``make`` (fields a version lacks are
dropped). Partition-level problems are partition error codes, as in Kafka; a Produce with
acks=0 gets no response at all (``NO_RESPONSE``), because the client reads none.

Fetch follows Kafka's long poll: it answers at once when it has ``min_bytes`` (or an error),
otherwise it waits, up to ``max_wait``, for one of its partitions to change (an append, a new
high watermark, a leadership change) and reads again. A Fetch with a replica id is a
follower's (broker/fetcher.py): it reads up to the log end and moves the follower's progress.
A fetch whose last fetched epoch disagrees with the leader's log gets a diverging epoch
(KIP-320) instead of records. It does not keep fetch sessions (KIP-227): it answers session
id 0, which clients read as "full fetches only".

OffsetForLeaderEpoch answers from the leader's epoch cache: clients (KIP-320) and a follower
that lost track of its leader's log end ask it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.network import NO_RESPONSE
from broker.replica_manager import AppendResult, ReplicaManager
from raft.entities import make, response_module

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
OFFSET_FOR_LEADER_EPOCH = 23
READ_COMMITTED = 1
# Produce v3+ carries only v2 record batches (magic 2), the one format the log stores.
SUPPORTED = {
    PRODUCE: (3, 9),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    OFFSET_FOR_LEADER_EPOCH: (2, 4),
}


async def produce(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module = response_module(PRODUCE, api_version)
    acks = request.acks
    timeout_s = max(0.0, request.timeout.total_seconds())

    async def one(topic: str, data: Any) -> AppendResult:
        if acks not in (-1, 0, 1):
            return AppendResult(ErrorCode.invalid_required_acks)
        if data.records is None:
            return AppendResult(ErrorCode.invalid_record)
        return await replicas.append(topic, data.index, bytes(data.records), acks, timeout_s)

    # Every partition appends at once (in request order: each task appends before it first
    # waits), then all wait for their high watermarks together, within the one timeout.
    wanted = [(topic.name, data) for topic in request.topic_data for data in topic.partition_data]
    results = iter(await asyncio.gather(*(one(name, data) for name, data in wanted)))
    topics = []
    for topic in request.topic_data:
        answers = []
        for data in topic.partition_data:
            result = next(results)
            answers.append(
                make(
                    module.PartitionProduceResponse,
                    {
                        "index": data.index,
                        "error_code": result.error,
                        "base_offset": result.base_offset,
                        "log_start_offset": result.log_start_offset,
                        "error_message": result.message,
                        "log_append_time": _timestamp(result.log_append_time_ms),
                        "record_errors": _record_errors(module, result.record_errors),
                    },
                )
            )
        topics.append(
            make(
                module.TopicProduceResponse,
                {"name": topic.name, "partition_responses": tuple(answers)},
            )
        )
    if acks == 0:
        return NO_RESPONSE
    return make(module.ProduceResponse, {"responses": tuple(topics), "throttle_time": timedelta(0)})


def _record_errors(module: Any, errors: tuple[tuple[int, str], ...]) -> tuple[object, ...]:
    """Produce v8+'s per-record errors; older versions carry only the partition's code."""
    entity = getattr(module, "BatchIndexAndErrorMessage", None)
    if entity is None:
        return ()
    return tuple(
        make(entity, {"batch_index": index, "batch_index_error_message": text})
        for index, text in errors
    )


def _timestamp(ms: int) -> datetime | None:
    """A Produce response's log_append_time: None encodes -1 (the producer's CreateTime)."""
    return None if ms < 0 else datetime.fromtimestamp(ms / 1000, tz=UTC)


async def fetch(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module = response_module(FETCH, api_version)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, request.max_wait.total_seconds())
    keys = [(t.topic, p.partition) for t in request.topics for p in t.partitions]
    while True:  # bounded by the deadline: each pass waits for a partition or for it
        answers, size, failed = _read_all(replicas, request, module)
        remaining = deadline - loop.time()
        if size >= request.min_bytes or failed or remaining <= 0:
            break
        await replicas.wait_for_changes(keys, remaining)
    return make(
        module.FetchResponse,
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": tuple(
                make(
                    module.FetchableTopicResponse,
                    {
                        "topic": name,
                        "partitions": tuple(make(module.PartitionData, p) for p in partitions),
                    },
                )
                for name, partitions in answers
            ),
        },
    )


def _read_all(
    replicas: ReplicaManager, request: Any, module: Any
) -> tuple[list[tuple[str, list[dict[str, object]]]], int, bool]:
    """(per topic, its partitions' response fields), total record bytes, any error."""
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    answers: list[tuple[str, list[dict[str, object]]]] = []
    size, failed = 0, False
    replica_id = request.replica_id
    for topic in request.topics:
        partitions: list[dict[str, object]] = []
        for wanted in topic.partitions:
            # The first partition with data gets at least one whole batch (Kafka's
            # minOneMessage), so a batch larger than max.bytes cannot stall a consumer.
            current_epoch = getattr(wanted, "current_leader_epoch", -1)
            last_fetched_epoch = getattr(wanted, "last_fetched_epoch", -1)
            max_bytes = min(wanted.partition_max_bytes, budget)
            if replica_id >= 0:
                result = replicas.read_for_follower(
                    replica_id,
                    topic.topic,
                    wanted.partition,
                    wanted.fetch_offset,
                    max_bytes,
                    current_epoch,
                    last_fetched_epoch,
                    min_one_message=size == 0,
                )
            else:
                result = replicas.read(
                    topic.topic,
                    wanted.partition,
                    wanted.fetch_offset,
                    max_bytes,
                    current_epoch,
                    min_one_message=size == 0,
                    last_fetched_epoch=last_fetched_epoch,
                )
            budget = max(0, budget - len(result.records))
            size += len(result.records)
            diverged = result.diverging_end_offset >= 0
            failed = failed or result.error != ErrorCode.none or diverged
            fields: dict[str, object] = {
                "partition_index": wanted.partition,
                "error_code": result.error,
                "high_watermark": result.high_watermark,
                # No transactions yet: everything committed is stable.
                "last_stable_offset": result.high_watermark,
                "log_start_offset": result.log_start_offset,
                "aborted_transactions": None if request.isolation_level != READ_COMMITTED else (),
                "records": result.records,
            }
            if diverged:
                fields["diverging_epoch"] = make(
                    module.EpochEndOffset,
                    {"epoch": result.diverging_epoch, "end_offset": result.diverging_end_offset},
                )
            partitions.append(fields)
        answers.append((topic.topic, partitions))
    return answers, size, failed


def list_offsets(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module = response_module(LIST_OFFSETS, api_version)
    topics = []
    for topic in request.topics:
        answers = []
        for wanted in topic.partitions:
            result = replicas.list_offset(
                topic.name,
                wanted.partition_index,
                wanted.timestamp,
                getattr(wanted, "current_leader_epoch", -1),
            )
            answers.append(
                make(
                    module.ListOffsetsPartitionResponse,
                    {
                        "partition_index": wanted.partition_index,
                        "error_code": result.error,
                        "timestamp": result.timestamp,
                        "offset": result.offset,
                        "leader_epoch": result.leader_epoch,
                    },
                )
            )
        topics.append(
            make(
                module.ListOffsetsTopicResponse, {"name": topic.name, "partitions": tuple(answers)}
            )
        )
    return make(
        module.ListOffsetsResponse, {"throttle_time": timedelta(0), "topics": tuple(topics)}
    )


def offset_for_leader_epoch(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module = response_module(OFFSET_FOR_LEADER_EPOCH, api_version)
    topics = []
    for topic in request.topics:
        answers = []
        for wanted in topic.partitions:
            error, epoch, end = replicas.offset_for_leader_epoch(
                topic.topic,
                wanted.partition,
                getattr(wanted, "current_leader_epoch", -1),
                wanted.leader_epoch,
            )
            answers.append(
                make(
                    module.EpochEndOffset,
                    {
                        "error_code": error,
                        "partition": wanted.partition,
                        "leader_epoch": epoch,
                        "end_offset": end,
                    },
                )
            )
        topics.append(
            make(
                module.OffsetForLeaderTopicResult,
                {"topic": topic.topic, "partitions": tuple(answers)},
            )
        )
    return make(
        module.OffsetForLeaderEpochResponse,
        {"throttle_time": timedelta(0), "topics": tuple(topics)},
    )
