"""The transaction state machine (broker/txn/state.py) and the __transaction_state records.

The transition table is Kafka's: hypothesis drives random request sequences of several
producers sharing one transactional id through the decision functions, and checks what the
coordinator relies on: every move is one the table allows, an epoch never goes back, a fenced
producer can neither add to, end, nor re-initialise over a newer instance, and a transaction's
partitions exist exactly while it is open or ending.
"""

from __future__ import annotations

import contextlib
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.txn import state
from broker.txn.records import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker.txn.state import (
    MAX_EPOCH,
    VALID_PREVIOUS,
    Fence,
    IllegalTransition,
    TxnMetadata,
    TxnState,
)
from log.errors import CorruptRecordError

NOW = 1_000_000
TIMEOUT = 60_000


def fresh(producer_id: int = 7) -> TxnMetadata:
    return state.new_transactional_id("tx", producer_id, TIMEOUT, NOW)


def initialised(producer_id: int = 7) -> TxnMetadata:
    meta = state.init_producer_id(fresh(producer_id), TIMEOUT, None, NOW)
    assert isinstance(meta, TxnMetadata)
    return meta


@given(st.sampled_from(list(TxnState)), st.sampled_from(list(TxnState)))
def test_transit_allows_exactly_kafkas_table(source: TxnState, target: TxnState) -> None:
    meta = TxnMetadata("tx", 1, 0, TIMEOUT, source, frozenset(), -1, NOW)
    if source in VALID_PREVIOUS[target]:
        assert state.transit(meta, target, NOW + 1).state is target
    else:
        with pytest.raises(IllegalTransition):
            state.transit(meta, target, NOW + 1)


def test_the_state_ids_are_kafkas() -> None:
    # TransactionState's ids, as the TransactionLogValue status byte holds them.
    assert [(s.value, s.id) for s in TxnState] == [
        ("Empty", 0),
        ("Ongoing", 1),
        ("PrepareCommit", 2),
        ("PrepareAbort", 3),
        ("CompleteCommit", 4),
        ("CompleteAbort", 5),
        ("Dead", 6),
        ("PrepareEpochFence", 7),
    ]


def test_a_transaction_commits_and_the_next_one_starts_from_complete_commit() -> None:
    meta = initialised()
    assert (meta.producer_epoch, meta.state) == (0, TxnState.EMPTY)
    ongoing = state.add_partitions(meta, 7, 0, frozenset({("t", 0)}), NOW + 1)
    assert isinstance(ongoing, TxnMetadata)
    assert (ongoing.state, ongoing.start_ms, ongoing.partitions) == (
        TxnState.ONGOING,
        NOW + 1,
        frozenset({("t", 0)}),
    )
    more = state.add_partitions(ongoing, 7, 0, frozenset({("t", 1)}), NOW + 2)
    assert isinstance(more, TxnMetadata) and more.start_ms == NOW + 1
    assert state.add_partitions(more, 7, 0, frozenset({("t", 1)}), NOW + 3) is more
    prepared = state.end_transaction(more, 7, 0, True, NOW + 4)
    assert isinstance(prepared, TxnMetadata) and prepared.state is TxnState.PREPARE_COMMIT
    # While the markers go out: retries wait, the other outcome is refused.
    assert state.end_transaction(prepared, 7, 0, True, NOW) is ErrorCode.concurrent_transactions
    assert state.end_transaction(prepared, 7, 0, False, NOW) is ErrorCode.invalid_txn_state
    assert state.add_partitions(prepared, 7, 0, frozenset({("t", 2)}), NOW) is (
        ErrorCode.concurrent_transactions
    )
    done = state.complete(prepared, NOW + 5)
    assert (done.state, done.partitions) == (TxnState.COMPLETE_COMMIT, frozenset())
    assert state.end_transaction(done, 7, 0, True, NOW) is ErrorCode.none  # a retry
    assert state.end_transaction(done, 7, 0, False, NOW) is ErrorCode.invalid_txn_state
    following = state.add_partitions(done, 7, 0, frozenset({("t", 2)}), NOW + 6)
    assert isinstance(following, TxnMetadata)
    assert (following.partitions, following.start_ms) == (frozenset({("t", 2)}), NOW + 6)


