"""Requests of every API as large as a test can afford: the shapes of issue 22's findings.

``big_request`` fills a request's arrays of entities so the frame holds about ``items``
entities in all: "wide" puts them in the longest top-level array (200,000 topics), "deep"
in the longest array one level down, under a single top-level entity (one topic of
200,000 partitions). Every string field of a generated entity is distinct (names of
topics, groups, members ...), so handlers cannot take a shortcut over duplicates; every
other field is its zero, except the few a Kafka client never leaves zero and that would
make a request park or go unanswered (``OVERRIDES``). The loop-hold test and the wire
fuzzer both send them.
"""

from __future__ import annotations

import dataclasses
import types
from datetime import timedelta
from typing import Any, get_args, get_origin

from protocol.entities import make, request_module

# Fields set on every entity that has them: a Produce with acks=0 gets no answer, a
# JoinGroup with no rebalance delay bound parks for its session timeout, a Fetch waits
# max_wait, a CreateTopics without validate_only would create thousands of topics.
OVERRIDES: dict[str, object] = {
    "acks": 1,
    "validate_only": True,
    "max_wait": timedelta(0),
    "timeout": timedelta(seconds=1),
    "timeout_ms": 1000,
    "replica_id": -1,
}


def array_element(annotation: Any) -> Any:
    """The element type of an array field (nullable or not), None for any other field."""
    if get_origin(annotation) is types.UnionType:
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    return get_args(annotation)[0] if get_origin(annotation) is tuple else None


def request_class(api_key: int, version: int) -> Any:
    module: types.ModuleType = request_module(api_key, version)
    return next(
        getattr(module, name)
        for name in dir(module)
        if name.endswith("Request")
        and getattr(getattr(module, name), "__api_key__", None) == api_key
    )


def _entity_arrays(entity_type: Any) -> list[tuple[str, Any]]:
    return [
        (field.name, element)
        for field in dataclasses.fields(entity_type)
        if (element := array_element(field.type)) is not None and dataclasses.is_dataclass(element)
    ]


def _strings(entity_type: Any, tag: str) -> dict[str, object]:
    values: dict[str, object] = {}
    for field in dataclasses.fields(entity_type):
        if field.type in ("str", str) or str(field.type) in ("str", "str | None"):
            values[field.name] = f"{field.name[:8]}-{tag}"
    return values


def _overrides(entity_type: Any) -> dict[str, object]:
    names = {field.name for field in dataclasses.fields(entity_type)}
    return {key: value for key, value in OVERRIDES.items() if key in names}


def _one(entity_type: Any, tag: str, depth: int = 0) -> Any:
    """An entity with distinct strings and one element in each nested array."""
    values = {**_strings(entity_type, tag), **_overrides(entity_type)}
    if depth < 3:
        for name, element in _entity_arrays(entity_type):
            values[name] = (_one(element, f"{tag}.0", depth + 1),)
    return _make(entity_type, values)


def _make(entity_type: Any, values: dict[str, object]) -> Any:
    try:
        return make(entity_type, values)
    except (TypeError, ValueError):
        return make(entity_type, {k: v for k, v in values.items() if not isinstance(v, str)})


def big_request(api_key: int, version: int, items: int, shape: str = "wide") -> Any | None:
    """The request described above, or None if it has no array of entities to fill."""
    cls = request_class(api_key, version)
    base = {**_overrides(cls), **_strings(cls, "r")}
    arrays = _entity_arrays(cls)
    if not arrays:
        return None
    name, element = arrays[0]
    if shape == "deep":
        nested = _entity_arrays(element)
        if nested:
            inner_name, inner = nested[0]
            top = dataclasses.replace(
                _one(element, "t0"),
                **{inner_name: tuple(_one(inner, f"p{i}", 2) for i in range(items))},
            )
            return _make(cls, {**base, name: (top,)})
    depth = 3 if shape == "flat" else 1
    return _make(cls, {**base, name: tuple(_one(element, f"t{i}", depth) for i in range(items))})
