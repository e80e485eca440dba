"""A node's Prometheus metrics: its own CollectorRegistry and one collector that reads the
node's state when scraped.

Kafka exposes its metrics through JMX and operators scrape them with the Prometheus JMX
exporter; the names here are what that exporter's standard Kafka rules make of Kafka's
(``kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions`` becomes
``kafka_server_replicamanager_underreplicatedpartitions``), so existing dashboards and alerts
work. docs/operations.md lists every metric.

Counters that must be counted as things happen live in broker/metrics.py (produce and fetch
per topic, requests, connections) and in ``RaftMetrics`` (commit latency, elections);
gauges are computed from the node's state at scrape time, so nothing else costs anything
between scrapes. The registry is the node's, never prometheus_client's global one: several
nodes share a process in the simulator and in tests. Serving it over HTTP is the real
process's business (kraft/metrics_http.py); node code only builds the samples, which keeps
it deterministic and runnable under the simulator.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from broker.fetch_session import FetchSessionCache
from broker.group.classic import GroupState
from broker.group.consumer_group import ConsumerGroupState
from broker.kafka_apis import loop_time
from broker.metrics import (
    TIME_BUCKETS_MS,
    BrokerMetricsPublisher,
    BrokerTopicMetrics,
    NetworkMetrics,
    RequestMetrics,
    cumulative_buckets,
)
from log.clock import WallClock
from log.records import Record
from metadata.image import MetadataImage
from protocol.server import RequestBytesBudget
from raft.core import Event, Role, RoleChanged
from raft.driver import CommittedBatch
from raft.snapshot import SnapshotId

if TYPE_CHECKING:
    from kraft.node import KraftNode


class RaftMetrics:
    """A RaftListener for Kafka's raft-metrics that need events: commit latency (on the
    leader, from a batch's append timestamp to its commit), records committed as leader,
    and elections this node started."""

    def __init__(self, clock: WallClock) -> None:
        self._clock = clock
        self._role = Role.UNATTACHED
        self._epoch = -1
        self.elections = 0
        self.append_records = 0
        self.commit_bucket_counts = [0] * (len(TIME_BUCKETS_MS) + 1)
        self.commit_sum_ms = 0.0

    def handle_commit(self, batch: CommittedBatch) -> None:
        if self._role is not Role.LEADER or batch.epoch != self._epoch or batch.is_control:
            return
        if not batch.records:
            return
        latency_ms = float(max(0, self._clock.now_ms() - batch.records[-1].timestamp))
        self.commit_bucket_counts[bisect.bisect_left(TIME_BUCKETS_MS, latency_ms)] += 1
        self.commit_sum_ms += latency_ms
        self.append_records += len(batch.records)

    def handle_event(self, event: Event) -> None:
        if isinstance(event, RoleChanged):
            if event.role is Role.CANDIDATE and self._role is not Role.CANDIDATE:
                self.elections += 1
            self._role, self._epoch = event.role, event.epoch

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        return None


class NodeMetrics:
    """Everything one node reports, in its own registry; ``attach`` binds it to the node
    (KraftNode does, at construction), ``exposition`` renders Prometheus's text format."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = RequestMetrics(loop_time)
        self.topics = BrokerTopicMetrics(self.requests.errors_of("Produce"))
        self.network = NetworkMetrics()
        self.raft: RaftMetrics | None = None
        self.publisher: BrokerMetricsPublisher | None = None
        self.fetch_sessions: FetchSessionCache | None = None
        self.budgets: dict[str, RequestBytesBudget | None] = {}
        self._node: KraftNode | None = None

    def attach(self, node: KraftNode) -> None:
        assert self._node is None, "a NodeMetrics belongs to one node"
        self._node = node
        self.raft = RaftMetrics(node.runtime.clock)
        self.registry.register(_NodeCollector(self, node))

    def exposition(self) -> bytes:
        """The registry in Prometheus's text format (what GET /metrics answers)."""
        return generate_latest(self.registry)


