"""protocol/incremental.py: a request read in slices is kio's reading of the same bytes.

Differential: every request the sliced reading returns is compared with the one-shot path
(the walk, then kio's native reader of the whole body), and every failure with its
FrameError (message and error code): over arbitrary entities of every request schema kio
has (hypothesis), over the big requests of every API key and version (the shapes of issue
22, tests/kraft/big_requests.py), and over those bytes corrupted. Small slices (a few units)
make small requests exercise every path: spines several levels deep, runs split by size,
arrays of primitives, tagged fields, null arrays and entities.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Generator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import KioIndexError, load_request_schema
from kio.static.constants import EntityType

from protocol.entities import make, request_module
from protocol.incremental import SLICE_UNITS
from protocol.wire import (
    FrameError,
    RequestHeader,
    decode_request,
    decode_request_steps,
    decode_response,
    decode_response_steps,
    encode_request,
    encode_response,
)
from tests.kraft.big_requests import big_request
from tests.protocol.test_wire import SCHEMAS, any_entity, uvarint

REQUEST_SCHEMAS = [s for s in SCHEMAS if s[2] is EntityType.request]
RESPONSE_SCHEMAS = [s for s in SCHEMAS if s[2] is EntityType.response]


def _known(api_key: int, version: int) -> bool:
    try:
        load_request_schema(api_key, version)
    except KioIndexError:
        return False
    return True


# Every request (api key, version) kio 0.6.5 has: a superset of what both listeners serve.
VERSIONS = [(key, version) for key in range(100) for version in range(20) if _known(key, version)]
SHAPES = ("wide", "deep", "flat")


def run(steps: Generator[int, None, Any]) -> tuple[Any, list[int]]:
    """(what ``steps`` returns, the units of work of each step it yielded)."""
    units = []
    while True:
        try:
            units.append(next(steps))
        except StopIteration as done:
            return done.value, units


def outcome(decode: Any) -> tuple[str, object]:
    """("ok", the result) or ("error", the FrameError's message, code and header)."""
    try:
        return "ok", decode()
    except FrameError as error:
        return "error", (str(error), error.error_code, error.header)


def assert_same_reading(frame: bytes, slice_units: int) -> list[int]:
    """The sliced reading of ``frame`` equals the one-shot one (result or error); returns
    the units of each step."""
    steps: list[int] = []

    def sliced() -> Any:
        result, units = run(decode_request_steps(frame, slice_units=slice_units))
        steps.extend(units)
        return result

    whole, pieces = outcome(lambda: decode_request(frame)), outcome(sliced)
    assert pieces == whole
    if whole[0] == "ok":  # equal, and of the same types all the way down
        assert repr(pieces[1]) == repr(whole[1])
    return steps


def frame_of(request: Any) -> bytes:
    header = RequestHeader(request.__api_key__, request.__version__, 7, "slices")
    return encode_request(header, request)[4:]


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(REQUEST_SCHEMAS).flatmap(any_entity), st.sampled_from([1, 2, 3, 7]))
def test_any_request_read_in_slices_is_kios_reading(
    case: tuple[EntityType, Any], slice_units: int
) -> None:
    _, request = case
    steps = assert_same_reading(frame_of(request), slice_units)
    assert all(units <= slice_units + 1 for units in steps)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(RESPONSE_SCHEMAS).flatmap(any_entity),
    st.sampled_from([1, 2, 7]),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=2),
)
def test_any_response_read_in_slices_is_kios_reading(
    case: tuple[EntityType, Any], slice_units: int, changes: list[tuple[int, int]]
) -> None:
    """What a broker reads of its controller's answers (broker/client.py), intact or with
    bytes overwritten: the same answer or the same error either way."""
    _, response = case
    header = RequestHeader(response.__api_key__, response.__version__, 5, "slices")
    frame = bytearray(encode_response(header, response)[4:])
    for position, value in changes:
        frame[position % len(frame)] = value
    key, version = response.__api_key__, response.__version__

    def whole() -> Any:
        return decode_response(key, version, bytes(frame))

    def sliced() -> Any:
        return run(decode_response_steps(key, version, bytes(frame), slice_units))[0]

    expected, got = outcome(whole), outcome(sliced)
    assert got == expected
    assert repr(got) == repr(expected)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_big_request_of_every_api_version_read_in_slices_is_kios_reading(shape: str) -> None:
    """Each shape of big_request for every version kio has, 40 entities read with slices
    of 7 units: the spine (the body, the one topic of a deep request), runs of light
    entities and entities of nested arrays all take part."""
    checked = 0
    for api_key, version in VERSIONS:
        request = big_request(api_key, version, 40, shape)
        if request is None:
            continue
        steps = assert_same_reading(frame_of(request), 7)
        assert len(steps) > 5, (api_key, version)
        assert max(steps) <= 8, (api_key, version, steps)
        checked += 1
    assert checked >= 200  # of the 400-odd request versions, those with an entity array


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(VERSIONS),
    st.sampled_from(SHAPES),
    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), min_size=1, max_size=4),
    st.integers(0, 10**6),
    st.sampled_from([1, 3, 7]),
)
def test_corrupted_big_requests_fail_the_same_either_way(
    version: tuple[int, int],
    shape: str,
    changes: list[tuple[int, int]],
    cut: int,
    slice_units: int,
) -> None:
    """Bytes of a big request overwritten (lengths, tags, varints, UTF-8, error codes...)
    and the frame cut short: the same request or the same FrameError either way."""
    request = big_request(*version, 12, shape)
    if request is None:
        return
    frame = bytearray(frame_of(request))
    for position, value in changes:
        frame[position % len(frame)] = value
    assert_same_reading(bytes(frame), slice_units)
    assert_same_reading(bytes(frame[: max(8, cut % len(frame))]), slice_units)


