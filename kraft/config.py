"""The server configuration: Kafka's own keys from server.properties, validated by pydantic.

A bad value fails start-up with one line that names the key, so an operator can fix the file
without reading a stack trace. Keys we do not know are kept, and warned about as Kafka does
(naming the closest known key, since most are typos).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from broker.group.config import KEYS as GROUP_COORDINATOR_KEYS
from broker.group.config import GroupCoordinatorConfig
from broker.replica_manager import REPLICATION_KEYS
from broker.txn.config import KEYS as TXN_COORDINATOR_KEYS
from broker.txn.config import TransactionCoordinatorConfig
from kraft.properties import parse_properties
from kraft.security import NodeSecurity, SecurityConfigError, is_security_key, parse_security
from log.config import LOG_CONFIG_KEYS, LOG_MANAGER_KEYS, LogConfig, LogManagerConfig
from metadata.authorizer import AuthorizerConfig
from metadata.config_defs import BROKER_DYNAMIC_CONFIGS, TOPIC_CONFIGS

Role = Literal["broker", "controller"]
MAX_PORT = 65535
# Keys of Kafka's own shipped server.properties that kraft-py has no use for: a user's file
# carries over without a warning for each (any other unknown key is warned about).
KAFKA_KEYS_NOT_USED = frozenset(
    {
        "group.initial.rebalance.delay.ms",
        # One log cleaner task on the event loop (log/manager.py), never a thread pool.
        "log.cleaner.threads",
        "num.io.threads",
        "num.network.threads",
        "num.recovery.threads.per.data.dir",
        "offsets.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "socket.receive.buffer.bytes",
        "socket.request.max.bytes",
        "socket.send.buffer.bytes",
    }
)


class ConfigError(ValueError):
    """server.properties is missing, unreadable or invalid; the message names the key."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener: a name (PLAINTEXT, CONTROLLER...) and where it binds."""

    name: str
    host: str
    port: int


def parse_endpoints(text: str) -> list[Endpoint]:
    """``NAME://host:port,...`` (an empty host means all interfaces, as in Kafka; port 0
    binds any free port)."""
    endpoints = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, rest = item.partition("://")
        host, colon, port = rest.rpartition(":")
        if not sep or not colon or not port.isdigit() or not name:
            raise ValueError(f"{item!r} is not NAME://host:port")
        endpoints.append(Endpoint(name.upper(), host.strip("[]"), _port(item, port, 0)))
    return endpoints


def _port(item: str, text: str, lowest: int) -> int:
    port = int(text)
    if not lowest <= port <= MAX_PORT:
        raise ValueError(f"{item!r}: port {port} is not in {lowest}..{MAX_PORT}")
    return port


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    """``id@host:port,...`` as in controller.quorum.voters."""
    voters: dict[int, tuple[str, int]] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        node, at, address = item.partition("@")
        host, colon, port = address.rpartition(":")
        if not at or not colon or not node.isdigit() or not port.isdigit():
            raise ValueError(f"{item!r} is not id@host:port")
        voters[int(node)] = (host.strip("[]"), _port(item, port, 1))
    return voters


STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def parse_bootstrap_servers(text: str) -> list[tuple[str, int]]:
    """``host:port,...`` as in controller.quorum.bootstrap.servers."""
    servers = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        host, colon, port = item.rpartition(":")
        if not colon or not host or not port.isdigit():
            raise ValueError(f"{item!r} is not host:port")
        servers.append((host.strip("[]"), _port(item, port, 1)))
    return servers


