"""Kafka protocol framing and request/response headers, on top of kio's schemas.

Every connection carries size-delimited frames: a 4-byte big-endian length, then a header, then
the body. Which header version goes with a body is not in the frame, so both ends derive it
from the body's schema: flexible API versions (KIP-482, tagged fields) use request header v2
and response header v1, older ones request header v1 and response header v0. ApiVersions is
the exception on the response side: its response header is always v0, because a client that
does not yet know which versions the server speaks must be able to read the answer (KIP-511).

Everything here is sans-I/O except :func:`read_frame`, so the simulator and the real server
share it. Header and body decoding errors surface as :class:`FrameError` carrying what the
server needs to answer: the header when it could be parsed, and the Kafka error code to use.
Bodies are checked structurally before kio reads them (protocol/incremental.py), because kio
trusts declared array lengths with its allocations; a big request body can be read a slice
of work at a time (:func:`decode_request_steps`), so reading it does not hold an event loop.
"""

from __future__ import annotations

import asyncio
import io
import struct
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass, replace
from functools import cache
from typing import Any, TypeVar, cast

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.schema.response_header.v0.header import ResponseHeader as ResponseHeaderV0
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader
from kio.serial.errors import SerialError
from kio.serial.writers import (
    Writable,
    write_compact_array_length,
    write_legacy_array_length,
)
from kio.static.primitive import i16, i32

from log.fs import FileRegion
from protocol.api_keys import ApiKey
from protocol.fast_writer import entity_writer
from protocol.incremental import MAX_STRING_BYTES as MAX_STRING_BYTES  # (its walk's bound)
from protocol.incremental import SLICE_UNITS, read_body, read_body_in_slices

MAX_FRAME_BYTES = 104_857_600  # Kafka's socket.request.max.bytes default
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42

_LENGTH = struct.Struct(">i")
# What kio's native readers raise on bad input: its own errors, ValueError for invalid varints,
# error codes and UTF-8, KeyError for a tagged field the schema does not know.
_DECODE_ERRORS = (SerialError, ValueError, KeyError, IndexError, OverflowError)


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """The request header fields, independent of header version (v1 and v2 share them)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class FrameError(Exception):
    """A frame that cannot be accepted.

    ``header`` is set when the request header parsed, so the server can still answer (Kafka
    answers an unsupported version with an error response rather than closing the connection).
    ``error_code`` is the Kafka error such an answer carries: UNSUPPORTED_VERSION for an API
    key or version we cannot decode, INVALID_REQUEST for a malformed frame.
    """

    def __init__(
        self,
        message: str,
        *,
        header: RequestHeader | None = None,
        error_code: int = INVALID_REQUEST,
    ) -> None:
        super().__init__(message)
        self.header = header
        self.error_code = error_code


async def read_frame(reader: asyncio.StreamReader, max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """The next frame's payload (without its length prefix).

    The length is checked before reading so a corrupt or hostile prefix cannot make us buffer
    gigabytes. EOF, clean or mid-frame, propagates as ``asyncio.IncompleteReadError``.
    """
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length < 0 or length > max_bytes:
        raise FrameError(f"frame length {length} outside [0, {max_bytes}]")
    return await reader.readexactly(length)


@cache
def _request_schema(api_key: int, api_version: int) -> type[Any]:
    """kio's request schema class, looked up once: kio resolves it by module name and
    import on every call (pkgutil.resolve_name), ~8 us per request."""
    schema: type[Any] = load_request_schema(api_key, api_version)
    return schema


@cache
def _response_schema(api_key: int, api_version: int) -> type[Any]:
    """kio's response schema class, looked up once (see _request_schema)."""
    schema: type[Any] = load_response_schema(api_key, api_version)
    return schema


def _frame(*parts: tuple[type[Any], object]) -> bytes:
    """Serialize entities back to back behind a length prefix."""
    buffer = io.BytesIO()
    buffer.seek(_LENGTH.size)
    for entity_type, entity in parts:
        entity_writer(entity_type)(buffer, entity)
    length = buffer.tell() - _LENGTH.size
    buffer.seek(0)
    buffer.write(_LENGTH.pack(length))
    return buffer.getvalue()


