"""IncrementalAlterConfigs (key 44) and the legacy AlterConfigs (key 33) for topics and brokers.

Both compute a resource's new config map, validate every key they touch with
metadata.config_defs.check_config, and write one Config record per changed key (a value of
None deletes it). A resource is changed as a whole or not at all; resources of one request
succeed or fail independently. Legacy AlterConfigs replaces the resource's whole map (keys it
does not name go back to their defaults), which is what kafka-python's ``alter_configs`` means.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.config_defs import CLUSTER_DEFAULT, ConfigType, check_config, definitions, list_items
from metadata.controller import elr
from metadata.controller.context import ApiError, ControllerContext, ControllerResult
from metadata.controller.internal_topics import check_internal_configs
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE, Config, MetadataRecord
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import weighted_slices

ChangesOf = Callable[[int, Any, Mapping[str, str]], dict[str, str | None]]


class OpType(enum.IntEnum):
    """IncrementalAlterConfigs' config_operation."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


def incremental_alter_configs(
    ctx: ControllerContext, request: Any, api_version: int
) -> ControllerResult:
    """Apply SET / DELETE / APPEND / SUBTRACT operations per resource (in one pass: the
    controller itself runs an AlterConfigsRun a slice at a time)."""
    return AlterConfigsRun.start(request, api_version, incremental=True).whole(ctx)


def alter_configs(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """Replace each resource's configs with the ones given (in one pass, as above)."""
    return AlterConfigsRun.start(request, api_version, incremental=False).whole(ctx)


@dataclass(slots=True)
class AlterConfigsRun:
    """One AlterConfigs or IncrementalAlterConfigs worked on a slice of resources at a time
    (``slices``: SLICE_ENTITIES configs, a resource weighing its configs), each slice
    against the controller's working image of then (``step``), its records proposed before
    the next is worked on. Resources succeed or fail independently, as in a single pass;
    duplicates are counted over the whole request. (Kafka's controller writes a request's
    config records atomically; here a failover between slices answers NOT_CONTROLLER with
    some resources changed, and the client's retry sets the same values again.)"""

    request: Any
    module: Any
    response_type: Any
    changes_of: ChangesOf
    counts: Counter[tuple[int, str]]
    results: list[object] = field(default_factory=list)

    @classmethod
    def start(cls, request: Any, api_version: int, *, incremental: bool) -> AlterConfigsRun:
        if incremental:
            module = response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, api_version)
            response_type, changes_of = module.IncrementalAlterConfigsResponse, _incremental_changes
        else:
            module = response_module(ApiKey.ALTER_CONFIGS, api_version)
            response_type, changes_of = module.AlterConfigsResponse, _replacement_changes
        # Counted by C code (attrgetter, map, Counter), not a Python step per resource.
        keys = map(attrgetter("resource_type", "resource_name"), request.resources)
        return cls(request, module, response_type, changes_of, Counter(keys))

    def slices(self) -> Iterator[Sequence[Any]]:
        return weighted_slices(self.request.resources, lambda r: 1 + len(r.configs))

    def step(self, ctx: ControllerContext, resources: Sequence[Any]) -> list[MetadataRecord]:
        """The records of ``resources``' changes (none with validate_only); answers kept."""
        records: list[MetadataRecord] = []
        for resource in resources:
            key = (resource.resource_type, resource.resource_name)
            try:
                if self.counts[key] > 1:
                    raise ApiError(ErrorCode.invalid_request, "Duplicate resource.")
                _check_resource(ctx, resource.resource_type, resource.resource_name)
                current = ctx.image.configs.get(key, {})
                changes = self.changes_of(resource.resource_type, resource.configs, current)
                if resource.resource_type == TOPIC_RESOURCE:
                    after = {**current, **changes}
                    check_internal_configs(
                        resource.resource_name, {k: v for k, v in after.items() if v is not None}
                    )
                cleared = elr.config_change_records(
                    ctx, resource.resource_type, resource.resource_name, changes
                )
            except ApiError as error:
                code, message = error.code, error.message
            else:
                records.extend(
                    Config(resource.resource_type, resource.resource_name, name, value)
                    for name, value in changes.items()
                )
                records.extend(cleared)
                code, message = ErrorCode.none, None
            self.results.append(
                make(
                    self.module.AlterConfigsResourceResponse,
                    {
                        "error_code": code,
                        "error_message": message,
                        "resource_type": resource.resource_type,
                        "resource_name": resource.resource_name,
                    },
                )
            )
        return [] if self.request.validate_only else records

    def response(self) -> object:
        return make(self.response_type, {"responses": tuple(self.results)})

    def whole(self, ctx: ControllerContext) -> ControllerResult:
        """The request in one pass, against ``ctx``."""
        records = self.step(ctx, self.request.resources)
        return ControllerResult(tuple(records), self.response())


