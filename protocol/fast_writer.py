"""kio's entity encoding, byte for byte, at a fraction of its per-entity cost.

kio 0.6.5's ``entity_writer`` serialises every flexible entity's tagged fields into a fresh
``io.BytesIO`` and counts them, even when there are none, and writes every array length
through its phantom integer types, each a validating constructor call. On the produce path
that made encoding a one-partition Produce response (~50 us) cost more than validating the
batch it answers (issue #25 item 4). This writer keeps kio's own writers for every primitive
field (so strings, bytes, records, timestamps and error codes are kio's encoding by
construction) and replaces only the entity framing around them:

- an entity's untagged fields in declaration order, then, for a flexible entity whose
  tagged fields all hold the values kio would skip, the empty tagged-field section (one zero
  byte) without a buffer; an entity with a tagged field set is written by kio itself;
- arrays of entities: kio's length prefix (compact: length + 1 as an unsigned varint, 0 for
  null; legacy: int32, -1 for null), then each entity by this writer;
- a nullable entity field: kio's KIP-893 marker byte (-1 null, 1 present), then the entity.

tests/protocol/test_fast_writer.py holds it to kio's bytes for arbitrary entities of every
API and version, requests and responses.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import MISSING, fields
from typing import Any

from kio.serial import entity_writer as kio_entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._serialize import get_field_writer

Writer = Callable[[Any, Any], None]
_I32 = struct.Struct(">i")
_NULL_ENTITY, _PRESENT_ENTITY = b"\xff", b"\x01"  # kio's NullableEntityMarker as int8
_NO_TAGGED_FIELDS = b"\x00"  # an unsigned varint 0: the count of tagged fields
_NULL_COMPACT_ARRAY = b"\x00"
_NULL_LEGACY_ARRAY = _I32.pack(-1)


def _uvarint(value: int) -> bytes:
    """An unsigned varint, as kio's write_unsigned_varint writes it."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# One writer per kio entity type, built on first use: kio's schema classes are finite.
_WRITERS: dict[type[Any], Writer] = {}


def entity_writer(entity_type: type[Any]) -> Writer:
    """A writer of ``entity_type`` entities producing kio's bytes (see the module doc)."""
    writer = _WRITERS.get(entity_type)
    if writer is None:
        writer = _WRITERS[entity_type] = _build(entity_type)
    return writer


def _build(entity_type: type[Any]) -> Writer:
    flexible: bool = entity_type.__flexible__
    is_request_header = entity_type.__name__ == "RequestHeader"
    steps: list[tuple[str, Writer]] = []
    tagged: list[tuple[str, object, object]] = []  # (name, default, implicit default)
    for field in fields(entity_type):
        if get_field_tag(field) is not None:
            tagged.append((field.name, field.default, get_tagged_field_default(field)))
        else:
            steps.append((field.name, _field_writer(field, flexible, is_request_header)))
    kio_writer: Writer = kio_entity_writer(entity_type)

    def write(buffer: Any, entity: Any) -> None:
        for name, default, implicit in tagged:
            value = getattr(entity, name)
            # kio skips a tagged field holding its default (or, with none declared, the
            # implicit default); any other value is written, and kio writes that entity.
            if not (value == default or (default is MISSING and value == implicit)):
                kio_writer(buffer, entity)
                return
        for name, field_writer in steps:
            field_writer(buffer, getattr(entity, name))
        if flexible:
            buffer.write(_NO_TAGGED_FIELDS)

    return write


def _field_writer(field: Any, flexible: bool, is_request_header: bool) -> Writer:
    """kio's writer of a primitive field; ours around entities and arrays of entities."""
    kind = classify_field(field)
    if isinstance(kind, EntityField):
        inner = entity_writer(kind.type_)
        return _nullable(inner) if is_optional(field) else inner
    if isinstance(kind, EntityTupleField):
        inner = entity_writer(kind.type_)
        return _compact_array(inner) if flexible else _legacy_array(inner)
    writer: Writer = get_field_writer(
        field, flexible=flexible, is_request_header=is_request_header, is_tag=False
    )
    return writer


def _nullable(inner: Writer) -> Writer:
    def write(buffer: Any, entity: Any) -> None:
        if entity is None:
            buffer.write(_NULL_ENTITY)
        else:
            buffer.write(_PRESENT_ENTITY)
            inner(buffer, entity)

    return write


def _compact_array(inner: Writer) -> Writer:
    def write(buffer: Any, items: Any) -> None:
        if items is None:
            buffer.write(_NULL_COMPACT_ARRAY)
            return
        buffer.write(_uvarint(len(items) + 1))
        for item in items:
            inner(buffer, item)

    return write


def _legacy_array(inner: Writer) -> Writer:
    def write(buffer: Any, items: Any) -> None:
        if items is None:
            buffer.write(_NULL_LEGACY_ARRAY)
            return
        buffer.write(_I32.pack(len(items)))
        for item in items:
            inner(buffer, item)

    return write
