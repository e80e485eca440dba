"""The broker's own counters, under the names the Prometheus JMX exporter's standard Kafka
rules give Kafka's metrics (``kafka_server_brokertopicmetrics_messagesin_total``,
``kafka_network_requestmetrics_requests_total{request="Produce"}``...), so dashboards and
alerts written for Kafka work unchanged (docs/operations.md lists them).

Only what must be counted as it happens is counted here, and as plain integers in slotted
objects: a produced partition costs a dict lookup and a few additions, no lock, no label
resolution. Everything else (partition counts, ISR health, controller gauges) is computed
from the broker's state when Prometheus scrapes (kraft/metrics.py), so it costs nothing
between scrapes. Each family is built at scrape time by ``families()`` methods, for a
prometheus_client collector registered in the node's own registry (never the global one:
several nodes share a process in the simulator and in tests).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from metadata.image import MetadataImage, changed_topic_ids
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.server import NO_RESPONSE, Handler

# Request time buckets, in ms (Kafka's TotalTimeMs is in ms too).
TIME_BUCKETS_MS: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0)
TIME_BUCKETS_MS += (1000.0, 2500.0, 5000.0, 10000.0, 30000.0)
BATCH_RECORDS_COUNT_AT = 57  # v2 record batch header: the records count, an int32
# Partition errors Kafka's ReplicaManager.appendToLocalLog does not count as failed produce
# requests (the client's to retry, or the broker's state), plus the two an acks=all produce
# gets after its append (DelayedProduce never marks the failed rate).
NOT_FAILED_PRODUCE = frozenset(
    int(code)
    for code in {
        ErrorCode.none,
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.message_too_large,
        ErrorCode.record_list_too_large,
        ErrorCode.corrupt_message,
        ErrorCode.kafka_storage_error,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas_after_append,
    }
)
# Appended to the log: the records count as messages in even if acks=all then failed.
APPENDED = frozenset(
    int(code)
    for code in (
        ErrorCode.none,
        ErrorCode.request_timed_out,
        ErrorCode.not_enough_replicas_after_append,
    )
)
# ... and those ReplicaManager.readFromLog does not count as failed fetches.
NOT_FAILED_FETCH = frozenset(
    int(code)
    for code in {
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.unknown_topic_id,
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.replica_not_available,
        ErrorCode.kafka_storage_error,
        ErrorCode.inconsistent_topic_id,
        ErrorCode.offset_out_of_range,
    }
)

# Plain ints: an enum member's attribute lookup costs more than the whole comparison.
UNKNOWN_TOPIC = int(ErrorCode.unknown_topic_or_partition)


class TopicCounters:
    """One topic's BrokerTopicMetrics (Kafka's meters; only their counts here)."""

    __slots__ = (
        "bytes_in",
        "bytes_out",
        "failed_fetch",
        "failed_produce",
        "messages_in",
        "replication_bytes_out",
        "total_fetch",
        "total_produce",
    )

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.replication_bytes_out = 0
        self.failed_produce = 0
        self.failed_fetch = 0
        self.total_produce = 0
        self.total_fetch = 0


# (metric name after kafka_server_brokertopicmetrics_, counter attribute, meaning, per topic)
TOPIC_METRICS = (
    ("messagesin", "messages_in", "Records appended by producers (as leader).", True),
    ("bytesin", "bytes_in", "Record batch bytes appended by producers.", True),
    ("bytesout", "bytes_out", "Record bytes answered to consumer fetches.", True),
    (
        "replicationbytesout",
        "replication_bytes_out",
        "Record bytes answered to follower fetches.",
        False,
    ),
    ("failedproducerequests", "failed_produce", "Partition appends that failed.", True),
    ("failedfetchrequests", "failed_fetch", "Partition reads that failed.", True),
    ("totalproducerequests", "total_produce", "Partition appends asked for.", True),
    ("totalfetchrequests", "total_fetch", "Partition reads asked for.", True),
)


class BrokerTopicMetrics:
    """Kafka's BrokerTopicStats: per-topic counters, the all-topics series summed at scrape.
    Only topics that exist are counted (an unknown topic is not one), and ``retain`` drops a
    deleted topic's counters, as Kafka removes its metrics, so memory stays bounded.

    ``produce_errors`` (RequestMetrics.errors_of("Produce")) gets every produced partition's
    error code: the codes a Produce response carries, counted here where they are already
    at hand rather than by walking the response again."""

    def __init__(self, produce_errors: dict[int, int] | None = None) -> None:
        self._topics: dict[str, TopicCounters] = {}
        self._produce_errors = {} if produce_errors is None else produce_errors

    def _of(self, topic: str) -> TopicCounters:
        counters = self._topics.get(topic)
        if counters is None:
            counters = self._topics[topic] = TopicCounters()
        return counters

    def produced(self, topic: str, records: bytes, error: int) -> None:
        """One partition of a Produce answered with ``error``."""
        errors = self._produce_errors
        errors[error] = errors.get(error, 0) + 1
        if error == UNKNOWN_TOPIC:
            return
        counters = self._topics.get(topic) or self._of(topic)
        counters.total_produce += 1
        if error in APPENDED:
            counters.bytes_in += len(records)
            counters.messages_in += int.from_bytes(
                records[BATCH_RECORDS_COUNT_AT : BATCH_RECORDS_COUNT_AT + 4], "big"
            )
        elif error not in NOT_FAILED_PRODUCE:
            counters.failed_produce += 1

    def fetched(self, topic: str | None, size: int, error: int, follower: bool) -> None:
        """One partition of a Fetch answered with ``size`` record bytes and ``error``."""
        if topic is None or error == UNKNOWN_TOPIC:
            return
        counters = self._topics.get(topic) or self._of(topic)
        counters.total_fetch += 1
        if follower:
            counters.replication_bytes_out += size
        else:
            counters.bytes_out += size
        if error not in NOT_FAILED_FETCH:
            counters.failed_fetch += 1

    def retain(self, topics: Callable[[str], bool]) -> None:
        """Forget the counters of topics that no longer exist."""
        for name in [name for name in self._topics if not topics(name)]:
            del self._topics[name]

    def families(self) -> Iterator[Metric]:
        topics = sorted(self._topics.items())
        for name, attribute, meaning, per_topic in TOPIC_METRICS:
            family = CounterMetricFamily(
                f"kafka_server_brokertopicmetrics_{name}", meaning, labels=["topic"]
            )
            total = 0
            for topic, counters in topics:
                value = getattr(counters, attribute)
                total += value
                if per_topic:
                    family.add_metric([topic], value)
            family.add_sample(f"kafka_server_brokertopicmetrics_{name}_total", {}, total)
            yield family


class RequestStats:
    """Kafka's RequestMetrics of one request name: counts by version, response error codes,
    and the total time histogram (cumulative buckets built at scrape)."""

    __slots__ = ("bucket_counts", "errors", "time_sum_ms", "versions")

    def __init__(self) -> None:
        self.versions: dict[int, int] = {}
        self.errors: dict[int, int] = {}
        self.bucket_counts = [0] * (len(TIME_BUCKETS_MS) + 1)  # the last one: +Inf
        self.time_sum_ms = 0.0


class RequestMetrics:
    """Requests by name (``FetchConsumer`` and ``FetchFollower`` apart, as Kafka names
    them), their response error codes and total times; ``instrument`` wraps a
    network.Handler. Time is the loop's clock (virtual under the simulator), from a decoded
    request to its response entity: there is no request queue here, and a response's send
    is not included."""

    def __init__(self, now_s: Callable[[], float]) -> None:
        self._now_s = now_s
        self._stats: dict[str, RequestStats] = {}
        self._by_key: dict[int, RequestStats] = {}  # Fetch is not here: named by who asks

    def instrument(self, handle: Handler) -> Handler:
        now_s, record = self._now_s, self.record

        async def measured(header: wire.RequestHeader, request: object) -> object | None:
            start_s = now_s()
            response = await handle(header, request)
            record(header, request, response, (now_s() - start_s) * 1000)
            return response

        return measured

    def record(
        self, header: wire.RequestHeader, request: object, response: object, time_ms: float
    ) -> None:
        """Count one answered request (``response`` may be None or server.NO_RESPONSE)."""
        stats = self._by_key.get(header.api_key) or self._stats_of(header.api_key, request)
        versions, version = stats.versions, header.api_version
        versions[version] = versions.get(version, 0) + 1
        stats.bucket_counts[bisect.bisect_left(TIME_BUCKETS_MS, time_ms)] += 1
        stats.time_sum_ms += time_ms
        if response is None or response is NO_RESPONSE or header.api_key == ApiKey.PRODUCE:
            return  # Produce's codes: BrokerTopicMetrics.produced counts them
        count_errors(response, stats.errors)

    def errors_of(self, name: str) -> dict[int, int]:
        """The error counts of the requests called ``name``, for whoever counts them."""
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = RequestStats()
        return stats.errors

    def _stats_of(self, api_key: int, request: object) -> RequestStats:
        """The stats of a request's name: its entity's less "Request" (cached by api key),
        except Fetch, named by who asks."""
        if api_key == ApiKey.FETCH:
            follower = getattr(request, "replica_id", -1) >= 0
            name = "FetchFollower" if follower else "FetchConsumer"
        else:
            name = type(request).__name__.removesuffix("Request")
        self.errors_of(name)
        stats = self._stats[name]
        if api_key != ApiKey.FETCH:
            self._by_key[api_key] = stats
        return stats

    def families(self) -> Iterator[Metric]:
        stats = sorted(self._stats.items())
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by request name and version.",
            labels=["request", "version"],
        )
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes in responses (NONE included), by request name; a response with "
            "several partitions counts each partition's code.",
            labels=["request", "error"],
        )
        times = HistogramMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a decoded request to its response, in ms.",
            labels=["request"],
        )
        for name, stat in stats:
            if not stat.versions:
                continue  # Produce's error counts exist before any Produce does
            for version, count in sorted(stat.versions.items()):
                requests.add_metric([name, str(version)], count)
            for code, count in sorted(stat.errors.items()):
                errors.add_metric([name, error_name(code)], count)
            times.add_metric([name], cumulative_buckets(stat.bucket_counts), stat.time_sum_ms)
        yield requests
        yield errors
        yield times


def cumulative_buckets(bucket_counts: list[int]) -> list[tuple[str, float]]:
    """Per-bucket counts over TIME_BUCKETS_MS (and +Inf) as Prometheus's cumulative ``le``."""
    buckets, total = [], 0
    for bound, count in zip((*TIME_BUCKETS_MS, float("inf")), bucket_counts, strict=True):
        total += count
        buckets.append(("+Inf" if bound == float("inf") else str(bound), float(total)))
    return buckets


