"""The transaction coordinator over stand-ins for the ReplicaManager and the producer-id
manager, with the real group coordinator, TxnApis and marker sender (its requests go straight
to the partition side's WriteTxnMarkers handler instead of a socket).

What it guarantees: a transaction's state is acknowledged in ``__transaction_state`` before a
client hears of it; committed offsets appear only after the commit marker, never after an
abort; a new instance of a transactional id fences the old one everywhere; a coordinator that
takes over a partition resumes the markers of a prepared transaction; timed-out transactions
are aborted and idle ids expire.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.delayed_produce import AppendResult
from broker.group.apis import GroupApis
from broker.group.config import GroupCoordinatorConfig
from broker.group.coordinator import OFFSETS_TOPIC, GroupCoordinator
from broker.txn.apis import TxnApis
from broker.txn.config import TXN_TOPIC, TransactionCoordinatorConfig
from broker.txn.coordinator import TransactionCoordinator
from broker.txn.records import decode_key, decode_value
from broker.txn.state import TxnState
from broker.txn_markers import write_txn_markers
from log.batch import assign_offsets, decode_batch, parse_header
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from metadata.image import (
    BrokerRegistration,
    ClusterImage,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    TopicsImage,
)
from metadata.records import Listener
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.broker.fakes import ask_group, ask_txn

NODE = 1
PARTITIONS = 3
TIMEOUT_MS = 60_000
LISTENER = "PLAINTEXT"


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def now_ms(self) -> int:
        return self.ms


class Partitions:
    """The ReplicaManager (and LogManager) as the coordinators use them: one in-memory log
    per partition; appends are acknowledged at once unless ``committing`` is False (then
    acks=all times out, as with a short ISR)."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, int], bytearray] = {}
        self.committing = True
        self.config = SimpleNamespace(inter_broker_listener_name=LISTENER)
        self.bugs: frozenset[str] = frozenset()  # the ReplicaManager's planted bugs: none

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
        header = parse_header(records)
        assert coordinator or not (header.is_control or header.is_transactional)
        batch = bytearray(records)
        log = self.data.setdefault((topic, index), bytearray())
        base = self.next_offset(topic, index)
        assign_offsets(batch, 0, base, 0)
        log += batch
        if not self.committing:
            return AppendResult(ErrorCode.request_timed_out, base)
        return AppendResult(ErrorCode.none, base, 0)

    def next_offset(self, topic: str, index: int) -> int:
        data, pos, offset = bytes(self.data.get((topic, index), b"")), 0, 0
        while pos < len(data):
            header = parse_header(data, pos)
            offset, pos = header.next_offset, pos + header.size
        return offset

    def batches(self, topic: str, index: int) -> list[Any]:
        data, pos, found = bytes(self.data.get((topic, index), b"")), 0, []
        while pos < len(data):
            header, records = decode_batch(data, pos)
            found.append((header, records))
            pos += header.size
        return found

    @property
    def logs(self) -> Partitions:
        return self

    def get_log(self, topic: str, index: int) -> PartitionLog:
        return PartitionLog(self, (topic, index))

    async def write_txn_marker(
        self,
        topic: str,
        index: int,
        producer_id: int,
        producer_epoch: int,
        marker: EndTransactionMarker,
        timeout_s: float,
        *,
        epoch_bumped: bool = False,
    ) -> AppendResult:
        """The partition side's marker append (WriteTxnMarkers), as an acks=all append."""
        batch = encode_marker_batch(producer_id, producer_epoch, marker, 0)
        return await self.append(topic, index, batch, -1, timeout_s, coordinator=True)


@dataclass
class PartitionLog:
    partitions: Partitions
    key: tuple[str, int]
    log_start_offset: int = 0

    def read(self, offset: int, max_bytes: int) -> SimpleNamespace:
        data, pos = bytes(self.partitions.data.get(self.key, b"")), 0
        while pos < len(data) and parse_header(data, pos).next_offset <= offset:
            pos += parse_header(data, pos).size
        end = pos
        while end < len(data) and (end == pos or end - pos < max_bytes):
            end += parse_header(data, end).size
        return SimpleNamespace(records=memoryview(data[pos:end]))


