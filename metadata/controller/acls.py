"""CreateAcls (30) and DeleteAcls (31) on the controller, DescribeAcls (29) from any image
(Kafka's AclControlManager and AclApis).

A creation that is not a valid ACL (a filter value such as ANY or MATCH, an empty name, a
principal that is not ``type:name``, a CLUSTER resource not named ``kafka-cluster``) fails
alone with INVALID_REQUEST; an ACL that already exists (or repeats one of the same request)
succeeds without a record, as in Kafka. A deletion filter with an UNKNOWN code fails alone
with INVALID_REQUEST; every ACL a filter matches is listed under it and removed once. One
request's records are bounded by MAX_RECORDS_PER_USER_OP (POLICY_VIOLATION beyond, the
controller's limit for every admin request).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.authorizer import AclBinding, AclFilter, binding_from_codes
from metadata.controller.context import (
    MAX_RECORDS_PER_USER_OP,
    ControllerContext,
    ControllerResult,
    EntityRun,
)
from metadata.records import MetadataRecord, RemoveAccessControlEntry
from metadata.snapshot import acl_record
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module

TOO_MANY = f"An ACL request may make at most {MAX_RECORDS_PER_USER_OP} changes"


def create_acls(ctx: ControllerContext, request: Any, version: int) -> ControllerResult:
    """AccessControlEntry records for the valid, new creations; one result per creation (in
    one pass: the controller runs ``create_acls_run`` a slice of creations a turn)."""
    return create_acls_run(ctx, request, version).whole(ctx)


def create_acls_run(ctx: ControllerContext, request: Any, version: int) -> EntityRun:
    """CreateAcls a slice of creations a turn (issue 22); ``ctx``: the image whose ACLs
    exist already. The ACLs created so far and the record budget span the request."""
    module: Any = response_module(ApiKey.CREATE_ACLS, version)
    existing = set(ctx.image.acls.values())
    budget = [0]

    def one(ctx: ControllerContext, creation: Any) -> tuple[list[MetadataRecord], object]:
        records: list[MetadataRecord] = []
        binding = binding_from_codes(
            int(creation.resource_type),
            creation.resource_name,
            int(getattr(creation, "resource_pattern_type", 3)),
            creation.principal,
            creation.host,
            int(creation.operation),
            int(creation.permission_type),
        )
        if isinstance(binding, str):
            code, message = ErrorCode.invalid_request, binding
        elif binding in existing:
            code, message = ErrorCode.none, None
        elif budget[0] >= MAX_RECORDS_PER_USER_OP:
            code, message = ErrorCode.policy_violation, TOO_MANY
        else:
            existing.add(binding)
            records.append(acl_record(ctx.new_uuid(), binding))
            budget[0] += 1
            code, message = ErrorCode.none, None
        return records, make(
            module.AclCreationResult, {"error_code": code, "error_message": message}
        )

    def finish(results: tuple[object, ...]) -> object:
        return make(module.CreateAclsResponse, {"results": results})

    return EntityRun(request.creations, one, finish)


def acl_filter(item: Any) -> AclFilter:
    """The AclFilter of a DescribeAcls request or a DeleteAcls filter (v0 has no pattern
    type: LITERAL)."""
    return AclFilter(
        resource_type=int(item.resource_type_filter),
        resource_name=item.resource_name_filter,
        pattern_type=int(getattr(item, "pattern_type_filter", 3)),
        principal=item.principal_filter,
        host=item.host_filter,
        operation=int(item.operation),
        permission=int(item.permission_type),
    )


def delete_acls(ctx: ControllerContext, request: Any, version: int) -> ControllerResult:
    """RemoveAccessControlEntry records for every ACL a valid filter matches (in one pass:
    the controller runs ``delete_acls_run`` a slice of filters a turn)."""
    return delete_acls_run(ctx, request, version).whole(ctx)


def delete_acls_run(ctx: ControllerContext, request: Any, version: int) -> EntityRun:
    """DeleteAcls a slice of filters a turn (issue 22), a filter weighing the ACLs it is
    matched against (those of ``ctx``'s image: a filter's work is a pass over them, so a
    cluster of many ACLs answers one filter a turn). What was removed so far and the
    record budget span the request; the ACLs are sorted once a slice, not once a filter."""
    module: Any = response_module(ApiKey.DELETE_ACLS, version)
    removed: dict[uuid.UUID, AclBinding] = {}
    budget = [0]
    # The image of the slice being worked on, and the ACLs a filter is matched against,
    # sorted: that image's and those this request removed in earlier slices, so a filter
    # lists every ACL it matches as in a single pass, an earlier filter's too (the image is
    # held, so the next slice's is never taken for it).
    sorted_acls: list[Any] = [None, []]

    def one(ctx: ControllerContext, item: Any) -> tuple[list[MetadataRecord], object]:
        acl_filter_ = acl_filter(item)
        problem = acl_filter_.invalid()
        matching: list[tuple[uuid.UUID, AclBinding]] = []
        records: list[MetadataRecord] = []
        if problem is None:
            if sorted_acls[0] is not ctx.image:
                sorted_acls[:] = [ctx.image, sorted({**removed, **ctx.image.acls}.items())]
            matching = [(i, a) for i, a in sorted_acls[1] if acl_filter_.matches(a)]
            fresh = [i for i, _ in matching if i not in removed]
            if budget[0] + len(fresh) > MAX_RECORDS_PER_USER_OP:
                problem, matching = TOO_MANY, []
            else:
                removed.update((i, a) for i, a in matching if i not in removed)
                budget[0] += len(fresh)
                records.extend(RemoveAccessControlEntry(i) for i in fresh)
        code = (
            ErrorCode.none
            if problem is None
            else ErrorCode.policy_violation
            if problem == TOO_MANY
            else ErrorCode.invalid_request
        )
        acls_answer = tuple(
            make(
                module.DeleteAclsMatchingAcl,
                {"error_code": ErrorCode.none, "error_message": None, **_fields(a)},
            )
            for _, a in matching
        )
        result = make(
            module.DeleteAclsFilterResult,
            {"error_code": code, "error_message": problem, "matching_acls": acls_answer},
        )
        return records, result

    def finish(results: tuple[object, ...]) -> object:
        return make(module.DeleteAclsResponse, {"filter_results": results})

    acl_count = len(ctx.image.acls)
    return EntityRun(request.filters, one, finish, weight=lambda _filter: 1 + acl_count)


def describe_acls_response(acls: Mapping[uuid.UUID, AclBinding], request: Any, version: int) -> Any:
    """DescribeAcls: the ACLs the request's filter matches, grouped by resource pattern;
    INVALID_REQUEST for a filter with an UNKNOWN code."""
    module: Any = response_module(ApiKey.DESCRIBE_ACLS, version)
    wanted = acl_filter(request)
    problem = wanted.invalid()
    if problem is not None:
        return make(
            module.DescribeAclsResponse,
            {"error_code": ErrorCode.invalid_request, "error_message": problem, "resources": ()},
        )
    return make(
        module.DescribeAclsResponse,
        {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resources": _grouped(module, acls.values(), wanted),
        },
    )


def security_disabled(api_key: int, version: int, request: Any) -> Any:
    """Kafka's answer to an ACL request on a cluster without an authorizer."""
    return acl_error_response(
        api_key, version, request, ErrorCode.security_disabled, "No Authorizer is configured."
    )


