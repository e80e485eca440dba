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

Replication between brokers is not built yet. A partition's high watermark follows its log
end while its ISR is this broker alone (replication factor 1, or an ISR the controller shrank
to the leader). With other in-sync replicas it stays put until follower fetching exists, so
acks=all produces there time out and consumers see nothing new (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import random
import uuid
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.producer_state import PRODUCER_ID_EXPIRATION_MS, ProducerState
from log.batch import parse_header
from log.clock import WallClock
from log.config import LogConfig
from log.errors import RecordError
from log.fs import read_all, write_atomic
from log.log import KafkaStorageError, Log, OffsetOutOfRangeError
from log.manager import LogManager
from log.validator import PRODUCE_DECOMPRESSED_BYTES_MAX, validate_records
from metadata.config_defs import CLUSTER_DEFAULT
from metadata.delta import local_changes
from metadata.image import EMPTY, MetadataImage, TopicImage

logger = logging.getLogger("broker.replica_manager")

PARTITION_METADATA_FILE = "partition.metadata"
RECONCILE_RETRY_S = 1.0  # after a disk error, how soon the same image is tried again
TOPIC_RESOURCE = 2  # ConfigResource type of topic configs in the image
BROKER_RESOURCE = 4  # ... and of broker configs (resource "" = cluster-wide defaults)
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
NO_EPOCH = -1


@dataclass(slots=True)
class Partition:
    """One partition this broker holds a replica of, as of the latest reconciled image."""

    topic: str
    index: int
    topic_id: uuid.UUID
    log: Log
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    producers: ProducerState
    high_watermark: int = 0


@dataclass(frozen=True, slots=True)
class AppendResult:
    error: ErrorCode
    base_offset: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()  # (index in batch, why), Produce v8+
    log_append_time_ms: int = -1  # the broker's timestamp when the topic uses LogAppendTime


@dataclass(frozen=True, slots=True)
class ReadResult:
    error: ErrorCode
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes = b""


@dataclass(frozen=True, slots=True)
class OffsetResult:
    error: ErrorCode
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = NO_EPOCH


class ReplicaManager:
    """Leader-side partition state for one broker, reconciled from metadata images."""

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        default_config: LogConfig,
        rng: random.Random,
        clock: WallClock,
        *,
        producer_id_expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self.node_id = node_id
        self._clock = clock
        self._producer_id_expiration_ms = producer_id_expiration_ms
        self._rng = rng  # stray names: the runtime's Random keeps simulated runs replayable
        self.logs = logs
        self.default_config = default_config
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Partitions whose log could not be opened or configured: KAFKA_STORAGE_ERROR until
        # a restart, while every other partition is served (Kafka's offline replicas).
        self._offline: set[tuple[str, int]] = set()
        self._image: MetadataImage | None = None  # the image the partitions reflect
        self._latest: MetadataImage | None = None
        self._wake = asyncio.Event()
        self._reconciled = asyncio.Event()  # set and replaced after each reconciled image
        self._task: asyncio.Task[None] | None = None
        self._hw_advanced: asyncio.Future[None] | None = None

    # ---- metadata --------------------------------------------------------------------------
    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        self._latest = after
        self._wake.set()

    def start(self, image: MetadataImage) -> asyncio.Task[None]:
        """Begin acting on images, from ``image`` (the caught-up one) onwards; the returned
        task fails if reconciling ever does, so the node's owner can fail loudly with it."""
        self._latest = image
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._reconcile_forever())
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
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _reconcile_forever(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            image = self._latest
            assert image is not None
            try:
                await self._reconcile(image)
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
            self._partitions.pop(key, None)  # no request finds it from here on
            self._offline.discard(key)
            if self.logs.get_log(*key) is not None:
                logger.info(
                    "[ReplicaManager id=%d] Deleting the log of %s-%d (no longer a replica)",
                    self.node_id,
                    *key,
                )
                try:
                    await self.logs.delete_log(*key)
                except OSError:  # what is left is set aside as a stray at the next start
                    logger.exception("[ReplicaManager id=%d] deleting %s-%d", self.node_id, *key)
        for changed, registration in (changes.leaders | changes.followers).items():
            key = (changed.topic, changed.partition)
            partition = self._partitions.get(key)
            if partition is None:
                if key in self._offline:
                    continue
                topic = image.topics.get(changed.topic)
                assert topic is not None, changed
                try:
                    partition = self._partitions[key] = await self._open(topic, key[1], image)
                except Exception:
                    self._take_offline([key], "opening its log")
                    continue
            partition.leader = registration.leader
            partition.leader_epoch = registration.leader_epoch
            partition.isr = registration.isr
            self._maybe_advance_high_watermark(partition)
        if previous is None or image.configs is not previous.configs:
            before = previous.configs if previous is not None else {}
            defaults = (BROKER_RESOURCE, CLUSTER_DEFAULT)
            defaults_changed = before.get(defaults) is not image.configs.get(defaults)
            changed = {
                name
                for resource, name in before.keys() | image.configs.keys()
                if resource == TOPIC_RESOURCE
                and before.get((resource, name)) is not image.configs.get((resource, name))
            }
            if defaults_changed:  # every hosted topic's effective config may change
                changed |= {topic for (topic, _), _ in self.logs.all_logs()}
            for name in sorted(changed):
                try:
                    self.logs.update_config(name, self._log_config(image, name))
                except ValueError:
                    hosted = [k for k in self._partitions if k[0] == name]
                    self._take_offline(hosted, "applying its topic config")

    def _take_offline(self, keys: list[tuple[str, int]], doing: str) -> None:
        """One partition's failure is that partition's, never the reconciler's: it answers
        KAFKA_STORAGE_ERROR from now on and every other partition is still served."""
        for key in keys:
            logger.exception(
                "[ReplicaManager id=%d] %s-%d is offline: %s failed", self.node_id, *key, doing
            )
            self._offline.add(key)

    def _log_config(self, image: MetadataImage, topic: str) -> LogConfig:
        """The topic's own configs over the cluster-wide dynamic defaults (``log.*`` broker
        configs set on resource ``""``) over server.properties, as Kafka resolves them."""
        defaults = image.configs.get((BROKER_RESOURCE, CLUSTER_DEFAULT), {})
        values = image.configs.get((TOPIC_RESOURCE, topic), {})
        if not values and not defaults:
            return self.default_config
        return LogConfig.from_properties({**defaults, **values}, self.default_config)

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
        registration = topic.partitions[index]
        return Partition(
            topic.name,
            index,
            topic.topic_id,
            log,
            registration.leader,
            registration.leader_epoch,
            registration.isr,
            ProducerState.from_log(log, self._producer_id_expiration_ms),
        )

    # ---- high watermark ------------------------------------------------------------------
    def _maybe_advance_high_watermark(self, partition: Partition) -> None:
        """A sole in-sync replica commits what it has: the high watermark is its log end."""
        if partition.leader != self.node_id or partition.isr != (self.node_id,):
            return
        end = partition.log.log_end_offset
        if end > partition.high_watermark:
            partition.high_watermark = end
            waiters, self._hw_advanced = self._hw_advanced, None
            if waiters is not None and not waiters.done():
                waiters.set_result(None)

    async def wait_for_high_watermark(self, timeout_s: float) -> None:
        """Until some partition's high watermark advances, or ``timeout_s`` passes."""
        if self._hw_advanced is None:
            self._hw_advanced = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._hw_advanced), timeout_s)

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
        if partition is None or partition.leader != self.node_id:
            return ErrorCode.not_leader_or_follower
        if current_leader_epoch != NO_EPOCH:
            if current_leader_epoch < partition.leader_epoch:
                return ErrorCode.fenced_leader_epoch
            if current_leader_epoch > partition.leader_epoch:
                return ErrorCode.unknown_leader_epoch
        return partition

    async def append(
        self, topic: str, index: int, records: bytes, acks: int, timeout_s: float
    ) -> AppendResult:
        """Append a producer's batches as leader; with acks=-1, wait for the high watermark."""
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
        if header.is_control or header.is_transactional:
            # Control batches are the broker's own; transactions need a coordinator.
            return AppendResult(
                ErrorCode.invalid_record,
                message="Control and transactional batches are not accepted from producers",
            )
        if acks == -1 and len(partition.isr) < self._min_insync_replicas(topic):
            return AppendResult(
                ErrorCode.not_enough_replicas,
                message=f"The ISR of {topic}-{index} has {len(partition.isr)} replicas, fewer "
                f"than min.insync.replicas {self._min_insync_replicas(topic)}",
            )
        try:
            # Every record parsed and the topic's configs applied before anything is stored,
            # duplicates included, as Kafka validates before its producer-state check.
            validated = validate_records(
                records,
                log.config,
                self._clock.now_ms(),
                max_decompressed_bytes=PRODUCE_DECOMPRESSED_BYTES_MAX,
            )
        except RecordError as error:
            return AppendResult(
                ErrorCode(error.kafka_error_code),
                message=str(error),
                record_errors=error.record_errors,
            )
        verdict = partition.producers.check(header)
        if verdict.error != ErrorCode.none:
            return AppendResult(verdict.error, message=f"producer {header.producer_id}")
        if verdict.append:
            try:
                info = log.append_as_leader(validated.records, partition.leader_epoch)
            except RecordError as error:
                return AppendResult(ErrorCode(error.kafka_error_code), message=str(error))
            except OSError as error:  # ENOSPC, EIO: Kafka takes the whole log dir offline
                log_dir = self.logs.log_dir_of(topic, index)
                if log_dir is not None:
                    self.logs.fail_log_dir(log_dir, error)
                return AppendResult(ErrorCode.kafka_storage_error, message=str(error))
            partition.producers.record(header, info.first_offset, self._clock.now_ms())
            first, last = info.first_offset, info.last_offset
            self._maybe_advance_high_watermark(partition)
        else:  # a producer's retry of a batch already in the log: its original offsets
            first = verdict.duplicate_of
            last = first + header.last_offset_delta
        append_time_ms = validated.log_append_time_ms
        del validated  # stored now: a recompressed batch is not held while acks=all waits
        result = AppendResult(
            ErrorCode.none, first, log.log_start_offset, log_append_time_ms=append_time_ms
        )
        if acks != -1:
            return result
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while partition.high_watermark <= last:  # bounded by the deadline
            remaining = deadline - loop.time()
            if remaining <= 0 or self._partitions.get((topic, index)) is not partition:
                return AppendResult(ErrorCode.request_timed_out, first)
            await self.wait_for_high_watermark(remaining)
        return result

    def _min_insync_replicas(self, topic: str) -> int:
        image = self._image
        values = image.configs.get((TOPIC_RESOURCE, topic), {}) if image is not None else {}
        return int(values.get("min.insync.replicas", 1))

    def read(
        self,
        topic: str,
        index: int,
        offset: int,
        max_bytes: int,
        current_leader_epoch: int,
        *,
        min_one_message: bool,
    ) -> ReadResult:
        """A consumer's read: whole batches from ``offset``, none at or past the high watermark."""
        partition = self._leader(topic, index, current_leader_epoch)
        if isinstance(partition, ErrorCode):
            return ReadResult(partition)
        log, hw = partition.log, partition.high_watermark
        try:
            # Past the high watermark but within the log is not out of range (Kafka): a
            # consumer there waits for the records to commit.
            data = log.read(offset, max_bytes, max_offset=hw, min_one_message=min_one_message)
        except OffsetOutOfRangeError:
            return ReadResult(ErrorCode.offset_out_of_range, hw, log.log_start_offset)
        except KafkaStorageError:
            return ReadResult(ErrorCode.kafka_storage_error)
        return ReadResult(ErrorCode.none, hw, log.log_start_offset, bytes(data.records))

    def list_offset(
        self, topic: str, index: int, timestamp: int, current_leader_epoch: int
    ) -> OffsetResult:
        """ListOffsets: earliest, latest (the high watermark), the record with the largest
        timestamp, or the first record whose timestamp is at or after ``timestamp``."""
        partition = self._leader(topic, index, current_leader_epoch)
        if isinstance(partition, ErrorCode):
            return OffsetResult(partition)
        log, hw, epoch = partition.log, partition.high_watermark, partition.leader_epoch
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
            found = log.fetch_offset_by_timestamp(timestamp)
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
