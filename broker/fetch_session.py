"""Incremental fetch sessions on the serving side (KIP-227; Kafka's FetchSession.scala).

A fetcher that keeps a session sends only what changed since its last request (partitions
added, or whose fetch offset, epochs, log start or max bytes changed) and names the ones it
drops (``forgotten_topics_data``); the broker remembers the rest and answers only the
partitions with something to say (records, a new high watermark, last stable offset or log
start, an error, a diverging epoch). With a thousand partitions that is the difference
between a few bytes and a few tens of kilobytes per request, both ways.

This module is sans-I/O: ``FetchSessionCache.new_context`` turns a request's session id and
epoch into a FetchContext that says which partitions to read and, once they are read, which
to answer and under what session id. Session ids come from the injected Random and times from
the injected monotonic clock (the event loop's, which the simulator virtualises: session ages
are durations, not calendar time), so a simulated run replays.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. When full, a
new session may evict, as Kafka's does: first any session unused for ``EVICTION_MS``; else
the smallest evictable one, if the newcomer is at least as large (followers' sessions
outrank consumers'; a session younger than ``EVICTION_MS`` is evictable only by a follower,
and only if it is a consumer's). Sessions also share a bound on the partitions they remember
(``CACHED_PARTITIONS_MAX``).
Otherwise the full fetch is answered without a session (session id 0) and the client
simply keeps sending full fetches.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

logger = logging.getLogger("broker.fetch_session")

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that asks for a new session
FINAL_EPOCH = -1  # a full fetch without a session (or closing one)
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
CACHE_SLOTS_DEFAULT = 1000  # max.incremental.fetch.session.cache.slots
# All sessions together remember at most this many partitions (a few hundred bytes each):
# incremental requests can add partitions without end, so the sessions' memory needs its own
# bound. A session that would pass it is not made, or is closed (a sessionless answer).
CACHED_PARTITIONS_MAX = 200_000
MAX_SESSION_ID = 0x7FFFFFFF

# A partition as a request names it: by topic id (Fetch v13+) or by name (older versions).
PartitionKey = tuple[uuid.UUID | str, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch``: it wraps from 2**31-1 to 1, never to 0 (a full
    fetch) or below (sessionless)."""
    if epoch < 0:
        return epoch
    return 1 if epoch == MAX_SESSION_ID else epoch + 1


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """What a fetcher asks of one partition; the session remembers it between requests."""

    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # the fetcher's own (followers); -1 from consumers


@dataclass(frozen=True, slots=True)
class PartitionAnswer:
    """What a read found, as far as deciding whether an incremental response must carry it."""

    records_bytes: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    error: int = ErrorCode.none
    diverging: bool = False


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: the last request's parameters and the last answer's."""

    request: PartitionRequest
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1

    def must_respond(self, answer: PartitionAnswer) -> bool:
        """Whether the fetcher needs to hear about ``answer``; remembers what it is told."""
        respond = answer.records_bytes > 0 or answer.diverging
        if self.high_watermark != answer.high_watermark:
            respond, self.high_watermark = True, answer.high_watermark
        if self.last_stable_offset != answer.last_stable_offset:
            respond, self.last_stable_offset = True, answer.last_stable_offset
        if self.log_start_offset != answer.log_start_offset:
            respond, self.log_start_offset = True, answer.log_start_offset
        if answer.error != ErrorCode.none:
            # Forget the watermark, so the partition is answered again once the error clears.
            respond, self.high_watermark = True, -1
        return respond


@dataclass(slots=True)
class FetchSession:
    id: int
    privileged: bool  # a follower's: outranks consumers' when the cache is full
    uses_topic_ids: bool  # created by Fetch v13+: every later request must be v13+ too
    creation_ms: int
    last_used_ms: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[PartitionKey, CachedPartition] = field(default_factory=dict)

    def eviction_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey order: consumers' before followers', smaller before larger."""
        return (self.privileged, len(self.partitions), self.id)


