"""ACLs and the StandardAuthorizer's decision, sans I/O (Kafka's
org.apache.kafka.metadata.authorizer.StandardAuthorizer).

An ACL binding is a resource pattern (type, name, LITERAL or PREFIXED) and an entry
(principal, host, operation, ALLOW or DENY). ``Authorizer.authorize`` decides one action on
one named resource for one principal from one host, with Kafka's rules:

- a principal in ``super.users`` may do anything;
- the ACLs that apply are those whose pattern matches the resource (the literal name, the
  literal wildcard ``*``, or a prefix of the name), whose principal is the principal or
  ``User:*`` and whose host is the client's or ``*``;
- a DENY for the operation (or for ALL) wins over every ALLOW;
- an ALLOW for the operation or for ALL allows it; an ALLOW of READ, WRITE, DELETE or ALTER
  also allows DESCRIBE, and an ALLOW of ALTER_CONFIGS also allows DESCRIBE_CONFIGS;
- with no ACL at all on the resource (any principal, host or operation),
  ``allow.everyone.if.no.acl.found`` decides (default false); a resource with ACLs for
  others only is denied.

Filters (DescribeAcls, DeleteAcls) match bindings as Kafka's AclBindingFilter does: ANY
matches every value of a field, a null name, principal or host matches any, and the MATCH
pattern type matches every pattern that would apply to the named resource.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from protocol.api_table import AclOperation, ResourceType

WILDCARD = "*"  # a literal resource name matching every name (Kafka's ResourcePattern.WILDCARD)
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
# The name Kafka's authorizeByResourceType asks about first: one no literal ACL names.
_UNNAMED = "hardcode"
ANY_CODE = 1  # ResourceType.ANY, PatternType.ANY, AclOperation.ANY, AclPermissionType.ANY
# What an ALLOW of each operation also allows (Kafka's AclEntry implied operations).
IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


class PatternType(enum.IntEnum):
    """Kafka's PatternType codes; ANY and MATCH are for filters only."""

    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(enum.IntEnum):
    """Kafka's AclPermissionType codes; ANY is for filters only."""

    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) on
    which resources (type, name, pattern type)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str  # "User:alice", or "User:*"
    host: str  # an address, or "*"
    operation: AclOperation
    permission: Permission  # ALLOW or DENY

    def applies_to(self, resource_type: ResourceType, name: str) -> bool:
        """Whether this binding's pattern covers the resource ``name`` of ``resource_type``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)


@dataclass(frozen=True, slots=True)
class AclFilter:
    """Kafka's AclBindingFilter: codes (ANY_CODE matches any) and optional strings (None
    matches any)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type not in (ANY_CODE, acl.resource_type):
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, acl.pattern_type):
            return False
        if self.resource_name is not None:
            if self.pattern_type == PatternType.MATCH:
                if not acl.applies_to(acl.resource_type, self.resource_name):
                    return False
            elif self.resource_name != acl.resource_name:
                return False
        return (
            self.principal in (None, acl.principal)
            and self.host in (None, acl.host)
            and self.operation in (ANY_CODE, acl.operation)
            and self.permission in (ANY_CODE, acl.permission)
        )

    def invalid(self) -> str | None:
        """Why this filter cannot be used (Kafka answers INVALID_REQUEST), or None: an
        UNKNOWN (or undefined) code in any field."""
        checks = (
            ("resource type", self.resource_type, {ANY_CODE, *ResourceType}),
            ("pattern type", self.pattern_type, set(PatternType)),
            ("operation", self.operation, {ANY_CODE, *AclOperation}),
            ("permission type", self.permission, set(Permission)),
        )
        for what, code, known in checks:
            if code not in known:
                return f"Invalid {what} {code} in the filter"
        return None


def binding_error(acl: AclBinding) -> str | None:
    """Why ``acl`` may not be created (INVALID_REQUEST), or None; Kafka's
    AclControlManager.validateNewAcl and the broker's own checks."""
    if not acl.resource_name:
        return "Resource name should not be empty"
    if acl.resource_type == ResourceType.CLUSTER and (
        acl.resource_name != CLUSTER_NAME or acl.pattern_type != PatternType.LITERAL
    ):
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    kind, _, name = acl.principal.partition(":")
    if not kind or not name:
        return f"Could not parse principal {acl.principal!r}: expected type:name"
    if not acl.host:
        return "Host should not be empty"
    return None


def binding_from_codes(
    resource_type: int,
    resource_name: str,
    pattern_type: int,
    principal: str,
    host: str,
    operation: int,
    permission: int,
) -> AclBinding | str:
    """The binding a CreateAcls creation names, or why it is invalid (INVALID_REQUEST):
    ANY, MATCH and UNKNOWN are filter values, never an ACL's."""
    if resource_type not in set(ResourceType):
        return f"Invalid resource type {resource_type}"
    if pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {pattern_type}"
    if operation not in set(AclOperation):
        return f"Invalid operation {operation}"
    if permission not in (Permission.ALLOW, Permission.DENY):
        return f"Invalid permissionType {permission}"
    acl = AclBinding(
        ResourceType(resource_type),
        resource_name,
        PatternType(pattern_type),
        principal,
        host,
        AclOperation(operation),
        Permission(permission),
    )
    problem = binding_error(acl)
    return acl if problem is None else problem


