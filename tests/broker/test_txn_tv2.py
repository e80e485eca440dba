"""Transaction version 2 (KIP-890 part 2): the coordinator's state machine and its requests.

With TV2 every EndTxn (v5) bumps the producer epoch in PrepareCommit/PrepareAbort, the
markers carry the bumped epoch, and the client is answered the producer id and epoch it
continues with; a producer still holding the pre-bump epoch (a zombie) is refused by the
coordinator and, once a marker reached a partition, by the partition too. The epoch's last
value moves the client to a new producer id. Clients of older EndTxn versions keep TV1.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.group.coordinator import OFFSETS_TOPIC
from broker.producer_state import ProducerState
from broker.txn import state
from broker.txn.apis import TxnApis
from broker.txn.records import decode_value, encode_value
from broker.txn.state import MAX_EPOCH, TV2, Ended, TxnMetadata, TxnState
from log.batch import encode_batch, parse_header
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.records import Record
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.broker.test_txn_coordinator import Node, run, start, stop

NOW = 1_000_000
TIMEOUT = 60_000
T0 = frozenset({("t", 0)})


def initialised(producer_id: int = 7) -> TxnMetadata:
    meta = state.init_producer_id(
        state.new_transactional_id("tx", producer_id, TIMEOUT, NOW), TIMEOUT, None, NOW
    )
    assert isinstance(meta, TxnMetadata)
    return meta


def ongoing(meta: TxnMetadata, epoch: int | None = None) -> TxnMetadata:
    added = state.add_partitions(
        meta, meta.producer_id, meta.producer_epoch if epoch is None else epoch, T0, NOW, TV2
    )
    assert isinstance(added, TxnMetadata), added
    return added


def end(meta: TxnMetadata, commit: bool, epoch: int | None = None, **kw: Any) -> Any:
    return state.end_transaction_v2(
        meta,
        meta.producer_id,
        meta.producer_epoch if epoch is None else epoch,
        commit,
        NOW,
        **kw,
    )


# ---- the state machine -------------------------------------------------------------------------
def test_every_end_bumps_the_epoch_and_the_old_epoch_is_fenced() -> None:
    meta = initialised()
    assert meta.producer_epoch == 0
    for number, commit in enumerate([True, False, True], start=1):
        before = meta.producer_epoch
        prepared = end(ongoing(meta), commit)
        assert isinstance(prepared, TxnMetadata)
        assert prepared.state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT)
        assert (prepared.producer_epoch, prepared.last_producer_epoch) == (before + 1, before)
        assert prepared.partitions == T0  # the markers go out with the bumped epoch
        meta = state.complete(prepared, NOW)
        assert (meta.producer_id, meta.producer_epoch) == (7, number)
        # The zombie (the pre-bump epoch) can neither add nor end, nor reuse the retry path.
        assert state.add_partitions(meta, 7, before, T0, NOW, TV2) is ErrorCode.producer_fenced
        assert end(meta, not commit, epoch=before) is ErrorCode.invalid_txn_state
        assert end(meta, commit, epoch=before - 1) is ErrorCode.producer_fenced


def test_a_retried_end_is_answered_with_the_bumped_epoch_not_reapplied() -> None:
    prepared = end(ongoing(initialised()), True)
    assert isinstance(prepared, TxnMetadata)
    # While the markers are out, the retry (old epoch) waits; an abort retry is wrong.
    assert end(prepared, True, epoch=0) is ErrorCode.concurrent_transactions
    assert end(prepared, False, epoch=0) is ErrorCode.invalid_txn_state
    done = state.complete(prepared, NOW)
    retry = end(done, True, epoch=0)
    assert isinstance(retry, Ended) and retry.meta.producer_epoch == 1
    # The same epoch again is the next transaction's EndTxn: nothing to commit.
    assert end(done, True) is ErrorCode.invalid_txn_state


def test_tv2_may_abort_a_transaction_that_added_nothing_and_still_bumps() -> None:
    meta = initialised()
    aborted = end(meta, False)
    assert isinstance(aborted, TxnMetadata)
    assert (aborted.state, aborted.producer_epoch, aborted.partitions) == (
        TxnState.PREPARE_ABORT,
        1,
        frozenset(),
    )
    # TV1 refuses it (no transaction to end), as before.
    assert state.end_transaction(meta, 7, 0, False, NOW) is ErrorCode.invalid_txn_state


def test_tv1_end_keeps_the_epoch() -> None:
    meta = ongoing(initialised())
    prepared = state.end_transaction(meta, 7, 0, True, NOW)
    assert isinstance(prepared, TxnMetadata) and prepared.producer_epoch == 0


def test_the_last_epoch_moves_the_client_to_a_new_producer_id() -> None:
    meta = TxnMetadata("tx", 7, MAX_EPOCH - 1, TIMEOUT, TxnState.EMPTY, frozenset(), -1, NOW)
    assert state.needs_rotation_at_end(meta)
    prepared = end(ongoing(meta), True, next_producer_id=99)
    assert isinstance(prepared, TxnMetadata)
    # The markers use the last epoch of the old id; the client continues as id 99 epoch 0.
    assert (prepared.producer_id, prepared.producer_epoch, prepared.next_producer_id) == (
        7,
        MAX_EPOCH,
        99,
    )
    done = state.complete(prepared, NOW)
    assert (done.producer_id, done.producer_epoch, done.previous_producer_id) == (99, 0, 7)
    assert done.next_producer_id == state.NO_PRODUCER_ID
    # A retry from the old id at its last client epoch gets the new identity again.
    retry = state.end_transaction_v2(done, 7, MAX_EPOCH - 1, True, NOW)
    assert isinstance(retry, Ended) and (retry.meta.producer_id, retry.meta.producer_epoch) == (
        99,
        0,
    )
    # Any other epoch of the old id is an unknown mapping (Kafka's answer).
    assert state.end_transaction_v2(done, 7, MAX_EPOCH - 2, True, NOW) is (
        ErrorCode.invalid_producer_id_mapping
    )
    # The survivor of a coordinator failover: the prepared state, next id included, is
    # what the version 1 value holds.
    again = TxnMetadata.from_value("tx", decode_value(encode_value(prepared.to_value())))
    assert again == replace(prepared, last_producer_epoch=-1)
    assert encode_value(prepared.to_value())[:2] == b"\x00\x01"  # version 1, as Kafka 4


# ---- the coordinator and its requests ----------------------------------------------------------
async def end_v(node: Node, pid: int, epoch: int, commit: bool, version: int) -> Any:
    return await node.call(
        ApiKey.END_TXN,
        version,
        "EndTxnRequest",
        transactional_id="tx",
        producer_id=pid,
        producer_epoch=epoch,
        committed=commit,
    )


async def implicit_add(node: Node, pid: int, epoch: int, partition: int) -> ErrorCode:
    """What a partition leader sends for a Produce v12: AddPartitionsToTxn v5, not
    verify-only."""
    module = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 5)
    topic = make(module.AddPartitionsToTxnTopic, {"name": "t", "partitions": (partition,)})
    txn = make(
        module.AddPartitionsToTxnTransaction,
        {
            "transactional_id": "tx",
            "producer_id": pid,
            "producer_epoch": epoch,
            "verify_only": False,
            "topics": (topic,),
        },
    )
    answer = await node.call(
        ApiKey.ADD_PARTITIONS_TO_TXN, 5, "AddPartitionsToTxnRequest", transactions=(txn,)
    )
    (code,) = {
        p.partition_error_code
        for r in answer.results_by_transaction
        for t in r.topic_results
        for p in t.results_by_partition
    }
    return ErrorCode(code)


def batch(pid: int, epoch: int, sequence: int) -> Any:
    return parse_header(
        encode_batch(
            [Record(None, b"v", 0)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
            is_transactional=True,
        )
    )


def test_end_txn_v5_bumps_the_epoch_the_markers_carry_it_and_fence_the_zombie() -> None:
    async def body() -> None:
        node = await start()
        pid = (await node.init()).producer_id
        partition = ProducerState()  # partition t-0's producer state
        partition.record(batch(pid, 0, 0), 0, 0)  # the transaction's batch at epoch 0
        assert await implicit_add(node, pid, 0, 0) is ErrorCode.none
        assert (await node.describe()).topics[0].topic == "t"
        answer = await end_v(node, pid, 0, True, 5)
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (
            ErrorCode.none,
            pid,
            1,
        )
        await node.txn.idle()
        (marker,) = [m for request in node.direct.sent for m in request.markers]
        assert (marker.producer_epoch, marker.transaction_version, marker.transaction_result) == (
            1,
            2,
            True,
        )
        # The partition applies that marker as WriteTxnMarkers does (TV2: a newer epoch)...
        commit = EndTransactionMarker(True, marker.coordinator_epoch)
        verdict = partition.check_marker(pid, 1, commit, epoch_bumped=True)
        assert verdict.append
        partition.record(parse_header(encode_marker_batch(pid, 1, commit, 0)), 1, 0, commit)
        # ... after which the zombie's late batch at epoch 0 is refused there, and at the
        # coordinator its late implicit add and its EndTxn are refused too.
        assert partition.check(batch(pid, 0, 1)).error is ErrorCode.invalid_producer_epoch
        assert await implicit_add(node, pid, 0, 1) is ErrorCode.producer_fenced
        assert (await end_v(node, pid, 0, False, 5)).error_code is ErrorCode.invalid_txn_state
        # A retry of the lost EndTxn answer gets the same new epoch.
        retry = await end_v(node, pid, 0, True, 5)
        assert (retry.error_code, retry.producer_epoch) == (ErrorCode.none, 1)
        # The live producer continues at epoch 1 from sequence 0; its abort bumps again.
        assert partition.check(batch(pid, 1, 0)).append
        assert await implicit_add(node, pid, 1, 0) is ErrorCode.none
        aborted = await end_v(node, pid, 1, False, 5)
        assert (aborted.error_code, aborted.producer_epoch) == (ErrorCode.none, 2)
        await node.txn.idle()
        described = await node.describe()
        assert (described.transaction_state, described.producer_epoch) == ("CompleteAbort", 2)
        await stop(node)

    run(body())


def test_an_older_end_txn_keeps_tv1_no_bump_and_tv1_markers() -> None:
    async def body() -> None:
        node = await start()
        pid = (await node.init()).producer_id
        assert await node.add(pid, 0, 0) is ErrorCode.none
        answer = await end_v(node, pid, 0, True, 4)
        assert answer.error_code is ErrorCode.none
        await node.txn.idle()
        (marker,) = [m for request in node.direct.sent for m in request.markers]
        assert (marker.producer_epoch, marker.transaction_version) == (0, 0)
        # The same epoch goes on: the next transaction needs AddPartitionsToTxn again.
        assert await node.add(pid, 0, 1) is ErrorCode.none
        assert (await node.describe()).producer_epoch == 0
        await stop(node)

    run(body())


def test_the_exhausted_epoch_answers_a_new_producer_id() -> None:
    async def body() -> None:
        node = await start()
        pid = (await node.init()).producer_id
        shard = node.txn.shard_for("tx")
        assert not isinstance(shard, ErrorCode)
        shard.txns["tx"] = TxnMetadata(
            "tx", pid, MAX_EPOCH - 1, TIMEOUT, TxnState.EMPTY, frozenset(), -1, NOW
        )
        assert await implicit_add(node, pid, MAX_EPOCH - 1, 0) is ErrorCode.none
        answer = await end_v(node, pid, MAX_EPOCH - 1, True, 5)
        assert answer.error_code is ErrorCode.none
        assert answer.producer_id not in (pid, -1) and answer.producer_epoch == 0
        await node.txn.idle()
        (marker,) = [m for request in node.direct.sent for m in request.markers]
        assert (marker.producer_id, marker.producer_epoch) == (pid, MAX_EPOCH)
        described = await node.describe()
        assert (described.producer_id, described.producer_epoch) == (answer.producer_id, 0)
        await stop(node)

    run(body())


def test_txn_offset_commit_v5_adds_the_offsets_partition_itself() -> None:
    """A TV2 client sends no AddOffsetsToTxn: TxnOffsetCommit v5 has the group coordinator
    add the group's offsets partition first, so the commit marker reaches the offsets."""

    async def body() -> None:
        node = await start()
        asked: list[tuple[str, int, int, str, int]] = []

        async def add(txn_id: str, pid: int, epoch: int, topic: str, index: int) -> ErrorCode:
            asked.append((txn_id, pid, epoch, topic, index))
            return await node.txn.add_partitions(
                txn_id, pid, epoch, frozenset({(topic, index)}), TV2
            )

        node.apis = TxnApis(node.txn, node.groups, lambda: node.current, node.clock, add)
        pid = (await node.init()).producer_id

        async def commit_offset(epoch: int, offset: int) -> ErrorCode:
            module = request_module(ApiKey.TXN_OFFSET_COMMIT, 5)
            partition = make(
                module.TxnOffsetCommitRequestPartition,
                {
                    "partition_index": 0,
                    "committed_offset": offset,
                    "committed_leader_epoch": -1,
                    "committed_metadata": "",
                },
            )
            topic = make(
                module.TxnOffsetCommitRequestTopic, {"name": "t", "partitions": (partition,)}
            )
            answer = await node.call(
                ApiKey.TXN_OFFSET_COMMIT,
                5,
                "TxnOffsetCommitRequest",
                transactional_id="tx",
                group_id="g",
                producer_id=pid,
                producer_epoch=epoch,
                generation_id=-1,
                member_id="",
                group_instance_id=None,
                topics=(topic,),
            )
            return ErrorCode(answer.topics[0].partitions[0].error_code)

        assert await commit_offset(0, 5) is ErrorCode.none
        offsets_partition = node.groups.partition_of("g", node.current)
        assert asked == [("tx", pid, 0, OFFSETS_TOPIC, offsets_partition)]
        assert (await end_v(node, pid, 0, True, 5)).producer_epoch == 1
        await node.txn.idle()
        assert node.committed() == 5
        # The zombie's epoch is refused by the add, before any offset is held.
        assert await commit_offset(0, 9) is ErrorCode.invalid_producer_epoch
        assert node.committed() == 5
        await stop(node)

    run(body())
