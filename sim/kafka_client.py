"""The kafka scenario's client: Metadata, InitProducerId, Produce and Fetch, a classic
group member's FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetCommit and
OffsetFetch, and a KIP-848 member's ConsumerGroupHeartbeat, one call each.

The workload speaks the Kafka wire protocol to brokers over the simulated network, through
the same pipelined connection the brokers use (broker/client.py) and kio's schemas, so the
simulator exercises what kafka-python or librdkafka would. Each call answers a Kafka error
name ("NONE" on success) and what the response said; the retry and routing policy (which
broker, when to refresh metadata, whether to resend) is the workload's
(sim/scenarios/kafka.py), as it is a producer's or consumer's in Kafka.

A real client runs beside this one with ``--aiokafka`` (sim/scenarios/kafka_aiokafka.py, on
virtual time through sim/foreign.py).
"""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from dataclasses import dataclass
from typing import Any

from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from kio.schema.consumer_protocol_assignment.v0.data import (
    ConsumerProtocolAssignment,
)
from kio.schema.consumer_protocol_assignment.v0.data import (
    TopicPartition as AssignedPartitions,
)
from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.offset_commit import v8 as offset_commit_v8
from kio.schema.offset_commit import v9 as offset_commit_v9
from kio.schema.offset_fetch.v8.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.schema.types import GroupId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from broker.client import KafkaConnection
from log.batch import decode_batch, encode_batch, iter_batches
from log.compression import Compression
from log.records import Record

FETCH_MAX_BYTES = 64 * 1024


def _name(code: int) -> str:
    return ErrorCode(code).name.upper()


def _ms(seconds: float) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=int(seconds * 1000)))


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """A partition as a Metadata response describes it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]


async def partitions(
    conn: KafkaConnection, topic: str, timeout_s: float
) -> tuple[str, dict[int, PartitionInfo], dict[int, str]]:
    """(error, partition -> leader/epoch/ISR, broker id -> host) of ``topic``."""
    request = MetadataRequest(
        topics=(MetadataRequestTopic(topic_id=None, name=TopicName(topic)),),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    response: object = await conn.request(request, timeout_s)
    brokers = {int(b.node_id): b.host for b in response.brokers}  # type: ignore[attr-defined]
    found = response.topics[0]  # type: ignore[attr-defined]
    result = {
        int(p.partition_index): PartitionInfo(
            int(p.leader_id), int(p.leader_epoch), tuple(int(r) for r in p.isr_nodes)
        )
        for p in found.partitions
        if p.error_code == ErrorCode.none
    }
    return _name(found.error_code), result, brokers


async def init_producer_id(conn: KafkaConnection, timeout_s: float) -> tuple[str, int, int]:
    """(error, producer id, producer epoch) for an idempotent producer."""
    request = InitProducerIdRequest(transactional_id=None, transaction_timeout=_ms(60))
    response: object = await conn.request(request, timeout_s)
    return (
        _name(response.error_code),  # type: ignore[attr-defined]
        int(response.producer_id),  # type: ignore[attr-defined]
        int(response.producer_epoch),  # type: ignore[attr-defined]
    )


def record_batch(
    key: str,
    value: int,
    timestamp_ms: int,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    sequence: int = -1,
    compression: Compression = Compression.NONE,
) -> bytes:
    """One batch of one record whose value is ``value`` in decimal."""
    record = Record(key.encode(), str(value).encode(), timestamp_ms)
    return encode_batch(
        [record],
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=sequence,
    )


async def produce(
    conn: KafkaConnection,
    topic: str,
    partition: int,
    batch: bytes,
    acks: int,
    timeout_s: float,
) -> tuple[str, int]:
    """(error, base offset) of producing ``batch`` to ``topic``-``partition``."""
    error, base_offset, _throttle_ms = await produce_answer(
        conn, topic, partition, batch, acks, timeout_s
    )
    return error, base_offset


async def produce_answer(
    conn: KafkaConnection,
    topic: str,
    partition: int,
    batch: bytes,
    acks: int,
    timeout_s: float,
) -> tuple[str, int, int]:
    """(error, base offset, throttle time in ms) of producing ``batch``."""
    request = ProduceRequest(
        acks=i16(acks),
        timeout=_ms(timeout_s),
        topic_data=(
            TopicProduceData(
                name=TopicName(topic),
                partition_data=(PartitionProduceData(index=i32(partition), records=batch),),
            ),
        ),
    )
    response: Any = await conn.request(request, timeout_s + 1.0)
    answer = response.responses[0].partition_responses[0]
    throttle = response.throttle_time
    throttle_ms = int(throttle.total_seconds() * 1000) if throttle is not None else 0
    return _name(answer.error_code), int(answer.base_offset), throttle_ms


@dataclass(frozen=True, slots=True)
class FetchResult:
    error: str
    high_watermark: int = -1
    log_start_offset: int = -1
    records: tuple[tuple[int, int], ...] = ()  # (offset, value) from the requested offset


async def fetch(
    conn: KafkaConnection,
    topic: str,
    partition: int,
    offset: int,
    leader_epoch: int,
    max_wait_s: float,
    timeout_s: float,
) -> FetchResult:
    """A consumer's fetch of one partition from ``offset``: the records at or after it."""
    request = FetchRequest(
        max_wait=_ms(max_wait_s),
        min_bytes=i32(1),
        max_bytes=i32(FETCH_MAX_BYTES),
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
        return FetchResult(_name(response.error_code))  # type: ignore[attr-defined]
    data = response.responses[0].partitions[0]  # type: ignore[attr-defined]
    if data.error_code != ErrorCode.none:  # OFFSET_OUT_OF_RANGE names the log start
        return FetchResult(_name(data.error_code), log_start_offset=int(data.log_start_offset))
    found: list[tuple[int, int]] = []
    raw = bytes(data.records or b"")
    for pos, header in iter_batches(raw):
        if header.is_control:
            continue
        _header, records = decode_batch(raw, pos)
        for delta, record in enumerate(records):
            at = header.base_offset + (
                delta if record.offset_delta is None else record.offset_delta
            )
            if at >= offset and record.value is not None:
                found.append((at, int(record.value)))
    return FetchResult("NONE", int(data.high_watermark), int(data.log_start_offset), tuple(found))


# ---- a classic group member (protocol type "consumer", Kafka's ConsumerProtocol bytes) -----
PROTOCOL_TYPE = "consumer"
PROTOCOL_NAME = "range"
_write_subscription = entity_writer(ConsumerProtocolSubscription)
_write_assignment = entity_writer(ConsumerProtocolAssignment)
_read_assignment = entity_reader(ConsumerProtocolAssignment)


def subscription(topic: str) -> bytes:
    """A member's JoinGroup metadata: ConsumerProtocolSubscription v0 naming ``topic``."""
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", 0))
    _write_subscription(buffer, ConsumerProtocolSubscription(topics=(topic,)))
    return buffer.getvalue()


def assignment(topic: str, partitions: list[int]) -> bytes:
    """A member's SyncGroup assignment: ConsumerProtocolAssignment v0."""
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", 0))
    topics = (AssignedPartitions(topic=TopicName(topic), partitions=tuple(map(i32, partitions))),)
    _write_assignment(buffer, ConsumerProtocolAssignment(assigned_partitions=topics))
    return buffer.getvalue()


def assigned_partitions(data: bytes, topic: str) -> list[int]:
    """The partitions of ``topic`` an assignment gives (none for an empty one)."""
    if len(data) < 2:
        return []
    decoded, _ = _read_assignment(memoryview(data), 2)
    return sorted(
        int(p) for t in decoded.assigned_partitions if t.topic == topic for p in t.partitions
    )


async def find_coordinator(conn: KafkaConnection, group: str, timeout_s: float) -> tuple[str, int]:
    """(error, coordinator broker id) of ``group``."""
    request = FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,))
    response: object = await conn.request(request, timeout_s)
    found = response.coordinators[0]  # type: ignore[attr-defined]
    return _name(found.error_code), int(found.node_id)


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: str
    member_id: str
    generation: int = -1
    leader: str = ""
    members: tuple[str, ...] = ()  # the leader's answer lists every member


