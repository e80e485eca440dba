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
(KIP-320) instead of records. Fetches keep incremental fetch sessions (KIP-227,
broker/fetch_session.py): one cache per broker, shared by its listeners. The records it
answers are regions of segment files, not their bytes: the network layer sends them with
sendfile(2) (docs/storage.md, "Serving fetches without copies").

OffsetForLeaderEpoch answers from the leader's epoch cache: clients (KIP-320) and a follower
that lost track of its leader's log end ask it.

A request may name hundreds of thousands of partitions (a 5 MB Fetch naming 200,000 held the
loop 10 s): every handler walks them SLICE_PARTITIONS at a time, giving the loop a turn in
between (``Turns``), so no request holds it for more than a slice.
"""

from __future__ import annotations

import asyncio
import collections
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.delayed_produce import AppendResult
from broker.fetch_session import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    FetchSessionCache,
    PartitionAnswer,
    PartitionKey,
    PartitionRequest,
)
from broker.replica_manager import ReplicaManager
from metadata.topic_names import RESERVED_TOPICS
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.server import NO_RESPONSE
from protocol.turns import Turns

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
PRODUCE_TV2_VERSION = 12  # KIP-890 part 2
# Partitions a handler walks between turns of the loop: a partition read, append or answer
# costs 5-30 us of CPU, so a slice is 3-15 ms on an idle core.
SLICE_PARTITIONS = 500
TOPIC_ID_VERSION = 13  # Fetch names topics by id from v13 (KIP-516)


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


async def produce(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module = response_module(ApiKey.PRODUCE, api_version)
    acks = request.acks
    timeout_s = max(0.0, request.timeout.total_seconds())

    async def one(topic: str, data: Any) -> AppendResult:
        if acks not in (-1, 0, 1):
            return AppendResult(ErrorCode.invalid_required_acks)
        if data.records is None:
            return AppendResult(ErrorCode.invalid_record)
        if topic in RESERVED_TOPICS:  # Kafka's ReplicaManager.appendToLocalLog
            return AppendResult(
                ErrorCode.invalid_topic_exception,
                message=f"Cannot append to internal topic {topic}",
            )
        return await replicas.append(
            topic,
            data.index,
            bytes(data.records),
            acks,
            timeout_s,
            transactional_id=request.transactional_id,  # Produce v3+
            # Produce v12 (transaction version 2): the leader adds the partition to the
            # transaction itself; the client sent no AddPartitionsToTxn.
            add_to_transaction=api_version >= PRODUCE_TV2_VERSION,
        )

    # Every partition appends at once (in request order: each task appends before it first
    # waits), then all wait for their high watermarks together, within the one timeout. The
    # tasks are made a slice at a time: those of a slice append while the next is made.
    turns = Turns(SLICE_PARTITIONS)
    wanted: list[tuple[str, Any]] = []
    for topic in request.topic_data:
        for data in topic.partition_data:
            wanted.append((topic.name, data))
            await turns.tick()
    tasks: collections.deque[asyncio.Future[AppendResult]] = collections.deque()
    for chunk in _chunks(wanted, SLICE_PARTITIONS):
        tasks.extend(asyncio.ensure_future(one(name, data)) for name, data in chunk)
        await asyncio.sleep(0)
    try:
        done = []
        while tasks:  # in order, not gather(): its set-up is one step of 200,000
            done.append(await tasks[0])
            # Each task let go of once awaited: 200,000 tasks freed together are one step
            # of the loop (asyncio's weak set of tasks forgets each in a callback).
            tasks.popleft()
            await turns.tick()
    finally:
        for task in tasks:
            task.cancel()  # those not awaited must not outlive the request
    if (stats := replicas.topic_metrics) is not None:
        for (name, data), appended_result in zip(wanted, done, strict=True):
            stats.produced(name, data.records or b"", appended_result.error)
            await turns.tick()
    results = iter(done)
    topics = []
    for topic in request.topic_data:
        answers = []
        for data in topic.partition_data:
            await turns.tick()
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


async def fetch(
    replicas: ReplicaManager,
    sessions: FetchSessionCache,
    topic_name: Callable[[uuid.UUID], str | None],
    request: Any,
    api_version: int,
) -> object:
    """A Fetch in its session's context (broker/fetch_session.py): a full or sessionless
    fetch reads what it names, an incremental one every partition of its session and
    answers only those with news. ``topic_name`` resolves Fetch v13+'s topic ids."""
    module = response_module(ApiKey.FETCH, api_version)
    uses_topic_ids = api_version >= TOPIC_ID_VERSION
    turns = Turns(SLICE_PARTITIONS)
    fetch_data = []
    for topic in request.topics:
        ref = _topic_ref(topic, uses_topic_ids)
        for p in topic.partitions:
            fetch_data.append(((ref, p.partition), _partition_request(p)))
            await turns.tick()
    to_forget = []
    for topic in getattr(request, "forgotten_topics_data", ()):
        ref = _topic_ref(topic, uses_topic_ids)
        for index in topic.partitions:
            to_forget.append((ref, index))
            await turns.tick()
    context = sessions.new_context(
        getattr(request, "session_id", INVALID_SESSION_ID),
        getattr(request, "session_epoch", FINAL_EPOCH),
        request.replica_id >= 0,
        uses_topic_ids,
        fetch_data,
        to_forget,
    )
    await asyncio.sleep(0)  # the session's context: one more step of the request's size
    wanted: list[_Wanted] = []
    keys = []
    for key, partition in context.partitions:
        name = _resolve(key[0], topic_name)
        wanted.append((key, name, partition))
        if name is not None:
            keys.append((name, key[1]))
        await turns.tick()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0.0, request.max_wait.total_seconds())
    answers = await _read_in_order(replicas, request, module, wanted)
    while wanted:  # bounded by the deadline: each pass waits for a partition or for it
        size, failed = 0, False
        for answer in answers:
            size += len(answer["records"])
            failed = failed or answer["error_code"] != ErrorCode.none
            failed = failed or "diverging_epoch" in answer
            await turns.tick()
        remaining = deadline - loop.time()
        if size >= request.min_bytes or failed or remaining <= 0:
            break
        changed = await replicas.wait_for_changes(keys, remaining)
        if not changed:
            break  # nothing it reads changed: the answer stands
        # With nothing held yet, only the partitions that changed are read again; with some
        # data held, all of them, so the byte budget is shared in request order as before.
        only = None if size else set(changed)
        answers = await _read_in_order(replicas, request, module, wanted, only, answers)
    summaries = []
    for answer in answers:
        summaries.append(_summary(answer))
        await turns.tick()
    result = context.respond(summaries)
    if (stats := replicas.topic_metrics) is not None:
        follower = request.replica_id >= 0
        for i in result.selected:
            answer = answers[i]
            stats.fetched(wanted[i][1], len(answer["records"]), answer["error_code"], follower)
    await asyncio.sleep(0)  # the session's answer: one more step of the request's size
    by_topic: dict[uuid.UUID | str, list[object]] = {}
    for i in result.selected:
        by_topic.setdefault(wanted[i][0][0], []).append(make(module.PartitionData, answers[i]))
        await turns.tick()
    name_field = "topic_id" if uses_topic_ids else "topic"
    return make(
        module.FetchResponse,
        {
            "throttle_time": timedelta(0),
            "error_code": result.error,
            "session_id": result.session_id,
            "responses": tuple(
                make(module.FetchableTopicResponse, {name_field: ref, "partitions": tuple(parts)})
                for ref, parts in by_topic.items()
            ),
        },
    )


