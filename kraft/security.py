"""Listener security from server.properties, under Kafka's keys, refusing what is not built.

A Kafka server.properties secures listeners through ``listener.security.protocol.map``,
``ssl.*`` and ``sasl.*`` keys (each may be given per listener as
``listener.name.<listener>.<key>``), JAAS entries and an authorizer. A key kraft-py does not
implement must never be ignored, or an operator would believe a cluster secured that serves
plaintext to anyone: every such key stops start-up with one line naming it (ConfigError).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from protocol.security import (
    MECHANISMS,
    PLAIN,
    SCRAM_MECHANISMS,
    ClientSecurity,
    JaasError,
    ListenerSecurity,
    SaslCredentials,
    SecurityProtocol,
    TlsSettings,
    parse_jaas,
    parse_principal_rules,
)
from protocol.tls import TlsConfigError, client_context, server_context

# What is built (issue 29 lists the rest). A protocol or mechanism outside these stops start-up.
IMPLEMENTED_PROTOCOLS = frozenset(SecurityProtocol)
IMPLEMENTED_MECHANISMS = frozenset(MECHANISMS)
DEFAULT_PROTOCOL_MAP = {p.name: p for p in SecurityProtocol}
# Kafka's defaults, kept so that an unset key means what it means to Kafka.
KAFKA_DEFAULT_MECHANISM = "GSSAPI"
KAFKA_DEFAULT_STORE_TYPE = "JKS"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

# ssl.* keys that are read (each also as listener.name.<listener>.ssl.*).
SSL_KEYS = frozenset(
    {
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.password",
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.cipher.suites",
        "ssl.protocol",
        "ssl.principal.mapping.rules",
        "ssl.endpoint.identification.algorithm",
    }
)
SASL_KEYS = frozenset(
    {
        "sasl.enabled.mechanisms",
        "sasl.mechanism.inter.broker.protocol",
        "sasl.mechanism.controller.protocol",
        "sasl.server.max.receive.size",
    }
)
OTHER_KEYS = frozenset(
    {
        "listener.security.protocol.map",
        "security.inter.broker.protocol",
        "connections.max.reauth.ms",
        "connection.failed.authentication.delay.ms",
    }
)
KNOWN_KEYS = SSL_KEYS | SASL_KEYS | OTHER_KEYS
# Keys of security features that are not built: set at all, they stop start-up.
NOT_BUILT = {
    "principal.builder.class": "only Kafka's default principal builder is built",
    "sasl.jaas.config": (
        "a broker reads JAAS entries per listener and mechanism: "
        "listener.name.<listener>.<mechanism>.sasl.jaas.config"
    ),
}
_TLS_VERSIONS = ("TLSv1.2", "TLSv1.3")
_CONTROLLER_MECHANISM_KEY = "sasl.mechanism.controller.protocol"
_LISTENER_KEY = re.compile(r"listener\.name\.([^.]+)\.(.+)")


class SecurityConfigError(ValueError):
    """One line naming the key: a security setting that is wrong or not built."""


@dataclass(frozen=True, slots=True)
class NodeSecurity:
    """Every listener's security and how this node connects to its peers."""

    listeners: Mapping[str, ListenerSecurity] = field(default_factory=dict)
    # To the controllers (broker -> controller, and raft between controllers).
    controller_client: ClientSecurity = field(default_factory=ClientSecurity)
    # To the other brokers' inter-broker listener (replica fetchers).
    inter_broker_client: ClientSecurity = field(default_factory=ClientSecurity)

    def protocol_of(self, listener: str) -> SecurityProtocol:
        security = self.listeners.get(listener)
        return security.protocol if security is not None else SecurityProtocol.PLAINTEXT


def parse_protocol_map(
    text: str | None, controller_names: list[str]
) -> dict[str, SecurityProtocol]:
    """listener.security.protocol.map: ``NAME:PROTOCOL,...``. When unset: Kafka's default
    (each protocol's own name) and the controller listeners as PLAINTEXT, as KRaft does."""
    if text is None:
        mapping = dict(DEFAULT_PROTOCOL_MAP)
        for name in controller_names:
            mapping.setdefault(name.upper(), SecurityProtocol.PLAINTEXT)
        return mapping
    mapping = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, colon, protocol = item.partition(":")
        if not colon or not name:
            raise SecurityConfigError(
                f"listener.security.protocol.map: {item!r} is not LISTENER:PROTOCOL"
            )
        try:
            mapping[name.strip().upper()] = SecurityProtocol[protocol.strip().upper()]
        except KeyError:
            raise SecurityConfigError(
                f"listener.security.protocol.map: {protocol.strip()!r} is not a security "
                f"protocol (one of {', '.join(p.name for p in SecurityProtocol)})"
            ) from None
    return mapping


