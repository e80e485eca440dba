"""Kafka's own Java CLI tools against a secured kraft-server, as an operator would run them:
``kafka-configs --entity-type users`` creates a SCRAM user, ``kafka-acls`` grants, lists and
removes that user's ACL, ``kafka-topics --command-config`` acts as the user over SASL_SSL
(SCRAM-SHA-512) and as a client certificate's principal over mutual TLS.

One node serves both listeners with StandardAuthorizer: User:admin (the SCRAM admin from
``format --add-scram``) and User:ops (the CN of the operators' client certificate, through
``ssl.principal.mapping.rules``) are super users; everybody else gets only what ACLs grant.
Each tool is a JVM start of a few seconds, so the test runs each step once, in order."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBindingFilter, AdminClient, NewTopic
from confluent_kafka.admin import AclOperation as Op
from confluent_kafka.admin import AclPermissionType as Permission
from confluent_kafka.admin import ResourcePatternType as Pattern
from confluent_kafka.admin import ResourceType as Resource

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import Processes, free_port, port_open, wait_until
from tests.kraft.secured import (
    ADD_SCRAM,
    ADMIN,
    ADMIN_PASSWORD,
    STORE_PASSWORD,
    Certs,
    Identity,
    ScramFormat,
    make_ca,
    sasl_ssl_props,
)

HOST = "127.0.0.1"
ROOT = Path(__file__).resolve().parents[2]
BOB, BOB_PASSWORD = "bob", "bob-secret"
TOOL_TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A combined node: SASL_SSL (SCRAM-SHA-512) for clients and peers, MTLS (SSL with
    ssl.client.auth=required) for certificate holders, and the StandardAuthorizer."""
    root = tmp_path_factory.mktemp("secured-java-tools")
    certs = make_ca(root / "certs")
    sasl_port, mtls_port, controller_port = free_port(), free_port(), free_port()
    identity = certs.identity("node1", ips=(HOST,))
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller_port}",
        "listeners": (
            f"SASL_SSL://{HOST}:{sasl_port},MTLS://{HOST}:{mtls_port},"
            f"CONTROLLER://{HOST}:{controller_port}"
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_SSL",
        "offsets.topic.replication.factor": "1",
        "connection.failed.authentication.delay.ms": "10",
        **sasl_ssl_props(identity, certs, ["SASL_SSL", "CONTROLLER"]),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN};User:ops",
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": (
            "RULE:^CN=([^,]*),O=kraft-py$/$1/L,DEFAULT"
        ),
    }
    props["listener.security.protocol.map"] += ",MTLS:SSL"
    procs = Processes(root, {1: props}, program=ScramFormat(scram=ADD_SCRAM))
    try:
        procs.start(1)
        for port in (sasl_port, mtls_port):
            wait_until(lambda p=port: port_open(HOST, p), f"the listener on {port} opens")
        ops = certs.identity("ops", cn="Ops")
        yield {
            "sasl": f"{HOST}:{sasl_port}",
            "mtls": f"{HOST}:{mtls_port}",
            "admin": str(_sasl_config(root / "admin.properties", certs, ADMIN, ADMIN_PASSWORD)),
            "bob": str(_sasl_config(root / "bob.properties", certs, BOB, BOB_PASSWORD)),
            "ops": str(_tls_config(root / "ops.properties", certs, ops)),
            "ops-pem": str(_tls_config(root / "ops-pem.properties", certs, ops, "PEM")),
            "anonymous": str(_tls_config(root / "anonymous.properties", certs, None)),
            "ca": str(certs.ca),
        }
    finally:
        procs.cleanup()


def _sasl_config(path: Path, certs: Certs, user: str, password: str) -> Path:
    """A Java client's --command-config for SASL_SSL with SCRAM-SHA-512 (PEM truststore)."""
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{password}";\n'
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
    )
    return path


def _tls_config(
    path: Path, certs: Certs, identity: Identity | None, keystore_type: str = "PKCS12"
) -> Path:
    """A Java client's --command-config for SSL: a keystore with the client certificate
    when ``identity`` is given (PKCS12, or Kafka's PEM type: key and chain in one file),
    else the truststore alone."""
    text = f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
    if identity is not None and keystore_type == "PEM":
        text += f"ssl.keystore.type=PEM\nssl.keystore.location={identity.keystore_pem}\n"
    elif identity is not None:
        text += (
            "ssl.keystore.type=PKCS12\n"
            f"ssl.keystore.location={identity.keystore_p12}\n"
            f"ssl.keystore.password={STORE_PASSWORD}\n"
        )
    path.write_text(text)
    return path