def test_a_new_instance_fences_an_ongoing_transaction_and_gets_its_epoch_after_the_abort() -> None:
    ongoing = state.add_partitions(initialised(), 7, 0, frozenset({("t", 0)}), NOW)
    assert isinstance(ongoing, TxnMetadata)
    decision = state.init_producer_id(ongoing, TIMEOUT, None, NOW + 1)
    assert isinstance(decision, Fence)
    assert (decision.fenced.state, decision.fenced.producer_epoch) == (
        TxnState.PREPARE_EPOCH_FENCE,
        1,
    )
    aborting = state.abort_fenced(decision.fenced, NOW + 1)
    assert (aborting.state, aborting.producer_epoch) == (TxnState.PREPARE_ABORT, 1)
    # The zombie (epoch 0) can do nothing more; the new instance waits for the abort.
    assert state.end_transaction(aborting, 7, 0, True, NOW) is ErrorCode.producer_fenced
    assert state.add_partitions(aborting, 7, 0, frozenset(), NOW) is ErrorCode.producer_fenced
    assert state.init_producer_id(aborting, TIMEOUT, None, NOW) is (
        ErrorCode.concurrent_transactions
    )
    new = state.init_producer_id(state.complete(aborting, NOW + 2), TIMEOUT, None, NOW + 3)
    assert isinstance(new, TxnMetadata)
    assert (new.producer_id, new.producer_epoch, new.state) == (7, 2, TxnState.EMPTY)


def test_kip_360_reinitialisation_bumps_once_and_a_retry_gets_the_same_answer() -> None:
    meta = initialised()  # epoch 0
    bumped = state.init_producer_id(meta, TIMEOUT, (7, 0), NOW)
    assert isinstance(bumped, TxnMetadata)
    assert (bumped.producer_epoch, bumped.last_producer_epoch) == (1, 0)
    again = state.init_producer_id(bumped, TIMEOUT, (7, 0), NOW)  # the answer was lost
    assert isinstance(again, TxnMetadata) and again.producer_epoch == 1
    assert state.init_producer_id(bumped, TIMEOUT, (8, 1), NOW) is ErrorCode.producer_fenced
    assert state.init_producer_id(bumped, TIMEOUT, (7, 5), NOW) is ErrorCode.producer_fenced


def test_an_exhausted_epoch_rotates_to_a_new_producer_id() -> None:
    worn = TxnMetadata(
        "tx", 7, MAX_EPOCH - 1, TIMEOUT, TxnState.COMPLETE_COMMIT, frozenset(), 5, NOW
    )
    assert state.needs_new_producer_id(worn, None)
    rotated = state.init_producer_id(worn, TIMEOUT, None, NOW, new_producer_id=99)
    assert isinstance(rotated, TxnMetadata)
    assert (rotated.producer_id, rotated.producer_epoch, rotated.previous_producer_id) == (
        99,
        0,
        7,
    )
    assert not state.needs_new_producer_id(initialised(), None)


def test_timeouts_and_expiry() -> None:
    ongoing = state.add_partitions(initialised(), 7, 0, frozenset({("t", 0)}), NOW)
    assert isinstance(ongoing, TxnMetadata)
    assert not state.timed_out(ongoing, NOW + TIMEOUT)
    assert state.timed_out(ongoing, NOW + TIMEOUT + 1)
    assert not state.expired(ongoing, NOW + 10**12, 1000)  # open: never expires
    done = state.complete(state.abort_fenced(state.fence(ongoing, NOW), NOW), NOW + 5)
    assert not state.expired(done, NOW + 1004, 1000)
    assert state.expired(done, NOW + 1005, 1000)


