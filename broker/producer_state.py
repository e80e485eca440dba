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
keeps deduplicating; Kafka reads producer snapshots for that, which this does without. A
producer not heard from for ``producer.id.expiration.ms`` (a day) is forgotten, as in Kafka:
its next batch is taken as a new producer's.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from log.batch import BatchHeader, iter_batches
from log.log import Log, OffsetOutOfRangeError

NO_PRODUCER_ID = -1
BATCHES_KEPT = 5
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default
EXPIRY_CHECK_INTERVAL_MS = 60_000  # how often ``record`` looks for expired producers
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
    last_ms: int  # when it last appended (a batch's max timestamp, for the log's history)
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

    def __init__(self, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        self._expiration_ms = expiration_ms
        self._last_expiry_ms = 0

    def __len__(self) -> int:
        return len(self._producers)

    @classmethod
    def from_log(cls, log: Log, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS) -> ProducerState:
        """The state the log's batches leave behind (every batch is read, headers only)."""
        state = cls(expiration_ms)
        offset = log.log_start_offset
        while offset < log.log_end_offset:  # bounded: every pass moves past >= 1 batch
            try:
                data = bytes(log.read(offset, READ_CHUNK_BYTES).records)
            except OffsetOutOfRangeError:
                break
            if not data:
                break
            for _position, header in iter_batches(data):
                state.record(header, header.base_offset, header.max_timestamp)
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

    def record(self, header: BatchHeader, first_offset: int, now_ms: int) -> None:
        """Remember a batch that is now in the log at ``first_offset``, appended at
        ``now_ms``; now and then, forget producers silent for longer than the expiration."""
        if now_ms - self._last_expiry_ms >= EXPIRY_CHECK_INTERVAL_MS:
            self._last_expiry_ms = now_ms
            horizon = now_ms - self._expiration_ms
            for producer_id in [p for p, e in self._producers.items() if e.last_ms < horizon]:
                del self._producers[producer_id]
        if header.producer_id == NO_PRODUCER_ID:
            return
        entry = self._producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = ProducerEntry(header.producer_epoch, now_ms)
            self._producers[header.producer_id] = entry
        entry.last_ms = max(entry.last_ms, now_ms)
        entry.batches.append(BatchRecord(header.base_sequence, last_sequence(header), first_offset))
