"""The metadata scenario's admin workload on a real run, driven by confluent-kafka's
AdminClient (librdkafka): topics created, deleted, grown and reconfigured under faults.

Each lane picks its operations as the simulator's lanes do (``TopicPicks`` of
sim/scenarios/metadata.py: four shared topics ``t0``-``t3`` and fresh topics ``u<lane>-<n>``
nothing else touches) and records them in the metadata scenario's history vocabulary:
function ``create`` (value: partitions), ``delete``, ``create-partitions`` (value: the new
total), ``alter-config`` (value: ``retention.ms``), key the topic, status by
``admin_status`` (the Kafka error name the broker answered). After the heal, once every
broker's metadata shows a topic created after the lanes stopped (so each has replayed every
acknowledged change), every topic is read once: ``read`` (its partition count, None when
absent) and ``read-config`` (its ``retention.ms`` override, None when unset), one process
per topic. kraft-analyze checks each topic's history for linearizability against the
metadata scenario's ``TopicModel`` (sim/analysis/models.py), as it does a simulated run's.

Broker-config changes (the simulator's controller lane) are left out: librdkafka sends a
broker resource's change to that broker, so the simulator's trick of a config key of a
non-existent broker id, which nothing else touches, has no real-client equivalent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

from broker.client import KafkaConnection
from jepsen.history import Recorder
from sim import kafka_client
from sim.admin import error_name
from sim.scenarios.kafka import HEAL_BOUND_S, REQUEST_TIMEOUT_S
from sim.scenarios.metadata import OP_TIMEOUT_S, TopicPicks, admin_status

RETENTION = "retention.ms"
# The topic the heal creates; a broker that lists it has replayed every earlier change.
BARRIER_TOPIC = "jepsen-admin-heal"
# The broker waits this long for a create or delete to complete (CreateTopics' timeout).
OPERATION_TIMEOUT_S = 5.0
# librdkafka fails an admin request within request_timeout; past this margin it is lost.
REPORT_MARGIN_S = 5.0
PACE_S = (0.1, 1.0)  # between a lane's operations: about 2 a second per lane
LOG_LEVEL = 2  # librdkafka logs every refused connect; during faults that is most of them


def answer(future: concurrent.futures.Future) -> str:  # type: ignore[type-arg]
    """The Kafka error name an admin future ended with (``NONE`` on success); a client-side
    failure (librdkafka's own timeout, no broker) by librdkafka's name (``_TIMED_OUT``),
    which ``admin_status`` reads as an unknown outcome."""
    try:
        future.result(timeout=OP_TIMEOUT_S + REPORT_MARGIN_S)
    except KafkaException as failure:
        error = failure.args[0] if failure.args else None
        if not isinstance(error, KafkaError):
            return type(failure).__name__
        return error_name(error.code()) if error.code() >= 0 else str(error.name())
    except concurrent.futures.TimeoutError:
        return "no-answer"
    return "NONE"


@dataclass(slots=True)
class AdminWorkload:
    """The admin lanes of one run; ``keys`` every topic they touched, in first-touch order."""

    recorder: Recorder
    bootstrap: str
    stop: threading.Event = field(default_factory=threading.Event)
    picks: TopicPicks = field(default_factory=TopicPicks)
    keys: dict[str, None] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, process: str) -> AdminClient:
        return AdminClient(
            {"bootstrap.servers": self.bootstrap, "client.id": process, "log_level": LOG_LEVEL}
        )

    def _pick(self, rng: random.Random, lane: int) -> tuple[str, str, int | None]:
        with self._lock:
            f, key, value = self.picks.pick(rng, lane)
            self.keys.setdefault(key)
            return f, key, value

    def lane(self, lane: int, seed: int) -> None:
        """One request at a time; after an answer of unknown outcome the lane starts over as
        a new client and process (Jepsen's rule)."""
        rng = random.Random(seed)
        generation = 0
        while not self.stop.is_set():
            process = f"admin{lane}.{generation}"
            client = self.client(process)
            while not self.stop.wait(rng.uniform(*PACE_S)):
                f, key, value = self._pick(rng, lane)
                self.recorder.op(process, "invoke", f, key, value)
                try:
                    error = answer(self._request(client, f, key, value))
                except KafkaException as refused:  # by librdkafka, before sending anything
                    self.recorder.op(process, "fail", f, key, value, error=str(refused))
                    continue
                status = admin_status(error)
                self.recorder.op(
                    process, status, f, key, value, error=None if status == "ok" else error
                )
                if status == "info":
                    break
            generation += 1

    @staticmethod
    def _request(
        client: AdminClient, f: str, topic: str, value: int | None
    ) -> concurrent.futures.Future:  # type: ignore[type-arg]
        timeouts = {"request_timeout": OP_TIMEOUT_S}
        if f == "create":
            assert value is not None
            new = NewTopic(topic, num_partitions=value, replication_factor=-1)
            created = client.create_topics([new], operation_timeout=OPERATION_TIMEOUT_S, **timeouts)
            return created[topic]
        if f == "delete":
            deleted = client.delete_topics(
                [topic], operation_timeout=OPERATION_TIMEOUT_S, **timeouts
            )
            return deleted[topic]
        if f == "create-partitions":
            assert value is not None
            return client.create_partitions([NewPartitions(topic, value)], **timeouts)[topic]
        assert f == "alter-config", f
        entry = ConfigEntry(RETENTION, str(value), incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
        return next(iter(client.incremental_alter_configs([resource], **timeouts).values()))

    # ---- after the heal ---------------------------------------------------------------------
    def final_reads(self, brokers: list[tuple[str, int]]) -> None:
        """Read every topic the lanes touched once every broker has replayed all they did.
        A cluster that does not get there within the heal bound is read nothing (an
        ``admin-unread`` event says so; the kafka checks' liveness reports the cluster)."""
        deadline = time.monotonic() + HEAL_BOUND_S
        client = self.client("admin-final")
        if not self._barrier(client, brokers, deadline):
            self.recorder.event("admin-unread", topics=len(self.keys))
            return
        topics = list(self.keys)
        processes = {topic: f"admin-final/{topic}" for topic in topics}
        counts = self._read_all(processes, "read", lambda: self._partition_counts(client, topics))
        if counts is not None:  # which topics to describe is known
            present = [topic for topic in topics if counts[topic] is not None]
            self._read_all(processes, "read-config", lambda: self._retentions(client, present))

    def _read_all(
        self,
        processes: dict[str, str],
        f: str,
        read: Callable[[], dict[str, int | None] | None],
    ) -> dict[str, int | None] | None:
        """One read of every topic at once: all invoked, read, all completed (each read's
        window holds the request that answered it); what was read, None if nothing."""
        for topic, process in processes.items():
            self.recorder.op(process, "invoke", f, topic, None)
        found = read()
        for topic, process in processes.items():
            if found is None:
                self.recorder.op(process, "info", f, topic, None, error="no-answer")
            else:
                self.recorder.op(process, "ok", f, topic, found.get(topic))
        return found

    @staticmethod
    def _partition_counts(client: AdminClient, topics: list[str]) -> dict[str, int | None] | None:
        try:
            listed = client.list_topics(timeout=REQUEST_TIMEOUT_S).topics
        except KafkaException:
            return None
        return {t: len(listed[t].partitions) if t in listed else None for t in topics}

    @staticmethod
    def _retentions(client: AdminClient, topics: list[str]) -> dict[str, int | None] | None:
        resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
        if not resources:
            return {}
        found: dict[str, int | None] = {}
        futures = client.describe_configs(resources, request_timeout=OP_TIMEOUT_S)
        for resource, future in futures.items():
            try:
                entries = future.result(timeout=OP_TIMEOUT_S + REPORT_MARGIN_S)
            except (KafkaException, concurrent.futures.TimeoutError):
                return None
            entry = entries.get(RETENTION)
            # librdkafka gives the source as a number, not a ConfigSource.
            dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            override = entry is not None and entry.source == dynamic
            found[resource.name] = int(entry.value) if override else None
        return found

    def _barrier(
        self, client: AdminClient, brokers: list[tuple[str, int]], deadline: float
    ) -> bool:
        """Create ``BARRIER_TOPIC`` after every lane stopped, then wait until every broker's
        Metadata lists it: each has then replayed every change acknowledged before."""
        while answer(self._request(client, "create", BARRIER_TOPIC, 1)) not in (
            "NONE",
            "TOPIC_ALREADY_EXISTS",
        ):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        waiting = list(brokers)
        while waiting:
            if asyncio.run(_lists(*waiting[0], BARRIER_TOPIC)):
                waiting.pop(0)
            elif time.monotonic() > deadline:
                return False
            else:
                time.sleep(0.2)
        return True


async def _lists(host: str, port: int, topic: str) -> bool:
    """Whether the broker at ``host:port`` has ``topic`` in its metadata."""
    conn = KafkaConnection("jepsen-admin-barrier")
    try:
        await conn.connect(host, port, REQUEST_TIMEOUT_S)
        error, _found, _hosts = await kafka_client.partitions(conn, topic, REQUEST_TIMEOUT_S)
    except (OSError, TimeoutError, ConnectionError):
        return False
    finally:
        await conn.close()
    return error == "NONE"