# ---- random request sequences ----------------------------------------------------------------
OPS = st.lists(
    st.tuples(
        st.sampled_from(["init", "add", "commit", "abort", "complete", "timeout"]),
        st.integers(0, 2),  # which producer instance asks (each knows its own epoch)
        st.integers(0, 3),  # a partition
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_random_request_sequences_keep_the_coordinators_invariants(
    ops: list[tuple[str, int, int]],
) -> None:
    meta = fresh()
    instances: dict[int, int] = {}  # instance -> the epoch its InitProducerId returned
    now = NOW
    for op, instance, partition in ops:
        now += 1
        before = meta
        epoch = instances.get(instance, -2)
        if op == "init":
            decision = state.init_producer_id(meta, TIMEOUT, None, now)
            if isinstance(decision, Fence):
                meta = state.abort_fenced(decision.fenced, now)
            elif isinstance(decision, TxnMetadata):
                meta = decision
                instances[instance] = meta.producer_epoch
        elif op == "add":
            decision = state.add_partitions(meta, 7, epoch, frozenset({("t", partition)}), now)
            if isinstance(decision, TxnMetadata):
                meta = decision
        elif op in ("commit", "abort"):
            decision = state.end_transaction(meta, 7, epoch, op == "commit", now)
            if isinstance(decision, TxnMetadata):
                meta = decision
        elif op == "complete" and meta.state in state.PREPARED:
            meta = state.complete(meta, now)
        elif op == "timeout" and state.timed_out(meta, now + TIMEOUT):
            meta = state.abort_fenced(state.fence(meta, now), now)
        assert meta.producer_epoch >= before.producer_epoch
        if meta is not before and meta.state is not before.state:
            assert before.state in VALID_PREVIOUS[meta.state]
        # Only the latest instance's epoch may change anything but an init.
        if op in ("add", "commit", "abort") and epoch != before.producer_epoch:
            assert meta is before
        opened = meta.state in (TxnState.ONGOING, *state.PREPARED)
        assert bool(meta.partitions) == opened
        value = decode_value(encode_value(meta.to_value()))
        # Kafka's version 0 value holds all but the last epoch (in memory only).
        assert TxnMetadata.from_value("tx", value) == replace(meta, last_producer_epoch=-1)


# ---- records ---------------------------------------------------------------------------------
def test_records_are_kafkas_version_0_bytes() -> None:
    assert encode_key("tx") == b"\x00\x00\x00\x02tx"
    assert decode_key(b"\x00\x00\x00\x02tx") == "tx"
    assert decode_key(b"\x00\x01\x00\x02tx") is None
    value = TxnLogValue(5, 3, 60_000, TxnState.ONGOING.id, (("t", (0, 2)),), 1234, 1000)
    expected = (
        struct.pack(">hqhib", 0, 5, 3, 60_000, 1)
        + struct.pack(">i", 1)
        + struct.pack(">h", 1)
        + b"t"
        + struct.pack(">iii", 2, 0, 2)
        + struct.pack(">qq", 1234, 1000)
    )
    assert encode_value(value) == expected
    assert decode_value(expected) == value
    empty = TxnLogValue(5, 4, 60_000, TxnState.EMPTY.id, (), 1234, -1)
    assert encode_value(empty)[17:21] == struct.pack(">i", -1)  # Kafka writes null
    assert decode_value(encode_value(empty)) == empty


def test_a_flexible_version_1_value_is_read_with_its_tagged_fields() -> None:
    data = (
        struct.pack(">hqhib", 1, 5, 3, 60_000, 2)
        + bytes([2])  # one partitions entry (compact: n + 1)
        + bytes([2])
        + b"t"
        + bytes([2])
        + struct.pack(">i", 4)
        + bytes([0])  # the entry's tagged fields
        + struct.pack(">qq", 1234, 1000)
        + bytes([2])  # two tagged fields
        + bytes([0, 8])
        + struct.pack(">q", 4)  # PreviousProducerId
        + bytes([2, 2])
        + struct.pack(">h", 2)  # ClientTransactionVersion
    )
    value = decode_value(data)
    assert value == TxnLogValue(
        5,
        3,
        60_000,
        TxnState.PREPARE_COMMIT.id,
        (("t", (4,)),),
        1234,
        1000,
        previous_producer_id=4,
        client_transaction_version=2,
    )


@given(st.binary(max_size=64))
def test_unreadable_values_are_corrupt_record_errors(data: bytes) -> None:
    """Any other exception (IndexError, struct.error) fails the test."""
    with contextlib.suppress(CorruptRecordError):
        decode_value(data)
