"""The I/O around KIP-848 consumer groups: ConsumerGroupHeartbeat, fencing on deadlines.

Each input runs under its group's lock: the sans-I/O ``ConsumerGroup`` computes a result
from the group as it is, the result's records are appended to the group's
``__consumer_offsets`` partition (acks=all, as every group write), and only once they are
acknowledged does the group ``apply`` them and the member get its answer. A failed write
changes nothing and the member retries (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE), so
memory never runs ahead of what a new coordinator would load. The lock makes one group's
heartbeats take turns (each sees the last one's records); other groups are not held up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import re2
from kio.schema.errors import ErrorCode

from broker.group.classic import GroupState
from broker.group.consumer_group import (
    ConsumerGroup,
    Heartbeat,
    Result,
    compile_regex,
    match_names,
)
from broker.group.consumer_records import MEMBER_METADATA, encode_key, encode_value
from broker.group.member_budget import MemberMetadataBudget, subscription_bytes
from broker.group.shard import Shard
from log.records import Record
from metadata.image import MetadataImage

if TYPE_CHECKING:
    from log.clock import WallClock

logger = logging.getLogger("broker.group.coordinator")

Write = Callable[[Shard, list[Record]], Awaitable[tuple[ErrorCode, int]]]


# Topic names one regex is matched against between turns of the loop: ~5 ms of matching at
# the slowest program RE2's limit lets in, microseconds for ordinary patterns.
REGEX_MATCH_SLICE = 10
# Topic names the resolved regexes may keep between them (a frozenset of references to the
# image's names: ~30 bytes a name); the least recently used go first.
REGEX_CACHE_NAMES = 1_000_000


class SubscriptionRegexes:
    """Broker-wide resolution of KIP-848 subscription regexes: which topics each matches in
    the topic names of an image. Kafka resolves them off the heartbeat path, asynchronously;
    here ``resolve`` matches a group's regexes a few names at a time between turns of the
    loop before its heartbeat runs, and keeps each answer for as long as the set of topic
    names stays the same (an image that only changes partitions or leaders keeps the same
    name mapping), so a heartbeat matches nothing. A pattern that is invalid or over RE2's
    program limit is left to the heartbeat, which refuses it (INVALID_REGULAR_EXPRESSION).
    """

    def __init__(self, max_names: int = REGEX_CACHE_NAMES) -> None:
        self._max_names = max_names
        self._names = 0
        # regex -> (the image's name mapping it was matched against, the matches)
        self._matched: collections.OrderedDict[str, tuple[object, frozenset[str]]] = (
            collections.OrderedDict()
        )

    def cached(self, regex: str, image: MetadataImage) -> frozenset[str] | None:
        entry = self._matched.get(regex)
        if entry is None or entry[0] is not image.topics.by_name:
            return None
        self._matched.move_to_end(regex)
        return entry[1]

    def matching(self, regex: str, image: MetadataImage) -> frozenset[str]:
        """The topics of ``image`` that ``regex`` matches: resolved beforehand, or (a regex
        nobody resolved: a test, a cache that evicted it) matched now."""
        found = self.cached(regex, image)
        if found is None:
            found = match_names(compile_regex(regex), image.topics.by_name)
            self._keep(regex, image, found)
        return found

    async def resolve(self, regexes: Iterable[str], image: MetadataImage) -> None:
        """Match each of ``regexes`` not yet resolved for ``image``'s topic names, yielding
        the loop every REGEX_MATCH_SLICE names."""
        for regex in regexes:
            if self.cached(regex, image) is not None:
                continue
            try:
                pattern = compile_regex(regex)
            except re2.error:
                continue  # the heartbeat refuses it
            await asyncio.sleep(0)  # compiling may have taken a slice of its own
            names = list(image.topics.by_name)
            found: set[str] = set()
            for start in range(0, len(names), REGEX_MATCH_SLICE):
                found |= match_names(pattern, names[start : start + REGEX_MATCH_SLICE])
                await asyncio.sleep(0)
            self._keep(regex, image, frozenset(found))

    def _keep(self, regex: str, image: MetadataImage, found: frozenset[str]) -> None:
        old = self._matched.pop(regex, None)
        if old is not None:
            self._names -= len(old[1])
        self._matched[regex] = (image.topics.by_name, found)
        self._names += len(found)
        while self._names > self._max_names and len(self._matched) > 1:
            _, (_, evicted) = self._matched.popitem(last=False)
            self._names -= len(evicted)


class TopicsView(Mapping[str, tuple[uuid.UUID, int]]):
    """Topic name -> (id, partition count) over a metadata image, read lazily; regexes are
    answered by the broker's SubscriptionRegexes (a RegexTopics)."""

    __slots__ = ("_image", "_regexes")

    def __init__(self, image: MetadataImage, regexes: SubscriptionRegexes | None = None) -> None:
        self._image = image
        self._regexes = regexes if regexes is not None else SubscriptionRegexes()

    def matching(self, regex: str) -> frozenset[str]:
        return self._regexes.matching(regex, self._image)

    def __getitem__(self, name: str) -> tuple[uuid.UUID, int]:
        topic = self._image.topics.get(name)
        if topic is None:
            raise KeyError(name)
        return self._image.topics.by_name[name], len(topic.partitions)

    def __iter__(self) -> Iterator[str]:
        return iter(self._image.topics.by_name)

    def __len__(self) -> int:
        return len(self._image.topics.by_name)


