"""Framing and header rules of protocol/wire.py, checked on the bytes and against kafka-python."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import random
import struct
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.metadata.api_versions import ApiVersionsRequest as KpApiVersionsRequest
from kafka.protocol.metadata.api_versions import ApiVersionsResponse as KpApiVersionsResponse
from kio.index import load_entity_schema, load_payload_module
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.begin_quorum_epoch.v0.request import BeginQuorumEpochRequest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import Records, i64Timedelta

from log.fs import FileRegion
from protocol.api_table import api_versions_response
from protocol.entities import make, request_module
from protocol.wire import (
    INVALID_REQUEST,
    MAX_STRING_BYTES,
    UNSUPPORTED_VERSION,
    FrameError,
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    read_frame,
    request_body_parts,
    response_parts,
)
from raft.codec import API_VERSIONS, encode_raft_request, error_response
from raft.messages import BeginQuorumEpochRequest as CoreBeginQuorumEpoch
from raft.messages import VoteRequest
from sim.disk import SimDisk


def body_bytes(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def frames_from(data: bytes, count: int, max_bytes: int = 1 << 20) -> list[bytes]:
    """Feed ``data`` (then EOF) to a StreamReader and read ``count`` frames from it."""

    async def run() -> list[bytes]:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return [await read_frame(reader, max_bytes) for _ in range(count)]

    return asyncio.run(run())


def frame_payload(frame: bytes) -> bytes:
    """The payload of one whole frame, read back the way a server reads it."""
    return frames_from(frame, 1)[0]


def vote_request_frame(correlation_id: int = 7) -> bytes:
    body = VoteRequest(5, 1, 4, 100, pre_vote=True)
    api_key, version, entity = encode_raft_request(body, cluster_id="c", src_id=1, dst_id=2)
    return encode_request(RequestHeader(api_key, version, correlation_id, "node-1"), entity)


APIVERSIONS_V3 = ApiVersionsRequest(client_software_name="kraft-py", client_software_version="1")


# ---------------------------------------------------------------- read_frame


def test_reads_concatenated_frames_in_order() -> None:
    frames = [vote_request_frame(i) for i in range(3)] + [struct.pack(">i", 0)]
    payloads = frames_from(b"".join(frames), 4)
    assert payloads == [frame[4:] for frame in frames[:3]] + [b""]
    assert [decode_request(p)[0].correlation_id for p in payloads[:3]] == [0, 1, 2]


def test_frames_split_across_feeds_are_reassembled() -> None:
    frame = vote_request_frame()

    async def run() -> bytes:
        reader = asyncio.StreamReader()
        task = asyncio.ensure_future(read_frame(reader))
        for i in range(len(frame)):
            reader.feed_data(frame[i : i + 1])
            await asyncio.sleep(0)
        return await task

    assert asyncio.run(run()) == frame[4:]


@pytest.mark.parametrize("length", [-1, -(1 << 31), 1025])
def test_length_outside_the_limit_is_refused_before_reading(length: int) -> None:
    with pytest.raises(FrameError) as caught:
        frames_from(struct.pack(">i", length), 1, max_bytes=1024)
    assert caught.value.header is None


def test_default_limit_is_kafkas_socket_request_max_bytes() -> None:
    with pytest.raises(FrameError):
        frames_from(struct.pack(">i", 104_857_601), 1, max_bytes=104_857_600)


@pytest.mark.parametrize("cut", [0, 2, 4, 10])
def test_truncated_stream_raises_incomplete_read(cut: int) -> None:
    frame = vote_request_frame()
    data = frame + frame[:cut]
    with pytest.raises(asyncio.IncompleteReadError):
        frames_from(data, 2)


# ---------------------------------------------------------------- request decoding errors


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"\x00\x34\x00",  # api key and half a version
        b"\x00\x34\x00\x02\x00\x00\x00\x07\x00\x40abc",  # client id longer than the frame
    ],
)
def test_garbage_header_is_a_frame_error_without_header(payload: bytes) -> None:
    with pytest.raises(FrameError) as caught:
        decode_request(payload)
    assert caught.value.header is None
    assert caught.value.error_code == INVALID_REQUEST


def test_unknown_api_key_keeps_the_parsed_header() -> None:
    payload = struct.pack(">hhih", 9999, 3, 42, 2) + b"me" + b"\x00anything"
    with pytest.raises(FrameError) as caught:
        decode_request(payload)
    assert caught.value.header == RequestHeader(9999, 3, 42, "me")
    assert caught.value.error_code == UNSUPPORTED_VERSION


def test_unknown_version_of_apiversions_keeps_the_header_so_the_server_can_answer() -> None:
    payload = struct.pack(">hhih", 18, 99, 5, -1) + b"\x00\x00"
    with pytest.raises(FrameError) as caught:
        decode_request(payload)
    assert caught.value.header == RequestHeader(18, 99, 5, None)
    answer = encode_response(caught.value.header, api_versions_response(0, API_VERSIONS, 35))
    correlation_id, body = decode_response(18, 3, answer[4:])
    assert correlation_id == 5
    assert body.error_code == ErrorCode.unsupported_version  # type: ignore[attr-defined]
    assert type(body).__version__ == 0


def test_version_kio_knows_but_the_server_does_not_serve_is_unsupported() -> None:
    _, version, entity = encode_raft_request(
        CoreBeginQuorumEpoch(3, 1), cluster_id="c", src_id=1, dst_id=2, api_version=0
    )
    frame = encode_request(RequestHeader(53, version, 1, None), entity)
    assert decode_request(frame[4:], API_VERSIONS)[1] == entity
    with pytest.raises(FrameError) as caught:
        decode_request(frame[4:], {53: (1, 1)})
    assert caught.value.header == RequestHeader(53, 0, 1, None)
    assert caught.value.error_code == UNSUPPORTED_VERSION
    with pytest.raises(FrameError):
        decode_request(frame[4:], {})


def test_malformed_body_keeps_the_header() -> None:
    payload = vote_request_frame(11)[4:]
    with pytest.raises(FrameError) as caught:
        decode_request(payload[:-5])
    assert caught.value.header == RequestHeader(52, 2, 11, "node-1")
    assert caught.value.error_code == INVALID_REQUEST


def test_trailing_bytes_are_refused() -> None:
    with pytest.raises(FrameError) as caught:
        decode_request(vote_request_frame()[4:] + b"\x00")
    assert caught.value.header is not None


@settings(max_examples=300, deadline=None)
@given(
    st.binary(max_size=80)
    | st.builds(
        lambda n, b: vote_request_frame()[4 : 4 + n] + b, st.integers(0, 120), st.binary(max_size=8)
    )
)
def test_arbitrary_bytes_decode_or_raise_frame_error(payload: bytes) -> None:
    with contextlib.suppress(FrameError):
        decode_request(payload)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.integers(0, 255))
def test_corrupted_request_decodes_or_raises_frame_error(position: int, value: int) -> None:
    payload = bytearray(vote_request_frame()[4:])
    payload[position % len(payload)] = value
    with contextlib.suppress(FrameError):
        decode_request(bytes(payload))


def test_malformed_response_is_a_frame_error() -> None:
    frame = encode_response(RequestHeader(52, 2, 1, None), error_response(52, 2, 0))
    with pytest.raises(FrameError):
        decode_response(52, 2, frame[4:-2])
    with pytest.raises(FrameError):
        decode_response(52, 2, frame[4:] + b"\x00")


# ---------------------------------------------------------------- header versions on the bytes


def test_flexible_request_uses_header_v2_with_tagged_fields() -> None:
    frame = vote_request_frame(7)
    assert struct.unpack(">i", frame[:4]) == (len(frame) - 4,)
    prefix = struct.pack(">hhih", 52, 2, 7, 6) + b"node-1"  # client id stays a legacy string
    assert frame[4 : 4 + len(prefix)] == prefix
    _, body = decode_request(frame[4:])
    assert frame[4 + len(prefix) :] == b"\x00" + body_bytes(body)  # empty tagged fields


def test_non_flexible_request_uses_header_v1() -> None:
    body = BeginQuorumEpochRequest(cluster_id="c", topics=())
    frame = encode_request(RequestHeader(53, 0, 9, None), body)
    assert frame[4:] == struct.pack(">hhih", 53, 0, 9, -1) + body_bytes(body)
    assert decode_request(frame[4:]) == (RequestHeader(53, 0, 9, None), body)


def test_flexible_response_uses_header_v1() -> None:
    body = error_response(52, 2, 0)
    frame = encode_response(RequestHeader(52, 2, 7, "x"), body)
    assert frame[4:] == struct.pack(">i", 7) + b"\x00" + body_bytes(body)
    assert decode_response(52, 2, frame[4:]) == (7, body)


def test_non_flexible_response_uses_header_v0() -> None:
    body = error_response(53, 0, 0)
    frame = encode_response(RequestHeader(53, 0, 7, "x"), body)
    assert frame[4:] == struct.pack(">i", 7) + body_bytes(body)


@pytest.mark.parametrize("version", [0, 3, 4])
def test_apiversions_response_always_uses_header_v0(version: int) -> None:
    body = api_versions_response(version, API_VERSIONS)
    frame = encode_response(RequestHeader(18, version, 7, "x"), body)
    assert frame[4:] == struct.pack(">i", 7) + body_bytes(body)
    assert decode_response(18, version, frame[4:]) == (7, body)


def test_body_must_match_the_header() -> None:
    with pytest.raises(ValueError):
        encode_request(RequestHeader(18, 2, 1, None), APIVERSIONS_V3)
    with pytest.raises(ValueError):
        encode_response(RequestHeader(52, 2, 1, None), api_versions_response(3, API_VERSIONS))


# ---------------------------------------------------------------- kafka-python cross-check


def test_apiversions_v3_request_decodes_with_kafka_python() -> None:
    frame = encode_request(RequestHeader(18, 3, 123, "kraft-py"), APIVERSIONS_V3)
    decoded = KpApiVersionsRequest.decode(frame, version=3, header=True, framed=True)
    assert decoded.header.correlation_id == 123
    assert decoded.header.client_id == "kraft-py"
    assert decoded.client_software_name == "kraft-py"
    assert decoded.client_software_version == "1"


def test_kafka_python_apiversions_v3_request_decodes_with_ours() -> None:
    request = KpApiVersionsRequest[3](client_software_name="kp", client_software_version="3.0")
    request.with_header(correlation_id=77, client_id="client")
    frame = bytes(request.encode(header=True, framed=True))
    header, body = decode_request(frame_payload(frame), API_VERSIONS)
    assert header == RequestHeader(18, 3, 77, "client")
    assert body == ApiVersionsRequest(client_software_name="kp", client_software_version="3.0")


@pytest.mark.parametrize("version", [3, 4])
def test_apiversions_response_decodes_with_kafka_python(version: int) -> None:
    frame = encode_response(
        RequestHeader(18, version, 5, None), api_versions_response(version, API_VERSIONS)
    )
    decoded = KpApiVersionsResponse.decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == 5
    assert decoded.error_code == 0
    advertised = {k.api_key: (k.min_version, k.max_version) for k in decoded.api_keys}
    assert advertised == API_VERSIONS


def test_kafka_python_apiversions_v3_response_decodes_with_ours() -> None:
    keys = [KpApiVersionsResponse.ApiVersion(api_key=52, min_version=0, max_version=2)]
    response = KpApiVersionsResponse[3](error_code=0, api_keys=keys, throttle_time_ms=0)
    response.with_header(correlation_id=31)
    frame = bytes(response.encode(header=True, framed=True))
    correlation_id, body = decode_response(18, 3, frame_payload(frame))
    assert correlation_id == 31
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(52, 0, 2)]  # type: ignore[attr-defined]


def test_unsupported_version_answer_decodes_with_kafka_python_as_v0() -> None:
    body = api_versions_response(0, API_VERSIONS, UNSUPPORTED_VERSION)
    frame = encode_response(RequestHeader(18, 9, 5, None), body)
    decoded = KpApiVersionsResponse.decode(frame, version=3, header=True, framed=True)
    assert decoded.error_code == UNSUPPORTED_VERSION
    assert {k.api_key for k in decoded.api_keys} == set(API_VERSIONS)


# ---------------------------------------------------------------- every schema kio has

# The structural pre-check walks bodies itself, so it must accept whatever kio writes, for
# every API and version: generate arbitrary entities and read them back through our path.
# kio registers strategies for its primitive types; two need help: records have none, and
# timedeltas near the i64 limit are written fine but overflow Python's timedelta when read.
st.register_type_strategy(Records, st.binary(max_size=24).map(Records))
st.register_type_strategy(
    i64Timedelta, st.integers(-(2**40), 2**40).map(lambda ms: timedelta(milliseconds=ms))
)
SCHEMAS = [
    (name, version, entity_type)
    for name, versions in schema_name_map.items()
    if name in api_key_map.values()
    for version, paths in versions.items()
    for entity_type in (EntityType.request, EntityType.response)
    if entity_type in paths
]


def any_entity(schema: tuple[str, int, EntityType]) -> st.SearchStrategy[tuple[EntityType, Any]]:
    """(request or response, an arbitrary entity of that schema), loading it only when drawn."""
    return st.tuples(st.just(schema[2]), st.from_type(load_entity_schema(*schema)))


@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SCHEMAS).flatmap(any_entity))
def test_any_kio_entity_reads_back_through_the_pre_check(case: tuple[EntityType, Any]) -> None:
    entity_type, entity = case
    api_key, version = entity.__api_key__, entity.__version__
    header = RequestHeader(api_key, version, 3, "t")
    if entity_type is EntityType.request:
        frame = encode_request(header, entity)
        decoded_header, decoded = decode_request(frame[4:])
        assert decoded_header == header
        assert encode_request(header, decoded) == frame
    else:
        if api_key == 18:  # an ApiVersions error answer is read as v0 (tested above)
            entity = dataclasses.replace(entity, error_code=ErrorCode.none)
        frame = encode_response(header, entity)
        correlation_id, decoded = decode_response(api_key, version, frame[4:])
        assert correlation_id == 3
        assert encode_response(header, decoded) == frame


def uvarint(value: int) -> bytes:
    out = b""
    while value >= 0x80:
        out += bytes([value & 0x7F | 0x80])
        value >>= 7
    return out + bytes([value])


@pytest.mark.parametrize("count", [1 << 20, 4_000_000_000, (1 << 35) - 1])
def test_huge_compact_array_length_is_refused_before_kio_allocates(count: int) -> None:
    # Vote v2: cluster_id (null), voter_id, then the topics array claiming ``count`` items.
    # kio alone would reserve 8 * count bytes and abort the process.
    payload = struct.pack(">hhih", 52, 2, 1, -1) + b"\x00" + b"\x00" + b"\x00\x00\x00\x01"
    with pytest.raises(FrameError) as caught:
        decode_request(payload + uvarint(count + 1) + b"\x00" * 8)
    assert caught.value.header == RequestHeader(52, 2, 1, None)


def test_huge_legacy_array_length_is_refused_before_kio_allocates() -> None:
    # BeginQuorumEpoch v0: cluster_id (null), then the topics array claiming 2**31 - 1 items.
    payload = struct.pack(">hhih", 53, 0, 1, -1) + b"\xff\xff" + struct.pack(">i", 2**31 - 1)
    with pytest.raises(FrameError):
        decode_request(payload)


def test_huge_array_in_a_response_is_refused() -> None:
    # ApiVersions v3: error_code, then api_keys claiming 2**34 items.
    payload = struct.pack(">ih", 1, 0) + uvarint(1 << 34)
    with pytest.raises(FrameError):
        decode_response(18, 3, payload)


def test_null_for_a_non_nullable_array_is_refused_and_a_nullable_one_still_reads() -> None:
    """The wire fuzzer's find: ListOffsets v7 whose topics array says null (compact length
    0) decoded to topics=None, and the handler iterating it raised TypeError on every such
    request. Kafka's readers refuse a null where the schema does not allow one."""
    header = struct.pack(">hhih", 2, 7, 1, -1) + b"\x00"  # request header v2, no tags
    body = struct.pack(">ib", -1, 0) + b"\x00" + b"\x00"  # replica, isolation, topics: null
    with pytest.raises(FrameError):
        decode_request(header + body, {2: (1, 7)})
    negative = struct.pack(">hhih", 2, 1, 1, -1) + struct.pack(">ii", -1, -5)  # topics: -5
    with pytest.raises(FrameError):
        decode_request(negative, {2: (1, 7)})
    # Metadata v12's topics is nullable (null: every topic), and stays readable.
    metadata = struct.pack(">hhih", 3, 12, 1, -1) + b"\x00" + b"\x00" + b"\x01\x00\x00"
    _header, request = decode_request(metadata, {3: (0, 12)})
    assert request.topics is None  # type: ignore[attr-defined]


