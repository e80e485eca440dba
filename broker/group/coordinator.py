"""Kafka's group coordinator: classic groups and committed offsets, kept in ``__consumer_offsets``.

A broker coordinates the groups whose partition of ``__consumer_offsets`` it leads (the
partition is ``records.partition_for(group id)``). When it becomes that partition's leader it
loads the partition (every committed record, replayed in order) into a ``Shard``; when it
stops leading, the shard and its groups are dropped and waiting requests answered
NOT_COORDINATOR, so clients find the new coordinator. Until a shard is loaded its groups
answer COORDINATOR_LOAD_IN_PROGRESS.

Every write (offset commits, a group's assignment, tombstones) goes through the partition's
normal leader append with acks=all: a request is answered only once the high watermark has
passed its record, so a replicated offsets topic keeps every acknowledged commit across a
coordinator failover. The in-memory state changes only after the write succeeds, and only
while the same leader epoch holds the shard.

The group logic itself is the sans-I/O ``ClassicGroup``; this module owns the I/O around
it: futures for JoinGroup/SyncGroup answers that come later, one timer loop for every
group's deadlines (asyncio time), the record writes, loading, and offsets retention.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.bugs import COORDINATOR_HW_OVER_TRUNCATED, TXN_OFFSETS_KEPT_ON_ABORT
from broker.group.classic import (
    ClassicGroup,
    GroupState,
    JoinReply,
    JoinRequest,
    Outcome,
    Persist,
    Reply,
    SyncReply,
)
from broker.group.config import GroupCoordinatorConfig
from broker.group.consumer_coordinator import ConsumerGroupCoordinator
from broker.group.consumer_group import ConsumerGroup
from broker.group.member_budget import MemberMetadataBudget, protocols_bytes
from broker.group.records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    partition_for,
)
from broker.group.shard import (
    CommittedOffset,
    OffsetCommit,
    Shard,
    TopicPartition,
    validate_commit,
)
from broker.replica_manager import ReplicaManager
from broker.txn.control import control_type
from log.batch import decode_batch, encode_batch
from log.clock import WallClock
from log.errors import RecordError
from log.log import KafkaStorageError, OffsetOutOfRangeError
from log.rate_limited_log import ClipLongArguments, RateLimitedLog
from log.records import Record
from metadata.image import MetadataImage
from protocol.turns import Turns
from protocol.wire import MAX_STRING_BYTES

logger = logging.getLogger("broker.group.coordinator")
# Group, member, instance and client ids are the client's, up to 32,767 bytes each.
logger.addFilter(ClipLongArguments())
_limited = RateLimitedLog(logger)

OFFSETS_TOPIC = "__consumer_offsets"
LOAD_YIELD_BYTES = 1 << 20  # loading yields to the loop after each MiB read
# Kafka's mapping of append errors to what a group client understands.
_WRITE_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
}


class GroupCoordinator:
    """Classic groups and offsets of the ``__consumer_offsets`` partitions led here."""

    def __init__(
        self,
        node_id: int,
        replicas: ReplicaManager,
        config: GroupCoordinatorConfig,
        rng: random.Random,
        clock: WallClock,
        *,
        bugs: frozenset[str] = frozenset(),
    ) -> None:
        self.node_id = node_id
        self.bugs = bugs  # planted (broker/bugs.py); simulator only
        self.config = config
        self._replicas = replicas
        self._rng = rng
        self._clock = clock
        self._limits = config.limits()
        self._shards: dict[int, Shard] = {}
        self._waiters: dict[tuple[str, type[Reply], str], asyncio.Future[Reply]] = {}
        self._image: MetadataImage | None = None
        self._topic_ids: dict[str, uuid.UUID] = {}  # as of the last image: finds deletions
        self._image_changed = asyncio.Event()
        self._applied_offset = -1  # the last image whose leadership changes are done
        self._applied = asyncio.Event()  # set and replaced after each image
        self._timer_wake = asyncio.Event()
        self._alarm_at: float | None = None  # when the timer loop wakes next by itself
        self._tasks: list[asyncio.Task[None]] = []
        # Insertion-ordered (a dict, not a set): cancelling and gathering them in a
        # hash order of task ids would make the simulator's runs depend on memory layout.
        self._writes: dict[asyncio.Task[None], None] = {}
        self.member_budget = MemberMetadataBudget(
            config.group_coordinator_member_metadata_max_bytes
        )
        self.consumer = ConsumerGroupCoordinator(
            node_id,
            self.shard_for,
            self._write,
            lambda: self._image,
            clock,
            self._wake_before,
            self.member_budget,
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
            loop.create_task(self._timers()),
            loop.create_task(self._expire_offsets_forever()),
        ]

    async def close(self) -> None:
        for task in [*self._tasks, *self._writes]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._writes, return_exceptions=True)
        await self.consumer.close()
        for shard in list(self._shards.values()):
            self._unload(shard)

    def num_partitions(self, image: MetadataImage) -> int:
        """The topic's partition count once it exists (Kafka's rule), else the config's."""
        topic = image.topics.get(OFFSETS_TOPIC)
        if topic is not None and topic.partitions:
            return len(topic.partitions)
        return self.config.offsets_topic_num_partitions

    def partition_of(self, group_id: str, image: MetadataImage) -> int:
        return partition_for(group_id, self.num_partitions(image))

    # ---- leadership ------------------------------------------------------------------------
    async def _follow_leadership(self) -> None:
        """Load the partitions newly led here, drop those no longer led, image by image
        (after the ReplicaManager has reflected it, so the partition is there to read)."""
        while True:
            await self._image_changed.wait()
            self._image_changed.clear()
            image = self._image
            assert image is not None
            await self._replicas.wait_reconciled(image.offset)
            leading = image.topics.led_by(OFFSETS_TOPIC, self.node_id)
            for index, shard in list(self._shards.items()):
                if leading.get(index) != shard.leader_epoch:
                    self._unload(shard)
            for index in sorted(leading):
                if index not in self._shards:
                    shard = self._shards[index] = Shard(
                        index,
                        leading[index],
                        self._limits,
                        self._member_id,
                        replace(self.config.consumer_limits(), bugs=self.bugs),
                    )
                    await self._load(shard)
            gone = frozenset(
                name
                for name, id_ in self._topic_ids.items()
                if image.topics.by_name.get(name) != id_
            )
            self._topic_ids = dict(image.topics.by_name)
            if gone:
                self._spawn(self._forget_topics(gone))
            self._applied_offset = image.offset
            applied, self._applied = self._applied, asyncio.Event()
            applied.set()

    async def wait_applied(self, offset: int) -> None:
        """Until the shards reflect the image at ``offset`` or later (loaded or dropped)."""
        while self._applied_offset < offset:  # each pass: one image
            await self._applied.wait()

    async def _forget_topics(self, gone: frozenset[str]) -> None:
        """Kafka's onPartitionsDeleted: the committed offsets of deleted topics get
        tombstones in every group this broker coordinates."""
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            for group_id, offsets in list(shard.offsets.items()):
                doomed = sorted(where for where in offsets if where[0] in gone)
                if doomed:
                    await self._delete_offsets(shard, group_id, doomed)

    def _unload(self, shard: Shard) -> None:
        if self._shards.get(shard.partition) is shard:
            del self._shards[shard.partition]
        for group in shard.groups.values():
            if group.state is not GroupState.DEAD:
                self._deliver(group, group.mark_dead().replies)
            self.member_budget.drop_group(group.group_id)
        self.consumer.unload(shard)
        if shard.loaded:
            logger.info(
                "[GroupCoordinator id=%d] Unloaded %s-%d (%d groups): no longer its leader",
                self.node_id,
                OFFSETS_TOPIC,
                shard.partition,
                len(shard.groups),
            )

    async def _load(self, shard: Shard) -> None:
        """Replay the partition into the shard, a bounded read at a time, up to the log end:
        as in Kafka, a new leader's high watermark may still lag records that were
        acknowledged under the previous leader, and its log (which followers truncate to)
        holds them."""
        log = self._replicas.logs.get_log(OFFSETS_TOPIC, shard.partition)
        now, records_read = asyncio.get_running_loop().time(), 0
        position = log.log_start_offset if log is not None else 0
        while log is not None and self._shards.get(shard.partition) is shard:  # log is finite
            try:
                data = log.read(position, self.config.offsets_load_buffer_size)
                view = bytes(data.records)
                pos = 0
                while pos < len(view):
                    header, records = decode_batch(view, pos)
                    pos += header.size
                    position = header.next_offset
                    producer_id = header.producer_id if header.is_transactional else -1
                    if header.is_control:
                        committed = control_type(records)
                        if committed is not None:
                            shard.note_epoch(producer_id, header.producer_epoch)
                            shard.complete_txn(producer_id, committed)
                        continue
                    if producer_id >= 0:
                        if shard.fenced(producer_id, header.producer_epoch):
                            continue  # a fenced zombie's offsets: never pending
                        shard.note_epoch(producer_id, header.producer_epoch)
                    for record in records:
                        self._replay(shard, record, header.base_offset, now, producer_id)
                        records_read += 1
            except OffsetOutOfRangeError:
                if position >= log.log_start_offset:
                    break
                position = log.log_start_offset  # retention moved the start meanwhile
                continue
            except (RecordError, KafkaStorageError) as error:
                logger.error(
                    "[GroupCoordinator id=%d] Loading %s-%d stopped at offset %d: %s",
                    self.node_id,
                    OFFSETS_TOPIC,
                    shard.partition,
                    position,
                    error,
                )
                return
            if not view:
                break
            await asyncio.sleep(0)  # other work runs between reads
        if self._shards.get(shard.partition) is not shard:
            return
        shard.loaded = True
        self.consumer.start(shard)
        logger.info(
            "[GroupCoordinator id=%d] Loaded %s-%d at epoch %d: %d records, %d groups",
            self.node_id,
            OFFSETS_TOPIC,
            shard.partition,
            shard.leader_epoch,
            records_read,
            len(shard.groups) + len(shard.consumer_groups),
        )
        self._timer_wake.set()

    def _replay(
        self, shard: Shard, record: Record, base_offset: int, now: float, producer_id: int
    ) -> None:
        if record.key is None:
            return
        try:
            shard.replay(
                record.key,
                record.value,
                base_offset + (record.offset_delta or 0),
                now,
                producer_id,
            )
        except RecordError as error:
            # Kafka's loader fails the partition on a record it cannot read; the batch CRC
            # held, so this is a format we do not know: skip it, loudly.
            logger.error(
                "[GroupCoordinator id=%d] Skipping an unreadable record of %s-%d: %s",
                self.node_id,
                OFFSETS_TOPIC,
                shard.partition,
                error,
            )

    def new_member_id(self) -> str:
        """A KIP-848 member id for a v0 ConsumerGroupHeartbeat (v1 clients make their own)."""
        return str(uuid.UUID(int=self._rng.getrandbits(128), version=4))

    def _member_id(self, prefix: str) -> str:
        """Kafka's classic member id, ``<client id or group.instance.id>-<UUID>``, with the
        prefix cut so the id stays a string a record can hold: both prefixes may be
        MAX_STRING_BYTES long, and an id past it could not be stored (Kafka's writer fails
        on it too), so the member would never be answered."""
        suffix = f"-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"
        room = MAX_STRING_BYTES - len(suffix)
        if len(prefix) * 4 > room:  # UTF-8 takes at most 4 bytes a character
            prefix = prefix.encode()[:room].decode(errors="ignore")
        return prefix + suffix

    def shard_for(self, group_id: str) -> Shard | ErrorCode:
        """The loaded shard holding a group, or why this broker cannot answer for it."""
        image = self._image
        if image is None:
            return ErrorCode.coordinator_not_available
        shard = self._shards.get(self.partition_of(group_id, image))
        if shard is None:
            return ErrorCode.not_coordinator
        if not shard.loaded:
            return ErrorCode.coordinator_load_in_progress
        return shard

    # ---- writes ----------------------------------------------------------------------------
    async def _write(
        self, shard: Shard, records: list[Record], producer: tuple[int, int] | None = None
    ) -> tuple[ErrorCode, int]:
        """Append records to the shard's partition with acks=all; (error, base offset).
        ``producer``: (id, epoch) of the transaction the records belong to."""
        # A transaction's batch is the coordinator's own (Kafka's AppendOrigin.COORDINATOR).
        coordinator = producer is not None
        if producer is None:
            batch = encode_batch(records)
        else:
            batch = encode_batch(
                records,
                producer_id=producer[0],
                producer_epoch=producer[1],
                is_transactional=True,
            )
        if COORDINATOR_HW_OVER_TRUNCATED in self.bugs:
            return await self._write_until_high_watermark(shard, batch, len(records), coordinator)
        result = await self._replicas.append(
            OFFSETS_TOPIC,
            shard.partition,
            batch,
            -1,
            self.config.offsets_commit_timeout_ms / 1000,
            coordinator=coordinator,
        )
        if result.error is not ErrorCode.none:
            return _WRITE_ERRORS.get(result.error, ErrorCode.unknown_server_error), -1
        if self._shards.get(shard.partition) is not shard:
            return ErrorCode.not_coordinator, -1  # leadership moved while we waited
        return ErrorCode.none, result.base_offset

    async def _write_until_high_watermark(
        self, shard: Shard, batch: bytes, count: int, coordinator: bool
    ) -> tuple[ErrorCode, int]:
        """The planted bug (KAFKA-20634): append as leader, then acknowledge once this
        broker's high watermark of the partition passes the records' offsets, even if it
        lost leadership meanwhile, truncated them and refilled those offsets with the new
        leader's records: the commit is acknowledged and lost."""
        key = (OFFSETS_TOPIC, shard.partition)
        timeout_s = self.config.offsets_commit_timeout_ms / 1000
        result = await self._replicas.append(*key, batch, 1, timeout_s, coordinator=coordinator)
        if result.error is not ErrorCode.none:
            return _WRITE_ERRORS.get(result.error, ErrorCode.unknown_server_error), -1
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (self._replicas.high_watermark_of(key) or 0) < result.base_offset + count:
            if loop.time() >= deadline:
                return ErrorCode.coordinator_not_available, -1
            # A follower's high watermark moves without a notification: look again soon.
            await self._replicas.delayed.wait((key,), min(0.05, deadline - loop.time()))
        return ErrorCode.none, result.base_offset

    def _handle(
        self, shard: Shard, group: ClassicGroup, out: Outcome, before: tuple[GroupState, int, int]
    ) -> None:
        """Deliver an outcome's replies, start its write, log what changed, count what its
        members keep."""
        self._log_transition(group, before)
        self.member_budget.sync_group(
            group.group_id,
            {m.member_id: protocols_bytes(m.protocols) for m in group.members.values()},
        )
        self._deliver(group, out.replies)
        if out.persist is not None:
            self._spawn(self._persist(shard, group, out.persist))
        self._timer_wake.set()

    def _spawn(self, write: Coroutine[Any, Any, None]) -> None:
        """Run a background write; close() cancels the ones still waiting."""
        task = asyncio.get_running_loop().create_task(write)
        self._writes[task] = None
        task.add_done_callback(lambda done: self._writes.pop(done, None))

    async def _persist(self, shard: Shard, group: ClassicGroup, persist: Persist) -> None:
        now_ms = self._clock.now_ms()
        value = replace(persist.value, current_state_timestamp_ms=now_ms)
        record = Record(
            encode_group_key(GroupKey(group.group_id)), encode_group_value(value), now_ms
        )
        error, _ = await self._write(shard, [record])
        if error is ErrorCode.none:
            group.state_timestamp_ms = now_ms
        else:
            logger.warning(
                "[GroupCoordinator id=%d] Storing group %s generation %d failed: %s",
                self.node_id,
                group.group_id,
                persist.generation,
                error.name,
            )
        before = _snapshot(group)
        out = group.persisted(persist.generation, error, asyncio.get_running_loop().time())
        self._handle(shard, group, out, before)

    def _deliver(self, group: ClassicGroup, replies: list[Reply]) -> None:
        for reply in replies:
            waiter = self._waiters.pop((group.group_id, type(reply), reply.member_id), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(reply)

    async def _answer(
        self,
        shard: Shard,
        group: ClassicGroup,
        out: Outcome,
        before: tuple[GroupState, int, int],
        kind: type[Reply],
        member_id: str,
    ) -> Reply:
        """The member's own reply: in this outcome already, or delivered by a later one
        (a rebalance completing, the assignment stored). Any reply for that member id in
        this outcome is this request's: every other waiting member has another id."""
        own = next(
            (r for r in out.replies if isinstance(r, kind) and r.member_id == member_id), None
        )
        if own is not None:
            out.replies.remove(own)
            self._handle(shard, group, out, before)
            return own
        waiting = self._waiter(group, kind, member_id)
        self._handle(shard, group, out, before)
        return await waiting

    def _waiter(
        self, group: ClassicGroup, kind: type[Reply], member_id: str
    ) -> asyncio.Future[Reply]:
        """A future for a member's JoinGroup or SyncGroup answer, registered at once."""
        key = (group.group_id, kind, member_id)
        previous = self._waiters.get(key)
        if previous is not None and not previous.done():
            # The member asked again before its first answer: the first is superseded.
            previous.set_result(kind(member_id, ErrorCode.rebalance_in_progress))
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiters[key] = future
        return future

    def _log_transition(self, group: ClassicGroup, before: tuple[GroupState, int, int]) -> None:
        """One INFO line per state or generation change (never per heartbeat)."""
        state, generation, members = before
        if group.state is state and group.generation == generation:
            return
        logger.info(
            "[GroupCoordinator id=%d] Group %s: %s (generation %d, %d members) -> %s "
            "(generation %d, %d members, protocol %s, leader %s)",
            self.node_id,
            group.group_id,
            state.value,
            generation,
            members,
            group.state.value,
            group.generation,
            len(group.members),
            group.protocol_name,
            group.leader,
        )

    # ---- timers ----------------------------------------------------------------------------
    async def _timers(self) -> None:
        """Run every group's due deadlines; sleep until the next one or a change."""
        loop = asyncio.get_running_loop()
        while True:
            self._timer_wake.clear()
            now = loop.time()
            next_at: float | None = None
            for shard in list(self._shards.values()):
                if not shard.loaded:
                    continue
                for group in list(shard.groups.values()):
                    deadline = group.next_deadline()
                    if deadline is None:
                        continue
                    if deadline <= now:
                        before = _snapshot(group)
                        self._handle(shard, group, group.tick(now), before)
                        deadline = group.next_deadline()
                    if deadline is not None and deadline > now:
                        next_at = deadline if next_at is None else min(next_at, deadline)
                deadline = self.consumer.due(shard, now)
                if deadline is not None:
                    next_at = deadline if next_at is None else min(next_at, deadline)
            self._timer_wake.clear()  # what this pass did itself needs no second pass
            # A timer that sets the event, rather than wait_for: Python 3.11's wait_for can
            # swallow a cancellation that arrives as the event is set, and close() would hang.
            self._alarm_at = next_at
            alarm = loop.call_at(next_at, self._timer_wake.set) if next_at is not None else None
            try:
                await self._timer_wake.wait()
            finally:
                if alarm is not None:
                    alarm.cancel()

    def _wake_before(self, deadline: float) -> None:
        """A new deadline: wake the timer loop only if it would sleep past it (a heartbeat
        only pushes its member's session later, so most wake nothing)."""
        if self._alarm_at is None or deadline < self._alarm_at:
            self._alarm_at = deadline
            self._timer_wake.set()

    # ---- group requests ----------------------------------------------------------------------
    async def join(self, group_id: str, request: JoinRequest) -> JoinReply:
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return JoinReply(request.member_id, shard)
        if group_id in shard.consumer_groups or self.consumer.busy(group_id):
            # Kafka's answer when classic members may not join a consumer group
            # (group.consumer.migration.policy=disabled, the only policy built here).
            return JoinReply(request.member_id, ErrorCode.inconsistent_group_protocol)
        group = shard.groups.get(group_id)
        if group is None:
            if request.member_id:
                return JoinReply(request.member_id, ErrorCode.unknown_member_id)
            group = shard.group(group_id)
        if not self.member_budget.fits(
            group_id, request.member_id, protocols_bytes(request.protocols)
        ):
            _limited.log(
                "member-metadata",
                logging.WARNING,
                "[GroupCoordinator id=%d] JoinGroup of %s to group %s refused: its metadata "
                "would take the members' metadata past "
                "group.coordinator.member.metadata.max.bytes %d",
                self.node_id,
                request.client_id,
                group_id,
                self.member_budget.max_bytes,
            )
            return JoinReply(request.member_id, ErrorCode.group_max_size_reached)
        before, known = _snapshot(group), set(group.members)
        member_id, out = group.join(request, asyncio.get_running_loop().time())
        if member_id in group.members and member_id not in known:
            logger.info(
                "[GroupCoordinator id=%d] Member %s (client %s, instance %s) joins group %s",
                self.node_id,
                member_id,
                request.client_id,
                request.group_instance_id,
                group_id,
            )
        reply = await self._answer(shard, group, out, before, JoinReply, member_id)
        assert isinstance(reply, JoinReply)
        return reply

    async def sync(
        self,
        group_id: str,
        member_id: str,
        instance: str | None,
        generation: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> SyncReply:
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return SyncReply(member_id, shard)
        group = shard.groups.get(group_id)
        if group is None:
            return SyncReply(member_id, ErrorCode.unknown_member_id)
        before = _snapshot(group)
        out = group.sync(
            member_id,
            instance,
            generation,
            protocol_type,
            protocol_name,
            assignments,
            asyncio.get_running_loop().time(),
        )
        reply = await self._answer(shard, group, out, before, SyncReply, member_id)
        assert isinstance(reply, SyncReply)
        return reply

    def heartbeat(
        self, group_id: str, member_id: str, instance: str | None, generation: int
    ) -> ErrorCode:
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        group = shard.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        return group.heartbeat(member_id, instance, generation, asyncio.get_running_loop().time())

    def leave(
        self, group_id: str, members: list[tuple[str, str | None]]
    ) -> ErrorCode | list[ErrorCode]:
        """LeaveGroup: a group-level error, or one error per (member id, instance id)."""
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        group = shard.groups.get(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id] * len(members)
        now = asyncio.get_running_loop().time()
        errors = []
        for member_id, instance in members:
            before = _snapshot(group)
            error, out = group.leave(member_id, instance, now)
            if error is ErrorCode.none:
                logger.info(
                    "[GroupCoordinator id=%d] Member %s (instance %s) left group %s",
                    self.node_id,
                    member_id,
                    instance,
                    group_id,
                )
            self._handle(shard, group, out, before)
            errors.append(error)
        return errors

    # ---- offsets ---------------------------------------------------------------------------
    async def _commit_records(
        self, group_id: str, commits: list[OffsetCommit], known_topic: Callable[[str, int], bool]
    ) -> tuple[list[ErrorCode], list[Record], list[tuple[int, TopicPartition, OffsetValue]]]:
        """A commit's checks and records, shared by OffsetCommit and TxnOffsetCommit: one error
        per commit, in order; the records of those accepted; and (index, partition, value)
        of each accepted one, to apply once its write is acknowledged. Worked on a slice of
        commits a turn of the loop (issue 22: a commit names up to 200,000 partitions)."""
        now_ms = self._clock.now_ms()
        errors: list[ErrorCode] = []
        records: list[Record] = []
        accepted: list[tuple[int, TopicPartition, OffsetValue]] = []
        turns = Turns()
        for commit in commits:
            await turns.tick()
            if not known_topic(commit.topic, commit.partition):
                errors.append(ErrorCode.unknown_topic_or_partition)
            elif len(commit.metadata.encode()) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
            else:
                value = OffsetValue(commit.offset, commit.leader_epoch, commit.metadata, now_ms)
                key = OffsetKey(group_id, commit.topic, commit.partition)
                accepted.append((len(errors), (commit.topic, commit.partition), value))
                records.append(Record(encode_offset_key(key), encode_offset_value(value), now_ms))
                errors.append(ErrorCode.none)
        return errors, records, accepted

    async def commit_offsets(
        self,
        group_id: str,
        member_id: str,
        instance: str | None,
        generation: int,
        commits: list[OffsetCommit],
        known_topic: Callable[[str, int], bool],
    ) -> list[ErrorCode]:
        """OffsetCommit: one error per commit, in order."""
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return [shard] * len(commits)
        consumer = shard.consumer_groups.get(group_id)
        group = shard.groups.get(group_id)
        if consumer is not None:
            error = consumer.validate_offset_commit(member_id, generation)
        else:
            error = validate_commit(group, member_id, instance, generation)
        if error is not ErrorCode.none:
            return [error] * len(commits)
        if group is None and consumer is None:
            shard.group(group_id)  # a simple (admin) commit creates the group, as in Kafka
        errors, records, accepted = await self._commit_records(group_id, commits, known_topic)
        if not records:
            return errors
        error, base_offset = await self._write(shard, records)
        if error is not ErrorCode.none:
            for index, _, _ in accepted:
                errors[index] = error
            return errors
        shard.store_offsets(group_id, [(where, value) for _, where, value in accepted], base_offset)
        return errors

    async def commit_txn_offsets(
        self,
        group_id: str,
        producer: tuple[int, int],
        member_id: str,
        instance: str | None,
        generation: int,
        commits: list[OffsetCommit],
        known_topic: Callable[[str, int], bool],
    ) -> list[ErrorCode]:
        """TxnOffsetCommit: the offsets are written in the producer's transaction and held
        pending until its marker (``complete_transaction``). KIP-447: a member id or a
        generation given is checked against the group as OffsetCommit's are; a client
        before v3 gives neither, and is not.

        An epoch older than one this partition has seen (a marker of a newer epoch: the
        coordinator fenced the producer, by a new instance or on its transaction timeout)
        is INVALID_PRODUCER_EPOCH, Kafka's answer: its log refuses the older epoch's append
        so, and its transaction verification turns the coordinator's PRODUCER_FENCED into
        it. librdkafka and the Java producer take it as fatal: a new instance goes on."""
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return [shard] * len(commits)
        consumer = shard.consumer_groups.get(group_id)
        group = shard.groups.get(group_id)
        if shard.fenced(*producer):
            error = ErrorCode.invalid_producer_epoch
        elif not member_id and generation < 0 and instance is None:
            error = ErrorCode.none
        elif consumer is not None:
            error = consumer.validate_offset_commit(member_id, generation)
        else:
            error = validate_commit(group, member_id, instance, generation)
            if error is ErrorCode.rebalance_in_progress:
                error = ErrorCode.none  # a transaction may commit while members sync
        if error is not ErrorCode.none:
            return [error] * len(commits)
        errors, records, accepted = await self._commit_records(group_id, commits, known_topic)
        if not records:
            return errors
        error, base_offset = await self._write(shard, records, producer)
        if error is ErrorCode.none and shard.fenced(*producer):
            error = ErrorCode.invalid_producer_epoch  # fenced meanwhile; loading skips them
        if error is not ErrorCode.none:
            for index, _, _ in accepted:
                errors[index] = error
            return errors
        shard.note_epoch(*producer)
        shard.store_txn_offsets(
            producer[0], group_id, [(where, value) for _, where, value in accepted], base_offset
        )
        return errors

    def complete_transaction(
        self, offsets_partition: int, producer_id: int, producer_epoch: int, committed: bool
    ) -> None:
        """A producer's transaction marker was appended to ``__consumer_offsets`` partition
        ``offsets_partition`` (by the WriteTxnMarkers handler): its pending offsets there are
        applied (commit) or dropped (abort). A shard still loading reads the marker itself."""
        shard = self._shards.get(offsets_partition)
        if shard is None:
            return
        shard.note_epoch(producer_id, producer_epoch)
        # The planted txn-offsets-kept-on-abort: an abort marker applies the offsets too.
        kept = committed or TXN_OFFSETS_KEPT_ON_ABORT in self.bugs
        count = shard.complete_txn(producer_id, kept)
        if count:
            logger.info(
                "[GroupCoordinator id=%d] %s %d transactional offsets of producer %d (epoch "
                "%d) in %s-%d",
                self.node_id,
                "Committed" if committed else "Dropped",
                count,
                producer_id,
                producer_epoch,
                OFFSETS_TOPIC,
                offsets_partition,
            )

    def unstable_offsets(self, group_id: str) -> frozenset[TopicPartition]:
        """The group's partitions whose offset an open transaction holds (KIP-447)."""
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return frozenset()
        return shard.pending_offsets(group_id)

    def committed_offsets(
        self, group_id: str, member_id: str | None = None, member_epoch: int = -1
    ) -> ErrorCode | Mapping[TopicPartition, CommittedOffset]:
        """The group's committed offsets as its shard holds them (live: read them before the
        loop turns again, or look again), or why an OffsetFetch may not read them: the
        coordinator's error, or a consumer group member's (OffsetFetch v9) stale epoch."""
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        consumer = shard.consumer_groups.get(group_id)
        if consumer is not None:
            error = consumer.validate_offset_fetch(member_id, member_epoch)
            if error is not ErrorCode.none:
                return error
        return shard.offsets.get(group_id, {})

    def fetch_offsets(
        self,
        group_id: str,
        wanted: list[tuple[str, list[int]]] | None,
        member_id: str | None = None,
        member_epoch: int = -1,
    ) -> ErrorCode | list[tuple[str, list[tuple[int, OffsetValue | None]]]]:
        """OffsetFetch of one group: per topic, per partition, its committed offset (None
        when there is none); ``wanted`` None means every committed offset. A consumer
        group's member (OffsetFetch v9) must ask at its current member epoch."""
        offsets = self.committed_offsets(group_id, member_id, member_epoch)
        if isinstance(offsets, ErrorCode):
            return offsets
        if wanted is None:
            by_topic: dict[str, list[tuple[int, OffsetValue | None]]] = {}
            for (topic, partition), committed in sorted(offsets.items()):
                by_topic.setdefault(topic, []).append((partition, committed.value))
            return list(by_topic.items())
        answer = []
        for topic, partitions in wanted:
            answer.append(
                (
                    topic,
                    [
                        (p, found.value if (found := offsets.get((topic, p))) else None)
                        for p in partitions
                    ],
                )
            )
        return answer

    async def delete_offsets(
        self,
        group_id: str,
        wanted: list[tuple[str, list[int]]],
    ) -> ErrorCode | list[tuple[str, list[tuple[int, ErrorCode]]]]:
        """OffsetDelete: offsets of topics no live member subscribes to are removed."""
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        consumer = shard.consumer_groups.get(group_id)
        group = shard.groups.get(group_id)
        subscribed: frozenset[str] | None
        if consumer is not None:
            subscribed = consumer.subscribed_topics() if consumer.members else frozenset()
        elif group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        elif group.members and group.protocol_type != "consumer":
            return ErrorCode.non_empty_group
        else:
            subscribed = group.subscribed_topics() if group.members else frozenset()
        if subscribed is None:
            return ErrorCode.non_empty_group
        offsets = shard.offsets.get(group_id, {})
        answer: list[tuple[str, list[tuple[int, ErrorCode]]]] = []
        doomed: list[TopicPartition] = []
        turns = Turns()  # a request may name 200,000 partitions
        for topic, partitions in wanted:
            errors = []
            for p in partitions:
                await turns.tick()
                if topic in subscribed:
                    errors.append((p, ErrorCode.group_subscribed_to_topic))
                else:
                    errors.append((p, ErrorCode.none))
                    if (topic, p) in offsets:
                        doomed.append((topic, p))
            answer.append((topic, errors))
        if doomed:
            error = await self._delete_offsets(shard, group_id, doomed)
            if error is not ErrorCode.none:
                return error
        return answer

    async def _delete_offsets(
        self, shard: Shard, group_id: str, doomed: list[TopicPartition]
    ) -> ErrorCode:
        now_ms = self._clock.now_ms()
        records = []
        turns = Turns()
        for topic, p in doomed:
            records.append(Record(encode_offset_key(OffsetKey(group_id, topic, p)), None, now_ms))
            await turns.tick()
        error, base_offset = await self._write(shard, records)
        if error is ErrorCode.none:
            shard.forget_offsets(group_id, doomed, base_offset)
        return error

    # ---- listing and deleting groups ---------------------------------------------------------
    def groups(self) -> ErrorCode | list[ClassicGroup | ConsumerGroup]:
        """Every group of the loaded shards (COORDINATOR_LOAD_IN_PROGRESS while loading)."""
        found: list[ClassicGroup | ConsumerGroup] = []
        for shard in self._shards.values():
            if not shard.loaded:
                return ErrorCode.coordinator_load_in_progress
            found += [g for g in shard.groups.values() if g.state is not GroupState.DEAD]
            found += shard.consumer_groups.values()
        return sorted(found, key=lambda g: g.group_id)

    def describe(self, group_id: str) -> ErrorCode | ClassicGroup | None:
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        return shard.groups.get(group_id)

    def describe_consumer(self, group_id: str) -> ErrorCode | ConsumerGroup | None:
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        return shard.consumer_groups.get(group_id)

    async def delete_group(self, group_id: str) -> ErrorCode:
        shard = self.shard_for(group_id)
        if isinstance(shard, ErrorCode):
            return shard
        consumer = shard.consumer_groups.get(group_id)
        if consumer is not None:
            now_ms = self._clock.now_ms()
            offsets = [
                Record(encode_offset_key(OffsetKey(group_id, topic, p)), None, now_ms)
                for topic, p in sorted(shard.offsets.get(group_id, {}))
            ]
            error = await self.consumer.delete(shard, consumer, offsets)
            if error is ErrorCode.none:
                logger.info("[GroupCoordinator id=%d] Deleted group %s", self.node_id, group_id)
            return error
        group = shard.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        error = await self._remove_group(shard, group)
        if error is ErrorCode.none:
            logger.info("[GroupCoordinator id=%d] Deleted group %s", self.node_id, group_id)
        return error

    async def _remove_group(self, shard: Shard, group: ClassicGroup) -> ErrorCode:
        """Tombstones for the group's offsets and metadata, then the group is gone."""
        now_ms = self._clock.now_ms()
        offsets = shard.offsets.get(group.group_id, {})
        records = [
            Record(encode_offset_key(OffsetKey(group.group_id, topic, p)), None, now_ms)
            for topic, p in sorted(offsets)
        ]
        records.append(Record(encode_group_key(GroupKey(group.group_id)), None, now_ms))
        error, _ = await self._write(shard, records)
        if error is ErrorCode.none:
            shard.drop_group(group)
        return error

    # ---- retention ---------------------------------------------------------------------------
    async def _expire_offsets_forever(self) -> None:
        interval_s = self.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            await self.expire_offsets()

    async def expire_offsets(self) -> None:
        """Kafka's offsets retention (``Shard.expired_offsets`` says which); an Empty group
        left without offsets is removed."""
        retention_ms = self.config.offsets_retention_minutes * 60_000
        now_ms = self._clock.now_ms()
        for shard in list(self._shards.values()):
            if not shard.loaded:
                continue
            for group in list(shard.groups.values()):
                offsets = shard.offsets.get(group.group_id, {})
                expired = shard.expired_offsets(group, retention_ms, now_ms)
                if group.state is GroupState.EMPTY and len(expired) == len(offsets):
                    if await self._remove_group(shard, group) is ErrorCode.none:
                        logger.info(
                            "[GroupCoordinator id=%d] Group %s expired: empty, %d offsets "
                            "past offsets.retention.minutes",
                            self.node_id,
                            group.group_id,
                            len(expired),
                        )
                elif expired:
                    await self._delete_offsets(shard, group.group_id, expired)
            for consumer in list(shard.consumer_groups.values()):
                offsets = shard.offsets.get(consumer.group_id, {})
                expired = shard.expired_offsets(consumer, retention_ms, now_ms)
                if not consumer.members and len(expired) == len(offsets):
                    if await self.delete_group(consumer.group_id) is ErrorCode.none:
                        logger.info(
                            "[GroupCoordinator id=%d] Consumer group %s expired: empty, %d "
                            "offsets past offsets.retention.minutes",
                            self.node_id,
                            consumer.group_id,
                            len(expired),
                        )
                elif expired:
                    await self._delete_offsets(shard, consumer.group_id, expired)


def _snapshot(group: ClassicGroup) -> tuple[GroupState, int, int]:
    return group.state, group.generation, len(group.members)
