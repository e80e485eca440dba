"""Replica fetchers: how a follower copies its leader's log (Kafka's ReplicaFetcherThread and
AbstractFetcherThread, as asyncio tasks).

One ReplicaFetcher per source broker carries every partition this broker follows from it, in
one Fetch request at a time (v12: replica id, current leader epoch, last fetched epoch),
within an incremental fetch session (KIP-227, broker/fetch_session_handler.py): after the
first full request only partitions that moved, joined or left are named. The
leader long-polls it (``replica.fetch.wait.max.ms``) and answers, per partition, one of:
- records, appended with the leader's offsets and epochs, then the leader's high watermark
  (capped at our log end) and log start offset;
- a diverging epoch (KIP-320): our log holds an epoch the leader's does not end where we
  think; we truncate to ``truncation_offset`` and fetch again from there, never to the high
  watermark (that was KIP-101's bug: it loses committed data after two quick leader changes);
- OFFSET_OUT_OF_RANGE: below the leader's log start we restart empty there; above its log
  end (possible only without epochs to compare) we ask OffsetForLeaderEpoch for its end;
- a leader-epoch or leadership error: the partition backs off until metadata catches up.
A connection or request failure backs the whole fetcher off (``replica.fetch.backoff.ms``).

The fetcher is the only writer of a follower's log. ``remove`` waits for the response being
applied to finish, so the ReplicaManager can make the partition a leader right after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.bugs import FOLLOWER_TRUNCATE_TO_LEADER_END
from broker.client import KafkaConnection
from broker.fetch_session import PartitionKey, PartitionRequest
from broker.fetch_session_handler import FetchRequestData, FetchSessionHandler
from broker.partition import Partition, ReplicaState
from log.clock import WallClock
from log.epoch_cache import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from log.errors import RecordError
from log.log import KafkaStorageError, UnexpectedAppendOffsetError
from protocol.api_keys import ApiKey
from protocol.connect import Connector
from protocol.entities import make, request_module

logger = logging.getLogger("broker.fetcher")

FETCH_VERSION = 12  # the last with topic names; divergingEpoch since 12
OFFSET_FOR_LEADER_EPOCH_VERSION = 4
SESSION_ERRORS = (
    ErrorCode.fetch_session_id_not_found,
    ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
)
CONNECT_TIMEOUT_S = 10.0  # socket.connection.setup.timeout.ms


@dataclass(frozen=True, slots=True)
class FetcherConfig:
    """Kafka's replica.fetch.* settings, under their names."""

    wait_max_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes (per partition)
    response_max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    # How the leaders' inter-broker listener is secured (None: plaintext); set by the node.
    connector: Connector | None = None

    @classmethod
    def from_properties(cls, properties: dict[str, Any]) -> FetcherConfig:
        defaults = cls()

        def get(key: str, default: int) -> int:
            return int(properties.get(key, default))

        return cls(
            wait_max_ms=get("replica.fetch.wait.max.ms", defaults.wait_max_ms),
            min_bytes=get("replica.fetch.min.bytes", defaults.min_bytes),
            max_bytes=get("replica.fetch.max.bytes", defaults.max_bytes),
            response_max_bytes=get("replica.fetch.response.max.bytes", defaults.response_max_bytes),
            backoff_ms=get("replica.fetch.backoff.ms", defaults.backoff_ms),
            socket_timeout_ms=get("replica.socket.timeout.ms", defaults.socket_timeout_ms),
        )


def truncation_offset(
    diverging_epoch: int,
    diverging_end_offset: int,
    follower_end_for: Callable[[int], tuple[int, int]],
    log_end_offset: int,
    *,
    lacking_epoch_to_leader_end: bool = False,
) -> int:
    """Where a follower truncates when the leader says its epoch ``diverging_epoch`` ends
    at ``diverging_end_offset`` (Kafka's getOffsetTruncationState). ``follower_end_for``
    is the follower's own OffsetForLeaderEpoch answer. When the follower does not know that
    epoch, it truncates to where its own largest older epoch ends and asks again by fetching:
    the next answer is for that older epoch."""
    if diverging_epoch == UNDEFINED_EPOCH:
        return min(diverging_end_offset, log_end_offset)
    epoch, end = follower_end_for(diverging_epoch)
    if epoch == UNDEFINED_EPOCH or end == UNDEFINED_EPOCH_OFFSET:
        return min(diverging_end_offset, log_end_offset)
    if epoch != diverging_epoch:
        if lacking_epoch_to_leader_end:  # planted (broker/bugs.py): Kafka before KIP-279
            return min(diverging_end_offset, log_end_offset)
        return min(end, log_end_offset)
    return min(diverging_end_offset, end, log_end_offset)