def _topic_ref(topic: Any, uses_topic_ids: bool) -> uuid.UUID | str:
    """How a request names a topic: its id from Fetch v13, its name before."""
    return topic.topic_id if uses_topic_ids else topic.topic


def _resolve(ref: uuid.UUID | str, topic_name: Callable[[uuid.UUID], str | None]) -> str | None:
    return ref if isinstance(ref, str) else topic_name(ref)


def _partition_request(partition: Any) -> PartitionRequest:
    return PartitionRequest(
        fetch_offset=partition.fetch_offset,
        partition_max_bytes=partition.partition_max_bytes,
        current_leader_epoch=getattr(partition, "current_leader_epoch", -1),
        last_fetched_epoch=getattr(partition, "last_fetched_epoch", -1),
        log_start_offset=getattr(partition, "log_start_offset", -1),
    )


def _summary(answer: dict[str, Any]) -> PartitionAnswer:
    return PartitionAnswer(
        records_bytes=len(answer["records"]),
        high_watermark=answer["high_watermark"],
        last_stable_offset=answer["last_stable_offset"],
        log_start_offset=answer["log_start_offset"],
        error=answer["error_code"],
        diverging="diverging_epoch" in answer,
    )


_Wanted = tuple[PartitionKey, str | None, PartitionRequest]