def acl_error_response(
    api_key: int, version: int, request: Any, code: ErrorCode, message: str | None
) -> Any:
    """An ACL request's response failing every creation or filter (or the description)."""
    module: Any = response_module(api_key, version)
    error = {"error_code": code, "error_message": message}
    if api_key == ApiKey.DESCRIBE_ACLS:
        return make(module.DescribeAclsResponse, error | {"resources": ()})
    # Every result is the same (frozen) entity: one made and repeated, so a request of
    # 200,000 creations or filters costs no Python step per entry (issue 22).
    if api_key == ApiKey.CREATE_ACLS:
        results = (make(module.AclCreationResult, error),) * len(request.creations)
        return make(module.CreateAclsResponse, {"results": results})
    result = make(module.DeleteAclsFilterResult, error | {"matching_acls": ()})
    return make(module.DeleteAclsResponse, {"filter_results": (result,) * len(request.filters)})


def _grouped(module: Any, acls: Iterable[AclBinding], wanted: AclFilter) -> tuple[Any, ...]:
    groups: dict[tuple[int, str, int], list[AclBinding]] = {}
    for acl in acls:
        if wanted.matches(acl):
            key = (int(acl.resource_type), acl.resource_name, int(acl.pattern_type))
            groups.setdefault(key, []).append(acl)
    return tuple(
        make(
            module.DescribeAclsResource,
            {
                "resource_type": resource_type,
                "resource_name": name,
                "pattern_type": pattern_type,
                "acls": tuple(
                    make(
                        module.AclDescription,
                        {
                            "principal": a.principal,
                            "host": a.host,
                            "operation": int(a.operation),
                            "permission_type": int(a.permission),
                        },
                    )
                    for a in sorted(group, key=_order)
                ),
            },
        )
        for (resource_type, name, pattern_type), group in sorted(groups.items())
    )


def _order(acl: AclBinding) -> tuple[str, str, int, int]:
    return (acl.principal, acl.host, int(acl.operation), int(acl.permission))


def _fields(acl: AclBinding) -> dict[str, object]:
    return {
        "resource_type": int(acl.resource_type),
        "resource_name": acl.resource_name,
        "pattern_type": int(acl.pattern_type),
        "principal": acl.principal,
        "host": acl.host,
        "operation": int(acl.operation),
        "permission_type": int(acl.permission),
    }
