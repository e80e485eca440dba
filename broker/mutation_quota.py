"""The controller mutation quota (KIP-599, ``controller_mutation_rate``) of CreateTopics,
CreatePartitions and DeleteTopics, charged by the controller (Kafka's
ControllerMutationQuotaManager): to a client of the controller listener, and to a broker's
client whose request the broker forwarded in an Envelope (broker/envelope.py), as that
client, so a client's requests share one budget whichever broker they reach.

Kafka charges a client one permit per partition created or deleted, against a token bucket
(Kafka's TokenBucket stat) that refills at the quota's rate and holds at most
``(quota.window.num - 1) x quota.window.size.seconds x quota`` permits, so an idle client
may burst that many at once. The check comes before each topic is charged: a topic is let
through while the bucket is not below zero, even if it takes the bucket below zero.

- Requests of the versions KIP-599 added the error to (CreateTopics v6+, CreatePartitions
  v3+, DeleteTopics v5+) are strict: a topic that finds the bucket below zero is answered
  THROTTLING_QUOTA_EXCEEDED (89) ``The throttling quota has been exceeded.`` and is not
  handled; the response's ``throttle_time_ms`` is the time until the bucket is back at
  zero, and the client's channel is muted that long (broker/quotas.py: by the broker that
  received a forwarded request, which reads the throttle time in the controller's answer).
  A Java client retries the throttled topics by itself after the throttle time.
- Older versions are permissive, as Kafka's: every topic is handled and charged, and if
  the bucket ends below zero the response carries the throttle time and the channel is
  muted.

The permits are the partition counts the controller's metadata image gives (the topic a
CreatePartitions grows, the topic a DeleteTopics deletes), looked at before the topics are
handed to the controller's handler; a topic the handler then refuses (it exists already, a
bad partition count) is given its permits back, as Kafka charges only the topics it goes on
to create or delete.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.refusals import refusal
from metadata.image import MetadataImage
from protocol.api_keys import ApiKey
from protocol.api_table import ApiRequest

# The first version of each API that carries THROTTLING_QUOTA_EXCEEDED (KIP-599).
STRICT_SINCE: dict[int, int] = {
    ApiKey.CREATE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DELETE_TOPICS: 5,
}
MUTATION_APIS = frozenset(STRICT_SINCE)
THROTTLED_MESSAGE = "The throttling quota has been exceeded."


class TokenBucket:
    """Kafka's TokenBucket: ``tokens`` refill at ``quota`` a second up to ``burst``."""

    __slots__ = ("_last_s", "full_at_s", "tokens")

    def __init__(self, burst: float, now_s: float) -> None:
        self.tokens = burst  # a new client starts with a full bucket
        self._last_s = now_s
        self.full_at_s = now_s  # from then on it is as good as a new bucket: it may go

    def measure(self, quota: float, burst: float, now_s: float) -> float:
        self.tokens = min(burst, self.tokens + quota * max(0.0, now_s - self._last_s))
        self._last_s = now_s
        return self.tokens

    def record(self, permits: float, quota: float, burst: float, now_s: float) -> None:
        self.tokens = min(burst, self.measure(quota, burst, now_s) - permits)
        self.full_at_s = now_s + (burst - self.tokens) / quota


class MutationQuota:
    """One request's charges against its client's bucket (Kafka's Strict- and
    PermissiveControllerMutationQuota); ``throttle_s`` is what the response reports."""

    __slots__ = ("_bucket", "_burst", "_now_s", "_quota", "strict", "throttle_s")

    def __init__(
        self, bucket: TokenBucket, quota: float, burst: float, strict: bool, now_s: float
    ) -> None:
        self._bucket = bucket
        self._quota = quota
        self._burst = burst
        self._now_s = now_s
        self.strict = strict
        self.throttle_s = 0.0

    def _note_throttle(self, tokens: float) -> None:
        if tokens < 0:
            # Kafka's ControllerMutationQuotaManager.throttleTimeMs: -tokens / quota.
            self.throttle_s = max(self.throttle_s, round(-tokens / self._quota * 1000) / 1000)

    def admit(self, permits: int) -> bool:
        """Charge ``permits``; False (strict only) when the bucket was already below zero,
        and the topic is refused, uncharged."""
        bucket = self._bucket
        if self.strict:
            tokens = bucket.measure(self._quota, self._burst, self._now_s)
            if tokens < 0:
                self._note_throttle(tokens)
                return False
        bucket.record(permits, self._quota, self._burst, self._now_s)
        if not self.strict:
            self._note_throttle(bucket.tokens)
        return True

    def refund(self, permits: int) -> None:
        """Give back what a topic the controller refused was charged."""
        self._bucket.record(-permits, self._quota, self._burst, self._now_s)


