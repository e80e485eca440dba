"""Idempotent producers on one partition (Kafka's ProducerStateManager, without transactions).

An idempotent producer numbers its batches per partition (``base_sequence``) under a
producer id and epoch from InitProducerId, and retries a batch whose answer it did not get.
The leader therefore remembers, per producer, the epoch and the last five batches appended
(Kafka keeps five: a producer has at most five requests in flight per partition), so that:
- a retried batch already in the log is answered with its original offset, not appended again;
- a batch that skips or repeats a sequence out of turn is refused (OUT_OF_ORDER_SEQUENCE_NUMBER)
  and the producer resends in order;
- a batch from an older epoch of a producer is refused (INVALID_PRODUCER_EPOCH).

The state is rebuilt from the log's batch headers when the partition is opened, so a restart
keeps deduplicating; Kafka reads producer snapshots for that, which this does without.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from log.batch import BatchHeader, iter_batches
from log.log import Log, OffsetOutOfRangeError

NO_PRODUCER_ID = -1
BATCHES_KEPT = 5
READ_CHUNK_BYTES = 1024 * 1024
MAX_SEQUENCE = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BatchRecord:
    first_sequence: int
    last_sequence: int
    first_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    batches: deque[BatchRecord] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))


@dataclass(frozen=True, slots=True)
class Verdict:
    """``append`` the batch, or answer ``error`` (``duplicate_of``: its original offset)."""

    error: ErrorCode = ErrorCode.none
    duplicate_of: int = -1

    @property
    def append(self) -> bool:
        return self.error == ErrorCode.none and self.duplicate_of < 0


def last_sequence(header: BatchHeader) -> int:
    """The sequence of the batch's last record (sequences wrap at 2**31 - 1, as in Kafka)."""
    return (header.base_sequence + header.last_offset_delta) % (MAX_SEQUENCE + 1)


class ProducerState:
    """The producers that wrote to one partition."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    @classmethod
    def from_log(cls, log: Log) -> ProducerState:
        """The state the log's batches leave behind (every batch is read, headers only)."""
        state = cls()
        offset = log.log_start_offset
        while offset < log.log_end_offset:  # bounded: every pass moves past >= 1 batch
            try:
                data = bytes(log.read(offset, READ_CHUNK_BYTES).records)
            except OffsetOutOfRangeError:
                break
            if not data:
                break
            for _position, header in iter_batches(data):
                state.record(header, header.base_offset)
                offset = header.last_offset + 1
        return state

    def check(self, header: BatchHeader) -> Verdict:
        """What to do with a client's batch before it is appended."""
        if header.producer_id == NO_PRODUCER_ID:
            return Verdict()
        entry = self._producers.get(header.producer_id)
        if entry is None:
            # Unknown here (new, or its batches left with retention): take it as it comes.
            return Verdict()
        if header.producer_epoch < entry.epoch:
            return Verdict(ErrorCode.invalid_producer_epoch)
        if header.producer_epoch > entry.epoch:
            ok = header.base_sequence == 0
            return Verdict() if ok else Verdict(ErrorCode.out_of_order_sequence_number)
        for batch in entry.batches:
            if (batch.first_sequence, batch.last_sequence) == (
                header.base_sequence,
                last_sequence(header),
            ):
                return Verdict(duplicate_of=batch.first_offset)
        latest = entry.batches[-1].last_sequence if entry.batches else -1
        if header.base_sequence != (latest + 1) % (MAX_SEQUENCE + 1):
            return Verdict(ErrorCode.out_of_order_sequence_number)
        return Verdict()

    def record(self, header: BatchHeader, first_offset: int) -> None:
        """Remember a batch that is now in the log at ``first_offset``."""
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self._producers[header.producer_id] = ProducerEntry(header.producer_epoch)
        entry.batches.append(BatchRecord(header.base_sequence, last_sequence(header), first_offset))
