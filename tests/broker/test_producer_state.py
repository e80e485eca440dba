"""Producer-id expiry: a producer silent for producer.id.expiration.ms is forgotten."""

from __future__ import annotations

from broker.producer_state import ProducerState
from log.batch import BatchHeader, encode_batch, parse_header
from log.records import Record


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
