"""protocol/envelope.py: the Envelope a broker forwards a client's request in, and Kafka's
principal serde, through the wire codec both ends use."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.errors import ErrorCode

from broker.forwarding import FORWARDED_APIS
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module, response_module
from protocol.envelope import (
    EnvelopeError,
    decode_client_host,
    deserialize_principal,
    encode_client_host,
    envelope_request,
    envelope_response,
    inner_response_steps,
    open_envelope,
    principal_name,
    response_data_parts,
    serialize_principal,
)


def create_topics(*names: str) -> Any:
    module: Any = request_module(ApiKey.CREATE_TOPICS, 7)
    topics = tuple(
        make(module.CreatableTopic, {"name": n, "num_partitions": 3, "replication_factor": 1})
        for n in names
    )
    return make(module.CreateTopicsRequest, {"topics": topics, "timeout_ms": 1000})


def through_the_wire(envelope: EnvelopeRequest) -> EnvelopeRequest:
    """The envelope as the controller's listener decodes it from the broker's frame."""
    header = wire.RequestHeader(ApiKey.ENVELOPE, 0, 9, "broker-4-forwarding")
    _, decoded = wire.decode_request(wire.encode_request(header, envelope)[4:])
    assert isinstance(decoded, EnvelopeRequest)
    return decoded


def finished(steps: Any) -> Any:
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value


# ---- the principal serde ---------------------------------------------------------------------
def test_the_principal_is_serialized_as_kafkas_version_prefixed_default_principal_data() -> None:
    # int16 version 0, compact string "User", compact string "alice", false, no tagged fields:
    # what Kafka's DefaultKafkaPrincipalBuilder.serialize writes.
    expected = b"\x00\x00" + b"\x05User" + b"\x06alice" + b"\x00" + b"\x00"
    assert serialize_principal("User:alice") == expected


@pytest.mark.parametrize(
    "principal", ["User:alice", "User:ANONYMOUS", "User:CN=broker-4,O=kraft:x", "Group:ops"]
)
def test_a_principal_round_trips(principal: str) -> None:
    data = deserialize_principal(serialize_principal(principal))
    assert principal_name(data) == principal
    assert data.token_authenticated is False
    assert deserialize_principal(serialize_principal(principal, True)).token_authenticated


@pytest.mark.parametrize(
    "data",
    [
        b"",  # no version
        b"\x00\x01" + serialize_principal("User:alice")[2:],  # a version nobody wrote
        serialize_principal("User:alice")[:-3],  # cut short
        serialize_principal("User:alice") + b"\x00",  # trailing bytes
    ],
)
def test_an_unreadable_principal_is_a_principal_deserialization_failure(data: bytes) -> None:
    with pytest.raises(EnvelopeError) as refused:
        deserialize_principal(data)
    assert refused.value.error_code == ErrorCode.principal_deserialization_failure


@pytest.mark.parametrize(
    ("host", "size", "back"),
    [
        ("/10.0.0.1", 4, "10.0.0.1"),
        ("::1", 16, "::1"),
        ("/n7", 2, "n7"),
        ("/n104", 5, "n104"),  # a name as long as an address is kept apart from one
        ("/", 0, ""),
    ],
)
def test_the_client_address_travels_as_its_raw_bytes(host: str, size: int, back: str) -> None:
    encoded = encode_client_host(host)
    assert len(encoded) == size
    assert decode_client_host(encoded) == back


# ---- the envelope ------------------------------------------------------------------------------
def test_an_envelope_carries_the_clients_request_principal_and_address() -> None:
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 42, "alice-admin")
    body = create_topics("a", "b")
    envelope = through_the_wire(envelope_request(header, body, "User:alice", "10.1.2.3"))
    assert envelope.request_data == wire.encode_request(header, body)[4:]
    opened = open_envelope(envelope, FORWARDED_APIS, {ApiKey.CREATE_TOPICS: (2, 7)})
    assert (opened.header, opened.body) == (header, body)
    assert (opened.principal, opened.client_host) == ("User:alice", "10.1.2.3")


def test_a_pre_encoded_body_gives_the_same_envelope() -> None:
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, "c")
    body = create_topics(*(f"t{i}" for i in range(600)))
    parts = wire.request_body_parts(body, 250)
    assert parts is not None  # big enough to be encoded in slices
    sliced = envelope_request(header, body, "User:a", "10.0.0.1", b"".join(parts))
    assert sliced == envelope_request(header, body, "User:a", "10.0.0.1")


def _refusal(envelope: EnvelopeRequest, served: dict[int, tuple[int, int]]) -> int:
    with pytest.raises(EnvelopeError) as refused:
        open_envelope(envelope, FORWARDED_APIS, served)
    return refused.value.error_code


def test_nested_unparseable_and_unforwardable_requests_are_invalid() -> None:
    served = {ApiKey.CREATE_TOPICS: (2, 7), ApiKey.ENVELOPE: (0, 0), ApiKey.PRODUCE: (3, 12)}
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, "c")
    good = envelope_request(header, create_topics("a"), "User:alice", "10.0.0.1")
    nested = envelope_request(
        wire.RequestHeader(ApiKey.ENVELOPE, 0, 1, "c"), good, "User:alice", "10.0.0.1"
    )
    assert _refusal(nested, served) == ErrorCode.invalid_request
    cut = EnvelopeRequest(
        request_data=good.request_data[:-5],
        request_principal=good.request_principal,
        client_host_address=good.client_host_address,
    )
    assert _refusal(cut, served) == ErrorCode.invalid_request
    assert (
        _refusal(
            EnvelopeRequest(
                request_data=b"\x00",
                request_principal=good.request_principal,
                client_host_address=b"",
            ),
            served,
        )
        == ErrorCode.invalid_request
    )
    # An API the controller serves but a broker never forwards (nor an unknown one).
    produce: Any = request_module(ApiKey.PRODUCE, 9)
    body = make(produce.ProduceRequest, {"acks": 1, "timeout_ms": 10, "topic_data": ()})
    unforwarded = envelope_request(
        wire.RequestHeader(ApiKey.PRODUCE, 9, 1, "c"), body, "User:alice", "10.0.0.1"
    )
    assert _refusal(unforwarded, served) == ErrorCode.invalid_request
    assert _refusal(good, {}) == ErrorCode.invalid_request  # a version not served
    anonymous = EnvelopeRequest(
        request_data=good.request_data,
        request_principal=None,
        client_host_address=good.client_host_address,
    )
    assert _refusal(anonymous, served) == ErrorCode.principal_deserialization_failure


def test_the_inner_response_round_trips_and_must_answer_its_request() -> None:
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 42, "c")
    module: Any = response_module(ApiKey.CREATE_TOPICS, 7)
    results = tuple(
        make(module.CreatableTopicResult, {"name": f"t{i}", "num_partitions": 3})
        for i in range(600)
    )
    response = make(module.CreateTopicsResponse, {"topics": results})
    pieces = list(response_data_parts(header, response, 250))
    assert len(pieces) > 1  # encoded a slice at a time
    answer = envelope_response(b"".join(pieces))
    assert b"".join(pieces) == wire.encode_response(header, response)[4:]
    assert finished(inner_response_steps(answer, header)) == response
    other = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 43, "c")
    with pytest.raises(wire.FrameError):
        finished(inner_response_steps(answer, other))
    with pytest.raises(wire.FrameError):
        finished(inner_response_steps(envelope_response(None, ErrorCode.none), header))