def fetch_request(node_id: int, config: FetcherConfig, data: FetchRequestData) -> object:
    """A follower's Fetch (v12) for one request of its session."""
    module = request_module(ApiKey.FETCH, FETCH_VERSION)
    by_topic: dict[str, list[object]] = {}
    for (topic, index), asked in data.to_send.items():
        by_topic.setdefault(str(topic), []).append(
            make(
                module.FetchPartition,
                {
                    "partition": index,
                    "current_leader_epoch": asked.current_leader_epoch,
                    "fetch_offset": asked.fetch_offset,
                    "last_fetched_epoch": asked.last_fetched_epoch,
                    "log_start_offset": asked.log_start_offset,
                    "partition_max_bytes": asked.partition_max_bytes,
                },
            )
        )
    forgotten: dict[str, list[int]] = {}
    for topic, index in data.to_forget:
        forgotten.setdefault(str(topic), []).append(index)
    return make(
        module.FetchRequest,
        {
            "replica_id": node_id,
            "max_wait": timedelta(milliseconds=config.wait_max_ms),
            "min_bytes": config.min_bytes,
            "max_bytes": config.response_max_bytes,
            "isolation_level": 0,
            "session_id": data.session_id,
            "session_epoch": data.epoch,
            "topics": tuple(
                make(module.FetchTopic, {"topic": topic, "partitions": tuple(parts)})
                for topic, parts in by_topic.items()
            ),
            "forgotten_topics_data": tuple(
                make(module.ForgottenTopic, {"topic": topic, "partitions": tuple(parts)})
                for topic, parts in forgotten.items()
            ),
            "rack_id": "",
        },
    )


@dataclass(slots=True)
class _Fetching:
    partition: Partition
    leader_epoch: int  # the epoch it was added at: answers for another are not ours
    delayed_until_s: float = 0.0
    lag: int = 0  # the leader's high watermark less our log end, as of the last answer


