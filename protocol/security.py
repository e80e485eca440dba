"""Listener security: what a listener speaks (Kafka's security protocols), its TLS settings and
SASL mechanisms, and what a peer needs to connect to it.

These are plain values built from server.properties by kraft/security.py; the TLS contexts
(protocol/tls.py), the SASL exchange (protocol/sasl.py) and the client connector
(protocol/connect.py) read them. They sit in protocol/ because raft's transport and the
broker's clients and listeners all need them.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal


class SecurityProtocol(enum.IntEnum):
    """Kafka's SecurityProtocol ids (the ``security_protocol`` of a registered endpoint)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS = (PLAIN, *SCRAM_MECHANISMS)

StoreType = Literal["PEM", "PKCS12"]
ClientAuth = Literal["none", "requested", "required"]


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """A listener's ``ssl.*`` keys, under Kafka's meaning (docs/security.md)."""

    keystore_location: str | None = None
    keystore_type: StoreType = "PKCS12"
    keystore_password: str | None = None
    key_password: str | None = None
    truststore_location: str | None = None
    truststore_type: StoreType = "PKCS12"
    truststore_password: str | None = None
    client_auth: ClientAuth = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    # ssl.endpoint.identification.algorithm: "https" (Kafka's default) checks a server's
    # certificate names the host dialled; empty turns that off.
    endpoint_identification: bool = True
    principal_rules: tuple[PrincipalRule, ...] = ()


@dataclass(frozen=True, slots=True)
class PrincipalRule:
    """One ``ssl.principal.mapping.rules`` rule: ``DEFAULT`` (pattern None) or
    ``RULE:pattern/replacement/[LU]``."""

    pattern: re.Pattern[str] | None
    replacement: str = ""
    case: Literal["", "L", "U"] = ""


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    """What a peer sends to log in: the mechanism and the JAAS username/password."""

    mechanism: str
    username: str
    password: str


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How one listener is secured, server side."""

    name: str
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    tls: TlsSettings | None = None
    mechanisms: tuple[str, ...] = ()  # sasl.enabled.mechanisms of the listener
    # PlainLoginModule's user_<name>="<password>" entries of this listener's JAAS config.
    plain_users: Mapping[str, str] = field(default_factory=dict)
    # connections.max.reauth.ms (0: no re-authentication) and
    # connection.failed.authentication.delay.ms.
    max_reauth_ms: int = 0
    failed_authentication_delay_ms: int = 100
    # sasl.server.max.receive.size: the largest frame taken before the SASL login.
    sasl_max_receive_bytes: int = 524_288


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How this node connects to a peer's listener: its protocol, the TLS settings to trust
    (and, for mutual TLS, present) and the SASL login."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    tls: TlsSettings | None = None
    sasl: SaslCredentials | None = None


PLAINTEXT_CLIENT = ClientSecurity()


class JaasError(ValueError):
    """A sasl.jaas.config value that is not ``<LoginModule> <flag> key="value"... ;``."""


_JAAS_OPTION = re.compile(r'\s*([A-Za-z_][\w.-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))')
_JAAS_FLAGS = ("required", "requisite", "sufficient", "optional")


@dataclass(frozen=True, slots=True)
class JaasConfig:
    """One login module entry of a ``sasl.jaas.config`` value."""

    login_module: str
    options: Mapping[str, str]


def parse_jaas(text: str) -> JaasConfig:
    """Parse Kafka's one-entry JAAS syntax:
    ``org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";``"""
    body = text.strip()
    if not body.endswith(";"):
        raise JaasError("a JAAS entry ends with ';'")
    body = body[:-1]
    parts = body.split(None, 2)
    if len(parts) < 2 or parts[1] not in _JAAS_FLAGS:
        raise JaasError(f"expected '<LoginModule> {'|'.join(_JAAS_FLAGS)} key=\"value\"...;'")
    rest = parts[2] if len(parts) == 3 else ""
    options: dict[str, str] = {}
    position = 0
    while position < len(rest.rstrip()):
        match = _JAAS_OPTION.match(rest, position)
        if match is None:
            raise JaasError(f"cannot read an option at {rest[position:][:20]!r}")
        value = match.group(2)
        value = re.sub(r"\\(.)", r"\1", value) if value is not None else match.group(3)
        options[match.group(1)] = value
        position = match.end()
    return JaasConfig(parts[0], options)


def parse_principal_rules(text: str) -> tuple[PrincipalRule, ...]:
    """``ssl.principal.mapping.rules``: comma-separated ``DEFAULT`` or
    ``RULE:pattern/replacement/[LU]`` (Kafka's SslPrincipalMapper syntax)."""
    rules: list[PrincipalRule] = []
    rest = text.strip()
    rule_re = re.compile(r"\s*RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)\s*(?:,|$)")
    while rest:
        if rest.startswith("DEFAULT"):
            rules.append(PrincipalRule(None))
            rest = rest[len("DEFAULT") :].lstrip().removeprefix(",").lstrip()
            continue
        match = rule_re.match(rest)
        if match is None:
            raise ValueError(f"invalid rule at {rest[:30]!r}")
        pattern = re.compile(match.group(1).replace("\\/", "/"))
        # Java's $1 group references become Python's \g<1>.
        replacement = re.sub(r"\$(\d+)", r"\\g<\1>", match.group(2).replace("\\/", "/"))
        case = match.group(3)
        rules.append(PrincipalRule(pattern, replacement, case))  # type: ignore[arg-type]
        rest = rest[match.end() :].lstrip()
    return tuple(rules) or (PrincipalRule(None),)


def map_principal(distinguished_name: str, rules: tuple[PrincipalRule, ...]) -> str:
    """The user name a certificate's subject maps to: the first rule whose pattern matches the
    whole DN; DEFAULT is the DN itself (Kafka's SslPrincipalMapper)."""
    for rule in rules or (PrincipalRule(None),):
        if rule.pattern is None:
            return distinguished_name
        if rule.pattern.fullmatch(distinguished_name):
            name = rule.pattern.sub(rule.replacement, distinguished_name, count=1)
            if rule.case == "L":
                name = name.lower()
            elif rule.case == "U":
                name = name.upper()
            return name
    # Kafka: "No rules apply to <dn>, rules <rules>" fails the connection.
    raise ValueError(f"no ssl.principal.mapping.rules rule applies to {distinguished_name!r}")