class ProducerIds:
    def __init__(self) -> None:
        self.next = 1000

    async def next_id(self) -> int:
        self.next += 1
        return self.next - 1


def image(epoch: int = 0, *, txn_leader: int = NODE) -> MetadataImage:
    """__consumer_offsets and topic "t" led here, __transaction_state led by ``txn_leader``
    at leader epoch ``epoch``."""
    here = PartitionRegistration((NODE,), (NODE,), NODE, 0, 0)
    txn = PartitionRegistration((NODE,), (NODE,), txn_leader, epoch, epoch)
    topics = [
        TopicImage(OFFSETS_TOPIC, uuid.UUID(int=1), dict.fromkeys(range(PARTITIONS), here)),
        TopicImage(TXN_TOPIC, uuid.UUID(int=2), dict.fromkeys(range(PARTITIONS), txn)),
        TopicImage("t", uuid.UUID(int=3), dict.fromkeys(range(PARTITIONS), here)),
    ]
    broker = BrokerRegistration(
        NODE, uuid.UUID(int=9), 1, (Listener(LISTENER, "h1", 9092),), (), None, False, False
    )
    return MetadataImage(
        offset=epoch + 1 + (0 if txn_leader == NODE else 100),
        cluster=ClusterImage({NODE: broker}),
        topics=TopicsImage(
            by_id={t.topic_id: t for t in topics}, by_name={t.name: t.topic_id for t in topics}
        ),
    )


class Direct:
    """A marker sender's connection that hands each request to the partition side's
    WriteTxnMarkers handler directly (over the fake partitions, the group coordinator
    completing the offsets partitions' transactions)."""

    closed = False

    def __init__(
        self, partitions: Partitions, groups: GroupCoordinator, hold: asyncio.Event
    ) -> None:
        self._partitions = partitions
        self._groups = groups
        self._hold = hold
        self.sent: list[Any] = []

    async def request(self, entity: Any, timeout_s: float) -> object:
        await self._hold.wait()
        self.sent.append(entity)
        return await write_txn_markers(
            self._partitions,  # type: ignore[arg-type]
            entity,
            1,
            on_offsets_marker=self._groups.complete_transaction,
        )

    async def close(self) -> None:
        return None