def _check_body(header: RequestHeader, body: object) -> type[Any]:
    """The body's schema class, refusing a body that does not match the header."""
    body_type: type[Any] = type(body)
    if (body_type.__api_key__, body_type.__version__) != (header.api_key, header.api_version):
        raise ValueError(
            f"{body_type.__name__} v{body_type.__version__} does not match header "
            f"api {header.api_key} v{header.api_version}"
        )
    return body_type


def encode_request(header: RequestHeader, body: object, encoded_body: bytes | None = None) -> bytes:
    """The whole request frame, length prefix included; ``encoded_body``: the body's bytes,
    encoded beforehand (``request_body_parts``)."""
    body_type = _check_body(header, body)
    header_type = RequestHeaderV2 if body_type.__flexible__ else RequestHeaderV1
    kio_header = header_type(
        request_api_key=i16(header.api_key),
        request_api_version=i16(header.api_version),
        correlation_id=i32(header.correlation_id),
        client_id=header.client_id,
    )
    if encoded_body is None:
        return _frame((header_type, kio_header), (body_type, body))
    head = _encode(header_type, kio_header)
    return _LENGTH.pack(len(head) + len(encoded_body)) + head + encoded_body


def request_body_parts(body: object, slice_items: int) -> Iterator[bytes] | None:
    """A request body's bytes about ``slice_items`` entities at a time (as response_parts),
    so a broker forwarding a CreateTopics of 200,000 topics to its controller can serve its
    loop while encoding it; None when the body is small enough to encode in one piece."""
    if _weight(body) <= slice_items and all(
        _weight(item) <= slice_items
        for name in _ENTITY_ARRAYS[type(body)]
        for item in (getattr(body, name) or ())[:1]
        if is_dataclass(item)  # arrays of ids or names hold no entities to weigh
    ):
        return None
    return (
        b"".join(bytes(part) for part in parts) for parts in _entity_parts(body, slice_items, b"")
    )


def decode_request(
    frame: bytes,
    supported: Mapping[int, tuple[int, int]] | None = None,
    *,
    allow_trailing: bool = False,
) -> tuple[RequestHeader, object]:
    """The header and kio body entity of a request frame's payload (as read_frame returns it).

    The v1 header is a prefix of the v2 header (client_id stays a non-compact string even in
    v2), so the header is parsed before knowing the API; only then does the schema say whether
    tagged header fields follow. That order also covers ApiVersions requests of a version we
    do not know: the header still parses and the server can answer with its versions.
    ``supported`` (api key -> (min, max)) additionally refuses versions kio knows but the
    server does not serve, with UNSUPPORTED_VERSION. Trailing bytes are refused between
    our own nodes (they mean the peer and we disagree about the schema); client listeners
    pass ``allow_trailing`` because Kafka's brokers ignore them and librdkafka 2.16 sends
    three after an all-topics Metadata v12 body.
    """
    return _whole(
        decode_request_steps(frame, supported, allow_trailing=allow_trailing, slice_units=None)
    )


_Decoded = TypeVar("_Decoded")


def _whole(steps: Generator[int, None, _Decoded]) -> _Decoded:
    """The result of a decoding generator made with ``slice_units=None``, which reads the
    whole body in one go and so finishes without yielding."""
    try:
        next(steps)
    except StopIteration as done:
        result: _Decoded = done.value
        return result
    raise AssertionError("a whole reading took steps")


