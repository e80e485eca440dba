"""One transactional id's state and the decisions on it (Kafka's TransactionMetadata), sans-I/O.

A ``TxnMetadata`` is immutable. Each request is decided by a pure function here from the
current metadata: either a Kafka error code for the client, or the metadata to become (the
coordinator writes it to ``__transaction_state`` with acks=all and only then makes it
current, so memory never runs ahead of what a new coordinator would load). Every change goes
through ``transit``, which refuses a move the transition table does not allow: a bug in a
decision fails loudly instead of persisting a state Kafka's own coordinator could not read.

The states and their ids are Kafka's (the id is the TransactionLogValue's status byte):

    Empty -> Ongoing (AddPartitionsToTxn/AddOffsetsToTxn) -> PrepareCommit | PrepareAbort
    (EndTxn; written before the client is answered) -> CompleteCommit | CompleteAbort (once
    every partition has its marker) -> Ongoing (next transaction) | Empty (InitProducerId)
    | Dead (transactional.id.expiration.ms).

PrepareEpochFence is never written: an Ongoing transaction that must end without its
producer (InitProducerId of a new instance, or transaction.timeout.ms passed) first bumps the
epoch in PrepareEpochFence, then becomes PrepareAbort with that epoch, which fences the old
producer at the coordinator and, through the markers, at every partition.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.txn.records import TxnLogValue

MAX_EPOCH = 2**15 - 1  # Short.MaxValue
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    """Kafka's TransactionState: the value is its name in DescribeTransactions/ListTransactions."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        return _IDS[self]

    @classmethod
    def from_id(cls, status: int) -> TxnState | None:
        return _BY_ID.get(status)


_IDS = {state: index for index, state in enumerate(TxnState)}  # Kafka's ids 0-7, in order
_BY_ID = {index: state for state, index in _IDS.items()}

# Kafka's TransactionState.validPreviousStates: a state may be entered only from these.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset(
        {TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}
# Where the next transaction may start, and where the id may expire or be re-initialised.
ENDED = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