@dataclass
class Node:
    partitions: Partitions
    clock: Clock
    groups: GroupCoordinator
    txn: TransactionCoordinator
    apis: TxnApis
    direct: Direct
    current: MetadataImage

    async def call(self, api_key: int, version: int, name: str, **fields: Any) -> Any:
        request = make(getattr(request_module(api_key, version), name), fields)
        return await ask_txn(self.apis, api_key, version, request)

    async def init(self, txn_id: str = "tx", timeout_ms: int = TIMEOUT_MS) -> Any:
        return await self.call(
            ApiKey.INIT_PRODUCER_ID,
            4,
            "InitProducerIdRequest",
            transactional_id=txn_id,
            transaction_timeout=timedelta(milliseconds=timeout_ms),
            producer_id=-1,
            producer_epoch=-1,
        )

    async def add(self, pid: int, epoch: int, *partitions: int, version: int = 3) -> ErrorCode:
        module = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, version)
        topic = make(module.AddPartitionsToTxnTopic, {"name": "t", "partitions": partitions})
        answer = await self.call(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            version,
            "AddPartitionsToTxnRequest",
            v3_and_below_transactional_id="tx",
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(topic,),
        )
        (error,) = {
            p.partition_error_code
            for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }
        return error

    async def add_offsets(self, pid: int, epoch: int, group: str = "g") -> ErrorCode:
        answer = await self.call(
            ApiKey.ADD_OFFSETS_TO_TXN,
            3,
            "AddOffsetsToTxnRequest",
            transactional_id="tx",
            producer_id=pid,
            producer_epoch=epoch,
            group_id=group,
        )
        return answer.error_code

    async def commit_offset(self, pid: int, epoch: int, offset: int, **member: Any) -> ErrorCode:
        module = request_module(ApiKey.TXN_OFFSET_COMMIT, 3)
        partition = make(
            module.TxnOffsetCommitRequestPartition,
            {
                "partition_index": 0,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            },
        )
        topic = make(module.TxnOffsetCommitRequestTopic, {"name": "t", "partitions": (partition,)})
        answer = await self.call(
            ApiKey.TXN_OFFSET_COMMIT,
            3,
            "TxnOffsetCommitRequest",
            transactional_id="tx",
            group_id="g",
            producer_id=pid,
            producer_epoch=epoch,
            generation_id=member.get("generation", -1),
            member_id=member.get("member_id", ""),
            group_instance_id=None,
            topics=(topic,),
        )
        return answer.topics[0].partitions[0].error_code

    async def end(self, pid: int, epoch: int, commit: bool, version: int = 3) -> ErrorCode:
        answer = await self.call(
            ApiKey.END_TXN,
            version,
            "EndTxnRequest",
            transactional_id="tx",
            producer_id=pid,
            producer_epoch=epoch,
            committed=commit,
        )
        return answer.error_code

    async def describe(self, txn_id: str = "tx") -> Any:
        answer = await self.call(
            ApiKey.DESCRIBE_TRANSACTIONS,
            0,
            "DescribeTransactionsRequest",
            transactional_ids=(txn_id,),
        )
        return answer.transaction_states[0]

    def committed(self) -> int | None:
        result = self.groups.fetch_offsets("g", [("t", [0])])
        assert not isinstance(result, ErrorCode), result
        value = result[0][1][0][1]
        return None if value is None else value.offset


async def start(
    partitions: Partitions | None = None,
    clock: Clock | None = None,
    epoch: int = 0,
    hold: asyncio.Event | None = None,
    **config: int,
) -> Node:
    partitions = partitions or Partitions()
    clock = clock or Clock()
    if hold is None:
        hold = asyncio.Event()
        hold.set()
    current = image(epoch)
    groups = GroupCoordinator(
        NODE,
        partitions,  # type: ignore[arg-type]
        GroupCoordinatorConfig(offsets_topic_num_partitions=PARTITIONS),
        random.Random(1),
        clock,
    )
    txn = TransactionCoordinator(
        NODE,
        partitions,  # type: ignore[arg-type]
        ProducerIds(),  # type: ignore[arg-type]
        TransactionCoordinatorConfig(
            transaction_state_log_num_partitions=PARTITIONS,
            transaction_marker_retry_backoff_ms=1,
            **config,
        ),
        clock,
    )
    apis = TxnApis(txn, groups, lambda: node.current, clock)
    direct = Direct(partitions, groups, hold)

    async def connection(broker_id: int) -> Direct:
        return direct

    txn.markers._connection = connection  # type: ignore[method-assign]
    node = Node(partitions, clock, groups, txn, apis, direct, current)
    groups.start(current)
    txn.start(current)
    await groups.wait_applied(current.offset)
    await txn.wait_applied(current.offset)
    return node


async def stop(node: Node) -> None:
    await node.txn.close()
    await node.groups.close()


def run(body: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(body, 20))


def txn_log(partitions: Partitions) -> list[tuple[str, str | None]]:
    """Every (transactional id, state) record of __transaction_state, in order."""
    found = []
    for index in range(PARTITIONS):
        for _, records in partitions.batches(TXN_TOPIC, index):
            for record in records:
                txn_id = decode_key(record.key)
                status = None if record.value is None else decode_value(record.value).status
                state = None if status is None else TxnState.from_id(status)
                found.append((txn_id, None if state is None else state.value))
    return found