def decode_request_steps(
    frame: bytes,
    supported: Mapping[int, tuple[int, int]] | None = None,
    *,
    allow_trailing: bool = False,
    slice_units: int | None = SLICE_UNITS,
) -> Generator[int, None, tuple[RequestHeader, object]]:
    """decode_request as a generator: the body is read a step of at most about
    ``slice_units`` units of work at a time (each yield ends a step and gives its units;
    None: in one go, no yield). Same result, same FrameError, either way."""
    frame = bytes(frame)  # kio's native readers want a read-only buffer
    try:
        raw, offset = entity_reader(RequestHeaderV1)(frame, 0)
    except _DECODE_ERRORS as error:
        raise FrameError(f"malformed request header: {error}") from error
    header = RequestHeader(
        raw.request_api_key, raw.request_api_version, raw.correlation_id, raw.client_id
    )
    key, version = header.api_key, header.api_version
    if supported is not None:
        low, high = supported.get(key, (0, -1))
        if not low <= version <= high:
            raise FrameError(
                f"api {key} v{version} outside the served range [{low}, {high}]",
                header=header,
                error_code=UNSUPPORTED_VERSION,
            )
    try:
        body_type = _request_schema(key, version)
    except KioIndexError as error:
        raise FrameError(
            f"unknown api {key} v{version}", header=header, error_code=UNSUPPORTED_VERSION
        ) from error
    try:
        if body_type.__flexible__:
            _, offset = entity_reader(RequestHeaderV2)(frame, 0)
        if slice_units is not None:
            body, size = yield from read_body_in_slices(body_type, frame, offset, slice_units)
        else:
            body, size = read_body(body_type, frame, offset)
    except _DECODE_ERRORS as error:
        raise FrameError(
            f"malformed api {key} v{version} request: {error}", header=header
        ) from error
    if offset + size != len(frame) and not allow_trailing:
        raise FrameError(
            f"{len(frame) - offset - size} trailing bytes after api {key} v{version} request",
            header=header,
        )
    return header, body


def _response_header_type(api_key: int, flexible: bool) -> type[Any]:
    """Response header v1 for flexible bodies, v0 otherwise and always for ApiVersions."""
    return ResponseHeaderV1 if flexible and api_key != ApiKey.API_VERSIONS else ResponseHeaderV0


def encode_response(header: RequestHeader, body: object) -> bytes:
    """The whole response frame answering ``header``, length prefix included.

    The body's own version decides the header version, not ``header.api_version``: an
    UNSUPPORTED_VERSION answer to ApiVersions is a v0 body whatever version was asked for.
    """
    body_type: type[Any] = type(body)
    if body_type.__api_key__ != header.api_key:
        raise ValueError(f"{body_type.__name__} does not answer api {header.api_key}")
    header_type = _response_header_type(header.api_key, body_type.__flexible__)
    kio_header = header_type(correlation_id=header.correlation_id)
    return _frame((header_type, kio_header), (body_type, body))


# A piece of an encoded response: bytes, or a region of a log segment that kio was handed as
# a records field and that the network layer sends without reading (sendfile).
Part = bytes | FileRegion
# Immutable bytes this long (records already in memory, as the Raft log's Fetch answers
# carry) stay parts of their own too: copying them into the buffer would be one more copy.
_OWN_PART_BYTES = 4096


class _PartsWriter:
    """The buffer kio writes an entity into, keeping each FileRegion it is given as a part of
    its own between the bytes around it. kio's writers take only ``len(value)`` of a records
    field and pass the value to ``write``, so the length prefixes are kio's own encoding."""

    __slots__ = ("_buffer", "parts")

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self._buffer = bytearray()

    def write(self, data: bytes | FileRegion) -> int:
        if type(data) is bytes and len(data) < _OWN_PART_BYTES:  # nearly every field
            self._buffer += data
        elif isinstance(data, FileRegion) or type(data) is bytes:
            if data:
                self._flush()
                self.parts.append(data)
        else:
            self._buffer += data
        return len(data)

    def _flush(self) -> None:
        if self._buffer:
            self.parts.append(bytes(self._buffer))
            self._buffer.clear()

    def finish(self) -> list[Part]:
        self._flush()
        return self.parts

    def writable(self) -> Writable:
        """This writer as kio's writers are typed to take it: they only call ``write``."""
        return cast(Writable, self)


