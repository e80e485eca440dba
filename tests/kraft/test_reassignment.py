"""Partition reassignment (KIP-455) between real broker processes: the shipped 3-controller +
3-broker layout (brokers 4, 5, 6), a partition with data on brokers {4, 5} moved to {5, 6}.

- kafka-python's AdminClient starts a move to a broker that is stopped (SIGSTOP), sees it
  listed as in progress, and cancels it: the partition is back on its replicas.
- Kafka's own ``kafka-reassign-partitions`` (Java) --generate, --execute and --verify move
  it while confluent-kafka keeps producing with acks=all and min.insync.replicas=2: every
  acknowledged record is read back at its offset from the new replicas, and broker 4's
  directory of the partition is gone.
"""

from __future__ import annotations

import json
import signal
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KafkaPythonPartition
from kio.schema.errors import ErrorCode

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import Processes, wait_until
from tests.kraft.test_replication import (  # the cluster fixture: a cluster of this module's own
    Acked,
    bootstrap,
    cluster,  # noqa: F401
)

TOPIC = "moving"
DEADLINE_S = 60.0


def replicas(servers: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(replicas, ISR) of partition 0, sorted, as Metadata reports them."""
    metadata = AdminClient({"bootstrap.servers": servers}).list_topics(TOPIC, timeout=5)
    topic = metadata.topics.get(TOPIC)
    if topic is None or topic.error is not None or 0 not in topic.partitions:
        return None
    found = topic.partitions[0]
    return tuple(sorted(found.replicas)), tuple(sorted(found.isrs))


def live_brokers(servers: str) -> set[int]:
    """The brokers Metadata lists (registered and unfenced)."""
    return set(AdminClient({"bootstrap.servers": servers}).list_topics(timeout=5).brokers)


def produce(producer: Producer, acked: Acked, prefix: str, count: int) -> None:
    for i in range(count):
        producer.produce(TOPIC, value=f"{prefix}-{i}".encode(), partition=0, on_delivery=acked)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0


def read_all(servers: str, end: int) -> dict[bytes, int]:
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "check", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: dict[bytes, int] = {}
    last = -1
    deadline = time.monotonic() + DEADLINE_S
    try:
        while last < end - 1 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error() is not None:
                continue
            got[message.value()] = last = message.offset()
    finally:
        consumer.close()
    return got


@pytest.mark.usefixtures("kafka_tools")
def test_a_partition_moves_to_new_brokers_keeping_every_acknowledged_record(
    cluster: tuple[Processes, dict],  # noqa: F811
) -> None:
    procs, ports = cluster
    root = procs.root
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    topic = NewTopic(TOPIC, 1, replica_assignment=[[4, 5]], config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[TOPIC].result(DEADLINE_S)
    wait_until(lambda: replicas(servers) == ((4, 5), (4, 5)), "both replicas in sync", DEADLINE_S)
    acked = Acked()
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 5})
    produce(producer, acked, "before", 500)

    # kafka-python: a move to a stopped (fenced) broker stays in progress until cancelled.
    procs.signal(6, signal.SIGSTOP)
    live = bootstrap(ports, (4, 5))
    wait_until(lambda: 6 not in live_brokers(live), "broker 6 fenced", DEADLINE_S)
    python_admin = KafkaAdminClient(bootstrap_servers=live)
    tp = KafkaPythonPartition(TOPIC, 0)
    try:
        assert python_admin.alter_partition_reassignments({tp: [5, 6]}) == {tp: None}
        ongoing = python_admin.list_partition_reassignments()
        assert ongoing == {
            tp: {"replicas": [5, 6, 4], "adding_replicas": [6], "removing_replicas": [4]}
        }
        produce(producer, acked, "stalled", 100)  # the ISR is still {4, 5}: acks=all works
        assert python_admin.alter_partition_reassignments({tp: None}) == {tp: None}
        assert python_admin.list_partition_reassignments() == {}
        errors = python_admin.alter_partition_reassignments({tp: None})
        assert errors[tp].errno == ErrorCode.no_reassignment_in_progress
        errors = python_admin.alter_partition_reassignments({tp: [5, 9]})
        assert errors[tp].errno == ErrorCode.invalid_replica_assignment
    finally:
        procs.signal(6, signal.SIGCONT)
        python_admin.close()
    assert replicas(servers) == ((4, 5), (4, 5))
    wait_until(lambda: 6 in live_brokers(live), "broker 6 back", DEADLINE_S)

    # Kafka's kafka-reassign-partitions: generate a plan onto {5, 6}, execute, verify.
    moves = root / "topics-to-move.json"
    moves.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
    generated = tools.run(
        "reassign-partitions", "--bootstrap-server", servers, "--generate",
        "--topics-to-move-json-file", str(moves), "--broker-list", "5,6",
    ).stdout  # fmt: skip
    proposal = generated.split("Proposed partition reassignment configuration")[1].strip()
    plan = json.loads(proposal)
    assert [sorted(p["replicas"]) for p in plan["partitions"]] == [[5, 6]]
    plan_file = root / "plan.json"
    plan_file.write_text(json.dumps(plan))
    executed = tools.run(
        "reassign-partitions", "--bootstrap-server", servers, "--execute",
        "--reassignment-json-file", str(plan_file),
    ).stdout  # fmt: skip
    assert "Successfully started partition reassignment" in executed, executed
    produce(producer, acked, "during", 500)

    def verified() -> str | None:
        out = tools.run(
            "reassign-partitions", "--bootstrap-server", servers, "--verify",
            "--reassignment-json-file", str(plan_file),
        ).stdout  # fmt: skip
        return out if f"Reassignment of partition {TOPIC}-0 is completed" in out else None

    wait_until(verified, "kafka-reassign-partitions --verify says completed", DEADLINE_S)
    assert replicas(servers) == ((5, 6), (5, 6))
    produce(producer, acked, "after", 200)
    assert not acked.errors, acked.errors[:3]

    got = read_all(bootstrap(ports, (5, 6)), max(acked.records.values()) + 1)
    assert {v: o for v, o in got.items() if v in acked.records} == acked.records
    old_dir = root / "data4" / f"{TOPIC}-0"
    wait_until(lambda: not old_dir.exists(), "broker 4 deletes its replica", DEADLINE_S)
    assert (root / "data6" / f"{TOPIC}-0").is_dir()