def test_a_200k_partition_fetch_takes_hundreds_of_steps_of_a_slice_each() -> None:
    """Issue 22's Fetch naming 200,000 partitions (5 MB): one step of 0.27 s when read
    whole; read in slices, no step does more than SLICE_UNITS units of work."""
    frame = frame_of(big_request(1, 12, 200_000, "deep"))
    header, request = decode_request(frame)
    (sliced_header, sliced), steps = run(decode_request_steps(frame))
    assert (sliced_header, sliced) == (header, request)
    assert max(steps) <= SLICE_UNITS + 1
    assert sum(steps) >= 2 * 200_000  # walked, then read
    assert len(steps) >= 2 * 200_000 // (SLICE_UNITS + 1)


def test_a_tagged_array_of_uuids_is_read_in_runs() -> None:
    """BrokerHeartbeat v1's offline_log_dirs is a tagged array: 20,000 directory ids are
    read 1,000 at a time, and equal kio's reading."""
    module: Any = request_module(63, 1)
    dirs = tuple(uuid.UUID(int=i + 1) for i in range(20_000))
    request = make(module.BrokerHeartbeatRequest, {"broker_id": 1, "offline_log_dirs": dirs})
    steps = assert_same_reading(frame_of(request), SLICE_UNITS)
    assert len(steps) >= 20
    assert max(steps) <= SLICE_UNITS + 1


def test_a_tagged_value_shorter_than_its_tag_says_is_read_on_from_its_end_as_kio_does() -> None:
    """kio reads a tagged field's value and goes on where the value ends, whatever size
    the tag declared; the walk does the same now (it went on at the declared end, so the
    bytes kio read next were not the ones it had checked). Fetch v17: the first
    partition's replica_directory_id (tag 0, 16 bytes) declared 21 bytes long."""
    module: Any = request_module(1, 17)
    directory = uuid.UUID(int=0x1234)
    first = make(module.FetchPartition, {"partition": 0, "replica_directory_id": directory})
    second = make(module.FetchPartition, {"partition": 1})
    topic = make(module.FetchTopic, {"topic_id": uuid.UUID(int=9), "partitions": (first, second)})
    request = make(module.FetchRequest, {"replica_id": -1, "topics": (topic,)})
    frame = frame_of(request)
    tag = b"\x01\x00\x10" + directory.bytes
    assert frame.count(tag) == 1
    longer = frame.replace(tag, b"\x01\x00\x15" + directory.bytes)
    assert decode_request(longer)[1] == request
    assert_same_reading(longer, 1)


def test_an_unknown_tag_fails_the_same_either_way() -> None:
    head = struct.pack(">hhih", 1, 12, 1, -1) + b"\x00"
    body = bytes(4 * 4 + 1 + 4 + 4) + b"\x01\x01\x01"
    frame = head + body + b"\x01" + b"\x07\x01" + b"\x00"
    with pytest.raises(FrameError, match="Unknown tagged field tag: 7"):
        decode_request(frame)
    assert_same_reading(frame, 1)


def test_null_and_empty_arrays_read_the_same_either_way() -> None:
    """Metadata v12: topics null (every topic) and empty; ListOffsets v7 with a null
    topics array is refused either way (not nullable)."""
    header = struct.pack(">hhih", 3, 12, 1, -1) + b"\x00"
    for topics in (b"\x00", b"\x01"):
        assert_same_reading(header + topics + b"\x00\x00", 1)
    refused = struct.pack(">hhih", 2, 7, 1, -1) + b"\x00" + struct.pack(">ib", -1, 0)
    assert_same_reading(refused + b"\x00\x00", 1)
    assert_same_reading(header + uvarint(1 << 30) + b"\x00\x00", 1)  # claims 2**30 topics
