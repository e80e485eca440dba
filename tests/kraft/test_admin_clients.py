"""Real Kafka admin clients against real kraft-server processes.

kafka-python's KafkaAdminClient, confluent-kafka's AdminClient (librdkafka) and kcat drive a
single-node combined server (the README's default) and a 3-controller + 3-broker cluster on
127.0.0.1-6: topics are created, listed, described, reconfigured, grown and deleted; wrong
input gets Kafka's error code and message; and SIGKILL of the active controller during a
stream of CreateTopics loses no acknowledged topic while clients carry on by retrying.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import NewPartitions as CNewPartitions
from confluent_kafka.admin import NewTopic as CNewTopic
from kafka.admin import ConfigResource as KConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient, NewPartitions, NewTopic
from kafka.errors import (
    InvalidConfigurationError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from broker.client import KafkaConnection
from tests.kraft.procs import Processes, free_port, port_open, single_node, wait_until

KCAT = shutil.which("kcat") or "kcat"  # scripts/test.sh installs it


# ---------------------------------------------------------------- single combined node


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, str]]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("single"))
    try:
        yield procs, bootstrap
    finally:
        procs.cleanup()


def test_kafka_python_manages_topics(single: tuple[Processes, str]) -> None:
    _, bootstrap = single
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic("orders", 3, 1, topic_configs={"retention.ms": "60000"})])
        assert "orders" in admin.list_topics()
        (described,) = admin.describe_topics(["orders"])
        assert described["error_code"] == 0
        partitions = sorted(described["partitions"], key=lambda p: p["partition_index"])
        assert [p["partition_index"] for p in partitions] == [0, 1, 2]
        assert all(p["leader_id"] == 1 and p["isr_nodes"] == [1] for p in partitions)
        cluster = admin.describe_cluster()
        assert [b["broker_id"] for b in cluster["brokers"]] == [1]

        resource = KConfigResource(ConfigResourceType.TOPIC, "orders")
        configs = _kafka_python_configs(admin, resource)
        assert configs["retention.ms"]["value"] == "60000"
        assert configs["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert configs["cleanup.policy"]["value"] == "delete"
        admin.alter_configs(
            [KConfigResource(ConfigResourceType.TOPIC, "orders", configs={"retention.ms": "7"})]
        )
        wait_until(
            lambda: _kafka_python_configs(admin, resource)["retention.ms"]["value"] == "7",
            "the altered config is visible",
        )

        admin.create_partitions({"orders": NewPartitions(5)})
        wait_until(
            lambda: len(admin.describe_topics(["orders"])[0]["partitions"]) == 5,
            "five partitions are visible",
        )
        admin.delete_topics(["orders"])
        wait_until(lambda: "orders" not in admin.list_topics(), "the topic is gone")
    finally:
        admin.close()


def _kafka_python_configs(admin: KafkaAdminClient, resource: KConfigResource) -> dict:
    result = admin.describe_configs([resource], config_filter="all")
    return result["topic"][resource.name]


def test_kafka_python_gets_kafka_errors(single: tuple[Processes, str]) -> None:
    _, bootstrap = single
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    try:
        cases: list[tuple[NewTopic, type[KafkaError], str]] = [
            (NewTopic("bad name!", 1, 1), InvalidTopicError, "is illegal"),
            (NewTopic("rf", 1, 3), InvalidReplicationFactorError, "only 1 broker(s)"),
            (
                NewTopic("cfg", 1, 1, topic_configs={"no.such.key": "1"}),
                InvalidConfigurationError,
                "Unknown topic config name: no.such.key",
            ),
            (
                NewTopic("val", 1, 1, topic_configs={"retention.ms": "soon"}),
                InvalidConfigurationError,
                "retention.ms",
            ),
        ]
        for topic, error, message in cases:
            with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
                admin.create_topics([topic])
        admin.create_topics([NewTopic("twice", 2, 1)])
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([NewTopic("twice", 2, 1)])
        with pytest.raises(InvalidPartitionsError):
            admin.create_partitions({"twice": NewPartitions(1)})
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics(["never-created"])
        assert set(admin.list_topics()) == {"twice"}
        admin.delete_topics(["twice"])
    finally:
        admin.close()


def test_confluent_kafka_manages_topics(single: tuple[Processes, str]) -> None:
    _, bootstrap = single
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([CNewTopic("events", 2, 1)]).values():
        assert future.result(timeout=20) is None
    metadata = admin.list_topics(timeout=20)
    assert "events" in metadata.topics
    assert list(metadata.brokers) == [1]
    assert {p: (v.leader, v.replicas) for p, v in metadata.topics["events"].partitions.items()} == {
        0: (1, [1]),
        1: (1, [1]),
    }
    entry = ConfigEntry("retention.ms", "99000", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource("TOPIC", "events", incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=20)
    for future in admin.describe_configs([ConfigResource("TOPIC", "events")]).values():
        assert future.result(timeout=20)["retention.ms"].value == "99000"
    for future in admin.create_partitions([CNewPartitions("events", 4)]).values():
        assert future.result(timeout=20) is None
    assert len(admin.list_topics(topic="events", timeout=20).topics["events"].partitions) == 4

    errors = {}
    for topic in (CNewTopic("bad name!", 1, 1), CNewTopic("rf", 1, 3)):
        for name, future in admin.create_topics([topic]).items():
            with pytest.raises(KafkaException) as raised:
                future.result(timeout=20)
            errors[name] = raised.value.args[0]
    assert errors["bad name!"].name() == "TOPIC_EXCEPTION"
    assert "is illegal" in errors["bad name!"].str()
    assert errors["rf"].name() == "INVALID_REPLICATION_FACTOR"
    for future in admin.delete_topics(["events"]).values():
        assert future.result(timeout=20) is None
    del admin  # librdkafka's threads would keep dialling the server after teardown


def test_kcat_lists_the_cluster(single: tuple[Processes, str]) -> None:
    _, bootstrap = single
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic("listed", 2, 1)])
    admin.close()
    out = subprocess.run(
        [str(KCAT), "-L", "-b", bootstrap], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    assert "1 brokers:" in out and f"broker 1 at {bootstrap}" in out
    assert 'topic "listed" with 2 partitions' in out


# ---------------------------------------------------------------- 3 controllers + 3 brokers


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Processes, dict[int, tuple[str, int]], str]]:
    controller_port, broker_port = free_port(), free_port()
    controllers = {i: (f"127.0.0.{i}", controller_port) for i in (1, 2, 3)}
    voters = ",".join(f"{i}@{host}:{port}" for i, (host, port) in controllers.items())
    nodes: dict[int, dict[str, str]] = {}
    for i, (host, port) in controllers.items():
        nodes[i] = {
            "process.roles": "controller",
            "node.id": str(i),
            "controller.quorum.voters": voters,
            "listeners": f"CONTROLLER://{host}:{port}",
            "controller.listener.names": "CONTROLLER",
            "default.replication.factor": "3",  # applied by the active controller
        }
    for i in (4, 5, 6):
        nodes[i] = {
            "process.roles": "broker",
            "node.id": str(i),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.{i}:{broker_port}",
            "controller.listener.names": "CONTROLLER",
            "broker.rack": f"rack-{i - 3}",
        }
    procs = Processes(tmp_path, nodes)
    for node in nodes:
        procs.start(node)
    bootstrap = ",".join(f"127.0.0.{i}:{broker_port}" for i in (4, 5, 6))
    try:
        for i in (4, 5, 6):
            wait_until(lambda i=i: port_open(f"127.0.0.{i}", broker_port), f"broker {i} serves")
        yield procs, controllers, bootstrap
    finally:
        procs.cleanup()


def test_a_three_plus_three_cluster_places_replicas_and_survives_controller_failover(
    cluster: tuple[Processes, dict[int, tuple[str, int]], str],
) -> None:
    procs, controllers, bootstrap = cluster
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        admin.create_topics([NewTopic("spread", 3, 3)])
        # Brokers learn of the topic when they replay its records: eventually, as in Kafka.
        partitions = wait_until(
            lambda: len(p := admin.describe_topics(["spread"])[0]["partitions"]) == 3 and p,
            "every broker serves the new topic",
        )
        assert all(sorted(p["replica_nodes"]) == [4, 5, 6] for p in partitions)
        assert {p["leader_id"] for p in partitions} == {4, 5, 6}  # leaders spread

        def kcat_lists() -> bool:
            out = subprocess.run(
                [str(KCAT), "-L", "-b", bootstrap], capture_output=True, text=True, timeout=30
            ).stdout
            return "3 brokers:" in out and 'topic "spread" with 3 partitions' in out

        wait_until(kcat_lists, "kcat -L lists the brokers and the topic")
        confluent = AdminClient({"bootstrap.servers": bootstrap})
        assert sorted(confluent.list_topics(timeout=20).brokers) == [4, 5, 6]
        del confluent  # librdkafka's threads would keep dialling the cluster after teardown

        # A stream of CreateTopics; the active controller is SIGKILLed in the middle.
        acked: list[str] = []
        errors: list[str] = []
        stop = threading.Event()
        stream = threading.Thread(target=_create_stream, args=(bootstrap, acked, errors, stop))
        stream.start()
        wait_until(lambda: len(acked) >= 10, "topics are created before the failover")
        status = wait_until(lambda: procs.quorum(controllers), "a quorum leader answers")
        old_leader, old_epoch = status.leader_id, status.leader_epoch
        procs.kill(old_leader)
        survivors = {i: a for i, a in controllers.items() if i != old_leader}
        wait_until(
            lambda: (s := procs.quorum(survivors)) is not None and s.leader_epoch > old_epoch,
            "a new controller is elected",
        )
        before = len(acked)
        wait_until(lambda: len(acked) >= before + 10, "clients create topics again")
        stop.set()
        stream.join(timeout=60)
        assert not stream.is_alive()

        listed = wait_until(
            lambda: (names := set(admin.list_topics())) >= set(acked) and names,
            "every acknowledged topic is listed",
        )
        assert set(acked) <= listed
        assert "spread" in listed
    finally:
        admin.close()


def _create_stream(
    bootstrap: str, acked: list[str], errors: list[str], stop: threading.Event
) -> None:
    """Create uniquely named topics one at a time, retrying a failed attempt under the same
    name. CreateTopics is not idempotent: when a controller dies after committing a topic
    but before answering, the retry (the client's or the broker's forwarding) meets the
    topic and gets TOPIC_ALREADY_EXISTS, as with Apache Kafka. Only this stream creates
    these names, so that answer acknowledges our own creation."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    try:
        index = 0
        while not stop.is_set() and index < 500:
            name = f"stream-{index}"
            while not stop.is_set():
                try:
                    admin.create_topics([NewTopic(name, 1, 3)])
                except TopicAlreadyExistsError:
                    errors.append(f"{name}: already exists (an earlier attempt took effect)")
                except KafkaError as error:
                    errors.append(f"{name}: {error!r}")
                    continue
                acked.append(name)
                break
            index += 1
    finally:
        admin.close()


def test_controllers_describe_the_quorum_to_bootstrap_controller_clients(
    single: tuple[Processes, str],
) -> None:
    procs, _ = single
    host, port = procs.nodes[1]["controller.quorum.voters"].split("@")[1].split(":")

    async def ask(endpoint_type: int) -> Any:
        conn = KafkaConnection("admin")
        await conn.connect(host, int(port), 5.0)
        try:
            request = DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=i8(endpoint_type)
            )
            return await conn.request(request, 5.0)
        finally:
            await conn.close()

    controllers = asyncio.run(ask(2))
    assert controllers.error_code == ErrorCode.none
    assert controllers.controller_id == 1
    assert [(b.broker_id, b.host, b.port) for b in controllers.brokers] == [(1, host, int(port))]
    brokers = asyncio.run(ask(1))
    assert brokers.error_code == ErrorCode.unsupported_endpoint_type