async def _read_in_order(
    replicas: ReplicaManager,
    request: Any,
    module: Any,
    wanted: list[_Wanted],
    only: set[tuple[str, int]] | None = None,
    previous: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Each wanted partition's response fields, read in request order within the
    request's byte budget; with ``only``, the others keep their ``previous`` answer. The
    reads of one pass see the logs as they are when each is read, as a pass that took
    several turns of the loop in Kafka's fetch threads would."""
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    size = 0
    answers = []
    turns = Turns(SLICE_PARTITIONS)
    for i, ((_, index), name, partition) in enumerate(wanted):
        await turns.tick()
        if only is not None and previous is not None and (name, index) not in only:
            answers.append(previous[i])
            continue
        if name is None:
            answers.append(_unknown_topic_id(request, index))
            continue
        # The first partition with data gets at least one whole batch (Kafka's
        # minOneMessage), so a batch larger than max.bytes cannot stall a consumer.
        max_bytes = min(partition.partition_max_bytes, budget)
        answer = _read(replicas, request, module, name, index, partition, max_bytes, size == 0)
        read = len(answer["records"])
        budget, size = max(0, budget - read), size + read
        answers.append(answer)
    return answers


def _unknown_topic_id(request: Any, index: int) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": ErrorCode.unknown_topic_id,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None if request.isolation_level != READ_COMMITTED else (),
        "records": b"",
    }


def _read(
    replicas: ReplicaManager,
    request: Any,
    module: Any,
    topic: str,
    index: int,
    wanted: PartitionRequest,
    max_bytes: int,
    min_one_message: bool,
) -> dict[str, Any]:
    """One partition's response fields: a follower's read when the request has a replica
    id, a consumer's otherwise."""
    if request.replica_id >= 0:
        result = replicas.read_for_follower(
            request.replica_id,
            topic,
            index,
            wanted.fetch_offset,
            max_bytes,
            wanted.current_leader_epoch,
            wanted.last_fetched_epoch,
            min_one_message=min_one_message,
        )
    else:
        result = replicas.read(
            topic,
            index,
            wanted.fetch_offset,
            max_bytes,
            wanted.current_leader_epoch,
            min_one_message=min_one_message,
            last_fetched_epoch=wanted.last_fetched_epoch,
            isolation_level=request.isolation_level,
        )
    aborted = None  # read_uncommitted: null, as Kafka sends it
    if request.isolation_level == READ_COMMITTED:
        aborted = tuple(
            make(
                module.AbortedTransaction,
                {"producer_id": txn.producer_id, "first_offset": txn.first_offset},
            )
            for txn in result.aborted_transactions or ()
        )
    fields: dict[str, Any] = {
        "partition_index": index,
        "error_code": result.error,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset,
        "aborted_transactions": aborted,
        "records": result.records,
    }
    if result.diverging_end_offset >= 0:
        fields["diverging_epoch"] = make(
            module.EpochEndOffset,
            {"epoch": result.diverging_epoch, "end_offset": result.diverging_end_offset},
        )
    return fields


async def list_offsets(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module = response_module(ApiKey.LIST_OFFSETS, api_version)
    topics = []
    turns = Turns(SLICE_PARTITIONS)
    for topic in request.topics:
        answers = []
        for wanted in topic.partitions:
            await turns.tick()
            result = await replicas.list_offset_in_slices(
                topic.name,
                wanted.partition_index,
                wanted.timestamp,
                getattr(wanted, "current_leader_epoch", -1),
                getattr(request, "isolation_level", READ_UNCOMMITTED),  # v2+
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


async def offset_for_leader_epoch(
    replicas: ReplicaManager, request: Any, api_version: int
) -> object:
    module = response_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, api_version)
    topics = []
    turns = Turns(SLICE_PARTITIONS)
    for topic in request.topics:
        answers = []
        for wanted in topic.partitions:
            await turns.tick()
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
