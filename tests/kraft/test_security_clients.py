"""Real clients against a real kraft-server over SASL_SSL (SCRAM-SHA-512) and SSL with client
certificates: the right credentials produce and consume; a wrong password, a missing client
certificate or no SASL at all gets nothing."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import Processes, free_port, port_open, wait_until
from tests.kraft.secured import (
    ADD_SCRAM,
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    Certs,
    ScramFormat,
    make_ca,
    sasl_ssl_props,
    scram_jaas,
)

HOST = "127.0.0.1"
TLS_ALERT_RECORD = 0x15


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_ca(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def sasl_ssl_cluster(
    tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[tuple[str, Processes]]:
    """One combined node whose client and controller listeners are both SASL_SSL with
    SCRAM-SHA-512 (the node logs in to its own controller listener as admin)."""
    root = tmp_path_factory.mktemp("sasl-ssl")
    broker_port, controller_port = free_port(), free_port()
    identity = certs.identity("node1", ips=(HOST,))
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"SASL_SSL://{HOST}:{broker_port},CONTROLLER://{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_SSL",
        "connection.failed.authentication.delay.ms": "10",
        "offsets.topic.replication.factor": "1",
        **sasl_ssl_props(identity, certs, ["SASL_SSL", "CONTROLLER"]),
    }
    procs = Processes(root, {1: props}, program=ScramFormat(scram=ADD_SCRAM))
    try:
        procs.start(1)
        wait_until(lambda: port_open(HOST, broker_port), "the SASL_SSL listener opens")
        assert "Serving SASL_SSL(SASL_SSL; SCRAM-SHA-512)" in procs.log(1)
        yield f"{HOST}:{broker_port}", procs
    finally:
        procs.cleanup()


@pytest.fixture
def sasl_ssl_node(sasl_ssl_cluster: tuple[str, Processes]) -> str:
    return sasl_ssl_cluster[0]


@pytest.fixture
def node_log(sasl_ssl_cluster: tuple[str, Processes]) -> Callable[[], str]:
    return lambda: sasl_ssl_cluster[1].log(1)


def _sasl_conf(bootstrap: str, certs: Certs, password: str = ALICE_PASSWORD) -> dict:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": ALICE,
        "sasl.password": password,
        "ssl.ca.location": str(certs.ca),
    }


def _produce_consume(conf: dict, topic: str, count: int = 20) -> list[bytes]:
    producer = Producer({**conf, "acks": "all", "message.timeout.ms": 30000})
    for i in range(count):
        producer.produce(topic, f"value-{i}".encode())
    assert producer.flush(40) == 0
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    try:
        wait_until(lambda: _poll_into(consumer, values) and len(values) >= count, "consumed all")
    finally:
        consumer.close()
    return values


def _poll_into(consumer: Consumer, values: list[bytes]) -> bool:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        values.append(message.value())
    return True


def test_confluent_kafka_produces_and_consumes_over_sasl_ssl_scram(
    sasl_ssl_node: str, certs: Certs
) -> None:
    topic = f"secure-{uuid.uuid4().hex[:8]}"
    values = _produce_consume(_sasl_conf(sasl_ssl_node, certs), topic)
    assert values == [f"value-{i}".encode() for i in range(20)]


def _kcat(bootstrap: str, conf: dict, *args: str, stdin: str | None = None) -> Any:
    """kcat (librdkafka's CLI, Debian's build) with ``conf`` as -X properties."""
    props = [x for k, v in conf.items() if k != "bootstrap.servers" for x in ("-X", f"{k}={v}")]
    return subprocess.run(
        ["kcat", "-b", bootstrap, *props, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_wrong_password_gets_an_authentication_error_and_no_data(
    sasl_ssl_node: str, certs: Certs, node_log: Callable[[], str]
) -> None:
    errors: list[KafkaError] = []
    conf = {**_sasl_conf(sasl_ssl_node, certs, "not-alices-password"), "error_cb": errors.append}
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0.5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    log = node_log()
    assert f"Failed authentication with /{HOST} (user {ALICE})" in log
    assert "not-alices-password" not in log


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    client = b"probe"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client
    return struct.pack(">i", len(header) + len(body)) + header + body


def test_a_client_without_sasl_gets_nothing_and_is_disconnected(
    sasl_ssl_node: str, certs: Certs
) -> None:
    """TLS is fine, but a Metadata request before SASL closes the connection unanswered."""
    host, port = sasl_ssl_node.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs.ca))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        sock.sendall(_frame(3, 1, 7, struct.pack(">i", -1)))  # Metadata v1, all topics
        assert sock.recv(4096) == b""  # closed, nothing answered


def test_a_big_frame_before_the_login_is_refused_unread_and_allowed_after_it(
    sasl_ssl_node: str, certs: Certs
) -> None:
    """sasl.server.max.receive.size (512 KiB): a stranger cannot make the broker buffer
    socket.request.max.bytes; a logged-in producer still sends a 700 KB record."""
    host, port = sasl_ssl_node.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(certs.ca))
    with (
        socket.create_connection((host, int(port)), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=host) as sock,
    ):
        sock.sendall(struct.pack(">i", 1_000_000) + b"\x00" * 1000)
        assert sock.recv(4096) == b""
    topic = f"big-{uuid.uuid4().hex[:8]}"
    producer = Producer({**_sasl_conf(sasl_ssl_node, certs), "message.max.bytes": 2_000_000})
    delivered: list[object] = []
    producer.produce(topic, b"x" * 700_000, on_delivery=lambda e, m: delivered.append(e))
    assert producer.flush(30) == 0
    assert delivered == [None]


def test_a_plaintext_client_on_the_sasl_ssl_port_gets_nothing(sasl_ssl_node: str) -> None:
    """Kafka bytes in the clear are not a TLS ClientHello: at most a TLS alert comes back,
    never a Kafka answer."""
    host, port = sasl_ssl_node.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(_frame(18, 0, 1, b""))  # ApiVersions v0, in the clear
        data = sock.recv(4096)
    assert data == b"" or data[0] == TLS_ALERT_RECORD, data[:16]


def test_kafka_python_produces_and_consumes_over_sasl_ssl_scram(
    sasl_ssl_node: str, certs: Certs
) -> None:
    import kafka

    topic = f"kp-{uuid.uuid4().hex[:8]}"
    conf = {
        "bootstrap_servers": sasl_ssl_node,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": ALICE,
        "sasl_plain_password": ALICE_PASSWORD,
        "ssl_cafile": str(certs.ca),
    }
    producer = kafka.KafkaProducer(acks="all", **conf)
    for i in range(10):
        producer.send(topic, f"kp-{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = kafka.KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=20000, **conf
    )
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 10:
            break
    consumer.close()
    assert values == [f"kp-{i}".encode() for i in range(10)]


def test_kafka_python_with_a_wrong_password_is_refused(
    sasl_ssl_node: str, certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    import kafka
    import kafka.errors

    with pytest.raises(kafka.errors.KafkaTimeoutError, match="Unable to bootstrap"):
        kafka.KafkaAdminClient(
            bootstrap_servers=sasl_ssl_node,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=ALICE,
            sasl_plain_password="guess",
            ssl_cafile=str(certs.ca),
        )
    assert "[Error 58] SaslAuthenticationFailedError" in caplog.text


@pytest.fixture(scope="module")
def mtls_node(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[str]:
    """SSL listeners (client and controller) with ssl.client.auth=required, PEM keystores,
    and a principal mapping rule that takes the CN."""
    root = tmp_path_factory.mktemp("mtls")
    broker_port, controller_port = free_port(), free_port()
    identity = certs.identity("mtls-node1", ips=(HOST,), cn="node1")
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"SSL://{HOST}:{broker_port},CONTROLLER://{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SSL",
        "listener.security.protocol.map": "SSL:SSL,CONTROLLER:SSL",
        "offsets.topic.replication.factor": "1",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(identity.keystore_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": "required",
        "ssl.principal.mapping.rules": "RULE:^CN=([^,]*),O=kraft-py$/$1/L,DEFAULT",
    }
    procs = Processes(root, {1: props})
    try:
        procs.start(1)
        wait_until(lambda: port_open(HOST, broker_port), "the SSL listener opens")
        yield f"{HOST}:{broker_port}"
    finally:
        procs.cleanup()


def test_confluent_kafka_with_a_client_certificate_produces_and_consumes(
    mtls_node: str, certs: Certs
) -> None:
    client = certs.identity("client-alice", cn="Alice")
    conf = {
        "bootstrap.servers": mtls_node,
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(client.cert_pem),
        "ssl.key.location": str(client.key_pem),
    }
    topic = f"mtls-{uuid.uuid4().hex[:8]}"
    assert _produce_consume(conf, topic, 5) == [f"value-{i}".encode() for i in range(5)]


def _answer_over_tls(address: str, context: ssl.SSLContext) -> bytes:
    """What an ApiVersions request over TLS gets back: b"" when the handshake or the
    connection is refused (TLS 1.3 reports a refused client certificate on the first
    read)."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=host) as sock:
                sock.sendall(_frame(18, 0, 1, b""))
                return sock.recv(4096)
        except (ssl.SSLError, ConnectionResetError):
            return b""


