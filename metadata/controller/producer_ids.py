"""AllocateProducerIds (key 67): blocks of producer ids for brokers' transaction coordinators.

The controller hands out consecutive blocks from the image's next_producer_id; the ProducerIds
record moves it on, so no id is handed out twice, across failovers included.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.context import ControllerContext, ControllerResult
from metadata.records import ProducerIds
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module

PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID = 2**63 - 1


def allocate_producer_ids(
    ctx: ControllerContext, request: Any, api_version: int
) -> ControllerResult:
    """The next block of ids, to a registered broker at its current epoch."""
    module = response_module(ApiKey.ALLOCATE_PRODUCER_IDS, api_version)
    broker = ctx.image.cluster.brokers.get(request.broker_id)
    start = ctx.image.next_producer_id
    if broker is None or broker.epoch != request.broker_epoch:
        code = ErrorCode.stale_broker_epoch
    elif start > MAX_PRODUCER_ID - PRODUCER_ID_BLOCK_SIZE:
        code = ErrorCode.unknown_server_error  # Kafka: "Exhausted all producerIds"
    else:
        record = ProducerIds(broker.broker_id, broker.epoch, start + PRODUCER_ID_BLOCK_SIZE)
        response = make(
            module.AllocateProducerIdsResponse,
            {
                "error_code": ErrorCode.none,
                "producer_id_start": start,
                "producer_id_len": PRODUCER_ID_BLOCK_SIZE,
            },
        )
        return ControllerResult((record,), response)
    response = make(
        module.AllocateProducerIdsResponse,
        {"error_code": code, "producer_id_start": -1, "producer_id_len": 0},
    )
    return ControllerResult((), response)
