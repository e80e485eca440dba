"""Reading a Kafka message body: whole, or a bounded slice of work at a time.

kio 0.6.5's native reader reserves memory for an array from its declared length before
reading any element: a frame claiming 2**32 elements aborts the whole process ("memory
allocation failed"), which no except clause can catch. So every body is first walked here,
in Python, against its schema ("the walk"): lengths are checked against the bytes actually
present and only a structurally sound body reaches kio, whose allocations then follow real
counts. The walk follows kio's reading exactly (a tagged field's value is read where it
starts and the reading goes on where it ends, as kio does, whatever size the tag declared),
so the bytes kio reads are the bytes the walk checked.

:func:`read_body` walks and then reads a body in one go: fine for the small requests nearly
every client sends, but a 5 MB Fetch naming 200,000 partitions is 0.25 s of walking and
kio reading, 0.5 s for a CreateTopics of 200,000 names, all of it one step of the event
loop (issue 22). :func:`read_body_in_slices` does the same work as a generator that stops
after every SLICE_UNITS units of work, a unit being one array element walked or read (an
entity of an array, or a primitive of one), counted across nesting levels, so its caller
serves the loop between steps. Both walk the whole body before kio reads any of it, in the
same order, so a malformed body fails with the same error either way.

The sliced reading relies on kio for every value: what the walk found small (an entity of
at most SLICE_UNITS units, a run of such entities, a run of primitives) is read by kio's own
reader of the array it belongs to, over a copy of its bytes behind a length prefix for the
run; only the entities around a big array (a "spine": the body, the one topic of 200,000
partitions) are assembled here, field by field with kio's field readers, and set on the
instance as kio's native reader sets them (allocated without ``__init__``, its slots
written), tagged fields read and defaulted as kio does. The result equals kio's reading of
the same bytes (tests/protocol/test_incremental.py compares them over every request of
every API version the broker serves).
"""

from __future__ import annotations

import struct
import types
from collections.abc import Generator
from dataclasses import Field, dataclass, fields, is_dataclass, replace
from functools import cache
from typing import Any, cast, get_args, get_origin

from kio.serial import entity_reader
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import is_optional
from kio.serial._parse import get_field_reader
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)

# Kafka's generated readers refuse a string longer than this, compact (flexible) ones too, and
# its writers cannot write one; a request carrying one fails to parse and its connection is
# closed. Every id a group record stores (group, member, instance, protocol) is bounded by it.
MAX_STRING_BYTES = 0x7FFF
# Units of work (array elements walked or read) between two yields of read_body_in_slices:
# about 1-3 ms of CPU on the development machine (bench/bench_loop_hold.py).
SLICE_UNITS = 1000

_LENGTH = struct.Struct(">i")
_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_LEGACY_LENGTH = {"string": struct.Struct(">h"), "bytes": _LENGTH, "records": _LENGTH}


class Malformed(ValueError):
    """The body does not fit its schema."""


class _OverBudget(Exception):
    """A walk met more units than its budget allowed (internal: never escapes this module)."""


class _Budget:
    """Units of work a walk may still do; ``units`` counts what it did."""

    __slots__ = ("cap", "units")

    def __init__(self, cap: float) -> None:
        self.cap = cap
        self.units = 0

    def spend(self, units: int) -> None:
        self.units += units
        if self.units > self.cap:
            raise _OverBudget


_UNBOUNDED = float("inf")


@dataclass(frozen=True, slots=True)
class _Shape:
    """How one field is laid out: a fixed size, a length-prefixed blob, an array, an entity."""

    size: int = 0  # fixed-size primitive
    blob: str = ""  # kafka type of a length-prefixed primitive
    item: _Shape | None = None  # array of these
    entity: type[Any] | None = None
    nullable_entity: bool = False
    nullable: bool = False  # a blob or array that may be null (length -1)


def _shape(field_type: Any, kafka_type: str | None, tagged: bool) -> _Shape:
    """The layout of a field from its annotation and kafka_type, as kio's writer derives it."""
    if get_origin(field_type) is types.UnionType:
        inner = next(arg for arg in get_args(field_type) if arg is not type(None))
        shape = _shape(inner, kafka_type, tagged)
        # kio marks a nullable struct with an int8 (KIP-893), except as a tagged field.
        if shape.entity:
            return _Shape(entity=shape.entity, nullable_entity=not tagged)
        return replace(shape, nullable=True)
    if get_origin(field_type) is tuple:
        return _Shape(item=_shape(get_args(field_type)[0], kafka_type, tagged=False))
    if isinstance(field_type, type) and is_dataclass(field_type):
        return _Shape(entity=field_type)
    if kafka_type in _FIXED_SIZES:
        return _Shape(size=_FIXED_SIZES[kafka_type])
    if kafka_type in _LEGACY_LENGTH:
        return _Shape(blob=kafka_type)
    raise TypeError(f"no layout known for kafka type {kafka_type!r}")