def error_name(code: int) -> str:
    """Kafka's name of an error code (``NOT_LEADER_OR_FOLLOWER``), as its metrics label it."""
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


# Per response entity class: its error code fields and its fields of nested entities.
_PLANS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _plan(cls: type) -> tuple[tuple[str, ...], tuple[str, ...]]:
    errors, nested = [], []
    for field in dataclasses.fields(cls):
        kind = field.metadata.get("kafka_type")
        if kind == "error_code":
            errors.append(field.name)
        elif kind is None:  # kio gives every primitive a kafka_type, entities none
            nested.append(field.name)
    return tuple(errors), tuple(nested)


def count_errors(entity: Any, counts: dict[int, int]) -> None:
    """Add every error code of a response entity, nested ones included, to ``counts``
    (Kafka's AbstractResponse.errorCounts). A field without a kafka_type holds entities,
    so they are walked without asking."""
    plan = _PLANS.get(type(entity))
    if plan is None:
        plan = _PLANS[type(entity)] = _plan(type(entity))
    errors, nested = plan
    for name in errors:
        code = getattr(entity, name)  # an ErrorCode: an int, hashing as its value
        counts[code] = counts.get(code, 0) + 1
    for name in nested:
        value = getattr(entity, name)
        if type(value) is tuple:
            for item in value:
                count_errors(item, counts)
        elif value is not None:
            count_errors(value, counts)