# ---- the tests --------------------------------------------------------------------------------
def test_a_committed_transaction_makes_its_offsets_visible_only_after_the_marker() -> None:
    async def body() -> None:
        # EndTxn waits 50 ms for the markers, then answers anyway (they are held here).
        node = await start(transaction_end_wait_for_markers_ms=50)
        hold = asyncio.Event()
        node.direct._hold = hold  # markers wait until the test lets them go
        init = await node.init()
        assert (init.error_code, init.producer_id, init.producer_epoch) == (ErrorCode.none, 1000, 0)
        pid = init.producer_id
        assert await node.add(pid, 0, 0, 1) is ErrorCode.none
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        assert await node.commit_offset(pid, 0, 42) is ErrorCode.none
        assert node.committed() is None  # pending until the marker
        described = await node.describe()
        assert (described.transaction_state, described.producer_id) == ("Ongoing", pid)
        assert {(t.topic, p) for t in described.topics for p in t.partitions} == {
            ("t", 0),
            ("t", 1),
            (OFFSETS_TOPIC, node.groups.partition_of("g", node.current)),
        }
        assert await node.end(pid, 0, True) is ErrorCode.none
        assert (await node.describe()).transaction_state == "PrepareCommit"
        # While the markers are out, the producer's next steps wait.
        assert await node.add(pid, 0, 2) is ErrorCode.concurrent_transactions
        assert await node.end(pid, 0, True) is ErrorCode.concurrent_transactions
        assert node.committed() is None
        hold.set()
        await node.txn.idle()
        assert node.committed() == 42
        assert (await node.describe()).transaction_state == "CompleteCommit"
        assert await node.end(pid, 0, True) is ErrorCode.none  # a retried EndTxn
        (marker,) = {m for request in node.direct.sent for m in request.markers}
        assert (marker.producer_id, marker.producer_epoch, marker.transaction_result) == (
            pid,
            0,
            True,
        )
        assert txn_log(node.partitions) == [
            ("tx", "Empty"),
            ("tx", "Ongoing"),
            ("tx", "Ongoing"),
            ("tx", "PrepareCommit"),
            ("tx", "CompleteCommit"),
        ]
        await stop(node)

    run(body())


def test_an_aborted_transaction_drops_its_offsets() -> None:
    async def body() -> None:
        node = await start()
        pid = (await node.init()).producer_id
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        assert await node.commit_offset(pid, 0, 7) is ErrorCode.none
        # EndTxn answers once the markers are written: the outcome is visible at once, and
        # the next transaction can start without CONCURRENT_TRANSACTIONS.
        assert await node.end(pid, 0, True) is ErrorCode.none
        assert node.committed() == 7
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        assert await node.commit_offset(pid, 0, 9) is ErrorCode.none
        assert await node.end(pid, 0, False) is ErrorCode.none
        assert (await node.describe()).transaction_state == "CompleteAbort"
        assert node.committed() == 7
        # A new group coordinator reading the same partition agrees.
        await stop(node)
        again = await start(node.partitions, node.clock)
        assert again.committed() == 7
        assert (await again.describe()).transaction_state == "CompleteAbort"
        await stop(again)

    run(body())


def test_a_new_instance_fences_the_zombie_and_aborts_its_transaction() -> None:
    async def body() -> None:
        node = await start()
        zombie = await node.init()
        pid = zombie.producer_id
        assert await node.add(pid, 0, 0) is ErrorCode.none
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        assert await node.commit_offset(pid, 0, 5) is ErrorCode.none
        first = await node.init()
        assert first.error_code is ErrorCode.concurrent_transactions  # aborting the old one
        await node.txn.idle()
        new = await node.init()
        assert (new.error_code, new.producer_id, new.producer_epoch) == (ErrorCode.none, pid, 2)
        assert node.committed() is None  # the zombie's offsets were aborted
        # The zombie can do nothing any more, whatever its client version understands.
        assert await node.end(pid, 0, True) is ErrorCode.producer_fenced
        assert await node.end(pid, 0, True, version=1) is ErrorCode.invalid_producer_epoch
        assert await node.add(pid, 0, 1) is ErrorCode.producer_fenced
        assert await node.commit_offset(pid, 0, 6) is ErrorCode.invalid_producer_epoch
        # The abort marker went out with the fencing epoch.
        markers = [m for request in node.direct.sent for m in request.markers]
        assert {(m.producer_epoch, m.transaction_result) for m in markers} == {(1, False)}
        assert await node.add_offsets(pid, 2) is ErrorCode.none
        assert await node.commit_offset(pid, 2, 8) is ErrorCode.none
        assert await node.end(pid, 2, True) is ErrorCode.none
        await node.txn.idle()
        assert node.committed() == 8
        await stop(node)

    run(body())


