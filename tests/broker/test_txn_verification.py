"""KIP-890 part 1 on the partition leader: a producer's first transactional batch on a
partition is appended only once its transaction coordinator (a fake one here, on a real
socket, answering AddPartitionsToTxn v4 verify-only) says the partition is in its open
transaction; a marker that ends the transaction while the coordinator answers wins."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.replica_manager import ReplicaManager
from broker.txn_verification import coordinator_partition, java_string_hash
from log.batch import encode_batch
from log.end_txn_marker import EndTransactionMarker
from log.records import Record
from metadata.image import ClusterImage
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.server import serve_connection
from tests.broker.fakes import broker
from tests.broker.test_replica_manager import ME, TOPIC_A, image, partition, reconcile, run

COORDINATOR = 2
TXN_STATE_ID = uuid.UUID(int=0x75)
FIRST = image(
    5,
    {
        "a": (TOPIC_A, {0: partition(ME, (ME,))}),
        "__transaction_state": (TXN_STATE_ID, {0: partition(COORDINATOR, (COORDINATOR,))}),
    },
)


def test_transactional_ids_hash_to_kafkas_coordinator_partition() -> None:
    """Java's String.hashCode (UTF-16 code units, int overflow) and Kafka's Utils.abs;
    the values are what Java 17 prints for these strings."""
    assert [java_string_hash(s) for s in ("", "a", "hello", "txn-1")] == [
        0,
        97,
        99162322,
        110810510,
    ]
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair: two code units
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert coordinator_partition("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    assert java_string_hash("zz-negative") == -1494505438
    assert coordinator_partition("zz-negative", 50) == 1494505438 % 50


class FakeCoordinator:
    """Answers AddPartitionsToTxn v4 verify-only from a set of (transactional id, topic,
    partition) in open transactions; ``gate`` holds answers back while it is clear."""

    def __init__(self) -> None:
        self.added: set[tuple[str, str, int]] = set()
        self.epochs: dict[str, int] = {}  # a transactional id's epoch, once it was bumped
        self.asked: list[tuple[str, int, int, bool]] = []
        self.versions: list[int] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.server: asyncio.Server | None = None
        self.down = False
        self.questioned = asyncio.Event()  # set by each question

    async def start(self) -> int:
        self.server = await asyncio.start_server(
            lambda r, w: serve_connection(
                r, w, self.handle, {ApiKey.ADD_PARTITIONS_TO_TXN: (4, 5)}
            ),
            "127.0.0.1",
            0,
        )
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the listener; connections still open are closed at their next request."""
        assert self.server is not None
        self.down = True
        self.server.close()
        await self.server.wait_closed()

    async def handle(self, header: wire.RequestHeader, request: Any) -> object | None:
        if self.down:
            return None  # closes the connection
        module: Any = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, header.api_version)
        for txn in request.transactions:
            self.asked.append(
                (txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.verify_only)
            )
            self.versions.append(header.api_version)
            if not txn.verify_only:  # a v5 add (TV2): the partitions join
                for topic in txn.topics:
                    self.added.update(
                        (txn.transactional_id, topic.name, i) for i in topic.partitions
                    )
        self.questioned.set()
        await self.gate.wait()
        results = []
        for txn in request.transactions:
            topics = tuple(
                make(
                    module.AddPartitionsToTxnTopicResult,
                    {
                        "name": topic.name,
                        "results_by_partition": tuple(
                            make(
                                module.AddPartitionsToTxnPartitionResult,
                                {
                                    "partition_index": index,
                                    "partition_error_code": self.answer(txn, topic.name, index),
                                },
                            )
                            for index in topic.partitions
                        ),
                    },
                )
                for topic in txn.topics
            )
            results.append(
                make(
                    module.AddPartitionsToTxnResult,
                    {"transactional_id": txn.transactional_id, "topic_results": topics},
                )
            )
        return make(
            module.AddPartitionsToTxnResponse,
            {
                "throttle_time": timedelta(0),
                "error_code": ErrorCode.none,
                "results_by_transaction": tuple(results),
            },
        )

    def answer(self, txn: Any, topic: str, index: int) -> ErrorCode:
        """A fenced epoch, else whether the partition is in the open transaction."""
        if txn.producer_epoch < self.epochs.get(txn.transactional_id, -1):
            return ErrorCode.producer_fenced
        if (txn.transactional_id, topic, index) in self.added:
            return ErrorCode.none
        return ErrorCode.invalid_txn_state


