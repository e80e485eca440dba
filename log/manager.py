"""LogManager: every partition log in one or more log dirs, plus the background tasks.

Each log dir holds partition dirs ``<topic>-<partition>/`` and the per-dir checkpoints
(recovery-point-offset-checkpoint, log-start-offset-checkpoint,
replication-offset-checkpoint). A ``.kafka_cleanshutdown`` marker written by ``shutdown`` and
removed (durably) at load tells the next start-up it may skip recovery, exactly as in Kafka;
without it every log is revalidated from its checkpointed recovery point. The marker holds the
broker epoch the broker stopped in (Kafka's ``{"version":0,"brokerEpoch":N}``): registering
again with it tells the controller the shutdown was clean, so the broker stays in the ELRs
it held (KIP-966).

Scheduled tasks (seed 002's table, Kafka's periods and key names), asyncio tasks on the
running loop, started by ``start()`` and stopped by ``shutdown()``:
- kafka-log-retention   every log.retention.check.interval.ms (300 s): deleteOldSegments;
- kafka-log-flusher     every log.flush.scheduler.interval.ms (Long.MAX: off): flush logs
                        whose flush.ms elapsed;
- kafka-recovery-point-checkpoint  every log.flush.offset.checkpoint.interval.ms (60 s);
- kafka-log-start-offset-checkpoint every log.flush.start.offset.checkpoint.interval.ms (60 s);
- kafka-log-cleaner     (log.cleaner.enable, default true) clean the dirtiest compacted log
                        (log/cleaner.py), then write its dir's cleaner-offset-checkpoint;
                        again at once while some log is dirty enough, else after
                        log.cleaner.backoff.ms (15 s). One cleaner: log.cleaner.threads is
                        not read (a pass yields to the event loop, see log/cleaner.py).
High watermarks belong to the replica manager, which calls checkpoint_high_watermarks.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping

from log.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    OffsetCheckpointFile,
    TopicPartition,
)
from log.cleaner import CleanResult, LogCleaner
from log.config import LONG_MAX, LogConfig, LogManagerConfig
from log.descriptors import (
    DescriptorReserve,
    OutOfDescriptorsError,
    default_reserve,
    is_out_of_descriptors,
)
from log.errors import RecordError
from log.fs import read_all, write_atomic
from log.future_log import FUTURE_DIR_SUFFIX, FutureLog, future_dir_name
from log.lazy_files import PooledFileSystem
from log.log import KafkaStorageError, Log
from log.rate_limited_log import RateLimitedLog
from log.runtime import Runtime

logger = logging.getLogger(__name__)
_limited = RateLimitedLog(logger)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
META_PROPERTIES = "meta.properties"  # what ``kraft-server format`` writes into a log dir
# The metadata log shares the first log dir but belongs to the quorum (raft/disk_log.py),
# never to the LogManager, as in Kafka: no partition log of this topic is ever opened,
# created or loaded here, whatever a metadata image or a directory listing says.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION_DIR = f"{CLUSTER_METADATA_TOPIC}-0"
DELETE_DIR_SUFFIX = "-delete"  # Kafka's LogManager.DeleteDirSuffix
HighWatermarkProvider = Callable[[TopicPartition], int | None]


def parse_topic_partition(name: str) -> TopicPartition | None:
    """``<topic>-<partition>`` -> (topic, partition), None for any other name."""
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        return None
    return topic, int(partition)


def partition_dir_name(topic: str, partition: int) -> str:
    """The dir of a partition log; ValueError for a name no partition log may have."""
    if not topic or "/" in topic or any(c.isspace() for c in topic) or partition < 0:
        raise ValueError(f"invalid topic partition {topic!r}-{partition}")
    if topic == CLUSTER_METADATA_TOPIC:
        raise ValueError(
            f"{topic}-{partition}: that topic is the metadata log's, not a partition's"
        )
    return f"{topic}-{partition}"


class LogManager:
    """Owns the logs of this broker (Kafka's LogManager)."""

    def __init__(
        self,
        runtime: Runtime,
        log_dirs: list[str],
        default_config: LogConfig,
        *,
        manager_config: LogManagerConfig | None = None,
        topic_configs: Mapping[str, LogConfig] | None = None,
        high_watermark_provider: HighWatermarkProvider | None = None,
        descriptors: DescriptorReserve | None = None,
    ) -> None:
        """No I/O here: ``await load_logs()`` (or ``startup()``) reads the dirs.
        ``descriptors``: the node's reserve (one is made from the config if not given)."""
        if not log_dirs:
            raise ValueError("at least one log dir is needed")
        if len(set(log_dirs)) != len(log_dirs):
            raise ValueError(f"duplicate log dirs in {log_dirs}")
        self.runtime = runtime
        self.fs = runtime.fs
        self.log_dirs = list(log_dirs)
        self.default_config = default_config
        self.manager_config = manager_config or LogManagerConfig()
        self.topic_configs: dict[str, LogConfig] = dict(topic_configs or {})
        self.high_watermark_provider = high_watermark_provider
        # The cleaner's bound: the last stable offset (set by the replica manager); the high
        # watermark when unset.
        self.last_stable_offset_provider: HighWatermarkProvider | None = None
        if descriptors is None:
            reserve = self.manager_config.open_files_reserve
            if reserve < 0:
                reserve = default_reserve(self.fs.descriptor_limit())
            descriptors = DescriptorReserve(self.fs, reserve)
        self.descriptors = descriptors
        # The logs' files give their descriptors back when idle and the node is short of
        # them (log/lazy_files.py); checkpoints and the like use the plain seam.
        self.files = PooledFileSystem(runtime.fs, lambda: descriptors.headroom() < 0)
        descriptors.reclaim = self.files.reclaim
        self._log_runtime = dataclasses.replace(runtime, fs=self.files)
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, str] = {}
        self._dir_locks = {d: asyncio.Lock() for d in self.log_dirs}
        self._tasks: list[asyncio.Task[None]] = []
        # Renamed ``-delete`` dirs of deleted logs, removed when their timer fires.
        self._pending_deletes: dict[str, asyncio.TimerHandle] = {}
        self._create_lock = asyncio.Lock()
        # Copies of logs being made in another dir (AlterReplicaLogDirs; log/future_log.py).
        self._futures: dict[TopicPartition, FutureLog] = {}
        # The dir asked for a replica not hosted yet (Kafka's preferredLogDirs): where its
        # log is created, if that dir is live then.
        self.preferred_dirs: dict[TopicPartition, str] = {}
        self._loaded = False
        self.had_clean_shutdown: dict[str, bool] = {}
        # The broker epoch every dir's clean shutdown marker names; -1 if any lacks one.
        self.previous_broker_epoch = -1
        # Log dirs taken offline by a disk failure, with the error that did it (Kafka's
        # LogDirFailureChannel); set once every dir has failed: the broker cannot go on.
        self.offline_dirs: dict[str, OSError] = {}
        self.all_dirs_offline = asyncio.Event()
        # Called with the dir each time one goes offline (the broker tells the controller).
        self.on_dir_offline: Callable[[str], None] | None = None
        self.cleaner = LogCleaner(
            now_ms=runtime.clock.now_ms,
            dedupe_buffer_bytes=self.manager_config.cleaner_dedupe_buffer_size,
            high_watermark=self._cleanable_bound_of,
            paused=lambda tp: tp in self._futures,  # a log being copied is not cleaned
        )

    # ---- loading ------------------------------------------------------------------------
    @property
    def recovered_from_unclean_shutdown(self) -> bool:
        """True if some log dir lacked the clean shutdown marker at load."""
        return not all(self.had_clean_shutdown.values())

    async def load_logs(self) -> None:
        """Load every partition dir of every log dir, recovering after an unclean shutdown."""
        assert not self._loaded, "load_logs twice"
        fs = self.fs
        epochs: set[int] = set()
        futures: list[tuple[str, str]] = []  # (log dir, name) of copies found
        for log_dir in self.log_dirs:
            fs.mkdir(log_dir)
            for name in fs.list_dir(log_dir):
                if name.endswith(DELETE_DIR_SUFFIX) and fs.is_dir(os.path.join(log_dir, name)):
                    self._remove_deleted_dir(os.path.join(log_dir, name))  # deleted before
                elif name.endswith(FUTURE_DIR_SUFFIX) and fs.is_dir(os.path.join(log_dir, name)):
                    futures.append((log_dir, name))  # once every current log is loaded
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
            marker_present = clean = fs.exists(marker)
            epochs.add(self._marker_epoch(marker) if marker_present else -1)
            partition_dirs = self._partition_dirs(log_dir)
            if not clean and partition_dirs:  # a fresh dir has nothing to recover
                logger.warning(
                    "%s: no clean shutdown marker, recovering its %d logs",
                    log_dir,
                    len(partition_dirs),
                )
            try:
                recovery_points = self._checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT).read()
            except CheckpointError as exc:
                # Safe fallback: recovering from offset 0 only costs time.
                logger.warning("%s; recovering all logs in %s from offset 0", exc, log_dir)
                recovery_points = {}
                clean = False
            self.had_clean_shutdown[log_dir] = clean
            log_starts = self._checkpoint(log_dir, LOG_START_OFFSET_CHECKPOINT).read()
            try:
                self.cleaner.first_dirty.update(
                    self._checkpoint(log_dir, CLEANER_OFFSET_CHECKPOINT).read()
                )
            except CheckpointError as exc:
                logger.warning("%s; its compacted logs are cleaned from the start", exc)
            for tp, path in partition_dirs:
                log = await Log.open(
                    self._log_runtime,
                    path,
                    self.topic_configs.get(tp[0], self.default_config),
                    recovery_point=recovery_points.get(tp, 0),
                    log_start_offset=log_starts.get(tp, 0),
                    had_clean_shutdown=clean,
                    checkpoint_hook=self._on_log_offsets_changed,
                )
                if tp in self._logs and await self._keep_one_of(tp, log, log_dir) is None:
                    continue
                self._logs[tp] = log
                self._adopt(tp, log, log_dir)
            if marker_present:
                fs.remove(marker)
            # Also makes the marker's removal durable before any new write can follow it.
            await self._write_dir_checkpoints(log_dir)
        for log_dir, name in futures:
            await self._load_future_log(log_dir, name)
        self.previous_broker_epoch = epochs.pop() if len(epochs) == 1 else -1
        self._loaded = True

    async def _load_future_log(self, log_dir: str, name: str) -> None:
        """A move between log dirs the last life did not finish (Kafka resumes it, and so
        do we): the copy is recovered like any log after a crash and kept as the
        partition's future log if it is still a prefix of the current log by their leader
        epochs, else started again empty; the replica manager resumes copying when it
        opens the partition. A copy of no current log elsewhere is removed."""
        path = os.path.join(log_dir, name)
        partition_dir = name.removesuffix(FUTURE_DIR_SUFFIX).rpartition(".")[0]
        tp = parse_topic_partition(partition_dir)
        source = None if tp is None else self._logs.get(tp)
        if tp is None or source is None or self._dir_of[tp] == log_dir or tp in self._futures:
            logger.warning("%s: removing %s, a copy of no log in another dir", log_dir, name)
            self._remove_deleted_dir(path)
            return
        log = await Log.open(self._log_runtime, path, source.config)
        log.on_offline = functools.partial(self.fail_log_dir, log_dir)
        if log_dir in self.offline_dirs:
            log.take_offline(self.offline_dirs[log_dir])
        future = FutureLog(source, log, log_dir, source.truncations)
        if not future.follows_source():
            logger.warning(
                "%s: the copy %s no longer matches %s (its log was truncated since): "
                "copying again from the start",
                log_dir,
                name,
                source.dir_path,
            )
            await log.truncate_fully_and_start_at(source.log_start_offset)
        logger.info(
            "%s: resuming the copy of %s-%d at offset %d (log end %d)",
            log_dir,
            *tp,
            log.log_end_offset,
            source.log_end_offset,
        )
        self._futures[tp] = future

    async def _keep_one_of(self, tp: TopicPartition, found: Log, log_dir: str) -> Log | None:
        """Two dirs hold ``tp``: a move between dirs was cut short after the copy took the
        partition's name and before the original was renamed away (``promote_future_log``).
        Both are the same log up to the moment of the swap, so the longer one is kept (the
        copy, which got every append after it, unless a crash lost those unsynced; on a tie
        the one in the dir listed first) and the other is removed as a deleted log is.
        Returns ``found`` if it is kept (the other is forgotten here), else None."""
        previous, previous_dir = self._logs[tp], self._dir_of[tp]
        keep_found = found.log_end_offset > previous.log_end_offset
        doomed_log, kept = (previous, found) if keep_found else (found, previous)
        logger.warning(
            "%s is in two log dirs after an interrupted move (log ends %d and %d): keeping "
            "%s, removing %s",
            tp,
            previous.log_end_offset,
            found.log_end_offset,
            kept.dir_path,
            doomed_log.dir_path,
        )
        if keep_found:
            del self._logs[tp]
            del self._dir_of[tp]
        await doomed_log.close()
        doomed = f"{doomed_log.dir_path.rstrip('/')}.duplicate{DELETE_DIR_SUFFIX}"
        self.fs.rename(doomed_log.dir_path, doomed)
        await self.fs.fsync_dir(previous_dir if keep_found else log_dir)
        self._remove_deleted_dir(doomed)
        if keep_found:
            await self._write_dir_checkpoints(previous_dir)
        return found if keep_found else None

    def _marker_epoch(self, path: str) -> int:
        """The broker epoch a clean shutdown marker names; -1 for an empty (older),
        unreadable or garbled one, which only costs the broker its ELR places, never data."""
        try:
            epoch = json.loads(read_all(self.fs, path) or b"{}").get("brokerEpoch", -1)
        except (OSError, ValueError, AttributeError):
            return -1
        return epoch if type(epoch) is int else -1

    async def startup(self) -> None:
        """load_logs() then start()."""
        await self.load_logs()
        self.start()

    def start(self) -> None:
        """Start the scheduled tasks on the running loop."""
        assert self._loaded, "start before load_logs"
        assert not self._tasks, "started twice"
        config = self.manager_config
        loop = asyncio.get_running_loop()
        schedule = [
            ("kafka-log-retention", config.retention_check_interval_ms, self.cleanup_logs),
            ("kafka-log-flusher", config.flush_scheduler_interval_ms, self.flush_dirty_logs),
            (
                "kafka-recovery-point-checkpoint",
                config.flush_offset_checkpoint_interval_ms,
                self.checkpoint_log_recovery_offsets,
            ),
            (
                "kafka-log-start-offset-checkpoint",
                config.flush_start_offset_checkpoint_interval_ms,
                self.checkpoint_log_start_offsets,
            ),
        ]
        for name, period_ms, task in schedule:
            if period_ms >= LONG_MAX:
                continue  # Kafka's "never"
            self._tasks.append(
                loop.create_task(self._run_periodically(name, period_ms, task), name=name)
            )
        if config.cleaner_enable:
            self._tasks.append(loop.create_task(self._run_cleaner(), name="kafka-log-cleaner"))

    async def _run_periodically(
        self, name: str, period_ms: int, task: Callable[[], Awaitable[object]]
    ) -> None:
        await asyncio.sleep(self.manager_config.initial_task_delay_ms / 1000)
        while True:  # ends when shutdown cancels the task
            try:
                await task()
            except OSError as exc:
                if is_out_of_descriptors(exc):  # not the disk: the next period tries again
                    _limited.log(
                        f"task/{name}",
                        logging.WARNING,
                        "Scheduled task %s is out of file descriptors: %s",
                        name,
                        exc,
                    )
                else:  # a failing disk takes its logs offline; the others are still served
                    logger.exception("scheduled task %s failed", name)
            except (RecordError, CheckpointError):
                logger.exception("scheduled task %s failed", name)
            await asyncio.sleep(period_ms / 1000)

    async def _run_cleaner(self) -> None:
        """Kafka's CleanerThread: clean while some log is dirty enough, else back off."""
        await asyncio.sleep(self.manager_config.initial_task_delay_ms / 1000)
        while True:  # ends when shutdown cancels the task
            try:
                cleaned = await self.clean_dirtiest_log() is not None
            except (OSError, CheckpointError):
                logger.exception("the log cleaner's pass failed")
                cleaned = False
            # A pass moves its log's first dirty offset on, so cleaning again at once
            # makes progress; sleep(0) still lets every other task run in between.
            await asyncio.sleep(0 if cleaned else self.manager_config.cleaner_backoff_ms / 1000)

    async def shutdown(self, broker_epoch: int = -1) -> None:
        """Stop the tasks, close every log (flushing it), write the checkpoints and, per
        dir where every log closed cleanly, the clean shutdown marker naming
        ``broker_epoch``."""
        for handle in self._pending_deletes.values():
            handle.cancel()  # the next load removes what is left
        self._pending_deletes = {}
        for future in self._futures.values():
            with contextlib.suppress(OSError):  # the next load removes the dir anyway
                await future.log.close()
        self._futures = {}
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        for log_dir in self.log_dirs:
            all_closed = True
            for tp in self._partitions_in(log_dir):
                try:
                    await self._logs[tp].close()
                except OSError:
                    logger.exception("could not close the log of %s", tp)
                    all_closed = False
            if log_dir in self.offline_dirs:
                continue  # nothing more is written there: the next start-up recovers it
            try:
                await self._write_dir_checkpoints(log_dir)
                if all_closed:
                    marker = json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode()
                    await write_atomic(self.fs, os.path.join(log_dir, CLEAN_SHUTDOWN_FILE), marker)
            except OSError as exc:
                self.fail_log_dir(log_dir, exc)  # one line; no marker: the next start recovers

    # ---- logs ---------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def all_logs(self) -> list[tuple[TopicPartition, Log]]:
        """Every log, sorted by (topic, partition)."""
        return sorted(self._logs.items(), key=lambda item: item[0])

    def log_dir_of(self, topic: str, partition: int) -> str | None:
        return self._dir_of.get((topic, partition))

    async def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> Log:
        """The partition's log, created (in the log dir with the fewest logs) if missing."""
        tp = (topic, partition)
        async with self._create_lock:
            existing = self._logs.get(tp)
            if existing is not None:
                return existing
            if config is not None:
                self.topic_configs[topic] = config
            live = self.live_log_dirs
            if not live:
                raise KafkaStorageError(errno.EIO, "every log dir is offline")
            if not self.descriptors.admits_logs(1):
                raise OutOfDescriptorsError(
                    errno.EMFILE,
                    f"no log for {topic}-{partition}: {self.descriptors.in_use()} of "
                    f"{self.fs.descriptor_limit()} descriptors are open and "
                    f"{self.descriptors.reserve} are kept in reserve (open.files.reserve; new logs "
                    "stop at 1.5 times it)",
                )
            counts = dict.fromkeys(live, 0)
            for log_dir in self._dir_of.values():
                if log_dir in counts:
                    counts[log_dir] += 1
            log_dir = min(live, key=lambda d: counts[d])  # ties: first listed
            preferred = self.preferred_dirs.pop(tp, None)
            if preferred in counts:
                log_dir = preferred
            log = await Log.open(
                self._log_runtime,
                os.path.join(log_dir, partition_dir_name(topic, partition)),
                config or self.topic_configs.get(topic, self.default_config),
                had_clean_shutdown=True,
                checkpoint_hook=self._on_log_offsets_changed,
            )
            self._logs[tp] = log
            self._adopt(tp, log, log_dir)
            return log

    def _adopt(self, tp: TopicPartition, log: Log, log_dir: str) -> None:
        self._dir_of[tp] = log_dir
        log.on_offline = functools.partial(self.fail_log_dir, log_dir)
        if log_dir in self.offline_dirs:
            log.take_offline(self.offline_dirs[log_dir])

    # ---- disk failures --------------------------------------------------------------------
    @property
    def live_log_dirs(self) -> list[str]:
        return [d for d in self.log_dirs if d not in self.offline_dirs]

    def fail_log_dir(self, log_dir: str, exc: OSError) -> None:
        """Take ``log_dir`` offline after a disk error in it (ENOSPC, EIO, ...), as Kafka's
        LogDirFailureChannel does: every partition in it answers KAFKA_STORAGE_ERROR from now
        on, nothing more is written there (checkpoints, clean shutdown marker), and the
        other dirs keep serving. One line says so; the dir comes back with a restart once
        the disk is repaired (start-up recovers its logs from their checkpoints)."""
        if log_dir in self.offline_dirs:
            return
        if is_out_of_descriptors(exc):
            # Nothing on disk is wrong: the operation failed and is tried again later.
            _limited.log(
                "out-of-descriptors",
                logging.WARNING,
                "Out of file descriptors in log dir %s (%s): it stays online; raise the "
                "open-files limit or open.files.reserve",
                log_dir,
                exc,
            )
            return
        self.offline_dirs[log_dir] = exc
        partitions = self._partitions_in(log_dir)
        for tp in partitions:
            self._logs[tp].take_offline(exc)
        for future in self._futures.values():
            if future.log_dir == log_dir:
                future.log.take_offline(exc)  # never swapped in (its mover drops it)
        logger.error(
            "Log dir %s is offline after a disk error (%s): its %d partition(s) answer "
            "KAFKA_STORAGE_ERROR until the disk is repaired and the broker restarted",
            log_dir,
            exc,
            len(partitions),
        )
        if self.on_dir_offline is not None:
            self.on_dir_offline(log_dir)
        if not self.live_log_dirs:
            self.all_dirs_offline.set()

    async def delete_log(self, topic: str, partition: int, unique_id: str) -> str | None:
        """Close the partition's log and rename its directory to Kafka's
        ``<topic>-<partition>.<unique_id>-delete`` (durably: no restart loads it again),
        then remove it file.delete.delay.ms later (Kafka's asyncDelete), so a crash never
        leaves a half-removed dir under a partition's name. A restart in between removes it
        at load. The new path, None if there was no such log."""
        detached = await self._detach((topic, partition), "deletion")
        if detached is None:
            return None
        log, log_dir = detached
        doomed = f"{log.dir_path.rstrip('/')}.{unique_id}{DELETE_DIR_SUFFIX}"
        self.fs.rename(log.dir_path, doomed)
        await self._dir_changed(log_dir)
        self._remove_later(doomed, log.config.file_delete_delay_ms)
        return doomed

    def _remove_later(self, doomed: str, delay_ms: int) -> None:
        """Remove the ``-delete`` dir ``doomed`` ``delay_ms`` from now (Kafka's
        file.delete.delay.ms), at once for 0."""
        if delay_ms <= 0:
            self._remove_deleted_dir(doomed)
            return
        loop = asyncio.get_running_loop()
        self._pending_deletes[doomed] = loop.call_later(
            delay_ms / 1000, self._remove_deleted_dir, doomed
        )

    def _remove_deleted_dir(self, path: str) -> None:
        """Remove a ``-delete`` directory and its files; on a disk error what is left is
        removed at the next load."""
        self._pending_deletes.pop(path, None)
        fs = self.fs
        try:
            for name in fs.list_dir(path):
                fs.remove(os.path.join(path, name))
            fs.remove_dir(path)
        except OSError:
            logger.exception("could not remove %s", path)

    async def mark_stray(self, topic: str, partition: int, unique_id: str) -> str | None:
        """Close the partition's log and rename its directory to Kafka's stray name
        (``<topic>-<partition>.<unique_id>-stray``): kept for an operator, never loaded or
        served again. The new path, None if there was no such log."""
        detached = await self._detach((topic, partition), "marking it stray")
        if detached is None:
            return None
        log, log_dir = detached
        stray = f"{log.dir_path.rstrip('/')}.{unique_id}-stray"
        self.fs.rename(log.dir_path, stray)
        await self._dir_changed(log_dir)
        return stray

    # ---- moving a replica between log dirs (KIP-113) --------------------------------------
    def resolve_log_dir(self, path: str) -> str | None:
        """The configured log dir ``path`` names (as written in ``log.dirs``, or the same
        dir as an absolute path, which is what Kafka's tools send), None if none."""
        if path in self.log_dirs:
            return path
        wanted = os.path.normpath(os.path.abspath(path))
        for log_dir in self.log_dirs:
            if os.path.normpath(os.path.abspath(log_dir)) == wanted:
                return log_dir
        return None

    def future_log_of(self, topic: str, partition: int) -> FutureLog | None:
        """The copy of the partition's log being made in another dir, if any."""
        return self._futures.get((topic, partition))

    def future_logs(self) -> list[tuple[TopicPartition, FutureLog]]:
        """Every copy being made, sorted by (topic, partition)."""
        return sorted(self._futures.items(), key=lambda item: item[0])

    async def create_future_log(
        self, topic: str, partition: int, log_dir: str, unique_id: str
    ) -> FutureLog:
        """Begin a copy of the partition's log in ``log_dir`` (another live dir), in
        ``<topic>-<partition>.<unique_id>-future``; the existing copy if one is being made
        there already. KafkaStorageError if the dir is offline, ValueError for an unknown
        dir, the log's own dir, or a partition without a log here."""
        tp = (topic, partition)
        source = self._logs.get(tp)
        if log_dir not in self.log_dirs:
            raise ValueError(f"{log_dir} is not one of the log dirs {self.log_dirs}")
        if source is None or self._dir_of[tp] == log_dir:
            raise ValueError(f"{topic}-{partition} has no log here to copy into {log_dir}")
        if log_dir in self.offline_dirs:
            raise KafkaStorageError(errno.EIO, f"log dir {log_dir} is offline")
        existing = self._futures.get(tp)
        if existing is not None:
            if existing.log_dir == log_dir:
                return existing
            await self.abandon_future_log(topic, partition)
        path = os.path.join(
            log_dir, future_dir_name(partition_dir_name(topic, partition), unique_id)
        )
        log = await Log.open(self._log_runtime, path, source.config, had_clean_shutdown=True)
        # A disk error in the copy is one of its dir, as any other log's there.
        log.on_offline = functools.partial(self.fail_log_dir, log_dir)
        future = FutureLog(source, log, log_dir, source.truncations)
        self._futures[tp] = future
        return future

    async def abandon_future_log(self, topic: str, partition: int) -> None:
        """Stop the copy of the partition's log, if one is being made, and remove it."""
        future = self._futures.pop((topic, partition), None)
        if future is None:
            return
        try:
            await future.log.close()
        except OSError:
            logger.exception("closing the copy of %s-%d failed", topic, partition)
        doomed = f"{future.log.dir_path.rstrip('/')}{DELETE_DIR_SUFFIX}"
        try:
            self.fs.rename(future.log.dir_path, doomed)
        except OSError:  # the next load removes the -future dir
            logger.exception("could not remove the copy %s", future.log.dir_path)
            return
        self._remove_deleted_dir(doomed)

    async def promote_future_log(
        self, topic: str, partition: int, unique_id: str, swap: Callable[[Log], None]
    ) -> str | None:
        """Replace the partition's log with its caught-up copy (Kafka's
        replaceCurrentWithFutureLog), calling ``swap(new_log)`` in the same synchronous
        step, so no append lands in the old log after the copy's last batch. The copy is
        flushed first; then, with no await in between, the rest is copied
        (``FutureLog.finish``), the copy's dir takes the partition's name in its log dir and
        the copy is this partition's log. Only after that rename is durable is the old dir
        renamed ``<topic>-<partition>.<unique_id>-delete`` and removed as a deleted log's
        is: a crash before leaves either the old log alone (and the copy, resumed at load)
        or both, which the load resolves (``_keep_one_of``). Returns the new log dir, None
        if the copy is not caught up yet (copy more and try again)."""
        tp = (topic, partition)
        future = self._futures[tp]
        source = self._logs.get(tp)
        assert future.source is source, (tp, future, source)
        if not source.is_online or not future.log.is_online:
            return None
        await future.copy_files()
        await future.log.flush()
        if self._futures.get(tp) is not future or self._logs.get(tp) is not source:
            return None  # abandoned or deleted while flushing
        if not source.is_online or not future.log.is_online or not future.finish():
            return None
        # ---- synchronous from here to the fsync: nothing appends in between ----
        new_dir, old_dir = future.log_dir, self._dir_of[tp]
        future.log.rename_dir(os.path.join(new_dir, partition_dir_name(topic, partition)))
        del self._futures[tp]
        future.log.checkpoint_hook = self._on_log_offsets_changed
        future.log.update_config(source.config)  # any topic config change during the copy
        self._logs[tp] = future.log
        self._adopt(tp, future.log, new_dir)
        swap(future.log)
        # ---- end of the synchronous step ----
        try:
            await self.fs.fsync_dir(new_dir)
            await self._write_dir_checkpoints(new_dir)
        except OSError as exc:
            self.fail_log_dir(new_dir, exc)
            raise
        try:
            await source.close()
        except OSError:
            logger.exception("closing the moved log of %s-%d failed", topic, partition)
        doomed = f"{source.dir_path.rstrip('/')}.{unique_id}{DELETE_DIR_SUFFIX}"
        try:
            self.fs.rename(source.dir_path, doomed)
            await self._dir_changed(old_dir)
        except OSError as exc:
            self.fail_log_dir(old_dir, exc)
            raise
        self._remove_later(doomed, source.config.file_delete_delay_ms)
        return new_dir

    async def _detach(self, tp: TopicPartition, why: str) -> tuple[Log, str] | None:
        """Forget a partition's log (and any copy of it being made) and close it; (the log,
        its log dir), None if unknown."""
        await self.abandon_future_log(*tp)
        log = self._logs.pop(tp, None)
        if log is None:
            return None
        log_dir = self._dir_of.pop(tp)
        self.cleaner.forget(tp)  # a log made again here starts dirty
        try:
            await log.close()
        except OSError:
            logger.exception("closing %s before %s failed", tp, why)
        return log, log_dir

    async def _dir_changed(self, log_dir: str) -> None:
        """Make a partition dir's removal or rename durable, and the checkpoints agree."""
        await self.fs.fsync_dir(log_dir)
        await self._write_dir_checkpoints(log_dir)

    def update_config(self, topic: str, config: LogConfig) -> None:
        """Apply a topic config change to its existing logs and future ones."""
        self.topic_configs[topic] = config
        for (log_topic, _), log in self.all_logs():
            if log_topic == topic:
                log.update_config(config)

    # ---- scheduled work -----------------------------------------------------------------
    async def cleanup_logs(self) -> int:
        """Retention for every online log; returns the number of segments deleted."""
        total = 0
        for tp, log in self.all_logs():
            if log.is_online:
                total += await log.delete_old_segments(high_watermark=self._high_watermark_of(tp))
        return total

    def _high_watermark_of(self, tp: TopicPartition) -> int | None:
        provider = self.high_watermark_provider  # set by the replica manager after start-up
        return provider(tp) if provider is not None else None

    def _cleanable_bound_of(self, tp: TopicPartition) -> int | None:
        provider = self.last_stable_offset_provider
        return provider(tp) if provider is not None else self._high_watermark_of(tp)

    async def clean_dirtiest_log(self) -> CleanResult | None:
        """One log cleaner pass over the dirtiest compacted log, then its dir's
        cleaner-offset-checkpoint; None when no log is dirty enough."""
        chosen = self.cleaner.dirtiest(self.all_logs())
        if chosen is None:
            return None
        tp, log = chosen
        result = await self.cleaner.clean(tp, log)
        if self._logs.get(tp) is not log:
            self.cleaner.forget(tp)  # deleted or made a stray during the pass
            return None
        log_dir = self._dir_of.get(tp)
        if result is not None and log_dir is not None:
            await self._write_cleaner_checkpoint(log_dir)
        return result

    async def _write_cleaner_checkpoint(self, log_dir: str) -> None:
        async with self._dir_locks[log_dir]:
            entries = self.cleaner.checkpoint_entries(self._partitions_in(log_dir))
            await self._write_checkpoint(log_dir, CLEANER_OFFSET_CHECKPOINT, entries)

    async def flush_dirty_logs(self) -> None:
        """Flush every online log whose flush.ms has elapsed since its last flush."""
        now_ms = self.runtime.clock.now_ms()
        for tp, log in self.all_logs():
            if log.is_online and now_ms - log.last_flush_ms >= log.config.flush_ms:
                try:
                    await log.flush()
                except OSError:
                    logger.exception("flushing %s failed", tp)

    async def checkpoint_log_recovery_offsets(self) -> None:
        await self._checkpoint_live_dirs(RECOVERY_POINT_CHECKPOINT, "recovery_point")

    async def checkpoint_log_start_offsets(self) -> None:
        await self._checkpoint_live_dirs(LOG_START_OFFSET_CHECKPOINT, "log_start_offset")

    async def _checkpoint_live_dirs(self, name: str, attribute: str) -> None:
        """One checkpoint file in every live dir. A dir whose write fails goes offline with
        one line from ``fail_log_dir`` and the dirs after it are still written: a traceback
        per period for a disk already reported, or a healthy dir left stale, helps nobody."""
        for log_dir in self.live_log_dirs:
            with contextlib.suppress(OSError):  # reported by fail_log_dir
                await self._write_offsets(log_dir, name, attribute)

    async def checkpoint_high_watermarks(
        self, high_watermarks: Mapping[TopicPartition, int]
    ) -> None:
        """Write replication-offset-checkpoint of every log dir from the caller's map."""
        unknown = sorted(tp for tp in high_watermarks if tp not in self._dir_of)
        if unknown:
            raise ValueError(f"high watermarks for partitions not hosted here: {unknown}")
        for log_dir in self.live_log_dirs:
            offsets = {tp: o for tp, o in high_watermarks.items() if self._dir_of[tp] == log_dir}
            async with self._dir_locks[log_dir]:
                await self._write_checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT, offsets)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The replication-offset-checkpoint entries of every log dir."""
        result: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            result.update(self._checkpoint(log_dir, REPLICATION_OFFSET_CHECKPOINT).read())
        return result

    # ---- helpers ------------------------------------------------------------------------
    def _partition_dirs(self, log_dir: str) -> list[tuple[TopicPartition, str]]:
        """The partition logs in ``log_dir``: ``<topic>-<partition>`` dirs, never the
        metadata log's (nor any other of its topic)."""
        found = []
        for name in self.fs.list_dir(log_dir):
            path = os.path.join(log_dir, name)
            tp = parse_topic_partition(name)
            if tp is None or tp[0] == CLUSTER_METADATA_TOPIC or not self.fs.is_dir(path):
                continue
            if self.fs.exists(os.path.join(path, META_PROPERTIES)):
                # e.g. a cluster node's dir ("broker-4") nested in this one: never loaded,
                # served or set aside as a stray of ours.
                logger.warning(
                    "%s is a formatted log dir (it has %s), not a partition: left alone",
                    path,
                    META_PROPERTIES,
                )
                continue
            found.append((tp, path))
        return found

    def _checkpoint(self, log_dir: str, name: str) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(self.fs, os.path.join(log_dir, name))

    def _partitions_in(self, log_dir: str) -> list[TopicPartition]:
        return sorted(tp for tp, d in self._dir_of.items() if d == log_dir)

    async def _write_offsets(self, log_dir: str, name: str, attribute: str) -> None:
        async with self._dir_locks[log_dir]:
            offsets = {
                tp: getattr(self._logs[tp], attribute) for tp in self._partitions_in(log_dir)
            }
            await self._write_checkpoint(log_dir, name, offsets)

    async def _write_checkpoint(
        self, log_dir: str, name: str, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Write one checkpoint file of a live dir; a disk error takes the dir offline."""
        if log_dir in self.offline_dirs:
            return  # what it holds is recovered from the last good checkpoint at start-up
        try:
            await self._checkpoint(log_dir, name).write(offsets)
        except OSError as exc:
            self.fail_log_dir(log_dir, exc)
            raise

    async def _write_dir_checkpoints(self, log_dir: str) -> None:
        await self._write_offsets(log_dir, RECOVERY_POINT_CHECKPOINT, "recovery_point")
        await self._write_offsets(log_dir, LOG_START_OFFSET_CHECKPOINT, "log_start_offset")
        partitions = self._partitions_in(log_dir)
        if self.cleaner.checkpoint_entries(partitions) or self.fs.exists(
            os.path.join(log_dir, CLEANER_OFFSET_CHECKPOINT)
        ):
            await self._write_cleaner_checkpoint(log_dir)

    async def _on_log_offsets_changed(self, log: Log) -> None:
        """A log truncated or moved its start offset: checkpoint its dir now, so a crash
        cannot pair a stale (too high) recovery point or too low start with the new data."""
        for tp, candidate in self._logs.items():
            if candidate is log:
                # Below the first dirty offset every key appears once; a truncation must
                # pull it back, or re-appended records there would never be mapped.
                self.cleaner.truncated(tp, log.log_end_offset)
                await self._write_dir_checkpoints(self._dir_of[tp])
                return
