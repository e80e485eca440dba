"""Building kio entities of any API version from one set of values.

kio has one generated class per API version, and the versions differ by a field here and
there (a cluster id from Metadata v2, topic ids from v10, ...). Handlers here describe a
response once, as the union of what every served version may carry, and :func:`make` keeps
what the requested version has: absent fields are dropped and required fields nobody gave a
value get the protocol's zero value. The quorum's codec (raft/codec.py), the broker and the
controller all build their entities with it (it sits here, beside wire.py, because every
layer above needs it).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import MISSING, Field, fields, is_dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, get_args, get_origin

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

_ZERO_BY_KAFKA_TYPE: dict[str, object] = {
    "bool": False,
    "string": "",
    "bytes": b"",
    "records": b"",
    "error_code": ErrorCode.none,
    "timedelta_i32": timedelta(0),
    "timedelta_i64": timedelta(0),
    "datetime_i64": datetime.fromtimestamp(0, UTC),
    "float64": 0.0,
}


@cache
def response_module(api_key: int, api_version: int) -> types.ModuleType:
    """The kio module holding one version's response entities (KioIndexError if none)."""
    return load_payload_module(api_key, api_version, EntityType.response)


def has_field(entity_type: Any, name: str) -> bool:
    """Whether this version of an entity carries the field ``name``."""
    return any(item_name == name for item_name, _ in _fields(entity_type))


@cache
def request_module(api_key: int, api_version: int) -> types.ModuleType:
    """The kio module holding one version's request entities (KioIndexError if none)."""
    return load_payload_module(api_key, api_version, EntityType.request)


def make(entity_type: Any, values: Mapping[str, object]) -> Any:
    """An entity of ``entity_type`` from the values its version has, zeros for the rest."""
    kwargs = {}
    for name, required in _fields(entity_type):
        if name in values:
            kwargs[name] = values[name]
        elif required is not None:
            kwargs[name] = _zero(required)
    return entity_type(**kwargs)


@cache
def _fields(entity_type: Any) -> tuple[tuple[str, Field[Any] | None], ...]:
    """(name, the field if it has no default) of each field, looked up once per type."""
    return tuple(
        (item.name, item if item.default is MISSING and item.default_factory is MISSING else None)
        for item in fields(entity_type)
    )


@cache
def _zero(item: Field[Any]) -> object:
    """The protocol's zero value for a required field we have nothing to put in: computed
    once per field (kio's entities are frozen, so one zero entity serves every use; a
    request naming 200,000 topics makes 200,000 answers, and the introspection was most
    of their cost)."""
    args = get_args(item.type)
    if get_origin(item.type) is types.UnionType and type(None) in args:
        return None
    if get_origin(item.type) is tuple:
        return ()
    if is_dataclass(item.type):
        return make(item.type, {})
    return _ZERO_BY_KAFKA_TYPE.get(item.metadata.get("kafka_type", ""), 0)
