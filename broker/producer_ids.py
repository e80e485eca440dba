"""InitProducerId for idempotent producers (no transactions): ids come in blocks from the
controller (AllocateProducerIds, as Kafka's RPCProducerIdManager fetches them), so every id a
broker hands out is unique across the cluster and across restarts.

A producer that asks again with its id and epoch (KIP-360, after an error it cannot otherwise
recover from) keeps its id with the next epoch, which fences its own older requests; when the
epoch would overflow it gets a new id. A ``transactional_id`` is the transaction
coordinator's (broker/txn/); a broker without one answers COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.controller_channel import ControllerSender
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module, response_module

MAX_EPOCH = 2**15 - 1
ALLOCATE_TIMEOUT_S = 5.0


class ProducerIdManager:
    """Hands out this broker's producer ids, fetching a new block when one runs out."""

    def __init__(
        self, node_id: int, broker_epoch: Callable[[], int], channel: ControllerSender
    ) -> None:
        self._node_id = node_id
        self._broker_epoch = broker_epoch
        self._channel = channel
        self._next = 0
        self._end = 0  # ids in [_next, _end) are ours and unused
        self._lock = asyncio.Lock()  # one block request at a time

    async def next_id(self) -> int | ErrorCode:
        async with self._lock:
            if self._next >= self._end:
                module: Any = request_module(ApiKey.ALLOCATE_PRODUCER_IDS, 0)
                request = make(
                    module.AllocateProducerIdsRequest,
                    {"broker_id": self._node_id, "broker_epoch": self._broker_epoch()},
                )
                try:
                    answer: Any = await self._channel.send(request, ALLOCATE_TIMEOUT_S)
                except OSError:
                    return ErrorCode.coordinator_load_in_progress  # retriable for clients
                if answer.error_code != ErrorCode.none:
                    return ErrorCode.coordinator_load_in_progress
                self._next = answer.producer_id_start
                self._end = answer.producer_id_start + answer.producer_id_len
            producer_id = self._next
            self._next += 1
            return producer_id


async def init_producer_id(ids: ProducerIdManager, request: Any, api_version: int) -> object:
    module: Any = response_module(ApiKey.INIT_PRODUCER_ID, api_version)

    def answer(code: ErrorCode, producer_id: int = -1, epoch: int = -1) -> object:
        values = {"error_code": code, "producer_id": producer_id, "producer_epoch": epoch}
        return make(module.InitProducerIdResponse, values | {"throttle_time": timedelta(0)})

    if request.transactional_id is not None:
        return answer(ErrorCode.coordinator_not_available)
    current_id = getattr(request, "producer_id", -1)
    current_epoch = getattr(request, "producer_epoch", -1)
    if current_id >= 0 and 0 <= current_epoch < MAX_EPOCH - 1:
        return answer(ErrorCode.none, current_id, current_epoch + 1)
    producer_id = await ids.next_id()
    if isinstance(producer_id, ErrorCode):
        return answer(producer_id)
    return answer(ErrorCode.none, producer_id, 0)
