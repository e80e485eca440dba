"""The core's messages through kio entities and bytes and back, for every version we accept."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.cluster import DescribeQuorumRequest as KpDescribeQuorumRequest
from kafka.protocol.admin.cluster import DescribeQuorumResponse as KpDescribeQuorumResponse
from kafka.protocol.consumer.fetch import FetchRequest as KpFetchRequest
from kafka.protocol.consumer.fetch import FetchResponse as KpFetchResponse
from kio.index import load_response_schema
from kio.schema.describe_quorum.v2.request import DescribeQuorumRequest
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map

from protocol.api_table import api_versions_response
from protocol.wire import (
    RequestHeader,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from raft.codec import (
    API_VERSIONS,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    decode_raft_request,
    decode_raft_response,
    describe_quorum_response,
    encode_raft_request,
    encode_raft_response,
    error_response,
)
from raft.driver import split_replicas
from raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Request,
    RequestFailed,
    Response,
    VoteRequest,
    VoteResponse,
)
from raft.progress import ReplicaProgress
from raft.voters import Voter, VoterSet

i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
ids = st.integers(-1, 2**31 - 1)
epochs = st.integers(-1, 2**31 - 1)
offsets = st.integers(-1, 2**63 - 1)
error_codes = st.sampled_from(
    [value for name, value in vars(Errors).items() if not name.startswith("_")]
)
records = st.binary(max_size=64)

requests: st.SearchStrategy[Request] = st.one_of(
    st.builds(VoteRequest, epochs, ids, epochs, offsets, st.booleans()),
    st.builds(BeginQuorumEpochRequest, epochs, ids),
    st.builds(EndQuorumEpochRequest, epochs, ids, st.lists(ids, max_size=4).map(tuple)),
    st.builds(FetchRequest, ids, epochs, offsets, epochs, i32, i32),
    st.builds(FetchSnapshotRequest, ids, epochs, offsets, epochs, i64, i32),
)
responses: st.SearchStrategy[Response] = st.one_of(
    st.builds(VoteResponse, error_codes, epochs, ids, st.booleans()),
    st.builds(BeginQuorumEpochResponse, error_codes, epochs, ids),
    st.builds(EndQuorumEpochResponse, error_codes, epochs, ids),
    st.builds(
        FetchResponse,
        error_codes,
        epochs,
        ids,
        offsets,
        offsets,
        records,
        epochs,
        offsets,
        offsets,
        epochs,
    ),
    st.builds(FetchSnapshotResponse, error_codes, epochs, ids, offsets, epochs, i64, i64, records),
)


def sender(body: Request) -> int:
    if isinstance(body, VoteRequest):
        return body.candidate_id
    if isinstance(body, BeginQuorumEpochRequest | EndQuorumEpochRequest):
        return body.leader_id
    return body.replica_id


API_KEYS: dict[type, int] = {
    VoteRequest: 52,
    VoteResponse: 52,
    BeginQuorumEpochRequest: 53,
    BeginQuorumEpochResponse: 53,
    EndQuorumEpochRequest: 54,
    EndQuorumEpochResponse: 54,
    FetchRequest: 1,
    FetchResponse: 1,
    FetchSnapshotRequest: 59,
    FetchSnapshotResponse: 59,
}


def api_key_of(body: Request | Response) -> int:
    return API_KEYS[type(body)]


def request_over_the_wire(
    body: Request, cluster_id: str, version: int | None = None
) -> tuple[int, Request, str | None]:
    """Core request -> kio -> bytes -> kio -> core request, as peer and server do it."""
    src = sender(body)
    api_key, api_version, entity = encode_raft_request(
        body, cluster_id=cluster_id, src_id=src, dst_id=9, api_version=version
    )
    frame = encode_request(RequestHeader(api_key, api_version, 17, f"raft-{src}"), entity)
    header, decoded = decode_request(frame[4:], API_VERSIONS)
    assert header == RequestHeader(api_key, api_version, 17, f"raft-{src}")
    assert decoded == entity
    return decode_raft_request(decoded)


def response_over_the_wire(body: Response, version: int) -> Response:
    api_key = api_key_of(body)
    entity = encode_raft_response(body, api_key=api_key, api_version=version)
    frame = encode_response(RequestHeader(api_key, version, 23, None), entity)
    correlation_id, decoded = decode_response(api_key, version, frame[4:])
    assert correlation_id == 23
    return decode_raft_response(decoded)


def versions_of(body: Request | Response) -> list[int]:
    low, high = API_VERSIONS[api_key_of(body)]
    return list(range(low, high + 1))


# ---------------------------------------------------------------- round trips


@settings(max_examples=300, deadline=None)
@given(requests, st.text(max_size=22), st.data())
def test_every_request_round_trips_in_every_version(
    body: Request, cluster_id: str, data: st.DataObject
) -> None:
    version = data.draw(st.sampled_from(versions_of(body)))
    if isinstance(body, VoteRequest) and body.pre_vote and version < 2:
        with pytest.raises(ValueError, match="pre-vote"):
            request_over_the_wire(body, cluster_id, version)
        return
    assert request_over_the_wire(body, cluster_id, version) == (sender(body), body, cluster_id)


@settings(max_examples=100, deadline=None)
@given(requests)
def test_requests_default_to_the_newest_version(body: Request) -> None:
    api_key, version, _ = encode_raft_request(body, cluster_id="c", src_id=sender(body), dst_id=2)
    assert version == API_VERSIONS[api_key][1]
    assert request_over_the_wire(body, "c") == (sender(body), body, "c")


@settings(max_examples=300, deadline=None)
@given(responses, st.data())
def test_every_response_round_trips_in_every_version(body: Response, data: st.DataObject) -> None:
    version = data.draw(st.sampled_from(versions_of(body)))
    assert response_over_the_wire(body, version) == body


SENTINEL_REQUESTS: list[Request] = [
    VoteRequest(-1, -1, -1, -1, pre_vote=False),
    BeginQuorumEpochRequest(-1, -1),
    EndQuorumEpochRequest(-1, -1, ()),
    FetchRequest(-1, -1, -1, -1, 0, 0),
    FetchSnapshotRequest(-1, -1, -1, -1, -1, 0),
]
SENTINEL_RESPONSES: list[Response] = [
    VoteResponse(Errors.NONE, -1, -1, vote_granted=False),
    BeginQuorumEpochResponse(Errors.NONE, -1, -1),
    EndQuorumEpochResponse(Errors.NONE, -1, -1),
    FetchResponse(Errors.NONE, -1, -1),
    FetchResponse(Errors.NONE, -1, -1, log_start_offset=-1, records=b""),
    FetchSnapshotResponse(Errors.NONE, -1, -1),
]


@pytest.mark.parametrize("body", SENTINEL_REQUESTS, ids=lambda body: type(body).__name__)
def test_sentinel_requests_round_trip_in_every_version(body: Request) -> None:
    for version in versions_of(body):
        assert request_over_the_wire(body, "", version) == (sender(body), body, "")


@pytest.mark.parametrize("body", SENTINEL_RESPONSES, ids=lambda body: type(body).__name__)
def test_sentinel_responses_and_empty_records_round_trip_in_every_version(body: Response) -> None:
    for version in versions_of(body):
        assert response_over_the_wire(body, version) == body


def test_newest_versions_are_the_kraft_ones() -> None:
    assert API_VERSIONS == {
        1: (12, 17),
        18: (0, 4),
        52: (0, 2),
        53: (0, 1),
        54: (0, 1),
        55: (0, 2),
        59: (0, 1),
    }


# ---------------------------------------------------------------- field placement


def test_fetch_request_fields_land_where_kafka_expects_them() -> None:
    body = FetchRequest(3, 7, 120, 6, max_wait_ms=500, max_bytes=4096)
    _, _, entity = encode_raft_request(body, cluster_id="abc", src_id=3, dst_id=1)
    request: Any = entity
    assert request.cluster_id == "abc"
    assert request.replica_state.replica_id == 3
    assert request.max_wait == timedelta(milliseconds=500)
    (topic,) = request.topics
    assert topic.topic_id == METADATA_TOPIC_ID
    (partition,) = topic.partitions
    assert (partition.partition, partition.current_leader_epoch) == (0, 7)
    assert (partition.fetch_offset, partition.last_fetched_epoch) == (120, 6)
    assert partition.partition_max_bytes == 4096


def test_old_fetch_versions_carry_the_replica_id_at_top_level() -> None:
    body = FetchRequest(3, 7, 120, 6, 500, 4096)
    _, _, entity = encode_raft_request(body, cluster_id="c", src_id=3, dst_id=1, api_version=14)
    assert entity.replica_id == 3  # type: ignore[attr-defined]
    _, _, entity = encode_raft_request(body, cluster_id="c", src_id=3, dst_id=1, api_version=12)
    assert entity.topics[0].topic == METADATA_TOPIC  # type: ignore[attr-defined]


def test_vote_and_begin_quorum_epoch_name_the_receiving_voter() -> None:
    vote = VoteRequest(4, 1, 3, 99, pre_vote=False)
    _, _, entity = encode_raft_request(vote, cluster_id="c", src_id=1, dst_id=2)
    assert entity.voter_id == 2  # type: ignore[attr-defined]
    begin = BeginQuorumEpochRequest(4, 1)
    _, _, entity = encode_raft_request(begin, cluster_id="c", src_id=1, dst_id=3)
    assert entity.voter_id == 3  # type: ignore[attr-defined]


def test_sender_must_match_the_body() -> None:
    with pytest.raises(ValueError, match="sent as"):
        encode_raft_request(BeginQuorumEpochRequest(4, 1), cluster_id="c", src_id=2, dst_id=3)


def test_unknown_versions_are_refused_on_both_sides() -> None:
    with pytest.raises(ValueError):
        encode_raft_request(
            BeginQuorumEpochRequest(4, 1), cluster_id="c", src_id=1, dst_id=2, api_version=2
        )
    with pytest.raises(ValueError):
        encode_raft_response(VoteResponse(0, 1, 1, True), api_key=52, api_version=3)


def test_responses_answer_errors_at_partition_level() -> None:
    entity: Any = encode_raft_response(
        VoteResponse(Errors.FENCED_LEADER_EPOCH, 5, 2, False), api_key=52, api_version=2
    )
    assert entity.error_code == ErrorCode.none
    partition = entity.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.fenced_leader_epoch
    assert (partition.leader_id, partition.leader_epoch, partition.vote_granted) == (2, 5, False)


def test_request_failed_and_mismatched_apis_have_no_wire_form() -> None:
    with pytest.raises(TypeError):
        encode_raft_response(RequestFailed(Errors.REQUEST_TIMED_OUT), api_key=52, api_version=2)
    with pytest.raises(TypeError):
        encode_raft_response(VoteResponse(0, 1, 1, True), api_key=1, api_version=17)
    with pytest.raises(TypeError):
        encode_raft_request(RequestFailed(0), cluster_id="c", src_id=1, dst_id=2)  # type: ignore[arg-type]


# ---------------------------------------------------------------- other topics and partitions


def vote_entity() -> Any:
    _, _, entity = encode_raft_request(
        VoteRequest(4, 1, 3, 99, False), cluster_id="c", src_id=1, dst_id=2
    )
    return entity


def with_topics(entity: Any, topics: tuple[Any, ...]) -> Any:
    return dataclasses.replace(entity, topics=topics)


def test_request_about_another_topic_is_refused() -> None:
    entity = vote_entity()
    (topic,) = entity.topics
    with pytest.raises(ValueError, match="metadata topic"):
        decode_raft_request(with_topics(entity, (dataclasses.replace(topic, topic_name="t"),)))


def test_request_about_another_partition_is_refused() -> None:
    entity = vote_entity()
    (topic,) = entity.topics
    (partition,) = topic.partitions
    other = dataclasses.replace(partition, partition_index=1)
    with pytest.raises(ValueError, match="metadata partition"):
        decode_raft_request(with_topics(entity, (dataclasses.replace(topic, partitions=(other,)),)))


@pytest.mark.parametrize("shape", ["no topic", "two topics", "no partition"])
def test_request_without_exactly_one_partition_is_refused(shape: str) -> None:
    entity = vote_entity()
    (topic,) = entity.topics
    topics = {
        "no topic": (),
        "two topics": (topic, topic),
        "no partition": (dataclasses.replace(topic, partitions=()),),
    }[shape]
    with pytest.raises(ValueError, match="expected one"):
        decode_raft_request(with_topics(entity, topics))


def test_fetch_for_another_topic_id_is_refused() -> None:
    _, _, entity = encode_raft_request(
        FetchRequest(1, 1, 0, -1, 0, 100), cluster_id="c", src_id=1, dst_id=2
    )
    request: Any = entity
    (topic,) = request.topics
    other = dataclasses.replace(topic, topic_id=uuid.UUID(int=2))
    with pytest.raises(ValueError, match="metadata topic"):
        decode_raft_request(with_topics(request, (other,)))


def test_response_about_another_partition_is_refused() -> None:
    entity: Any = encode_raft_response(VoteResponse(0, 1, 1, True), api_key=52, api_version=2)
    (topic,) = entity.topics
    with pytest.raises(ValueError):
        decode_raft_response(with_topics(entity, (dataclasses.replace(topic, topic_name="x"),)))


def test_describe_quorum_is_not_a_core_request() -> None:
    request = DescribeQuorumRequest(topics=())
    with pytest.raises(ValueError, match="not a raft core request"):
        decode_raft_request(request)


def test_non_core_responses_are_refused() -> None:
    with pytest.raises(ValueError, match="not a raft core response"):
        decode_raft_response(api_versions_response(3, API_VERSIONS))
    with pytest.raises(ValueError, match="not a raft core response"):
        decode_raft_response(quorum(2))


# ---------------------------------------------------------------- top-level errors


@pytest.mark.parametrize(("api_key", "version"), [(52, 2), (53, 1), (54, 0), (1, 17), (59, 1)])
def test_top_level_error_decodes_as_request_failed(api_key: int, version: int) -> None:
    entity = error_response(api_key, version, Errors.INCONSISTENT_CLUSTER_ID)
    frame = encode_response(RequestHeader(api_key, version, 1, None), entity)
    _, decoded = decode_response(api_key, version, frame[4:])
    assert decode_raft_response(decoded) == RequestFailed(Errors.INCONSISTENT_CLUSTER_ID)


def test_error_response_is_built_for_every_api_with_a_top_level_error_code() -> None:
    """The newest version of every API kio knows, and every version of the ones we serve."""
    cases = {(key, max(schema_name_map[name])) for key, name in api_key_map.items()}
    cases |= {(key, v) for key, (low, high) in API_VERSIONS.items() for v in range(low, high + 1)}
    built = 0
    for api_key, version in sorted(cases):
        schema = load_response_schema(api_key, version)
        if "error_code" not in {f.name for f in dataclasses.fields(schema)}:
            with pytest.raises(ValueError, match="no top-level error code"):
                error_response(api_key, version, 35)
            continue
        entity: Any = error_response(api_key, version, 35)
        assert entity.error_code == ErrorCode.unsupported_version
        frame = encode_response(RequestHeader(api_key, version, 1, None), entity)
        if api_key != 18:  # an erroring ApiVersions answer is read as v0
            assert decode_response(api_key, version, frame[4:]) == (1, entity)
        built += 1
    assert built > len(cases) // 2


def test_error_response_for_an_unknown_api_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        error_response(9999, 0, 35)


# ---------------------------------------------------------------- DescribeQuorum


def quorum(version: int) -> Any:
    return describe_quorum_response(
        leader_id=1,
        leader_epoch=7,
        high_watermark=40,
        voters=[ReplicaProgress(1, 42, 5, 5), ReplicaProgress(2, 40, 990, 980), ReplicaProgress(3)],
        observers=[ReplicaProgress(10, 38, 995, -1)],
        now_ms=1000,
        api_version=version,
    )


@pytest.mark.parametrize("version", [0, 1, 2])
def test_describe_quorum_reports_every_replica(version: int) -> None:
    entity = quorum(version)
    frame = encode_response(RequestHeader(55, version, 4, None), entity)
    assert decode_response(55, version, frame[4:]) == (4, entity)
    (topic,) = entity.topics
    assert topic.topic_name == METADATA_TOPIC
    (partition,) = topic.partitions
    assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (1, 7, 40)
    assert [(r.replica_id, r.log_end_offset) for r in partition.current_voters] == [
        (1, 42),
        (2, 40),
        (3, -1),
    ]
    assert [(r.replica_id, r.log_end_offset) for r in partition.observers] == [(10, 38)]


def test_describe_quorum_timestamps_use_minus_one_when_unknown_and_now_for_the_leader() -> None:
    (topic,) = quorum(2).topics
    (partition,) = topic.partitions
    stamps = [
        (r.replica_id, r.last_fetch_timestamp, r.last_caught_up_timestamp)
        for r in (*partition.current_voters, *partition.observers)
    ]
    assert stamps == [(1, 1000, 1000), (2, 990, 980), (3, -1, -1), (10, 995, -1)]


def test_describe_quorum_v2_decodes_with_kafka_python() -> None:
    frame = encode_response(RequestHeader(55, 2, 8, None), quorum(2))
    decoded = KpDescribeQuorumResponse.decode(frame, version=2, header=True, framed=True)
    assert decoded.header.correlation_id == 8
    (topic,) = decoded.topics
    assert topic.topic_name == METADATA_TOPIC
    (partition,) = topic.partitions
    assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (1, 7, 40)
    voters = [
        (r.replica_id, r.log_end_offset, r.last_fetch_timestamp, r.last_caught_up_timestamp)
        for r in partition.current_voters
    ]
    assert voters == [(1, 42, 1000, 1000), (2, 40, 990, 980), (3, -1, -1, -1)]
    assert [r.replica_id for r in partition.observers] == [10]


def test_kafka_python_describe_quorum_request_decodes_with_ours() -> None:
    topic = KpDescribeQuorumRequest.TopicData(
        topic_name=METADATA_TOPIC,
        partitions=[KpDescribeQuorumRequest.TopicData.PartitionData(partition_index=0)],
    )
    request = KpDescribeQuorumRequest[2](topics=[topic])
    request.with_header(correlation_id=3, client_id="admin")
    frame = bytes(request.encode(header=True, framed=True))
    header, entity = decode_request(frame[4:], API_VERSIONS)
    assert header == RequestHeader(55, 2, 3, "admin")
    assert entity.topics[0].topic_name == METADATA_TOPIC  # type: ignore[attr-defined]
    assert entity.topics[0].partitions[0].partition_index == 0  # type: ignore[attr-defined]


# ---------------------------------------------------------------- Fetch against kafka-python


def test_fetch_v17_request_decodes_with_kafka_python() -> None:
    body = FetchRequest(2, 9, 1234, 8, max_wait_ms=500, max_bytes=8 << 20)
    api_key, version, entity = encode_raft_request(body, cluster_id="cid", src_id=2, dst_id=1)
    frame = encode_request(RequestHeader(api_key, version, 11, "raft-2"), entity)
    decoded = KpFetchRequest.decode(frame, version=17, header=True, framed=True)
    assert decoded.header.correlation_id == 11
    assert decoded.cluster_id == "cid"
    assert decoded.replica_state.replica_id == 2
    assert decoded.max_wait_ms == 500
    (topic,) = decoded.topics
    assert topic.topic_id == METADATA_TOPIC_ID
    (partition,) = topic.partitions
    assert (partition.partition, partition.current_leader_epoch) == (0, 9)
    assert (partition.fetch_offset, partition.last_fetched_epoch) == (1234, 8)


def kafka_raft_fetch_request() -> bytes:
    """A Fetch v17 shaped like Kafka's KafkaRaftClient sends it: partition_max_bytes unset."""
    partition = KpFetchRequest.FetchTopic.FetchPartition(
        partition=0, current_leader_epoch=5, fetch_offset=77, last_fetched_epoch=4
    )
    topic = KpFetchRequest.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[partition])
    request = KpFetchRequest[17](
        cluster_id="cid",
        replica_state=KpFetchRequest.ReplicaState(replica_id=3),
        max_wait_ms=500,
        topics=[topic],
    )
    request.with_header(correlation_id=5, client_id="raft-client-3")
    return bytes(request.encode(header=True, framed=True))


