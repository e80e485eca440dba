"""The shipped secured cluster (config/cluster-secured/, on free ports): three controllers
and three brokers that talk SASL_SSL with SCRAM-SHA-512 to each other, certificates from
scripts/make-certs.sh, the admin from ``format --add-scram``, every request authorized
(StandardAuthorizer, User:admin the super user). A replicated topic (RF 3,
min.insync.replicas 2) survives its leader's crash with every acknowledged record; a stalled
follower leaves the ISR while acks=all goes on, and with two brokers down acks=all is
refused NOT_ENOUGH_REPLICAS (test_replication.py's faults, over SASL_SSL); a client
without SASL gets nothing from a broker or a controller; a user who logs in gets only what
ACLs grant."""

from __future__ import annotations

import signal
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from kraft.config import config_from_properties, unknown_key_warnings
from kraft.properties import parse_properties
from tests.kraft.procs import KRAFT_SERVER, Processes, free_port, port_open, wait_until
from tests.kraft.secured import ScramFormat

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "config" / "cluster-secured"
CONTROLLERS = (1, 2, 3)
BROKERS = (4, 5, 6)
TOPIC = "secured-replicated"
ADMIN_SCRAM = "SCRAM-SHA-512=[name=admin,password=admin-secret]"
DEADLINE_S = 60.0


def _name(node: int) -> str:
    return f"controller-{node}" if node in CONTROLLERS else f"broker-{node}"


def test_the_shipped_secured_configs_are_valid_and_warn_about_nothing() -> None:
    for node in CONTROLLERS + BROKERS:
        props = parse_properties((CLUSTER / f"{_name(node)}.properties").read_text())
        # The keystores do not exist until scripts/make-certs.sh runs: check the rest.
        props = {k: v for k, v in props.items() if not k.startswith("ssl.")}
        props["listener.security.protocol.map"] = (
            "CONTROLLER:SASL_PLAINTEXT,SASL_SSL:SASL_PLAINTEXT"
        )
        config = config_from_properties(props)
        assert unknown_key_warnings(config) == [], node
        assert config.log_dirs[0].startswith("./data-cluster-secured/")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, dict]]:
    root = tmp_path_factory.mktemp("secured-cluster")
    secrets = root / "secrets"
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-certs.sh"), str(secrets)],
        check=True,
        capture_output=True,
    )
    nodes: dict[int, dict[str, str]] = {}
    ports: dict[int, tuple[str, int]] = {}
    for node in CONTROLLERS + BROKERS:
        props = dict(parse_properties((CLUSTER / f"{_name(node)}.properties").read_text()))
        host = props["listeners"].split("://")[1].rsplit(":", 1)[0]
        ports[node] = (host, free_port(host))
        nodes[node] = props
    voters = ",".join(f"{n}@{ports[n][0]}:{ports[n][1]}" for n in CONTROLLERS)
    for node, props in nodes.items():
        host, port = ports[node]
        name = "CONTROLLER" if node in CONTROLLERS else "SASL_SSL"
        props["controller.quorum.voters"] = voters
        props["listeners"] = f"{name}://{host}:{port}"
        props.pop("advertised.listeners", None)
        props["log.dirs"] = str(root / f"data{node}")
        props["ssl.keystore.location"] = str(secrets / f"{_name(node)}.p12")
        props["ssl.truststore.location"] = str(secrets / "ca.pem")
        props["replica.lag.time.max.ms"] = "2000"
        props["broker.heartbeat.interval.ms"] = "500"
    procs = Processes(root, nodes, program=ScramFormat(scram=(ADMIN_SCRAM,)))
    try:
        for node in nodes:
            procs.start(node)
        for node in BROKERS:
            wait_until(lambda n=node: port_open(*ports[n]), f"broker {node} serves", DEADLINE_S)
        yield procs, {"ports": ports, "ca": secrets / "ca.pem"}
    finally:
        procs.cleanup()


def _conf(info: dict, brokers: tuple[int, ...] = BROKERS) -> dict:
    return {
        "bootstrap.servers": ",".join(f"{h}:{p}" for h, p in (info["ports"][b] for b in brokers)),
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": "admin-secret",
        "ssl.ca.location": str(info["ca"]),
    }


def _state(conf: dict, name: str = TOPIC) -> tuple[int, tuple[int, ...]] | None:
    try:
        topic = AdminClient(conf).list_topics(name, timeout=5).topics.get(name)
    except KafkaException:
        return None
    if topic is None or topic.error is not None or 0 not in topic.partitions:
        return None
    return topic.partitions[0].leader, tuple(sorted(topic.partitions[0].isrs))


