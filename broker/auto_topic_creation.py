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
from protocol.entities import make, request_module

logger = logging.getLogger("broker.auto_topic_creation")

AUTO_CREATE_VERSION = 4  # v4+ takes -1 for the controller's defaults (KIP-464); v5+ would
# answer every topic's configs, which nobody reads here
AUTO_CREATE_TOPICS_PER_S = 100.0
AUTO_CREATE_BURST_TOPICS = 1000
LOG_INTERVAL_S = 60.0
CREATE_TIMEOUT_MS = 30_000  # Kafka's request.timeout.ms default


class AutoTopicCreationManager:
    """Creates missing topics through ``forward`` (the controller channel), within budget."""

    def __init__(
        self,
        node_id: int,
        forward: Callable[[object], Awaitable[object]],
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

    def create(self, missing: Iterable[str]) -> frozenset[str]:
        """Start creating the ``missing`` (valid, absent) names the budget allows; the names
        of ``missing`` now being created, by this call or an earlier one."""
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
            task = loop.create_task(self._create_topics(new))
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

    def _log_deferred(self, now: float, count: int, descriptors_free: bool) -> None:
        self._deferred += count
        last = self._deferred_logged_s
        if last is not None and now - last < LOG_INTERVAL_S:
            return
        why = (
            f"over the budget of {AUTO_CREATE_BURST_TOPICS} topics (refilled at "
            f"{AUTO_CREATE_TOPICS_PER_S:g}/s)"
            if descriptors_free
            else "this broker is at its file descriptor reserve (open.files.reserve)"
        )
        logger.warning(
            "[AutoTopicCreationManager id=%d] Deferred auto-creating %d topic(s) since the "
            "last report: %s; clients see UNKNOWN_TOPIC_OR_PARTITION and retry",
            self.node_id,
            self._deferred,
            why,
        )
        self._deferred = 0
        self._deferred_logged_s = now

    async def _create_topics(self, names: list[str]) -> None:
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
            response: Any = await self._forward(request)
            failed = [
                topic
                for topic in response.topics
                if topic.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists)
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