def test_kafka_python_fetch_request_decodes_to_a_core_fetch() -> None:
    header, entity = decode_request(kafka_raft_fetch_request()[4:], API_VERSIONS)
    assert header == RequestHeader(1, 17, 5, "raft-client-3")
    src, message, cluster_id = decode_raft_request(entity)
    assert (src, cluster_id) == (3, "cid")
    # partition_max_bytes left at 0: the request-level limit (int32 max by default) applies.
    assert message == FetchRequest(3, 5, 77, 4, max_wait_ms=500, max_bytes=2**31 - 1)


def test_fetch_v17_response_decodes_with_kafka_python() -> None:
    body = FetchResponse(0, 9, 1, 500, 10, b"batch-bytes", 8, 450, -1, -1)
    entity = encode_raft_response(body, api_key=1, api_version=17)
    frame = encode_response(RequestHeader(1, 17, 12, None), entity)
    decoded = KpFetchResponse.decode(frame, version=17, header=True, framed=True)
    assert decoded.header.correlation_id == 12
    (topic,) = decoded.responses
    assert topic.topic_id == METADATA_TOPIC_ID
    (partition,) = topic.partitions
    assert (partition.high_watermark, partition.log_start_offset) == (500, 10)
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (1, 9)
    assert (partition.diverging_epoch.epoch, partition.diverging_epoch.end_offset) == (8, 450)
    assert bytes(partition.records) == b"batch-bytes"