class _NodeCollector:
    """Builds every family from the node's state at scrape time."""

    def __init__(self, metrics: NodeMetrics, node: KraftNode) -> None:
        self._metrics = metrics
        self._node = node

    def collect(self) -> Iterator[Metric]:
        node, metrics = self._node, self._metrics
        yield from metrics.requests.families()
        yield from metrics.network.families()
        yield from self._budgets()
        if node.raft is not None and node.raft.core is not None:
            yield from self._raft()
        if node.controller is not None and node.loader is not None:
            yield from self._controller(node.loader.image)
        if node.is_broker:
            yield from self._broker()

    def _budgets(self) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "kafka_network_socketserver_memorypoolused",
            "Bytes of requests read and not yet answered (queued.max.request.bytes).",
            labels=["plane"],
        )
        available = GaugeMetricFamily(
            "kafka_network_socketserver_memorypoolavailable",
            "Bytes of queued.max.request.bytes not in use.",
            labels=["plane"],
        )
        for plane, budget in sorted(self._metrics.budgets.items()):
            if budget is not None:
                used.add_metric([plane], budget.used_bytes)
                available.add_metric([plane], max(0, budget.max_bytes - budget.used_bytes))
        yield used
        yield available

    def _raft(self) -> Iterator[Metric]:
        node, raft_metrics = self._node, self._metrics.raft
        raft = node.raft
        assert raft is not None and raft_metrics is not None
        prefix = "kafka_server_raftmetrics_"
        role = raft.role
        state = role.value
        if (
            role is Role.FOLLOWER
            and node.config.node_id not in node.config.controller_quorum_voters
        ):
            state = "observer"  # Kafka's name for a non-voter that follows
        current = GaugeMetricFamily(
            prefix + "current_state",
            "This node's quorum state (the label; the value is always 1).",
            labels=["current_state"],
        )
        current.add_metric([state], 1)
        yield current
        yield GaugeMetricFamily(
            prefix + "current_leader", "The quorum leader's id, -1 if none.", value=raft.leader_id
        )
        yield GaugeMetricFamily(prefix + "current_epoch", "The quorum epoch.", value=raft.epoch)
        yield GaugeMetricFamily(
            prefix + "high_watermark",
            "The metadata log's high watermark.",
            value=raft.high_watermark,
        )
        if node.log is not None:
            yield GaugeMetricFamily(
                prefix + "log_end_offset",
                "The metadata log's end offset.",
                value=node.log.end_offset(),
            )
        yield CounterMetricFamily(
            prefix + "append_records",
            "Records this node committed as leader.",
            value=raft_metrics.append_records,
        )
        yield CounterMetricFamily(
            prefix + "elections",
            "Elections this node started (became candidate).",
            value=raft_metrics.elections,
        )
        latency = HistogramMetricFamily(
            prefix + "commit_latency_ms",
            "On the leader: ms from a batch's append to its commit.",
        )
        latency.add_metric(
            [], cumulative_buckets(raft_metrics.commit_bucket_counts), raft_metrics.commit_sum_ms
        )
        yield latency

    def _controller(self, image: MetadataImage) -> Iterator[Metric]:
        controller = self._node.controller
        assert controller is not None
        prefix = "kafka_controller_kafkacontroller_"
        topics = image.topics.by_id.values()
        partitions = [p for topic in topics for p in topic.partitions.values()]
        brokers = image.cluster.brokers.values()
        values = (
            (
                "activecontrollercount",
                "1 on the active controller, 0 on the others.",
                int(controller.active),
            ),
            (
                "offlinepartitionscount",
                "Partitions without a leader.",
                sum(1 for p in partitions if p.leader < 0),
            ),
            ("globaltopiccount", "Topics in the cluster.", len(image.topics.by_id)),
            ("globalpartitioncount", "Partitions in the cluster.", len(partitions)),
            (
                "fencedbrokercount",
                "Registered brokers that are fenced.",
                sum(1 for b in brokers if b.fenced),
            ),
            (
                "activebrokercount",
                "Registered brokers that are not fenced.",
                sum(1 for b in brokers if not b.fenced),
            ),
            (
                "preferredreplicaimbalancecount",
                "Partitions not led by their first replica.",
                sum(1 for p in partitions if p.replicas and p.leader != p.replicas[0]),
            ),
            (
                "lastappliedrecordoffset",
                "The last metadata offset this controller applied.",
                image.offset - 1,
            ),
        )
        for name, meaning, value in values:
            yield GaugeMetricFamily(prefix + name, meaning, value=value)

    def _broker(self) -> Iterator[Metric]:
        node, metrics = self._node, self._metrics
        yield from metrics.topics.families()
        if node.lifecycle is not None:
            yield GaugeMetricFamily(
                "kafka_server_kafkaserver_brokerstate",
                "Kafka's BrokerState id (3 RUNNING, 6 PENDING_CONTROLLED_SHUTDOWN...).",
                value=int(node.lifecycle.state),
            )
        replicas, loader = node.replicas, node.loader
        if replicas is not None and loader is not None:
            yield from self._replica_manager(loader.image)
        if node.logs is not None:
            yield from self._logs()
        sessions = metrics.fetch_sessions
        if sessions is not None:
            prefix = "kafka_server_fetchsessioncache_"
            yield GaugeMetricFamily(
                prefix + "numincrementalfetchsessions",
                "Incremental fetch sessions cached.",
                value=len(sessions),
            )
            yield GaugeMetricFamily(
                prefix + "numincrementalfetchpartitionscached",
                "Partitions in all cached fetch sessions.",
                value=sessions.total_partitions,
            )
            yield CounterMetricFamily(
                prefix + "incrementalfetchsessionevictions",
                "Fetch sessions evicted to make room.",
                value=sessions.evictions,
            )
        if node.groups is not None:
            yield from self._groups()

    def _replica_manager(self, image: MetadataImage) -> Iterator[Metric]:
        node, publisher = self._node, self._metrics.publisher
        replicas = node.replicas
        assert replicas is not None
        me = node.config.node_id
        hosted = led = under = under_min = at_min = reassigning = 0
        for topic in image.topics.by_id.values():
            min_isr = None
            for partition in topic.partitions.values():
                if me in partition.replicas:
                    hosted += 1
                if partition.leader != me:
                    continue
                led += 1
                isr = len(partition.isr)
                if isr < len(partition.replicas):
                    under += 1
                if min_isr is None:
                    min_isr = replicas.min_insync_replicas(topic.name)
                if isr < min_isr:
                    under_min += 1
                elif isr == min_isr:
                    at_min += 1
                if partition.adding_replicas or partition.removing_replicas:
                    reassigning += 1
        prefix = "kafka_server_replicamanager_"
        for name, meaning, value in (
            ("partitioncount", "Partitions with a replica on this broker.", hosted),
            ("leadercount", "Partitions this broker leads.", led),
            (
                "underreplicatedpartitions",
                "Led partitions whose ISR is smaller than their replica set.",
                under,
            ),
            (
                "underminisrpartitioncount",
                "Led partitions whose ISR is below min.insync.replicas (acks=all produce fails).",
                under_min,
            ),
            (
                "atminisrpartitioncount",
                "Led partitions whose ISR is exactly "
                "min.insync.replicas (one more loss stops acks=all).",
                at_min,
            ),
            ("reassigningpartitions", "Led partitions being reassigned.", reassigning),
        ):
            yield GaugeMetricFamily(prefix + name, meaning, value=value)
        lags = replicas.fetchers.lags()
        consumer_lag = GaugeMetricFamily(
            "kafka_server_fetcherlagmetrics_consumerlag",
            "A followed partition's lag: its leader's high watermark less this log's end, "
            "as of the last fetch answer.",
            labels=["topic", "partition"],
        )
        for (name, index), lag in sorted(lags.items()):
            consumer_lag.add_metric([name, str(index)], lag)
        yield consumer_lag
        max_lag = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "The largest lag of the partitions this broker follows.",
            labels=["clientId"],
        )
        max_lag.add_metric(["Replica"], max(lags.values(), default=0))
        yield max_lag
        mover = replicas.log_dir_mover
        moves_lag = GaugeMetricFamily(
            "kafka_server_replicaalterlogdirsmanager_maxlag",
            "The most offsets a replica's copy into another log dir is behind the replica.",
            labels=["clientId"],
        )
        moves_lag.add_metric(["ReplicaAlterLogDirs"], mover.max_lag())
        yield moves_lag
        moves_failed = GaugeMetricFamily(
            "kafka_server_replicaalterlogdirsmanager_failedpartitionscount",
            "Replicas whose move to another log dir failed and was not asked for again.",
            labels=["clientId"],
        )
        moves_failed.add_metric(["ReplicaAlterLogDirs"], len(mover.failed_partitions))
        yield moves_failed
        if publisher is not None:
            yield CounterMetricFamily(
                prefix + "isrshrinks", "ISR shrinks of led partitions.", value=publisher.isr_shrinks
            )
            yield CounterMetricFamily(
                prefix + "isrexpands", "ISR expands of led partitions.", value=publisher.isr_expands
            )

    def _logs(self) -> Iterator[Metric]:
        logs = self._node.logs
        assert logs is not None
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log.", labels=labels)
        segments = GaugeMetricFamily(
            "kafka_log_log_numlogsegments", "Segments of a log.", labels=labels
        )
        start = GaugeMetricFamily(
            "kafka_log_log_logstartoffset", "A log's start offset.", labels=labels
        )
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "A log's end offset.", labels=labels)
        for (topic, index), log in sorted(logs.all_logs()):
            if not log.is_online:
                continue
            key = [topic, str(index)]
            size.add_metric(key, log.size)
            segments.add_metric(key, len(log.segments))
            start.add_metric(key, log.log_start_offset)
            end.add_metric(key, log.log_end_offset)
        yield from (size, segments, start, end)
        offline = GaugeMetricFamily(
            "kafka_log_logmanager_offlinelogdirectorycount",
            "Log dirs that have failed.",
            value=len(logs.offline_dirs),
        )
        yield offline

    def _groups(self) -> Iterator[Metric]:
        groups = self._node.groups
        assert groups is not None
        found = groups.groups()
        if not isinstance(found, list):
            return  # a coordinator partition is loading: no counts rather than wrong ones
        classic = Counter(g.state for g in found if isinstance(g.state, GroupState))
        consumer = Counter(g.state for g in found if isinstance(g.state, ConsumerGroupState))
        prefix = "kafka_coordinator_group_groupmetadatamanager_"
        yield GaugeMetricFamily(
            prefix + "numgroups", "Classic groups.", value=sum(classic.values())
        )
        for state in GroupState:
            yield GaugeMetricFamily(
                prefix + "numgroups" + state.value.lower(),
                f"Classic groups in state {state.value}.",
                value=classic[state],
            )
        by_state = GaugeMetricFamily(
            "kafka_server_group_coordinator_metrics_consumer_group_count",
            "Consumer-protocol (KIP-848) groups by state.",
            labels=["state"],
        )
        for consumer_state in ConsumerGroupState:
            by_state.add_metric([consumer_state.value.lower()], consumer[consumer_state])
        yield by_state