def _configs(bootstrap: str, config: str, *args: str) -> str:
    """Kafka's kafka-configs (kafka.admin.ConfigCommand lives in the broker's jar, so it
    comes from scripts/kafka-dist.sh, not the tools' jars)."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "kafka-dist.sh"), "configs",
         "--bootstrap-server", bootstrap, "--command-config", config, *args],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
    )  # fmt: skip
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def _acls(bootstrap: str, config: str, *args: str) -> str:
    return tools.run(
        "org.apache.kafka.tools.AclCommand", "--bootstrap-server", bootstrap,
        "--command-config", config, *args, timeout=TOOL_TIMEOUT_S,
    ).stdout  # fmt: skip


def _topics(
    bootstrap: str, config: str, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    return tools.run(
        "topics", "--bootstrap-server", bootstrap, "--command-config", config, *args,
        timeout=TOOL_TIMEOUT_S, check=check,
    )  # fmt: skip


def _admin(secured: dict[str, str], user: str, password: str) -> AdminClient:
    return AdminClient(
        {
            "bootstrap.servers": secured["sasl"],
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": user,
            "sasl.password": password,
            "ssl.ca.location": secured["ca"],
        }
    )


@pytest.mark.usefixtures("kafka_tools")
def test_a_scram_user_from_kafka_configs_is_refused_until_kafka_acls_grants_it(
    secured: dict[str, str],
) -> None:
    sasl, admin, bob = secured["sasl"], secured["admin"], secured["bob"]
    topic = f"bobs-{uuid.uuid4().hex[:8]}"
    _configs(sasl, admin, "--alter", "--entity-type", "users", "--entity-name", BOB,
             "--add-config",
             f"SCRAM-SHA-512=[iterations=8192,password={BOB_PASSWORD}]")  # fmt: skip
    described = _configs(sasl, admin, "--describe", "--entity-type", "users", "--entity-name", BOB)
    assert (
        f"SCRAM credential configs for user-principal '{BOB}' are SCRAM-SHA-512=iterations=8192"
        in (described)
    )

    # bob logs in (the credential works) but may not create the topic: no ACL names him.
    refused = _topics(sasl, bob, "--create", "--topic", topic, "--partitions", "1",
                      "--replication-factor", "1", check=False)  # fmt: skip
    assert refused.returncode != 0
    assert "Error while executing topic command : Topic authorization failed." in refused.stdout

    added = _acls(sasl, admin, "--add", "--allow-principal", f"User:{BOB}",
                  "--operation", "Create", "--operation", "Describe", "--topic", topic)  # fmt: skip
    assert f"User:{BOB}" in added
    listed = _acls(sasl, admin, "--list", "--topic", topic)
    assert (
        f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}, " in listed
    )
    for operation in ("CREATE", "DESCRIBE"):
        assert (
            f"(principal=User:{BOB}, host=*, operation={operation}, permissionType=ALLOW)" in listed
        )

    created = _topics(sasl, bob, "--create", "--topic", topic, "--partitions", "1",
                      "--replication-factor", "1")  # fmt: skip
    assert f"Created topic {topic}." in created.stdout

    _acls(sasl, admin, "--remove", "--force", "--allow-principal", f"User:{BOB}",
          "--operation", "Create", "--operation", "Describe", "--topic", topic)  # fmt: skip
    admin_client, bob_client = (
        _admin(secured, ADMIN, ADMIN_PASSWORD),
        _admin(secured, BOB, BOB_PASSWORD),
    )
    match = AclBindingFilter(
        Resource.TOPIC, topic, Pattern.LITERAL, None, None, Op.ANY, Permission.ANY
    )
    wait_until(lambda: admin_client.describe_acls(match).result(30) == [], "the ACLs are gone")
    # Without the Describe ACL the topic bob created is hidden from him again.
    wait_until(lambda: topic not in bob_client.list_topics(timeout=30).topics, "bob sees no topic")
    assert topic in admin_client.list_topics(timeout=30).topics


@pytest.mark.usefixtures("kafka_tools")
def test_kafka_topics_over_mutual_tls_with_and_without_a_client_certificate(
    secured: dict[str, str],
) -> None:
    """The certificate's CN=Ops maps to User:ops, a super user, who sees every topic and
    may grant ACLs (kafka-topics with a PKCS12 keystore, kafka-acls with Kafka's PEM one);
    the same tool without a keystore fails the handshake and lists nothing."""
    topic = f"ops-{uuid.uuid4().hex[:8]}"
    admin = _admin(secured, ADMIN, ADMIN_PASSWORD)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    listed = _topics(secured["mtls"], secured["ops"], "--list")
    assert topic in listed.stdout.split()
    granted = _acls(secured["mtls"], secured["ops-pem"], "--add", "--allow-principal",
                    "User:carol", "--operation", "Read", "--topic", topic)  # fmt: skip
    assert "(principal=User:carol, host=*, operation=READ, permissionType=ALLOW)" in granted
    refused = _topics(secured["mtls"], secured["anonymous"], "--list", check=False)
    assert refused.returncode != 0
    assert topic not in refused.stdout
    # The Java client read the server's TLS alert: SslAuthenticationException's TLS 1.3
    # wording, at once, not a retry until its timeout.
    assert "Error while executing topic command : Failed to process post-handshake messages" in (
        refused.stdout
    ), refused
    with pytest.raises(KafkaException):
        AdminClient(
            {"bootstrap.servers": secured["mtls"], "security.protocol": "SSL",
             "ssl.ca.location": secured["ca"]}
        ).list_topics(timeout=5)  # fmt: skip
