"""A dynamic controller quorum (KIP-853) with real kraft-server processes on 127.0.0.1-4:
one controller formatted --standalone grows to three with `kraft-server add-controller`,
the leader is removed (it steps down and a remaining voter leads), a fourth is added, and
a controller whose disk is wiped is replaced by its re-formatted self (a new directory
id); the committed log stays identical on every voter. Apache Kafka's own
kafka-metadata-quorum grows and shrinks a quorum the same way, and replaces a wiped active
controller while brokers stay registered; Kafka's kafka-features upgrades a static quorum
to kraft.version 1."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from kraft.quorum_tool import QuorumStatus
from kraft.storage import metadata_directory_id, print_uuid
from log.batch import decode_batch, iter_batches
from log.fs import RealFileSystem
from log.runtime import real_runtime
from metadata.records import (
    BrokerRegistrationChange,
    FenceBroker,
    MetadataRecord,
    RegisterBroker,
    decode_record,
)
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from raft.disk_log import DiskLog
from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)

from .procs import KRAFT_SERVER, Processes, free_port, wait_until
from .test_controller_quorum import committed_records

NODES = (1, 2, 3, 4)


class DynamicQuorum(Processes):
    """Controller-only nodes sharing one port on 127.0.0.1-4, bootstrapped from node 1."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, {})
        self.port = free_port()
        self.cluster_id = subprocess.run(
            [KRAFT_SERVER, "random-uuid"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for node in NODES:
            props = {
                "process.roles": "controller",
                "node.id": str(node),
                "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.port}",
                "listeners": f"CONTROLLER://127.0.0.{node}:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(root / f"data{node}"),
            }
            self.nodes[node] = props
            self.config(node).write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def make_static(self, voters: tuple[int, ...]) -> None:
        """``voters`` become a static quorum (controller.quorum.voters, kraft.version 0 once
        formatted without a quorum flag); the other nodes keep the bootstrap servers."""
        quorum = ",".join(f"{n}@127.0.0.{n}:{self.port}" for n in voters)
        bootstrap = ",".join(f"127.0.0.{n}:{self.port}" for n in voters)
        for node, props in self.nodes.items():
            if node in voters:
                del props["controller.quorum.bootstrap.servers"]
                props["controller.quorum.voters"] = quorum
            else:
                props["controller.quorum.bootstrap.servers"] = bootstrap
            self.config(node).write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def format(self, node: int, *flags: str) -> None:
        subprocess.run(
            [KRAFT_SERVER, "format", "-t", self.cluster_id, "-c", str(self.config(node)), *flags],
            capture_output=True,
            text=True,
            check=True,
        )

    def directory_id(self, node: int) -> str:
        found = metadata_directory_id(RealFileSystem(), str(self.root / f"data{node}"))
        assert found is not None
        return print_uuid(found)

    def tool(self, *argv: str) -> subprocess.CompletedProcess[str]:
        bootstrap = ",".join(f"127.0.0.{n}:{self.port}" for n in NODES)
        return subprocess.run(
            [KRAFT_SERVER, *argv, "--bootstrap-controller", bootstrap],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def add(self, node: int) -> None:
        """add-controller, retried while the leader says the node has not caught up."""

        def added() -> bool:
            return self.tool("add-controller", "--config", str(self.config(node))).returncode == 0

        wait_until(added, f"controller {node} added")

    def wait_for(self, condition: Callable[[QuorumStatus], bool]) -> QuorumStatus:
        controllers = {n: (f"127.0.0.{n}", self.port) for n in NODES}

        def met() -> QuorumStatus | None:
            status = self.quorum(controllers)
            return status if status is not None and condition(status) else None

        return wait_until(met, "quorum condition", deadline_s=60)


def voters(status: QuorumStatus) -> set[int]:
    return {v.replica_id for v in status.voters}


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[DynamicQuorum]:
    processes = DynamicQuorum(tmp_path)
    yield processes
    processes.cleanup()


def test_a_standalone_controller_grows_to_three_loses_its_leader_and_replaces_a_disk(
    quorum: DynamicQuorum,
) -> None:
    quorum.format(1, "--standalone")
    for node in (2, 3, 4):
        quorum.format(node, "--no-initial-controllers")
    for node in NODES:
        quorum.start(node)
    first = quorum.wait_for(lambda s: s.leader_id == 1 and len(s.observers) == 3)
    assert voters(first) == {1}

    quorum.add(2)
    quorum.add(3)
    grown = quorum.wait_for(lambda s: voters(s) == {1, 2, 3})
    assert grown.leader_id == 1

    # Remove the leader: it steps down once its removal commits; 2 or 3 leads on.
    removal = quorum.tool(
        "remove-controller",
        "--controller-id",
        "1",
        "--controller-directory-id",
        quorum.directory_id(1),
    )
    assert removal.returncode == 0, removal.stderr
    shrunk = quorum.wait_for(
        lambda s: voters(s) == {2, 3} and s.leader_id in (2, 3) and s.high_watermark > 0
    )
    assert shrunk.leader_epoch > grown.leader_epoch
    quorum.add(4)
    quorum.wait_for(lambda s: voters(s) == {2, 3, 4})

    # Wipe node 3's disk: re-formatted, it is a new replica (new directory id) that cannot
    # vote as the old one. Remove the old replica, add the new one.
    old_directory = quorum.directory_id(3)
    quorum.kill(3)
    shutil.rmtree(quorum.root / "data3")
    quorum.format(3, "--no-initial-controllers")
    assert quorum.directory_id(3) != old_directory
    quorum.start(3)
    removed = quorum.tool(
        "remove-controller", "--controller-id", "3", "--controller-directory-id", old_directory
    )
    assert removed.returncode == 0, removed.stderr
    quorum.wait_for(lambda s: voters(s) == {2, 4})
    quorum.add(3)
    final = quorum.wait_for(lambda s: voters(s) == {2, 3, 4} and s.high_watermark > 0)
    settled = quorum.wait_for(
        lambda s: (
            voters(s) == {2, 3, 4}
            and s.high_watermark > final.high_watermark
            and all(v.log_end_offset >= final.high_watermark for v in s.voters)
        )
    )
    assert quorum.stop_all() == {1: 0, 2: 0, 3: 0, 4: 0}
    logs = {n: committed_records(quorum.root / f"data{n}", final.high_watermark) for n in (2, 3, 4)}
    assert len(logs[2]) == final.high_watermark
    assert logs[2] == logs[3] == logs[4]
    assert settled.leader_id in (2, 3, 4)


METADATA_QUORUM = "org.apache.kafka.tools.MetadataQuorumCommand"  # kafka-metadata-quorum


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_metadata_quorum_grows_a_standalone_controller_and_removes_its_leader(
    quorum: DynamicQuorum,
) -> None:
    """Apache Kafka's own kafka-metadata-quorum (4.1, from Maven Central) against kraft-py:
    add-controller twice, describe, remove-controller of the leader."""
    bootstrap = ("--bootstrap-controller", f"127.0.0.1:{quorum.port}")
    quorum.format(1, "--standalone")
    for node in (2, 3):
        quorum.format(node, "--no-initial-controllers")
    for node in (1, 2, 3):
        quorum.start(node)
    quorum.wait_for(lambda s: s.leader_id == 1 and len(s.observers) == 2)
    for node in (2, 3):

        def added(node: int = node) -> bool:
            config = ("--command-config", str(quorum.config(node)))
            result = tools.run(METADATA_QUORUM, *bootstrap, *config, "add-controller", check=False)
            return result.returncode == 0 and f"Added controller {node}" in result.stdout

        wait_until(added, f"kafka-metadata-quorum add-controller {node}")
    status = tools.run(METADATA_QUORUM, *bootstrap, "describe", "--status").stdout
    # DescribeQuorum v2: Kafka's tool prints each voter's directory id and endpoints.
    listed = next(line for line in status.splitlines() if line.startswith("CurrentVoters:"))
    assert json.loads(listed.split(":", 1)[1]) == [
        {
            "id": node,
            "directoryId": quorum.directory_id(node),
            "endpoints": [f"CONTROLLER://127.0.0.{node}:{quorum.port}"],
        }
        for node in (1, 2, 3)
    ], status
    removed = tools.run(
        METADATA_QUORUM,
        *bootstrap,
        "remove-controller",
        "--controller-id",
        "1",
        "--controller-directory-id",
        quorum.directory_id(1),
    )
    assert "Removed  KRaft controller 1" in removed.stdout, removed.stdout
    # The removed leader stepped down and fetches on as an observer.
    quorum.wait_for(
        lambda s: (
            voters(s) == {2, 3}
            and s.leader_id in (2, 3)
            and {o.replica_id for o in s.observers} == {1}
        )
    )


FEATURES = "org.apache.kafka.tools.FeatureCommand"  # kafka-features


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_features_upgrades_a_static_quorum_to_kraft_version_1(
    quorum: DynamicQuorum,
) -> None:
    """A quorum of controller.quorum.voters (kraft.version 0) refuses voter changes until
    Apache Kafka's kafka-features upgrades kraft.version to 1 (UpdateFeatures to the active
    controller, which has the quorum append KRaftVersionRecord + VotersRecord); then a
    fourth controller is added, and a downgrade is refused."""
    quorum.make_static((1, 2, 3))
    for node in (1, 2, 3):
        quorum.format(node)
    quorum.format(4, "--no-initial-controllers")
    for node in NODES:
        quorum.start(node)
    before = quorum.wait_for(lambda s: voters(s) == {1, 2, 3} and len(s.observers) == 1)
    refused = quorum.tool("add-controller", "--config", str(quorum.config(4)))
    # The leader's answer: UNSUPPORTED_VERSION (35); the others are not the leader (6).
    assert refused.returncode != 0 and "error 35" in refused.stderr, refused.stderr
    controllers = ",".join(f"127.0.0.{n}:{quorum.port}" for n in (1, 2, 3))
    bootstrap = ("--bootstrap-controller", controllers)
    upgrade = ("upgrade", "--feature", "kraft.version=1")
    upgraded = tools.run(FEATURES, *bootstrap, *upgrade)
    assert "kraft.version was upgraded to 1" in upgraded.stdout, upgraded.stdout
    downgrade = ("downgrade", "--feature", "kraft.version=0")
    down = tools.run(FEATURES, *bootstrap, *downgrade, check=False)
    assert down.returncode != 0, down.stdout
    assert "Can't downgrade the version of this feature" in down.stdout, down.stdout
    quorum.add(4)
    grown = quorum.wait_for(lambda s: voters(s) == {1, 2, 3, 4} and s.high_watermark > 0)
    assert grown.leader_epoch >= before.leader_epoch
    # Every controller's log holds the same records, the upgrade's included.
    settled = quorum.wait_for(
        lambda s: all(v.log_end_offset >= grown.high_watermark for v in s.voters)
    )
    assert quorum.stop_all() == {1: 0, 2: 0, 3: 0, 4: 0}
    logs = {n: committed_records(quorum.root / f"data{n}", grown.high_watermark) for n in NODES}
    assert len(logs[1]) == grown.high_watermark
    assert logs[1] == logs[2] == logs[3] == logs[4]
    assert settled.leader_id in NODES


def metadata_records(data_dir: Path, high_watermark: int) -> list[tuple[int, MetadataRecord]]:
    """(offset, record) of every metadata record (control batches skipped) below
    ``high_watermark`` in a stopped node's log."""

    async def read() -> list[tuple[int, MetadataRecord]]:
        log = await DiskLog.open(real_runtime(), str(data_dir / "__cluster_metadata-0"))
        data = log.read(0, 1 << 30)
        await log.close()
        out = []
        for position, _ in iter_batches(data):
            header, records = decode_batch(data, position)
            if header.is_control:
                continue
            for record in records:
                offset = header.base_offset + (record.offset_delta or 0)
                if offset < high_watermark:
                    out.append((offset, decode_record(record.value or b"", offset)))
        return out

    return asyncio.run(read())


def unfenced_brokers(bootstrap: str) -> set[int]:
    """The brokers a client's Metadata lists (only registered, unfenced ones)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        return set(admin.list_topics(timeout=10).brokers)
    except KafkaException:
        return set()


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_metadata_quorum_replaces_a_controller_whose_disk_was_wiped(
    quorum: DynamicQuorum,
) -> None:
    """Three controllers grown from a standalone one with Kafka's kafka-metadata-quorum,
    a broker registered. The active controller's disk is wiped and re-formatted
    (--no-initial-controllers: a new directory id); the other two elect a leader,
    remove-controller takes the old (id, directory id) out and add-controller puts the new
    replica in. Throughout, the broker stays registered and is never fenced (it loses its
    controller for one election, well within its session timeout), and afterwards every
    controller's metadata log holds the same records, each broker epoch the offset of its
    registration."""
    brokers = (5, 6)
    broker_port = free_port()
    controllers = ",".join(f"127.0.0.{n}:{quorum.port}" for n in (1, 2, 3))
    for node in (1, 2, 3):  # a re-formatted controller must find a leader other than itself
        quorum.nodes[node]["controller.quorum.bootstrap.servers"] = controllers
        text = "".join(f"{k}={v}\n" for k, v in quorum.nodes[node].items())
        quorum.config(node).write_text(text)
    for broker in brokers:
        props = {
            "process.roles": "broker",
            "node.id": str(broker),
            "controller.quorum.bootstrap.servers": controllers,
            "listeners": f"PLAINTEXT://127.0.0.{broker}:{broker_port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(quorum.root / f"data{broker}"),
        }
        quorum.nodes[broker] = props
        quorum.config(broker).write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        quorum.format(broker)
    quorum.format(1, "--standalone")
    for node in (2, 3):
        quorum.format(node, "--no-initial-controllers")
    for node in (1, 2, 3):
        quorum.start(node)
    quorum.wait_for(lambda s: s.leader_id == 1 and len(s.observers) == 2)

    def add_controller(node: int) -> None:
        def added() -> bool:
            config = ("--command-config", str(quorum.config(node)))
            anyone = ("--bootstrap-controller", controllers)
            result = tools.run(METADATA_QUORUM, *anyone, *config, "add-controller", check=False)
            return result.returncode == 0 and f"Added controller {node}" in result.stdout

        wait_until(added, f"kafka-metadata-quorum add-controller {node}", deadline_s=60)

    add_controller(2)
    add_controller(3)
    grown = quorum.wait_for(lambda s: voters(s) == {1, 2, 3})
    quorum.start(5)
    clients = ",".join(f"127.0.0.{b}:{broker_port}" for b in brokers)
    wait_until(lambda: unfenced_brokers(clients) == {5}, "broker 5 registered", deadline_s=60)

    wiped = grown.leader_id
    others = {1, 2, 3} - {wiped}
    old_directory = quorum.directory_id(wiped)
    quorum.kill(wiped)
    shutil.rmtree(quorum.root / f"data{wiped}")
    quorum.format(wiped, "--no-initial-controllers")
    assert quorum.directory_id(wiped) != old_directory
    quorum.start(wiped)
    elected = quorum.wait_for(lambda s: s.leader_id in others)
    assert elected.leader_epoch > grown.leader_epoch
    survivor = ("--bootstrap-controller", f"127.0.0.{min(others)}:{quorum.port}")

    def remove_old() -> bool:
        removed = tools.run(
            METADATA_QUORUM,
            *survivor,
            "remove-controller",
            "--controller-id",
            str(wiped),
            "--controller-directory-id",
            old_directory,
            check=False,
        )
        return f"Removed  KRaft controller {wiped}" in removed.stdout

    # Retried like add-controller: the new leader refuses changes (REQUEST_TIMED_OUT)
    # until it has committed an entry of its own epoch.
    wait_until(remove_old, f"kafka-metadata-quorum remove-controller {wiped}", deadline_s=60)
    quorum.wait_for(lambda s: voters(s) == others)
    assert unfenced_brokers(clients) == {5}
    add_controller(wiped)
    replaced = quorum.wait_for(lambda s: voters(s) == {1, 2, 3} and s.high_watermark > 0)
    # A broker registering after the changes gets the offset of its record as its epoch,
    # though the quorum's own VotersRecords took offsets the controller did not propose.
    quorum.start(6)
    wait_until(lambda: unfenced_brokers(clients) == {5, 6}, "broker 6 registered", deadline_s=60)
    admin = AdminClient({"bootstrap.servers": clients, "log_level": 0})
    created = admin.create_topics([NewTopic("after-replace", 2, 2)], operation_timeout=30)
    created["after-replace"].result(timeout=60)

    def topic_seen() -> bool:
        view = admin.list_topics(timeout=10)
        return "after-replace" in view.topics and set(view.brokers) == {5, 6}

    wait_until(topic_seen, "the new topic reaches the brokers")
    # kafka-features describe reads kraft.version from a broker's ApiVersions.
    described = tools.run(FEATURES, "--bootstrap-server", clients, "describe").stdout
    assert re.search(
        r"Feature: kraft.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 1\t"
        r"FinalizedVersionLevel: 1\t",
        described,
    ), described

    settled = quorum.wait_for(
        lambda s: (
            voters(s) == {1, 2, 3}
            and s.high_watermark > replaced.high_watermark
            and all(v.log_end_offset >= s.high_watermark for v in s.voters)
        )
    )
    for broker in brokers:
        quorum.signal(broker, signal.SIGTERM)
        assert quorum.procs[broker].wait(timeout=30) == 0
    assert quorum.stop_all() == {1: 0, 2: 0, 3: 0, 5: 0, 6: 0}
    high_watermark = settled.high_watermark
    logs = {n: committed_records(quorum.root / f"data{n}", high_watermark) for n in (1, 2, 3)}
    assert len(logs[1]) == high_watermark
    assert logs[1] == logs[2] == logs[3]
    records = metadata_records(quorum.root / "data1", high_watermark)
    registrations = [(o, r) for o, r in records if isinstance(r, RegisterBroker)]
    assert sorted(r.broker_id for _, r in registrations) == [5, 6]  # each registered once
    assert all(r.broker_epoch == offset for offset, r in registrations)
    fenced = [
        r
        for _, r in records
        if isinstance(r, FenceBroker)
        or (isinstance(r, BrokerRegistrationChange) and r.fenced is True)
    ]
    assert fenced == []  # never fenced (the clean shutdown at the end is not a fence)
    # The wiped controller caught up on everything, its own replacement included.
    assert logs[wiped][-1][0] == high_watermark - 1


async def _ask(host: str, port: int, api_key: int, version: int) -> Any:
    """One request of ``api_key`` (its empty form; DescribeQuorum for the metadata
    partition) and its decoded answer."""
    module: Any = request_module(api_key, version)
    if api_key == ApiKey.DESCRIBE_QUORUM:
        partition = make(module.PartitionData, {"partition_index": 0})
        topic = make(
            module.TopicData, {"topic_name": "__cluster_metadata", "partitions": (partition,)}
        )
        body = make(module.DescribeQuorumRequest, {"topics": (topic,)})
    else:
        body = make(
            module.ApiVersionsRequest,
            {"client_software_name": "t", "client_software_version": "1"},
        )
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
    try:
        writer.write(wire.encode_request(wire.RequestHeader(api_key, version, 5, "t"), body))
        frame = await asyncio.wait_for(wire.read_frame(reader), 10)
    finally:
        writer.close()
    return wire.decode_response(api_key, version, frame)[1]


def test_the_controller_listener_reports_directory_ids_endpoints_and_kraft_version(
    quorum: DynamicQuorum,
) -> None:
    """KIP-853 on the controller listener: DescribeQuorum v2 names each replica's directory
    id and each voter's listeners (``nodes``); ApiVersions v3+ reports kraft.version,
    supported 0-1 and finalized at 1, as Kafka's controller does."""
    quorum.format(1, "--standalone")
    quorum.format(2, "--no-initial-controllers")
    quorum.start(1)
    quorum.start(2)
    quorum.wait_for(lambda s: s.leader_id == 1 and len(s.observers) == 1)
    answer = asyncio.run(_ask("127.0.0.1", quorum.port, ApiKey.DESCRIBE_QUORUM, 2))
    (partition,) = answer.topics[0].partitions
    assert [
        (int(r.replica_id), print_uuid(r.replica_directory_id)) for r in partition.current_voters
    ] == [(1, quorum.directory_id(1))]
    assert [
        (int(r.replica_id), print_uuid(r.replica_directory_id)) for r in partition.observers
    ] == [(2, quorum.directory_id(2))]
    assert [
        (int(n.node_id), [(x.name, x.host, int(x.port)) for x in n.listeners]) for n in answer.nodes
    ] == [(1, [("CONTROLLER", "127.0.0.1", quorum.port)])]
    versions = asyncio.run(_ask("127.0.0.1", quorum.port, ApiKey.API_VERSIONS, 3))
    supported = {
        f.name: (int(f.min_version), int(f.max_version)) for f in versions.supported_features
    }
    finalized = {f.name: int(f.max_version_level) for f in versions.finalized_features}
    assert supported["kraft.version"] == (0, 1)
    assert finalized["kraft.version"] == 1
