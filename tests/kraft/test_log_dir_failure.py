"""One failed log dir of a broker with two (KIP-858, JBOD in KRaft), between real processes:
the shipped 3+3 layout, broker 4 with ``log.dirs`` = two dirs, a topic whose every partition
broker 4 leads. Its second dir is made to fail under it (moved away and replaced by a plain
file, so the next write there fails with ENOTDIR, as a dead disk's mount point would). Then:
- broker 4 keeps running, registered and unfenced, and keeps leading the partitions of its
  healthy dir;
- the controller moves the failed dir's leaderships to the other replicas and takes broker 4
  out of their ISRs;
- acks=all producers to every partition succeed, and Kafka's ``kafka-log-dirs --describe``
  shows the failed dir with KAFKA_STORAGE_ERROR;
- with the dir repaired and broker 4 restarted, its replicas there rejoin the ISRs and a
  preferred election (Kafka's ``kafka-leader-election``) gives it every leadership back.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import Processes, port_open, wait_until
from tests.kraft.test_replication import BROKERS, bootstrap, cluster_nodes

TOPIC = "jbod"
PARTITIONS = 6
DEADLINE_S = 60.0


@pytest.fixture
def jbod_cluster(tmp_path: Path) -> Iterator[tuple[Processes, str, Path, Path]]:
    """The 3+3 cluster with broker 4 on two log dirs; (processes, bootstrap, dir 1, dir 2)."""
    nodes, ports = cluster_nodes(tmp_path)
    first, second = tmp_path / "data4", tmp_path / "data4-b"
    nodes[4]["log.dirs"] = f"{first},{second}"
    procs = Processes(tmp_path, nodes)
    try:
        for node in nodes:
            procs.start(node)
        for node in BROKERS:
            wait_until(lambda n=node: port_open(*ports[n]), f"broker {node} serves", DEADLINE_S)
        yield procs, bootstrap(ports), first, second
    finally:
        procs.cleanup()


def partitions(servers: str) -> dict[int, tuple[int, tuple[int, ...]]] | None:
    """partition -> (leader, sorted ISR) as Metadata reports them; None while incomplete."""
    try:
        metadata = AdminClient({"bootstrap.servers": servers}).list_topics(TOPIC, timeout=5)
    except KafkaException:
        return None
    topic = metadata.topics.get(TOPIC)
    if topic is None or topic.error is not None or len(topic.partitions) != PARTITIONS:
        return None
    return {i: (p.leader, tuple(sorted(p.isrs))) for i, p in topic.partitions.items()}


def registered_brokers(servers: str) -> set[int]:
    return set(AdminClient({"bootstrap.servers": servers}).list_topics(timeout=5).brokers)


def log_dirs_of_broker_4(servers: str) -> dict[str, tuple[str | None, set[int]]]:
    """log dir -> (its error, the partitions of the topic in it), from Kafka's own
    ``kafka-log-dirs --describe``."""
    out = tools.run("log-dirs", "--bootstrap-server", servers, "--describe", "--broker-list", "4")
    (broker,) = json.loads(out.stdout.strip().splitlines()[-1])["brokers"]
    return {
        item["logDir"]: (
            item["error"],
            {
                int(p["partition"].rsplit("-", 1)[1])
                for p in item["partitions"]
                if p["partition"].rsplit("-", 1)[0] == TOPIC
            },
        )
        for item in broker["logDirs"]
    }


def produce_to_every_partition(servers: str) -> dict[int, str | None]:
    """partition -> the delivery error of one acks=all record sent to it (None: acknowledged)."""
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "message.timeout.ms": 30_000})
    outcome: dict[int, str | None] = {}

    def delivered(error: object, message: object) -> None:
        outcome[message.partition()] = None if error is None else str(error)  # type: ignore[attr-defined]

    for index in range(PARTITIONS):
        producer.produce(
            TOPIC, value=f"to {index}".encode(), partition=index, on_delivery=delivered
        )
    assert producer.flush(60) == 0, "records still unacknowledged after 60 s"
    return outcome


def test_a_failed_log_dir_moves_its_leaders_and_the_broker_serves_the_other(
    jbod_cluster: tuple[Processes, str, Path, Path],
    kafka_tools: Path,  # noqa: F811
) -> None:
    procs, servers, first, second = jbod_cluster
    # Broker 4 is every partition's preferred leader, so it leads all of them.
    assignment = [[4, 5, 6] if i % 2 == 0 else [4, 6, 5] for i in range(PARTITIONS)]
    admin = AdminClient({"bootstrap.servers": servers})
    (future,) = admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, replica_assignment=assignment)]
    ).values()
    future.result(30)
    wait_until(
        lambda: (
            (state := partitions(servers)) is not None
            and all(state[i] == (4, (4, 5, 6)) for i in range(PARTITIONS))
        ),
        "broker 4 leads every partition with a full ISR",
        DEADLINE_S,
    )
    assert produce_to_every_partition(servers) == dict.fromkeys(range(PARTITIONS))
    placed = log_dirs_of_broker_4(servers)
    assert placed[str(first)][0] is None and placed[str(second)][0] is None
    in_first, in_second = placed[str(first)][1], placed[str(second)][1]
    # New logs go to the dir with the fewest: both dirs hold some of them.
    assert in_first and in_second and in_first | in_second == set(range(PARTITIONS))

    second.rename(second.with_name("data4-b.failed"))
    second.write_text("not a directory: the disk under this mount point is gone\n")

    def moved() -> dict[int, tuple[int, tuple[int, ...]]] | None:
        state = partitions(servers)
        if state is None:
            return None
        healthy = all(state[i] == (4, (4, 5, 6)) for i in in_first)
        away = all(state[i][0] in (5, 6) and 4 not in state[i][1] for i in in_second)
        return state if healthy and away else None

    after = wait_until(moved, "the failed dir's leaders move, the healthy dir's stay", DEADLINE_S)
    assert after is not None
    for index in in_second:  # the next replica in the ISR took over, broker 4 left the ISR
        assert after[index] == (assignment[index][1], (5, 6)), (index, after[index])
    assert procs.alive(4), "broker 4 stopped although one of its dirs is healthy"
    assert 4 in registered_brokers(servers), "broker 4 was fenced"
    log = procs.log(4)
    assert f"Log dir {second} is offline after a disk error" in log
    controller_logs = "".join(procs.log(c) for c in (1, 2, 3))
    assert "marked offline, remaining directories" in controller_logs

    # Every partition takes acks=all writes: broker 4 for its healthy dir, 5 and 6 for the rest.
    assert produce_to_every_partition(servers) == dict.fromkeys(range(PARTITIONS))

    # Kafka's own tool sees the failed dir as such and the healthy one with its partitions.
    placed = log_dirs_of_broker_4(servers)
    assert "KafkaStorageException" in str(placed[str(second)][0])
    assert placed[str(second)][1] == set()
    assert placed[str(first)] == (None, in_first)

    # The disk is repaired (the dir is back where it was) and broker 4 restarted: it registers
    # the dir again, its replicas there recover, catch up, rejoin the ISRs, and may lead again.
    procs.signal(4, signal.SIGTERM)
    assert procs.procs[4].wait(timeout=DEADLINE_S) == 0
    second.unlink()
    second.with_name("data4-b.failed").rename(second)
    procs.start(4)
    wait_until(
        lambda: (
            (state := partitions(servers)) is not None
            and all(state[i][1] == (4, 5, 6) for i in range(PARTITIONS))
        ),
        "broker 4's replicas in the repaired dir rejoin their ISRs",
        DEADLINE_S,
    )
    tools.run(
        "org.apache.kafka.tools.LeaderElectionCommand",
        "--bootstrap-server",
        servers,
        "--election-type",
        "PREFERRED",
        "--all-topic-partitions",
    )
    wait_until(
        lambda: (
            (state := partitions(servers)) is not None
            and all(state[i] == (4, (4, 5, 6)) for i in range(PARTITIONS))
        ),
        "broker 4 leads every partition again after a preferred election",
        DEADLINE_S,
    )
    assert produce_to_every_partition(servers) == dict.fromkeys(range(PARTITIONS))