class ReplicaFetcher:
    """One source broker's partitions, fetched by one task."""

    def __init__(
        self,
        node_id: int,
        source_id: int,
        endpoint: Callable[[int], tuple[str, int] | None],
        clock: WallClock,
        config: FetcherConfig,
    ) -> None:
        self.node_id = node_id
        self.source_id = source_id
        self._endpoint = endpoint
        self._clock = clock
        self._config = config
        self._partitions: dict[tuple[str, int], _Fetching] = {}
        self._lock = asyncio.Lock()  # held while a response is applied
        self._changed = asyncio.Event()
        self._connection: KafkaConnection | None = None
        self._session = FetchSessionHandler()
        self._task = asyncio.get_running_loop().create_task(self._run())
        self._prefix = f"[ReplicaFetcher replicaId={node_id}, leaderId={source_id}]"

    def __len__(self) -> int:
        return len(self._partitions)

    def lags(self) -> dict[tuple[str, int], int]:
        """Each partition's lag (Kafka's FetcherLagMetrics ConsumerLag)."""
        return {key: fetching.lag for key, fetching in self._partitions.items()}

    def add(self, partition: Partition) -> None:
        assert partition.state is ReplicaState.FOLLOWER and partition.leader == self.source_id
        self._partitions[partition.key] = _Fetching(partition, partition.leader_epoch)
        self._changed.set()

    async def remove(self, key: tuple[str, int]) -> None:
        """Stop fetching ``key``; returns once no response for it is being applied."""
        async with self._lock:
            self._partitions.pop(key, None)

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        if self._connection is not None:
            await self._connection.close()

    @property
    def task(self) -> asyncio.Task[None]:
        return self._task

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff_s = self._config.backoff_ms / 1000
        while True:  # until cancelled by close()
            now_s = loop.time()
            self._drop_offline()
            ready = {k: f for k, f in self._partitions.items() if f.delayed_until_s <= now_s}
            if not ready:
                self._changed.clear()
                wake = min((f.delayed_until_s for f in self._partitions.values()), default=None)
                timeout = None if wake is None else max(0.0, wake - now_s)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout)
                continue
            try:
                connection = await self._connect()
                request, sent = self._build(ready)
                timeout_s = (self._config.socket_timeout_ms + self._config.wait_max_ms) / 1000
                response: Any = await connection.request(request, timeout_s)
                async with self._lock:
                    await self._apply(response, sent)
            except (OSError, RecordError) as error:
                self._session.handle_error()
                logger.info("%s Error fetching: %r; backing off", self._prefix, error)
                if self._connection is not None:
                    await self._connection.close()
                    self._connection = None
                await asyncio.sleep(backoff_s)

    def _drop_offline(self) -> None:
        """Stop fetching for replicas whose log dir failed (Kafka's handleLogDirFailure
        removes their fetchers): a fetch naming the offsets such a log still reports would
        let the leader count it caught up and put it back into the ISR, although it can no
        longer write a record."""
        for key in [k for k, f in self._partitions.items() if not f.partition.log.is_online]:
            del self._partitions[key]
            logger.warning("%s %s-%d: its log is offline; no longer fetching", self._prefix, *key)

    async def _connect(self) -> KafkaConnection:
        connection = self._connection
        if connection is not None and not connection.closed:
            return connection
        address = self._endpoint(self.source_id)
        if address is None:
            raise ConnectionError(f"broker {self.source_id} has no endpoint in the image")
        connection = KafkaConnection(
            f"broker-{self.node_id}-fetcher-{self.source_id}", connector=self._config.connector
        )
        await connection.connect(*address, CONNECT_TIMEOUT_S)
        self._connection = connection
        return connection

    def _build(
        self, ready: dict[tuple[str, int], _Fetching]
    ) -> tuple[object, dict[tuple[str, int], tuple[_Fetching, int]]]:
        """The Fetch request for ``ready`` partitions and, per partition, what was asked.
        Within the session only what changed since the last request is sent; the leader
        answers for the others from what it remembers."""
        config = self._config
        wanted: dict[PartitionKey, PartitionRequest] = {}
        sent: dict[tuple[str, int], tuple[_Fetching, int]] = {}
        for key, fetching in ready.items():
            log = fetching.partition.log
            offset = log.log_end_offset
            latest = log.latest_epoch
            sent[key] = (fetching, offset)
            wanted[key] = PartitionRequest(
                fetch_offset=offset,
                partition_max_bytes=config.max_bytes,
                current_leader_epoch=fetching.leader_epoch,
                last_fetched_epoch=UNDEFINED_EPOCH if latest is None else latest,
                log_start_offset=log.log_start_offset,
            )
        request = fetch_request(self.node_id, config, self._session.build(wanted))
        return request, sent

    async def _apply(
        self, response: Any, sent: dict[tuple[str, int], tuple[_Fetching, int]]
    ) -> None:
        error = response.error_code
        answered = [(t.topic, p.partition_index) for t in response.responses for p in t.partitions]
        if not self._session.handle_response(error, response.session_id, answered):
            if error in SESSION_ERRORS:
                # The leader lost or never had our session (a restart, an eviction, a
                # duplicate): the next request is full; nothing to back off from.
                logger.info(
                    "%s Fetch session error %s; the next fetch is full",
                    self._prefix,
                    ErrorCode(error).name,
                )
                return
            if error == ErrorCode.none:
                raise ConnectionError("the fetch answer does not match the fetch session")
            raise ConnectionError(f"fetch failed: {ErrorCode(error).name}")
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                asked = sent.get(key)
                current = self._partitions.get(key)
                if asked is None or current is not asked[0]:
                    continue  # removed or re-added while the fetch was in flight
                partition = current.partition
                if (
                    partition.state is not ReplicaState.FOLLOWER
                    or partition.leader_epoch != current.leader_epoch
                    or partition.log.log_end_offset != asked[1]
                ):
                    continue
                try:
                    await self._apply_partition(current, data, asked[1])
                except (KafkaStorageError, UnexpectedAppendOffsetError, RecordError) as error:
                    logger.warning("%s %s-%d: %r", self._prefix, *key, error)
                    self._delay(current)

    async def _apply_partition(self, fetching: _Fetching, data: Any, fetch_offset: int) -> None:
        partition = fetching.partition
        log = partition.log
        error = data.error_code
        if error == ErrorCode.none:
            diverging = data.diverging_epoch
            if diverging is not None and diverging.end_offset >= 0:
                target = truncation_offset(
                    diverging.epoch,
                    diverging.end_offset,
                    log.end_offset_for_epoch,
                    fetch_offset,
                    lacking_epoch_to_leader_end=FOLLOWER_TRUNCATE_TO_LEADER_END in partition.bugs,
                )
                latest = log.latest_epoch
                await self._truncate(partition, target)
                if log.log_end_offset == fetch_offset and log.latest_epoch == latest:
                    # Nothing changed, so the same question would get the same answer at
                    # once: back off instead of spinning (a bug if it happens; logged).
                    logger.warning(
                        "%s %s-%d: diverging epoch %d end %d changed nothing at offset %d",
                        self._prefix,
                        *partition.key,
                        diverging.epoch,
                        diverging.end_offset,
                        fetch_offset,
                    )
                    self._delay(fetching)
                return
            records = data.records
            if records:
                partition.append_as_follower(records, self._clock.now_ms())
            partition.follower_high_watermark(data.high_watermark)
            fetching.lag = max(0, data.high_watermark - log.log_end_offset)
            leader_start = data.log_start_offset
            if leader_start > log.log_start_offset and leader_start <= partition.high_watermark:
                await log.delete_records(leader_start, high_watermark=partition.high_watermark)
            return
        if error == ErrorCode.offset_out_of_range:
            if fetch_offset < data.log_start_offset:
                logger.info(
                    "%s %s-%d: fetch offset %d is below the leader's log start %d; restarting "
                    "the log there",
                    self._prefix,
                    *partition.key,
                    fetch_offset,
                    data.log_start_offset,
                )
                await partition.truncate_fully_and_start_at(data.log_start_offset)
                partition.follower_high_watermark(partition.high_watermark)
                return
            end = await self._leader_end_offset(partition, fetching.leader_epoch)
            if end is not None and end < fetch_offset:
                await self._truncate(partition, end)
                return
        self._delay(fetching)

    async def _truncate(self, partition: Partition, offset: int) -> None:
        log = partition.log
        if offset < log.log_end_offset:
            logger.info(
                "%s Truncating %s-%d to offset %d (log end was %d)",
                self._prefix,
                *partition.key,
                offset,
                log.log_end_offset,
            )
            await partition.truncate_to(offset)
        else:
            # Nothing to cut, but an epoch this broker began as leader at its log end and
            # never appended to conflicts with the leader's: forget it, as Kafka's truncateTo
            # does, or the next fetch would name it again.
            log.leader_epoch_cache.truncate_from_end(log.log_end_offset)
        partition.follower_high_watermark(partition.high_watermark)

    async def _leader_end_offset(self, partition: Partition, leader_epoch: int) -> int | None:
        """The leader's log end, by OffsetForLeaderEpoch for its current epoch."""
        module = request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION)
        request = make(
            module.OffsetForLeaderEpochRequest,
            {
                "replica_id": self.node_id,
                "topics": (
                    make(
                        module.OffsetForLeaderTopic,
                        {
                            "topic": partition.topic,
                            "partitions": (
                                make(
                                    module.OffsetForLeaderPartition,
                                    {
                                        "partition": partition.index,
                                        "current_leader_epoch": leader_epoch,
                                        "leader_epoch": leader_epoch,
                                    },
                                ),
                            ),
                        },
                    ),
                ),
            },
        )
        connection = await self._connect()
        response: Any = await connection.request(request, self._config.socket_timeout_ms / 1000)
        for topic in response.topics:
            for answer in topic.partitions:
                if answer.error_code == ErrorCode.none and answer.leader_epoch == leader_epoch:
                    return int(answer.end_offset)
        return None

    def _delay(self, fetching: _Fetching) -> None:
        loop = asyncio.get_running_loop()
        fetching.delayed_until_s = loop.time() + self._config.backoff_ms / 1000


