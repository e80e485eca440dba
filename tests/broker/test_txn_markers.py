"""WriteTxnMarkers through the broker's real request handler (KafkaApis.handle, encoded and
decoded as on the wire) over a real ReplicaManager and LogManager, and what read_committed
Fetch, ListOffsets and fetch sessions answer before and after the markers."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.kafka_apis import KafkaApis
from broker.replica_manager import ReplicaManager
from log.batch import encode_batch
from log.end_txn_marker import EndTransactionMarker
from log.records import Record
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.broker.fakes import LISTENER, FakeController, served
from tests.broker.read_committed import committed_values
from tests.broker.test_replica_manager import ME, SOLE, TOPIC_A, image, partition, run

FETCH, LIST_OFFSETS = ApiKey.FETCH, ApiKey.LIST_OFFSETS
WRITE_TXN_MARKERS, DESCRIBE_PRODUCERS = ApiKey.WRITE_TXN_MARKERS, ApiKey.DESCRIBE_PRODUCERS
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def produced(producer_id: int, sequence: int, value: bytes, *, transactional: bool) -> bytes:
    return encode_batch(
        [Record(None, value, 1_000)],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        is_transactional=transactional,
    )


async def ask(handler: KafkaApis, api_key: int, version: int, values: dict[str, Any]) -> Any:
    """The decoded answer to a request of (api, version) built from ``values``."""
    module: Any = request_module(api_key, version)
    request_class = next(getattr(module, name) for name in dir(module) if name.endswith("Request"))
    header = wire.RequestHeader(api_key, version, 5, "client")
    response = await served(handler).handle(header, make(request_class, values))
    assert response is not None
    # As the network layer sends it: fetched records are file regions, read here.
    encoded = b"".join(
        bytes(part) for piece in wire.response_parts(header, response, 1 << 20) for part in piece
    )
    return wire.decode_response(api_key, version, encoded)[1]


def markers_request(*markers: tuple[int, int, bool, int, dict[str, list[int]]]) -> dict:
    module: Any = request_module(WRITE_TXN_MARKERS, 1)
    return {
        "markers": tuple(
            make(
                module.WritableTxnMarker,
                {
                    "producer_id": producer_id,
                    "producer_epoch": epoch,
                    "transaction_result": commit,
                    "coordinator_epoch": coordinator_epoch,
                    "topics": tuple(
                        make(
                            module.WritableTxnMarkerTopic,
                            {"name": name, "partition_indexes": tuple(indexes)},
                        )
                        for name, indexes in topics.items()
                    ),
                },
            )
            for producer_id, epoch, commit, coordinator_epoch, topics in markers
        )
    }


def codes(response: Any) -> list[tuple[int, str, int, ErrorCode]]:
    return [
        (marker.producer_id, topic.name, part.partition_index, part.error_code)
        for marker in response.markers
        for topic in marker.topics
        for part in topic.partitions
    ]


def fetch_request(isolation: int, offset: int = 0, session: tuple[int, int] = (0, -1)) -> dict:
    module: Any = request_module(FETCH, 12)
    partition = make(
        module.FetchPartition,
        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20},
    )
    return {
        "max_wait": timedelta(0),
        "min_bytes": 0,
        "isolation_level": isolation,
        "session_id": session[0],
        "session_epoch": session[1],
        "topics": (make(module.FetchTopic, {"topic": "a", "partitions": (partition,)}),),
        "forgotten_topics_data": (),
    }


def latest(isolation: int) -> dict:
    module: Any = request_module(LIST_OFFSETS, 5)
    partition = make(module.ListOffsetsPartition, {"partition_index": 0, "timestamp": -1})
    topic = make(module.ListOffsetsTopic, {"name": "a", "partitions": (partition,)})
    return {"replica_id": -1, "isolation_level": isolation, "topics": (topic,)}


def test_markers_end_transactions_and_read_committed_sees_only_committed_records(
    tmp_path: Path,
) -> None:
    async def body(replicas: ReplicaManager) -> None:
        handler = KafkaApis(
            1,
            "cluster-a",
            LISTENER,
            lambda: SOLE,
            FakeController(SOLE),
            random.Random(0),
            replicas=replicas,
        )
        for records in (
            produced(7, 0, b"aborted-1", transactional=True),  # 0: 7 opens
            produced(8, 0, b"committed-1", transactional=True),  # 1: 8 opens
            produced(9, 0, b"plain", transactional=False),  # 2
            produced(7, 1, b"aborted-2", transactional=True),  # 3
        ):
            result = await replicas.append("a", 0, records, acks=-1, timeout_s=5)
            assert result.error == ErrorCode.none
        # Before any marker: read_committed stops at 7's first offset.
        answer = (await ask(handler, FETCH, 12, fetch_request(READ_COMMITTED))).responses[0]
        (part,) = answer.partitions
        assert (part.high_watermark, part.last_stable_offset, part.records) == (4, 0, b"")
        assert part.aborted_transactions == ()
        listed = await ask(handler, LIST_OFFSETS, 5, latest(READ_COMMITTED))
        assert listed.topics[0].partitions[0].offset == 0
        listed = await ask(handler, LIST_OFFSETS, 5, latest(READ_UNCOMMITTED))
        assert listed.topics[0].partitions[0].offset == 4
        # A read_committed session starts before the markers.
        first = await ask(handler, FETCH, 12, fetch_request(READ_COMMITTED, session=(0, 0)))
        session = first.session_id
        assert session != 0

        response = await ask(
            handler,
            WRITE_TXN_MARKERS,
            1,
            markers_request(
                (7, 0, False, 0, {"a": [0, 1], "nope": [0]}),  # a-1 is led elsewhere
                (8, 0, True, 0, {"a": [0]}),
            ),
        )
        assert codes(response) == [
            (7, "a", 0, ErrorCode.none),
            (7, "a", 1, ErrorCode.not_leader_or_follower),
            (7, "nope", 0, ErrorCode.unknown_topic_or_partition),
            (8, "a", 0, ErrorCode.none),
        ]
        log = replicas.logs.get_log("a", 0)
        assert log is not None and log.log_end_offset == 6  # markers at 4 and 5
        # The coordinator's retry: answered, not written again.
        retry = await ask(
            handler, WRITE_TXN_MARKERS, 1, markers_request((8, 0, True, 0, {"a": [0]}))
        )
        assert codes(retry) == [(8, "a", 0, ErrorCode.none)] and log.log_end_offset == 6
        # A zombie's marker (older producer epoch, after 7 moved to epoch 1) is refused.
        bumped = encode_batch(
            [Record(None, b"next", 1_000)],
            producer_id=7,
            producer_epoch=1,
            base_sequence=0,
            is_transactional=True,
        )
        assert (await replicas.append("a", 0, bumped, acks=-1, timeout_s=5)).base_offset == 6
        stale = await ask(
            handler, WRITE_TXN_MARKERS, 1, markers_request((7, 0, False, 0, {"a": [0]}))
        )
        assert codes(stale) == [(7, "a", 0, ErrorCode.invalid_producer_epoch)]

        answer = (await ask(handler, FETCH, 12, fetch_request(READ_COMMITTED))).responses[0]
        (part,) = answer.partitions
        assert (part.high_watermark, part.last_stable_offset) == (7, 6)  # 7's new txn at 6
        assert [(t.producer_id, t.first_offset) for t in part.aborted_transactions] == [(7, 0)]
        pairs = [(t.producer_id, t.first_offset) for t in part.aborted_transactions]
        assert committed_values(part.records, pairs) == [(1, b"committed-1"), (2, b"plain")]
        plain = (await ask(handler, FETCH, 12, fetch_request(READ_UNCOMMITTED))).responses[0]
        (part,) = plain.partitions
        assert (part.last_stable_offset, part.aborted_transactions) == (6, None)
        listed = await ask(handler, LIST_OFFSETS, 5, latest(READ_COMMITTED))
        assert listed.topics[0].partitions[0].offset == 6
        # The session's next incremental fetch carries the partition: its LSO moved.
        incremental = await ask(
            handler, FETCH, 12, fetch_request(READ_COMMITTED, session=(session, 1))
        )
        (part,) = incremental.responses[0].partitions
        assert (part.last_stable_offset, len(part.aborted_transactions)) == (6, 1)

    run(tmp_path, body, SOLE)


OFFSETS = image(
    6,
    {
        "a": (TOPIC_A, {0: partition(ME, (ME,))}),
        "__consumer_offsets": (
            uuid.UUID(int=0xC0),
            {0: partition(ME, (ME,)), 1: partition(ME, (ME,))},
        ),
    },
)


def test_offsets_partitions_markers_complete_the_group_coordinators_transaction(
    tmp_path: Path,
) -> None:
    """A marker written to __consumer_offsets is handed on to the group coordinator (its
    pending transactional offsets apply or go), once written; a data partition's is not."""

    async def body(replicas: ReplicaManager) -> None:
        completed: list[tuple[int, int, int, bool]] = []
        handler = KafkaApis(
            1,
            "cluster-a",
            LISTENER,
            lambda: OFFSETS,
            FakeController(OFFSETS),
            random.Random(0),
            replicas=replicas,
            on_offsets_marker=lambda *args: completed.append(args),
        )
        response = await ask(
            handler,
            WRITE_TXN_MARKERS,
            1,
            markers_request(
                (7, 2, True, 0, {"a": [0], "__consumer_offsets": [1, 5]}),
                (8, 0, False, 0, {"__consumer_offsets": [0]}),
            ),
        )
        assert codes(response) == [
            (7, "a", 0, ErrorCode.none),
            (7, "__consumer_offsets", 1, ErrorCode.none),
            (7, "__consumer_offsets", 5, ErrorCode.unknown_topic_or_partition),
            (8, "__consumer_offsets", 0, ErrorCode.none),
        ]
        assert completed == [(1, 7, 2, True), (0, 8, 0, False)]
        for index in (0, 1):
            log = replicas.logs.get_log("__consumer_offsets", index)
            assert log is not None and log.log_end_offset == 1  # the marker is in the log

    run(tmp_path, body, OFFSETS)


