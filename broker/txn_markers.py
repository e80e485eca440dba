"""WriteTxnMarkers (API 27) on a partition leader: the transaction coordinator ends a
transaction on the partitions it touched (Kafka's KafkaApis.handleWriteTxnMarkersRequest).

Each marker names a producer id and epoch, commit or abort, the coordinator's epoch and the
partitions to write it to. Every partition appends its commit or abort control batch
(log/end_txn_marker.py) as leader and answers once the batch is replicated as acks=all
(broker/replica_manager.py ``write_txn_marker``, the delayed-produce wait): so the
coordinator only writes CompleteCommit/CompleteAbort once every marker is committed. Errors
are per partition, as Kafka's: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_PRODUCER_EPOCH (a marker of a stale producer epoch; under transaction version 2,
KIP-890, one no newer than the producer's batches), TRANSACTION_COORDINATOR_FENCED,
NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT; the coordinator retries them. A retry of the marker
a partition wrote last is answered without a second append.

The markers of ``__consumer_offsets`` partitions also end the producer's pending
transactional offset commits in the group coordinator (``on_offsets_marker``), once they
are written, as Kafka's groupCoordinator.onTransactionCompleted.

Versions 1 and 2 (kio has no version 0, which Kafka 4 removed too); v2 adds the marker's
transaction version.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.delayed_produce import AppendResult
from broker.replica_manager import ReplicaManager
from log.end_txn_marker import EndTransactionMarker
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import SLICE_ENTITIES, Turns

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_VERSION_2 = 2
MARKER_TIMEOUT_MS = 30_000  # Kafka waits request.timeout.ms for a marker's replication

# Called once a marker is written to a __consumer_offsets partition, with (that partition,
# producer id, producer epoch, committed?): the group coordinator's complete_transaction.
OffsetsMarkerHook = Callable[[int, int, int, bool], None]


async def write_txn_markers(
    replicas: ReplicaManager,
    request: Any,
    api_version: int,
    *,
    on_offsets_marker: OffsetsMarkerHook | None = None,
    timeout_ms: int = MARKER_TIMEOUT_MS,
) -> object:
    """The WriteTxnMarkers response: every marker written to every partition it names."""
    module: Any = response_module(ApiKey.WRITE_TXN_MARKERS, api_version)
    timeout_s = timeout_ms / 1000

    async def one(marker: Any, topic: str, index: int) -> AppendResult:
        return await replicas.write_txn_marker(
            topic,
            index,
            marker.producer_id,
            marker.producer_epoch,
            EndTransactionMarker(bool(marker.transaction_result), marker.coordinator_epoch),
            timeout_s,
            epoch_bumped=getattr(marker, "transaction_version", 0) >= TRANSACTION_VERSION_2,
        )

    # All markers and partitions at once: each appends before it first waits, in request
    # order, so two markers for one partition are written in the order they were sent. A
    # request may name 200,000 partitions: they are listed, started and answered a slice
    # at a time (protocol/turns.py), the tasks of a slice appending while the next is made.
    turns = Turns()
    wanted = []
    for marker in request.markers:
        for topic in marker.topics:
            for index in topic.partition_indexes:
                wanted.append((marker, topic.name, index))
                await turns.tick()
    slices: collections.deque[list[asyncio.Future[AppendResult]]] = collections.deque()
    for begin in range(0, len(wanted), SLICE_ENTITIES):
        if begin:
            await asyncio.sleep(0)
        chunk = wanted[begin : begin + SLICE_ENTITIES]
        slices.append([asyncio.ensure_future(one(*item)) for item in chunk])
    try:
        done: list[AppendResult] = []
        while slices:
            done.extend(await asyncio.gather(*slices[0]))
            slices.popleft()  # its tasks freed now, not 200,000 of them in one step
            if slices:
                await asyncio.sleep(0)
    finally:
        for tasks in slices:
            for task in tasks:
                task.cancel()  # those not awaited must not outlive the request
    results = iter(done)  # in the order of ``wanted``, which the answer follows
    answers = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for i in topic.partition_indexes:
                code = next(results).error
                if (
                    code == ErrorCode.none
                    and topic.name == OFFSETS_TOPIC
                    and on_offsets_marker is not None
                ):
                    on_offsets_marker(
                        i,
                        marker.producer_id,
                        marker.producer_epoch,
                        bool(marker.transaction_result),
                    )
                partitions.append(
                    make(
                        module.WritableTxnMarkerPartitionResult,
                        {"partition_index": i, "error_code": code},
                    )
                )
                await turns.tick()
            topics.append(
                make(
                    module.WritableTxnMarkerTopicResult,
                    {"name": topic.name, "partitions": tuple(partitions)},
                )
            )
            await turns.tick()
        answers.append(
            make(
                module.WritableTxnMarkerResult,
                {"producer_id": marker.producer_id, "topics": tuple(topics)},
            )
        )
    return make(module.WriteTxnMarkersResponse, {"markers": tuple(answers)})