class ReplicaFetcherManager:
    """The fetchers of one broker, one per source broker, made and dropped as needed."""

    def __init__(
        self,
        node_id: int,
        endpoint: Callable[[int], tuple[str, int] | None],
        clock: WallClock,
        config: FetcherConfig,
        on_failure: Callable[[], None] = lambda: None,
    ) -> None:
        self.node_id = node_id
        self._endpoint = endpoint
        self._clock = clock
        self.config = config
        self._on_failure = on_failure  # a fetcher task died of a bug: its owner re-raises
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._source: dict[tuple[str, int], int] = {}

    def add(self, partition: Partition) -> None:
        """Fetch ``partition`` from its leader (it must not be fetched from anywhere yet)."""
        assert partition.key not in self._source, partition.key
        source = partition.leader
        fetcher = self._fetchers.get(source)
        if fetcher is None:
            fetcher = self._fetchers[source] = ReplicaFetcher(
                self.node_id, source, self._endpoint, self._clock, self.config
            )
            fetcher.task.add_done_callback(self._task_done)
        fetcher.add(partition)
        self._source[partition.key] = source

    async def remove(self, key: tuple[str, int]) -> None:
        """Stop fetching ``key``; a fetcher left with no partitions stops."""
        source = self._source.pop(key, None)
        if source is None:
            return
        fetcher = self._fetchers[source]
        await fetcher.remove(key)
        if not len(fetcher) and self._fetchers.get(source) is fetcher:
            del self._fetchers[source]
            await fetcher.close()

    def lags(self) -> dict[tuple[str, int], int]:
        """Every followed partition's lag behind its leader's high watermark."""
        return {
            key: lag for fetcher in self._fetchers.values() for key, lag in fetcher.lags().items()
        }

    def _task_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._on_failure()

    def failed(self) -> BaseException | None:
        """What stopped a fetcher task unexpectedly, if anything did."""
        for fetcher in self._fetchers.values():
            task = fetcher.task
            if task.done() and not task.cancelled() and task.exception() is not None:
                return task.exception()
        return None

    async def close(self) -> None:
        fetchers, self._fetchers = self._fetchers, {}
        self._source.clear()
        for fetcher in fetchers.values():
            await fetcher.close()