def test_a_client_without_a_certificate_gets_nothing(mtls_node: str, certs: Certs) -> None:
    context = ssl.create_default_context(cafile=str(certs.ca))
    assert _answer_over_tls(mtls_node, context) == b""
    # The same request with a certificate is answered: the refusal was the certificate's.
    client = certs.identity("client-probe", cn="probe")
    context.load_cert_chain(str(client.cert_pem), str(client.key_pem))
    assert _answer_over_tls(mtls_node, context)[4:8] == struct.pack(">i", 1)


def test_confluent_kafka_without_a_certificate_sees_no_topic(mtls_node: str, certs: Certs) -> None:
    errors: list[KafkaError] = []
    admin = AdminClient(
        {
            "bootstrap.servers": mtls_node,
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca),
            "error_cb": errors.append,
        }
    )
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


def test_users_are_created_described_and_deleted_through_the_admin_api(
    sasl_ssl_node: str, certs: Certs
) -> None:
    """AlterUserScramCredentials (forwarded to the controller) and
    DescribeUserScramCredentials, as kafka-configs --entity-type users uses them: a new user
    can log in at once; deleted, it cannot."""
    from confluent_kafka.admin import (
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(_sasl_conf(sasl_ssl_node, certs))
    user = f"bob-{uuid.uuid4().hex[:6]}"
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    upsert = UserScramCredentialUpsertion(user, info, b"bob-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    described = admin.describe_user_scram_credentials([user])[user].result(30)
    [credential] = described.scram_credential_infos
    assert (credential.mechanism, credential.iterations) == (ScramMechanism.SCRAM_SHA_512, 8192)
    bob = {**_sasl_conf(sasl_ssl_node, certs), "sasl.username": user, "sasl.password": "bob-secret"}
    assert AdminClient(bob).list_topics(timeout=10).brokers
    too_few = UserScramCredentialUpsertion(
        "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 100), b"x"
    )
    with pytest.raises(KafkaException, match="Iterations must be >= 4096"):
        admin.alter_user_scram_credentials([too_few])["carol"].result(30)
    delete = UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_512)
    admin.alter_user_scram_credentials([delete])[user].result(30)
    with pytest.raises(KafkaException, match="does not exist"):
        admin.describe_user_scram_credentials([user])[user].result(30)
    with pytest.raises(KafkaException):
        AdminClient(bob).list_topics(timeout=5)


def test_aiokafka_produces_and_consumes_over_sasl_ssl_scram(
    sasl_ssl_node: str, certs: Certs
) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import KafkaConnectionError
    from aiokafka.helpers import create_ssl_context

    topic = f"aio-{uuid.uuid4().hex[:8]}"

    def conf(password: str) -> dict:
        return {
            "bootstrap_servers": sasl_ssl_node,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": ALICE,
            "sasl_plain_password": password,
            "ssl_context": create_ssl_context(cafile=str(certs.ca)),
        }

    async def scenario() -> list[bytes]:
        producer = AIOKafkaProducer(acks="all", **conf(ALICE_PASSWORD))
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"aio-{i}".encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf(ALICE_PASSWORD))
        await consumer.start()
        values: list[bytes] = []
        try:
            async with asyncio.timeout(30):
                async for message in consumer:
                    values.append(message.value)
                    if len(values) == 10:
                        break
        finally:
            await consumer.stop()
        wrong = AIOKafkaProducer(**conf("not-it"))
        with pytest.raises(KafkaConnectionError):
            await wrong.start()
        await wrong.stop()
        return values

    assert asyncio.run(scenario()) == [f"aio-{i}".encode() for i in range(10)]