class NetworkMetrics:
    """Kafka's socket-server-metrics per listener: connections created and closed."""

    def __init__(self) -> None:
        self._created: dict[str, int] = {}
        self._closed: dict[str, int] = {}

    def opened(self, listener: str) -> None:
        self._created[listener] = self._created.get(listener, 0) + 1

    def closed(self, listener: str) -> None:
        self._closed[listener] = self._closed.get(listener, 0) + 1

    def families(self) -> Iterator[Metric]:
        prefix = "kafka_server_socket_server_metrics_"
        count = GaugeMetricFamily(
            prefix + "connection_count", "Connections open.", labels=["listener"]
        )
        created = CounterMetricFamily(
            prefix + "connection_creation", "Connections accepted.", labels=["listener"]
        )
        closed = CounterMetricFamily(
            prefix + "connection_close", "Connections closed.", labels=["listener"]
        )
        for listener, made in sorted(self._created.items()):
            gone = self._closed.get(listener, 0)
            count.add_metric([listener], made - gone)
            created.add_metric([listener], made)
            closed.add_metric([listener], gone)
        yield count
        yield created
        yield closed


class BrokerMetricsPublisher:
    """A MetadataPublisher for what only image changes tell: Kafka's IsrShrinksPerSec and
    IsrExpandsPerSec, from the committed ISRs of the partitions this broker leads (an ISR
    that lost members is a shrink, one that gained members an expand), and the end of a
    deleted topic's counters. Unlike Kafka's, which counts only the leader's own
    AlterPartition, the ISR counts include the controller's shrinks (a fenced or shut-down
    broker leaving the ISR), which an operator wants to see just as much."""

    def __init__(self, node_id: int, topics: BrokerTopicMetrics) -> None:
        self.node_id = node_id
        self.topics = topics
        self.isr_shrinks = 0
        self.isr_expands = 0

    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        if before.topics.by_name is not after.topics.by_name:
            self.topics.retain(after.topics.by_name.__contains__)
        old_topics, new_topics = before.topics.by_id, after.topics.by_id
        touched = changed_topic_ids(before.topics, after.topics)
        for topic_id in new_topics if touched is None else touched:
            old, topic = old_topics.get(topic_id), new_topics.get(topic_id)
            if old is None or topic is None or old is topic:
                continue
            for index, partition in topic.partitions.items():
                previous = old.partitions.get(index)
                if (
                    previous is None
                    or previous is partition
                    or partition.leader != self.node_id
                    or previous.isr == partition.isr
                ):
                    continue
                now_isr, then_isr = set(partition.isr), set(previous.isr)
                if then_isr - now_isr:
                    self.isr_shrinks += 1
                if now_isr - then_isr:
                    self.isr_expands += 1