def _check_resource(ctx: ControllerContext, resource_type: int, name: str) -> None:
    if resource_type == TOPIC_RESOURCE:
        if name not in ctx.image.topics.by_name:
            raise ApiError(
                ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
            )
    elif resource_type == BROKER_RESOURCE:
        if name != CLUSTER_DEFAULT and not name.isdigit():
            raise ApiError(ErrorCode.invalid_request, f"Invalid broker name {name}")
    else:
        raise ApiError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")


def _incremental_changes(
    resource_type: int, configs: Any, current: Mapping[str, str]
) -> dict[str, str | None]:
    """name -> new value (None: delete) for one resource's operations."""
    if len({c.name for c in configs}) != len(configs):
        raise ApiError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    defs = definitions(resource_type)
    assert defs is not None, "the resource type was checked"
    changes: dict[str, str | None] = {}
    for config in configs:
        name, operation = config.name, config.config_operation
        if operation == OpType.SET:
            if config.value is None:
                raise ApiError(ErrorCode.invalid_config, f"Null value not supported for : {name}")
            value: str | None = config.value
        elif operation == OpType.DELETE:
            value = None
        elif operation in (OpType.APPEND, OpType.SUBTRACT):
            definition = defs.get(name)
            if definition is not None and definition.type is not ConfigType.LIST:
                verb = "append" if operation == OpType.APPEND else "subtract"
                raise ApiError(
                    ErrorCode.invalid_config,
                    f"Config value {verb} is not allowed for config key: {name}",
                )
            value = _list_operation(operation, name, config.value, current, defs)
        else:
            raise ApiError(ErrorCode.invalid_request, f"Unknown config operation {operation}")
        _validate(resource_type, name, value)
        if value is None and name not in current:
            continue  # deleting a key that is not set changes nothing
        changes[name] = value
    return changes


def _list_operation(
    operation: int, name: str, value: str | None, current: Mapping[str, str], defs: Mapping
) -> str:
    definition = defs.get(name)
    base = current.get(name, definition.default if definition is not None else None) or ""
    items = list_items(base)
    operands = list_items(value or "")
    if operation == OpType.APPEND:
        items.extend(item for item in operands if item not in items)
    else:
        items = [item for item in items if item not in operands]
    return ",".join(items)


def _replacement_changes(
    resource_type: int, configs: Any, current: Mapping[str, str]
) -> dict[str, str | None]:
    """name -> new value (None: delete) making the resource hold exactly ``configs``."""
    if len({c.name for c in configs}) != len(configs):
        raise ApiError(ErrorCode.invalid_request, "Error due to duplicate config keys")
    wanted = {c.name: c.value for c in configs if c.value is not None}
    for name, value in wanted.items():
        _validate(resource_type, name, value)
    changes: dict[str, str | None] = {name: None for name in current if name not in wanted}
    changes.update((name, value) for name, value in wanted.items() if current.get(name) != value)
    return changes


def _validate(resource_type: int, name: str, value: str | None) -> None:
    problem = check_config(resource_type, name, value)
    if problem is not None:
        raise ApiError(ErrorCode.invalid_config, problem)