def test_a_new_coordinator_resumes_the_markers_of_a_prepared_transaction() -> None:
    async def body() -> None:
        held = asyncio.Event()  # the first coordinator's markers never leave
        node = await start(hold=held, transaction_end_wait_for_markers_ms=10)
        pid = (await node.init()).producer_id
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        assert await node.commit_offset(pid, 0, 11) is ErrorCode.none
        assert await node.end(pid, 0, True) is ErrorCode.none
        # Leadership of __transaction_state moves away: the shard is dropped.
        elsewhere = image(0, txn_leader=2)
        node.txn.on_image(node.current, elsewhere, False)
        await node.txn.wait_applied(elsewhere.offset)
        assert (await node.describe()).error_code is ErrorCode.not_coordinator
        assert node.committed() is None
        await stop(node)
        # It comes back here at a later epoch: loading finds PrepareCommit, and finishes it.
        again = await start(node.partitions, node.clock, epoch=1)
        await again.txn.idle()
        assert again.committed() == 11
        described = await again.describe()
        assert (described.transaction_state, described.producer_epoch) == ("CompleteCommit", 0)
        (marker,) = {m for request in again.direct.sent for m in request.markers}
        assert marker.coordinator_epoch == 1
        await stop(again)

    run(body())


def test_requests_before_loading_and_elsewhere_get_kafkas_errors() -> None:
    async def body() -> None:
        node = await start()
        node.partitions.committing = False
        assert (await node.init()).error_code is ErrorCode.coordinator_not_available
        assert (await node.describe()).error_code is ErrorCode.transactional_id_not_found
        node.partitions.committing = True
        assert (await node.init(timeout_ms=900_001)).error_code is (
            ErrorCode.invalid_transaction_timeout
        )
        assert (await node.init(timeout_ms=0)).error_code is ErrorCode.invalid_transaction_timeout
        assert (await node.init("")).error_code is ErrorCode.invalid_request
        assert await node.add(5, 0, 0) is ErrorCode.invalid_producer_id_mapping
        assert await node.end(5, 0, True) is ErrorCode.invalid_producer_id_mapping
        pid = (await node.init()).producer_id
        assert await node.end(pid, 0, True) is ErrorCode.invalid_txn_state  # nothing open
        module = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
        topics = (
            make(module.AddPartitionsToTxnTopic, {"name": "t", "partitions": (0,)}),
            make(module.AddPartitionsToTxnTopic, {"name": "gone", "partitions": (0,)}),
        )
        answer = await node.call(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            "AddPartitionsToTxnRequest",
            v3_and_below_transactional_id="tx",
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=topics,
        )
        assert [
            (t.name, p.partition_error_code)
            for t in answer.results_by_topic_v3_and_below
            for p in t.results_by_partition
        ] == [
            ("t", ErrorCode.operation_not_attempted),
            ("gone", ErrorCode.unknown_topic_or_partition),
        ]
        await stop(node)
        # Not loaded yet, and not led here.
        loading = TransactionCoordinator(
            NODE,
            node.partitions,  # type: ignore[arg-type]
            ProducerIds(),  # type: ignore[arg-type]
            TransactionCoordinatorConfig(transaction_state_log_num_partitions=PARTITIONS),
            node.clock,
        )
        assert loading.shard_for("tx") is ErrorCode.coordinator_not_available
        loading.on_image(MetadataImage(), image(0, txn_leader=2), False)
        loading.start(image(0, txn_leader=2))
        await loading.wait_applied(image(0, txn_leader=2).offset)
        assert loading.shard_for("tx") is ErrorCode.not_coordinator
        await loading.close()

    run(body())