def parse_security(
    props: Mapping[str, str],
    *,
    listener_names: list[str],
    controller_names: list[str],
    inter_broker_listener: str | None,
    is_broker: bool,
) -> NodeSecurity:
    """Check every security key and build the node's security; SecurityConfigError names
    the first key that is wrong or asks for something not built."""
    _refuse_unbuilt(props)
    mapping = parse_protocol_map(props.get("listener.security.protocol.map"), controller_names)
    names = list(dict.fromkeys([*listener_names, *controller_names]))
    for name in names:
        if name not in mapping:
            raise SecurityConfigError(
                f"listener.security.protocol.map: listener {name} has no security protocol "
                "(add NAME:PROTOCOL for it)"
            )
        if mapping[name] not in IMPLEMENTED_PROTOCOLS:
            raise SecurityConfigError(
                f"listeners: {name} uses {mapping[name].name}, which kraft-py does not "
                "implement yet"
            )
    delay_ms = _int(props, "connection.failed.authentication.delay.ms", 100)
    reauth_ms = _int(props, "connections.max.reauth.ms", 0)
    listeners = {name: _listener(props, name, mapping[name], reauth_ms, delay_ms) for name in names}
    controller = controller_names[0] if controller_names else None
    controller_client = (
        _client(props, listeners[controller], "sasl.mechanism.controller.protocol")
        if controller is not None
        else ClientSecurity()
    )
    inter_broker_client = ClientSecurity()
    if is_broker and inter_broker_listener is not None and inter_broker_listener in listeners:
        inter_broker_client = _client(
            props, listeners[inter_broker_listener], "sasl.mechanism.inter.broker.protocol"
        )
    for security in listeners.values():
        if security.tls is not None:
            _check_tls(security.tls, server=True)
    for client in (controller_client, inter_broker_client):
        if client.tls is not None:
            _check_tls(client.tls, server=False)
    return NodeSecurity(listeners, controller_client, inter_broker_client)


def _check_tls(settings: TlsSettings, *, server: bool) -> None:
    """Load the keystore and truststore now, so an unreadable one stops start-up with one
    line instead of failing each connection."""
    try:
        if server:
            server_context(settings)
        else:
            client_context(settings)
    except TlsConfigError as error:
        raise SecurityConfigError(str(error)) from None


def is_security_key(key: str) -> bool:
    """Whether this module reads ``key`` (so it is not an unknown key to warn about)."""
    match = _LISTENER_KEY.fullmatch(key)
    base = match.group(2) if match is not None else key
    return (
        base in KNOWN_KEYS
        or key in NOT_BUILT
        or (match is not None and re.fullmatch(r"[a-z0-9-]+\.sasl\.jaas\.config", base) is not None)
    )


def _refuse_unbuilt(props: Mapping[str, str]) -> None:
    for key in sorted(props):
        if key in NOT_BUILT:
            raise SecurityConfigError(f"{key}: not supported by kraft-py: {NOT_BUILT[key]}")
        match = _LISTENER_KEY.fullmatch(key)
        base = match.group(2) if match is not None else key
        if match is not None:
            jaas = re.fullmatch(r"([a-z0-9-]+)\.sasl\.jaas\.config", base)
            if jaas is not None:
                if jaas.group(1).upper() not in IMPLEMENTED_MECHANISMS:
                    raise SecurityConfigError(
                        f"{key}: SASL mechanism {jaas.group(1).upper()} is not implemented "
                        f"(only {', '.join(sorted(IMPLEMENTED_MECHANISMS)) or 'none yet'})"
                    )
                continue
            if base in (
                "sasl.mechanism.inter.broker.protocol",
                "sasl.mechanism.controller.protocol",
            ):
                raise SecurityConfigError(f"{key}: {base} is not a per-listener key")
        if base.startswith(("ssl.", "sasl.")) and base not in SSL_KEYS | SASL_KEYS:
            raise SecurityConfigError(f"{key}: not supported by kraft-py (docs/security.md)")


def _get(
    props: Mapping[str, str], listener: str, key: str, default: str | None = None
) -> str | None:
    """A key's value for ``listener``: listener.name.<listener>.<key>, else <key>."""
    value = props.get(f"listener.name.{listener.lower()}.{key}")
    if value is None:
        value = props.get(key, default)
    return value


def _key_name(props: Mapping[str, str], listener: str, key: str) -> str:
    prefixed = f"listener.name.{listener.lower()}.{key}"
    return prefixed if prefixed in props else key


