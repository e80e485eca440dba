"""InitProducerId: ids in blocks from the controller, epoch bumps, and what is refused."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.producer_ids import ProducerIdManager, init_producer_id
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module, response_module


class BlockController:
    """Answers AllocateProducerIds with blocks of two ids, or fails when told to."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int]] = []
        self.next_start = 1000
        self.down = False

    async def send(self, request: Any, timeout_s: float) -> object:
        assert int(request.__api_key__) == ApiKey.ALLOCATE_PRODUCER_IDS
        if self.down:
            raise TimeoutError("no controller")
        self.asked.append((request.broker_id, request.broker_epoch))
        module: Any = response_module(ApiKey.ALLOCATE_PRODUCER_IDS, 0)
        start, self.next_start = self.next_start, self.next_start + 2
        return make(
            module.AllocateProducerIdsResponse,
            {
                "throttle_time": timedelta(0),
                "error_code": ErrorCode.none,
                "producer_id_start": start,
                "producer_id_len": 2,
            },
        )


def init(ids: ProducerIdManager, **values: object) -> tuple[ErrorCode, int, int]:
    module: Any = request_module(ApiKey.INIT_PRODUCER_ID, 4)
    request = make(
        module.InitProducerIdRequest,
        {"transactional_id": None, "producer_id": -1, "producer_epoch": -1} | values,
    )
    answer: Any = asyncio.run(init_producer_id(ids, request, 4))
    return answer.error_code, answer.producer_id, answer.producer_epoch


def test_ids_come_in_blocks_from_the_controller_and_epochs_bump() -> None:
    controller = BlockController()
    ids = ProducerIdManager(3, lambda: 42, controller)
    assert [init(ids)[1] for _ in range(3)] == [1000, 1001, 1002]
    assert controller.asked == [(3, 42), (3, 42)]  # a second block after two ids
    assert init(ids, producer_id=1001, producer_epoch=4) == (ErrorCode.none, 1001, 5)
    exhausted = init(ids, producer_id=1001, producer_epoch=2**15 - 2)
    assert exhausted == (ErrorCode.none, 1003, 0)  # the epoch would overflow: a new id


def test_transactions_and_an_unreachable_controller_are_refused() -> None:
    controller = BlockController()
    ids = ProducerIdManager(3, lambda: 42, controller)
    transactional = init(ids, transactional_id="tx-1")
    assert transactional == (ErrorCode.coordinator_not_available, -1, -1)
    controller.down = True
    assert init(ids)[0] == ErrorCode.coordinator_load_in_progress  # retriable: clients retry
    controller.down = False
    assert init(ids) == (ErrorCode.none, 1000, 0)