def test_timed_out_transactions_are_aborted_and_idle_ids_expire() -> None:
    async def body() -> None:
        node = await start(transactional_id_expiration_ms=3_600_000)
        pid = (await node.init(timeout_ms=10_000)).producer_id
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        assert await node.commit_offset(pid, 0, 3) is ErrorCode.none
        node.clock.ms += 10_000
        await node.txn.abort_timed_out()
        assert (await node.describe()).transaction_state == "Ongoing"  # not past it yet
        node.clock.ms += 1
        await node.txn.abort_timed_out()
        await node.txn.idle()
        described = await node.describe()
        assert (described.transaction_state, described.producer_epoch) == ("CompleteAbort", 1)
        assert node.committed() is None
        # The timed-out producer's late TxnOffsetCommit (librdkafka retrying it after a
        # coordinator failover) meets the abort marker's epoch: INVALID_PRODUCER_EPOCH, as
        # Kafka answers, and holds nothing; its EndTxn is fenced by the coordinator.
        assert await node.commit_offset(pid, 0, 4) is ErrorCode.invalid_producer_epoch
        assert node.groups.unstable_offsets("g") == frozenset()
        assert await node.end(pid, 0, False) is ErrorCode.producer_fenced
        assert await node.end(pid, 0, True) is ErrorCode.producer_fenced
        listed = await node.call(ApiKey.LIST_TRANSACTIONS, 1, "ListTransactionsRequest",
                                 state_filters=("CompleteAbort", "Bogus"),
                                 producer_id_filters=(), duration_filter=-1)  # fmt: skip
        assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [
            ("tx", "CompleteAbort")
        ]
        assert listed.unknown_state_filters == ("Bogus",)
        node.clock.ms += 3_600_000 - 1
        await node.txn.expire_transactional_ids()
        assert (await node.describe()).transaction_state == "CompleteAbort"
        node.clock.ms += 1
        await node.txn.expire_transactional_ids()
        assert (await node.describe()).error_code is ErrorCode.transactional_id_not_found
        assert txn_log(node.partitions)[-1] == ("tx", None)  # the tombstone
        await stop(node)
        again = await start(node.partitions, node.clock)
        assert (await again.describe()).error_code is ErrorCode.transactional_id_not_found
        await stop(again)

    run(body())


def test_txn_offset_commit_checks_the_member_and_generation_kip_447() -> None:
    async def body() -> None:
        node = await start()
        pid = (await node.init()).producer_id
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        # No such member in the group (a v3 client names its member and generation).
        assert await node.commit_offset(pid, 0, 1, member_id="m", generation=1) is (
            ErrorCode.unknown_member_id
        )
        assert await node.commit_offset(pid, 0, 1) is ErrorCode.none  # v0-2: no member
        await stop(node)

    run(body())