@cache
def _layout(entity_type: type[Any]) -> tuple[list[_Shape], dict[int, _Shape]]:
    """(untagged field shapes in order, tagged field shapes by tag) of an entity type."""
    untagged, tagged = [], {}
    for item in fields(entity_type):
        tag = item.metadata.get("tag")
        shape = _shape(item.type, item.metadata.get("kafka_type"), tag is not None)
        if tag is None:
            untagged.append(shape)
        else:
            tagged[tag] = shape
    return untagged, tagged


def _uvarint(data: bytes, pos: int, limit: int) -> tuple[int, int]:
    """(unsigned varint, position after it); at most 5 bytes, like kio's reader."""
    value = shift = 0
    while shift <= 28:
        if pos >= limit:
            raise Malformed("varint runs past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    raise Malformed("varint longer than 5 bytes")


def _length(
    data: bytes, pos: int, limit: int, flexible: bool, legacy: struct.Struct
) -> tuple[int, int]:
    """(length or -1 for null, position after the prefix), refusing lengths past ``limit``."""
    if flexible:
        length, pos = _uvarint(data, pos, limit)
        length -= 1
    else:
        if pos + legacy.size > limit:
            raise Malformed("length prefix runs past the end")
        (length,) = legacy.unpack_from(data, pos)
        pos += legacy.size
    if length > limit - pos:
        raise Malformed(f"length {length} exceeds the {limit - pos} bytes left")
    return length, pos


def _walk_value(
    shape: _Shape, flexible: bool, data: bytes, pos: int, limit: int, budget: _Budget
) -> int:
    """The position after one field value; flexible versions use compact lengths. Each
    element of an array spends a unit of ``budget``, before any is walked."""
    if shape.size:
        pos += shape.size
    elif shape.blob:
        length, pos = _length(data, pos, limit, flexible, _LEGACY_LENGTH[shape.blob])
        _check_null(shape, length)
        if shape.blob == "string" and length > MAX_STRING_BYTES:
            raise Malformed(f"string of {length} bytes (at most {MAX_STRING_BYTES})")
        pos += max(length, 0)
    elif shape.item is not None:
        count, pos = _length(data, pos, limit, flexible, _LENGTH)
        _check_null(shape, count)
        if count > 0:
            budget.spend(count)
        if shape.item.size:
            pos += max(count, 0) * shape.item.size
        else:
            for _ in range(count):
                pos = _walk_value(shape.item, flexible, data, pos, limit, budget)
    else:
        assert shape.entity is not None
        if shape.nullable_entity:
            pos += 1
            if pos <= limit and data[pos - 1] == 0xFF:
                return pos
        pos = _walk_entity(shape.entity, data, pos, limit, budget)
    if pos > limit:
        raise Malformed("field runs past the end")
    return pos


def _check_null(shape: _Shape, length: int) -> None:
    """Kafka's readers: -1 is null, allowed only where the schema says nullable; any other
    negative length is malformed. (kio would read a null non-nullable array as None, and
    handlers iterating it would fail on a request they should never have been given.)"""
    if length < -1 or (length == -1 and not shape.nullable):
        raise Malformed(f"length {length} for a non-nullable field")


def _walk_tag(data: bytes, pos: int, limit: int) -> tuple[int, int, int]:
    """(tag, position of its value, end the tag declares) of one tagged field."""
    tag, pos = _uvarint(data, pos, limit)
    size, pos = _uvarint(data, pos, limit)
    end = pos + size
    if end > limit:
        raise Malformed(f"tagged field {tag} runs past the end")
    return tag, pos, end


def _walk_entity(entity_type: Any, data: bytes, pos: int, limit: int, budget: _Budget) -> int:
    """The position after one entity, checking every length on the way. A known tagged
    field's value must fit in the size its tag declares, and the walk goes on where the
    value ends, as kio's reader does; an unknown tag is skipped whole (kio refuses it)."""
    flexible = entity_type.__flexible__
    untagged, tagged = _layout(entity_type)
    for shape in untagged:
        pos = _walk_value(shape, flexible, data, pos, limit, budget)
    if flexible:
        count, pos = _uvarint(data, pos, limit)
        for _ in range(count):
            tag, pos, end = _walk_tag(data, pos, limit)
            if tag in tagged:
                pos = _walk_value(tagged[tag], flexible, data, pos, end, budget)
            else:
                pos = end
    return pos


def read_body(body_type: type[Any], frame: bytes, offset: int) -> tuple[Any, int]:
    """(body, its size): kio's reading of a body, after the walk made it safe to run."""
    _walk_entity(body_type, frame, offset, len(frame), _Budget(_UNBOUNDED))
    return entity_reader(body_type)(frame, offset)


# ---------------------------------------------------------------- in slices


@dataclass(frozen=True, slots=True)
class _Run:
    """Elements of an array kio reads in one call: ``count`` of them in frame[start:end],
    ``units`` units of work in all."""

    count: int
    start: int
    end: int
    units: int


@dataclass(frozen=True, slots=True)
class _Spine:
    """An element of an array too big for one step, at ``start``: assembled here."""

    start: int


@dataclass(slots=True)
class _Plan:
    """What the walk found for the reading: the pieces of every array of a spine entity
    (by the position of its length prefix) and where each spine entity starts. At most a
    few entries per SLICE_UNITS units of the body."""

    arrays: dict[int, list[_Run | _Spine]]
    spines: set[int]


class _Steps:
    """Units of work done in the current step, and how many a step may do."""

    __slots__ = ("done", "limit")

    def __init__(self, limit: int) -> None:
        assert limit > 0
        self.limit = limit
        self.done = 0

    def add(self, units: int) -> int:
        """Count ``units``; the step's units when a step's worth is done (the caller
        yields them and a new step begins), else 0."""
        self.done += units
        if self.done < self.limit:
            return 0
        return self.end()

    def end(self) -> int:
        done, self.done = self.done, 0
        return done


def read_body_in_slices(
    body_type: type[Any], frame: bytes, offset: int, slice_units: int = SLICE_UNITS
) -> Generator[int, None, tuple[Any, int]]:
    """(body, its size), as :func:`read_body` returns them, computed a step at a time: each
    yield ends a step and gives the units of work done in it (at most ``slice_units`` and
    one). A body of at most ``slice_units`` units (nearly every request, whatever its
    bytes: a 1 MiB Produce of one partition is a few units) is read in one step, by
    kio's reader of the whole body, as read_body reads it; a bigger one is walked again,
    in steps, and read in steps. The whole body is walked before kio reads any of it, so
    the errors are those of :func:`read_body` for the same bytes."""
    try:  # most requests: a walk of at most a slice, then kio reads the body in one go
        _walk_entity(body_type, frame, offset, len(frame), _Budget(slice_units))
    except _OverBudget:
        pass
    else:
        return entity_reader(body_type)(frame, offset)
    plan = _Plan({}, set())
    steps = _Steps(slice_units)
    yield steps.add(slice_units)  # the attempt walked a slice: its step ends
    yield from _walk_spine(body_type, frame, offset, len(frame), plan, steps)
    yield steps.end()  # the walk's last step; the reading starts a step of its own
    return (yield from _read_spine(body_type, frame, offset, plan, steps))


def _walk_spine(
    entity_type: Any, data: bytes, pos: int, limit: int, plan: _Plan, steps: _Steps
) -> Generator[int, None, int]:
    """_walk_entity in steps, each field walked by _walk_piece; the entity is a spine."""
    plan.spines.add(pos)
    flexible = entity_type.__flexible__
    untagged, tagged = _layout(entity_type)
    for shape in untagged:
        pos = yield from _walk_piece(shape, flexible, data, pos, limit, plan, steps)
    if flexible:
        count, pos = _uvarint(data, pos, limit)
        for _ in range(count):
            tag, pos, end = _walk_tag(data, pos, limit)
            if tag in tagged:
                pos = yield from _walk_piece(tagged[tag], flexible, data, pos, end, plan, steps)
            else:
                pos = end
    return pos


def _walk_element(
    entity_type: Any, data: bytes, pos: int, limit: int, plan: _Plan, steps: _Steps
) -> Generator[int, None, tuple[int, int]]:
    """(end, units) of one entity: walked whole if it fits in what remains of this step
    or else in a step of its own, walked as a spine if not even that (units 0: its own
    steps counted them). An attempt that does not fit walked at most what it was allowed,
    and ends its step."""
    remaining = steps.limit - steps.done
    for cap in (remaining, steps.limit) if remaining < steps.limit else (steps.limit,):
        budget = _Budget(cap)
        try:
            end = _walk_entity(entity_type, data, pos, limit, budget)
        except _OverBudget:
            steps.done += cap
            yield steps.end()
            continue
        return end, 1 + budget.units
    end = yield from _walk_spine(entity_type, data, pos, limit, plan, steps)
    return end, 0


def _walk_piece(
    shape: _Shape,
    flexible: bool,
    data: bytes,
    pos: int,
    limit: int,
    plan: _Plan,
    steps: _Steps,
) -> Generator[int, None, int]:
    """_walk_value in steps: an entity bigger than a step is walked as a spine, and an
    array an element at a time, its elements grouped into runs of at most SLICE_UNITS
    units for the reading (an element bigger than that being a spine of its own)."""
    if shape.entity is not None:
        if shape.nullable_entity:
            pos += 1
            if pos <= limit and data[pos - 1] == 0xFF:
                return pos
        pos, units = yield from _walk_element(shape.entity, data, pos, limit, plan, steps)
        if done := steps.add(units):
            yield done
    elif shape.item is not None:
        pos = yield from _walk_array(shape, flexible, data, pos, limit, plan, steps)
    else:
        pos = _walk_value(shape, flexible, data, pos, limit, _Budget(_UNBOUNDED))
    if pos > limit:
        raise Malformed("field runs past the end")
    return pos


def _walk_array(
    shape: _Shape,
    flexible: bool,
    data: bytes,
    pos: int,
    limit: int,
    plan: _Plan,
    steps: _Steps,
) -> Generator[int, None, int]:
    """The position after an array (see _walk_piece), its pieces recorded in the plan."""
    at = pos
    count, pos = _length(data, pos, limit, flexible, _LENGTH)
    _check_null(shape, count)
    item = shape.item
    assert item is not None
    if count <= 0:
        return pos
    pieces: list[_Run | _Spine] = []
    plan.arrays[at] = pieces
    if item.size:  # fixed-size elements: runs by arithmetic, nothing to walk
        end = pos + count * item.size
        if end > limit:
            raise Malformed("field runs past the end")
        if count > steps.limit:
            for first in range(0, count, steps.limit):
                run = min(steps.limit, count - first)
                start = pos + first * item.size
                pieces.append(_Run(run, start, start + run * item.size, run))
        else:
            del plan.arrays[at]
        return end
    run_start, run_count, run_units = pos, 0, 0
    for _ in range(count):
        start = pos
        if item.entity is None:
            pos, units = _walk_value(item, flexible, data, pos, limit, _Budget(_UNBOUNDED)), 1
        else:
            pos, units = yield from _walk_element(item.entity, data, pos, limit, plan, steps)
        if pos > limit:
            raise Malformed("field runs past the end")
        if run_count and (not units or run_units + units > steps.limit):
            pieces.append(_Run(run_count, run_start, start, run_units))
            run_start, run_count, run_units = start, 0, 0
        if not units:
            pieces.append(_Spine(start))
            run_start = pos
            continue
        run_count += 1
        run_units += units
        if done := steps.add(units):
            yield done
    if run_count:
        pieces.append(_Run(run_count, run_start, pos, run_units))
    if len(pieces) == 1 and isinstance(pieces[0], _Run):
        del plan.arrays[at]  # one run: kio reads the array where it is
    return pos


@dataclass(frozen=True, slots=True)
class _FieldReading:
    """How kio reads one field of an entity, and what the sliced reading needs of it."""

    name: str
    read: Any  # kio's reader of the field: (buffer, offset) -> (value, size)
    array: bool
    flexible: bool
    entity: type[Any] | None  # of an entity field, or of the elements of an array
    nullable: bool  # an entity field kio reads behind a null marker


@dataclass(frozen=True, slots=True)
class _EntityReading:
    untagged: tuple[_FieldReading, ...]
    tagged: dict[int, _FieldReading]
    defaults: tuple[tuple[str, object], ...]  # the tagged fields' defaults, in order


@cache
def _reading(entity_type: type[Any]) -> _EntityReading:
    """kio's readers of each field of ``entity_type``, as its native entity reader
    compiles them (kio.serial._parse.get_field_reader), and its tagged fields' defaults."""
    flexible = entity_type.__flexible__
    untagged, tagged, defaults = [], {}, []
    for item in fields(entity_type):
        tag = item.metadata.get("tag")
        reading = _field_reading(entity_type, item, flexible, tag is not None)
        if tag is None:
            untagged.append(reading)
        else:
            tagged[tag] = reading
            defaults.append((item.name, get_tagged_field_default(item)))
    return _EntityReading(tuple(untagged), tagged, tuple(defaults))


def _field_reading(
    entity_type: type[Any], item: Field[Any], flexible: bool, tagged: bool
) -> _FieldReading:
    inner = item.type
    if get_origin(inner) is types.UnionType:
        inner = next(arg for arg in get_args(inner) if arg is not type(None))
    array = get_origin(inner) is tuple
    element = get_args(inner)[0] if array else inner
    entity = element if isinstance(element, type) and is_dataclass(element) else None
    return _FieldReading(
        name=item.name,
        read=get_field_reader(entity_type, item, False, tagged),
        array=array,
        flexible=flexible,
        entity=entity,
        nullable=entity is not None and not array and is_optional(item),
    )


def _array_prefix(flexible: bool, count: int) -> bytes:
    """An array's length prefix, as kio's array readers read it."""
    if not flexible:
        return _LENGTH.pack(count)
    value, out = count + 1, bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_spine(
    entity_type: type[Any], frame: bytes, pos: int, plan: _Plan, steps: _Steps
) -> Generator[int, None, tuple[Any, int]]:
    """(entity, size) as kio's entity reader reads it at ``pos``, its fields read by
    _read_field: an instance allocated without ``__init__``, its untagged fields set in
    order, then its tagged fields (unknown tags refused, absent ones defaulted)."""
    reading = _reading(cast(type, entity_type))  # a class is hashable; type[Any] hides it
    start = pos
    entity = object.__new__(entity_type)
    for field_reading in reading.untagged:
        value, pos = yield from _read_field(field_reading, frame, pos, plan, steps)
        object.__setattr__(entity, field_reading.name, value)
    if entity_type.__flexible__:
        count, size = read_unsigned_varint(frame, pos)
        pos += size
        values: dict[str, object] = {}
        for _ in range(count):
            tag, size = read_unsigned_varint(frame, pos)
            pos += size
            _declared, size = read_unsigned_varint(frame, pos)
            pos += size
            tagged = reading.tagged.get(tag)
            if tagged is None:
                raise KeyError(f"Unknown tagged field tag: {tag}")
            values[tagged.name], pos = yield from _read_field(tagged, frame, pos, plan, steps)
        for name, default in reading.defaults:
            object.__setattr__(entity, name, values.get(name, default))
    return entity, pos - start


def _read_field(
    reading: _FieldReading, frame: bytes, pos: int, plan: _Plan, steps: _Steps
) -> Generator[int, None, tuple[Any, int]]:
    """(value, position after it) of one field: by kio's reader of the field unless the
    walk found it too big for a step (an array with pieces, a spine entity)."""
    if reading.array and pos in plan.arrays:
        return (yield from _read_array(reading, frame, pos, plan.arrays[pos], plan, steps))
    if reading.entity is not None and not reading.array:
        start = pos
        if reading.nullable:
            marker, size = read_int8(frame, pos)
            start += size
            if marker == -1:
                return None, start
        if start in plan.spines:
            value, size = yield from _read_spine(reading.entity, frame, start, plan, steps)
            return value, start + size
    value, size = reading.read(frame, pos)
    return value, pos + size


def _read_array(
    reading: _FieldReading,
    frame: bytes,
    pos: int,
    pieces: list[_Run | _Spine],
    plan: _Plan,
    steps: _Steps,
) -> Generator[int, None, tuple[tuple[Any, ...], int]]:
    """An array the walk split: each run read by kio's reader of the array, over the run's
    bytes behind a length prefix of its own; each spine element by _read_spine."""
    length_reader = read_compact_array_length if reading.flexible else read_legacy_array_length
    _count, size = length_reader(frame, pos)
    pos += size
    view = memoryview(frame)
    items: list[Any] = []
    for piece in pieces:
        if isinstance(piece, _Run):
            if steps.done and steps.done + piece.units > steps.limit:
                yield steps.end()
            if piece.count == 1 and reading.entity is not None:  # read in place, no copy
                value, size = entity_reader(reading.entity)(frame, piece.start)
                items.append(value)
            else:
                prefix = _array_prefix(reading.flexible, piece.count)
                run = b"".join((prefix, view[piece.start : piece.end]))
                values, size = reading.read(run, 0)
                size -= len(prefix)
                items.extend(values)
            assert size == piece.end - piece.start, "the walk and kio disagree on a run"
            pos = piece.end
            if done := steps.add(piece.units):
                yield done
        else:
            assert reading.entity is not None
            value, size = yield from _read_spine(reading.entity, frame, piece.start, plan, steps)
            items.append(value)
            pos = piece.start + size
    return tuple(items), pos