@dataclass(frozen=True, slots=True)
class AuthorizerConfig:
    """``super.users`` (principals, ``User:admin``) and ``allow.everyone.if.no.acl.found``."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False


# A planted bug (broker/bugs.py lists it; never set outside a simulation): the first
# matching ALLOW decides, so a DENY after it is never consulted.
ALLOW_BEFORE_DENY = "allow-before-deny"


class Authorizer:
    """Decisions over one set of ACLs (an image's); build a new one when the ACLs change.

    The ACLs are indexed by resource type and literal name (``*`` included) or prefix; a
    decision reads the entries of the name, of ``*`` and of each prefix of the name whose
    length some prefixed ACL of the type has (few distinct lengths in practice), so its cost
    does not grow with the number of ACLs."""

    __slots__ = ("_allow_first", "_config", "_literal", "_prefix_lengths", "_prefixed")

    def __init__(
        self,
        acls: Iterable[AclBinding],
        config: AuthorizerConfig,
        bugs: frozenset[str] = frozenset(),
    ) -> None:
        self._config = config
        self._allow_first = ALLOW_BEFORE_DENY in bugs
        self._literal: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], list[AclBinding]] = {}
        lengths: dict[ResourceType, set[int]] = {}
        for acl in acls:
            key = (acl.resource_type, acl.resource_name)
            if acl.pattern_type == PatternType.PREFIXED:
                self._prefixed.setdefault(key, []).append(acl)
                lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
            else:
                self._literal.setdefault(key, []).append(acl)
        self._prefix_lengths = {kind: sorted(found) for kind, found in lengths.items()}

    @property
    def config(self) -> AuthorizerConfig:
        return self._config

    def authorize(
        self,
        principal: str,
        host: str,
        resource_type: ResourceType,
        name: str,
        operation: AclOperation,
    ) -> bool:
        """Whether ``principal`` connected from ``host`` may do ``operation`` on the resource
        ``name`` of ``resource_type``."""
        if principal in self._config.super_users:
            return True
        found = False
        allowed = False
        implied = IMPLIED_BY.get(operation, frozenset())
        for acl in self._applicable(resource_type, name):
            found = True
            if acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.host not in (host, WILDCARD_HOST):
                continue
            if acl.permission == Permission.DENY:
                if acl.operation in (operation, AclOperation.ALL):
                    return False
            elif acl.operation in (operation, AclOperation.ALL) or acl.operation in implied:
                if self._allow_first:
                    return True
                allowed = True
        if allowed:
            return True
        return not found and self._config.allow_everyone_if_no_acl_found

    def authorize_any(
        self, principal: str, host: str, resource_type: ResourceType, operation: AclOperation
    ) -> bool:
        """Whether ``principal`` may do ``operation`` on some resource of ``resource_type``
        (Kafka's Authorizer.authorizeByResourceType: an idempotent producer needs WRITE on
        some topic). A literal or prefixed ALLOW counts unless a DENY covers it (a wildcard
        DENY, the same literal name, or a prefix of its name); a name nobody's ACLs cover
        decides as ``authorize`` does (super users, allow.everyone.if.no.acl.found)."""
        if self.authorize(principal, host, resource_type, _UNNAMED, operation):
            return True
        denied_literals: set[str] = set()
        denied_prefixes: list[str] = []
        allowed_literals: list[str] = []
        allowed_prefixes: list[str] = []
        every = [
            a
            for index in (self._literal, self._prefixed)
            for (kind, _), acls in index.items()
            if kind == resource_type
            for a in acls
        ]
        for acl in every:
            if acl.principal not in (principal, WILDCARD_PRINCIPAL):
                continue
            if acl.host not in (host, WILDCARD_HOST):
                continue
            if acl.operation not in (operation, AclOperation.ALL):
                continue
            prefixed = acl.pattern_type == PatternType.PREFIXED
            if acl.permission == Permission.DENY:
                if prefixed:
                    denied_prefixes.append(acl.resource_name)
                else:
                    denied_literals.add(acl.resource_name)
            elif prefixed:
                allowed_prefixes.append(acl.resource_name)
            else:
                allowed_literals.append(acl.resource_name)
        if WILDCARD in denied_literals:
            return False
        for name in allowed_literals:
            if name == WILDCARD or (
                name not in denied_literals and not any(name.startswith(p) for p in denied_prefixes)
            ):
                return True
        return any(
            not any(name.startswith(p) for p in denied_prefixes) for name in allowed_prefixes
        )

    def _applicable(self, resource_type: ResourceType, name: str) -> Iterable[AclBinding]:
        yield from self._literal.get((resource_type, name), ())
        if name != WILDCARD:
            yield from self._literal.get((resource_type, WILDCARD), ())
        for length in self._prefix_lengths.get(resource_type, ()):
            if length > len(name):
                break
            yield from self._prefixed.get((resource_type, name[:length]), ())