def test_find_coordinator_creates_the_transaction_log_then_names_its_leader() -> None:
    async def body() -> None:
        node = await start(transaction_state_log_replication_factor=1)
        forwarded: list[Any] = []

        async def forward(sent: Any) -> object:
            forwarded.append(sent)
            raise OSError("no controller in this test")

        current = dataclasses.replace(node.current, topics=TopicsImage())
        apis = GroupApis(node.groups, lambda: current, forward, node.txn)
        module = request_module(ApiKey.FIND_COORDINATOR, 4)
        find = make(module.FindCoordinatorRequest, {"key_type": 1, "coordinator_keys": ("tx",)})
        answer = await ask_group(apis, ApiKey.FIND_COORDINATOR, 4, find, LISTENER, "c")
        assert answer.coordinators[0].error_code is ErrorCode.coordinator_not_available
        await apis._creating[TXN_TOPIC]
        (created,) = forwarded[0].topics
        assert (created.name, created.num_partitions, created.replication_factor) == (
            TXN_TOPIC,
            PARTITIONS,
            1,
        )
        assert {c.name: c.value for c in created.configs} == {
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "min.insync.replicas": "2",
            "segment.bytes": "104857600",
            "unclean.leader.election.enable": "false",
        }
        current = node.current
        answer = await ask_group(apis, ApiKey.FIND_COORDINATOR, 4, find, LISTENER, "c")
        assert [(c.error_code, c.node_id, c.host, c.port) for c in answer.coordinators] == [
            (ErrorCode.none, NODE, "h1", 9092)
        ]
        await apis.close()
        await stop(node)

    run(body())


def test_a_require_stable_offset_fetch_waits_for_the_open_transaction_kip_447() -> None:
    async def body() -> None:
        node = await start()
        pid = (await node.init()).producer_id
        assert await node.add_offsets(pid, 0) is ErrorCode.none
        assert await node.commit_offset(pid, 0, 4) is ErrorCode.none

        async def forward(sent: Any) -> object:
            raise AssertionError("nothing to create")

        apis = GroupApis(node.groups, lambda: node.current, forward, node.txn)
        module = request_module(ApiKey.OFFSET_FETCH, 8)

        async def fetch(stable: bool) -> tuple[ErrorCode, int]:
            group = make(
                module.OffsetFetchRequestGroup,
                {
                    "group_id": "g",
                    "topics": (
                        make(
                            module.OffsetFetchRequestTopics,
                            {"name": "t", "partition_indexes": (0,)},
                        ),
                    ),
                },
            )
            request = make(
                module.OffsetFetchRequest, {"groups": (group,), "require_stable": stable}
            )
            answer = await ask_group(apis, ApiKey.OFFSET_FETCH, 8, request, LISTENER, "c")
            found = answer.groups[0].topics[0].partitions[0]
            return found.error_code, found.committed_offset

        assert await fetch(True) == (ErrorCode.unstable_offset_commit, -1)
        assert await fetch(False) == (ErrorCode.none, -1)
        assert await node.end(pid, 0, True) is ErrorCode.none
        await node.txn.idle()
        assert await fetch(True) == (ErrorCode.none, 4)
        await apis.close()
        await stop(node)

    run(body())


def test_add_partitions_v4_batches_transactions_and_verifies_kip_890() -> None:
    async def body() -> None:
        node = await start()
        pid = (await node.init()).producer_id
        assert await node.add(pid, 0, 0) is ErrorCode.none
        module = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 4)

        def txn(txn_id: str, epoch: int, verify: bool, *partitions: int) -> Any:
            topic = make(module.AddPartitionsToTxnTopic, {"name": "t", "partitions": partitions})
            return make(
                module.AddPartitionsToTxnTransaction,
                {
                    "transactional_id": txn_id,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "verify_only": verify,
                    "topics": (topic,),
                },
            )

        async def ask(*transactions: Any) -> list[tuple[str, int, ErrorCode]]:
            answer = await node.call(
                ApiKey.ADD_PARTITIONS_TO_TXN,
                4,
                "AddPartitionsToTxnRequest",
                transactions=transactions,
            )
            return [
                (result.transactional_id, p.partition_index, p.partition_error_code)
                for result in answer.results_by_transaction
                for topic in result.topic_results
                for p in topic.results_by_partition
            ]

        assert await ask(txn("tx", 0, True, 0, 1), txn("nope", 0, True, 0)) == [
            ("tx", 0, ErrorCode.none),
            ("tx", 1, ErrorCode.invalid_txn_state),
            ("nope", 0, ErrorCode.invalid_producer_id_mapping),
        ]
        assert await ask(txn("tx", 1, True, 0)) == [("tx", 0, ErrorCode.producer_fenced)]
        assert await ask(txn("tx", 0, False, 1)) == [("tx", 1, ErrorCode.none)]
        assert await ask(txn("tx", 0, True, 1)) == [("tx", 1, ErrorCode.none)]
        await stop(node)

    run(body())