RESPONSE_SCHEMAS = [schema for schema in SCHEMAS if schema[2] is EntityType.response]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(RESPONSE_SCHEMAS).flatmap(any_entity), st.integers(1, 3))
def test_a_response_in_slices_is_the_same_bytes_as_in_one_piece(
    case: tuple[EntityType, Any], slice_items: int
) -> None:
    _, entity = case
    header = RequestHeader(entity.__api_key__, entity.__version__, 3, "t")
    parts = [part for piece in response_parts(header, entity, slice_items) for part in piece]
    body = b"".join(parts)  # type: ignore[arg-type]  # no FileRegion: kio gave no records
    assert struct.pack(">i", len(body)) + body == encode_response(header, entity)


def _fetch_response(version: int) -> st.SearchStrategy[Any]:
    return st.from_type(load_payload_module(1, version, EntityType.response).FetchResponse)


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(4, 12).flatmap(_fetch_response), st.integers(1, 3))
def test_a_fetch_answer_in_parts_with_file_regions_is_the_kio_encoding(
    entity: Any, slice_items: int
) -> None:
    """The sendfile path's encoder: every records field becomes a region of a file holding
    those bytes; the parts (regions read back) must be kio's encoding byte for byte."""
    fs = SimDisk(random.Random(0)).fs()
    handle = fs.open("/segment.log")
    handle.append(b"ahead of the records")

    def as_region(partition: Any) -> Any:
        if not partition.records:
            return partition
        position = handle.append(partition.records)
        region = FileRegion(handle, position, len(partition.records))
        return dataclasses.replace(partition, records=region)

    topics = tuple(
        dataclasses.replace(topic, partitions=tuple(as_region(p) for p in topic.partitions))
        for topic in entity.responses
    )
    with_regions = dataclasses.replace(entity, responses=topics)
    header = RequestHeader(1, entity.__version__, 3, "t")
    pieces = list(response_parts(header, with_regions, slice_items))
    regions = [part for piece in pieces for part in piece if isinstance(part, FileRegion)]
    assert len(regions) == sum(
        1 for topic in entity.responses for p in topic.partitions if p.records
    )
    body = b"".join(bytes(part) for piece in pieces for part in piece)
    assert struct.pack(">i", len(body)) + body == encode_response(header, entity)