@dataclass(slots=True)
class _GroupLock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # holders and waiters: the entry goes when the last one is done


class ConsumerGroupCoordinator:
    """Consumer-protocol groups of the shards a GroupCoordinator holds."""

    def __init__(
        self,
        node_id: int,
        shard_for: Callable[[str], Shard | ErrorCode],
        write: Write,
        image: Callable[[], MetadataImage | None],
        clock: WallClock,
        wake_before: Callable[[float], None],
        member_budget: MemberMetadataBudget | None = None,
    ) -> None:
        self.node_id = node_id
        self._shard_for = shard_for
        self._write = write
        self._image = image
        self._clock = clock
        self._wake_before = wake_before  # the timer loop must run by this deadline
        self._locks: dict[str, _GroupLock] = {}
        self.regexes = SubscriptionRegexes()
        self._budget = member_budget or MemberMetadataBudget(1 << 62)
        # Insertion-ordered (a dict, not a set): cancelling and gathering them in a
        # hash order of task ids would make the simulator's runs depend on memory layout.
        self._fencing: dict[asyncio.Task[None], None] = {}

    @contextlib.asynccontextmanager
    async def _locked(self, group_id: str) -> AsyncIterator[None]:
        """Hold the group's lock; it exists only while someone holds or waits for it, so
        requests for ids that never become groups leave nothing behind."""
        entry = self._locks.get(group_id)
        if entry is None:
            entry = self._locks[group_id] = _GroupLock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[group_id]

    def busy(self, group_id: str) -> bool:
        """A consumer group input of this id is running (maybe creating the group)."""
        return group_id in self._locks

    async def heartbeat(self, group_id: str, request: Heartbeat) -> Result:
        """ConsumerGroupHeartbeat: join, stay, or leave (epoch -1 / -2)."""
        async with self._locked(group_id):
            return await self._heartbeat(group_id, request)

    async def _heartbeat(self, group_id: str, request: Heartbeat) -> Result:
        """Resolves the group's regexes (and the request's) first, in slices, against the
        image of now; the heartbeat then runs against that image, matching nothing."""
        image = self._image()
        shard = self._shard_for(group_id)
        if image is not None and isinstance(shard, Shard) and request.member_epoch >= 0:
            group = shard.consumer_groups.get(group_id)
            wanted = list(group.regexes) if group is not None else []
            if request.subscribed_topic_regex is not None:
                wanted.append(request.subscribed_topic_regex)
            if wanted:
                await self.regexes.resolve(wanted, image)
        return await self._heartbeat_in(group_id, request, image)

    async def _heartbeat_in(
        self, group_id: str, request: Heartbeat, image: MetadataImage | None
    ) -> Result:
        shard = self._shard_for(group_id)
        if isinstance(shard, ErrorCode) or image is None:
            error = shard if isinstance(shard, ErrorCode) else ErrorCode.coordinator_not_available
            return Result(error, None, request.member_id, request.member_epoch)
        classic = shard.groups.get(group_id)
        if classic is not None and classic.state is not GroupState.EMPTY:
            return Result(
                ErrorCode.group_id_not_found,
                f"Group {group_id} is not a consumer group.",
                request.member_id,
                request.member_epoch,
            )
        group = shard.consumer_groups.get(group_id)
        if request.member_epoch < 0:
            if group is None:
                return Result(ErrorCode.unknown_member_id, "unknown member", request.member_id)
            result = group.leave(request.member_id, request.instance_id, request.member_epoch)
        else:
            if group is None and request.member_epoch != 0:
                return Result(ErrorCode.unknown_member_id, "unknown member", request.member_id)
            fresh = group is None
            if group is None:
                group = ConsumerGroup(group_id, shard.consumer_limits)
            refused = self._over_budget(group_id, request)
            if refused is not None:
                return refused
            result = group.heartbeat(request, TopicsView(image, self.regexes))
            if fresh and result.error is ErrorCode.none:
                result = await self._store(shard, group, result)
                if result.error is ErrorCode.none:
                    shard.groups.pop(group_id, None)  # an Empty classic group becomes this
                    shard.consumer_groups[group_id] = group
                    self._log_member(group, result, "joins")
                return result
        return await self._store(shard, group, result)

    async def _store(self, shard: Shard, group: ConsumerGroup, result: Result) -> Result:
        """Write the result's records; apply them once acknowledged."""
        if result.error is not ErrorCode.none:
            return result
        before = (group.group_epoch, group.assignment_epoch, group.state)
        known = result.member_id in group.members
        if result.records:
            now_ms = self._clock.now_ms()
            records = [
                Record(encode_key(key), None if value is None else encode_value(value), now_ms)
                for key, value in result.records
            ]
            error, _ = await self._write(shard, records)
            if error is not ErrorCode.none:
                return Result(error, None, result.member_id, result.member_epoch)
            if shard.consumer_groups.get(group.group_id, group) is not group:
                return Result(ErrorCode.not_coordinator, None, result.member_id)
        group.apply(result, asyncio.get_running_loop().time())
        member = group.members.get(result.member_id)
        if member is None:
            self._budget.drop(group.group_id, result.member_id)
        elif not known or any(key.kind == MEMBER_METADATA for key, _ in result.records):
            metadata = member.metadata
            size = subscription_bytes(
                metadata.subscribed_topic_names, metadata.subscribed_topic_regex
            )
            self._budget.set(group.group_id, result.member_id, size)
        deadline = group.next_deadline()
        if deadline is not None:
            self._wake_before(deadline)
        if known and result.member_id not in group.members:
            self._log_member(group, result, "left")
        elif not known and result.member_id in group.members and before[0] > 0:
            self._log_member(group, result, "joins")
        after = (group.group_epoch, group.assignment_epoch, group.state)
        if after != before:
            logger.info(
                "[GroupCoordinator id=%d] Consumer group %s: %s (group epoch %d, assignment "
                "epoch %d) -> %s (group epoch %d, assignment epoch %d, %d members)",
                self.node_id,
                group.group_id,
                before[2].value,
                before[0],
                before[1],
                after[2].value,
                after[0],
                after[1],
                len(group.members),
            )
        return result

    def _over_budget(self, group_id: str, request: Heartbeat) -> Result | None:
        """GROUP_MAX_SIZE_REACHED when the subscription the heartbeat sets would take the
        members' metadata past group.coordinator.member.metadata.max.bytes."""
        names, regex = request.subscribed_topic_names, request.subscribed_topic_regex
        if names is None and regex is None:
            return None  # unchanged
        size = subscription_bytes(names or (), regex)
        if self._budget.fits(group_id, request.member_id, size):
            return None
        return Result(
            ErrorCode.group_max_size_reached,
            "The subscription would take the coordinator's member metadata past "
            f"group.coordinator.member.metadata.max.bytes {self._budget.max_bytes}",
            request.member_id,
            request.member_epoch,
        )

    def _log_member(self, group: ConsumerGroup, result: Result, verb: str) -> None:
        logger.info(
            "[GroupCoordinator id=%d] Member %s %s consumer group %s",
            self.node_id,
            result.member_id,
            verb,
            group.group_id,
        )

    # ---- deadlines -------------------------------------------------------------------------
    def due(self, shard: Shard, now: float) -> float | None:
        """Fence the members of the shard's groups whose deadlines passed (in background
        tasks); the next deadline still ahead."""
        next_at: float | None = None
        for group in shard.consumer_groups.values():
            for member_id in group.expired_members(now):
                # Off the timer: a failed fence re-arms the session deadline.
                group.session_deadlines.pop(member_id, None)
                group.revocation_deadlines.pop(member_id, None)
                task = asyncio.get_running_loop().create_task(self._fence(group, member_id))
                self._fencing[task] = None
                task.add_done_callback(lambda done: self._fencing.pop(done, None))
            deadline = group.next_deadline()
            if deadline is not None:
                next_at = deadline if next_at is None else min(next_at, deadline)
        return next_at

    async def _fence(self, group: ConsumerGroup, member_id: str) -> None:
        async with self._locked(group.group_id):
            shard = self._shard_for(group.group_id)
            if (
                isinstance(shard, ErrorCode)
                or shard.consumer_groups.get(group.group_id) is not group
            ):
                return
            if member_id not in group.members:
                return
            if member_id in group.session_deadlines:
                # A heartbeat of the member was stored while this fence waited for the lock,
                # and restarted its deadlines (``due`` took them off): as Kafka drops a
                # timer's write when the timer was overridden meanwhile, it is not fenced.
                return
            logger.info(
                "[GroupCoordinator id=%d] Member %s of consumer group %s fenced: no heartbeat "
                "within its session timeout, or no revocation within its rebalance timeout",
                self.node_id,
                member_id,
                group.group_id,
            )
            result = await self._store(shard, group, group.fence(member_id))
            if result.error is not ErrorCode.none and member_id in group.members:
                timeout_s = group.limits.session_timeout_ms / 1000
                retry_at = asyncio.get_running_loop().time() + timeout_s
                group.session_deadlines[member_id] = retry_at
                self._wake_before(retry_at)

    def start(self, shard: Shard) -> None:
        """A shard was loaded: every member gets a fresh session, as Kafka does."""
        now = asyncio.get_running_loop().time()
        for group in shard.consumer_groups.values():
            group.start_deadlines(now)
            deadline = group.next_deadline()
            if deadline is not None:
                self._wake_before(deadline)

    def unload(self, shard: Shard) -> None:
        for group in shard.consumer_groups.values():
            group.dead = True
            self._budget.drop_group(group.group_id)

    async def delete(self, shard: Shard, group: ConsumerGroup, offsets: list[Record]) -> ErrorCode:
        """DeleteGroups of an Empty consumer group: its offsets' and its own tombstones."""
        async with self._locked(group.group_id):
            if group.members:
                return ErrorCode.non_empty_group
            now_ms = self._clock.now_ms()
            records = offsets + [
                Record(encode_key(key), None, now_ms) for key, _ in group.deletion_records()
            ]
            error, _ = await self._write(shard, records)
            if error is ErrorCode.none and shard.consumer_groups.get(group.group_id) is group:
                del shard.consumer_groups[group.group_id]
                shard.offsets.pop(group.group_id, None)
                group.dead = True
        return error

    async def fenced(self) -> None:
        """Until the fences started so far are stored (or failed)."""
        await asyncio.gather(*self._fencing, return_exceptions=True)

    async def close(self) -> None:
        for task in self._fencing:
            task.cancel()
        await asyncio.gather(*self._fencing, return_exceptions=True)
