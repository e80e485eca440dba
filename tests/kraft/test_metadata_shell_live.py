"""``kraft-server metadata-shell --bootstrap-controller``: the image read from a running
3-controller + 1-broker cluster over the controller listener, and the one-line failures
when no controller answers."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kraft.procs import KRAFT_SERVER, Processes, free_port, port_open, wait_until

CONTROLLERS = (1, 2, 3)
BROKER = 4
BOOTSTRAP_SNAPSHOT = "00000000000000000000-0000000000.checkpoint"


@dataclass
class Cluster:
    procs: Processes
    controller_port: int
    bootstrap: str
    admin: AdminClient

    def leader(self) -> int:
        controllers = {i: (f"127.0.0.{i}", self.controller_port) for i in CONTROLLERS}
        status = wait_until(lambda: self.procs.quorum(controllers), "a controller leads")
        return status.leader_id

    def controller(self, node: int) -> str:
        return f"127.0.0.{node}:{self.controller_port}"

    def create(self, *topics: NewTopic) -> None:
        for future in self.admin.create_topics(list(topics)).values():
            future.result(30)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Controllers snapshot every few records, so the leader's log starts past 0 and the
    shell has to FetchSnapshot before it can Fetch."""
    root = tmp_path_factory.mktemp("live")
    controller_port, broker_port = free_port(), free_port()
    voters = ",".join(f"{i}@127.0.0.{i}:{controller_port}" for i in CONTROLLERS)
    nodes: dict[int, dict[str, str]] = {
        i: {
            "process.roles": "controller",
            "node.id": str(i),
            "controller.quorum.voters": voters,
            "listeners": f"CONTROLLER://127.0.0.{i}:{controller_port}",
            "controller.listener.names": "CONTROLLER",
            "metadata.log.max.record.bytes.between.snapshots": "2000",
        }
        for i in CONTROLLERS
    }
    nodes[BROKER] = {
        "process.roles": "broker",
        "node.id": str(BROKER),
        "controller.quorum.voters": voters,
        "listeners": f"PLAINTEXT://127.0.0.{BROKER}:{broker_port}",
        "controller.listener.names": "CONTROLLER",
    }
    procs = Processes(root, nodes)
    try:
        for node in nodes:
            procs.start(node)
        wait_until(lambda: port_open(f"127.0.0.{BROKER}", broker_port), "the broker serves")
        bootstrap = f"127.0.0.{BROKER}:{broker_port}"
        yield Cluster(
            procs, controller_port, bootstrap, AdminClient({"bootstrap.servers": bootstrap})
        )
    finally:
        procs.cleanup()