def test_describe_producers_shows_the_open_transactions_a_replica_knows(tmp_path: Path) -> None:
    """DescribeProducers (kafka-transactions describe-producers, abort, find-hanging), on
    the leader and on a follower."""

    async def body(replicas: ReplicaManager) -> None:
        handler = KafkaApis(
            1, "cluster-a", LISTENER, lambda: SOLE, FakeController(SOLE), random.Random(0),
            replicas=replicas,
        )  # fmt: skip
        for records in (
            produced(7, 0, b"x", transactional=True),  # 0: 7 opens
            produced(9, 0, b"y", transactional=False),  # 1
        ):
            assert (await replicas.append("a", 0, records, acks=1, timeout_s=5)).base_offset >= 0
        marker = EndTransactionMarker(False, 3)
        assert (await replicas.write_txn_marker("a", 0, 8, 0, marker, 5)).error == ErrorCode.none
        module: Any = request_module(DESCRIBE_PRODUCERS, 0)
        topics = (
            make(module.TopicRequest, {"name": "a", "partition_indexes": (0, 1)}),
            make(module.TopicRequest, {"name": "nope", "partition_indexes": (0,)}),
        )
        response = await ask(handler, DESCRIBE_PRODUCERS, 0, {"topics": topics})
        (zero, one), (unknown,) = (t.partitions for t in response.topics)
        assert [
            (p.producer_id, p.producer_epoch, p.last_sequence, p.coordinator_epoch,
             p.current_txn_start_offset)
            for p in zero.active_producers
        ] == [(7, 0, 0, -1, 0), (8, 0, -1, 3, -1), (9, 0, 0, -1, -1)]  # fmt: skip
        # A batch's own timestamp (1_000), not when it was appended; a marker's is its write.
        stamps = [p.last_timestamp for p in zero.active_producers]
        assert stamps[0] == stamps[2] == 1_000 and stamps[1] > 1_000
        # "a"-1 is led by broker 2: this follower answers from what it replicated, as Kafka's.
        assert (one.error_code, one.active_producers) == (ErrorCode.none, ())
        assert unknown.error_code == ErrorCode.unknown_topic_or_partition
        leader_batch = bytearray(produced(11, 0, b"z", transactional=True))
        replicas._partitions[("a", 1)].append_as_follower(bytes(leader_batch), now_ms=5_000)
        response = await ask(handler, DESCRIBE_PRODUCERS, 0, {"topics": topics[:1]})
        ((_, one),) = (t.partitions for t in response.topics)
        assert [
            (p.producer_id, p.last_timestamp, p.current_txn_start_offset)
            for p in one.active_producers
        ] == [(11, 1_000, 0)]

    run(tmp_path, body, SOLE)
