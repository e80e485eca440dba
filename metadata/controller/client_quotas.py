"""Client quotas (Kafka's ClientQuotaControlManager): AlterClientQuotas (key 49) on the
controller, DescribeClientQuotas (key 48) from any image.

``kafka-configs --alter --entity-type clients --entity-name app --add-config
producer_byte_rate=102400`` becomes one ClientQuota record per key; the broker's quota
manager (broker/quotas.py) reads them from its image. An entity is a set of (type, name)
pairs: ``user`` and/or ``client-id``, or ``ip`` alone; a null name is the type's default
(``--entity-default``, shown by Kafka as ``<default>``). Each entry of a request is applied
or refused whole, with Kafka's error codes and words; ``validate_only`` checks and writes
nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.context import ControllerContext, ControllerResult, EntityRun
from metadata.image import MetadataImage, QuotaEntity, entity_order
from metadata.records import ClientQuota, MetadataRecord
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import SLICE_ENTITIES, Turns, weighted_slices

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
# Kafka's QuotaConfigs: each key, whether its value must be whole (a Long), and the entity
# types it applies to.
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
CLIENT_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
IP_KEYS: dict[str, bool] = {CONNECTION_CREATION_RATE: True}
# DescribeClientQuotas match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
_LONG_EPSILON = 1e-6  # Kafka's tolerance for a Long value sent as a double


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _entity(entries: Any) -> QuotaEntity:
    """The request's entity as the image keys it, or _Refused as Kafka's validateEntity."""
    if not entries:
        raise _Refused(ErrorCode.invalid_request, "Invalid empty client quota entity")
    pairs: dict[str, str | None] = {}
    for item in entries:
        if item.entity_type not in (USER, CLIENT_ID, IP):
            raise _Refused(
                ErrorCode.invalid_request, f"Unhandled client quota entity type: {item.entity_type}"
            )
        if item.entity_type in pairs:
            raise _Refused(ErrorCode.invalid_request, f"Duplicate {item.entity_type} entity")
        if item.entity_name is not None and not item.entity_name and item.entity_type == IP:
            raise _Refused(ErrorCode.invalid_request, "Invalid empty IP address")
        pairs[item.entity_type] = item.entity_name
    if IP in pairs and len(pairs) > 1:
        raise _Refused(
            ErrorCode.invalid_request,
            "Invalid quota entity combination, IP entity should not be combined with User or "
            "ClientId",
        )
    return tuple(sorted(pairs.items()))


def _check_op(entity: QuotaEntity, op: Any) -> None:
    keys = IP_KEYS if entity[0][0] == IP else CLIENT_KEYS
    whole = keys.get(op.key)
    if whole is None:
        raise _Refused(ErrorCode.invalid_request, f"Invalid configuration key {op.key}")
    if op.remove:
        return
    value = float(op.value)
    if whole and abs(int(value + _LONG_EPSILON) - value) > _LONG_EPSILON:
        raise _Refused(ErrorCode.invalid_request, f"Configuration {op.key} must be a Long value")
    if value <= 0 or value != value or value == float("inf"):
        # Kafka's QuotaConfigs declare these rates positive (a zero rate would throttle for
        # ever): refused here rather than enforced as a permanent mute.
        raise _Refused(ErrorCode.invalid_request, f"Configuration {op.key} must be positive")


def _entry_records(entry: Any) -> list[MetadataRecord]:
    entity = _entity(entry.entity)
    keys = [op.key for op in entry.ops]
    if len(set(keys)) != len(keys):
        raise _Refused(ErrorCode.invalid_request, "Duplicate quota key in one entry")
    types = tuple(entity_type for entity_type, _ in entity)
    names = tuple(name for _, name in entity)
    records: list[MetadataRecord] = []
    for op in entry.ops:
        _check_op(entity, op)
        value = 0.0 if op.remove else float(op.value)
        records.append(ClientQuota(types, names, op.key, value, bool(op.remove)))
    return records


def _entity_data(module: Any, entity: QuotaEntity) -> tuple[Any, ...]:
    return tuple(
        make(module.EntityData, {"entity_type": entity_type, "entity_name": name})
        for entity_type, name in entity
    )


def alter_client_quotas(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """One result per entry: its records, or the error that refused it (nothing written for
    it); with ``validate_only`` no records at all. (In one pass: the controller runs
    ``client_quotas_run`` a slice of entries at a time.)"""
    return client_quotas_run(request, api_version).whole(ctx)


def client_quotas_run(request: Any, api_version: int) -> EntityRun:
    """AlterClientQuotas a slice of entries a turn (issue 22): entries are independent. An
    entry weighs its entity's components and its ops; checking one is bounded whatever
    its size (it stops at the first bad component or op, and an entity has at most three
    valid components, each key at most one op), but its answer echoes every component of
    its entity: for an entity of more than a slice of them the echo is made beforehand,
    a slice a turn."""
    module: Any = response_module(ApiKey.ALTER_CLIENT_QUOTAS, api_version)
    echoes: dict[int, tuple[object, ...]] = {}  # id(entry) -> its entity, for big ones

    def echo_data(component: Any) -> object:
        return make(
            module.EntityData,
            {"entity_type": component.entity_type, "entity_name": component.entity_name},
        )

    def weight(entry: Any) -> int:
        return len(entry.entity) + len(entry.ops)

    def reading() -> Iterator[Sequence[Any]]:
        for entries in weighted_slices(request.entries, weight):
            for entry in entries:
                if len(entry.entity) > SLICE_ENTITIES:
                    echo = []
                    for component in entry.entity:
                        echo.append(echo_data(component))
                        if len(echo) % SLICE_ENTITIES == 0:
                            yield ()  # a turn of echoing
                    echoes[id(entry)] = tuple(echo)
            yield entries

    def one(_ctx: ControllerContext, entry: Any) -> tuple[list[MetadataRecord], object]:
        code, message = ErrorCode.none, None
        entry_records: list[MetadataRecord] = []
        try:
            entry_records = _entry_records(entry)
        except _Refused as refused:
            code, message = refused.code, refused.message
        echo = echoes.pop(id(entry), None)
        if echo is None:
            echo = tuple(echo_data(component) for component in entry.entity)
        result = make(
            module.EntryData, {"error_code": code, "error_message": message, "entity": echo}
        )
        return entry_records, result

    def finish(results: tuple[object, ...]) -> object:
        return make(
            module.AlterClientQuotasResponse, {"throttle_time": timedelta(0), "entries": results}
        )

    return EntityRun((), one, finish, validate_only=request.validate_only, reading=reading)


def refuse_alter(module: Any, request: Any, code: ErrorCode, message: str | None = None) -> object:
    """Every entry of an AlterClientQuotas request refused with ``code``."""
    entries = tuple(
        make(
            module.EntryData,
            {
                "error_code": code,
                "error_message": message,
                "entity": tuple(
                    make(
                        module.EntityData,
                        {"entity_type": e.entity_type, "entity_name": e.entity_name},
                    )
                    for e in entry.entity
                ),
            },
        )
        for entry in request.entries
    )
    return make(
        module.AlterClientQuotasResponse, {"throttle_time": timedelta(0), "entries": entries}
    )


def _matches(entity: QuotaEntity, components: Any, strict: bool) -> bool:
    """Kafka's ClientQuotasImage.describe: every component matches the entity's name of its
    type (exact name, the default, or any name that is not the default); with ``strict`` the
    entity has no other types."""
    names = dict(entity)
    for component in components:
        if component.entity_type not in names:
            return False
        name = names[component.entity_type]
        if component.match_type == MATCH_EXACT and name != component.match:
            return False
        if component.match_type == MATCH_DEFAULT and name is not None:
            return False
        if component.match_type == MATCH_ANY and name is None:
            return False
    return not strict or len(names) == len(components)


async def _describe_error(components: Any) -> tuple[ErrorCode, str] | None:
    """Kafka's validation of a DescribeClientQuotas filter, a slice of components a turn
    (a filter may name 200,000)."""
    seen: set[str] = set()
    turns = Turns()
    for component in components:
        await turns.tick()
        if component.entity_type in seen:
            return ErrorCode.invalid_request, f"Duplicate {component.entity_type} filter component"
        seen.add(component.entity_type)
        if component.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY):
            return ErrorCode.invalid_request, f"Unknown match type {component.match_type}"
        if component.match_type == MATCH_EXACT and component.match is None:
            return ErrorCode.invalid_request, "Exact match requires a name"
        if component.match_type != MATCH_EXACT and component.match is not None:
            return ErrorCode.invalid_request, "Match name must be null unless the match is exact"
    if IP in seen and len(seen) > 1:
        return (
            ErrorCode.invalid_request,
            "Invalid entity filter component combination, IP filter component should not be "
            "used with User or ClientId filter component.",
        )
    return None


async def describe_client_quotas(image: MetadataImage, request: Any, api_version: int) -> object:
    """The entities of ``image`` the filter matches, with their quota values."""
    module: Any = response_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, api_version)
    refused = await _describe_error(request.components)
    if refused is not None:
        code, message = refused
        return make(
            module.DescribeClientQuotasResponse,
            {
                "throttle_time": timedelta(0),
                "error_code": code,
                "error_message": message,
                "entries": None,
            },
        )
    entries = tuple(
        make(
            module.EntryData,
            {
                "entity": _entity_data(module, entity),
                "values": tuple(
                    make(module.ValueData, {"key": key, "value": value})
                    for key, value in sorted(image.client_quotas[entity].items())
                ),
            },
        )
        for entity in sorted(image.client_quotas, key=entity_order)
        if _matches(entity, request.components, request.strict)
    )
    return make(
        module.DescribeClientQuotasResponse,
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.none,
            "error_message": None,
            "entries": entries,
        },
    )
