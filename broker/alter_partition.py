"""AlterPartition: a leader's ISR changes, proposed to the controller (the role of Kafka's
AlterPartitionManager).

A leader never changes its ISR on its own: it proposes the new ISR (``pending_isr``, which
already counts for the high watermark as Kafka's "maximal ISR" does) and adopts it only
once the controller has committed it and answered with the new partition epoch. One
proposal per partition is in flight at a time; a refused or unanswered one falls back to
the committed ISR after a backoff, so the next shrink check or follower fetch proposes
again once the metadata image (which may explain the refusal) has had a chance to arrive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.controller_channel import ControllerSender
from broker.partition import Partition
from metadata.image import MetadataImage
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module

logger = logging.getLogger("broker.alter_partition")

ALTER_PARTITION_VERSION = 3
ALTER_PARTITION_TIMEOUT_S = 30.0


class AlterPartitionManager:
    """Sends one broker's AlterPartition proposals, one per partition at a time."""

    def __init__(
        self,
        node_id: int,
        channel: ControllerSender,
        broker_epoch: Callable[[], int],
        latest_image: Callable[[], MetadataImage | None],
        on_committed: Callable[[Partition], None],
        backoff_s: float,
    ) -> None:
        self._node_id = node_id
        self._channel = channel
        self._broker_epoch = broker_epoch
        self._latest_image = latest_image
        # Told when the controller committed a proposal and the partition adopted it: the
        # high watermark may move and waiters on the partition wake.
        self._on_committed = on_committed
        self._backoff_s = backoff_s
        self._in_flight: dict[tuple[str, int], asyncio.Task[None]] = {}

    def propose(self, partition: Partition, isr: tuple[int, ...]) -> None:
        """Propose ``isr`` for ``partition``, unless a proposal for it is in flight."""
        key = partition.key
        if key in self._in_flight:
            return
        partition.pending_isr = isr
        task = asyncio.get_running_loop().create_task(self._send(partition, isr))
        self._in_flight[key] = task
        task.add_done_callback(lambda _task: self._in_flight.pop(key, None))

    async def close(self) -> None:
        tasks = list(self._in_flight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _request(self, partition: Partition, isr: tuple[int, ...]) -> Any:
        """AlterPartition v3 for one partition (Kafka batches several partitions in one
        request; one each keeps a refusal's scope to its partition, and each is small)."""
        module = request_module(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION)
        image = self._latest_image()
        brokers = image.cluster.brokers if image is not None else {}
        members = tuple(
            make(
                module.BrokerState,
                {"broker_id": r, "broker_epoch": brokers[r].epoch if r in brokers else -1},
            )
            for r in isr
        )
        data = make(
            module.PartitionData,
            {
                "partition_index": partition.index,
                "leader_epoch": partition.leader_epoch,
                "new_isr_with_epochs": members,
                "leader_recovery_state": 0,
                "partition_epoch": partition.partition_epoch,
            },
        )
        topic = make(module.TopicData, {"topic_id": partition.topic_id, "partitions": (data,)})
        return make(
            module.AlterPartitionRequest,
            {
                "broker_id": self._node_id,
                "broker_epoch": self._broker_epoch(),
                "topics": (topic,),
            },
        )

    async def _send(self, partition: Partition, isr: tuple[int, ...]) -> None:
        error: object = None
        try:
            request = self._request(partition, isr)
            response: Any = await self._channel.send(request, ALTER_PARTITION_TIMEOUT_S)
        except OSError as failure:
            response, error = None, failure
        answer = None
        if response is not None and response.error_code == ErrorCode.none:
            for topic in response.topics:
                for data in topic.partitions:
                    if data.partition_index == partition.index:
                        answer = data
        if answer is not None and answer.error_code == ErrorCode.none:
            if partition.isr_committed(
                answer.leader_epoch, answer.partition_epoch, tuple(answer.isr)
            ):
                logger.info(
                    "[Partition %s-%d broker=%d] ISR updated to %s and partition epoch to %d",
                    partition.topic,
                    partition.index,
                    self._node_id,
                    list(partition.isr),
                    partition.partition_epoch,
                )
                self._on_committed(partition)
            return
        if error is None:
            code = answer.error_code if answer is not None else response.error_code
            error = ErrorCode(code).name if response is not None else "no answer"
        logger.info(
            "[Partition %s-%d broker=%d] AlterPartition to %s failed: %s",
            partition.topic,
            partition.index,
            self._node_id,
            list(isr),
            error,
        )
        await asyncio.sleep(self._backoff_s)
        if partition.pending_isr == isr:
            partition.pending_isr = None