def shell(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KRAFT_SERVER, "metadata-shell", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_follower_and_a_dead_address_lead_the_shell_to_the_leaders_image(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.create(NewTopic("orders", 3, 1), NewTopic("audit", 1, 1))
    leader = cluster.leader()
    metadata = cluster.procs.root / f"data{leader}" / "__cluster_metadata-0"
    wait_until(
        lambda: any(p.name != BOOTSTRAP_SNAPSHOT for p in metadata.glob("*.checkpoint")),
        "the leader snapshots and moves its log start past 0",
    )
    follower = next(i for i in CONTROLLERS if i != leader)
    dead = f"127.0.0.1:{free_port()}"
    source = ("--bootstrap-controller", f"{dead},{cluster.controller(follower)}")
    done = shell(*source, "ls", "/image/topics/byName")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["audit", "orders"]
    # It went to the leader, and through its snapshot (the log there starts past 0).
    note = done.stderr.strip()
    assert note.startswith(f"note: read from controller {leader} at 127.0.0.{leader}:"), note
    assert ": snapshot " in note, note

    done = shell(
        *source,
        "cat",
        "/image/topics/byName/orders/partitions/2/replicas",
        "/image/topics/byName/orders/partitions/2/leader",
        f"/image/cluster/{BROKER}/fenced",
        "/image/topics/byName/orders/id",
    )
    assert done.returncode == 0, done.stderr
    replicas, partition_leader, fenced, topic_id = done.stdout.split()
    assert (replicas, partition_leader, fenced) == (f"({BROKER},)", str(BROKER), "False")

    # The same replay as the offline path: the leader's own directory names the same topic.
    offline = shell("--directory", str(metadata), "cat", f"/image/topics/byId/{topic_id}")
    assert offline.returncode == 0, offline.stderr
    assert offline.stdout.strip() == "orders"


def test_each_read_shows_what_the_quorum_has_committed_by_then(cluster: Cluster) -> None:
    before = shell("--bootstrap-controller", cluster.controller(1), "ls", "/image/topics/byName")
    assert before.returncode == 0, before.stderr
    assert "late" not in before.stdout.split()
    cluster.create(NewTopic("late", 2, 1))
    after = shell(
        "--bootstrap-controller",
        cluster.controller(2),
        "ls",
        "/image/topics/byName/late/partitions",
    )
    assert after.returncode == 0, after.stderr
    assert after.stdout.split() == ["0", "1"]


def test_a_tiny_fetch_limit_only_means_more_round_trips(cluster: Cluster) -> None:
    """With --fetch-max-bytes 64, below any batch's size, every Fetch answer is one whole
    batch and every FetchSnapshot answer 64 bytes: the same image, read piece by piece."""
    source = ("--bootstrap-controller", cluster.controller(3))
    whole = shell(*source, "find", "/image/topics")
    assert whole.returncode == 0, whole.stderr
    tiny = shell(*source, "--fetch-max-bytes", "64", "find", "/image/topics")
    assert tiny.returncode == 0, tiny.stderr
    assert tiny.stdout == whole.stdout
    assert "/image/topics/byName/orders/partitions/2/isr" in tiny.stdout.splitlines()


def test_a_broker_listener_is_refused_in_one_line(cluster: Cluster) -> None:
    done = shell("--bootstrap-controller", cluster.bootstrap, "ls")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"kraft-server metadata-shell: no controller answered: {cluster.bootstrap} closed the "
        "connection on Fetch (not a controller listener?)"
    ]


def test_no_controller_listening_is_one_line_and_exit_1() -> None:
    first, second = f"127.0.0.1:{free_port()}", f"127.0.0.2:{free_port('127.0.0.2')}"
    done = shell("--bootstrap-controller", f"{first},{second}", "ls", "/")
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line == (
        f"kraft-server metadata-shell: no controller answered: {first} unreachable "
        f"(Connection refused); {second} unreachable (Connection refused)"
    )


def test_a_controller_that_never_answers_is_bounded_by_the_timeout() -> None:
    """A listener that accepts and never answers: the read gives up at --timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()
        done = shell("--bootstrap-controller", f"127.0.0.1:{port}", "--timeout", "1", "ls")
        elapsed = time.monotonic() - started
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "kraft-server metadata-shell: no complete read within 1s (no answer yet)"
    ]
    assert elapsed < 30  # the process start-up, plus the 1 s, not the 30 s default


def test_bad_addresses_are_a_usage_error() -> None:
    done = shell("--bootstrap-controller", "nohost", "ls")
    assert done.returncode == 2
    assert done.stderr.strip() == "kraft-server metadata-shell: 'nohost' is not HOST:PORT"


def test_a_read_started_as_the_leader_dies_waits_for_the_next_leader(cluster: Cluster) -> None:
    """SIGKILL the leader and read at once with every controller's address: the dead one
    refuses, the others may know no leader yet (the election takes about an election
    timeout, the shell's start-up about as long), and the shell keeps asking (within
    --timeout) until a new leader answers. Runs last: the cluster keeps two controllers."""
    old = cluster.leader()
    cluster.procs.kill(old)
    every = ",".join(cluster.controller(i) for i in CONTROLLERS)
    done = shell("--bootstrap-controller", every, "--timeout", "60", "ls", "/image/topics/byName")
    assert done.returncode == 0, done.stderr
    assert {"audit", "orders", "late"} <= set(done.stdout.split())
    note = done.stderr.strip()
    assert note.startswith("note: read from controller "), note
    assert not note.startswith(f"note: read from controller {old} "), note