async def join_group(
    conn: KafkaConnection,
    group: str,
    member_id: str,
    topic: str,
    session_s: float,
    rebalance_s: float,
) -> JoinResult:
    """JoinGroup v7 (MEMBER_ID_REQUIRED first, with the member id to join again with)."""
    request = JoinGroupRequest(
        group_id=GroupId(group),
        session_timeout=_ms(session_s),
        rebalance_timeout=_ms(rebalance_s),
        member_id=member_id,
        protocol_type=PROTOCOL_TYPE,
        protocols=(JoinGroupRequestProtocol(name=PROTOCOL_NAME, metadata=subscription(topic)),),
    )
    response: object = await conn.request(request, rebalance_s + session_s)
    return JoinResult(
        _name(response.error_code),  # type: ignore[attr-defined]
        response.member_id,  # type: ignore[attr-defined]
        int(response.generation_id),  # type: ignore[attr-defined]
        response.leader,  # type: ignore[attr-defined]
        tuple(m.member_id for m in response.members),  # type: ignore[attr-defined]
    )


async def sync_group(
    conn: KafkaConnection,
    group: str,
    generation: int,
    member_id: str,
    assignments: dict[str, bytes],
    timeout_s: float,
) -> tuple[str, bytes]:
    """(error, this member's assignment); the leader passes everyone's ``assignments``."""
    request = SyncGroupRequest(
        group_id=GroupId(group),
        generation_id=i32(generation),
        member_id=member_id,
        protocol_type=PROTOCOL_TYPE,
        protocol_name=PROTOCOL_NAME,
        assignments=tuple(
            SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments.items()
        ),
    )
    response: object = await conn.request(request, timeout_s)
    return _name(response.error_code), bytes(response.assignment)  # type: ignore[attr-defined]