@pytest.mark.parametrize("version", [1, 9, 12])
def test_a_big_metadata_answer_comes_out_in_slices(version: int) -> None:
    module: Any = load_payload_module(3, version, EntityType.response)
    topic = module.MetadataResponseTopic
    values = {"error_code": ErrorCode.unknown_topic_or_partition, "partitions": ()}
    topics = tuple(make(topic, {**values, "name": f"t{i}"}) for i in range(2500))
    body = make(module.MetadataResponse, {"controller_id": 1, "topics": topics})
    header = RequestHeader(3, version, 9, "t")
    pieces = list(response_parts(header, body, 1000))
    assert len(pieces) == 1 + 3 + 1  # head and count, three slices, what follows the array
    payload = b"".join(part for piece in pieces for part in piece)  # type: ignore[misc]
    assert struct.pack(">i", len(payload)) + payload == encode_response(header, body)


@pytest.mark.parametrize("version", [4, 12, 16])
def test_a_fetch_answer_of_one_topic_with_many_partitions_comes_out_in_slices(
    version: int,
) -> None:
    """Issue 22: a Fetch naming 200,000 partitions of one topic was answered by one 10 s
    encoding step (the only top-level array held one topic). Its partitions come out a
    slice at a time, and so do those of a second big topic after a small one."""
    module: Any = load_payload_module(1, version, EntityType.response)
    name_field = "topic_id" if version >= 13 else "topic"

    def topic(ref: int, count: int) -> Any:
        partitions = tuple(
            make(module.PartitionData, {"partition_index": i, "high_watermark": i})
            for i in range(count)
        )
        value: object = uuid.UUID(int=ref) if version >= 13 else f"t{ref}"
        return make(module.FetchableTopicResponse, {name_field: value, "partitions": partitions})

    body = make(module.FetchResponse, {"responses": (topic(1, 2500), topic(2, 3), topic(3, 1500))})
    header = RequestHeader(1, version, 5, "t")
    pieces = list(response_parts(header, body, 1000))
    # head+count; topic 1: its head, 3 slices, its tail; topic 2 whole (joined with the next
    # slice's bytes or alone); topic 3: head, 2 slices, tail; what follows the array.
    assert len(pieces) >= 1 + 5 + 1 + 4 + 1
    assert max(len(b"".join(piece)) for piece in pieces) < 40_000  # type: ignore[arg-type]
    payload = b"".join(part for piece in pieces for part in piece)  # type: ignore[misc]
    assert struct.pack(">i", len(payload)) + payload == encode_response(header, body)


