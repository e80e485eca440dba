"""ACLs from real clients against a real kraft-server with Kafka's StandardAuthorizer
configured: confluent-kafka's admin and Kafka's own kafka-acls tool add, list and remove
them; an anonymous producer is refused, allowed, then refused again as ACLs change, and a
consumer is refused its group until allowed; over SASL the principal is the login and the
ACL's host the client's address.

On PLAINTEXT every client (and the broker talking to its own controller listener) is
User:ANONYMOUS, as in Kafka."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import Processes, free_port, port_open, single_node, wait_until

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"}
ANONYMOUS = "User:ANONYMOUS"
ACL_COMMAND = "org.apache.kafka.tools.AclCommand"


@pytest.fixture(scope="module")
def admin_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An authorizer-enabled node where the anonymous client is a super user."""
    procs, bootstrap = single_node(
        tmp_path_factory.mktemp("acl-admin"), {**AUTHORIZER, "super.users": ANONYMOUS}
    )
    try:
        yield bootstrap
    finally:
        procs.cleanup()


def binding(
    name: str, operation: AclOperation, permission: AclPermissionType, principal: str
) -> AclBinding:
    return AclBinding(
        ResourceType.TOPIC, name, ResourcePatternType.LITERAL, principal, "*", operation,
        permission,
    )  # fmt: skip


def every_topic_acl(name: str | None = None) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType.TOPIC, name, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip


def test_confluent_kafka_creates_describes_and_deletes_acls(admin_node: str) -> None:
    admin = AdminClient({"bootstrap.servers": admin_node})
    read = binding("orders", AclOperation.READ, AclPermissionType.ALLOW, "User:alice")
    deny = binding("orders", AclOperation.WRITE, AclPermissionType.DENY, "User:bob")
    for future in admin.create_acls([read, deny], request_timeout=15).values():
        assert future.result() is None
    described = admin.describe_acls(every_topic_acl("orders"), request_timeout=15).result()
    assert sorted(described, key=str) == sorted([read, deny], key=str)
    prefixed = AclBindingFilter(
        ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    assert len(admin.describe_acls(prefixed, request_timeout=15).result()) == 2
    only_bob = AclBindingFilter(
        ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    (deleted,) = admin.delete_acls([only_bob], request_timeout=15).values()
    assert deleted.result() == [deny]
    assert admin.describe_acls(every_topic_acl("orders"), request_timeout=15).result() == [read]
    # An ACL with a filter's value (MATCH) is refused with INVALID_REQUEST by the broker.
    bad = AclBinding(
        ResourceType.TOPIC,
        "x",
        ResourcePatternType.PREFIXED,
        "alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )  # not a type:name principal
    (future,) = admin.create_acls([bad], request_timeout=15).values()
    with pytest.raises(KafkaException) as raised:
        future.result()
    assert raised.value.args[0].code() == KafkaError.INVALID_REQUEST


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_acls_tool_adds_lists_and_removes_acls(admin_node: str) -> None:
    common = ("--bootstrap-server", admin_node)
    tools.run(
        ACL_COMMAND, *common, "--add", "--allow-principal", "User:carol", "--operation", "Read",
        "--operation", "Describe", "--topic", "tool-topic", "--group", "tool-group",
    )  # fmt: skip
    listed = tools.run(ACL_COMMAND, *common, "--list", "--topic", "tool-topic").stdout
    assert "User:carol" in listed and "READ" in listed and "DESCRIBE" in listed
    groups = tools.run(ACL_COMMAND, *common, "--list", "--group", "tool-group").stdout
    assert "User:carol" in groups
    tools.run(
        ACL_COMMAND, *common, "--remove", "--force", "--allow-principal", "User:carol",
        "--operation", "Read", "--topic", "tool-topic",
    )  # fmt: skip
    after = tools.run(ACL_COMMAND, *common, "--list", "--topic", "tool-topic").stdout
    assert "READ" not in after and "DESCRIBE" in after


def test_without_an_authorizer_acl_requests_are_security_disabled(tmp_path: Path) -> None:
    procs, bootstrap = single_node(tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        allow = binding("t", AclOperation.READ, AclPermissionType.ALLOW, "User:alice")
        (future,) = admin.create_acls([allow], request_timeout=15).values()
        with pytest.raises(KafkaException) as raised:
            future.result()
        assert raised.value.args[0].code() == KafkaError.SECURITY_DISABLED
        assert "No Authorizer is configured" in raised.value.args[0].str()
    finally:
        procs.cleanup()


def produce_one(bootstrap: str, topic: str) -> KafkaError | None:
    """Produce one record; the delivery error (None: acknowledged)."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "acks": "all"}
    )
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(20)
    assert len(outcome) == 1, "no delivery report within 20 s"
    return outcome[0]


def first_poll(bootstrap: str, topic: str, group: str) -> bytes | int:
    """The first record's value a new consumer of ``group`` reads from the start of
    ``topic``, or the code of the first error it reports instead (within 30 s): librdkafka
    reports a refused group through the error callback, a refused topic on a message."""
    errors: list[int] = []
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "error_cb": lambda error: errors.append(int(error.code())),
        }
    )
    try:
        consumer.subscribe([topic])
        for _ in range(30):
            message = consumer.poll(1.0)
            if errors:
                return errors[0]
            if message is None:
                continue
            error = message.error()
            if error is not None:
                return int(error.code())
            value = message.value()
            assert value is not None
            return value
        raise AssertionError("the consumer got neither a record nor an error within 30 s")
    finally:
        consumer.close()


def test_an_anonymous_producer_is_refused_allowed_then_denied(tmp_path: Path) -> None:
    """Kafka's walk-through: with the authorizer on and no super user, the anonymous
    producer gets TOPIC_AUTHORIZATION_FAILED; an ALLOW of WRITE lets it produce; a DENY
    wins over that ALLOW. A consumer is refused its group until READ on the group and the
    topic is allowed, then reads the record. The cluster-level ACLs the node's own broker
    needs on its controller listener (it is anonymous too) are created first, as a super
    user."""
    broker_port, controller_port = free_port(), free_port()
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": (
            f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}"
        ),
        "controller.listener.names": "CONTROLLER",
        "offsets.topic.replication.factor": "1",  # one broker
        **AUTHORIZER,
        "super.users": ANONYMOUS,
    }
    procs = Processes(tmp_path, {1: props})
    bootstrap = f"127.0.0.1:{broker_port}"
    try:
        procs.start(1)
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener opens")
        admin = AdminClient({"bootstrap.servers": bootstrap})
        cluster = [
            AclBinding(
                ResourceType.BROKER,  # confluent-kafka's name for the CLUSTER resource
                "kafka-cluster",
                ResourcePatternType.LITERAL,
                ANONYMOUS,
                "*",
                operation,
                AclPermissionType.ALLOW,
            )
            for operation in (
                AclOperation.CLUSTER_ACTION,  # the broker's registration and heartbeats
                AclOperation.ALTER,  # creating ACLs
                AclOperation.CREATE,  # creating topics
                AclOperation.DESCRIBE,
            )
        ]
        for future in admin.create_acls(cluster, request_timeout=15).values():
            future.result()
        admin.create_topics([NewTopic("guarded", 1, 1)])["guarded"].result(timeout=15)
        assert produce_one(bootstrap, "guarded") is None  # still a super user
        procs.stop_all()
        # The same node without super.users: the anonymous client is an ordinary principal.
        del props["super.users"]
        procs.config(1).write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        procs.start(1)
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener reopens")
        refused = produce_one(bootstrap, "guarded")
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        admin = AdminClient({"bootstrap.servers": bootstrap})
        allow = binding("guarded", AclOperation.WRITE, AclPermissionType.ALLOW, ANONYMOUS)
        for future in admin.create_acls([allow], request_timeout=15).values():
            future.result()
        assert produce_one(bootstrap, "guarded") is None
        deny = binding("guarded", AclOperation.WRITE, AclPermissionType.DENY, ANONYMOUS)
        for future in admin.create_acls([deny], request_timeout=15).values():
            future.result()
        denied = produce_one(bootstrap, "guarded")
        assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        # A consumer needs READ on its group and on the topic.
        assert first_poll(bootstrap, "guarded", "readers") == KafkaError.GROUP_AUTHORIZATION_FAILED
        reads = [
            binding("guarded", AclOperation.READ, AclPermissionType.ALLOW, ANONYMOUS),
            AclBinding(
                ResourceType.GROUP,
                "readers",
                ResourcePatternType.LITERAL,
                ANONYMOUS,
                "*",
                AclOperation.READ,
                AclPermissionType.ALLOW,
            ),
        ]
        for future in admin.create_acls(reads, request_timeout=15).values():
            future.result()
        assert first_poll(bootstrap, "guarded", "readers") == b"v"
    finally:
        procs.cleanup()


def test_sasl_principals_and_client_hosts_are_what_acls_name(tmp_path: Path) -> None:
    """Over SASL_PLAINTEXT (PLAIN users from the listener's JAAS entry) the principal is the
    login, User:alice, and the host the client's address: an ALLOW for alice from another
    host does not let her write, one from her address does; the admin is a super user."""
    broker_port, controller_port = free_port(), free_port()
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": (
            f"SASL_PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}"
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            'username="broker" password="broker-pw" user_broker="broker-pw" '
            'user_admin="admin-pw" user_alice="alice-pw";'
        ),
        **AUTHORIZER,
        # The broker's own links: as User:broker over SASL, anonymous to its controller.
        "super.users": f"User:admin;User:broker;{ANONYMOUS}",
    }
    procs = Processes(tmp_path, {1: props})
    bootstrap = f"127.0.0.1:{broker_port}"

    def login(user: str) -> dict[str, str]:
        return {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": f"{user}-pw",
        }

    def alice_writes() -> KafkaError | None:
        producer = Producer({**login("alice"), "message.timeout.ms": 10000})
        outcome: list[KafkaError | None] = []
        producer.produce("ledger", b"v", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(20)
        assert len(outcome) == 1, "no delivery report within 20 s"
        return outcome[0]

    try:
        procs.start(1)
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the SASL listener opens")
        admin = AdminClient(login("admin"))
        admin.create_topics([NewTopic("ledger", 1, 1)])["ledger"].result(timeout=15)
        refused = alice_writes()
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        elsewhere = AclBinding(
            ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL, "User:alice",
            "10.9.9.9", AclOperation.WRITE, AclPermissionType.ALLOW,
        )  # fmt: skip
        for future in admin.create_acls([elsewhere], request_timeout=15).values():
            future.result()
        refused = alice_writes()
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        here = AclBinding(
            ResourceType.TOPIC, "ledger", ResourcePatternType.LITERAL, "User:alice",
            "127.0.0.1", AclOperation.WRITE, AclPermissionType.ALLOW,
        )  # fmt: skip
        for future in admin.create_acls([here], request_timeout=15).values():
            future.result()
        assert alice_writes() is None
        # alice may not manage ACLs (ALTER on the cluster).
        alice_admin = AdminClient(login("alice"))
        (future,) = alice_admin.create_acls([here], request_timeout=15).values()
        with pytest.raises(KafkaException) as raised:
            future.result()
        assert raised.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    finally:
        procs.cleanup()
