"""KIP-966 between real processes: the shipped 3-controller + 3-broker layout, a topic with
replication factor 3 and min.insync.replicas=2, unclean.leader.election.enable off.

Two followers stop (cleanly: SIGTERM), the second one while the ISR is already at min ISR,
so it stays eligible (ELR). The leader, the last ISR member, is then SIGKILLed: the
partition has no ISR and no leader. The eligible follower restarts first and leads, a clean
election (its ELR place says it holds every committed record), and every record acknowledged
with acks=all is read back from it at its offset. Kafka's own ``kafka-topics --describe``
(DescribeTopicPartitions) shows the ELR at each step. And ``kafka-features`` (Java) shows
``eligible.leader.replicas.version`` at 1 on a new cluster and turns it off.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import Processes, port_open, single_node, wait_until
from tests.kraft.test_replication import (  # its cluster fixture: one per module
    BROKERS,
    DEADLINE_S,
    TOPIC,
    Acked,
    bootstrap,
    cluster,  # noqa: F401
    produce,
    read_all,
    wait_isr,
)

DESCRIBED = re.compile(
    r"Partition: 0\tLeader: (\S+)\tReplicas: \S+\tIsr: ([\d,]*)\tElr: ([\d,]*|N/A)"
    r"\tLastKnownElr: ([\d,]*|N/A)"
)


def ids(text: str) -> tuple[int, ...]:
    return tuple(sorted(int(b) for b in text.split(",") if b and b != "N/A"))


def described(servers: str) -> tuple[str, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(leader, ISR, ELR, last known ELR) of partition 0 as kafka-topics --describe prints it."""
    out = tools.run("topics", "--bootstrap-server", servers, "--describe", "--topic", TOPIC)
    found = DESCRIBED.search(out.stdout)
    assert found is not None, out.stdout
    leader, isr, elr, last_known = found.groups()
    return leader, ids(isr), ids(elr), ids(last_known)


def stop_cleanly(procs: Processes, node: int) -> None:
    """SIGTERM: controlled shutdown, logs flushed, the clean shutdown marker written."""
    procs.signal(node, signal.SIGTERM)
    assert procs.procs[node].wait(timeout=DEADLINE_S) == 0, procs.log(node)


@pytest.mark.usefixtures("kafka_tools")
def test_an_eligible_replica_leads_after_the_last_isr_member_dies_losing_nothing(
    cluster: tuple[Processes, dict],  # noqa: F811  (the imported fixture)
) -> None:
    procs, ports = cluster
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    topic = NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])[TOPIC].result(DEADLINE_S)
    leader = wait_isr(servers, BROKERS, "all three replicas in sync")
    first, second = (b for b in BROKERS if b != leader)

    acked = Acked()
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "enable.idempotence": True})
    produce(producer, acked, "committed", 200)
    assert acked.errors == [] and len(acked.records) == 200

    # The first follower leaves an ISR of three: two remain, min ISR holds, no ELR.
    stop_cleanly(procs, first)
    pair = tuple(sorted((leader, second)))
    wait_isr(bootstrap(ports, pair), pair, "the ISR drops the first follower")
    assert described(bootstrap(ports, pair))[1:3] == (pair, ())
    # The second leaves an ISR at min ISR: it holds every committed record, so it stays
    # eligible; acks=all is refused from here on.
    stop_cleanly(procs, second)
    alone = bootstrap(ports, (leader,))
    wait_isr(alone, (leader,), "the ISR is the leader alone")
    assert described(alone) == (str(leader), (leader,), (second,), ())
    refused = Acked()
    strict = Producer(
        {"bootstrap.servers": alone, "acks": "all", "retries": 0, "message.timeout.ms": 10_000}
    )
    strict.produce(TOPIC, value=b"refused", partition=0, on_delivery=refused)
    strict.flush(DEADLINE_S)
    assert [e.code() for e in refused.errors] == [KafkaError.NOT_ENOUGH_REPLICAS]

    # The last ISR member dies; the eligible follower comes back first and leads, cleanly.
    procs.kill(leader)
    procs.start(second)
    survivor = bootstrap(ports, (second,))
    wait_until(lambda: port_open(*ports[second]), f"broker {second} serves again", DEADLINE_S)
    wait_isr(survivor, (second,), "the eligible replica leads")
    # An unclean election would have emptied the ELR: the dead leader is still eligible.
    assert described(survivor) == (str(second), (second,), (leader,), ())
    end = max(acked.records.values()) + 1
    got = read_all(survivor, end)
    assert {value: offset for offset, value in got} == acked.records


FEATURE = "org.apache.kafka.tools.FeatureCommand"  # kafka-features


def finalized_elr(servers: str) -> str:
    out = tools.run(FEATURE, "--bootstrap-server", servers, "describe").stdout
    found = re.search(
        r"Feature: eligible.leader.replicas.version\t.*FinalizedVersionLevel: (\d+)", out
    )
    assert found is not None, out
    return found.group(1)


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_features_shows_elr_on_for_a_new_cluster_and_turns_it_off(tmp_path: Path) -> None:
    procs, servers = single_node(tmp_path)
    try:
        assert finalized_elr(servers) == "1"  # Kafka 4.1's default for a new cluster
        feature = "eligible.leader.replicas.version=0"
        refused = tools.run(
            FEATURE, "--bootstrap-server", servers, "upgrade", "--feature", feature, check=False
        )
        assert refused.returncode != 0  # a lower level is a downgrade
        tools.run(FEATURE, "--bootstrap-server", servers, "downgrade", "--feature", feature)
        assert finalized_elr(servers) == "0"
    finally:
        procs.cleanup()