def test_records_already_in_memory_stay_a_part_of_their_own_and_encode_as_kio_does() -> None:
    """A Raft Fetch answer's records (bytes, not a file region) are not copied into the
    encoder's buffer: the very object is a part, and the parts are kio's encoding."""
    module: Any = load_payload_module(1, 12, EntityType.response)
    records = bytes(range(256)) * 40
    partition = make(module.PartitionData, {"partition_index": 0, "records": records})
    topic = make(module.FetchableTopicResponse, {"topic": "t", "partitions": (partition,)})
    body = make(module.FetchResponse, {"responses": (topic,)})
    header = RequestHeader(1, 12, 5, "t")
    (piece,) = list(response_parts(header, body, 1000))
    assert any(part is records for part in piece)
    payload = b"".join(piece)  # type: ignore[arg-type]
    assert struct.pack(">i", len(payload)) + payload == encode_response(header, body)


@pytest.mark.parametrize(
    ("api", "api_key", "version", "fields"),
    [
        ("OffsetCommitRequest", 8, 8, {"group_id": "g" * 40_000}),
        ("ConsumerGroupHeartbeatRequest", 68, 1, {"group_id": "g", "member_id": "m" * 40_000}),
        ("JoinGroupRequest", 11, 9, {"group_id": "g", "protocol_type": "p" * 40_000}),
    ],
)
def test_a_string_longer_than_kafkas_bound_is_refused(
    api: str, api_key: int, version: int, fields: dict[str, str]
) -> None:
    """Issue 22: compact strings of any length reached the group coordinator, whose records
    hold at most 32,767 bytes a string (struct.error, a client never answered, 19 MiB of log
    per JoinGroup of a 5 MiB group id). Kafka's generated readers refuse such a string;
    the request fails to parse, as in Kafka, and one at the bound still reads."""
    entity_type = getattr(request_module(api_key, version), api)
    header = RequestHeader(api_key, version, 3, "c")
    entity = make(entity_type, fields)
    with pytest.raises(FrameError, match=r"string of 40000 bytes \(at most 32767\)") as caught:
        decode_request(encode_request(header, entity)[4:])
    assert caught.value.header == header
    entity = make(entity_type, {key: value[:MAX_STRING_BYTES] for key, value in fields.items()})
    assert decode_request(encode_request(header, entity)[4:])[1] == entity


def test_a_request_body_is_encoded_in_slices_only_when_big_and_as_kio_encodes_it() -> None:
    """A broker forwards a CreateTopics of many topics encoded a slice at a time; a small
    request, or one whose arrays hold ids rather than entities (BrokerRegistration's
    log_dirs), is encoded in one piece."""
    registration: Any = load_payload_module(62, 4, EntityType.request)
    small = make(
        registration.BrokerRegistrationRequest, {"broker_id": 1, "log_dirs": (uuid.UUID(int=5),)}
    )
    assert request_body_parts(small, 1000) is None
    module: Any = load_payload_module(19, 7, EntityType.request)
    topics = tuple(make(module.CreatableTopic, {"name": f"t{i}"}) for i in range(2500))
    body = make(module.CreateTopicsRequest, {"topics": topics})
    parts = request_body_parts(body, 1000)
    assert parts is not None
    encoded = b"".join(parts)
    header = RequestHeader(19, 7, 3, "t")
    assert encode_request(header, body, encoded) == encode_request(header, body)
