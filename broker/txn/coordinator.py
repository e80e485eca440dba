"""Kafka's transaction coordinator: transactional ids and their transactions, kept in
``__transaction_state``.

The runtime is the group coordinator's (broker/group/coordinator.py): a broker coordinates
the transactional ids whose partition of ``__transaction_state`` it leads; on becoming a
partition's leader it loads it (every record, replayed in order) into a ``TxnShard``, which
answers COORDINATOR_LOAD_IN_PROGRESS until loaded; on losing it the shard is dropped and its
ids answer NOT_COORDINATOR. The coordinator epoch written into markers is the partition's
leader epoch, as in Kafka.

Every decision is the sans-I/O ``broker.txn.state``'s; this module does the I/O around it.
A new state is appended to the partition with acks=all and becomes current only once
acknowledged, by the same leader epoch; while one id's write (or its markers) is in flight,
other requests for it get CONCURRENT_TRANSACTIONS (Kafka's pendingState) and the client
retries. EndTxn is answered once PrepareCommit/PrepareAbort is written; the markers then go
to every partition (``MarkerSender``), and CompleteCommit/CompleteAbort is written after
the last one. A coordinator that loads a prepared transaction resumes its markers.

Two timer loops: Ongoing transactions past their timeout are fenced and aborted
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``), and ids idle past
``transactional.id.expiration.ms`` get a tombstone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker.bugs import TXN_COMPLETE_BEFORE_MARKERS, TXN_TIMEOUT_NEVER_ABORTS
from broker.group.records import partition_for
from broker.producer_ids import ProducerIdManager
from broker.replica_manager import ReplicaManager
from broker.txn import state
from broker.txn.config import TXN_TOPIC, TransactionCoordinatorConfig
from broker.txn.markers import MarkerSender
from broker.txn.records import decode_key, decode_value, encode_key, encode_value
from broker.txn.state import Fence, TopicPartition, TxnMetadata, TxnState
from log.batch import decode_batch, encode_batch
from log.clock import WallClock
from log.errors import RecordError
from log.log import KafkaStorageError, OffsetOutOfRangeError
from log.records import Record
from metadata.image import MetadataImage
from protocol.connect import Connector

logger = logging.getLogger("broker.txn.coordinator")

# Kafka's mapping of __transaction_state append errors to what a producer understands.
_WRITE_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}


@dataclass(slots=True)
class TxnShard:
    """The transactional ids of one ``__transaction_state`` partition led here."""

    partition: int
    leader_epoch: int  # the coordinator epoch
    loaded: bool = False
    txns: dict[str, TxnMetadata] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # a write or markers in flight


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


class TransactionCoordinator:
    """Transactions of the ``__transaction_state`` partitions led here."""

    def __init__(
        self,
        node_id: int,
        replicas: ReplicaManager,
        producer_ids: ProducerIdManager,
        config: TransactionCoordinatorConfig,
        clock: WallClock,
        *,
        connector: Connector | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self._replicas = replicas
        self._producer_ids = producer_ids
        self._clock = clock
        self._shards: dict[int, TxnShard] = {}
        self._image: MetadataImage | None = None
        self._image_changed = asyncio.Event()
        self._applied_offset = -1  # the last image whose leadership changes are done
        self._applied = asyncio.Event()  # set and replaced after each image
        self._tasks: list[asyncio.Task[None]] = []
        self._writes: dict[asyncio.Task[None], None] = {}  # insertion-ordered, as groups'
        self.markers = MarkerSender(
            node_id,
            lambda: self._image,
            self._endpoint,
            config.transaction_marker_retry_backoff_ms / 1000,
            connector=connector,
        )

    # ---- lifecycle -------------------------------------------------------------------------
    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        self._image = after
        self._image_changed.set()

    def start(self, image: MetadataImage) -> None:
        self._image = image
        self._image_changed.set()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._follow_leadership()),
            loop.create_task(self._every(
                self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                self.abort_timed_out,
            )),
            loop.create_task(self._every(
                self.config.transaction_remove_expired_transaction_cleanup_interval_ms,
                self.expire_transactional_ids,
            )),
        ]  # fmt: skip

    async def close(self) -> None:
        for task in [*self._tasks, *self._writes]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._writes, return_exceptions=True)
        await self.markers.close()
        self._shards.clear()

    async def idle(self) -> None:
        """Until no marker round or completion is running (tests wait on it)."""
        while self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)

    def num_partitions(self, image: MetadataImage) -> int:
        """The topic's partition count once it exists (Kafka's rule), else the config's."""
        topic = image.topics.get(TXN_TOPIC)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.config.transaction_state_log_num_partitions

    def partition_of(self, transactional_id: str, image: MetadataImage) -> int:
        return partition_for(transactional_id, self.num_partitions(image))

    def _endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """The inter-broker listener of ``broker_id`` (its first one), as markers reach it."""
        image = self._image
        broker = image.cluster.brokers.get(broker_id) if image is not None else None
        if broker is None or not broker.listeners:
            return None
        name = self._replicas.config.inter_broker_listener_name
        listener = (broker.listener(name) if name else None) or broker.listeners[0]
        return listener.host, listener.port

    # ---- leadership and loading --------------------------------------------------------------
    async def _follow_leadership(self) -> None:
        """Load the partitions newly led here, drop those no longer led, image by image."""
        while True:
            await self._image_changed.wait()
            self._image_changed.clear()
            image = self._image
            assert image is not None
            await self._replicas.wait_reconciled(image.offset)
            leading = image.topics.led_by(TXN_TOPIC, self.node_id)
            for index, shard in list(self._shards.items()):
                if leading.get(index) != shard.leader_epoch:
                    del self._shards[index]
                    logger.info(
                        "[TransactionCoordinator id=%d] Unloaded %s-%d (%d transactional "
                        "ids): no longer its leader",
                        self.node_id,
                        TXN_TOPIC,
                        index,
                        len(shard.txns),
                    )
            for index in sorted(leading):
                if index not in self._shards:
                    shard = self._shards[index] = TxnShard(index, leading[index])
                    await self._load(shard)
            self._applied_offset = image.offset
            applied, self._applied = self._applied, asyncio.Event()
            applied.set()

    async def wait_applied(self, offset: int) -> None:
        """Until the shards reflect the image at ``offset`` or later (loaded or dropped)."""
        while self._applied_offset < offset:  # each pass: one image
            await self._applied.wait()

    async def _load(self, shard: TxnShard) -> None:
        """Replay the partition into the shard up to its log end (as groups load), then
        resume the markers of every prepared transaction."""
        log = self._replicas.logs.get_log(TXN_TOPIC, shard.partition)
        position = log.log_start_offset if log is not None else 0
        records_read = 0
        while log is not None and self._shards.get(shard.partition) is shard:
            try:
                data = log.read(position, self.config.transaction_state_log_load_buffer_size)
                view = bytes(data.records)
                pos = 0
                while pos < len(view):
                    header, records = decode_batch(view, pos)
                    pos += header.size
                    position = header.next_offset
                    if header.is_control:
                        continue
                    for record in records:
                        self._replay(shard, record)
                        records_read += 1
            except OffsetOutOfRangeError:
                if position >= log.log_start_offset:
                    break
                position = log.log_start_offset
                continue
            except (RecordError, KafkaStorageError) as error:
                logger.error(
                    "[TransactionCoordinator id=%d] Loading %s-%d stopped at offset %d: %s",
                    self.node_id,
                    TXN_TOPIC,
                    shard.partition,
                    position,
                    error,
                )
                return
            if not view:
                break
            await asyncio.sleep(0)
        if self._shards.get(shard.partition) is not shard:
            return
        shard.loaded = True
        logger.info(
            "[TransactionCoordinator id=%d] Loaded %s-%d at epoch %d: %d records, %d "
            "transactional ids",
            self.node_id,
            TXN_TOPIC,
            shard.partition,
            shard.leader_epoch,
            records_read,
            len(shard.txns),
        )
        for meta in list(shard.txns.values()):
            if meta.state in state.PREPARED:
                shard.pending.add(meta.transactional_id)
                self._spawn(self._finish(shard, meta))

    def _replay(self, shard: TxnShard, record: Record) -> None:
        if record.key is None:
            return
        try:
            transactional_id = decode_key(record.key)
            if transactional_id is None:
                return
            if record.value is None:
                shard.txns.pop(transactional_id, None)
                return
            meta = TxnMetadata.from_value(transactional_id, decode_value(record.value))
        except RecordError as error:
            meta, transactional_id = None, f"unreadable ({error})"
        if meta is None:
            logger.error(
                "[TransactionCoordinator id=%d] Skipping a record of %s-%d: transactional id %s",
                self.node_id,
                TXN_TOPIC,
                shard.partition,
                transactional_id,
            )
            return
        shard.txns[transactional_id] = meta

    def shard_for(self, transactional_id: str) -> TxnShard | ErrorCode:
        """The loaded shard holding a transactional id, or why this broker cannot answer."""
        image = self._image
        if image is None:
            return ErrorCode.coordinator_not_available
        shard = self._shards.get(self.partition_of(transactional_id, image))
        if shard is None:
            return ErrorCode.not_coordinator
        if not shard.loaded:
            return ErrorCode.coordinator_load_in_progress
        return shard

    # ---- writes ----------------------------------------------------------------------------
    async def _write(
        self, shard: TxnShard, transactional_id: str, target: TxnMetadata | None
    ) -> ErrorCode:
        """Append the id's new state (None: a tombstone) with acks=all; once acknowledged
        by this same leadership, it is the current state."""
        now_ms = self._clock.now_ms()
        value = None if target is None else encode_value(target.to_value())
        batch = encode_batch([Record(encode_key(transactional_id), value, now_ms)])
        result = await self._replicas.append(
            TXN_TOPIC,
            shard.partition,
            batch,
            -1,
            self.config.transaction_state_log_write_timeout_ms / 1000,
        )
        if result.error is not ErrorCode.none:
            error = _WRITE_ERRORS.get(result.error, ErrorCode.unknown_server_error)
            logger.warning(
                "[TransactionCoordinator id=%d] Writing %s of %s failed: %s",
                self.node_id,
                "a tombstone" if target is None else target.state.value,
                transactional_id,
                result.error.name,
            )
            return error
        if self._shards.get(shard.partition) is not shard:
            return ErrorCode.not_coordinator
        if target is None:
            shard.txns.pop(transactional_id, None)
        else:
            before = shard.txns.get(transactional_id)
            shard.txns[transactional_id] = target
            if before is None or before.state is not target.state:
                logger.info(
                    "[TransactionCoordinator id=%d] %s (producer %d epoch %d): %s -> %s",
                    self.node_id,
                    transactional_id,
                    target.producer_id,
                    target.producer_epoch,
                    "new" if before is None else before.state.value,
                    target.state.value,
                )
        return ErrorCode.none

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(work)
        self._writes[task] = None
        task.add_done_callback(lambda done: self._writes.pop(done, None))
        return task

    async def _prepare_and_finish(
        self, shard: TxnShard, transactional_id: str, target: TxnMetadata
    ) -> ErrorCode | asyncio.Task[None]:
        """Write PrepareCommit/PrepareAbort (the caller marked the id pending); on success
        the markers and the Complete state follow in the background (the task returned),
        the id pending until then."""
        error = await self._write(shard, transactional_id, target)
        if error is not ErrorCode.none:
            return error
        return self._spawn(self._finish(shard, target))

    async def _complete_before_markers(
        self, shard: TxnShard, prepared: TxnMetadata, current: Any
    ) -> None:
        """The planted txn-complete-before-markers: Complete written and the id free for its
        next transaction first, the markers after."""
        transactional_id = prepared.transactional_id
        while current():
            target = state.complete(prepared, self._clock.now_ms())
            if await self._write(shard, transactional_id, target) is ErrorCode.none:
                break
            await asyncio.sleep(self.config.transaction_marker_retry_backoff_ms / 1000)
        shard.pending.discard(transactional_id)
        await self.markers.send(prepared, shard.leader_epoch, current)

    async def _finish(self, shard: TxnShard, prepared: TxnMetadata) -> None:
        """Markers to every partition, then CompleteCommit/CompleteAbort (retried while this
        leadership lasts). The id stays pending throughout."""
        transactional_id = prepared.transactional_id
        current = lambda: self._shards.get(shard.partition) is shard  # noqa: E731
        try:
            if TXN_COMPLETE_BEFORE_MARKERS in self._replicas.bugs:
                await self._complete_before_markers(shard, prepared, current)
                return
            if not await self.markers.send(prepared, shard.leader_epoch, current):
                return
            while current():
                target = state.complete(prepared, self._clock.now_ms())
                if await self._write(shard, transactional_id, target) is ErrorCode.none:
                    return
                await asyncio.sleep(self.config.transaction_marker_retry_backoff_ms / 1000)
        finally:
            shard.pending.discard(transactional_id)

    # ---- requests ----------------------------------------------------------------------------
    def _begin(self, transactional_id: str) -> TxnShard | ErrorCode:
        """The shard for a request that may write: CONCURRENT_TRANSACTIONS while another
        write of the same id is in flight."""
        shard = self.shard_for(transactional_id)
        if isinstance(shard, TxnShard) and transactional_id in shard.pending:
            return ErrorCode.concurrent_transactions
        return shard

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitResult:
        """InitProducerId with a transactional id: the id's producer id with a bumped epoch
        (fencing every older instance), after aborting a transaction it left open."""
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.config.transaction_max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        shard = self._begin(transactional_id)
        if isinstance(shard, ErrorCode):
            return InitResult(shard)
        expected = (producer_id, producer_epoch) if producer_id >= 0 else None
        shard.pending.add(transactional_id)
        finishing = False  # the pending mark then passes to the markers' task
        try:
            meta = shard.txns.get(transactional_id)
            now_ms = self._clock.now_ms()
            if meta is None:
                fresh = await self._producer_ids.next_id()
                if isinstance(fresh, ErrorCode):
                    return InitResult(fresh)
                meta = state.new_transactional_id(transactional_id, fresh, timeout_ms, now_ms)
            new_id = None
            if state.needs_new_producer_id(meta, None if expected is None else expected[1]):
                allocated = await self._producer_ids.next_id()
                if isinstance(allocated, ErrorCode):
                    return InitResult(allocated)
                new_id = allocated
            decision = state.init_producer_id(meta, timeout_ms, expected, now_ms, new_id)
            if isinstance(decision, ErrorCode):
                return InitResult(decision)
            if isinstance(decision, Fence):
                logger.info(
                    "[TransactionCoordinator id=%d] %s: a new producer fences epoch %d and "
                    "aborts its ongoing transaction",
                    self.node_id,
                    transactional_id,
                    meta.producer_epoch,
                )
                target = state.abort_fenced(decision.fenced, now_ms)
                started = await self._prepare_and_finish(shard, transactional_id, target)
                if isinstance(started, ErrorCode):
                    return InitResult(started)
                finishing = True
                # The client retries, and gets its epoch once the abort is complete.
                return InitResult(ErrorCode.concurrent_transactions)
            error = await self._write(shard, transactional_id, decision)
            if error is not ErrorCode.none:
                return InitResult(error)
            return InitResult(ErrorCode.none, decision.producer_id, decision.producer_epoch)
        finally:
            if not finishing:
                shard.pending.discard(transactional_id)

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
        transaction_version: int = state.TV1,
    ) -> ErrorCode:
        """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition);
        ``transaction_version`` 2: a partition leader's implicit add for Produce v12."""
        shard = self._begin(transactional_id)
        if isinstance(shard, ErrorCode):
            return shard
        decision = state.add_partitions(
            shard.txns.get(transactional_id),
            producer_id,
            producer_epoch,
            partitions,
            self._clock.now_ms(),
            transaction_version,
        )
        if isinstance(decision, ErrorCode):
            return decision
        if decision is shard.txns.get(transactional_id):
            return ErrorCode.none  # already in the transaction
        shard.pending.add(transactional_id)
        try:
            return await self._write(shard, transactional_id, decision)
        finally:
            shard.pending.discard(transactional_id)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
    ) -> ErrorCode | dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ verify-only: which partitions the open transaction has."""
        shard = self._begin(transactional_id)
        if isinstance(shard, ErrorCode):
            return shard
        return state.verify_partitions(
            shard.txns.get(transactional_id), producer_id, producer_epoch, partitions
        )

    async def end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        transaction_version: int = state.TV1,
    ) -> InitResult:
        """EndTxn. Kafka answers once PrepareCommit/PrepareAbort is written, and the
        producer's next transaction then meets CONCURRENT_TRANSACTIONS until the markers
        are all written (librdkafka retries it after 100 ms). Here the answer waits for the
        markers and the Complete state too, up to ``transaction.end.wait.for.markers.ms``,
        then is NONE either way: the outcome is decided and durable once prepared.

        ``transaction_version`` 2 (EndTxn v5): the epoch is bumped by the prepare (state
        ``end_transaction_v2``) and the answer carries the producer id and epoch the client
        continues with: the Complete state's, a new producer id when the epoch ran out."""
        shard = self.shard_for(transactional_id)
        if isinstance(shard, ErrorCode):
            return InitResult(shard)
        meta = shard.txns.get(transactional_id)
        now_ms = self._clock.now_ms()
        decision: ErrorCode | state.Ended | TxnMetadata
        if transaction_version >= state.TV2:
            next_id = state.NO_PRODUCER_ID
            if state.needs_rotation_at_end(meta):
                if transactional_id in shard.pending:
                    return InitResult(ErrorCode.concurrent_transactions)
                allocated = await self._producer_ids.next_id()
                if isinstance(allocated, ErrorCode):
                    return InitResult(allocated)
                next_id = allocated
                meta = shard.txns.get(transactional_id)  # as it is after the wait
                now_ms = self._clock.now_ms()
                if not state.needs_rotation_at_end(meta):
                    return InitResult(ErrorCode.concurrent_transactions)  # changed: retry
            decision = state.end_transaction_v2(
                meta, producer_id, producer_epoch, commit, now_ms, next_id
            )
        else:
            decision = state.end_transaction(meta, producer_id, producer_epoch, commit, now_ms)
        if isinstance(decision, ErrorCode):
            return InitResult(decision)
        if isinstance(decision, state.Ended):
            return InitResult(
                ErrorCode.none, decision.meta.producer_id, decision.meta.producer_epoch
            )
        if transactional_id in shard.pending:
            return InitResult(ErrorCode.concurrent_transactions)
        shard.pending.add(transactional_id)
        started = await self._prepare_and_finish(shard, transactional_id, decision)
        if isinstance(started, ErrorCode):
            shard.pending.discard(transactional_id)
            return InitResult(started)
        wait_ms = self.config.transaction_end_wait_for_markers_ms
        if wait_ms > 0 and TXN_COMPLETE_BEFORE_MARKERS not in self._replicas.bugs:
            await asyncio.wait({started}, timeout=wait_ms / 1000)  # never cancels it
        if transaction_version < state.TV2:
            return InitResult(ErrorCode.none, decision.producer_id, decision.producer_epoch)
        after = state.complete(decision, now_ms)  # who the client is once it completes
        return InitResult(ErrorCode.none, after.producer_id, after.producer_epoch)

    # ---- time --------------------------------------------------------------------------------
    async def _every(self, interval_ms: int, work: Any) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await work()

    async def abort_timed_out(self) -> None:
        """Fence and abort every Ongoing transaction past its transaction.timeout.ms."""
        if TXN_TIMEOUT_NEVER_ABORTS in self._replicas.bugs:  # planted
            return
        now_ms = self._clock.now_ms()
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            for meta in list(shard.txns.values()):
                if not state.timed_out(meta, now_ms) or meta.transactional_id in shard.pending:
                    continue
                logger.info(
                    "[TransactionCoordinator id=%d] Aborting %s (producer %d epoch %d): "
                    "open for more than its %d ms timeout",
                    self.node_id,
                    meta.transactional_id,
                    meta.producer_id,
                    meta.producer_epoch,
                    meta.timeout_ms,
                )
                target = state.abort_fenced(state.fence(meta, now_ms), now_ms)
                shard.pending.add(meta.transactional_id)
                started = await self._prepare_and_finish(shard, meta.transactional_id, target)
                if isinstance(started, ErrorCode):
                    shard.pending.discard(meta.transactional_id)

    async def expire_transactional_ids(self) -> None:
        """A tombstone for every id idle longer than transactional.id.expiration.ms."""
        now_ms = self._clock.now_ms()
        expiration_ms = self.config.transactional_id_expiration_ms
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            for meta in list(shard.txns.values()):
                txn_id = meta.transactional_id
                if not state.expired(meta, now_ms, expiration_ms) or txn_id in shard.pending:
                    continue
                state.transit(meta, TxnState.DEAD, now_ms)  # checked, not kept: a tombstone
                shard.pending.add(txn_id)
                try:
                    if await self._write(shard, txn_id, None) is ErrorCode.none:
                        logger.info(
                            "[TransactionCoordinator id=%d] Transactional id %s expired",
                            self.node_id,
                            txn_id,
                        )
                finally:
                    shard.pending.discard(txn_id)

    # ---- describing --------------------------------------------------------------------------
    def describe(self, transactional_id: str) -> ErrorCode | TxnMetadata:
        shard = self.shard_for(transactional_id)
        if isinstance(shard, ErrorCode):
            return shard
        meta = shard.txns.get(transactional_id)
        return ErrorCode.transactional_id_not_found if meta is None else meta

    def transactions(self) -> ErrorCode | list[TxnMetadata]:
        """Every transactional id coordinated here (COORDINATOR_LOAD_IN_PROGRESS while a
        partition loads)."""
        found: list[TxnMetadata] = []
        for shard in self._shards.values():
            if not shard.loaded:
                return ErrorCode.coordinator_load_in_progress
            found += shard.txns.values()
        return sorted(found, key=lambda meta: meta.transactional_id)
