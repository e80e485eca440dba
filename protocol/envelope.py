"""EnvelopeRequest (API 58, KIP-590): a client's request as a broker forwards it to the
active controller, with who sent it and from where.

A broker that forwards an admin request wraps the client's request bytes (header and body,
no length prefix), the client's principal as Kafka's principal serde writes it, and the
client's address as raw bytes; the controller authorizes the envelope as a cluster action
of the broker, then handles the inner request as that principal from that address, and
answers with the inner response's bytes (header and body) inside the EnvelopeResponse.
Without it the controller sees every forwarded request as the broker's own, so a quota or
an ACL keyed on the client cannot be decided there.

The principal serde is Kafka's DefaultKafkaPrincipalBuilder's: a version-prefixed
DefaultPrincipalData {type, name, tokenAuthenticated} (MessageUtil.toVersionPrefixedBytes:
an int16 version, then the struct in that version's encoding). Sans-I/O: bytes in, entities
out; the broker and the controller drive the slicing (broker/envelope.py).
"""

from __future__ import annotations

import dataclasses
import io
import ipaddress
import struct
from collections.abc import Generator, Iterator, Mapping
from typing import Any

from kio.schema.default_principal_data.v0.data import DefaultPrincipalData
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.serial.errors import SerialError

from protocol import wire
from protocol.fast_writer import entity_writer

ENVELOPE_VERSION = 0  # kio's only version, as Kafka's
_VERSION = struct.Struct(">h")
_PRINCIPAL_VERSIONS = (0, 0)  # DefaultPrincipalData's lowest and highest (Kafka's too)
_DECODE_ERRORS = (SerialError, ValueError, KeyError, IndexError, OverflowError, struct.error)


class EnvelopeError(Exception):
    """An envelope the controller cannot open; ``error_code`` is Kafka's answer to it."""

    def __init__(self, message: str, error_code: int) -> None:
        super().__init__(message)
        self.error_code = error_code


def serialize_principal(principal: str, token_authenticated: bool = False) -> bytes:
    """Kafka's DefaultKafkaPrincipalBuilder.serialize of "Type:name" ("User:alice")."""
    type_, _, name = principal.partition(":")
    data = DefaultPrincipalData(type_=type_, name=name, token_authenticated=token_authenticated)
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(_PRINCIPAL_VERSIONS[1]))
    entity_writer(DefaultPrincipalData)(buffer, data)
    return buffer.getvalue()


def deserialize_principal(data: bytes) -> DefaultPrincipalData:
    """The DefaultPrincipalData a broker serialized; EnvelopeError
    PRINCIPAL_DESERIALIZATION_FAILURE (Kafka's PrincipalDeserializationException) when the
    bytes are not one, of a version this controller reads, with nothing after it."""
    try:
        (version,) = _VERSION.unpack_from(data, 0)
        low, high = _PRINCIPAL_VERSIONS
        if not low <= version <= high:
            raise ValueError(f"DefaultPrincipalData v{version} outside [{low}, {high}]")
        principal, size = entity_reader(DefaultPrincipalData)(bytes(data), _VERSION.size)
    except _DECODE_ERRORS as error:
        raise EnvelopeError(
            f"the forwarded principal cannot be read: {error}",
            ErrorCode.principal_deserialization_failure,
        ) from error
    if _VERSION.size + size != len(data):
        raise EnvelopeError(
            f"{len(data) - _VERSION.size - size} trailing bytes after the forwarded principal",
            ErrorCode.principal_deserialization_failure,
        )
    return principal


def principal_name(data: DefaultPrincipalData) -> str:
    """The principal as the authorizer and the quotas name it ("User:alice")."""
    return f"{data.type_}:{data.name}"


def encode_client_host(host: str) -> bytes:
    """The client's address as Kafka's InetAddress.getAddress(): 4 or 16 bytes. A host that
    is not an address (the simulator names its hosts) is sent as its UTF-8 name, a NUL
    after it when it is 4 or 16 bytes long so it never reads as an address; a Kafka
    controller would refuse it, only kraft-py's controllers read it."""
    host = host.removeprefix("/")
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        name = host.encode()
        return name + b"\0" if len(name) in (4, 16) else name