def response_parts(header: RequestHeader, body: object, slice_items: int) -> Iterator[list[Part]]:
    """The bytes of ``encode_response`` after its length prefix, as lists of parts (bytes
    and the FileRegions of records fields, unread), computed as they are asked for: about
    ``slice_items`` entities per list, so a caller can serve its event loop between lists
    (a Metadata answer naming 100,000 topics is 0.6 s of kio encoding in one piece, a Fetch
    answer of 200,000 partitions of one topic 10 s). The body's longest array of entities
    comes out a few entities at a time, and an entity of it that holds a big array of its
    own (the one topic of those 200,000 partitions) is split the same way, recursively.
    Anything smaller is one list."""
    assert slice_items > 0
    body_type: type[Any] = type(body)
    if body_type.__api_key__ != header.api_key:
        raise ValueError(f"{body_type.__name__} does not answer api {header.api_key}")
    head = _response_head(header.api_key, body_type.__flexible__, header.correlation_id)
    yield from _entity_parts(body, slice_items, head)


def _entity_parts(entity: Any, slice_items: int, head: bytes) -> Iterator[list[Part]]:
    """``head`` and ``entity``'s bytes, in lists of about ``slice_items`` entities each."""
    entity_type: type[Any] = type(entity)
    name = _longest_entity_array(entity)
    items: tuple[Any, ...] = getattr(entity, name) if name else ()
    big = len(items) > slice_items or (
        bool(items) and sum(_weight(item) for item in items) > slice_items
    )
    split = _split_at_array(entity, name, items) if big else None
    if split is None:
        writer = _PartsWriter()
        writer.write(head)
        entity_writer(entity_type)(writer.writable(), entity)
        yield writer.finish()
        return
    before, after = split
    yield [head + before + _array_length(entity_type.__flexible__, len(items))]
    write = entity_writer(type(items[0]))
    writer, weight = _PartsWriter(), 0
    for item in items:
        item_weight = _weight(item)
        if item_weight > slice_items:
            if weight:
                yield writer.finish()
                writer, weight = _PartsWriter(), 0
            yield from _entity_parts(item, slice_items, b"")
            continue
        if weight + item_weight > slice_items:  # a slice never goes over its budget
            yield writer.finish()
            writer, weight = _PartsWriter(), 0
        write(writer.writable(), item)
        weight += item_weight
    if weight:
        yield writer.finish()
    yield [after]


_ENTITY_ARRAYS: dict[type[Any], tuple[str, ...]] = {}


def _trimmed(entity: Any) -> Any:
    """``entity`` with its arrays of entities emptied."""
    _weight(entity)  # fills _ENTITY_ARRAYS for its type
    empty = {
        name: ()
        for name in _ENTITY_ARRAYS[type(entity)]
        if (value := getattr(entity, name)) and is_dataclass(value[0])
    }
    return replace(entity, **empty) if empty else entity


def _weight(entity: Any) -> int:
    """1 plus the entities of ``entity``'s own arrays of entities (one level down: what
    decides whether it is split on its own)."""
    names = _ENTITY_ARRAYS.get(type(entity))
    if names is None:
        names = _ENTITY_ARRAYS[type(entity)] = tuple(
            item.name for item in fields(entity) if "tuple" in str(item.type)
        )
    total = 1
    for name in names:
        value = getattr(entity, name)
        if value and is_dataclass(value[0]):
            total += len(value)
    return total


def _response_head(api_key: int, flexible: bool, correlation_id: int) -> bytes:
    """The response header's bytes: kio writes v0 as the int32 correlation id and v1 as that
    and an empty tagged-field section (a zero count); built without a kio entity, which
    cost more than the rest of a small answer's header path."""
    head = _LENGTH.pack(correlation_id)
    return head + b"\0" if _response_header_type(api_key, flexible) is ResponseHeaderV1 else head


def _encode(entity_type: type[Any], entity: object) -> bytes:
    """The entity's bytes; a FileRegion in it is read (only the split check meets one)."""
    writer = _PartsWriter()
    entity_writer(entity_type)(writer.writable(), entity)
    return b"".join(bytes(part) for part in writer.finish())


def _array_length(flexible: bool, count: int) -> bytes:
    buffer = io.BytesIO()
    if flexible:
        write_compact_array_length(buffer, count)
    else:
        write_legacy_array_length(buffer, i32(count))
    return buffer.getvalue()


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}  # per kio entity type (finitely many)