def txn_batch(sequence: int, value: bytes, epoch: int = 0) -> bytes:
    return encode_batch(
        [Record(None, value, 1_000)],
        producer_id=7,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


def test_a_first_transactional_batch_needs_the_coordinators_word(tmp_path: Path) -> None:
    async def body(replicas: ReplicaManager) -> None:
        coordinator = FakeCoordinator()
        port = await coordinator.start()
        with_coordinator = dataclasses.replace(
            FIRST, offset=6, cluster=ClusterImage({COORDINATOR: broker(COORDINATOR, port)})
        )
        await reconcile(replicas, with_coordinator)
        log = replicas.logs.get_log("a", 0)
        assert log is not None

        async def produce(sequence: int, value: bytes, tid: str | None = "tx") -> ErrorCode:
            result = await replicas.append(
                "a", 0, txn_batch(sequence, value), acks=1, timeout_s=5, transactional_id=tid
            )
            return result.error

        # Not added to the transaction: refused, nothing stored, no hanging transaction.
        assert await produce(0, b"stray") == ErrorCode.invalid_txn_state
        assert log.log_end_offset == 0 and replicas.last_stable_offset_of(("a", 0)) == 0
        assert coordinator.asked == [("tx", 7, 0, True)]
        coordinator.added.add(("tx", "a", 0))
        assert await produce(0, b"first") == ErrorCode.none
        assert await produce(1, b"second") == ErrorCode.none  # open here now: not asked
        assert len(coordinator.asked) == 2
        marker = EndTransactionMarker(True, 0)
        assert (await replicas.write_txn_marker("a", 0, 7, 0, marker, 5)).error == ErrorCode.none
        # A marker that ends the transaction while the coordinator answers wins.
        coordinator.gate.clear()
        coordinator.questioned.clear()
        pending = asyncio.ensure_future(produce(2, b"raced"))
        await coordinator.questioned.wait()
        abort = EndTransactionMarker(False, 0)  # say, the coordinator's timeout abort
        assert (await replicas.write_txn_marker("a", 0, 7, 0, abort, 5)).error == ErrorCode.none
        coordinator.gate.set()
        assert await pending == ErrorCode.invalid_txn_state
        assert log.log_end_offset == 4  # first, second, two markers: not the raced batch
        # The coordinator fenced epoch 0 (a new instance): its PRODUCER_FENCED reaches the
        # producer as INVALID_PRODUCER_EPOCH, Kafka's AddPartitionsToTxnManager's answer.
        coordinator.epochs["tx"] = 1
        assert await produce(2, b"zombie") == ErrorCode.invalid_producer_epoch
        assert log.log_end_offset == 4
        # No coordinator to ask: the producer may retry (NOT_ENOUGH_REPLICAS, as Kafka).
        await coordinator.stop()
        assert await produce(2, b"later") == ErrorCode.not_enough_replicas
        # Without a transactional id in the request nothing is asked (Kafka does the same).
        assert await produce(2, b"unverified", tid=None) == ErrorCode.none

    run(tmp_path, body, FIRST)


def test_a_produce_v12_batch_is_added_by_the_leader_and_the_tv2_marker_fences_the_zombie(
    tmp_path: Path,
) -> None:
    """KIP-890 part 2: a TV2 client sends no AddPartitionsToTxn; the leader asks the
    coordinator to add the partition (AddPartitionsToTxn v5, not verify-only), even with
    verification turned off. The marker of its EndTxn carries the bumped epoch, after which
    a late batch of the old epoch is refused and the new epoch starts from sequence 0."""

    async def body(replicas: ReplicaManager) -> None:
        coordinator = FakeCoordinator()
        port = await coordinator.start()
        replicas.config = dataclasses.replace(
            replicas.config, transaction_partition_verification_enable=False
        )
        with_coordinator = dataclasses.replace(
            FIRST, offset=6, cluster=ClusterImage({COORDINATOR: broker(COORDINATOR, port)})
        )
        await reconcile(replicas, with_coordinator)

        async def produce(sequence: int, value: bytes, epoch: int, add: bool) -> ErrorCode:
            result = await replicas.append(
                "a",
                0,
                txn_batch(sequence, value, epoch),
                acks=1,
                timeout_s=5,
                transactional_id="tx",
                add_to_transaction=add,
            )
            return result.error

        # Verification off and a TV1 produce: nothing asked (the operator's choice).
        assert await produce(0, b"tv1", 0, add=False) == ErrorCode.none
        assert coordinator.asked == []
        commit = EndTransactionMarker(True, 0)
        assert (await replicas.write_txn_marker("a", 0, 7, 0, commit, 5)).error == ErrorCode.none
        # A Produce v12 batch: the leader adds the partition, then appends.
        assert await produce(1, b"tv2", 0, add=True) == ErrorCode.none
        assert (coordinator.asked, coordinator.versions) == ([("tx", 7, 0, False)], [5])
        # The TV2 EndTxn's marker: epoch 1. The zombie's epoch-0 batch is fenced after it.
        bumped = await replicas.write_txn_marker("a", 0, 7, 1, commit, 5, epoch_bumped=True)
        assert bumped.error == ErrorCode.none
        assert await produce(2, b"zombie", 0, add=True) == ErrorCode.invalid_producer_epoch
        assert await produce(0, b"next", 1, add=True) == ErrorCode.none
        assert coordinator.asked[-1] == ("tx", 7, 1, False)
        log = replicas.logs.get_log("a", 0)
        assert log is not None and log.log_end_offset == 5  # tv1, marker, tv2, marker, next
        await coordinator.stop()

    run(tmp_path, body, FIRST)
