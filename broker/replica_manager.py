"""The partitions this broker leads: their logs, high watermarks and the waits on them (the
leader side of Kafka's ReplicaManager). No protocol here: broker/data_plane.py turns Produce,
Fetch and ListOffsets requests into these calls and their results into responses.

Which partitions: the published MetadataImage says. ``on_image`` (a MetadataPublisher)
hands each new image to a reconciler task, which creates the log of every partition assigned
here and deletes the logs of partitions no longer assigned here (the topic was deleted, or
the partition moved to other brokers, as Kafka's StopReplica with delete does), one image
at a time, in order. It starts only once the broker has caught up with the
metadata log (``start``), so no half-replayed image ever decides what to delete. A log on
disk that the caught-up image does not assign here, or whose ``partition.metadata`` names
another topic id (the topic was deleted, perhaps recreated, while this broker was down), is
a stray, as Kafka calls it: renamed to ``<topic>-<partition>.<id>-stray`` and never served,
but kept for an operator to remove.

Replication (docs/replication.md): each reconciled change moves the partition's local
replica state machine (broker/partition.py); a follower is handed to the fetcher of its
leader's broker (broker/fetcher.py); a leader serves its followers' fetches
(``read_for_follower``), which move their progress, the high watermark and the ISR; ISR
changes go to the controller as AlterPartition. Requests that wait (acks=-1 produce, fetch
long-poll) park in a purgatory keyed by partition (broker/purgatory.py) and are woken only
by changes to their partitions.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import random
import uuid
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker.alter_partition import AlterPartitionManager
from broker.bugs import (
    ACK_BEFORE_FETCH,
    HW_BEFORE_DIVERGENCE_CHECK,
    HW_BEFORE_ISR,
    ISR_SHRINK_LOCAL,
    NO_EPOCH_BUMP,
    SKIP_SEQUENCE_CHECK,
    TRUNCATE_TO_HW,
    TXN_NO_ABORTED_LIST,
)
from broker.controller_channel import ControllerSender
from broker.delayed_produce import AppendResult, wait_for_commit
from broker.fetcher import FetcherConfig, ReplicaFetcherManager
from broker.log_dir_mover import UNTHROTTLED, ReplicaAlterLogDirsManager
from broker.metrics import BrokerTopicMetrics
from broker.partition import IllegalReplicaTransition, Partition, ReplicaState
from broker.producer_snapshot import (
    SnapshotEntry,
    latest_snapshot,
    remove_snapshots_after,
    write_snapshot,
)
from broker.producer_state import PRODUCER_ID_EXPIRATION_MS, ProducerState, Verdict
from broker.purgatory import DelayedOperations
from broker.txn_verification import TxnVerifier
from log.batch import BatchHeader, parse_header
from log.checkpoint import CheckpointError
from log.clock import WallClock
from log.config import LogConfig
from log.descriptors import is_out_of_descriptors
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.epoch_cache import UNDEFINED_EPOCH
from log.errors import RecordError
from log.fs import FileRegion, read_all, write_atomic
from log.future_log import future_dir_name
from log.log import KafkaStorageError, Log, OffsetOutOfRangeError
from log.manager import LogManager
from log.rate_limited_log import RateLimitedLog
from log.txn_index import AbortedTxn
from log.validator import (
    PRODUCE_DECOMPRESSED_BYTES_MAX,
    WALK_SLICE_RECORDS,
    ValidatedBatch,
    validate_records,
    validate_records_in_slices,
)
from metadata.config_defs import (
    ALTER_LOG_DIRS_THROTTLE,
    config_layers,
    dynamic_overrides,
    dynamic_value,
)
from metadata.delta import TopicPartition, local_changes
from metadata.image import EMPTY, MetadataImage, PartitionRegistration, TopicImage
from metadata.records import ELR_FEATURE, NO_LEADER, TOPIC_RESOURCE

logger = logging.getLogger("broker.replica_manager")
_limited = RateLimitedLog(logger)

PARTITION_METADATA_FILE = "partition.metadata"
RECONCILE_RETRY_S = 1.0  # after a disk error, how soon the same image is tried again
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
READ_UNCOMMITTED = 0
READ_COMMITTED = 1
HIGH_WATERMARK_OFFSET = -1  # DeleteRecords: up to the high watermark
NO_EPOCH = -1
FILE_NAME_MAX = 255  # bytes in one path component on the filesystems Kafka runs on
# (the leader's partition, its high watermark before the move): see ReplicaManager.
HighWatermarkListener = Callable[[Partition, int], None]
# (the leader's partition, the producer's retried batch, the offset answered for it).
DuplicateListener = Callable[[Partition, BatchHeader, int], None]


# The keys ReplicationConfig and its FetcherConfig read (kraft/config.py knows them, so they
# get no "isn't a known config" warning).
REPLICATION_KEYS = frozenset(
    {
        "replica.lag.time.max.ms",
        "replica.high.watermark.checkpoint.interval.ms",
        "transaction.partition.verification.enable",
        "replica.fetch.backoff.ms",
        "replica.fetch.max.bytes",
        "replica.fetch.min.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.wait.max.ms",
        "replica.socket.timeout.ms",
    }
)


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """The broker's replication settings, under Kafka's names."""

    lag_time_max_ms: int = 30_000  # replica.lag.time.max.ms
    high_watermark_checkpoint_interval_ms: int = 5000  # replica.high.watermark.checkpoint...
    min_insync_replicas: int = 1  # min.insync.replicas (the broker default)
    inter_broker_listener_name: str | None = None  # None: a broker's first listener
    fetcher: FetcherConfig = field(default_factory=FetcherConfig)
    transaction_partition_verification_enable: bool = True  # KIP-890 part 1

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, object], listener_name: str | None = None
    ) -> ReplicationConfig:
        return cls(
            lag_time_max_ms=int(str(properties.get("replica.lag.time.max.ms", 30_000))),
            high_watermark_checkpoint_interval_ms=int(
                str(properties.get("replica.high.watermark.checkpoint.interval.ms", 5000))
            ),
            min_insync_replicas=int(str(properties.get("min.insync.replicas", 1))),
            inter_broker_listener_name=listener_name,
            fetcher=FetcherConfig.from_properties(dict(properties)),
            transaction_partition_verification_enable=str(
                properties.get("transaction.partition.verification.enable", "true")
            ).lower()
            == "true",
        )


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | FileRegion = b""  # a consumer or follower read: a region, unread
    diverging_epoch: int = UNDEFINED_EPOCH  # with diverging_end_offset: where to truncate
    diverging_end_offset: int = -1
    last_stable_offset: int = -1
    # read_committed: the aborted transactions overlapping the records read (else None)
    aborted_transactions: tuple[AbortedTxn, ...] | None = None


@dataclass(frozen=True, slots=True)
class OffsetResult:
    error: ErrorCode
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = NO_EPOCH


class ReplicaManager:
    """The partition replicas of one broker, reconciled from metadata images."""

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        default_config: LogConfig,
        rng: random.Random,
        clock: WallClock,
        *,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        config: ReplicationConfig | None = None,
        channel: ControllerSender | None = None,
        broker_epoch: Callable[[], int] = lambda: -1,
        bugs: frozenset[str] = frozenset(),
        high_watermark_listener: HighWatermarkListener | None = None,
        duplicate_listener: DuplicateListener | None = None,
    ) -> None:
        self.node_id = node_id
        self.bugs = bugs  # planted (broker/bugs.py); simulator only
        # Told of every move of a leader's high watermark, at the moment it moves: the
        # simulator checks then that the ISR it counted holds the newly committed batches.
        self._high_watermark_listener = high_watermark_listener
        # Told of every produce answered without error as a duplicate, as the answer leaves:
        # the simulator checks then that the offset named holds that batch.
        self._duplicate_listener = duplicate_listener
        self._clock = clock
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._rng = rng  # stray names: the runtime's Random keeps simulated runs replayable
        self.logs = logs
        self.default_config = default_config
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Partitions whose log could not be opened or configured: KAFKA_STORAGE_ERROR until
        # a restart, while every other partition is served (Kafka's offline replicas).
        self._offline: set[tuple[str, int]] = set()
        # Partitions assigned here whose log was refused to keep the descriptor reserve
        # (log/descriptors.py): tried again every RECONCILE_RETRY_S, served once opened.
        self._waiting_for_descriptors: set[tuple[str, int]] = set()
        self._descriptor_retry: asyncio.TimerHandle | None = None
        self._image: MetadataImage | None = None  # the image the partitions reflect
        self._latest: MetadataImage | None = None
        self._wake = asyncio.Event()
        # One big produced batch validated in slices at a time (log/validator.py).
        self._validation_lock = asyncio.Lock()
        self._reconciled = asyncio.Event()  # set and replaced after each reconciled image
        self._task: asyncio.Task[None] | None = None
        self.config = config or ReplicationConfig()
        # ISR changes go to the controller; with no channel the ISR never changes.
        self._alter_partition: AlterPartitionManager | None = None
        if channel is not None:
            self._alter_partition = AlterPartitionManager(
                node_id,
                channel,
                broker_epoch,
                lambda: self._latest,
                self._isr_committed,
                self.config.fetcher.backoff_ms / 1000,
            )
        self.delayed: DelayedOperations[tuple[str, int]] = DelayedOperations()
        self.fetchers = ReplicaFetcherManager(
            node_id, self._endpoint, clock, self.config.fetcher, on_failure=self._wake.set
        )
        self._shrink_task: asyncio.Task[None] | None = None
        self._checkpoint_task: asyncio.Task[None] | None = None
        self._checkpointed: dict[tuple[str, int], int] = {}  # high watermarks at start-up
        self.txn_verifier = TxnVerifier(
            node_id, lambda: self._latest, self._endpoint, connector=self.config.fetcher.connector
        )
        self.topic_metrics: BrokerTopicMetrics | None = None  # data_plane counts into it
        # AlterReplicaLogDirs: replicas' logs copied into other log dirs and swapped in.
        self.log_dir_mover = ReplicaAlterLogDirsManager(
            node_id,
            logs,
            self._partitions.get,
            lambda: uuid.UUID(int=self._rng.getrandbits(128), version=4).hex,
            self._checkpoint_high_watermarks,
            self._alter_log_dirs_throttle,
        )
        self.log_dir_mover.on_failure = self._wake.set

    def _alter_log_dirs_throttle(self) -> int:
        """The bytes/s a move between log dirs may copy: this broker's dynamic
        replica.alter.log.dirs.io.max.bytes.per.second, else the cluster default's."""
        image = self._image
        value = (
            None
            if image is None
            else dynamic_value(image.configs, ALTER_LOG_DIRS_THROTTLE, broker=self.node_id)
        )
        return UNTHROTTLED if value is None else int(value)

    # ---- metadata --------------------------------------------------------------------------
    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        self._latest = after
        self._wake.set()

    def start(self, image: MetadataImage) -> asyncio.Task[None]:
        """Begin acting on images, from ``image`` (the caught-up one) onwards; the returned
        task fails if reconciling ever does, so the node's owner can fail loudly with it."""
        self._latest = image
        self._wake.set()
        # The log cleaner leaves unfinished transactions alone (Kafka's LSO bound).
        self.logs.last_stable_offset_provider = self.last_stable_offset_of
        loop = asyncio.get_running_loop()
        try:
            self._checkpointed = self.logs.read_high_watermarks()
        except (OSError, CheckpointError):
            logger.exception("[ReplicaManager id=%d] reading high watermarks", self.node_id)
        self._task = loop.create_task(self._reconcile_forever())
        self.log_dir_mover.start()
        self._checkpoint_task = loop.create_task(self._checkpoint_high_watermarks_forever())
        if self._alter_partition is not None:
            self._shrink_task = loop.create_task(self._shrink_isr_forever(self._alter_partition))
        return self._task

    async def wait_reconciled(self, offset: int) -> None:
        """Until an image at ``offset`` or later is reflected in the partitions (re-raises
        what stopped the reconciler, rather than waiting for it forever)."""
        while self._image is None or self._image.offset < offset:  # each pass: one image
            if self._task is not None and self._task.done():
                self._task.result()
                raise RuntimeError("the reconciler stopped")
            await self._reconciled.wait()

    async def close(self) -> None:
        if self._descriptor_retry is not None:
            self._descriptor_retry.cancel()
        tasks = [self._task, self._shrink_task, self._checkpoint_task]
        for task in tasks:
            if task is not None:
                task.cancel()
        for task in tasks:
            if task is not None:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self._alter_partition is not None:
            await self._alter_partition.close()
        await self.log_dir_mover.close()
        await self.fetchers.close()
        await self.txn_verifier.close()
        self.delayed.notify_all()
        await self._write_producer_snapshots()
        if self._checkpoint_task is not None:
            await self._checkpoint_high_watermarks()  # Kafka checkpoints them at shutdown too

    async def _write_producer_snapshots(self) -> None:
        """At shutdown, nothing appends any more: each online log's producer state as of its
        log end, for the next clean start (broker/producer_snapshot.py)."""
        for key, partition in sorted(self._partitions.items()):
            log = partition.log
            if self.logs.get_log(*key) is not log or not log.is_online:
                continue
            try:
                await write_snapshot(
                    self.logs.fs,
                    log.dir_path,
                    log.log_end_offset,
                    partition.producers.snapshot_entries(),
                )
            except OSError as exc:  # only costs the next start a read of the log
                logger.warning(
                    "[ReplicaManager id=%d] no producer snapshot for %s-%d: %s",
                    self.node_id,
                    *key,
                    exc,
                )

    async def _checkpoint_high_watermarks_forever(self) -> None:
        """replication-offset-checkpoint every replica.high.watermark.checkpoint.interval.ms,
        so a restarted replica starts from the high watermark it knew, not its log start."""
        interval_s = self.config.high_watermark_checkpoint_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self._checkpoint_high_watermarks()

    async def _checkpoint_high_watermarks(self) -> None:
        high_watermarks = {
            key: partition.high_watermark
            for key, partition in self._partitions.items()
            if self.logs.get_log(*key) is not None
        }
        try:
            await self.logs.checkpoint_high_watermarks(high_watermarks)
        except OSError as exc:
            # The log manager has taken the failing dir offline and said why in one line;
            # no traceback, and the next write skips that dir.
            logger.warning(
                "[ReplicaManager id=%d] could not write high watermarks: %s", self.node_id, exc
            )

    async def _reconcile_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            failure = self.fetchers.failed() or self.log_dir_mover.failed()
            if failure is not None:
                raise failure  # a fetcher (or mover) bug fails the node, loudly
            image = self._latest
            assert image is not None
            try:
                await self._reconcile(image)
            except IllegalReplicaTransition:
                raise  # a bug: fail the node loudly (the simulator reports it)
            except OSError:
                logger.exception(
                    "[ReplicaManager id=%d] applying image %d", self.node_id, image.offset
                )
                # Not reconciled: the next pass starts again from the last image that was
                # (every step is idempotent), on a newer image or after a pause.
                asyncio.get_running_loop().call_later(RECONCILE_RETRY_S, self._wake.set)
            else:
                self._image = image
            finally:
                # Waiters wake even when reconciling failed, to see the failure.
                reconciled, self._reconciled = self._reconciled, asyncio.Event()
                reconciled.set()

    async def _reconcile(self, image: MetadataImage) -> None:
        """Bring the partitions from the last reconciled image to ``image``: only what
        changed for this broker (``local_changes``), deletions first, so a name deleted and
        created again gets a fresh log."""
        previous = self._image
        if previous is None:
            await self._set_aside_strays(image)
        changes = local_changes(previous or EMPTY, image, self.node_id)
        for deleted in sorted(changes.deleted, key=lambda tp: (tp.topic, tp.partition)):
            key = (deleted.topic, deleted.partition)
            stopped = self._partitions.pop(key, None)  # no request finds it from here on
            self._offline.discard(key)
            self._waiting_for_descriptors.discard(key)
            await self.fetchers.remove(key)
            if stopped is not None:
                stopped.stop()
                self.delayed.notify(key)  # its waiting produces and fetches answer now
            if self.logs.get_log(*key) is not None:
                logger.info(
                    "[ReplicaManager id=%d] Deleting the log of %s-%d (no longer a replica)",
                    self.node_id,
                    *key,
                )
                # Unique per partition and image, and drawn from no Random, so deleting a log
                # leaves every other random choice of the node (and each seed) as it was.
                unique = uuid.UUID(int=image.offset).hex
                try:
                    await self.logs.delete_log(*key, unique)
                except OSError:  # what is left is set aside as a stray at the next start
                    logger.exception("[ReplicaManager id=%d] deleting %s-%d", self.node_id, *key)
        now_ms = self._clock.now_ms()
        for changed, registration in self._to_apply(changes.leaders | changes.followers, image):
            key = (changed.topic, changed.partition)
            partition = self._partitions.get(key)
            if partition is None:
                if key in self._offline:
                    continue
                topic = image.topics.get(changed.topic)
                assert topic is not None, changed
                try:
                    partition = self._partitions[key] = await self._open(topic, key[1], image)
                except Exception as error:
                    if is_out_of_descriptors(error):
                        self._wait_for_descriptors(key, error)
                    else:
                        self._take_offline([key], "opening its log")
                    continue
                self._waiting_for_descriptors.discard(key)
            refetch = (
                registration.leader != partition.leader
                or registration.leader_epoch != partition.leader_epoch
            )
            if refetch:
                # Kafka's removeFetcherForPartitions: no response is applied to the log
                # once the state changes below.
                await self.fetchers.remove(key)
            transition = partition.apply(registration, now_ms)
            following = transition.after is ReplicaState.FOLLOWER
            # A replica whose log dir failed never fetches again (broker/fetcher.py).
            online = partition.log.is_online
            if refetch and following and partition.leader != NO_LEADER and online:
                if TRUNCATE_TO_HW in self.bugs and transition.new_epoch:
                    await partition.truncate_to(partition.high_watermark)
                self.fetchers.add(partition)
            if transition.after is ReplicaState.LEADER:
                self._maybe_advance_high_watermark(partition)
            self.delayed.notify(key)
        if previous is None or image.configs is not previous.configs:
            before = previous.configs if previous is not None else {}
            defaults_changed = any(
                old.values is not new.values
                for old, new in zip(
                    config_layers(before, broker=self.node_id),
                    config_layers(image.configs, broker=self.node_id),
                    strict=True,
                )
            )
            changed_topics = {
                name
                for resource, name in before.keys() | image.configs.keys()
                if resource == TOPIC_RESOURCE
                and before.get((resource, name)) is not image.configs.get((resource, name))
            }
            if defaults_changed:  # every hosted topic's effective config may change
                changed_topics |= {topic for (topic, _), _ in self.logs.all_logs()}
            for name in sorted(changed_topics):
                try:
                    self.logs.update_config(name, self._log_config(image, name))
                except ValueError:
                    hosted = [k for k in self._partitions if k[0] == name]
                    self._take_offline(hosted, "applying its topic config")

    def _to_apply(
        self, changed: dict[TopicPartition, PartitionRegistration], image: MetadataImage
    ) -> list[tuple[TopicPartition, PartitionRegistration]]:
        """The image's changes for this broker, plus the partitions still waiting for
        descriptors that are assigned here (their registration as of ``image``)."""
        pending = dict(changed)
        for topic_name, index in sorted(self._waiting_for_descriptors):
            topic = image.topics.get(topic_name)
            registration = topic.partitions.get(index) if topic is not None else None
            if registration is None or self.node_id not in registration.replicas:
                self._waiting_for_descriptors.discard((topic_name, index))
                continue
            pending.setdefault(TopicPartition(topic_name, index), registration)
        return list(pending.items())

    def _wait_for_descriptors(self, key: tuple[str, int], error: BaseException) -> None:
        """Not a failure of the partition: it is opened once descriptors are free again (a
        partition deleted or moved here meanwhile). One line a minute says how many wait."""
        self._waiting_for_descriptors.add(key)
        if self._descriptor_retry is None:
            self._descriptor_retry = asyncio.get_running_loop().call_later(
                RECONCILE_RETRY_S, self._retry_waiting_partitions
            )
        _limited.log(
            "waiting-for-descriptors",
            logging.WARNING,
            "[ReplicaManager id=%d] %d partition(s) assigned here wait for file descriptors, "
            "%s-%d among them: %s",
            self.node_id,
            len(self._waiting_for_descriptors),
            *key,
            error,
        )

    def _retry_waiting_partitions(self) -> None:
        self._descriptor_retry = None
        self._wake.set()

    def _take_offline(self, keys: list[tuple[str, int]], doing: str) -> None:
        """One partition's failure is that partition's, never the reconciler's: it answers
        KAFKA_STORAGE_ERROR from now on and every other partition is still served."""
        for key in keys:
            logger.exception(
                "[ReplicaManager id=%d] %s-%d is offline: %s failed", self.node_id, *key, doing
            )
            self._offline.add(key)

    def _log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        """The topic's own configs over the dynamic broker configs (``log.*`` keys set for
        this broker or cluster-wide) over server.properties, as Kafka resolves them."""
        overrides = dynamic_overrides(image.configs, topic=topic, broker=self.node_id)
        if not overrides:
            return self.default_config
        return LogConfig.from_properties(overrides, self.default_config)

    async def _set_aside_strays(self, image: MetadataImage) -> None:
        """Once, against the first caught-up image: every log on disk that is not assigned
        here, or that belongs to another topic id, becomes a stray."""
        for (topic, index), log in self.logs.all_logs():
            found = image.topics.get(topic)
            registration = found.partitions.get(index) if found is not None else None
            try:
                recorded = self._recorded_topic_id(log)
                if (
                    found is not None
                    and registration is not None
                    and self.node_id in registration.replicas
                    and recorded in (None, found.topic_id)
                ):
                    continue
                unique = uuid.UUID(int=self._rng.getrandbits(128), version=4).hex
                stray = await self.logs.mark_stray(topic, index, unique)
            except OSError:
                # Never serve (or recreate over) a dir that could not be set aside.
                self._take_offline([(topic, index)], "setting its stray log aside")
                continue
            logger.warning(
                "[ReplicaManager id=%d] %s-%d (topic id %s) is not assigned here as that "
                "topic: moved aside to %s",
                self.node_id,
                topic,
                index,
                recorded,
                stray,
            )

    def _recorded_topic_id(self, log: Log) -> uuid.UUID | None:
        marker = os.path.join(log.dir_path, PARTITION_METADATA_FILE)
        fs = self.logs.fs
        return _read_topic_id(read_all(fs, marker)) if fs.exists(marker) else None

    async def _open(self, topic: TopicImage, index: int, image: MetadataImage) -> Partition:
        """The partition's log, created if missing, with its partition.metadata."""
        config = self._log_config(image, topic.name)
        log = await self.logs.get_or_create_log(topic.name, index, config)
        if self._recorded_topic_id(log) is None:
            marker = os.path.join(log.dir_path, PARTITION_METADATA_FILE)
            await write_atomic(self.logs.fs, marker, _partition_metadata(topic.topic_id))
        checkpointed = self._checkpointed.pop((topic.name, index), 0)
        high_watermark = max(log.log_start_offset, min(checkpointed, log.log_end_offset))
        # A producer snapshot spares reading the whole log: after a clean shutdown the one at
        # the log end; after an unclean one the latest at or below the recovery point and
        # the high watermark, a segment roll's (broker/producer_snapshot.py).
        log_dir = self.logs.log_dir_of(topic.name, index)
        fs = self.logs.fs
        if self.logs.had_clean_shutdown.get(log_dir or "", False):
            bound = log.log_end_offset
        else:
            recovered_from = log.opened_recovery_point
            remove_snapshots_after(fs, log.dir_path, recovered_from)
            bound = min(recovered_from, high_watermark)
        snapshot = latest_snapshot(fs, log.dir_path, bound)
        producers = ProducerState.from_log(
            log, self._producer_id_expiration_ms, high_watermark, snapshot
        )
        partition = Partition(
            topic.name, index, topic.topic_id, log, producers, self.node_id, bugs=self.bugs
        )
        partition.high_watermark = high_watermark
        self.log_dir_mover.resume(topic.name, index)
        return partition

    def _endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """Where to reach ``broker_id``: its inter-broker listener (or its first one) as the
        latest image registers it."""
        image = self._latest
        broker = image.cluster.brokers.get(broker_id) if image is not None else None
        if broker is None or not broker.listeners:
            return None
        name = self.config.inter_broker_listener_name
        listener = (broker.listener(name) if name else None) or broker.listeners[0]
        return listener.host, listener.port

    def _isr_eligible(self, broker_id: int) -> bool:
        """Whether ``broker_id`` may join an ISR (KIP-966): registered, unfenced and not in
        controlled shutdown, as the latest image says."""
        image = self._latest
        broker = image.cluster.brokers.get(broker_id) if image is not None else None
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def high_watermark_of(self, key: tuple[str, int]) -> int | None:
        """The high watermark of a partition hosted here (None if not hosted)."""
        partition = self._partitions.get(key)
        return None if partition is None else partition.high_watermark

    def active_producers(self, topic: str, index: int) -> ErrorCode | list[SnapshotEntry]:
        """DescribeProducers: a replica's producers, as a snapshot would keep them. Any
        replica answers (a follower records its leader's batches too), as Kafka's: the
        ``kafka-transactions find-hanging --broker-id`` asks one broker about every
        partition it holds a replica of, led there or not."""
        found = self._leader(topic, index)
        if found == ErrorCode.not_leader_or_follower:
            partition = self._partitions.get((topic, index))
            if partition is not None:
                return partition.producers.snapshot_entries()
        if isinstance(found, ErrorCode):
            return found
        return found.producers.snapshot_entries()

    def last_stable_offset_of(self, key: tuple[str, int]) -> int | None:
        """The last stable offset of a partition hosted here (None if not hosted): the log
        cleaner's bound, as Kafka's firstUncleanableOffset (open transactions stay)."""
        partition = self._partitions.get(key)
        return None if partition is None else partition.last_stable_offset

    # ---- high watermark and ISR ------------------------------------------------------------
    def _maybe_advance_high_watermark(self, partition: Partition) -> None:
        """Move the leader's high watermark as far as its ISR allows; wake its waiters."""
        previous = partition.high_watermark
        if not self._under_min_isr(partition) and partition.maybe_increment_high_watermark(
            self._clock.now_ms(), self.config.lag_time_max_ms, self._isr_eligible
        ):
            self.delayed.notify(partition.key)
        elif (
            HW_BEFORE_ISR in self.bugs
            and partition.is_leader
            and partition.log.log_end_offset > partition.high_watermark
        ):
            partition.high_watermark = partition.log.log_end_offset
            self.delayed.notify(partition.key)
        else:
            return
        if self._high_watermark_listener is not None:
            self._high_watermark_listener(partition, previous)

    def _under_min_isr(self, partition: Partition) -> bool:
        """KIP-966's strict min ISR, while the cluster has ELR on: the high watermark stands
        still while the committed ISR is smaller than min.insync.replicas (capped at the
        replication factor), so a replica that left such an ISR holds every committed
        record and the controller may elect it from the ELR (Kafka's isUnderMinIsr)."""
        if len(partition.isr) >= len(partition.replicas):
            return False  # the common case, without a config lookup
        image = self._latest
        if image is None or image.features.get(ELR_FEATURE, 0) < 1:
            return False
        min_isr = min(self._min_insync_replicas(partition.topic), len(partition.replicas))
        return len(partition.isr) < min_isr

    async def wait_for_changes(
        self, keys: Iterable[tuple[str, int]], timeout_s: float
    ) -> list[tuple[str, int]]:
        """Until one of the partitions ``keys`` changes (an append, a new high watermark,
        a new state), or ``timeout_s`` passes: the partitions that changed (none on time)."""
        return await self.delayed.wait(keys, timeout_s)

    async def _shrink_isr_forever(self, alter: AlterPartitionManager) -> None:
        """Kafka's isr-expiration task: every half lag time, drop lagging ISR members."""
        interval_s = self.config.lag_time_max_ms / 2000
        while True:
            await asyncio.sleep(interval_s)
            now_ms = self._clock.now_ms()
            for partition in list(self._partitions.values()):
                shrunk = partition.isr_to_shrink(now_ms, self.config.lag_time_max_ms)
                if shrunk is not None:
                    logger.info(
                        "[Partition %s-%d broker=%d] Shrinking ISR from %s to %s",
                        partition.topic,
                        partition.index,
                        self.node_id,
                        list(partition.isr),
                        list(shrunk),
                    )
                    if ISR_SHRINK_LOCAL in self.bugs:
                        partition.isr = shrunk
                        self._maybe_advance_high_watermark(partition)
                        continue
                    alter.propose(partition, shrunk)

    def _isr_committed(self, partition: Partition) -> None:
        """The controller committed a proposed ISR: the high watermark may move now."""
        self._maybe_advance_high_watermark(partition)
        self.delayed.notify(partition.key)

    # ---- requests ------------------------------------------------------------------------
    def _leader(
        self, topic: str, index: int, current_leader_epoch: int = NO_EPOCH
    ) -> Partition | ErrorCode:
        """The partition if this broker leads it (at the client's epoch, if it gave one)."""
        image = self._image
        if image is None:
            return ErrorCode.not_leader_or_follower
        found = image.topics.get(topic)
        if found is None or index not in found.partitions:
            return ErrorCode.unknown_topic_or_partition
        if (topic, index) in self._offline:
            return ErrorCode.kafka_storage_error
        partition = self._partitions.get((topic, index))
        if partition is None:
            return ErrorCode.not_leader_or_follower
        if current_leader_epoch != NO_EPOCH:
            if current_leader_epoch < partition.leader_epoch:
                return ErrorCode.fenced_leader_epoch
            if current_leader_epoch > partition.leader_epoch:
                return ErrorCode.unknown_leader_epoch
        if not partition.is_leader:
            return ErrorCode.not_leader_or_follower
        return partition

    async def append(
        self,
        topic: str,
        index: int,
        records: bytes,
        acks: int,
        timeout_s: float,
        *,
        transactional_id: str | None = None,
        coordinator: bool = False,
        add_to_transaction: bool = False,
    ) -> AppendResult:
        """Append a producer's batches as leader; with acks=-1, wait for the high watermark.
        A producer's first transactional batch here is verified with its transaction
        coordinator first (KIP-890 part 1, ``transactional_id`` from the Produce); with
        ``add_to_transaction`` (Produce v12, KIP-890 part 2) the coordinator is asked to add
        the partition instead, whatever ``transaction.partition.verification.enable`` says.

        ``coordinator``: the broker's own coordinators' batches (Kafka's AppendOrigin
        COORDINATOR: transactional offset commits in ``__consumer_offsets``), which are not
        a producer's to sequence-check, but still enter the producer state (their
        transaction is open until its marker)."""
        partition = self._leader(topic, index)
        if isinstance(partition, ErrorCode):
            return AppendResult(partition)
        log = partition.log
        try:
            # The header only: the log checks the CRC as it appends, before storing anything.
            header = parse_header(records)
        except RecordError as error:
            return AppendResult(ErrorCode(error.kafka_error_code), message=str(error))
        if header.size != len(records):
            # Kafka's rule for Produce v3+: one batch per partition, nothing after it.
            return AppendResult(
                ErrorCode.invalid_record,
                message="A produce request must carry exactly one record batch per partition",
            )
        if header.is_control:
            # Markers are the broker's own, written by write_txn_marker for WriteTxnMarkers.
            return AppendResult(
                ErrorCode.invalid_record,
                message="Control batches are not accepted from producers",
            )
        min_isr = self._min_insync_replicas(topic)
        if acks == -1 and len(partition.isr) < min_isr:
            return AppendResult(
                ErrorCode.not_enough_replicas,
                message=f"The ISR of {topic}-{index} has {len(partition.isr)} replicas, fewer "
                f"than min.insync.replicas {min_isr}",
            )
        validated: ValidatedBatch | None
        try:
            # Every record parsed and the topic's configs applied before anything is stored,
            # duplicates included, as Kafka validates before its producer-state check.
            if header.records_count <= WALK_SLICE_RECORDS:
                validated = validate_records(
                    records,
                    log.config,
                    self._clock.now_ms(),
                    max_decompressed_bytes=PRODUCE_DECOMPRESSED_BYTES_MAX,
                    header=header,
                )
            else:
                validated = await self._validate_in_slices(partition, records, log, header)
        except RecordError as error:
            return AppendResult(
                ErrorCode(error.kafka_error_code),
                message=str(error),
                record_errors=error.record_errors,
            )
        if validated is None:
            return AppendResult(ErrorCode.not_leader_or_follower)
        verdict = Verdict() if coordinator else partition.producers.check(header)
        if SKIP_SEQUENCE_CHECK in self.bugs and verdict.duplicate_of >= 0:
            verdict = Verdict()
        if verdict.error != ErrorCode.none:
            return AppendResult(verdict.error, message=f"producer {header.producer_id}")
        if verdict.append and self._needs_verification(
            partition, header, transactional_id, add_to_transaction
        ):
            assert transactional_id is not None
            verdict = await self._verify_transaction(
                partition, header, transactional_id, add_to_transaction
            )
            if verdict.error != ErrorCode.none:
                return AppendResult(verdict.error, message=f"producer {header.producer_id}")
        if verdict.append:
            try:
                epoch = partition.leader_epoch
                if NO_EPOCH_BUMP in self.bugs:
                    epoch = log.leader_epoch_cache.latest_epoch or 0
                info = partition.append_records_to_leader(validated, epoch, self._clock.now_ms())
            except RecordError as error:
                return AppendResult(ErrorCode(error.kafka_error_code), message=str(error))
            except OSError as error:  # ENOSPC, EIO: Kafka takes the whole log dir offline
                log_dir = self.logs.log_dir_of(topic, index)
                if log_dir is not None:
                    self.logs.fail_log_dir(log_dir, error)
                return AppendResult(ErrorCode.kafka_storage_error, message=str(error))
            first, last = info.first_offset, info.last_offset
            self._maybe_advance_high_watermark(partition)
            self.delayed.notify(partition.key)  # followers' fetches wait for this
        else:  # a producer's retry of a batch already in the log: its original offsets
            first = verdict.duplicate_of
            last = first + header.last_offset_delta
        append_time_ms = validated.log_append_time_ms
        del validated  # stored now: a recompressed batch is not held while acks=all waits
        result = AppendResult(
            ErrorCode.none, first, log.log_start_offset, log_append_time_ms=append_time_ms
        )
        if acks == -1 and ACK_BEFORE_FETCH not in self.bugs:
            result = await wait_for_commit(
                self.delayed,
                partition,
                lambda: self._partitions.get(partition.key) is partition,
                last,
                min_isr,
                timeout_s,
                result,
            )
        if (
            not verdict.append
            and self._duplicate_listener is not None
            and result.error == ErrorCode.none
        ):
            self._duplicate_listener(partition, header, first)
        return result

    def _needs_verification(
        self,
        partition: Partition,
        header: BatchHeader,
        transactional_id: str | None,
        add_to_transaction: bool,
    ) -> bool:
        """Kafka verifies (or, for Produce v12, adds) a transactional batch whose producer
        has no transaction open on the partition yet, when the request names its
        transactional id."""
        return (
            header.is_transactional
            and transactional_id is not None
            and (add_to_transaction or self.config.transaction_partition_verification_enable)
            and not partition.producers.in_transaction(header.producer_id)
        )

    async def _verify_transaction(
        self,
        partition: Partition,
        header: BatchHeader,
        transactional_id: str,
        add_to_transaction: bool = False,
    ) -> Verdict:
        """Ask the coordinator (broker/txn_verification.py); then check again what may have
        changed while it answered: leadership, a truncation, a marker for the producer
        (Kafka's verification guard: a transaction ended meanwhile must not be reopened by
        a batch verified against it)."""
        producers = partition.producers
        producer_id = header.producer_id
        marker = producers.last_marker_of(producer_id)
        epoch = partition.leader_epoch
        error = await self.txn_verifier.verify(
            transactional_id,
            producer_id,
            header.producer_epoch,
            partition.topic,
            partition.index,
            add=add_to_transaction,
        )
        if error != ErrorCode.none:
            return Verdict(error)
        if (
            self._partitions.get(partition.key) is not partition
            or not partition.is_leader
            or partition.leader_epoch != epoch
        ):
            return Verdict(ErrorCode.not_leader_or_follower)
        if partition.producers is not producers or producers.last_marker_of(producer_id) != marker:
            return Verdict(ErrorCode.invalid_txn_state)
        return producers.check(header)  # another batch may have been appended meanwhile

    async def write_txn_marker(
        self,
        topic: str,
        index: int,
        producer_id: int,
        producer_epoch: int,
        marker: EndTransactionMarker,
        timeout_s: float,
        *,
        epoch_bumped: bool = False,
    ) -> AppendResult:
        """Append a commit or abort marker for ``producer_id`` as leader and answer once it
        is replicated, as acks=all (Kafka's appendRecords from the coordinator origin).
        A retry of the marker last written is not appended again: it waits for that one.
        ``epoch_bumped``: a transaction version 2 marker (its epoch must be newer)."""
        partition = self._leader(topic, index)
        if isinstance(partition, ErrorCode):
            return AppendResult(partition)
        if producer_id < 0 or producer_epoch < 0:
            return AppendResult(ErrorCode.invalid_producer_epoch, message="no producer")
        min_isr = self._min_insync_replicas(topic)
        if len(partition.isr) < min_isr:
            return AppendResult(
                ErrorCode.not_enough_replicas,
                message=f"The ISR of {topic}-{index} has {len(partition.isr)} replicas, fewer "
                f"than min.insync.replicas {min_isr}",
            )
        verdict = partition.producers.check_marker(
            producer_id, producer_epoch, marker, epoch_bumped=epoch_bumped
        )
        if verdict.error != ErrorCode.none:
            return AppendResult(verdict.error, message=f"producer {producer_id}")
        log = partition.log
        if verdict.append:
            now_ms = self._clock.now_ms()
            batch = encode_marker_batch(producer_id, producer_epoch, marker, now_ms)
            try:
                log_end = log.log_end_offset
                info = log.append_as_leader(bytearray(batch), partition.leader_epoch)
                partition.checkpoint_if_rolled(log_end)
                partition.record_append(parse_header(batch), info.first_offset, now_ms, marker)
            except OSError as error:
                log_dir = self.logs.log_dir_of(topic, index)
                if log_dir is not None:
                    self.logs.fail_log_dir(log_dir, error)
                return AppendResult(ErrorCode.kafka_storage_error, message=str(error))
            offset = info.first_offset
            self._maybe_advance_high_watermark(partition)
            self.delayed.notify(partition.key)
        else:
            offset = verdict.duplicate_of
        result = AppendResult(ErrorCode.none, offset, log.log_start_offset)
        return await wait_for_commit(
            self.delayed,
            partition,
            lambda: self._partitions.get(partition.key) is partition,
            offset,
            min_isr,
            timeout_s,
            result,
        )

    async def alter_replica_log_dir(self, topic: str, index: int, path: str) -> ErrorCode:
        """AlterReplicaLogDirs for one partition (Kafka's ReplicaManager.alterReplicaLogDirs;
        the answers are listed in broker/log_dir_mover.py)."""
        logs = self.logs
        # Kafka's check (KAFKA-4893): the copy's dir name, with its 32-character unique id,
        # must fit a file name.
        if len(future_dir_name(f"{topic}-{index}", "0" * 32)) > FILE_NAME_MAX:
            return ErrorCode.invalid_topic_exception
        log_dir = logs.resolve_log_dir(path)
        if log_dir is None:
            return ErrorCode.log_dir_not_found
        if log_dir in logs.offline_dirs:
            return ErrorCode.kafka_storage_error
        key = (topic, index)
        partition = self._partitions.get(key)
        if key in self._offline or (partition is not None and not partition.log.is_online):
            return ErrorCode.kafka_storage_error
        future = logs.future_log_of(topic, index)
        if future is not None and future.log_dir != log_dir:
            await logs.abandon_future_log(topic, index)  # a move elsewhere is dropped
        if partition is None:
            image = self._latest
            found = image.topics.get(topic) if image is not None else None
            if found is None or index not in found.partitions:
                return ErrorCode.unknown_topic_or_partition
            # Where its log goes if it comes here (bounded: partitions of the image).
            logs.preferred_dirs[key] = log_dir
            return ErrorCode.replica_not_available
        if logs.log_dir_of(topic, index) == log_dir:
            return ErrorCode.none
        if logs.offline_dirs:
            return ErrorCode.kafka_storage_error
        try:
            await self.log_dir_mover.begin(topic, index, log_dir)
        except OSError:
            logger.exception(
                "[ReplicaManager id=%d] copying %s-%d into %s", self.node_id, topic, index, log_dir
            )
            return ErrorCode.kafka_storage_error
        return ErrorCode.none

    async def delete_records(self, topic: str, index: int, offset: int) -> tuple[ErrorCode, int]:
        """DeleteRecords as leader (Kafka's Partition.deleteRecordsOnLeader): raise the log
        start offset to ``offset`` (-1: the high watermark); followers follow through the
        log_start_offset of their fetch responses. (error, the leader's new log start)."""
        partition = self._leader(topic, index)
        if isinstance(partition, ErrorCode):
            return partition, -1
        log, high_watermark = partition.log, partition.high_watermark
        if not log.config.delete:  # a compacted topic's records are the cleaner's to remove
            return ErrorCode.policy_violation, -1
        target = high_watermark if offset == HIGH_WATERMARK_OFFSET else offset
        if not 0 <= target <= high_watermark:
            return ErrorCode.offset_out_of_range, -1
        try:
            return ErrorCode.none, await log.delete_records(target, high_watermark=high_watermark)
        except KafkaStorageError:
            return ErrorCode.kafka_storage_error, -1
        except OSError as error:  # the checkpoint write failed: its dir goes offline
            log_dir = self.logs.log_dir_of(topic, index)
            if log_dir is not None:
                self.logs.fail_log_dir(log_dir, error)
            return ErrorCode.kafka_storage_error, -1

    def min_insync_replicas(self, topic: str) -> int:
        """min.insync.replicas of ``topic`` as appends see it (the metrics read it)."""
        return self._min_insync_replicas(topic)

    async def _validate_in_slices(
        self, partition: Partition, records: bytes, log: Log, header: BatchHeader
    ) -> ValidatedBatch | None:
        """A batch of many records (up to 1.78M in 16 MiB inflated: 7.9 s of loop on main)
        validated a slice at a time, one such batch at a time broker-wide (so at most one
        big inflated payload exists); None when the partition's leadership changed
        meanwhile (the caller answers NOT_LEADER_OR_FOLLOWER, and the producer retries)."""
        epoch = partition.leader_epoch
        async with self._validation_lock:
            validated = await validate_records_in_slices(
                records,
                log.config,
                self._clock.now_ms(),
                max_decompressed_bytes=PRODUCE_DECOMPRESSED_BYTES_MAX,
                header=header,
            )
        if (
            self._leader(*partition.key) is not partition
            or partition.leader_epoch != epoch
            or partition.log is not log
        ):
            return None
        return validated

    def _min_insync_replicas(self, topic: str) -> int:
        """min.insync.replicas of ``topic``: its own config, this broker's dynamic one,
        the cluster-wide dynamic default, or the broker's static one."""
        image = self._image
        if image is not None:
            value = dynamic_value(
                image.configs, "min.insync.replicas", topic=topic, broker=self.node_id
            )
            if value is not None:
                return int(value)
        return self.config.min_insync_replicas

    def read(
        self,
        topic: str,
        index: int,
        offset: int,
        max_bytes: int,
        current_leader_epoch: int,
        *,
        min_one_message: bool,
        last_fetched_epoch: int = UNDEFINED_EPOCH,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> ReadResult:
        """A consumer's read: whole batches from ``offset``, none at or past the high
        watermark, or, read_committed, the last stable offset, with the aborted
        transactions among them (from the ``.txnindex``)."""
        partition = self._leader(topic, index, current_leader_epoch)
        if isinstance(partition, ErrorCode):
            return ReadResult(partition)
        committed = isolation_level == READ_COMMITTED
        return self._read(
            partition, offset, max_bytes, min_one_message, last_fetched_epoch, True, committed
        )

    def read_for_follower(
        self,
        replica_id: int,
        topic: str,
        index: int,
        offset: int,
        max_bytes: int,
        current_leader_epoch: int,
        last_fetched_epoch: int,
        *,
        min_one_message: bool,
    ) -> ReadResult:
        """A follower's fetch: whole batches from ``offset`` up to the log end. A fetch
        whose log agrees with ours moves the follower's progress, which may advance the
        high watermark or add it to the ISR."""
        partition = self._leader(topic, index, current_leader_epoch)
        if isinstance(partition, ErrorCode):
            return ReadResult(partition)
        if replica_id not in partition.remote:
            return ReadResult(ErrorCode.not_leader_or_follower)
        result = self._read(
            partition, offset, max_bytes, min_one_message, last_fetched_epoch, False
        )
        if result.error != ErrorCode.none:
            return result
        if result.diverging_epoch != UNDEFINED_EPOCH:
            if HW_BEFORE_DIVERGENCE_CHECK in self.bugs:
                # Planted: the diverging follower's fetch offset counts as its log end.
                partition.update_follower_fetch(replica_id, offset, self._clock.now_ms())
                self._maybe_advance_high_watermark(partition)
            return result
        partition.update_follower_fetch(replica_id, offset, self._clock.now_ms())
        expanded = partition.isr_to_expand(replica_id, self._isr_eligible)
        if expanded is not None:
            logger.info(
                "[Partition %s-%d broker=%d] Expanding ISR from %s to %s",
                topic,
                index,
                self.node_id,
                list(partition.isr),
                list(expanded),
            )
            if self._alter_partition is not None:
                self._alter_partition.propose(partition, expanded)
        self._maybe_advance_high_watermark(partition)
        return result

    def _read(
        self,
        partition: Partition,
        offset: int,
        max_bytes: int,
        min_one_message: bool,
        last_fetched_epoch: int,
        to_high_watermark: bool,
        committed: bool = False,
    ) -> ReadResult:
        log, hw = partition.log, partition.high_watermark
        stable = partition.last_stable_offset
        if last_fetched_epoch != UNDEFINED_EPOCH:
            # KIP-320: the fetcher's log must agree with ours up to ``offset``; if not, it
            # is told where its last epoch ends here and truncates there.
            epoch, end = log.end_offset_for_epoch(last_fetched_epoch)
            if epoch == UNDEFINED_EPOCH or end < 0:
                # Kafka: the end of that epoch cannot be determined here.
                return ReadResult(ErrorCode.offset_out_of_range, hw, log.log_start_offset)
            if epoch < last_fetched_epoch or end < offset:
                return ReadResult(ErrorCode.none, hw, log.log_start_offset, b"", epoch, end, stable)
        max_offset = None
        if to_high_watermark:
            max_offset = stable if committed else hw
        try:
            # Past the high watermark but within the log is not out of range (Kafka): a
            # consumer there waits for the records to commit.
            data = log.read(
                offset,
                max_bytes,
                max_offset=max_offset,
                min_one_message=min_one_message,
                skip_emptied=to_high_watermark,  # consumers only: replicas copy them
            )
            aborted = None
            if committed:
                # The transactions aborted within what is read (Kafka's upper bound is the
                # offset after the read; an empty read needs none).
                found = log.collect_aborted_txns(offset, data.next_offset) if data.records else []
                aborted = () if TXN_NO_ABORTED_LIST in self.bugs else tuple(found)
        except OffsetOutOfRangeError:
            return ReadResult(
                ErrorCode.offset_out_of_range, hw, log.log_start_offset, last_stable_offset=stable
            )
        except KafkaStorageError:
            return ReadResult(ErrorCode.kafka_storage_error)
        return ReadResult(
            ErrorCode.none,
            hw,
            log.log_start_offset,
            data.records,
            last_stable_offset=stable,
            aborted_transactions=aborted,
        )

    def offset_for_leader_epoch(
        self, topic: str, index: int, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[ErrorCode, int, int]:
        """OffsetForLeaderEpoch: (error, the largest epoch <= ``leader_epoch`` we know, the
        offset where it ends), from the leader's epoch cache (KIP-101)."""
        partition = self._leader(topic, index, current_leader_epoch)
        if isinstance(partition, ErrorCode):
            return partition, UNDEFINED_EPOCH, -1
        epoch, end = partition.log.end_offset_for_epoch(leader_epoch)
        return ErrorCode.none, epoch, end

    def list_offset(
        self,
        topic: str,
        index: int,
        timestamp: int,
        current_leader_epoch: int,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> OffsetResult:
        """ListOffsets: earliest, latest (the high watermark, or read_committed the last
        stable offset), the record with the largest timestamp, or the first record whose
        timestamp is at or after ``timestamp`` (below that same bound, as Kafka's
        lastFetchableOffset)."""
        steps = self._list_offset_steps(
            topic, index, timestamp, current_leader_epoch, isolation_level
        )
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value

    async def list_offset_in_slices(
        self,
        topic: str,
        index: int,
        timestamp: int,
        current_leader_epoch: int,
        isolation_level: int = READ_UNCOMMITTED,
    ) -> OffsetResult:
        """list_offset, serving the loop between slices of a big batch's walk; one lookup
        by timestamp at a time broker-wide (the lock big produced batches take too), so at
        most one big inflated payload exists. NOT_LEADER_OR_FOLLOWER if the partition's
        leadership moved meanwhile."""
        if timestamp in (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP):
            return self.list_offset(topic, index, timestamp, current_leader_epoch, isolation_level)
        async with self._validation_lock:
            partition = self._leader(topic, index, current_leader_epoch)
            epoch = partition.leader_epoch if isinstance(partition, Partition) else NO_EPOCH
            steps = self._list_offset_steps(
                topic, index, timestamp, current_leader_epoch, isolation_level
            )
            sliced = False
            while True:
                try:
                    next(steps)
                except StopIteration as done:
                    result: OffsetResult = done.value
                    break
                sliced = True
                await asyncio.sleep(0)
        if sliced and (
            self._leader(topic, index) is not partition
            or not isinstance(partition, Partition)
            or partition.leader_epoch != epoch
        ):
            return OffsetResult(ErrorCode.not_leader_or_follower)
        return result

    def _list_offset_steps(
        self,
        topic: str,
        index: int,
        timestamp: int,
        current_leader_epoch: int,
        isolation_level: int,
    ) -> Generator[None, None, OffsetResult]:
        partition = self._leader(topic, index, current_leader_epoch)
        if isinstance(partition, ErrorCode):
            return OffsetResult(partition)
        log, hw, epoch = partition.log, partition.high_watermark, partition.leader_epoch
        if isolation_level == READ_COMMITTED:
            hw = partition.last_stable_offset
        if timestamp == EARLIEST_TIMESTAMP:
            start = log.log_start_offset
            return OffsetResult(ErrorCode.none, -1, start, _epoch_at(log, start, epoch))
        if timestamp == LATEST_TIMESTAMP:
            return OffsetResult(ErrorCode.none, -1, hw, epoch)
        if timestamp == MAX_TIMESTAMP:
            segments = [s for s in log.segments if s.size > 0]
            if not segments:
                return OffsetResult(ErrorCode.none, -1, -1, NO_EPOCH)
            timestamp = max(segments, key=lambda s: s.max_timestamp).max_timestamp
        elif timestamp < 0:
            return OffsetResult(ErrorCode.invalid_request)
        try:
            found = yield from log.offset_by_timestamp_steps(timestamp)
        except RecordError as error:  # a stored batch that does not inflate within the bound
            return OffsetResult(ErrorCode(error.kafka_error_code))
        if found is None or found[0] >= hw:
            return OffsetResult(ErrorCode.none, -1, -1, NO_EPOCH)
        offset, record_timestamp = found
        return OffsetResult(ErrorCode.none, record_timestamp, offset, _epoch_at(log, offset, epoch))


def _epoch_at(log: Log, offset: int, fallback: int) -> int:
    epoch = log.leader_epoch_cache.epoch_for_offset(offset)
    return fallback if epoch is None else epoch


def _partition_metadata(topic_id: uuid.UUID) -> bytes:
    """Kafka's partition.metadata: the topic id a partition dir belongs to."""
    encoded = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    return f"version: 0\ntopic_id: {encoded}\n".encode()


def _read_topic_id(data: bytes) -> uuid.UUID | None:
    """The topic id in a partition.metadata file, None if it cannot be read."""
    for line in data.decode(errors="replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            try:
                return uuid.UUID(bytes=base64.urlsafe_b64decode(value.strip() + "=="))
            except ValueError:
                return None
    return None