@dataclass(frozen=True, slots=True)
class FetchResult:
    """The response-level outcome of a fetch: its error, session id and which of the read
    partitions (by position in ``FetchContext.partitions``) it carries."""

    error: int
    session_id: int
    selected: tuple[int, ...]


class FetchContext:
    """One fetch request's view of its session (Kafka's FetchContext subclasses)."""

    def __init__(self, partitions: list[tuple[PartitionKey, PartitionRequest]]) -> None:
        self.partitions = partitions  # what to read, in order

    def respond(self, answers: list[PartitionAnswer]) -> FetchResult:
        """The response for ``answers`` (one per ``partitions`` entry): sessionless here."""
        return FetchResult(ErrorCode.none, INVALID_SESSION_ID, tuple(range(len(answers))))


class SessionErrorContext(FetchContext):
    """A request naming an unknown session or the wrong epoch: an error, nothing read."""

    def __init__(self, error: ErrorCode) -> None:
        super().__init__([])
        self.error = error

    def respond(self, answers: list[PartitionAnswer]) -> FetchResult:
        return FetchResult(self.error, INVALID_SESSION_ID, ())


class FullFetchContext(FetchContext):
    """A full fetch asking for a session: created when answered, if the cache has room."""

    def __init__(
        self,
        cache: FetchSessionCache,
        partitions: list[tuple[PartitionKey, PartitionRequest]],
        privileged: bool,
        uses_topic_ids: bool,
    ) -> None:
        super().__init__(partitions)
        self._cache = cache
        self._privileged = privileged
        self._uses_topic_ids = uses_topic_ids

    def respond(self, answers: list[PartitionAnswer]) -> FetchResult:
        cached: dict[PartitionKey, CachedPartition] = {}
        for (key, request), answer in zip(self.partitions, answers, strict=True):
            # Remembered as an incremental answer would remember it: an error answer leaves
            # no watermark, so the partition is answered again once the error clears.
            cached[key] = partition = CachedPartition(request)
            partition.must_respond(answer)
        session_id = self._cache.maybe_create_session(
            self._privileged, self._uses_topic_ids, cached
        )
        return FetchResult(ErrorCode.none, session_id, tuple(range(len(answers))))


