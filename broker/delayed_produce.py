"""An acks=all produce waiting for its records to commit (Kafka's DelayedProduce).

The batch is in the leader's log already; the answer waits in the purgatory
(broker/purgatory.py) until the high watermark passes its last offset, the leader loses the
partition, or the produce timeout ends. Woken only by changes to its own partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.partition import Partition
from broker.purgatory import DelayedOperations


@dataclass(frozen=True, slots=True)
class AppendResult:
    """A produce's answer for one partition."""

    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (index in batch, why), Produce v8+
    log_append_time_ms: int = -1  # the broker's timestamp when the topic uses LogAppendTime


async def wait_for_commit(
    delayed: DelayedOperations[tuple[str, int]],
    partition: Partition,
    still_hosted: Callable[[], bool],
    last: int,
    min_isr: int,
    timeout_s: float,
    result: AppendResult,
) -> AppendResult:
    """``result`` once the high watermark passes ``last``, or why not: the partition is no
    longer led here at the epoch it was appended in (``still_hosted`` says whether this
    partition object is still the one the broker hosts), the ISR shrank below ``min_isr``
    (NOT_ENOUGH_REPLICAS_AFTER_APPEND), or the timeout ended (REQUEST_TIMED_OUT)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    epoch = partition.leader_epoch
    first = result.base_offset
    while True:  # bounded by the deadline
        if not still_hosted() or not partition.is_leader or partition.leader_epoch != epoch:
            return AppendResult(ErrorCode.not_leader_or_follower, first)
        if partition.high_watermark > last:
            if len(partition.isr) < min_isr:
                return AppendResult(
                    ErrorCode.not_enough_replicas_after_append,
                    first,
                    message=f"The ISR of {partition.topic}-{partition.index} shrank "
                    f"below min.insync.replicas {min_isr} after the append",
                )
            return result
        if not await delayed.wait((partition.key,), deadline - loop.time()):
            return AppendResult(ErrorCode.request_timed_out, first)