def test_the_producer_epochs_an_offsets_partition_keeps_are_bounded(monkeypatch: Any) -> None:
    from broker.group import shard as shard_module
    from broker.group.classic import GroupLimits

    monkeypatch.setattr(shard_module, "MAX_PRODUCER_EPOCHS", 3)
    shard = shard_module.Shard(0, 0, GroupLimits(1, 2, 3, 0), lambda prefix: prefix)
    shard.pending_txn[1] = {}  # producer 1 has offsets pending: never forgotten
    for producer_id in (1, 2, 3, 4, 5):
        shard.note_epoch(producer_id, 7)
    assert list(shard.producer_epochs) == [1, 4, 5]
    assert shard.fenced(1, 6) and not shard.fenced(2, 6)  # 2 was forgotten


# ---- random request sequences against the coordinator --------------------------------------
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["init", "offset", "commit", "abort", "timeout", "move"]),
        st.integers(0, 1),  # which of two producer instances of the id
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STEPS)
@example([("init", 0), ("init", 1), ("offset", 1), ("commit", 0)])  # a zombie's EndTxn
@example([("init", 0), ("offset", 0), ("move", 0), ("commit", 0), ("move", 0)])
def test_random_request_sequences_commit_exactly_the_committed_transactions(
    steps: list[tuple[str, int]],
) -> None:
    """Two instances of one transactional id, timeouts and coordinator moves in any order:
    the group's committed offset is always the one of the last transaction whose EndTxn
    commit was answered NONE, and a coordinator loading the partitions afresh sees the
    state the live one has."""

    async def body() -> None:
        node = await start(transaction_abort_timed_out_transaction_cleanup_interval_ms=10**9)
        epochs: dict[int, tuple[int, int]] = {}  # instance -> (producer id, epoch)
        offered: dict[int, int] = {}  # instance -> offset sent in its open transaction
        expected: int | None = None
        counter, epoch = 0, 0
        for op, instance in steps:
            pid, producer_epoch = epochs.get(instance, (1000, -5))
            if op == "init":
                answer = await node.init()
                while answer.error_code is ErrorCode.concurrent_transactions:
                    await node.txn.idle()
                    answer = await node.init()
                assert answer.error_code is ErrorCode.none
                epochs[instance] = (answer.producer_id, answer.producer_epoch)
                offered.pop(instance, None)
            elif op == "offset":  # as clients do: AddOffsetsToTxn, then TxnOffsetCommit
                counter += 1
                if (
                    await node.add_offsets(pid, producer_epoch) is ErrorCode.none
                    and await node.commit_offset(pid, producer_epoch, counter) is ErrorCode.none
                ):
                    offered[instance] = counter
            elif op in ("commit", "abort"):
                error = await node.end(pid, producer_epoch, op == "commit")
                if error is ErrorCode.none and op == "commit" and instance in offered:
                    expected = offered.pop(instance)
                offered.pop(instance, None)
            elif op == "timeout":
                node.clock.ms += TIMEOUT_MS + 1
                await node.txn.abort_timed_out()
            else:  # the coordinators move: a new leader epoch loads both partitions afresh
                live = await node.describe()
                await stop(node)
                epoch += 1
                node = await start(
                    node.partitions,
                    node.clock,
                    epoch=epoch,
                    transaction_abort_timed_out_transaction_cleanup_interval_ms=10**9,
                )
                await node.txn.idle()
                loaded = await node.describe()
                if live.transaction_state not in ("PrepareCommit", "PrepareAbort"):
                    assert loaded == live
            await node.txn.idle()
            assert node.committed() == expected
        await stop(node)

    run(body())