def _int(props: Mapping[str, str], key: str, default: int) -> int:
    text = props.get(key)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise SecurityConfigError(f"{key}: {text!r} is not an integer") from None
    if value < 0:
        raise SecurityConfigError(f"{key}: must be 0 or more")
    return value


def _listener(
    props: Mapping[str, str],
    name: str,
    protocol: SecurityProtocol,
    reauth_ms: int,
    delay_ms: int,
) -> ListenerSecurity:
    tls = _tls(props, name) if protocol.uses_tls else None
    mechanisms: tuple[str, ...] = ()
    plain_users: dict[str, str] = {}
    if protocol.uses_sasl:
        key = _key_name(props, name, "sasl.enabled.mechanisms")
        text = _get(props, name, "sasl.enabled.mechanisms", KAFKA_DEFAULT_MECHANISM) or ""
        mechanisms = tuple(m.strip().upper() for m in text.split(",") if m.strip())
        if not mechanisms:
            raise SecurityConfigError(f"{key}: listener {name} is SASL but names no mechanism")
        for mechanism in mechanisms:
            if mechanism not in IMPLEMENTED_MECHANISMS:
                default = " (Kafka's default)" if mechanism == KAFKA_DEFAULT_MECHANISM else ""
                raise SecurityConfigError(
                    f"{key}: SASL mechanism {mechanism}{default} is not implemented; "
                    f"kraft-py has {', '.join(sorted(IMPLEMENTED_MECHANISMS)) or 'none yet'}"
                )
        if PLAIN in mechanisms:
            jaas = _jaas(props, name, PLAIN, PLAIN_LOGIN_MODULE, required=True)
            assert jaas is not None
            plain_users = {
                user.removeprefix("user_"): password
                for user, password in jaas.items()
                if user.startswith("user_")
            }
        for mechanism in mechanisms:
            if mechanism in SCRAM_MECHANISMS:
                _jaas(props, name, mechanism, SCRAM_LOGIN_MODULE, required=False)
    return ListenerSecurity(
        name,
        protocol,
        tls,
        mechanisms,
        plain_users,
        max_reauth_ms=_listener_int(props, name, "connections.max.reauth.ms", reauth_ms),
        failed_authentication_delay_ms=delay_ms,
        sasl_max_receive_bytes=_int(props, "sasl.server.max.receive.size", 524_288),
    )


def _listener_int(props: Mapping[str, str], listener: str, key: str, default: int) -> int:
    prefixed = f"listener.name.{listener.lower()}.{key}"
    return _int(props, prefixed, default) if prefixed in props else default


def _jaas(
    props: Mapping[str, str], listener: str, mechanism: str, module: str, *, required: bool
) -> dict[str, str] | None:
    key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = props.get(key)
    if text is None:
        if required:
            raise SecurityConfigError(
                f"{key}: listener {listener} enables {mechanism} but has no JAAS entry "
                f'({module} required user_<name>="<password>"...;)'
            )
        return None
    try:
        jaas = parse_jaas(text)
    except JaasError as error:
        raise SecurityConfigError(f"{key}: {error}") from None
    if jaas.login_module != module:
        raise SecurityConfigError(
            f"{key}: login module {jaas.login_module} is not supported for {mechanism} "
            f"(use {module})"
        )
    return dict(jaas.options)


def _store_types(
    get: Callable[[str, str], str | None], label: Callable[[str], str]
) -> dict[str, str]:
    """``ssl.keystore.type`` and ``ssl.truststore.type``, each PKCS12 or PEM (a store that is
    not given is PEM: its type is not used), for a listener and for a tool's client
    properties alike. SecurityConfigError names ``label(key)`` for a type Kafka reads and
    kraft-py does not (JKS, Kafka's default, or BCFKS)."""
    types = {}
    for key in ("ssl.keystore.type", "ssl.truststore.type"):
        store_type = (get(key, KAFKA_DEFAULT_STORE_TYPE) or "").upper()
        if not get(key.replace(".type", ".location"), ""):
            store_type = "PEM"
        if store_type not in ("PEM", "PKCS12"):
            default = " (Kafka's default)" if store_type == KAFKA_DEFAULT_STORE_TYPE else ""
            raise SecurityConfigError(
                f"{label(key)}: {store_type}{default} is not supported; use PKCS12 or PEM"
            )
        types[key] = store_type
    return types


