"""auto.create.topics.enable, bounded (Kafka's AutoTopicCreationManager, plus a budget).

A Metadata request that names missing topics gets them created with the controller's
defaults, without waiting: the answer says LEADER_NOT_AVAILABLE for them and the client asks
again. Kafka forwards every missing name; one request naming 100,000 made this broker forward
a CreateTopics of 100,000 topics, held the controller's event loop for seconds, and logged a
warning per refused topic. Here creation draws on a token bucket (AUTO_CREATE_BURST_TOPICS,
refilled at AUTO_CREATE_TOPICS_PER_S): a name beyond the budget is answered
UNKNOWN_TOPIC_OR_PARTITION (retriable: the client asks again, and the topic is created once
the budget refills), and each forwarded CreateTopics carries at most AUTO_CREATE_BURST_TOPICS
topics, far below the controller's per-request record limit. Failures and deferrals are
logged as one summary line, deferrals at most once per LOG_INTERVAL_S.

Each CreateTopics goes to the controller as the client's, as Kafka's AutoTopicCreationManager
sends it: in an Envelope with the client's principal, address, client id and correlation id
(broker/envelope.py), so the controller authorizes the creation as the client and charges it
to the client's ``controller_mutation_rate``. The version is Kafka's latest, so that quota is
strict: a client over it has the creation refused (THROTTLING_QUOTA_EXCEEDED, counted with
the deferrals: the client asks again) rather than creating topics past its quota through
Metadata.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from protocol.api_keys import ApiKey
from protocol.api_table import ApiRequest
from protocol.entities import make, request_module

logger = logging.getLogger("broker.auto_topic_creation")

AUTO_CREATE_VERSION = 7  # Kafka's latest: -1 takes the controller's defaults (v4+, KIP-464),
# and the mutation quota is strict (v6+, KIP-599)
AUTO_CREATE_TOPICS_PER_S = 100.0
AUTO_CREATE_BURST_TOPICS = 1000
LOG_INTERVAL_S = 60.0
CREATE_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default


class AutoTopicCreationManager:
    """Creates missing topics through ``forward`` (a CreateTopics body and the client request
    it is made for, to the controller), within budget."""

    def __init__(
        self,
        node_id: int,
        forward: Callable[[object, ApiRequest], Awaitable[object]],
        descriptors_free: Callable[[], bool] = lambda: True,
    ) -> None:
        """``descriptors_free``: False while this broker is at its descriptor reserve
        (log/descriptors.py); every name is then deferred, as over the budget."""
        self.node_id = node_id
        self._forward = forward
        self._descriptors_free = descriptors_free
        self._creating: dict[str, None] = {}  # forwarded and not yet answered, in order
        self._background: dict[asyncio.Task[None], None] = {}
        self._tokens = float(AUTO_CREATE_BURST_TOPICS)
        self._refilled_s: float | None = None
        self._deferred = 0  # names refused for budget since the last deferral line
        self._deferred_logged_s: float | None = None

    def create(self, missing: Iterable[str], client: ApiRequest) -> frozenset[str]:
        """Start creating the ``missing`` (valid, absent) names the budget allows, as
        ``client``'s request (its Metadata); the names of ``missing`` now being created, by
        this call or an earlier one."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._refill(now)
        being_created: list[str] = []
        new: list[str] = []
        deferred = 0
        room = self._descriptors_free()
        for name in missing:
            if name in self._creating:
                being_created.append(name)
            elif room and self._tokens >= 1:
                self._tokens -= 1
                self._creating[name] = None
                new.append(name)
                being_created.append(name)
            else:
                deferred += 1
        if new:
            task = loop.create_task(self._create_topics(new, client))
            self._background[task] = None
            task.add_done_callback(self._background.pop)
        if deferred:
            self._log_deferred(now, deferred, room)
        return frozenset(being_created)

    def _refill(self, now: float) -> None:
        if self._refilled_s is not None:
            earned = (now - self._refilled_s) * AUTO_CREATE_TOPICS_PER_S
            self._tokens = min(float(AUTO_CREATE_BURST_TOPICS), self._tokens + earned)
        self._refilled_s = now

    def _log_deferred(
        self, now: float, count: int, descriptors_free: bool, over: str | None = None
    ) -> None:
        """Count deferred names; one line per LOG_INTERVAL_S, naming the latest cause:
        ``over`` a quota, the broker's budget, or its descriptor reserve."""
        self._deferred += count
        last = self._deferred_logged_s
        if last is not None and now - last < LOG_INTERVAL_S:
            return
        if over is not None:
            why = f"over {over} (controller_mutation_rate, THROTTLING_QUOTA_EXCEEDED)"
        elif descriptors_free:
            why = (
                f"over the budget of {AUTO_CREATE_BURST_TOPICS} topics (refilled at "
                f"{AUTO_CREATE_TOPICS_PER_S:g}/s)"
            )
        else:
            why = "this broker is at its file descriptor reserve (open.files.reserve)"
        logger.warning(
            "[AutoTopicCreationManager id=%d] Deferred auto-creating %d topic(s) since the "
            "last report: %s; clients see UNKNOWN_TOPIC_OR_PARTITION and retry",
            self.node_id,
            self._deferred,
            why,
        )
        self._deferred = 0
        self._deferred_logged_s = now

    async def _create_topics(self, names: list[str], client: ApiRequest) -> None:
        module: Any = request_module(ApiKey.CREATE_TOPICS, AUTO_CREATE_VERSION)
        topics = tuple(
            make(
                module.CreatableTopic,
                {"name": name, "num_partitions": -1, "replication_factor": -1},
            )
            for name in names
        )
        request = make(
            module.CreateTopicsRequest,
            {"topics": topics, "timeout": timedelta(milliseconds=CREATE_TIMEOUT_MS)},
        )
        try:
            response: Any = await self._forward(request, client)
            throttled = sum(
                topic.error_code == ErrorCode.throttling_quota_exceeded for topic in response.topics
            )
            if throttled:
                self._log_deferred(
                    asyncio.get_running_loop().time(), throttled, True, "the client's quota"
                )
            failed = [
                topic
                for topic in response.topics
                if topic.error_code
                not in (
                    ErrorCode.none,
                    ErrorCode.topic_already_exists,
                    ErrorCode.throttling_quota_exceeded,
                )
            ]
            if failed:
                codes = Counter(topic.error_code.name for topic in failed)
                logger.warning(
                    "[AutoTopicCreationManager id=%d] Auto-creating %d of %d topic(s) failed "
                    "(%s); the first, %s: %s",
                    self.node_id,
                    len(failed),
                    len(names),
                    ", ".join(f"{code} x{count}" for code, count in sorted(codes.items())),
                    failed[0].name,
                    failed[0].error_message,
                )
        finally:
            for name in names:
                self._creating.pop(name, None)

    async def wait_idle(self) -> None:
        """Until every forwarded creation has been answered."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        """Stop creations still waiting for the controller."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)