class IncrementalFetchContext(FetchContext):
    """An incremental fetch: reads every partition of the session, answers the changed."""

    def __init__(self, session: FetchSession) -> None:
        super().__init__([(key, cached.request) for key, cached in session.partitions.items()])
        self.session = session
        self._epoch = session.epoch  # what the session's epoch must still be when answering

    def respond(self, answers: list[PartitionAnswer]) -> FetchResult:
        session = self.session
        if session.epoch != self._epoch:
            # Another request on this session was accepted while this one waited: a retry
            # of a lost request, most likely. Kafka answers the later one's epoch error.
            return FetchResult(ErrorCode.invalid_fetch_session_epoch, session.id, ())
        selected = []
        for i, ((key, _), answer) in enumerate(zip(self.partitions, answers, strict=True)):
            cached = session.partitions.get(key)
            if cached is None or not cached.must_respond(answer):
                continue
            selected.append(i)
            if answer.records_bytes > 0:
                # Partitions that got data go to the back, so the byte budget is shared
                # across the session's partitions over successive fetches.
                del session.partitions[key]
                session.partitions[key] = cached
        return FetchResult(ErrorCode.none, session.id, tuple(selected))


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's FetchSessionCache and FetchManager in one)."""

    def __init__(
        self,
        max_entries: int,
        rng: random.Random,
        monotonic_s: Callable[[], float],
        eviction_ms: int = EVICTION_MS,
    ) -> None:
        self.max_entries = max_entries
        self._rng = rng
        self._monotonic_s = monotonic_s
        self._eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}
        self._cached_partitions = 0  # over all sessions
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def _now_ms(self) -> int:
        return int(self._monotonic_s() * 1000)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    @property
    def total_partitions(self) -> int:
        return self._cached_partitions

    def new_context(
        self,
        session_id: int,
        epoch: int,
        privileged: bool,
        uses_topic_ids: bool,
        fetch_data: list[tuple[PartitionKey, PartitionRequest]],
        to_forget: list[PartitionKey],
    ) -> FetchContext:
        """The context of a Fetch with ``session_id``/``epoch`` (Kafka's newContext)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id in self._sessions:
                self._remove(self._sessions[session_id])  # closed by its owner
            if epoch == FINAL_EPOCH:
                return FetchContext(fetch_data)
            return FullFetchContext(self, fetch_data, privileged, uses_topic_ids)
        session = self._sessions.get(session_id)
        if session is None:
            return SessionErrorContext(ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return SessionErrorContext(ErrorCode.invalid_fetch_session_epoch)
        if session.uses_topic_ids != uses_topic_ids:
            return SessionErrorContext(ErrorCode.fetch_session_topic_id_error)
        before = len(session.partitions)
        for key, request in fetch_data:
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = CachedPartition(request)
            else:
                cached.request = request
        for key in to_forget:
            session.partitions.pop(key, None)
        self._cached_partitions += len(session.partitions) - before
        if not session.partitions or self._cached_partitions > CACHED_PARTITIONS_MAX:
            # Nothing left to remember, or too much: a sessionless answer, and the client
            # starts over with a full fetch.
            self._remove(session)
            return FetchContext(fetch_data)
        session.last_used_ms = self._now_ms()
        session.epoch = next_epoch(session.epoch)
        return IncrementalFetchContext(session)

    def maybe_create_session(
        self,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[PartitionKey, CachedPartition],
    ) -> int:
        """A new session's id, or 0 when the cache is full and nothing may be evicted."""
        now_ms = self._now_ms()
        if self._cached_partitions + len(partitions) > CACHED_PARTITIONS_MAX:
            return INVALID_SESSION_ID
        if len(self._sessions) >= self.max_entries and not self._try_evict(
            privileged, len(partitions), now_ms
        ):
            return INVALID_SESSION_ID
        session_id = self._new_session_id()
        self._sessions[session_id] = FetchSession(
            session_id,
            privileged,
            uses_topic_ids,
            now_ms,
            now_ms,
            next_epoch(INITIAL_EPOCH),
            partitions,
        )
        self._cached_partitions += len(partitions)
        logger.info(
            "Created fetch session %d for a %s (%d partitions, topic ids: %s)",
            session_id,
            "follower" if privileged else "consumer",
            len(partitions),
            uses_topic_ids,
        )
        return session_id

    def _new_session_id(self) -> int:
        while True:  # ends: at most max_entries of 2**31-1 ids are taken
            session_id = self._rng.randint(1, MAX_SESSION_ID)
            if session_id not in self._sessions:
                return session_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Make room for a new session of ``size`` partitions, as Kafka's tryEvict does."""
        if not self._sessions:
            return False
        stale = min(self._sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - stale.last_used_ms > self._eviction_ms:
            return self._evict(stale)
        # Young sessions are safe from all but followers, and followers' young sessions from
        # everyone: a flood of new consumers cannot push out the replication sessions.
        candidates = [
            s
            for s in self._sessions.values()
            if now_ms - s.creation_ms > self._eviction_ms or (privileged and not s.privileged)
        ]
        if not candidates:
            return False
        smallest = min(candidates, key=FetchSession.eviction_key)
        if (privileged, size, 0) < smallest.eviction_key():
            return False
        return self._evict(smallest)

    def _evict(self, session: FetchSession) -> bool:
        logger.info(
            "Evicting fetch session %d (%d partitions)", session.id, len(session.partitions)
        )
        self._remove(session)
        self.evictions += 1
        return True

    def _remove(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self._cached_partitions -= len(session.partitions)
