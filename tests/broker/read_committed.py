"""What a read_committed consumer makes of a Fetch answer, as the Java client's
Fetcher and librdkafka do it: control batches are never data; a batch of a producer with
an aborted transaction listed at or below the batch's offset is skipped until that
producer's abort marker."""

from __future__ import annotations

from collections.abc import Iterable

from log.batch import decode_batch, iter_batches
from log.end_txn_marker import decode_marker


def committed_values(
    records: bytes, aborted: Iterable[tuple[int, int]]
) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record a read_committed consumer returns from ``records``,
    given the (producer id, first offset) pairs of the answer's aborted transactions."""
    pending = sorted(aborted, key=lambda pair: pair[1])
    aborting: set[int] = set()
    out: list[tuple[int, bytes | None]] = []
    for position, header in iter_batches(records):
        while pending and pending[0][1] <= header.last_offset:
            aborting.add(pending.pop(0)[0])
        marker = decode_marker(records, position, header)
        if header.is_control:
            if marker is not None and not marker.commit:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        _, batch_records = decode_batch(records, position)
        for index, record in enumerate(batch_records):
            delta = index if record.offset_delta is None else record.offset_delta
            out.append((header.base_offset + delta, record.value))
    return out
