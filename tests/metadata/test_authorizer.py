"""The StandardAuthorizer's decisions: examples of each rule (the denial beside the grant),
and a hypothesis test against a small reference model written straight from Kafka's rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.authorizer import (
    AclBinding,
    AclFilter,
    Authorizer,
    AuthorizerConfig,
    PatternType,
    Permission,
    binding_from_codes,
)
from protocol.api_table import AclOperation, ResourceType

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = AclOperation
ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def acl(
    name: str,
    operation: AclOperation,
    permission: Permission = ALLOW,
    principal: str = ALICE,
    host: str = "*",
    pattern: PatternType = LITERAL,
    resource_type: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def allowed(
    acls: list[AclBinding],
    operation: AclOperation,
    name: str = "orders",
    principal: str = ALICE,
    host: str = HOST,
    config: AuthorizerConfig | None = None,
) -> bool:
    return Authorizer(acls, config or AuthorizerConfig()).authorize(
        principal, host, TOPIC, name, operation
    )


def test_no_acls_denies_unless_allow_everyone_if_no_acl_found() -> None:
    assert not allowed([], Op.READ)
    assert allowed([], Op.READ, config=AuthorizerConfig(allow_everyone_if_no_acl_found=True))


def test_allow_everyone_does_not_apply_once_the_resource_has_any_acl() -> None:
    config = AuthorizerConfig(allow_everyone_if_no_acl_found=True)
    acls = [acl("orders", Op.READ, principal=BOB)]
    assert not allowed(acls, Op.READ, config=config)  # bob's ACL makes the topic protected
    assert allowed(acls, Op.READ, name="other", config=config)


def test_allow_grants_only_its_operation_principal_and_host() -> None:
    acls = [acl("orders", Op.WRITE, host=HOST)]
    assert allowed(acls, Op.WRITE)
    assert not allowed(acls, Op.READ)
    assert not allowed(acls, Op.WRITE, principal=BOB)
    assert not allowed(acls, Op.WRITE, host="10.0.0.2")
    assert not allowed(acls, Op.WRITE, name="orders2")


def test_deny_wins_over_allow_including_all() -> None:
    assert not allowed([acl("orders", Op.ALL), acl("orders", Op.WRITE, DENY)], Op.WRITE)
    assert allowed([acl("orders", Op.ALL), acl("orders", Op.WRITE, DENY)], Op.READ)
    assert not allowed([acl("orders", Op.READ), acl("*", Op.ALL, DENY)], Op.READ)
    # A DENY of READ does not deny DESCRIBE (implication is for ALLOW only).
    assert allowed([acl("orders", Op.DESCRIBE), acl("orders", Op.READ, DENY)], Op.DESCRIBE)


def test_wildcards_of_resource_principal_and_host() -> None:
    assert allowed([acl("*", Op.READ)], Op.READ)
    assert allowed([acl("orders", Op.READ, principal="User:*")], Op.READ, principal=BOB)
    assert not allowed([acl("orders", Op.READ, principal="User:*", host="10.9.9.9")], Op.READ)


def test_prefixed_patterns_match_names_that_start_with_them() -> None:
    acls = [acl("ord", Op.READ, pattern=PREFIXED)]
    assert allowed(acls, Op.READ, name="orders")
    assert allowed(acls, Op.READ, name="ord")
    assert not allowed(acls, Op.READ, name="or")
    assert not allowed([acl("ord", Op.READ)], Op.READ, name="orders")  # literal: exact only


def test_implied_operations() -> None:
    for operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert allowed([acl("orders", operation)], Op.DESCRIBE)
    assert not allowed([acl("orders", Op.CREATE)], Op.DESCRIBE)
    assert allowed([acl("orders", Op.ALTER_CONFIGS)], Op.DESCRIBE_CONFIGS)
    assert not allowed([acl("orders", Op.DESCRIBE_CONFIGS)], Op.ALTER_CONFIGS)
    assert not allowed([acl("orders", Op.DESCRIBE)], Op.READ)


def test_super_users_bypass_every_acl_including_deny() -> None:
    config = AuthorizerConfig(super_users=frozenset({"User:admin"}))
    acls = [acl("*", Op.ALL, DENY, principal="User:*")]
    assert allowed(acls, Op.WRITE, principal="User:admin", config=config)
    assert not allowed(acls, Op.WRITE, principal=ALICE, config=config)


def test_resource_types_do_not_mix() -> None:
    acls = [acl("orders", Op.READ, resource_type=GROUP)]
    assert not allowed(acls, Op.READ)


def test_creations_refuse_filter_values_and_bad_names() -> None:
    assert isinstance(binding_from_codes(2, "t", 3, ALICE, "*", 3, 3), AclBinding)
    assert binding_from_codes(1, "t", 3, ALICE, "*", 3, 3) == "Invalid resource type 1"
    assert binding_from_codes(2, "t", 2, ALICE, "*", 3, 3) == "Invalid patternType 2"
    assert binding_from_codes(2, "t", 3, ALICE, "*", 1, 3) == "Invalid operation 1"
    assert binding_from_codes(2, "t", 3, ALICE, "*", 3, 1) == "Invalid permissionType 1"
    assert binding_from_codes(2, "", 3, ALICE, "*", 3, 3) == "Resource name should not be empty"
    assert isinstance(binding_from_codes(2, "t", 3, "alice", "*", 3, 3), str)
    assert isinstance(binding_from_codes(4, "other", 3, ALICE, "*", 7, 3), str)
    assert isinstance(binding_from_codes(4, "kafka-cluster", 3, ALICE, "*", 7, 3), AclBinding)


def test_authorize_any_finds_an_allow_no_deny_covers() -> None:
    def any_write(*acls: AclBinding, config: AuthorizerConfig | None = None) -> bool:
        authorizer = Authorizer(acls, config or AuthorizerConfig())
        return authorizer.authorize_any(ALICE, HOST, TOPIC, Op.WRITE)

    assert not any_write()
    assert any_write(config=AuthorizerConfig(allow_everyone_if_no_acl_found=True))
    assert any_write(acl("orders", Op.WRITE))
    assert any_write(acl("ord", Op.ALL, pattern=PREFIXED))
    assert not any_write(acl("orders", Op.READ))
    assert not any_write(acl("orders", Op.WRITE, principal=BOB))
    assert not any_write(acl("orders", Op.WRITE), acl("orders", Op.WRITE, DENY))
    assert not any_write(acl("orders", Op.WRITE), acl("or", Op.WRITE, DENY, pattern=PREFIXED))
    assert not any_write(
        acl("ord", Op.WRITE, pattern=PREFIXED), acl("o", Op.ALL, DENY, pattern=PREFIXED)
    )
    assert not any_write(acl("orders", Op.WRITE), acl("*", Op.WRITE, DENY))
    assert any_write(acl("orders", Op.WRITE), acl("logs", Op.WRITE, DENY))
    admin = AuthorizerConfig(super_users=frozenset({ALICE}))
    assert any_write(acl("*", Op.WRITE, DENY), config=admin)


def test_filters_match_as_kafka_acl_binding_filter() -> None:
    literal, prefixed = acl("orders", Op.READ), acl("ord", Op.WRITE, pattern=PREFIXED)
    wildcard = acl("*", Op.READ, DENY)
    everything = AclFilter(1, None, 1, None, None, 1, 1)
    assert all(everything.matches(a) for a in (literal, prefixed, wildcard))
    match = AclFilter(2, "orders", PatternType.MATCH, None, None, 1, 1)
    assert [a for a in (literal, prefixed, wildcard) if match.matches(a)] == [
        literal,
        prefixed,
        wildcard,
    ]
    assert not match.matches(acl("orders2", Op.READ))
    exact = AclFilter(2, "ord", PatternType.ANY, None, None, 1, 1)
    assert [a for a in (literal, prefixed) if exact.matches(a)] == [prefixed]
    assert not AclFilter(2, None, 1, BOB, None, 1, 1).matches(literal)
    assert not AclFilter(3, None, 1, None, None, 1, 1).matches(literal)
    assert not AclFilter(2, None, 1, None, None, 1, Permission.DENY).matches(literal)
    assert AclFilter(0, None, 1, None, None, 1, 1).invalid() is not None
    assert AclFilter(2, None, 0, None, None, 1, 1).invalid() is not None
    assert AclFilter(2, None, 1, None, None, 0, 1).invalid() is not None
    assert everything.invalid() is None


# ---- the reference model ---------------------------------------------------------------------
NAMES = ("orders", "ord", "o", "*", "logs")
PRINCIPALS = (ALICE, BOB, "User:*")
HOSTS = ("10.0.0.1", "10.0.0.2", "*")
OPERATIONS = tuple(op for op in AclOperation if op <= Op.IDEMPOTENT_WRITE)


def reference(
    acls: list[AclBinding],
    config: AuthorizerConfig,
    principal: str,
    host: str,
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
) -> bool:
    """Kafka's rules, spelled out with no index and no shortcuts."""
    if principal in config.super_users:
        return True

    def on_resource(a: AclBinding) -> bool:
        if a.resource_type != resource_type:
            return False
        if a.pattern_type == PREFIXED:
            return name[: len(a.resource_name)] == a.resource_name
        return a.resource_name == name or a.resource_name == "*"

    def for_me(a: AclBinding) -> bool:
        return a.principal in (principal, "User:*") and a.host in (host, "*")

    def grants(a: AclBinding) -> bool:
        if a.operation == Op.ALL or a.operation == operation:
            return True
        if operation == Op.DESCRIBE:
            return a.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
        if operation == Op.DESCRIBE_CONFIGS:
            return a.operation == Op.ALTER_CONFIGS
        return False

    def denies(a: AclBinding) -> bool:
        return a.operation == Op.ALL or a.operation == operation

    resource_acls = [a for a in acls if on_resource(a)]
    mine = [a for a in resource_acls if for_me(a)]
    if any(a.permission == DENY and denies(a) for a in mine):
        return False
    if any(a.permission == ALLOW and grants(a) for a in mine):
        return True
    return not resource_acls and config.allow_everyone_if_no_acl_found