def test_kafka_python_fetch_response_without_tagged_fields_decodes_with_defaults() -> None:
    partition = KpFetchResponse.FetchableTopicResponse.PartitionData(
        partition_index=0,
        error_code=Errors.NOT_LEADER_OR_FOLLOWER,
        high_watermark=-1,
        records=b"",
    )
    topic = KpFetchResponse.FetchableTopicResponse(
        topic_id=METADATA_TOPIC_ID, partitions=[partition]
    )
    response = KpFetchResponse[17](responses=[topic])
    response.with_header(correlation_id=6)
    frame = bytes(response.encode(header=True, framed=True))
    correlation_id, entity = decode_response(1, 17, frame[4:])
    assert correlation_id == 6
    assert decode_raft_response(entity) == FetchResponse(
        Errors.NOT_LEADER_OR_FOLLOWER, -1, -1, high_watermark=-1, log_start_offset=-1
    )


def test_fetch_v17_carries_the_fetchers_directory_id() -> None:
    """KIP-853: the leader of a static quorum learns its voters' directory ids from their
    fetches (the kraft.version upgrade names every voter by one); older versions drop it."""
    directory = uuid.UUID("5b3a1c2e-0000-4000-8000-00000000002a")
    body = FetchRequest(2, 3, 10, 3, 500, 1024, replica_directory_id=directory)
    assert request_over_the_wire(body, "c", 17) == (2, body, "c")
    _src, older, _cluster = request_over_the_wire(body, "c", 16)
    assert isinstance(older, FetchRequest) and older.replica_directory_id is None