def _field_names(entity_type: type[Any]) -> tuple[str, ...]:
    """The entity type's field names (dataclasses.fields rebuilds its tuple per call)."""
    names = _FIELD_NAMES.get(entity_type)
    if names is None:
        names = _FIELD_NAMES[entity_type] = tuple(item.name for item in fields(entity_type))
    return names


def _longest_entity_array(body: object) -> str | None:
    best, size = None, 0
    for name in _field_names(type(body)):
        value = getattr(body, name)
        if isinstance(value, tuple) and len(value) > size and is_dataclass(value[0]):
            best, size = name, len(value)
    return best


def _split_at_array(
    body: Any, name: str | None, items: tuple[Any, ...]
) -> tuple[bytes, bytes] | None:
    """(the body's bytes before array ``name``'s length, those after its last element),
    found by encoding the body with the array empty and with its first element only, and
    checked: None (encode whole) unless the second is exactly the first with one element
    spliced in, so the split relies on kio's encoding alone, never on a layout of ours."""
    body_type = type(body)
    flexible = body_type.__flexible__
    writer = _PartsWriter()
    entity_writer(body_type)(writer.writable(), replace(body, **{name: ()}))  # type: ignore[arg-type]
    pieces = writer.finish()
    if any(isinstance(piece, FileRegion) for piece in pieces):
        return None  # records outside the array: encoded whole, so they stay regions
    empty = b"".join(pieces)  # type: ignore[arg-type]
    # Checked with the first element's arrays of entities emptied: any element proves the
    # layout, and a single huge one (one topic of 200,000 partitions) would cost its whole
    # encoding, twice, in this one step.
    sample = _trimmed(items[0])
    one = _encode(body_type, replace(body, **{name: (sample,)}))  # type: ignore[arg-type]
    count0, count1 = _array_length(flexible, 0), _array_length(flexible, 1)
    differ = next(i for i, (a, b) in enumerate(zip(empty, one, strict=False)) if a != b)
    start = differ - next(i for i, (a, b) in enumerate(zip(count0, count1, strict=True)) if a != b)
    before, after = empty[:start], empty[start + len(count0) :]
    if empty[start : start + len(count0)] != count0:
        return None
    if one != before + count1 + _encode(type(sample), sample) + after:
        return None
    return before, after


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, object]:
    """(correlation id, kio body entity) of a response frame's payload.

    The caller knows which request the frame answers (by correlation id order), hence the api
    and version. An ApiVersions response carrying an error is read as v0, as Kafka's clients
    do, because that is how servers answer a version they do not speak.
    """
    return _whole(decode_response_steps(api_key, api_version, frame, slice_units=None))


def decode_response_steps(
    api_key: int, api_version: int, frame: bytes, slice_units: int | None = SLICE_UNITS
) -> Generator[int, None, tuple[int, object]]:
    """decode_response as a generator, its body read in steps as decode_request_steps
    reads a request's: a broker reads its controller's answer to a forwarded CreateTopics
    of 200,000 topics in 400 steps, not one."""
    frame = bytes(frame)
    try:
        body_type = _response_schema(api_key, api_version)
        header_type = _response_header_type(api_key, body_type.__flexible__)
        kio_header, offset = entity_reader(header_type)(frame, 0)
        if api_key == ApiKey.API_VERSIONS and frame[offset : offset + 2] != b"\0\0":
            body_type = _response_schema(api_key, 0)
        if slice_units is None:
            body, size = read_body(body_type, frame, offset)
        else:
            body, size = yield from read_body_in_slices(body_type, frame, offset, slice_units)
    except KioIndexError as error:
        raise ValueError(f"unknown api {api_key} v{api_version}") from error
    except _DECODE_ERRORS as error:
        raise FrameError(f"malformed api {api_key} v{api_version} response: {error}") from error
    if offset + size != len(frame):
        raise FrameError(f"trailing bytes after api {api_key} v{api_version} response")
    return kio_header.correlation_id, body