def _endpoint_identification(
    get: Callable[[str, str], str | None], label: Callable[[str], str]
) -> bool:
    """Whether ``ssl.endpoint.identification.algorithm`` asks for the peer's host name to
    be checked (``https``, Kafka's default) or not (empty)."""
    key = "ssl.endpoint.identification.algorithm"
    algorithm = (get(key, "https") or "").lower()
    if algorithm not in ("https", ""):
        raise SecurityConfigError(f"{label(key)}: {algorithm!r} is not https or empty")
    return algorithm == "https"


def _tls(props: Mapping[str, str], name: str) -> TlsSettings:
    def get(key: str, default: str | None = None) -> str | None:
        value = _get(props, name, key, default)
        return value.strip() if value is not None else None

    location = get("ssl.keystore.location")
    if not location:
        raise SecurityConfigError(
            f"{_key_name(props, name, 'ssl.keystore.location')}: listener {name} uses TLS and "
            "needs a keystore (its key and certificate chain)"
        )

    def label(key: str) -> str:
        return _key_name(props, name, key)

    store_types = _store_types(get, label)
    client_auth = (get("ssl.client.auth", "none") or "none").lower()
    if client_auth not in ("none", "requested", "required"):
        raise SecurityConfigError(
            f"{_key_name(props, name, 'ssl.client.auth')}: {client_auth!r} is not none, "
            "requested or required"
        )
    protocols_text = get("ssl.enabled.protocols", ",".join(_TLS_VERSIONS)) or ""
    protocols = tuple(p.strip() for p in protocols_text.split(",") if p.strip())
    for version in protocols:
        if version not in _TLS_VERSIONS:
            raise SecurityConfigError(
                f"{_key_name(props, name, 'ssl.enabled.protocols')}: {version} is not "
                f"supported (only {', '.join(_TLS_VERSIONS)})"
            )
    if not protocols:
        raise SecurityConfigError(
            f"{_key_name(props, name, 'ssl.enabled.protocols')}: names no protocol"
        )
    ssl_protocol = get("ssl.protocol", "TLSv1.3")
    if ssl_protocol not in ("TLS", *_TLS_VERSIONS):
        raise SecurityConfigError(
            f"{_key_name(props, name, 'ssl.protocol')}: {ssl_protocol} is not supported "
            f"(TLS, {', '.join(_TLS_VERSIONS)})"
        )
    suites = tuple(s.strip() for s in (get("ssl.cipher.suites", "") or "").split(",") if s.strip())
    try:
        rules = parse_principal_rules(get("ssl.principal.mapping.rules", "DEFAULT") or "DEFAULT")
    except (ValueError, re.error) as error:
        raise SecurityConfigError(
            f"{_key_name(props, name, 'ssl.principal.mapping.rules')}: {error}"
        ) from None
    identification = _endpoint_identification(get, label)
    return TlsSettings(
        keystore_location=location,
        keystore_type=store_types["ssl.keystore.type"],  # type: ignore[arg-type]
        keystore_password=get("ssl.keystore.password"),
        key_password=get("ssl.key.password"),
        truststore_location=get("ssl.truststore.location") or None,
        truststore_type=store_types["ssl.truststore.type"],  # type: ignore[arg-type]
        truststore_password=get("ssl.truststore.password"),
        client_auth=client_auth,  # type: ignore[arg-type]
        enabled_protocols=protocols,
        cipher_suites=suites,
        endpoint_identification=identification,
        principal_rules=rules,
    )


def _client(
    props: Mapping[str, str], listener: ListenerSecurity, mechanism_key: str
) -> ClientSecurity:
    """How a peer logs in to ``listener``: its TLS settings, and for SASL the mechanism of
    ``mechanism_key`` with the username/password of that mechanism's JAAS entry."""
    if not listener.protocol.uses_sasl:
        return ClientSecurity(listener.protocol, listener.tls)
    mechanism = props.get(mechanism_key, KAFKA_DEFAULT_MECHANISM).strip().upper()
    if mechanism not in IMPLEMENTED_MECHANISMS:
        default = " (Kafka's default)" if mechanism == KAFKA_DEFAULT_MECHANISM else ""
        raise SecurityConfigError(
            f"{mechanism_key}: SASL mechanism {mechanism}{default} is not implemented; "
            f"kraft-py has {', '.join(sorted(IMPLEMENTED_MECHANISMS)) or 'none yet'}"
        )
    if mechanism_key == _CONTROLLER_MECHANISM_KEY and mechanism in SCRAM_MECHANISMS:
        # As Kafka: SCRAM credentials live in the metadata log, which the controllers can
        # only read once they reach each other; their listener needs PLAIN or mutual TLS.
        raise SecurityConfigError(
            f"{mechanism_key}: {mechanism} cannot log in to the controllers (its credentials "
            "are in the metadata log the controllers serve); use PLAIN or SSL client "
            "certificates on the controller listener"
        )
    if mechanism not in listener.mechanisms:
        raise SecurityConfigError(
            f"{mechanism_key}: {mechanism} is not enabled on listener {listener.name} "
            f"(sasl.enabled.mechanisms {','.join(listener.mechanisms)})"
        )
    module = PLAIN_LOGIN_MODULE if mechanism == PLAIN else SCRAM_LOGIN_MODULE
    jaas = _jaas(props, listener.name, mechanism, module, required=True) or {}
    key = f"listener.name.{listener.name.lower()}.{mechanism.lower()}.sasl.jaas.config"
    if "username" not in jaas or "password" not in jaas:
        raise SecurityConfigError(
            f'{key}: needs username="..." password="..." for this node to log in to '
            f"listener {listener.name} ({mechanism_key})"
        )
    return ClientSecurity(
        listener.protocol,
        listener.tls,
        SaslCredentials(mechanism, jaas["username"], jaas["password"]),
    )


