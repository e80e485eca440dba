"""Producer state: expiry of silent producers (producer.id.expiration.ms), and transactions:
open transactions and the last stable offset, markers and their fencing, the txnindex
entries aborts make."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.producer_state import ProducerState
from log.batch import BatchHeader, encode_batch, parse_header
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.records import Record
from log.txn_index import AbortedTxn


def header(producer_id: int, sequence: int) -> BatchHeader:
    return parse_header(
        encode_batch(
            [Record(None, b"v", 0)],
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence,
        )
    )


def test_a_silent_producer_expires_and_its_next_batch_is_taken_as_new() -> None:
    state = ProducerState(expiration_ms=1_000)
    state.record(header(7, 0), first_offset=0, now_ms=100_000)
    assert state.check(header(7, 0)).duplicate_of == 0  # remembered: a retry
    state.record(header(8, 0), first_offset=1, now_ms=100_500)  # too soon to look again
    assert len(state) == 2
    state.record(header(8, 1), first_offset=2, now_ms=170_000)  # 7 silent for 70 s
    assert len(state) == 1
    assert state.check(header(7, 0)).append  # forgotten: appended as a new producer's
    assert state.check(header(8, 1)).duplicate_of == 2  # 8 spoke just now: still known


# ---- transactions -----------------------------------------------------------------------


def txn(producer_id: int, sequence: int, epoch: int = 0, count: int = 1) -> BatchHeader:
    return parse_header(
        encode_batch(
            [Record(None, b"v", 0)] * count,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            is_transactional=True,
        )
    )


def marker_header(producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0):
    data = encode_marker_batch(
        producer_id, epoch, EndTransactionMarker(commit, coordinator_epoch), 0
    )
    return parse_header(data), EndTransactionMarker(commit, coordinator_epoch)


def test_the_lso_waits_for_open_transactions_and_for_markers_to_replicate() -> None:
    state = ProducerState()
    assert state.last_stable_offset(0) == 0
    state.record(header(5, 0), 0, 0)  # an idempotent producer: never unstable
    state.record(txn(7, 0), 1, 0)  # 7 opens at 1
    state.record(txn(7, 1), 2, 0)
    state.record(txn(8, 0), 3, 0)  # 8 opens at 3
    assert state.open_transactions == {7: 1, 8: 3}
    assert state.last_stable_offset(4) == 1
    commit, marker = marker_header(7, 0, True)
    assert state.record(commit, 4, 0, marker) is None  # a commit has no index entry
    assert state.open_transactions == {8: 3}
    # 7's marker (offset 4) is not replicated yet: 7 is still unstable.
    assert state.last_stable_offset(4) == 1
    assert state.last_stable_offset(5) == 3  # now only 8 holds it back
    abort, marker = marker_header(8, 0, False)
    entry = state.record(abort, 5, 0, marker)
    assert entry == AbortedTxn(8, 3, 5, 6)  # nothing else open: stable right after it
    assert state.last_stable_offset(5) == 3
    assert state.last_stable_offset(6) == 6 and state.first_unstable_offset is None


def test_an_abort_entry_is_bounded_by_the_next_open_transaction() -> None:
    state = ProducerState()
    state.record(txn(7, 0), 0, 0)
    state.record(txn(8, 0), 1, 0)
    abort, marker = marker_header(7, 0, False)
    assert state.record(abort, 2, 0, marker) == AbortedTxn(7, 0, 2, 1)


def test_producers_inside_a_transaction_must_write_transactionally() -> None:
    state = ProducerState()
    state.record(txn(7, 0), 0, 0)
    assert state.check(header(7, 1)).error == ErrorCode.invalid_txn_state
    assert state.check(txn(7, 1)).append
    commit, marker = marker_header(7, 0, True)
    state.record(commit, 1, 0, marker)
    assert state.check(header(7, 1)).append  # the transaction is over


def test_markers_are_fenced_by_producer_and_coordinator_epochs() -> None:
    state = ProducerState()
    state.record(txn(7, 0, epoch=3), 0, 0)
    commit = EndTransactionMarker(True, 2)
    assert state.check_marker(7, 2, commit).error == ErrorCode.invalid_producer_epoch
    assert state.check_marker(7, 3, commit).append
    # Transaction version 2: the marker carries the next epoch; the batches' one is stale.
    assert state.check_marker(7, 3, commit, epoch_bumped=True).error == (
        ErrorCode.invalid_producer_epoch
    )
    assert state.check_marker(7, 4, commit, epoch_bumped=True).append
    data = encode_marker_batch(7, 4, commit, 0)
    state.record(parse_header(data), 1, 0, commit)
    # A retry of that marker: answered with its offset, not written twice.
    assert state.check_marker(7, 4, commit, epoch_bumped=True).duplicate_of == 1
    # So is a newer coordinator's after a failover (it resends the prepared transaction's
    # markers); an older coordinator's is not.
    newer = EndTransactionMarker(True, 3)
    assert state.check_marker(7, 4, newer, epoch_bumped=True).duplicate_of == 1
    older = EndTransactionMarker(True, 1)
    assert state.check_marker(7, 4, older, epoch_bumped=True).error == (
        ErrorCode.invalid_producer_epoch
    )
    # A different marker at that epoch is no retry: TV1 writes it (Kafka does too).
    assert state.check_marker(7, 4, EndTransactionMarker(False, 2)).append
    # A coordinator of an older epoch is fenced.
    assert state.check_marker(7, 5, EndTransactionMarker(True, 1)).error == (
        ErrorCode.transaction_coordinator_fenced
    )
    # The marker's epoch 4 fenced the producer's epoch 3: its late batches are refused.
    assert state.check(txn(7, 1, epoch=3)).error == ErrorCode.invalid_producer_epoch
    assert state.check(txn(7, 0, epoch=4)).append  # the new epoch starts at sequence 0
    assert state.check(txn(7, 1, epoch=4)).error == ErrorCode.out_of_order_sequence_number


def test_a_producer_with_an_open_transaction_never_expires() -> None:
    state = ProducerState(expiration_ms=1_000)
    state.record(txn(7, 0), 0, now_ms=100_000)
    state.record(header(8, 0), 1, now_ms=200_000)  # 7 silent for 100 s, but inside a txn
    assert state.open_transactions == {7: 0}
    assert state.check(header(7, 1)).error == ErrorCode.invalid_txn_state
