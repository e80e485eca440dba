"""Security keys of server.properties: what is built is read, what is not stops start-up with
one line naming the key (never served as plaintext)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kraft.config import ConfigError, config_from_properties, unknown_key_warnings
from protocol.security import SecurityProtocol

BIN = Path(sys.executable).parent
BASE = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@localhost:9093",
    "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "./data",
}


def test_the_protocol_map_defaults_to_plaintext_for_the_controller_listener() -> None:
    security = config_from_properties(BASE).security()
    assert security.protocol_of("PLAINTEXT") is SecurityProtocol.PLAINTEXT
    assert security.protocol_of("CONTROLLER") is SecurityProtocol.PLAINTEXT
    assert security.controller_client.protocol is SecurityProtocol.PLAINTEXT
    assert security.controller_client.sasl is None


def test_a_listener_missing_from_an_explicit_map_is_refused() -> None:
    with pytest.raises(ConfigError, match="listener CONTROLLER has no security protocol"):
        config_from_properties({**BASE, "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT"})


def test_an_unknown_protocol_in_the_map_is_refused() -> None:
    with pytest.raises(ConfigError, match="'KERBEROS' is not a security protocol"):
        config_from_properties(
            {**BASE, "listener.security.protocol.map": "PLAINTEXT:KERBEROS,CONTROLLER:PLAINTEXT"}
        )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
            "authorizer.class.name: Value error, only org.apache.kafka.metadata.authorizer."
            "StandardAuthorizer is implemented",
        ),
        ({"principal.builder.class": "x.Builder"}, "principal.builder.class"),
        ({"ssl.keymanager.algorithm": "SunX509"}, "ssl.keymanager.algorithm: not supported"),
        ({"sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name: not supported"),
        (
            {"listener.name.plaintext.ssl.engine.factory.class": "x"},
            "listener.name.plaintext.ssl.engine.factory.class: not supported",
        ),
        (
            {"listener.name.x.gssapi.sasl.jaas.config": "a required;"},
            "SASL mechanism GSSAPI is not implemented",
        ),
        ({"sasl.jaas.config": "a required;"}, "listener.name.<listener>.<mechanism>"),
        (
            {"security.inter.broker.protocol": "PLAINTEXT", "inter.broker.listener.name": "X"},
            "only one of it and inter.broker.listener.name",
        ),
        ({"connections.max.reauth.ms": "soon"}, "connections.max.reauth.ms: 'soon' is not"),
    ],
)
def test_keys_of_what_is_not_built_stop_start_up(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_properties({**BASE, **extra})


SASL_SSL_BASE = {
    **BASE,
    "listeners": "SASL_SSL://localhost:9092,CONTROLLER://localhost:9093",
    "inter.broker.listener.name": "SASL_SSL",
}
KEYSTORE = {"ssl.keystore.location": "/k", "ssl.keystore.type": "PEM"}  # loaded last


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (KEYSTORE, "GSSAPI \\(Kafka's default\\) is not implemented"),
        (
            {"sasl.enabled.mechanisms": "SCRAM-SHA-512"},
            "ssl.keystore.location: listener SASL_SSL uses TLS and needs a keystore",
        ),
        (
            {"sasl.enabled.mechanisms": "SCRAM-SHA-512", "ssl.keystore.location": "/k"},
            "ssl.keystore.type: JKS \\(Kafka's default\\) is not supported",
        ),
        (
            {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "ssl.keystore.location": "/nonexistent/k.pem",
                "ssl.keystore.type": "PEM",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    'username="admin" password="pw";'
                ),
            },
            "ssl.keystore.location: cannot load PEM keystore /nonexistent/k.pem",
        ),
        (
            {
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "ssl.keystore.location": "/k",
                "ssl.keystore.type": "PEM",
                "ssl.enabled.protocols": "TLSv1.1,TLSv1.2",
            },
            "ssl.enabled.protocols: TLSv1.1 is not supported",
        ),
        (
            {**KEYSTORE, "listener.name.sasl_ssl.sasl.enabled.mechanisms": "PLAIN"},
            "listener.name.sasl_ssl.plain.sasl.jaas.config: listener SASL_SSL enables PLAIN",
        ),
        (
            {
                **KEYSTORE,
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                    "com.example.Other required;"
                ),
            },
            "login module com.example.Other is not supported for SCRAM-SHA-512",
        ),
        (
            {
                **KEYSTORE,
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": 'x required a="b"',
            },
            "a JAAS entry ends with ';'",
        ),
    ],
)
def test_a_sasl_ssl_listener_needs_what_is_built(extra: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_properties({**SASL_SSL_BASE, **extra})


def test_a_sasl_plaintext_listener_reads_plain_users_and_the_peer_login() -> None:
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="a \\"quoted\\" pw";'
    )
    config = config_from_properties(
        {
            **BASE,
            "listeners": "SASL_PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            "listener.security.protocol.map": (
                "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"
            ),
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "listener.name.controller.plain.sasl.jaas.config": jaas,
        }
    )
    security = config.security()
    listener = security.listeners["SASL_PLAINTEXT"]
    assert listener.protocol is SecurityProtocol.SASL_PLAINTEXT
    assert dict(listener.plain_users) == {"admin": "admin-secret", "alice": 'a "quoted" pw'}
    assert security.controller_client.sasl is not None
    assert security.controller_client.sasl.username == "admin"
    assert security.inter_broker_client.sasl is not None
    assert security.inter_broker_client.sasl.mechanism == "PLAIN"
    assert unknown_key_warnings(config) == []


def test_a_peer_mechanism_not_enabled_on_the_listener_is_refused() -> None:
    with pytest.raises(
        ConfigError, match=r"sasl\.mechanism\.controller\.protocol: SASL mechanism GSSAPI"
    ):
        config_from_properties(
            {
                **BASE,
                "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "PLAIN",
                "listener.name.controller.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'username="a" password="b" user_a="b";'
                ),
            }
        )


def test_security_keys_that_are_read_raise_no_unknown_key_warning() -> None:
    config = config_from_properties(
        {
            **BASE,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "security.inter.broker.protocol": "PLAINTEXT",
            "ssl.keystore.location": "/nowhere",
            "connection.failed.authentication.delay.ms": "50",
            "authorizer.class.name": "",
        }
    )
    assert unknown_key_warnings(config) == []
    assert config.inter_broker_listener_name == "PLAINTEXT"


def _write(tmp_path: Path, props: dict[str, str]) -> Path:
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def test_a_kafka_sasl_ssl_config_with_an_authorizer_is_one_line_and_a_failed_start(
    tmp_path: Path,
) -> None:
    """Issue 29: this file used to start, warn about each key, and serve plaintext while
    logging "Serving SASL_SSL://". (Kafka's StandardAuthorizer is built now: ZooKeeper's
    AclAuthorizer, which KRaft does not run, stands for an authorizer that is not.)"""
    props = {
        **BASE,
        "listeners": "SASL_SSL://127.0.0.1:0,CONTROLLER://127.0.0.1:0",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "ssl.keystore.location": str(tmp_path / "none.p12"),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "log.dirs": str(tmp_path / "data"),
    }
    result = subprocess.run(
        [str(BIN / "kraft-server"), "start", str(_write(tmp_path, props))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert "authorizer.class.name" in result.stderr
    assert "Serving" not in result.stderr + result.stdout


def test_scram_cannot_be_the_controllers_mechanism() -> None:
    """As in Kafka: SCRAM credentials are in the metadata log, which the controllers serve
    only once they reach each other."""
    with pytest.raises(ConfigError, match="SCRAM-SHA-512 cannot log in to the controllers"):
        config_from_properties(
            {
                **BASE,
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
                "listener.name.controller.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    'username="a" password="b";'
                ),
            }
        )


# ---- the operator tools' --command-config (Kafka client properties) -----------------------
def test_a_command_config_gives_the_tools_tls_and_a_sasl_login(tmp_path: Path) -> None:
    from kraft.security import client_security
    from protocol.security import SaslCredentials
    from tests.kraft.secured import make_ca

    certs = make_ca(tmp_path / "certs")
    props = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
        'required username="admin" password="admin-secret";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "client.id": "ignored: a client key the tools do not need",
    }
    security = client_security(props, "admin.properties")
    assert security.protocol is SecurityProtocol.SASL_SSL
    assert security.sasl == SaslCredentials("SCRAM-SHA-512", "admin", "admin-secret")
    assert security.tls is not None and security.tls.truststore_location == str(certs.ca)
    assert security.tls.endpoint_identification
    assert client_security({}, "empty").protocol is SecurityProtocol.PLAINTEXT


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"security.protocol": "SASL_SSH"}, "security.protocol 'SASL_SSH' is not PLAINTEXT"),
        ({"security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism GSSAPI (Kafka's default)"),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"},
            "sasl.jaas.config is needed for PLAIN",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                'required username="a" password="b";',
            },
            "login module org.apache.kafka.common.security.scram.ScramLoginModule is not",
        ),
        (
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
                'required username="a";',
            },
            'needs username="..." password="..."',
        ),
        (
            {"security.protocol": "SSL", "ssl.truststore.location": "/no/such/ca.jks"},
            "ssl.truststore.type: JKS (Kafka's default) is not supported",
        ),
        (
            {
                "security.protocol": "SSL",
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": "/no/such/ca.pem",
            },
            "/no/such/ca.pem",
        ),
    ],
)
def test_a_command_config_the_tools_cannot_use_is_one_line(
    props: dict[str, str], message: str
) -> None:
    from kraft.security import SecurityConfigError, client_security

    with pytest.raises(SecurityConfigError) as refused:
        client_security(props, "admin.properties")
    text = str(refused.value)
    assert text.startswith("admin.properties: ") and "\n" not in text
    assert message in text, text


def test_the_tools_refuse_an_unusable_command_config_with_one_line(tmp_path: Path) -> None:
    config = str(tmp_path / "admin.properties")
    Path(config).write_text("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n")
    bootstrap = ["--bootstrap-controller", "127.0.0.1:1", "--command-config", config]
    from kraft.storage import random_uuid

    remove = ["--controller-id", "2", "--controller-directory-id", random_uuid()]
    for argv in (
        ["describe-quorum", *bootstrap],
        ["remove-controller", *bootstrap, *remove],
        ["metadata-shell", *bootstrap, "ls"],
    ):
        done = subprocess.run(
            [str(BIN / "kraft-server"), *argv], capture_output=True, text=True, check=False
        )
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr
        assert done.stderr.startswith(f"kraft-server {argv[0]}: --command-config "), done.stderr
        assert "sasl.mechanism OAUTHBEARER is not implemented" in done.stderr, done.stderr