def _java_client_config(path: Path, certs: Certs, password: str) -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ALICE}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
    )
    return path


@pytest.mark.usefixtures("kafka_tools")
def test_the_java_client_through_kafkas_cli_tools_over_sasl_ssl(
    sasl_ssl_node: str, certs: Certs, tmp_path: Path
) -> None:
    """kafka-topics --command-config, the console producer and consumer: Kafka's own Java
    client logs in with SCRAM-SHA-512 over TLS; with a wrong password kafka-topics fails."""
    good = _java_client_config(tmp_path / "alice.properties", certs, ALICE_PASSWORD)
    topic = f"java-{uuid.uuid4().hex[:8]}"
    common = ("--bootstrap-server", sasl_ssl_node)
    tools.run("topics", *common, "--command-config", str(good), "--create", "--topic", topic,
              "--partitions", "1", "--replication-factor", "1")  # fmt: skip
    listed = tools.run("topics", *common, "--command-config", str(good), "--list")
    assert topic in listed.stdout.split()
    producer = subprocess.run(
        ["bash", str(tools.SCRIPT), "console-producer", *common, "--topic", topic,
         "--producer.config", str(good)],
        input="".join(f"java-{i}\n" for i in range(5)), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert producer.returncode == 0, producer.stderr
    consumed = tools.run("console-consumer", *common, "--topic", topic, "--from-beginning",
                         "--max-messages", "5", "--consumer.config", str(good))  # fmt: skip
    assert consumed.stdout.split() == [f"java-{i}" for i in range(5)]
    bad = _java_client_config(tmp_path / "wrong.properties", certs, "not-alices")
    refused = tools.run("topics", *common, "--command-config", str(bad), "--list",
                        check=False, timeout=120)  # fmt: skip
    assert refused.returncode != 0
    assert (
        "Authentication failed during authentication due to invalid credentials with SASL "
        "mechanism SCRAM-SHA-512" in refused.stdout
    )
    assert topic not in refused.stdout


@pytest.fixture(scope="module")
def sasl_plaintext_node(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Processes]]:
    """SASL_PLAINTEXT with PLAIN for clients, users from the listener's JAAS entry, and
    connections.max.reauth.ms set (KIP-368)."""
    root = tmp_path_factory.mktemp("sasl-plaintext")
    broker_port, controller_port = free_port(), free_port()
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": f"SASL_PLAINTEXT://{HOST}:{broker_port},CONTROLLER://{HOST}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "offsets.topic.replication.factor": "1",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "connections.max.reauth.ms": "3000",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="broker" password="broker-pw" user_broker="broker-pw" '
            f'user_{ALICE}="{ALICE_PASSWORD}";'
        ),
    }
    procs = Processes(root, {1: props})
    try:
        procs.start(1)
        wait_until(lambda: port_open(HOST, broker_port), "the SASL_PLAINTEXT listener opens")
        yield f"{HOST}:{broker_port}", procs
    finally:
        procs.cleanup()