bindings = st.builds(
    AclBinding,
    st.sampled_from((TOPIC, GROUP)),
    st.sampled_from(NAMES),
    st.sampled_from((LITERAL, PREFIXED)),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(HOSTS),
    st.sampled_from(OPERATIONS),
    st.sampled_from((ALLOW, DENY)),
)
configs = st.builds(
    AuthorizerConfig,
    st.sets(st.sampled_from((ALICE, BOB))).map(frozenset),
    st.booleans(),
)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(bindings, max_size=8),
    configs,
    st.sampled_from((ALICE, BOB, "User:carol")),
    st.sampled_from(("10.0.0.1", "10.0.0.2")),
    st.sampled_from((TOPIC, GROUP)),
    st.sampled_from(("orders", "ord", "o", "logs", "x")),
    st.sampled_from([op for op in OPERATIONS if op != Op.ALL]),
)
def test_authorizer_agrees_with_the_reference_model(
    acls: list[AclBinding],
    config: AuthorizerConfig,
    principal: str,
    host: str,
    resource_type: ResourceType,
    name: str,
    operation: AclOperation,
) -> None:
    decision = Authorizer(acls, config).authorize(principal, host, resource_type, name, operation)
    expected = reference(acls, config, principal, host, resource_type, name, operation)
    assert decision == expected
