"""AlterReplicaLogDirs on this broker (KIP-113; Kafka's ReplicaManager.alterReplicaLogDirs
and ReplicaAlterLogDirsManager): move a replica's log to another of its ``log.dirs``
while the replica keeps serving.

A request names, per partition, the dir wanted. The answer, as Kafka's:
- INVALID_TOPIC_EXCEPTION: the topic name is too long for the copy's dir name
  (``<topic>-<partition>.<32 hex>-future`` over 255 characters);
- LOG_DIR_NOT_FOUND: the path is not one of this broker's ``log.dirs``;
- KAFKA_STORAGE_ERROR: that dir is offline, the replica's log is, or any log dir of the
  broker is (as Kafka, no copy is begun then, so no replica is ever copied into two
  dirs);
- REPLICA_NOT_AVAILABLE: the partition exists but has no replica here (yet); the dir is
  remembered and the replica's log is created there if it comes here (Kafka's preferred
  log dir); UNKNOWN_TOPIC_OR_PARTITION if the metadata has no such partition;
- NONE: the replica is in that dir already, or a copy of it into that dir is begun (a
  copy into another dir is dropped first).

A copy found at start-up (a move cut short by a crash or a restart) is resumed when the
replica's partition is opened, as Kafka resumes it. The copy (log/future_log.py) runs in
one task, a replica at a time, in slices of COPY_SLICE_BYTES with a yield to the event
loop after each, so produce and fetch are served in between. The dynamic broker config
``replica.alter.log.dirs.io.max.bytes.per.second`` (what ``kafka-reassign-partitions
--replica-alter-log-dirs-throttle`` sets) paces it: a slice of at most that many bytes,
then a wait of its bytes over the rate, the rate read again at least every
THROTTLE_STEP_S, so a throttle changed or removed takes effect within a second. The log
cleaner leaves a log alone while it is copied (log/cleaner.py).

When the copy has caught up, LogManager.promote_future_log swaps it in, in one synchronous
step, and the replica's Partition is handed the new log in that same step. The broker then
tells the controller the replica's new dir (AssignReplicasToDirs, through
broker/log_dirs.py, which sends what the image does not record yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from broker.partition import Partition
from log.errors import RecordError
from log.future_log import COPY_SLICE_BYTES, FutureLog
from log.log import Log, UnexpectedAppendOffsetError
from log.manager import LogManager
from metadata.config_defs import ALTER_LOG_DIRS_THROTTLE, BROKER_DYNAMIC_CONFIGS

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# The default of replica.alter.log.dirs.io.max.bytes.per.second, from the config table: none
# (Long.MAX_VALUE).
UNTHROTTLED = int(str(BROKER_DYNAMIC_CONFIGS[ALTER_LOG_DIRS_THROTTLE].default))
# The longest one wait for the throttle lasts before the rate is read again.
THROTTLE_STEP_S = 1.0


class ReplicaAlterLogDirsManager:
    """Copies replicas' logs into the dirs asked for, one at a time, and swaps them in."""

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        partition_of: Callable[[TopicPartition], Partition | None],
        unique_id: Callable[[], str],
        checkpoint_high_watermarks: Callable[[], Awaitable[None]],
        throttle: Callable[[], int] = lambda: UNTHROTTLED,
    ) -> None:
        """``partition_of`` finds the replica a log belongs to; ``unique_id`` names the
        ``-future`` and ``-delete`` dirs (from the node's seeded Random);
        ``checkpoint_high_watermarks`` writes every dir's replication-offset-checkpoint
        (a moved replica's high watermark must be in its new dir's before a crash can need
        it, or the replica would restart from its log start); ``throttle`` is the
        replica.alter.log.dirs.io.max.bytes.per.second in force now."""
        self._prefix = f"[ReplicaAlterLogDirsManager id={node_id}]"
        self.logs = logs
        self._partition_of = partition_of
        self._unique_id = unique_id
        self._checkpoint_high_watermarks = checkpoint_high_watermarks
        self._throttle = throttle
        # Replicas whose move failed (Kafka's FailedPartitionsCount) until asked again, or
        # no longer hosted here (pruned at each failure, so bounded by the hosted replicas).
        self.failed_partitions: set[TopicPartition] = set()
        self._queue: dict[TopicPartition, None] = {}  # insertion-ordered: first asked first
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # The swap under way, if any: never cut short by close (it finishes first).
        self._promotion: asyncio.Future[str | None] | None = None
        # Called after each replica that moved (the broker reports its dir at once).
        self.on_moved: Callable[[], None] | None = None
        # Called if the task stops on a bug, so the broker fails loudly (``failed``).
        self.on_failure: Callable[[], None] | None = None

    def start(self) -> None:
        """Begin copying (on the running loop)."""
        assert self._task is None, "started twice"
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="replica-alter-log-dirs"
        )

    def failed(self) -> BaseException | None:
        """What stopped the copying task unexpectedly (a bug), if anything did."""
        task = self._task
        if task is not None and task.done() and not task.cancelled():
            return task.exception()
        return None

    async def close(self) -> None:
        """Stop copying; the copies made so far are left to the LogManager's shutdown
        (and resumed at the next start). A swap under way is finished first: cut between
        its renames it would leave the partition in two dirs for the next start to sort."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        promotion, self._promotion = self._promotion, None
        if promotion is not None:
            try:
                await promotion
            except OSError as error:  # its dir went offline, one line said so
                logger.warning("%s A swap at shutdown failed: %r", self._prefix, error)

    async def begin(self, topic: str, index: int, log_dir: str) -> None:
        """Begin (or keep) copying the hosted replica's log into ``log_dir``; the caller
        checked the request (``ReplicaManager.alter_replica_log_dir``). OSError if the
        copy cannot be created."""
        existing = self.logs.future_log_of(topic, index)
        if existing is None or existing.log_dir != log_dir:
            await self.logs.create_future_log(topic, index, log_dir, self._unique_id())
            logger.info("%s Copying %s-%d into %s", self._prefix, topic, index, log_dir)
        self.failed_partitions.discard((topic, index))
        self._queue[(topic, index)] = None
        self._wake.set()

    def max_lag(self) -> int:
        """Kafka's ReplicaAlterLogDirsManager MaxLag: the most offsets a copy is behind the
        log it copies."""
        return max(
            (
                max(0, future.source.log_end_offset - future.log.log_end_offset)
                for _, future in self.logs.future_logs()
            ),
            default=0,
        )

    def resume(self, topic: str, index: int) -> None:
        """Go on copying the replica if the LogManager found a copy of it at start-up (a
        move the last life did not finish)."""
        if self.logs.future_log_of(topic, index) is not None:
            logger.info("%s Resuming the copy of %s-%d", self._prefix, topic, index)
            self._queue[(topic, index)] = None
            self._wake.set()

    async def _run(self) -> None:
        try:
            await self._copy_forever()
        finally:
            if self.on_failure is not None:
                self.on_failure()  # cancelled too: the broker then finds nothing failed

    async def _copy_forever(self) -> None:
        while True:  # ends when close cancels it
            await self._wake.wait()
            self._wake.clear()
            while self._queue:  # bounded: each pass takes one replica off
                key = next(iter(self._queue))
                try:
                    await self._move(key)
                except (OSError, ValueError, RecordError, UnexpectedAppendOffsetError) as error:
                    # A disk error has taken its dir offline (one line from the LogManager);
                    # the replica serves from where it is now, unless that dir is the one.
                    # A batch the copy refused (corrupt on disk) leaves the replica as well.
                    logger.warning(
                        "%s Moving %s-%d failed: %r",
                        self._prefix,
                        *key,
                        error,
                    )
                    self._failed(key)
                    with contextlib.suppress(OSError):
                        await self.logs.abandon_future_log(*key)
                finally:
                    self._queue.pop(key, None)

    async def _move(self, key: TopicPartition) -> None:
        """Copy slice after slice until caught up, then swap; returns early when the copy
        was dropped, or the replica deleted or taken offline meanwhile."""
        while True:  # bounded by the log's growth: each pass copies a slice or swaps
            future = self.logs.future_log_of(*key)
            if future is None:
                return  # dropped: another request, or the partition deleted
            partition = self._partition_of(key)
            if partition is None or partition.log is not future.source:
                await self.logs.abandon_future_log(*key)  # deleted, or made again
                return
            if not future.source.is_online or not future.log.is_online:
                self._failed(key)  # one of its dirs failed (one line said so)
                await self.logs.abandon_future_log(*key)
                return
            if future.caught_up:
                if await self._swap(key, future, partition):
                    return
                await asyncio.sleep(0)  # appended to meanwhile: copy more first
                continue
            rate = self._throttle()
            if rate == 0:  # held until the throttle is raised or removed
                await asyncio.sleep(THROTTLE_STEP_S)
                continue
            copied = await future.copy_slice(min(COPY_SLICE_BYTES, rate))
            if rate < UNTHROTTLED:
                await self._wait_for_throttle(copied)
            elif not future.caught_up:
                # A slice at a time: produce and fetch go in between. A slice that reached
                # the log end goes straight to the swap instead, before more is appended.
                await asyncio.sleep(0)

    async def _wait_for_throttle(self, copied: int) -> None:
        """Wait until ``copied`` bytes are paid for at the throttle's rate, reading the rate
        again every THROTTLE_STEP_S at the most (a rate lowered to 0 meanwhile holds the
        copy until it is raised or removed; close cancels the wait)."""
        owed = float(copied)
        while owed > 0:  # ends once paid for, the throttle removed, or close cancels it
            rate = self._throttle()
            if rate >= UNTHROTTLED:
                return
            step = THROTTLE_STEP_S if rate == 0 else min(THROTTLE_STEP_S, owed / rate)
            await asyncio.sleep(step)
            owed -= step * rate

    def _failed(self, key: TopicPartition) -> None:
        """Count the replica's move as failed, forgetting the failures of replicas no
        longer hosted here (so the set stays within the hosted replicas)."""
        hosted = {tp for tp in self.failed_partitions if self._partition_of(tp) is not None}
        self.failed_partitions = hosted | {key}

    async def _swap(self, key: TopicPartition, future: FutureLog, partition: Partition) -> bool:
        def swap(log: Log) -> None:
            partition.log = log
            partition.checkpointed_base = log.active_segment.base_offset

        self._promotion = asyncio.ensure_future(
            self.logs.promote_future_log(*key, self._unique_id(), swap)
        )
        try:
            new_dir = await asyncio.shield(self._promotion)
        finally:
            if self._promotion is not None and self._promotion.done():
                self._promotion = None  # else cancelled meanwhile: close waits for it
        if new_dir is None:
            return False
        logger.info("%s Moved %s-%d to %s", self._prefix, *key, new_dir)
        await self._checkpoint_high_watermarks()
        if self.on_moved is not None:
            self.on_moved()
        return True
