"""Proposals waiting to be appended together, as Kafka's KRaft BatchAccumulator packs them.

Every record batch costs the leader an encode, a CRC, a log append, and a decode when it
commits, and each follower a validation and an append: per batch, not per record. A leader
that appended each proposal as its own batch spent its time on those, one record at a time.
The driver instead collects the proposals made within one event-loop turn here and appends
them as few batches as the size limits allow, at the end of that turn.

A proposal is never split across batches (a batch is what commits, or is truncated, as one),
and its offsets are known the moment it is accepted: the accumulator starts at the log end
and counts, so ``add`` answers the offset of the proposal's last record at once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from log.records import Record

# Bytes a record costs beyond its key and value: length, attributes, deltas, lengths, headers
# count (varints of at most 5 or 10 bytes). An overestimate keeps a batch under the limit.
RECORD_OVERHEAD_BYTES = 32


def estimated_size(records: Sequence[Record]) -> int | None:
    """An upper bound on the encoded size of ``records``' bodies in a batch; None if any
    record carries its own offset delta (it only holds within its own proposal)."""
    size = RECORD_OVERHEAD_BYTES * len(records)
    for record in records:  # the per-proposal hot path: one pass, no helper calls
        if record.offset_delta is not None:
            return None
        size += len(record.key or b"") + len(record.value or b"")
        for header in record.headers:
            size += len(header.key.encode()) + len(header.value or b"") + RECORD_OVERHEAD_BYTES
    return size


def split_proposal(
    records: Sequence[Record], max_records: int, max_bytes: int
) -> list[Sequence[Record]]:
    """``records`` cut, in order, into proposals that each fit one batch (at most
    ``max_records`` records and ``max_bytes`` estimated bytes; a record bigger than that
    alone is a proposal of its own). For callers whose operation may commit in several
    batches, like Kafka's non-atomic controller results."""
    proposals: list[Sequence[Record]] = []
    start = size = 0
    for index, record in enumerate(records):
        record_size = estimated_size((record,)) or 0
        if index > start and (index - start >= max_records or size + record_size > max_bytes):
            proposals.append(records[start:index])
            start, size = index, 0
        size += record_size
    if start < len(records):
        proposals.append(records[start:])
    return proposals


class BatchAccumulator:
    """Records accepted for one epoch from ``base`` on, grouped into the batches to append."""

    def __init__(self, *, max_batch_records: int, max_batch_bytes: int) -> None:
        self.max_batch_records = max_batch_records
        self.max_batch_bytes = max_batch_bytes
        self.epoch = -1
        self.base = 0
        self.end = 0
        self._batches: list[list[Record]] = []
        self._last_bytes = 0

    def empty(self) -> bool:
        return not self._batches

    def add(self, records: Sequence[Record], epoch: int, log_end: Callable[[], int]) -> int | None:
        """Accept a proposal for ``epoch`` over a log ending at ``log_end()`` (asked only when
        the accumulator is empty); the offset of its last record, or None if it must be
        appended on its own, now: records that carry their own offset deltas (they only hold
        within their proposal) or one too big to share a batch. The accumulator must be
        empty or hold the same epoch's records (the caller drains it when leadership moved,
        and nothing else appends to a leader's log)."""
        count = len(records)
        size = estimated_size(records)
        if size is None or size > self.max_batch_bytes:
            return None
        if not self._batches:
            end = log_end()
            self.epoch, self.base, self.end = epoch, end, end
        assert self.epoch == epoch, "drain before leadership moves"
        last = self._batches[-1] if self._batches else None
        if (
            last is None
            or len(last) + count > self.max_batch_records
            or self._last_bytes + size > self.max_batch_bytes
        ):
            last = []
            self._batches.append(last)
            self._last_bytes = 0
        last.extend(records)
        self._last_bytes += size
        self.end += count
        return self.end - 1

    def take(self) -> list[list[Record]]:
        """The batches to append, in order; the accumulator is empty afterwards."""
        batches, self._batches = self._batches, []
        self._last_bytes = 0
        return batches