class IllegalTransition(AssertionError):
    """A decision tried a move the transition table forbids: a coordinator bug."""


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """What ``__transaction_state`` holds for one transactional id."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int  # when the current transaction began (-1: none)
    update_ms: int
    # The epoch before the last bump, so a client retrying an InitProducerId whose answer
    # it lost is given the same answer again (KIP-360).
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID

    @property
    def epoch_exhausted(self) -> bool:
        """Kafka leaves room for one fencing bump: a new producer id is due at MAX-1."""
        return self.producer_epoch >= MAX_EPOCH - 1

    def to_value(self) -> TxnLogValue:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state.id,
            tuple((topic, tuple(parts)) for topic, parts in by_topic.items()),
            self.update_ms,
            self.start_ms,
            self.previous_producer_id,
        )

    @classmethod
    def from_value(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata | None:
        """The loaded metadata; None for a status byte Kafka does not define."""
        state = TxnState.from_id(value.status)
        if state is None:
            return None
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.timeout_ms,
            state,
            frozenset((topic, p) for topic, parts in value.partitions for p in parts),
            value.start_ms,
            value.last_update_ms,
            previous_producer_id=value.previous_producer_id,
        )


def transit(meta: TxnMetadata, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
    """``meta`` moved to ``state`` at ``now_ms`` (with ``changes``), if the table allows it."""
    if meta.state not in VALID_PREVIOUS[state]:
        raise IllegalTransition(
            f"transactional id {meta.transactional_id}: {meta.state.value} -> {state.value}"
        )
    return replace(meta, state=state, update_ms=now_ms, **changes)  # type: ignore[arg-type]


def new_transactional_id(
    transactional_id: str, producer_id: int, timeout_ms: int, now_ms: int
) -> TxnMetadata:
    """A transactional id seen for the first time: Empty, before its first epoch (the
    InitProducerId that creates it bumps the epoch to 0)."""
    return TxnMetadata(
        transactional_id,
        producer_id,
        NO_PRODUCER_EPOCH,
        timeout_ms,
        TxnState.EMPTY,
        frozenset(),
        -1,
        now_ms,
    )


# ---- InitProducerId --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Fence:
    """InitProducerId found an Ongoing transaction: abort it under this fenced metadata
    (PrepareEpochFence, epoch bumped) and answer CONCURRENT_TRANSACTIONS; the client retries
    and gets its epoch once the abort is complete."""

    fenced: TxnMetadata


def needs_new_producer_id(meta: TxnMetadata, expected_epoch: int | None) -> bool:
    """Whether InitProducerId rotates to a new producer id: the epoch is exhausted (and a
    KIP-360 caller, if any, holds the current epoch)."""
    return (
        meta.state in ENDED
        and meta.epoch_exhausted
        and (expected_epoch is None or expected_epoch == meta.producer_epoch)
    )


def init_producer_id(
    meta: TxnMetadata,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    now_ms: int,
    new_producer_id: int | None = None,
) -> ErrorCode | Fence | TxnMetadata:
    """Kafka's prepareInitProducerIdTransit. ``expected`` is the (producer id, epoch) a
    KIP-360 client sends when it re-initialises itself; ``new_producer_id`` is given when
    ``needs_new_producer_id`` said so."""
    if expected is not None and not _known_producer(meta, *expected):
        return ErrorCode.producer_fenced
    state = meta.state
    if state in PREPARED or state in (TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE):
        return ErrorCode.concurrent_transactions
    if state is TxnState.ONGOING:
        return Fence(fence(meta, now_ms))
    expected_epoch = None if expected is None else expected[1]
    if new_producer_id is not None:
        # Kafka's prepareProducerIdRotation.
        return transit(
            meta,
            TxnState.EMPTY,
            now_ms,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=meta.producer_epoch if expected is not None else -1,
            previous_producer_id=meta.producer_id,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
        )
    assert not meta.epoch_exhausted, "needs_new_producer_id decides rotation first"
    bumped = meta.producer_epoch + 1
    if expected_epoch is None:
        epoch, last = bumped, NO_PRODUCER_EPOCH
    elif expected_epoch in (NO_PRODUCER_EPOCH, meta.producer_epoch):
        epoch, last = bumped, meta.producer_epoch
    elif expected_epoch == meta.last_producer_epoch:
        epoch, last = meta.producer_epoch, meta.last_producer_epoch  # a retry: same answer
    else:
        return ErrorCode.producer_fenced
    return transit(
        meta,
        TxnState.EMPTY,
        now_ms,
        producer_epoch=epoch,
        last_producer_epoch=last,
        timeout_ms=timeout_ms,
        partitions=frozenset(),
        start_ms=-1,
    )


def _known_producer(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
    """Kafka's isValidProducerId for a KIP-360 InitProducerId."""
    if producer_id == meta.producer_id:
        return epoch in (meta.producer_epoch, meta.last_producer_epoch)
    return producer_id == meta.previous_producer_id and epoch == meta.last_producer_epoch