def _items_field(body: Any) -> str:
    return "topics" if hasattr(body, "topics") else "topic_names"  # DeleteTopics before v6


def _name(item: Any) -> str | None:
    return item if isinstance(item, str) else item.name


def _permits(api_key: int, item: Any, image: MetadataImage, default_partitions: int) -> int:
    """The partitions ``item`` would create or delete, as the controller's image sees it;
    0 where the controller will refuse it anyway (nothing is charged for it)."""
    topics = image.topics
    if api_key == ApiKey.CREATE_TOPICS:
        if topics.get(item.name) is not None:
            return 0  # TOPIC_ALREADY_EXISTS
        if item.assignments:
            return len(item.assignments)
        return default_partitions if item.num_partitions == -1 else max(0, item.num_partitions)
    if api_key == ApiKey.CREATE_PARTITIONS:
        topic = topics.get(item.name)
        return 0 if topic is None else max(0, item.count - len(topic.partitions))
    name = _name(item)
    topic = topics.get(name) if name is not None else topics.by_id.get(item.topic_id)
    return 0 if topic is None else len(topic.partitions)


def _results_field(api_key: int) -> str:
    fields: dict[int, str] = {
        ApiKey.CREATE_TOPICS: "topics",
        ApiKey.CREATE_PARTITIONS: "results",
        ApiKey.DELETE_TOPICS: "responses",
    }
    return fields[api_key]


def _key(item_or_result: Any) -> object:
    """What matches a request item to its result: the name, else the topic id."""
    name = _name(item_or_result)
    return name if name is not None else item_or_result.topic_id


async def forward_charged(
    request: ApiRequest,
    quota: MutationQuota,
    image: MetadataImage,
    default_partitions: int,
    forward: Callable[[object], Awaitable[object]],
) -> object:
    """``forward`` the request (to the controller's handler) with the topics the quota lets
    through; the refused ones answered THROTTLING_QUOTA_EXCEEDED beside the handler's
    answers, and the throttle time in the response."""
    api_key, version = request.header.api_key, request.api_version
    body: Any = request.body
    field = _items_field(body)
    items = tuple(getattr(body, field))
    names = [_key(item) for item in items]
    named = collections.Counter(names)
    charged: dict[object, int] = {}
    admitted: list[Any] = []
    refused: list[Any] = []
    for item, key in zip(items, names, strict=True):
        permits = 0 if named[key] > 1 else _permits(api_key, item, image, default_partitions)
        if permits and not quota.admit(permits):
            refused.append(item)
            continue
        admitted.append(item)
        if permits:
            charged[key] = permits
    results_field = _results_field(api_key)
    response: Any
    if admitted:
        response = await forward(dataclasses.replace(body, **{field: tuple(admitted)}))
        for result in getattr(response, results_field):
            if result.error_code == ErrorCode.none:
                continue
            # DeleteTopics by id is answered with the name as well.
            permits = charged.pop(result.name, 0) or charged.pop(
                getattr(result, "topic_id", None), 0
            )
            if permits:
                quota.refund(permits)
    else:
        nothing = dataclasses.replace(body, **{field: ()})
        response = refusal(api_key, version, nothing, ErrorCode.none)
    if refused:
        answered: Any = refusal(
            api_key,
            version,
            dataclasses.replace(body, **{field: tuple(refused)}),
            ErrorCode.throttling_quota_exceeded,
        )
        errors = tuple(
            dataclasses.replace(result, error_message=THROTTLED_MESSAGE)
            if hasattr(result, "error_message")
            else result
            for result in getattr(answered, results_field)
        )
        response = dataclasses.replace(
            response, **{results_field: (*getattr(response, results_field), *errors)}
        )
    if quota.throttle_s > 0 and isinstance(getattr(response, "throttle_time", None), timedelta):
        throttle = timedelta(milliseconds=round(quota.throttle_s * 1000))
        throttle = max(response.throttle_time, throttle)
        response = dataclasses.replace(response, throttle_time=throttle)
    return response
