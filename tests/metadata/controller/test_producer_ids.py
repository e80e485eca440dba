"""AllocateProducerIds hands out disjoint blocks, only to a current broker epoch."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from metadata.controller.producer_ids import PRODUCER_ID_BLOCK_SIZE, allocate_producer_ids
from tests.metadata.controller.support import apply, brokers, context, request_module, roundtrip

AP = request_module(67, 0)


def test_blocks_follow_each_other() -> None:
    image = brokers(1, 2)
    first = allocate_producer_ids(
        context(image), AP.AllocateProducerIdsRequest(broker_id=1, broker_epoch=101), 0
    )
    answer = roundtrip(first.response)
    assert (answer.error_code, answer.producer_id_start, answer.producer_id_len) == (
        ErrorCode.none,
        0,
        PRODUCER_ID_BLOCK_SIZE,
    )
    image = apply(image, first)
    second = allocate_producer_ids(
        context(image), AP.AllocateProducerIdsRequest(broker_id=2, broker_epoch=102), 0
    )
    assert second.response.producer_id_start == PRODUCER_ID_BLOCK_SIZE
    assert apply(image, second).next_producer_id == 2 * PRODUCER_ID_BLOCK_SIZE


def test_a_stale_epoch_gets_nothing() -> None:
    result = allocate_producer_ids(
        context(brokers(1)), AP.AllocateProducerIdsRequest(broker_id=1, broker_epoch=5), 0
    )
    assert result.response.error_code == ErrorCode.stale_broker_epoch and result.records == ()