def test_vote_and_begin_quorum_epoch_v1_carry_directory_ids() -> None:
    """The candidate's disk (votedDirectoryId) and the disk of the voter asked or told
    (checked by whoever answers at its address); v0 has neither."""
    directory = uuid.UUID("5b3a1c2e-0000-4000-8000-00000000002b")
    voter = uuid.UUID("5b3a1c2e-0000-4000-8000-00000000002c")
    body = VoteRequest(
        4, 2, 3, 10, pre_vote=False, candidate_directory_id=directory, voter_directory_id=voter
    )
    for version in (1, 2):
        assert request_over_the_wire(body, "c", version) == (2, body, "c")
    _src, older, _cluster = request_over_the_wire(body, "c", 0)
    assert older == VoteRequest(4, 2, 3, 10, pre_vote=False)
    begin = BeginQuorumEpochRequest(4, 2, voter_directory_id=voter)
    assert request_over_the_wire(begin, "c", 1) == (2, begin, "c")
    assert request_over_the_wire(begin, "c", 0)[1] == BeginQuorumEpochRequest(4, 2)


def test_describe_quorum_v2_names_directory_ids_and_the_voters_listeners() -> None:
    """KIP-853: v2 carries each replica's directory id (zero when unknown) and ``nodes``,
    each voter's listeners, as Kafka's RaftUtil.singletonDescribeQuorumResponse does;
    older versions have neither field and encode as before."""
    d1, d10 = uuid.UUID(int=1), uuid.UUID(int=10)
    arguments: dict[str, Any] = {
        "leader_id": 1,
        "leader_epoch": 7,
        "high_watermark": 40,
        "voters": [ReplicaProgress(1, 42, directory_id=d1), ReplicaProgress(2, 40)],
        "observers": [ReplicaProgress(10, 38, directory_id=d10)],
        "now_ms": 1000,
        "nodes": [(1, [("CONTROLLER", "c1", 9093)]), (2, [("CONTROLLER", "c2", 9093)])],
    }
    entity = describe_quorum_response(**arguments, api_version=2)
    frame = encode_response(RequestHeader(55, 2, 4, None), entity)
    decoded = decode_response(55, 2, frame[4:])[1]
    (partition,) = decoded.topics[0].partitions
    assert [(r.replica_id, r.replica_directory_id) for r in partition.current_voters] == [
        (1, d1),
        (2, None),  # the zero uuid on the wire, as kio reads it back
    ]
    assert [(r.replica_id, r.replica_directory_id) for r in partition.observers] == [(10, d10)]
    assert [
        (n.node_id, [(x.name, x.host, x.port) for x in n.listeners]) for n in decoded.nodes
    ] == [(1, [("CONTROLLER", "c1", 9093)]), (2, [("CONTROLLER", "c2", 9093)])]
    old = describe_quorum_response(**arguments, api_version=1)
    assert not hasattr(old, "nodes")
    assert decode_response(55, 1, encode_response(RequestHeader(55, 1, 4, None), old)[4:])[1] == old


def test_describe_quorum_lists_a_reformatted_voter_as_an_observer() -> None:
    """The leader's progress of id 3 comes from a re-formatted disk (d99), not voter (3, d3):
    DescribeQuorum shows voter 3 not heard from and the new replica among the observers."""
    d = {i: uuid.UUID(int=i) for i in (1, 2, 3, 99)}
    voter_set = VoterSet(tuple(Voter(i, d[i]) for i in (1, 2, 3)))
    progress = [
        ReplicaProgress(1, 9, directory_id=d[1]),
        ReplicaProgress(2, 9, 5, 5, directory_id=d[2]),
        ReplicaProgress(3, 9, 6, 6, directory_id=d[99]),
        ReplicaProgress(10, 4, 6, -1, directory_id=uuid.UUID(int=10)),
    ]
    voters, observers = split_replicas(progress, voter_set)
    assert [(p.replica_id, p.directory_id, p.end_offset) for p in voters] == [
        (1, d[1], 9),
        (2, d[2], 9),
        (3, d[3], -1),
    ]
    assert [(p.replica_id, p.directory_id) for p in observers] == [
        (3, d[99]),
        (10, uuid.UUID(int=10)),
    ]