async def heartbeat(
    conn: KafkaConnection, group: str, generation: int, member_id: str, timeout_s: float
) -> str:
    request = HeartbeatRequest(
        group_id=GroupId(group), generation_id=i32(generation), member_id=member_id
    )
    response: object = await conn.request(request, timeout_s)
    return _name(response.error_code)  # type: ignore[attr-defined]


async def offset_commit(
    conn: KafkaConnection,
    group: str,
    generation: int,
    member_id: str,
    topic: str,
    partition: int,
    offset: int,
    timeout_s: float,
    *,
    version: int = 8,
) -> str:
    """The error of committing ``offset`` for one partition, as a group member: v8 with a
    classic member's generation, v9 with a KIP-848 member's epoch."""
    schema: Any = offset_commit_v9.request if version == 9 else offset_commit_v8.request
    request = schema.OffsetCommitRequest(
        group_id=GroupId(group),
        generation_id_or_member_epoch=i32(generation),
        member_id=member_id,
        topics=(
            schema.OffsetCommitRequestTopic(
                name=TopicName(topic),
                partitions=(
                    schema.OffsetCommitRequestPartition(
                        partition_index=i32(partition),
                        committed_offset=i64(offset),
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    response: object = await conn.request(request, timeout_s)
    return _name(response.topics[0].partitions[0].error_code)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeat:
    """A ConsumerGroupHeartbeat's answer: the member's epoch, when to beat next, and the
    partitions of ``topic_id`` it is to own now (None: unchanged since the last answer)."""

    error: str
    member_epoch: int = -1
    interval_s: float = 0.0
    assigned: tuple[int, ...] | None = None
    topic_id: uuid.UUID | None = None


async def consumer_heartbeat(
    conn: KafkaConnection,
    group: str,
    member_id: str,
    member_epoch: int,
    timeout_s: float,
    *,
    topic: str,
    rebalance_s: float,
    assignor: str | None,
    owned: tuple[uuid.UUID | None, tuple[int, ...]] | None,
    full: bool = False,
) -> ConsumerHeartbeat:
    """ConsumerGroupHeartbeat v1 (KIP-848): epoch 0 joins, subscribed to ``topic`` with
    ``assignor``; -1 leaves; otherwise only what changed is sent, as Kafka's consumer does:
    ``owned`` (topic id, partitions) once the member holds a new assignment, else None.
    ``full`` sends every field (with ``owned``), as Kafka's consumer does after a heartbeat
    failed: the coordinator then answers the member's whole assignment."""
    joining = member_epoch == 0
    full = full or joining
    partitions: tuple[TopicPartitions, ...] | None = None
    if joining:
        partitions = ()
    elif owned is not None:
        topic_id, indexes = owned
        partitions = (
            (TopicPartitions(topic_id=topic_id, partitions=tuple(i32(p) for p in indexes)),)
            if topic_id is not None and indexes
            else ()
        )
    request = ConsumerGroupHeartbeatRequest(
        group_id=GroupId(group),
        member_id=member_id,
        member_epoch=i32(member_epoch),
        rebalance_timeout=_ms(rebalance_s if full else -0.001),
        subscribed_topic_names=(TopicName(topic),) if full else None,
        server_assignor=assignor if full else None,
        topic_partitions=partitions,
    )
    response: Any = await conn.request(request, timeout_s)
    assignment = response.assignment
    assigned: tuple[int, ...] | None = None
    topic_id = None
    if assignment is not None:
        assigned = tuple(sorted(int(p) for t in assignment.topic_partitions for p in t.partitions))
        topic_id = next((t.topic_id for t in assignment.topic_partitions), None)
    return ConsumerHeartbeat(
        _name(response.error_code),
        int(response.member_epoch),
        response.heartbeat_interval.total_seconds(),
        assigned,
        topic_id,
    )


async def offset_fetch(
    conn: KafkaConnection,
    group: str,
    topic: str,
    partition: int,
    timeout_s: float,
    *,
    require_stable: bool = False,
) -> tuple[str, int]:
    """(error, committed offset: -1 for none) of one partition; ``require_stable``
    (KIP-447, as a read_committed consumer asks): UNSTABLE_OFFSET_COMMIT while a
    transaction holds the offset."""
    request = OffsetFetchRequest(
        require_stable=require_stable,
        groups=(
            OffsetFetchRequestGroup(
                group_id=GroupId(group),
                topics=(
                    OffsetFetchRequestTopics(
                        name=TopicName(topic), partition_indexes=(i32(partition),)
                    ),
                ),
            ),
        ),
    )
    response: object = await conn.request(request, timeout_s)
    answer = response.groups[0]  # type: ignore[attr-defined]
    if answer.error_code != ErrorCode.none:
        return _name(answer.error_code), -1
    found = answer.topics[0].partitions[0]
    return _name(found.error_code), int(found.committed_offset)
