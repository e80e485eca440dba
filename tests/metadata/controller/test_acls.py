"""CreateAcls, DeleteAcls and DescribeAcls against images: records, Kafka's error codes,
and the image after the records (snapshots included)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from metadata.authorizer import AclBinding, PatternType, Permission
from metadata.controller.acls import create_acls, delete_acls, describe_acls_response
from metadata.image import EMPTY, MetadataImage
from metadata.records import (
    AccessControlEntry,
    RemoveAccessControlEntry,
    decode_record,
    encode_record,
)
from metadata.snapshot import image_from_records, image_records
from protocol.api_table import AclOperation, ResourceType
from protocol.entities import make
from tests.metadata.controller.support import apply, context, request_module

VERSION = 3


def creation(
    name: str = "orders",
    principal: str = "User:alice",
    operation: int = AclOperation.READ,
    permission: int = Permission.ALLOW,
    pattern: int = PatternType.LITERAL,
    resource_type: int = ResourceType.TOPIC,
    host: str = "*",
) -> Any:
    module = request_module(30, VERSION)
    return make(
        module.AclCreation,
        {
            "resource_type": resource_type,
            "resource_name": name,
            "resource_pattern_type": pattern,
            "principal": principal,
            "host": host,
            "operation": operation,
            "permission_type": permission,
        },
    )


def create(image: MetadataImage, *creations: Any) -> tuple[MetadataImage, Any, list[Any]]:
    module = request_module(30, VERSION)
    result = create_acls(
        context(image), make(module.CreateAclsRequest, {"creations": creations}), VERSION
    )
    return apply(image, result), result.response, list(result.records)


def filter_values(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    return values | overrides


def describe(image: MetadataImage, **overrides: Any) -> Any:
    module = request_module(29, VERSION)
    request = make(module.DescribeAclsRequest, filter_values(**overrides))
    return describe_acls_response(image.acls, request, VERSION)


def delete(image: MetadataImage, *filters: dict[str, Any]) -> tuple[MetadataImage, Any]:
    module = request_module(31, VERSION)
    items = tuple(make(module.DeleteAclsFilter, f) for f in filters)
    result = delete_acls(
        context(image), make(module.DeleteAclsRequest, {"filters": items}), VERSION
    )
    return apply(image, result), result.response


def test_created_acls_are_records_in_the_image_and_described() -> None:
    image, response, records = create(
        EMPTY,
        creation(),
        creation("ord", "User:*", AclOperation.WRITE, pattern=PatternType.PREFIXED),
    )
    assert [int(r.error_code) for r in response.results] == [0, 0]
    assert all(isinstance(r, AccessControlEntry) for r in records)
    assert sorted(image.acls.values(), key=lambda a: a.resource_name) == [
        AclBinding(
            ResourceType.TOPIC,
            "ord",
            PatternType.PREFIXED,
            "User:*",
            "*",
            AclOperation.WRITE,
            Permission.ALLOW,
        ),
        AclBinding(
            ResourceType.TOPIC,
            "orders",
            PatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            Permission.ALLOW,
        ),
    ]
    described = describe(image)
    assert int(described.error_code) == 0
    assert [(r.resource_name, int(r.pattern_type), len(r.acls)) for r in described.resources] == [
        ("ord", PatternType.PREFIXED, 1),
        ("orders", PatternType.LITERAL, 1),
    ]
    matching = describe(
        image, resource_type_filter=2, resource_name_filter="orders", pattern_type_filter=2
    )
    assert [r.resource_name for r in matching.resources] == ["ord", "orders"]
    by_principal = describe(image, principal_filter="User:alice")
    assert [r.resource_name for r in by_principal.resources] == ["orders"]
    # A snapshot of the image rebuilds the same ACLs, and the records round-trip.
    assert image_from_records(image_records(image), image.offset, 0).acls == image.acls
    assert all(decode_record(encode_record(r), 0) == r for r in records)


def test_an_existing_acl_succeeds_without_a_record() -> None:
    image, _, _ = create(EMPTY, creation())
    again, response, records = create(image, creation(), creation())
    assert [int(r.error_code) for r in response.results] == [0, 0]
    assert records == [] and again.acls == image.acls


def test_invalid_creations_fail_alone_with_invalid_request() -> None:
    bad = [
        creation(pattern=PatternType.MATCH),
        creation(pattern=PatternType.ANY),
        creation(operation=1),  # ANY
        creation(operation=0),  # UNKNOWN
        creation(permission=1),  # ANY
        creation(resource_type=1),  # ANY
        creation(name=""),
        creation(principal="alice"),
        creation(name="other", resource_type=ResourceType.CLUSTER, operation=AclOperation.ALTER),
    ]
    image, response, records = create(EMPTY, *bad, creation())
    codes = [int(r.error_code) for r in response.results]
    assert codes == [ErrorCode.invalid_request] * len(bad) + [0]
    assert all(r.error_message for r in response.results[:-1])
    assert len(records) == 1 and len(image.acls) == 1


def test_delete_removes_what_each_filter_matches_once_and_lists_it() -> None:
    image, _, _ = create(
        EMPTY,
        creation(),
        creation(operation=AclOperation.WRITE),
        creation("logs", principal="User:bob"),
    )
    after, response = delete(
        image,
        filter_values(principal_filter="User:alice"),
        filter_values(resource_name_filter="orders", operation=AclOperation.READ),
        filter_values(pattern_type_filter=0),  # UNKNOWN: INVALID_REQUEST for this filter only
    )
    first, second, invalid = response.filter_results
    assert (int(first.error_code), len(first.matching_acls)) == (0, 2)
    assert (int(second.error_code), len(second.matching_acls)) == (0, 1)  # listed again
    assert int(invalid.error_code) == ErrorCode.invalid_request and not invalid.matching_acls
    assert [a.principal for a in after.acls.values()] == ["User:bob"]
    assert {int(m.operation) for m in first.matching_acls} == {
        AclOperation.READ,
        AclOperation.WRITE,
    }


def test_delete_records_each_acl_once() -> None:
    image, _, _ = create(EMPTY, creation())
    module = request_module(31, VERSION)
    both = tuple(make(module.DeleteAclsFilter, filter_values()) for _ in range(2))
    result = delete_acls(context(image), make(module.DeleteAclsRequest, {"filters": both}), VERSION)
    assert [type(r) for r in result.records] == [RemoveAccessControlEntry]


def test_describe_with_an_unknown_code_is_invalid_request() -> None:
    response = describe(EMPTY, operation=0)
    assert int(response.error_code) == ErrorCode.invalid_request
    assert response.resources == ()