def _unauthenticated_answer(host: str, port: int, ca: Path, frame: bytes) -> bytes:
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection((host, port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        sock.sendall(frame)
        return sock.recv(4096)


def _request(api_key: int, version: int, body: bytes) -> bytes:
    client = b"stranger"
    header = struct.pack(">hhih", api_key, version, 9, len(client)) + client
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_a_secured_cluster_replicates_and_survives_its_leaders_crash(
    cluster: tuple[Processes, dict],
) -> None:
    procs, info = cluster
    conf = _conf(info)
    admin = AdminClient(conf)
    created = admin.create_topics(
        [NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )
    created[TOPIC].result(DEADLINE_S)
    leader, _ = wait_until(
        lambda: (s := _state(conf)) is not None and len(s[1]) == 3 and s, "ISR of 3"
    )
    acked: dict[bytes, int] = {}

    def on_delivery(error: object, message: object) -> None:
        if error is None:
            acked[message.value()] = message.offset()  # type: ignore[attr-defined]

    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 60000})
    for i in range(200):
        producer.produce(TOPIC, f"before-{i}".encode(), partition=0, on_delivery=on_delivery)
    assert producer.flush(DEADLINE_S) == 0
    procs.signal(leader, signal.SIGKILL)
    survivors = tuple(b for b in BROKERS if b != leader)
    wait_until(
        lambda: (s := _state(_conf(info, survivors))) is not None and s[0] in survivors,
        "a new leader among the survivors",
    )
    for i in range(200):
        producer.produce(TOPIC, f"after-{i}".encode(), partition=0, on_delivery=on_delivery)
    assert producer.flush(DEADLINE_S) == 0
    procs.procs[leader].wait()
    procs.start(leader)
    wait_until(lambda: (s := _state(conf)) is not None and len(s[1]) == 3, "the old leader rejoins")
    assert len(acked) == 400
    consumer = Consumer({**conf, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: dict[bytes, int] = {}
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 400 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got[message.value()] = message.offset()
    consumer.close()
    assert got == acked
    for node in CONTROLLERS + BROKERS:
        log = procs.log(node)
        assert "Serving SASL_SSL(SASL_SSL; SCRAM-SHA-512)" in log or (
            "Serving CONTROLLER(SASL_SSL; PLAIN)" in log
        ), node
        assert "admin-secret" not in log


def test_without_sasl_neither_a_broker_nor_a_controller_answers(
    cluster: tuple[Processes, dict],
) -> None:
    """Issue 29: a stranger's CreateTopics on the controller port was answered with success.
    Now TLS is fine but nothing is served before the SASL login: the connection closes."""
    _procs, info = cluster
    create_topics_v2 = _request(19, 2, struct.pack(">i", 0) + struct.pack(">i", 1000) + b"\x00")
    vote_v0 = _request(52, 0, b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00")
    for node in (CONTROLLERS[0], BROKERS[0]):
        host, port = info["ports"][node]
        assert _unauthenticated_answer(host, port, info["ca"], create_topics_v2) == b"", node
        assert _unauthenticated_answer(host, port, info["ca"], vote_v0) == b"", node


def test_a_transaction_commits_across_the_secured_brokers(
    cluster: tuple[Processes, dict],
) -> None:
    """The transaction coordinator's markers travel to the partition leaders over the
    inter-broker SASL_SSL listener: a committed transaction becomes visible to a
    read_committed consumer."""
    _procs, info = cluster
    conf = _conf(info)
    topic = "secured-txn"
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(DEADLINE_S)
    producer = Producer({**conf, "transactional.id": "secured-txn-1"})
    producer.init_transactions(DEADLINE_S)
    producer.begin_transaction()
    for i in range(30):
        producer.produce(topic, f"txn-{i}".encode(), partition=i % 3)
    producer.commit_transaction(DEADLINE_S)
    consumer = Consumer(
        {**conf, "group.id": "txn-check", "isolation.level": "read_committed",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got: set[bytes] = set()
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 30 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.add(message.value())
    consumer.close()
    assert got == {f"txn-{i}".encode() for i in range(30)}


def test_a_logged_in_user_gets_only_what_acls_grant(cluster: tuple[Processes, dict]) -> None:
    """The shipped secured cluster authorizes every request: a user the admin adds can log
    in, but its Produce is refused (TOPIC_AUTHORIZATION_FAILED) until an ACL allows WRITE on
    the topic, and it still cannot create topics (CLUSTER/TOPIC CREATE not granted)."""
    _procs, info = cluster
    conf = _conf(info)
    admin = AdminClient(conf)
    topic = "secured-acl"
    admin.create_topics([NewTopic(topic, 1, 3)])[topic].result(DEADLINE_S)
    upsert = UserScramCredentialUpsertion(
        "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"alice-secret"
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(DEADLINE_S)
    alice = {**conf, "sasl.username": "alice", "sasl.password": "alice-secret"}

    def produce_once() -> KafkaError | None:
        errors: list[KafkaError | None] = []
        producer = Producer({**alice, "message.timeout.ms": 10000, "retries": 0})
        producer.produce(topic, b"from-alice", on_delivery=lambda e, _m: errors.append(e))
        producer.flush(DEADLINE_S)
        assert len(errors) == 1
        return errors[0]

    # A new user's first login may race its credential reaching every broker: retried.
    refused = wait_until(
        lambda: (
            (e := produce_once()) is not None
            and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            and e
        ),
        "alice logs in and is refused",
    )
    assert refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    alice_admin = AdminClient(alice)  # kept: a destroyed client fails its futures
    with pytest.raises(KafkaException, match=r"(?i)authoriz"):
        alice_admin.create_topics([NewTopic("alice-own", 1, 3)])["alice-own"].result(DEADLINE_S)
    allow = AclBinding(
        ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:alice", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    for future in admin.create_acls([allow], request_timeout=30).values():
        assert future.result() is None
    wait_until(lambda: produce_once() is None, "alice may write once the ACL is everywhere")


def test_a_secured_cluster_drops_a_stalled_follower_and_refuses_below_min_isr(
    cluster: tuple[Processes, dict],
) -> None:
    """test_replication.py's follower stall and min-ISR refusal on the secured cluster,
    whose brokers fetch from each other and report ISR changes to the controllers over
    SASL_SSL: a SIGSTOPped follower leaves the ISR (the leader shrinks it) while acks=all
    writes go on; with two of three brokers killed, acks=all is refused NOT_ENOUGH_REPLICAS
    and nothing is acknowledged; restarted, both rejoin the ISR."""
    procs, info = cluster
    conf = _conf(info)
    topic = "secured-isr"
    admin = AdminClient(conf)  # kept: a collected client abandons its futures
    admin.create_topics(
        [NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )[topic].result(DEADLINE_S)

    def isr_is(brokers: tuple[int, ...], what: str) -> int:
        state: Any = wait_until(
            lambda: (
                (s := _state(_conf(info, brokers), topic)) is not None
                and s[1] == tuple(sorted(brokers))
                and s
            ),
            what,
            DEADLINE_S,
        )
        return int(state[0])

    leader = isr_is(BROKERS, "all three replicas in sync")
    follower = next(b for b in BROKERS if b != leader)
    acked: dict[bytes, int] = {}
    errors: list[KafkaError] = []

    def on_delivery(error: KafkaError | None, message: object) -> None:
        if error is None:
            acked[message.value()] = message.offset()  # type: ignore[attr-defined]
        else:
            errors.append(error)

    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 60000})
    procs.signal(follower, signal.SIGSTOP)
    try:
        for i in range(50):
            producer.produce(topic, f"stalled-{i}".encode(), partition=0, on_delivery=on_delivery)
        producer.poll(0)
        rest = tuple(b for b in BROKERS if b != follower)
        isr_is(rest, "the stalled follower leaves the ISR")
        assert "Shrinking ISR" in procs.log(leader)
        assert producer.flush(DEADLINE_S) == 0
        assert errors == [] and len(acked) == 50
    finally:
        procs.signal(follower, signal.SIGCONT)
    leader = isr_is(BROKERS, "the resumed follower rejoins")

    others = tuple(b for b in BROKERS if b != leader)
    for broker in others:
        procs.kill(broker)
    try:
        isr_is((leader,), "the ISR is the leader alone")
        strict = Producer(
            {**_conf(info, (leader,)), "acks": "all", "retries": 0, "message.timeout.ms": 10000}
        )
        refused: list[KafkaError] = []
        strict.produce(
            topic,
            b"refused",
            partition=0,
            on_delivery=lambda error, _m: refused.append(error) if error else None,
        )
        strict.flush(DEADLINE_S)
        assert [e.code() for e in refused] == [KafkaError.NOT_ENOUGH_REPLICAS]
    finally:
        for broker in others:
            procs.start(broker)
    isr_is(BROKERS, "both rejoin the ISR")


def test_the_quorum_tools_read_a_secured_controller_with_a_command_config(
    cluster: tuple[Processes, dict], tmp_path: Path
) -> None:
    """Kafka's tools take a client properties file (--command-config) for a secured cluster;
    so do kraft-server describe-quorum and metadata-shell: over SASL_SSL with PLAIN they read
    the quorum, and without the file they get no answer from it (the listener speaks TLS)."""
    _procs, info = cluster
    controllers = ",".join(f"{h}:{p}" for h, p in (info["ports"][c] for c in CONTROLLERS))
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={info['ca']}\n"
    )

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(KRAFT_SERVER), *argv], capture_output=True, text=True, check=False, timeout=120
        )

    described = run("describe-quorum", "--bootstrap-controller", controllers,
                    "--command-config", str(config))  # fmt: skip
    assert described.returncode == 0, described.stderr
    assert "CurrentVoters:   [1, 2, 3]" in described.stdout, described.stdout
    plain = run("describe-quorum", "--bootstrap-controller", controllers)
    assert plain.returncode == 1 and "no leader found" in plain.stderr, plain.stderr
    shell = run("metadata-shell", "--bootstrap-controller", controllers,
                "--command-config", str(config), "ls", "/image/cluster")  # fmt: skip
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.split() == [str(b) for b in BROKERS], shell.stdout