def decode_client_host(data: bytes) -> str:
    """The client's address as ACL hosts name it ("10.0.0.1"), from encode_client_host."""
    if len(data) in (4, 16):
        return str(ipaddress.ip_address(bytes(data)))
    try:
        return bytes(data).decode().removesuffix("\0")
    except UnicodeDecodeError as error:
        raise EnvelopeError(
            f"forwarded client address of {len(data)} bytes", ErrorCode.invalid_request
        ) from error


def envelope_request(
    header: wire.RequestHeader,
    body: object,
    principal: str,
    client_host: str,
    encoded_body: bytes | None = None,
) -> EnvelopeRequest:
    """The envelope a broker forwards the client's request ``body`` in (``encoded_body``: its
    bytes, encoded beforehand a slice at a time, as the forwarding path does for big ones)."""
    frame = wire.encode_request(header, body, encoded_body)
    return EnvelopeRequest(
        request_data=frame[4:],  # Kafka's serializeWithHeader: no length prefix
        request_principal=serialize_principal(principal),
        client_host_address=encode_client_host(client_host),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Forwarded:
    """An opened envelope: the inner request and who sent it from where."""

    header: wire.RequestHeader
    body: Any
    principal: str
    client_host: str


def open_envelope_steps(
    envelope: EnvelopeRequest,
    forwardable: frozenset[int],
    supported: Mapping[int, tuple[int, int]] | None,
) -> Generator[int, None, Forwarded]:
    """The inner request of ``envelope``, read a step at a time (as decode_request_steps).

    Refused with Kafka's codes (EnvelopeUtils): a missing or unreadable principal
    PRINCIPAL_DESERIALIZATION_FAILURE; an inner request that does not parse (a version this
    listener does not serve among them) or of an API that is not forwarded (an envelope in
    an envelope) INVALID_REQUEST."""
    if envelope.request_principal is None:
        raise EnvelopeError(
            "an envelope without a principal", ErrorCode.principal_deserialization_failure
        )
    principal = principal_name(deserialize_principal(envelope.request_principal))
    host = decode_client_host(envelope.client_host_address)
    try:
        header, body = yield from wire.decode_request_steps(envelope.request_data, supported)
    except wire.FrameError as error:
        inner = error.header
        if inner is not None and inner.api_key not in forwardable:
            raise EnvelopeError(
                f"api {inner.api_key} is not eligible for forwarding", ErrorCode.invalid_request
            ) from error
        raise EnvelopeError(
            f"the forwarded request cannot be read: {error}", ErrorCode.invalid_request
        ) from error
    if header.api_key not in forwardable:
        raise EnvelopeError(
            f"api {header.api_key} is not eligible for forwarding", ErrorCode.invalid_request
        )
    return Forwarded(header, body, principal, host)


def open_envelope(
    envelope: EnvelopeRequest,
    forwardable: frozenset[int],
    supported: Mapping[int, tuple[int, int]] | None,
) -> Forwarded:
    """open_envelope_steps in one go (small envelopes, tests)."""
    steps = open_envelope_steps(envelope, forwardable, supported)
    try:
        while True:
            next(steps)
    except StopIteration as done:
        forwarded: Forwarded = done.value
        return forwarded


def response_data_parts(
    header: wire.RequestHeader, response: object, slice_items: int
) -> Iterator[bytes]:
    """The inner response's bytes (header and body, no length prefix) for the
    EnvelopeResponse, a slice of about ``slice_items`` entities at a time."""
    for parts in wire.response_parts(header, response, slice_items):
        yield b"".join(bytes(part) for part in parts)


def envelope_response(response_data: bytes | None, error_code: int = 0) -> EnvelopeResponse:
    """The controller's answer: the inner response's bytes, or an envelope-level error."""
    return EnvelopeResponse(response_data=response_data, error_code=ErrorCode(error_code))


def inner_response_steps(
    answer: EnvelopeResponse, header: wire.RequestHeader
) -> Generator[int, None, object]:
    """The inner response body of ``answer`` to the request of ``header``, read a step at a
    time; FrameError when the bytes are not its answer (or answer another correlation id)."""
    if answer.response_data is None:
        raise wire.FrameError("an envelope response without response data")
    correlation_id, body = yield from wire.decode_response_steps(
        header.api_key, header.api_version, answer.response_data
    )
    if correlation_id != header.correlation_id:
        raise wire.FrameError(
            f"the envelope answers correlation id {correlation_id}, not {header.correlation_id}"
        )
    return body