class ServerConfig(BaseModel):
    """The keys kraft-py uses, under their Kafka names (aliases)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow", frozen=True)

    process_roles: frozenset[Role] = Field(alias="process.roles")
    node_id: int = Field(alias="node.id", ge=0)
    # A static quorum (kraft.version 0) names its voters here; a dynamic one (KIP-853) gives
    # bootstrap servers instead and keeps its voter set in the metadata log.
    controller_quorum_voters: dict[int, tuple[str, int]] = Field(
        default_factory=dict, alias="controller.quorum.voters"
    )
    controller_quorum_bootstrap_servers: list[tuple[str, int]] = Field(
        default_factory=list, alias="controller.quorum.bootstrap.servers"
    )
    listeners: list[Endpoint] = Field(alias="listeners")
    advertised_listeners: list[Endpoint] | None = Field(default=None, alias="advertised.listeners")
    controller_listener_names: list[str] = Field(alias="controller.listener.names")
    log_dirs: list[str] = Field(alias="log.dirs")
    metadata_log_dir: str | None = Field(default=None, alias="metadata.log.dir")
    election_timeout_ms: int = Field(
        default=1000, alias="controller.quorum.election.timeout.ms", gt=0
    )
    fetch_timeout_ms: int = Field(default=2000, alias="controller.quorum.fetch.timeout.ms", gt=0)
    election_backoff_max_ms: int = Field(
        default=1000, alias="controller.quorum.election.backoff.max.ms", gt=0
    )
    request_timeout_ms: int = Field(
        default=2000, alias="controller.quorum.request.timeout.ms", gt=0
    )
    max_idle_interval_ms: int = Field(default=500, alias="metadata.max.idle.interval.ms", ge=0)
    snapshot_max_bytes: int = Field(
        default=20 * 1024 * 1024, alias="metadata.log.max.record.bytes.between.snapshots", gt=0
    )
    snapshot_max_interval_ms: int = Field(
        default=3_600_000, alias="metadata.log.max.snapshot.interval.ms", ge=0
    )
    heartbeat_interval_ms: int = Field(default=2000, alias="broker.heartbeat.interval.ms", gt=0)
    session_timeout_ms: int = Field(default=9000, alias="broker.session.timeout.ms", gt=0)
    num_partitions: int = Field(default=1, alias="num.partitions", gt=0)
    default_replication_factor: int = Field(default=1, alias="default.replication.factor", gt=0)
    unclean_leader_election_enable: bool = Field(
        default=False, alias="unclean.leader.election.enable"
    )
    auto_create_topics_enable: bool = Field(default=True, alias="auto.create.topics.enable")
    auto_leader_rebalance_enable: bool = Field(default=True, alias="auto.leader.rebalance.enable")
    leader_imbalance_check_interval_seconds: int = Field(
        default=300, alias="leader.imbalance.check.interval.seconds", gt=0
    )
    producer_id_expiration_ms: int = Field(
        default=86_400_000, alias="producer.id.expiration.ms", gt=0
    )
    socket_request_max_bytes: int = Field(
        default=104_857_600, alias="socket.request.max.bytes", gt=0
    )
    # Kafka's default is -1 (unbounded); -1 is accepted with that meaning (docs/operations.md).
    queued_max_request_bytes: int = Field(
        default=104_857_600, alias="queued.max.request.bytes", ge=-1
    )
    connections_max_idle_ms: int = Field(default=600_000, alias="connections.max.idle.ms", gt=0)
    # Client quotas' sampling (broker/quotas.py): samples kept and the span of each.
    quota_window_num: int = Field(default=11, alias="quota.window.num", ge=1)
    quota_window_size_seconds: int = Field(default=1, alias="quota.window.size.seconds", ge=1)
    broker_rack: str | None = Field(default=None, alias="broker.rack")
    max_incremental_fetch_session_cache_slots: int = Field(
        default=1000, alias="max.incremental.fetch.session.cache.slots", ge=0
    )
    inter_broker_listener_name: str = Field(default="PLAINTEXT", alias="inter.broker.listener.name")
    # The authorizer (docs/acls.md): Kafka's StandardAuthorizer is the one accepted value.
    authorizer_class_name: str = Field(default="", alias="authorizer.class.name")
    super_users: str = Field(default="", alias="super.users")
    allow_everyone_if_no_acl_found: bool = Field(
        default=False, alias="allow.everyone.if.no.acl.found"
    )

    @field_validator("authorizer_class_name")
    @classmethod
    def _authorizer(cls, value: str) -> str:
        value = value.strip()
        if value not in ("", STANDARD_AUTHORIZER):
            raise ValueError(f"only {STANDARD_AUTHORIZER} is implemented, not {value!r}")
        return value

    @field_validator("super_users")
    @classmethod
    def _super_users(cls, value: str) -> str:
        for principal in value.split(";"):
            kind, _, name = principal.strip().partition(":")
            if principal.strip() and (not kind or not name):
                raise ValueError(f"{principal.strip()!r} is not a principal (User:name)")
        return value

    def authorizer(self) -> AuthorizerConfig | None:
        """The authorizer's settings, or None when no authorizer is configured."""
        if not self.authorizer_class_name:
            return None
        users = frozenset(p.strip() for p in self.super_users.split(";") if p.strip())
        return AuthorizerConfig(users, self.allow_everyone_if_no_acl_found)

    # Where Prometheus scrapes /metrics (kraft/metrics_http.py); absent or empty: not served.
    metrics_listener: Endpoint | None = Field(default=None, alias="metrics.listener")

    @field_validator("metrics_listener", mode="before")
    @classmethod
    def _metrics_listener(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        if not value.strip():
            return None
        endpoints = parse_endpoints(value)
        if len(endpoints) != 1 or endpoints[0].name != "HTTP":
            raise ValueError(f"{value!r} is not http://host:port")
        return endpoints[0]

    @field_validator("queued_max_request_bytes")
    @classmethod
    def _queued_bytes(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be positive, or -1 for no limit")
        return value

    @field_validator("process_roles", mode="before")
    @classmethod
    def _roles(cls, value: object) -> object:
        if isinstance(value, str):
            roles = [r.strip() for r in value.split(",") if r.strip()]
            if not roles:
                raise ValueError("must name broker, controller or both")
            return roles
        return value

    @field_validator("controller_quorum_voters", mode="before")
    @classmethod
    def _voters(cls, value: object) -> object:
        return parse_voters(value) if isinstance(value, str) else value

    @field_validator("controller_quorum_bootstrap_servers", mode="before")
    @classmethod
    def _bootstrap(cls, value: object) -> object:
        return parse_bootstrap_servers(value) if isinstance(value, str) else value

    @property
    def dynamic_quorum(self) -> bool:
        """True when the voters live in the log (controller.quorum.bootstrap.servers)."""
        return not self.controller_quorum_voters

    def controller_addresses(self) -> dict[int, tuple[str, int]]:
        """Where to look for the active controller before the voter set is known: the
        static voters, else the bootstrap servers under negative ids (as Kafka's own)."""
        if self.controller_quorum_voters:
            return dict(self.controller_quorum_voters)
        return {-2 - i: s for i, s in enumerate(self.controller_quorum_bootstrap_servers)}

    @field_validator("listeners", "advertised_listeners", mode="before")
    @classmethod
    def _endpoints(cls, value: object) -> object:
        return parse_endpoints(value) if isinstance(value, str) else value

    @field_validator("controller_listener_names", "log_dirs", mode="before")
    @classmethod
    def _list(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("log_dirs")
    @classmethod
    def _some_log_dir(cls, value: list[str]) -> list[str]:
        # Every node keeps meta.properties (and a controller its quorum-state) in a log dir;
        # Kafka's log.dirs falls back to log.dir, which kraft-py does not have.
        if not value:
            raise ValueError("must name at least one directory")
        return value

    @property
    def metadata_dir(self) -> str:
        """Where __cluster_metadata-0 and quorum-state live (metadata.log.dir or log.dirs[0])."""
        return self.metadata_log_dir or self.log_dirs[0]

    @property
    def all_dirs(self) -> list[str]:
        dirs = list(self.log_dirs)
        if self.metadata_dir not in dirs:
            dirs.append(self.metadata_dir)
        return dirs

    def broker_endpoints(self) -> list[Endpoint]:
        """The listeners that serve Kafka clients: all but the controller listeners."""
        return [e for e in self.listeners if e.name not in self.controller_listener_names]

    def advertised_broker_endpoints(self) -> list[Endpoint]:
        """What the broker registers: advertised.listeners (else listeners), minus the
        controller listeners; an empty host advertises localhost, as a client can dial it."""
        endpoints = self.advertised_listeners or self.listeners
        return [
            Endpoint(e.name, e.host or "localhost", e.port)
            for e in endpoints
            if e.name not in self.controller_listener_names
        ]

    def security(self) -> NodeSecurity:
        """Every listener's security protocol, TLS and SASL settings (kraft/security.py);
        validated by config_from_properties, so this raises only for a config built
        without it."""
        return parse_security(
            self.model_extra or {},
            listener_names=[e.name for e in self.listeners],
            controller_names=[n.upper() for n in self.controller_listener_names],
            inter_broker_listener=self.inter_broker_listener_name,
            is_broker="broker" in self.process_roles,
        )

    def controller_endpoint(self) -> Endpoint:
        """The listener this node's quorum RPCs are served on."""
        for endpoint in self.listeners:
            if endpoint.name in self.controller_listener_names:
                return endpoint
        raise ConfigError(
            "controller.listener.names: none of "
            f"{','.join(self.controller_listener_names)} is in listeners"
        )


def load_config(path: str) -> ServerConfig:
    """Read and validate server.properties; ConfigError with one line on any problem."""
    try:
        text = Path(path).read_text()
    except OSError as error:
        raise ConfigError(f"{path}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not a properties file (byte {error.object[error.start]:#04x} at offset "
            f"{error.start} is not UTF-8 text)"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{path}: not a properties file (it contains NUL bytes)")
    try:
        props = parse_properties(text, path)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return config_from_properties(props, path)


def config_from_properties(
    props: dict[str, str], source: str = "server.properties"
) -> ServerConfig:
    """Validate parsed properties; relative log dirs are taken as given (cwd-relative)."""
    inter_broker_protocol = props.get("security.inter.broker.protocol")
    if inter_broker_protocol is not None:
        # Kafka: the inter-broker listener is the one named after this protocol; the two
        # keys together are ambiguous and refused.
        if "inter.broker.listener.name" in props:
            raise ConfigError(
                f"{source}: security.inter.broker.protocol: only one of it and "
                "inter.broker.listener.name may be set"
            )
        props = {**props, "inter.broker.listener.name": inter_broker_protocol.strip().upper()}
    try:
        config = ServerConfig.model_validate(props)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) if first["loc"] else "?"
        key = _kafka_key(key)
        raise ConfigError(f"{source}: {key}: {first['msg']}") from None
    resolved = {d: PurePath(os.path.abspath(d)) for d in config.all_dirs}
    for inner, inner_path in resolved.items():
        for outer, outer_path in resolved.items():
            if inner != outer and inner_path.is_relative_to(outer_path):
                # The outer dir's LogManager would list the inner one as a partition dir.
                raise ConfigError(f"{source}: log.dirs: {inner} is inside {outer}")
    extra = dict(config.model_extra or {})
    try:  # the log layer's keys are checked here, not when the broker starts
        LogConfig.from_properties(extra)
        LogManagerConfig.from_properties(extra)
    except ValueError as error:
        raise ConfigError(f"{source}: {error}") from None
    if not config.controller_quorum_voters and not config.controller_quorum_bootstrap_servers:
        raise ConfigError(
            f"{source}: controller.quorum.voters or controller.quorum.bootstrap.servers is required"
        )
    static = config.controller_quorum_voters
    if "controller" in config.process_roles and static and config.node_id not in static:
        raise ConfigError(
            f"{source}: controller.quorum.voters: node.id {config.node_id} is a controller "
            "but not one of the voters"
        )
    metrics = config.metrics_listener
    if metrics is not None and metrics.port != 0:
        for endpoint in config.listeners:
            if endpoint.port == metrics.port and (
                endpoint.host == metrics.host or not endpoint.host or not metrics.host
            ):
                raise ConfigError(
                    f"{source}: metrics.listener: port {metrics.port} is the {endpoint.name} "
                    "listener's; metrics are served on a port of their own"
                )
    if "controller" in config.process_roles:
        config.controller_endpoint()
    if "broker" in config.process_roles:
        names = [e.name for e in config.broker_endpoints()]
        if not names:
            raise ConfigError(f"{source}: listeners: a broker needs a non-controller listener")
        if config.inter_broker_listener_name not in names:
            raise ConfigError(
                f"{source}: inter.broker.listener.name: {config.inter_broker_listener_name} "
                f"is not one of the broker listeners {','.join(names)}"
            )
        try:
            GroupCoordinatorConfig.from_properties(config.model_extra or {})
            TransactionCoordinatorConfig.from_properties(config.model_extra or {})
        except ValueError as error:
            raise ConfigError(f"{source}: {error}") from None
    try:
        config.security()
    except SecurityConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    return config


def unknown_key_warnings(config: ServerConfig) -> list[str]:
    """One warning per key nothing reads, naming the closest known key, as Kafka warns
    "The configuration 'x' was supplied but isn't a known config." (a typo is otherwise
    silently ignored)."""
    known = sorted(_KNOWN_KEYS)
    warnings = []
    for key in sorted(config.model_extra or {}):
        if key in _KNOWN_KEYS or is_security_key(key):
            continue
        close = difflib.get_close_matches(key, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        warnings.append(f"The configuration '{key}' was supplied but isn't a known config{hint}")
    return warnings


def _kafka_key(field_name: str) -> str:
    info = ServerConfig.model_fields.get(field_name)
    return info.alias if info is not None and info.alias else field_name


_KNOWN_KEYS = frozenset(
    {info.alias for info in ServerConfig.model_fields.values() if info.alias}
    | LOG_CONFIG_KEYS
    | LOG_MANAGER_KEYS.keys()
    | {d.broker_synonym for d in TOPIC_CONFIGS.values() if d.broker_synonym}
    | BROKER_DYNAMIC_CONFIGS.keys()
    | KAFKA_KEYS_NOT_USED
    | GROUP_COORDINATOR_KEYS
    | TXN_COORDINATOR_KEYS
    | REPLICATION_KEYS
)