def test_plain_over_sasl_plaintext_with_reauthentication(
    sasl_plaintext_node: tuple[str, Processes],
) -> None:
    """librdkafka logs in with PLAIN, reads the 3 s session lifetime and re-authenticates on
    the same connections while it keeps producing and consuming past it: no connection is
    closed for an expired session (the first such close of a minute would be logged)."""
    bootstrap, procs = sasl_plaintext_node
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": ALICE,
        "sasl.password": ALICE_PASSWORD,
    }
    topic = f"plain-{uuid.uuid4().hex[:8]}"
    producer = Producer({**conf, "acks": "all"})
    deadline = time.monotonic() + 8  # well past two session lifetimes
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, f"v-{sent}".encode())
        sent += 1
        assert producer.flush(10) == 0
        time.sleep(0.2)
    values = _consume_all(conf, topic, sent)
    assert values == [f"v-{i}".encode() for i in range(sent)]
    errors: list[KafkaError] = []
    assert "session expired" not in procs.log(1)
    wrong = AdminClient({**conf, "sasl.password": "nope", "error_cb": errors.append})
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=5)
    wait_until(lambda: "wrong password or unknown user" in procs.log(1), "the failure logged")


def _consume_all(conf: dict, topic: str, count: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": f"g-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        wait_until(lambda: _poll_into(consumer, values) and len(values) >= count, "consumed")
    finally:
        consumer.close()
    return values


@pytest.mark.usefixtures("kafka_tools")
def test_acl_apis_answer_security_disabled(
    sasl_ssl_node: str, certs: Certs, tmp_path: Path
) -> None:
    """No authorizer is built: CreateAcls, DescribeAcls and DeleteAcls answer Kafka's
    SECURITY_DISABLED with its message instead of closing the connection. (librdkafka drops
    DescribeAcls' top-level error, so Kafka's own kafka-acls --list shows that one.)"""
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    admin = AdminClient(_sasl_conf(sasl_ssl_node, certs))
    binding = AclBinding(
        ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:bob", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    match = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    for future in (admin.create_acls([binding])[binding], admin.delete_acls([match])[match]):
        with pytest.raises(KafkaException, match="No Authorizer is configured") as caught:
            future.result(30)
        assert caught.value.args[0].code() == KafkaError.SECURITY_DISABLED
    config = _java_client_config(tmp_path / "alice.properties", certs, ALICE_PASSWORD)
    listed = tools.run(
        "org.apache.kafka.tools.AclCommand", "--bootstrap-server", sasl_ssl_node,
        "--command-config", str(config), "--list", check=False,
    )  # fmt: skip
    assert listed.returncode != 0
    assert (
        "SecurityDisabledException: No Authorizer is configured." in listed.stdout + listed.stderr
    )


def test_kcat_logs_in_with_plain_produces_and_consumes_and_a_wrong_password_gets_nothing(
    sasl_plaintext_node: tuple[str, Processes],
) -> None:
    """Debian's kcat (librdkafka 2.0) derives its SASL support from SaslHandshake v0 in
    ApiVersions: with only v1 advertised it refused to log in ("SASL Handshake not supported
    by broker"). v0-v1 are advertised as Kafka does; the legacy v0 flow itself is refused."""
    bootstrap, _ = sasl_plaintext_node
    conf = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": ALICE,
        "sasl.password": ALICE_PASSWORD,
    }
    topic = f"kcat-{uuid.uuid4().hex[:8]}"
    produced = _kcat(bootstrap, conf, "-P", "-t", topic, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat(bootstrap, conf, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two", "three"]
    wrong = {**conf, "sasl.password": "not-alices-password"}
    refused = _kcat(bootstrap, wrong, "-C", "-t", topic, "-o", "beginning", "-e", "-m", "10")
    assert refused.returncode != 0
    assert "one" not in refused.stdout
    assert "Authentication failed" in refused.stderr, refused.stderr


@pytest.fixture(scope="module")
def scram_listeners(
    tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[dict[str, str]]:
    """One combined node with a SASL_PLAINTEXT and a SASL_SSL listener, both offering
    SCRAM-SHA-256 and SCRAM-SHA-512, alice holding a credential for each; the listener's
    security protocol -> its bootstrap address."""
    root = tmp_path_factory.mktemp("scram-listeners")
    plain_port, tls_port, controller_port = free_port(), free_port(), free_port()
    identity = certs.identity("scram-node", ips=(HOST,))
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": (
            f"SASL_PLAINTEXT://{HOST}:{plain_port},SASL_SSL://{HOST}:{tls_port},"
            f"CONTROLLER://{HOST}:{controller_port}"
        ),
        "listener.security.protocol.map": (
            "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "offsets.topic.replication.factor": "1",
        "connection.failed.authentication.delay.ms": "10",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram_jaas(
            ADMIN, ADMIN_PASSWORD
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(identity.keystore_pem),
    }
    scram = (
        *ADD_SCRAM,
        f"SCRAM-SHA-256=[name={ALICE},password={ALICE_PASSWORD}]",
    )
    procs = Processes(root, {1: props}, program=ScramFormat(scram=scram))
    try:
        procs.start(1)
        for port in (plain_port, tls_port):
            wait_until(lambda port=port: port_open(HOST, port), "the SASL listeners open")
        yield {"SASL_PLAINTEXT": f"{HOST}:{plain_port}", "SASL_SSL": f"{HOST}:{tls_port}"}
    finally:
        procs.cleanup()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_kcat_logs_in_with_scram_produces_and_consumes_and_a_wrong_password_gets_nothing(
    scram_listeners: dict[str, str], certs: Certs, protocol: str, mechanism: str
) -> None:
    """librdkafka before 2.6.1 (Debian's kcat: 2.0.2) sends the client nonce twice in its
    client-final message; the broker takes that one form, as Kafka does, and was refusing
    it ("Server nonce doesn't match"). A wrong password is still refused."""
    bootstrap = scram_listeners[protocol]
    conf = {
        "security.protocol": protocol,
        "sasl.mechanism": mechanism,
        "sasl.username": ALICE,
        "sasl.password": ALICE_PASSWORD,
    }
    if protocol == "SASL_SSL":
        conf["ssl.ca.location"] = str(certs.ca)
    topic = f"kcat-{mechanism.lower()}-{uuid.uuid4().hex[:8]}"
    produced = _kcat(bootstrap, conf, "-P", "-t", topic, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _kcat(bootstrap, conf, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["one", "two", "three"]
    wrong = {**conf, "sasl.password": "not-alices-password"}
    refused = _kcat(bootstrap, wrong, "-C", "-t", topic, "-o", "beginning", "-e", "-m", "10")
    assert refused.returncode != 0
    assert "one" not in refused.stdout
    assert (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}" in refused.stderr
    ), refused.stderr