def client_security(props: Mapping[str, str], source: str) -> ClientSecurity:
    """How an operator tool connects, from a Kafka client properties file (what Kafka's
    tools take as ``--command-config``): ``security.protocol``, for TLS the
    ``ssl.truststore.*``, ``ssl.keystore.*`` (mutual TLS), ``ssl.key.password`` and
    ``ssl.endpoint.identification.algorithm``, for SASL ``sasl.mechanism`` with the
    username and password of ``sasl.jaas.config`` (PlainLoginModule or ScramLoginModule).
    Other keys are client settings the tools do not need and are ignored. SecurityConfigError
    names ``source`` and the first key that is wrong or asks for something not built."""

    def get(key: str, default: str | None = None) -> str | None:
        value = props.get(key, default)
        return value.strip() if value is not None else None

    name = (get("security.protocol", "PLAINTEXT") or "").upper()
    try:
        protocol = SecurityProtocol[name]
    except KeyError:
        raise SecurityConfigError(
            f"{source}: security.protocol {name!r} is not PLAINTEXT, SSL, SASL_PLAINTEXT or "
            "SASL_SSL"
        ) from None
    tls = None
    if protocol.uses_tls:

        def label(key: str) -> str:
            return f"{source}: {key}"

        types = _store_types(get, label)
        identification = _endpoint_identification(get, label)
        tls = TlsSettings(
            keystore_location=get("ssl.keystore.location") or None,
            keystore_type=types["ssl.keystore.type"],  # type: ignore[arg-type]
            keystore_password=get("ssl.keystore.password"),
            key_password=get("ssl.key.password"),
            truststore_location=get("ssl.truststore.location") or None,
            truststore_type=types["ssl.truststore.type"],  # type: ignore[arg-type]
            truststore_password=get("ssl.truststore.password"),
            endpoint_identification=identification,
        )
        try:
            client_context(tls)
        except TlsConfigError as error:
            raise SecurityConfigError(f"{source}: {error}") from None
    sasl = None
    if protocol.uses_sasl:
        mechanism = (get("sasl.mechanism", KAFKA_DEFAULT_MECHANISM) or "").upper()
        if mechanism not in IMPLEMENTED_MECHANISMS:
            default = " (Kafka's default)" if mechanism == KAFKA_DEFAULT_MECHANISM else ""
            raise SecurityConfigError(
                f"{source}: sasl.mechanism {mechanism}{default} is not implemented; kraft-py "
                f"has {', '.join(sorted(IMPLEMENTED_MECHANISMS))}"
            )
        module = PLAIN_LOGIN_MODULE if mechanism == PLAIN else SCRAM_LOGIN_MODULE
        text = props.get("sasl.jaas.config")
        if text is None:
            raise SecurityConfigError(
                f"{source}: sasl.jaas.config is needed for {mechanism} ({module} required "
                'username="..." password="...";)'
            )
        try:
            jaas = parse_jaas(text)
        except JaasError as error:
            raise SecurityConfigError(f"{source}: sasl.jaas.config: {error}") from None
        options = dict(jaas.options)
        if jaas.login_module != module:
            raise SecurityConfigError(
                f"{source}: sasl.jaas.config: login module {jaas.login_module} is not "
                f"supported for {mechanism} (use {module})"
            )
        if "username" not in options or "password" not in options:
            raise SecurityConfigError(
                f'{source}: sasl.jaas.config needs username="..." password="..."'
            )
        sasl = SaslCredentials(mechanism, options["username"], options["password"])
    return ClientSecurity(protocol, tls, sasl)
