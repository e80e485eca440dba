"""The kafka scenario's transactional client: a transactional producer's FindCoordinator
(key type 1), InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn
and transactional Produce, and a read_committed consumer's Fetch, one call each.

Like sim/kafka_client.py (whose helpers it reuses) it speaks the Kafka wire protocol through
broker/client.py and kio's schemas; the transaction policy (which partitions, commit or
abort, what to do on an error) is the workload's (sim/scenarios/kafka_txn.py). The versions
are the ones Kafka's Java client sends: to a TV1 coordinator AddPartitionsToTxn v3 (v4 batches
are for brokers), AddOffsetsToTxn v3, TxnOffsetCommit v3, EndTxn v3 and Produce v9; under
transaction version 2 (KIP-890 part 2, ``tv2``) no AddPartitionsToTxn or AddOffsetsToTxn, but
Produce v12 and TxnOffsetCommit v5, whose partitions join the transaction on the server, and
EndTxn v5, whose answer is the producer id and epoch the next transaction uses. Fetch is v12
with ``isolation_level`` 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.end_txn.v5.request import EndTxnRequest as EndTxnRequestV5
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9 import request as produce_v9
from kio.schema.produce.v12 import request as produce_v12
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit_v3
from kio.schema.txn_offset_commit.v5 import request as txn_offset_commit_v5
from kio.schema.types import GroupId, ProducerId, TopicName, TransactionalId
from kio.static.primitive import i8, i16, i32, i64

from broker.client import KafkaConnection
from broker.txn.control import control_type
from log.batch import decode_batch, encode_batch, iter_batches
from log.records import Record
from sim.kafka_client import FETCH_MAX_BYTES, _ms, _name

READ_COMMITTED = 1


async def find_txn_coordinator(
    conn: KafkaConnection, transactional_id: str, timeout_s: float
) -> tuple[str, int]:
    """(error, coordinator broker id) of a transactional id (FindCoordinator key type 1)."""
    request = FindCoordinatorRequest(key_type=i8(1), coordinator_keys=(transactional_id,))
    response: object = await conn.request(request, timeout_s)
    found = response.coordinators[0]  # type: ignore[attr-defined]
    return _name(found.error_code), int(found.node_id)


async def init_txn_producer_id(
    conn: KafkaConnection,
    transactional_id: str,
    txn_timeout_s: float,
    producer: tuple[int, int],
    timeout_s: float,
) -> tuple[str, int, int]:
    """(error, producer id, epoch) for a transactional producer; ``producer`` is the id and
    epoch it had (-1, -1 for none), so the coordinator bumps that epoch (KIP-360)."""
    request = InitProducerIdRequest(
        transactional_id=TransactionalId(transactional_id),
        transaction_timeout=_ms(txn_timeout_s),
        producer_id=ProducerId(producer[0]),
        producer_epoch=i16(producer[1]),
    )
    response: object = await conn.request(request, timeout_s)
    return (
        _name(response.error_code),  # type: ignore[attr-defined]
        int(response.producer_id),  # type: ignore[attr-defined]
        int(response.producer_epoch),  # type: ignore[attr-defined]
    )


async def add_partitions(
    conn: KafkaConnection,
    transactional_id: str,
    producer: tuple[int, int],
    topic: str,
    partitions: list[int],
    timeout_s: float,
) -> str:
    """The first error (NONE if none) of adding ``partitions`` to the open transaction."""
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TransactionalId(transactional_id),
        v3_and_below_producer_id=ProducerId(producer[0]),
        v3_and_below_producer_epoch=i16(producer[1]),
        v3_and_below_topics=(
            AddPartitionsToTxnTopic(name=TopicName(topic), partitions=tuple(map(i32, partitions))),
        ),
    )
    response: object = await conn.request(request, timeout_s)
    if getattr(response, "error_code", ErrorCode.none) != ErrorCode.none:
        return _name(response.error_code)  # type: ignore[attr-defined]
    for found in response.results_by_topic_v3_and_below:  # type: ignore[attr-defined]
        for result in found.results_by_partition:
            if result.partition_error_code != ErrorCode.none:
                return _name(result.partition_error_code)
    return "NONE"


async def add_offsets(
    conn: KafkaConnection,
    transactional_id: str,
    producer: tuple[int, int],
    group: str,
    timeout_s: float,
) -> str:
    """The error of adding ``group``'s offsets partition to the open transaction."""
    request = AddOffsetsToTxnRequest(
        transactional_id=TransactionalId(transactional_id),
        producer_id=ProducerId(producer[0]),
        producer_epoch=i16(producer[1]),
        group_id=GroupId(group),
    )
    response: object = await conn.request(request, timeout_s)
    return _name(response.error_code)  # type: ignore[attr-defined]


async def txn_offset_commit(
    conn: KafkaConnection,
    transactional_id: str,
    producer: tuple[int, int],
    group: str,
    topic: str,
    offsets: dict[int, int],
    timeout_s: float,
    *,
    tv2: bool = False,
) -> str:
    """The first error (NONE if none) of committing ``offsets`` (partition -> offset) in the
    transaction, as a producer outside the group's membership (generation -1) does; under
    TV2 (v5) the offsets partition joins the transaction on the way."""
    schema: Any = txn_offset_commit_v5 if tv2 else txn_offset_commit_v3
    extra = {"generation_id": i32(-1), "member_id": "", "group_instance_id": None} if tv2 else {}
    request = schema.TxnOffsetCommitRequest(
        transactional_id=TransactionalId(transactional_id),
        group_id=GroupId(group),
        producer_id=ProducerId(producer[0]),
        producer_epoch=i16(producer[1]),
        topics=(
            schema.TxnOffsetCommitRequestTopic(
                name=TopicName(topic),
                partitions=tuple(
                    schema.TxnOffsetCommitRequestPartition(
                        partition_index=i32(p), committed_offset=i64(o), committed_metadata=""
                    )
                    for p, o in sorted(offsets.items())
                ),
            ),
        ),
        **extra,
    )
    response: object = await conn.request(request, timeout_s)
    for found in response.topics:  # type: ignore[attr-defined]
        for result in found.partitions:
            if result.error_code != ErrorCode.none:
                return _name(result.error_code)
    return "NONE"