def fence(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Kafka's prepareFenceProducerEpoch: bump the epoch (not past the maximum) of an Ongoing
    transaction that is to be aborted without its producer."""
    epoch = min(meta.producer_epoch + 1, MAX_EPOCH)
    return transit(
        meta,
        TxnState.PREPARE_EPOCH_FENCE,
        now_ms,
        producer_epoch=epoch,
        last_producer_epoch=NO_PRODUCER_EPOCH,
    )


# ---- AddPartitionsToTxn, AddOffsetsToTxn -----------------------------------------------------
def _check_producer(meta: TxnMetadata | None, producer_id: int, epoch: int) -> ErrorCode:
    if meta is None or meta.producer_id != producer_id or meta.state is TxnState.DEAD:
        return ErrorCode.invalid_producer_id_mapping
    if epoch != meta.producer_epoch:
        return ErrorCode.producer_fenced
    return ErrorCode.none


def add_partitions(
    meta: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: frozenset[TopicPartition],
    now_ms: int,
) -> ErrorCode | TxnMetadata:
    """The metadata with ``partitions`` in its transaction, Ongoing (``meta`` itself when
    they already are: nothing to write)."""
    error = _check_producer(meta, producer_id, epoch)
    if error is not ErrorCode.none:
        return error
    assert meta is not None
    if meta.state in PREPARED or meta.state is TxnState.PREPARE_EPOCH_FENCE:
        return ErrorCode.concurrent_transactions
    if meta.state is TxnState.ONGOING and partitions <= meta.partitions:
        return meta
    ongoing = meta.state is TxnState.ONGOING
    return transit(
        meta,
        TxnState.ONGOING,
        now_ms,
        partitions=meta.partitions | partitions if ongoing else partitions,
        start_ms=meta.start_ms if ongoing else now_ms,
    )


def verify_partitions(
    meta: TxnMetadata | None,
    producer_id: int,
    epoch: int,
    partitions: frozenset[TopicPartition],
) -> ErrorCode | dict[TopicPartition, ErrorCode]:
    """AddPartitionsToTxn v4+ verify-only (KIP-890 part 1, asked by a partition leader
    before it appends a transactional batch): per partition, NONE when it is in the
    producer's open transaction, INVALID_TXN_STATE when not; or an error for them all."""
    error = _check_producer(meta, producer_id, epoch)
    if error is not ErrorCode.none:
        return error
    assert meta is not None
    if meta.state in PREPARED or meta.state is TxnState.PREPARE_EPOCH_FENCE:
        return ErrorCode.concurrent_transactions
    ongoing = meta.state is TxnState.ONGOING
    return {
        where: ErrorCode.none
        if ongoing and where in meta.partitions
        else ErrorCode.invalid_txn_state
        for where in partitions
    }


# ---- EndTxn ---------------------------------------------------------------------------------
def end_transaction(
    meta: TxnMetadata | None, producer_id: int, epoch: int, commit: bool, now_ms: int
) -> ErrorCode | TxnMetadata:
    """EndTxn from the client (TV1): PrepareCommit or PrepareAbort to write, or the answer.
    A retry of an EndTxn whose transaction completed already is answered NONE."""
    error = _check_producer(meta, producer_id, epoch)
    if error is not ErrorCode.none:
        return error
    assert meta is not None
    state = meta.state
    if state is TxnState.ONGOING:
        target = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        return transit(meta, target, now_ms)
    if state is TxnState.COMPLETE_COMMIT:
        return ErrorCode.none if commit else ErrorCode.invalid_txn_state
    if state is TxnState.COMPLETE_ABORT:
        return ErrorCode.invalid_txn_state if commit else ErrorCode.none
    if state is TxnState.PREPARE_COMMIT:
        return ErrorCode.concurrent_transactions if commit else ErrorCode.invalid_txn_state
    if state is TxnState.PREPARE_ABORT:
        return ErrorCode.invalid_txn_state if commit else ErrorCode.concurrent_transactions
    if state is TxnState.PREPARE_EPOCH_FENCE:
        return ErrorCode.concurrent_transactions
    return ErrorCode.invalid_txn_state  # Empty: no transaction to end


def abort_fenced(fenced: TxnMetadata, now_ms: int) -> TxnMetadata:
    """The PrepareAbort the coordinator writes for a transaction it fenced."""
    return transit(fenced, TxnState.PREPARE_ABORT, now_ms)


def complete(meta: TxnMetadata, now_ms: int) -> TxnMetadata:
    """Every partition has its marker: CompleteCommit or CompleteAbort, no partitions."""
    target = (
        TxnState.COMPLETE_COMMIT
        if meta.state is TxnState.PREPARE_COMMIT
        else TxnState.COMPLETE_ABORT
    )
    return transit(meta, target, now_ms, partitions=frozenset())


# ---- time ----------------------------------------------------------------------------------
def timed_out(meta: TxnMetadata, now_ms: int) -> bool:
    """An Ongoing transaction past its transaction.timeout.ms: the coordinator aborts it."""
    return meta.state is TxnState.ONGOING and meta.start_ms + meta.timeout_ms < now_ms


def expired(meta: TxnMetadata, now_ms: int, expiration_ms: int) -> bool:
    """A transactional id idle for transactional.id.expiration.ms with no transaction
    open: it is removed (a tombstone)."""
    return meta.state in ENDED and meta.update_ms + expiration_ms <= now_ms