async def end_txn(
    conn: KafkaConnection,
    transactional_id: str,
    producer: tuple[int, int],
    commit: bool,
    timeout_s: float,
    *,
    tv2: bool = False,
) -> tuple[str, tuple[int, int]]:
    """The error of ending the open transaction (commit or abort), and the producer id and
    epoch to go on with: the same under TV1, EndTxn v5's (the bumped epoch) under TV2."""
    end = EndTxnRequestV5 if tv2 else EndTxnRequest
    request = end(
        transactional_id=TransactionalId(transactional_id),
        producer_id=ProducerId(producer[0]),
        producer_epoch=i16(producer[1]),
        committed=commit,
    )
    response: Any = await conn.request(request, timeout_s)
    if tv2 and response.error_code == ErrorCode.none:
        return "NONE", (int(response.producer_id), int(response.producer_epoch))
    return _name(response.error_code), producer


async def produce_txn(
    conn: KafkaConnection,
    transactional_id: str,
    topic: str,
    partition: int,
    record: tuple[str, int, int],
    producer: tuple[int, int],
    sequence: int,
    timeout_s: float,
    *,
    tv2: bool = False,
) -> tuple[str, int]:
    """(error, base offset) of one transactional batch of one record (key, value, timestamp),
    acks=all; under TV2 (v12) its partition joins the transaction at the leader's request."""
    key, value, timestamp_ms = record
    batch = encode_batch(
        [Record(key.encode(), str(value).encode(), timestamp_ms)],
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=sequence,
        is_transactional=True,
    )
    schema: Any = produce_v12 if tv2 else produce_v9
    request = schema.ProduceRequest(
        transactional_id=TransactionalId(transactional_id),
        acks=i16(-1),
        timeout=_ms(timeout_s),
        topic_data=(
            schema.TopicProduceData(
                name=TopicName(topic),
                partition_data=(schema.PartitionProduceData(index=i32(partition), records=batch),),
            ),
        ),
    )
    response: object = await conn.request(request, timeout_s + 1.0)
    answer = response.responses[0].partition_responses[0]  # type: ignore[attr-defined]
    return _name(answer.error_code), int(answer.base_offset)


@dataclass(frozen=True, slots=True)
class CommittedFetch:
    """A read_committed fetch: its error, the partition's high watermark and last stable
    offset, and the (offset, value) pairs a consumer keeps after dropping aborted ones."""

    error: str
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: tuple[tuple[int, int], ...] = ()
    next_offset: int = -1  # past every batch the answer held: where the consumer goes on


async def fetch_committed(
    conn: KafkaConnection,
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int,
    max_wait_s: float,
    timeout_s: float,
) -> CommittedFetch:
    """A read_committed fetch from ``offset``, filtered as Kafka's consumer filters it: a
    transactional batch of a producer whose aborted transaction (from the response's list)
    began at or before it is dropped, until that producer's abort marker."""
    request = FetchRequest(
        max_wait=_ms(max_wait_s),
        min_bytes=i32(1),
        max_bytes=i32(FETCH_MAX_BYTES),
        isolation_level=i8(READ_COMMITTED),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=(
                    FetchPartition(
                        partition=i32(partition),
                        current_leader_epoch=i32(leader_epoch),
                        fetch_offset=i64(offset),
                        partition_max_bytes=i32(FETCH_MAX_BYTES),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
        rack_id="",
    )
    response: object = await conn.request(request, timeout_s)
    if response.error_code != ErrorCode.none:  # type: ignore[attr-defined]
        return CommittedFetch(_name(response.error_code))  # type: ignore[attr-defined]
    data = response.responses[0].partitions[0]  # type: ignore[attr-defined]
    if data.error_code != ErrorCode.none:
        return CommittedFetch(_name(data.error_code), log_start_offset=int(data.log_start_offset))
    pending = sorted(
        (int(t.first_offset), int(t.producer_id)) for t in data.aborted_transactions or ()
    )
    aborting: set[int] = set()  # producers inside an aborted transaction here
    found: list[tuple[int, int]] = []
    raw = bytes(data.records or b"")
    next_offset = offset
    for pos, header in iter_batches(raw):
        next_offset = max(next_offset, header.next_offset)
        while pending and pending[0][0] <= header.last_offset:
            aborting.add(pending.pop(0)[1])
        _header, records = decode_batch(raw, pos)
        if header.is_control:
            if control_type(records) is not None:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        for delta, record in enumerate(records):
            at = header.base_offset + (
                delta if record.offset_delta is None else record.offset_delta
            )
            if at >= offset and record.value is not None:
                found.append((at, int(record.value)))
    return CommittedFetch(
        "NONE",
        int(data.high_watermark),
        int(data.last_stable_offset),
        int(data.log_start_offset),
        tuple(found),
        next_offset,
    )
