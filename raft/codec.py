"""The core's KRaft messages (raft/messages.py) to and from kio's Kafka protocol entities.

Kafka's RPCs are shaped for many topics and partitions; KRaft only ever talks about
``__cluster_metadata-0``, so each direction is a copy into or out of a single topic with a
single partition. The entities are built generically from the schema module of the version
in use (:func:`protocol.entities.make`, shared with the broker and controller): fields an older
version lacks are dropped and required fields we have no value for (directory ids, leader
endpoints, ...) get the protocol's zero value. That keeps one builder per API for every
version we accept, instead of one per version.

Sender ids travel inside the bodies, as in Kafka (Vote's replica id, the leader id of
Begin/EndQuorumEpoch, Fetch's replica state), which is where :func:`decode_raft_request`
reads the source replica from.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import uuid
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import timedelta
from functools import cache
from typing import Any, Literal

from kio.index import KioIndexError, load_payload_module, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.constants import EntityType
from kio.static.primitive import i32

from protocol.api_keys import ApiKey
from protocol.entities import make
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

METADATA_TOPIC = "__cluster_metadata"
METADATA_PARTITION = 0
METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's Uuid.METADATA_TOPIC_ID, AAAAAAAAAAAAAAAAAAAAAQ
ZERO_DIRECTORY_ID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "directory unknown"

# The newest versions kio has that Kafka 3.9/4.x KRaft speaks, down to the oldest that still
# carries what Raft needs (Fetch v12 introduced last_fetched_epoch and diverging_epoch).
API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.FETCH: (12, 17),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.VOTE: (0, 2),
    ApiKey.BEGIN_QUORUM_EPOCH: (0, 1),
    ApiKey.END_QUORUM_EPOCH: (0, 1),
    ApiKey.DESCRIBE_QUORUM: (0, 2),
    ApiKey.FETCH_SNAPSHOT: (0, 1),
}

_REQUEST_KEYS: dict[type, int] = {
    VoteRequest: ApiKey.VOTE,
    BeginQuorumEpochRequest: ApiKey.BEGIN_QUORUM_EPOCH,
    EndQuorumEpochRequest: ApiKey.END_QUORUM_EPOCH,
    FetchRequest: ApiKey.FETCH,
    FetchSnapshotRequest: ApiKey.FETCH_SNAPSHOT,
}
_RESPONSE_KEYS: dict[type, int] = {
    VoteResponse: ApiKey.VOTE,
    BeginQuorumEpochResponse: ApiKey.BEGIN_QUORUM_EPOCH,
    EndQuorumEpochResponse: ApiKey.END_QUORUM_EPOCH,
    FetchResponse: ApiKey.FETCH,
    FetchSnapshotResponse: ApiKey.FETCH_SNAPSHOT,
}


# ---------------------------------------------------------------- generic entity building


@cache
def _schema(
    api_key: int,
    api_version: int,
    entity_type: Literal[EntityType.request, EntityType.response],
) -> types.ModuleType:
    """The kio module holding one version's request or response entities."""
    low, high = API_VERSIONS.get(api_key, (0, -1))
    if not low <= api_version <= high:
        raise ValueError(f"api {api_key} v{api_version} is outside [{low}, {high}]")
    try:
        return load_payload_module(api_key, api_version, entity_type)
    except KioIndexError as error:
        raise ValueError(f"kio has no api {api_key} v{api_version}") from error


def _topics(module: Any, topic_class: str, partition_class: str, partition: dict) -> tuple:
    """The ``topics`` value of a single-partition KRaft RPC: __cluster_metadata-0 only.

    Topics are named differently across APIs (topic_name, name, topic) and Fetch v13+ uses
    the topic id instead, so all spellings are offered and :func:`make` keeps what exists.
    """
    index = {"partition_index": 0, "partition": 0, "index": 0}
    entry = make(getattr(module, partition_class), index | partition)
    topic = {
        "topic_name": METADATA_TOPIC,
        "name": METADATA_TOPIC,
        "topic": METADATA_TOPIC,
        "topic_id": METADATA_TOPIC_ID,
        "partitions": (entry,),
    }
    return (make(getattr(module, topic_class), topic),)


def _metadata_partition(topics: tuple[Any, ...] | None) -> Any:
    """The one partition of a KRaft RPC; ValueError unless it is exactly __cluster_metadata-0."""
    if not topics or len(topics) != 1:
        raise ValueError(f"expected one topic, got {len(topics or ())}")
    (topic,) = topics
    name = next(
        (getattr(topic, f) for f in ("topic_name", "name", "topic") if hasattr(topic, f)), None
    )
    if name != METADATA_TOPIC and getattr(topic, "topic_id", None) != METADATA_TOPIC_ID:
        # The name only: the topic's repr holds every partition it names (issue 22: a
        # request of 200,000 partitions was one turn of the loop, formatting them).
        raise ValueError(f"not the metadata topic: {name!r}")
    if not topic.partitions or len(topic.partitions) != 1:
        raise ValueError(f"expected one partition, got {len(topic.partitions or ())}")
    (partition,) = topic.partitions
    index = next(
        getattr(partition, f)
        for f in ("partition_index", "partition", "index")
        if hasattr(partition, f)
    )
    if index != METADATA_PARTITION:
        raise ValueError(f"not the metadata partition: {index}")
    return partition


# ---------------------------------------------------------------- requests


def encode_raft_request(
    body: Request,
    *,
    cluster_id: str | None,
    src_id: int,
    dst_id: int,
    api_version: int | None = None,
) -> tuple[int, int, object]:
    """(api key, api version, kio request entity) for one of the core's requests.

    ``cluster_id`` None is a tool's request (metadata-shell's Fetch): it does not know the
    cluster id, and the receiver checks only an id that is given, as Kafka's does.

    ``api_version`` defaults to the newest we speak; an older one serves a peer that
    advertised less. ``src_id`` must match the sender id the body carries, so a driver
    cannot send a request on behalf of another replica by mistake.
    """
    api_key = _REQUEST_KEYS.get(type(body))
    if api_key is None:
        raise TypeError(f"not a raft request: {body!r}")
    version = API_VERSIONS[api_key][1] if api_version is None else api_version
    module: Any = _schema(api_key, version, EntityType.request)
    match body:
        case VoteRequest():
            sender = body.candidate_id
            if body.pre_vote and version < 2:
                raise ValueError("a pre-vote needs Vote v2 (KIP-996)")
            partition: dict[str, object] = {
                "replica_epoch": body.candidate_epoch,
                "replica_id": body.candidate_id,
                "last_offset_epoch": body.last_offset_epoch,
                "last_offset": body.last_offset,
                "pre_vote": body.pre_vote,
            }
            if body.candidate_directory_id is not None:
                partition["replica_directory_id"] = body.candidate_directory_id
            if body.voter_directory_id is not None:
                partition["voter_directory_id"] = body.voter_directory_id
            top: dict[str, object] = {"voter_id": dst_id}
            topics = _topics(module, "TopicData", "PartitionData", partition)
        case BeginQuorumEpochRequest():
            sender = body.leader_id
            partition = {"leader_id": body.leader_id, "leader_epoch": body.leader_epoch}
            if body.voter_directory_id is not None:
                partition["voter_directory_id"] = body.voter_directory_id
            top = {"voter_id": dst_id}
            topics = _topics(module, "TopicData", "PartitionData", partition)
        case EndQuorumEpochRequest():
            sender = body.leader_id
            # v0 lists successor ids, v1 (KIP-853) replica keys; only one of them exists.
            replica_info = getattr(module, "ReplicaInfo", None)
            candidates = tuple(
                make(replica_info, {"candidate_id": replica})
                for replica in (body.preferred_successors if replica_info else ())
            )
            partition = {
                "leader_id": body.leader_id,
                "leader_epoch": body.leader_epoch,
                "preferred_successors": body.preferred_successors,
                "preferred_candidates": candidates,
            }
            top = {}
            topics = _topics(module, "TopicData", "PartitionData", partition)
        case FetchRequest():
            sender = body.replica_id
            partition = {
                "current_leader_epoch": body.current_leader_epoch,
                "fetch_offset": body.fetch_offset,
                "last_fetched_epoch": body.last_fetched_epoch,
                "partition_max_bytes": body.max_bytes,
            }
            if body.replica_directory_id is not None:
                partition["replica_directory_id"] = body.replica_directory_id
            # Fetch v15 moved the replica id into replica_state (KIP-903).
            top = {
                "replica_id": body.replica_id,
                "max_wait": timedelta(milliseconds=body.max_wait_ms),
                "max_bytes": body.max_bytes,
            }
            if hasattr(module, "ReplicaState"):
                state = {"replica_id": body.replica_id}
                top["replica_state"] = make(module.ReplicaState, state)
            topics = _topics(module, "FetchTopic", "FetchPartition", partition)
        case FetchSnapshotRequest():
            sender = body.replica_id
            snapshot_id = {"end_offset": body.snapshot_end_offset, "epoch": body.snapshot_epoch}
            partition = {
                "current_leader_epoch": body.current_leader_epoch,
                "snapshot_id": make(module.SnapshotId, snapshot_id),
                "position": body.position,
            }
            top = {"replica_id": body.replica_id, "max_bytes": body.max_bytes}
            topics = _topics(module, "TopicSnapshot", "PartitionSnapshot", partition)
    if sender != src_id:
        raise ValueError(f"{type(body).__name__} from {sender} sent as {src_id}")
    request_class = getattr(module, type(body).__name__)
    entity = make(request_class, top | {"cluster_id": cluster_id, "topics": topics})
    return api_key, version, entity


# Each decoder turns (request entity, its metadata partition) into (sender id, core message).


def _decode_vote(_request: Any, partition: Any) -> tuple[int, Request]:
    message = VoteRequest(
        candidate_epoch=partition.replica_epoch,
        candidate_id=partition.replica_id,
        last_offset_epoch=partition.last_offset_epoch,
        last_offset=partition.last_offset,
        pre_vote=getattr(partition, "pre_vote", False),
        # kio reads the zero UUID (Kafka's "unknown") as None.
        candidate_directory_id=getattr(partition, "replica_directory_id", None),
        voter_directory_id=getattr(partition, "voter_directory_id", None),
    )
    return partition.replica_id, message


def _decode_begin_quorum_epoch(_request: Any, partition: Any) -> tuple[int, Request]:
    message = BeginQuorumEpochRequest(
        partition.leader_epoch,
        partition.leader_id,
        voter_directory_id=getattr(partition, "voter_directory_id", None),
    )
    return partition.leader_id, message


def _decode_end_quorum_epoch(_request: Any, partition: Any) -> tuple[int, Request]:
    if hasattr(partition, "preferred_candidates"):
        successors = tuple(c.candidate_id for c in partition.preferred_candidates)
    else:
        successors = tuple(partition.preferred_successors)
    message = EndQuorumEpochRequest(partition.leader_epoch, partition.leader_id, successors)
    return partition.leader_id, message


def _decode_fetch(request: Any, partition: Any) -> tuple[int, Request]:
    if hasattr(request, "replica_state"):
        replica = request.replica_state.replica_id
    else:
        replica = request.replica_id
    # Kafka's raft client leaves partition_max_bytes at 0 and bounds the request-level
    # max_bytes instead; take whichever limit the sender actually set.
    max_bytes = partition.partition_max_bytes or request.max_bytes
    message = FetchRequest(
        replica_id=replica,
        current_leader_epoch=partition.current_leader_epoch,
        fetch_offset=partition.fetch_offset,
        last_fetched_epoch=partition.last_fetched_epoch,
        max_wait_ms=request.max_wait // timedelta(milliseconds=1),
        max_bytes=max_bytes,
        # kio reads the zero UUID (Kafka's "unknown") as None.
        replica_directory_id=getattr(partition, "replica_directory_id", None),
    )
    return replica, message


def _decode_fetch_snapshot(request: Any, partition: Any) -> tuple[int, Request]:
    message = FetchSnapshotRequest(
        replica_id=request.replica_id,
        current_leader_epoch=partition.current_leader_epoch,
        snapshot_end_offset=partition.snapshot_id.end_offset,
        snapshot_epoch=partition.snapshot_id.epoch,
        position=partition.position,
        max_bytes=request.max_bytes,
    )
    return request.replica_id, message


_REQUEST_DECODERS: dict[int, Callable[[Any, Any], tuple[int, Request]]] = {
    ApiKey.VOTE: _decode_vote,
    ApiKey.BEGIN_QUORUM_EPOCH: _decode_begin_quorum_epoch,
    ApiKey.END_QUORUM_EPOCH: _decode_end_quorum_epoch,
    ApiKey.FETCH: _decode_fetch,
    ApiKey.FETCH_SNAPSHOT: _decode_fetch_snapshot,
}


def _api(entity: Any) -> tuple[int, int]:
    """(api key, version) of a kio entity, ValueError for an API or version we do not serve."""
    api_key, version = entity.__api_key__, entity.__version__
    low, high = API_VERSIONS.get(api_key, (0, -1))
    if not low <= version <= high:
        raise ValueError(f"api {api_key} v{version} is outside [{low}, {high}]")
    return api_key, version


def decode_raft_request(entity: object) -> tuple[int, Request, str | None]:
    """(source replica id, core message, cluster id) of a KRaft request entity.

    ValueError for an API that is not one of the core's RPCs (DescribeQuorum is answered by
    the driver), a version outside API_VERSIONS, or a request that is not about exactly
    __cluster_metadata-0. The cluster id is returned unchecked: rejecting a foreign cluster
    with INCONSISTENT_CLUSTER_ID is the driver's call.
    """
    request: Any = entity
    api_key, _version = _api(request)
    decoder = _REQUEST_DECODERS.get(api_key)
    if decoder is None:
        raise ValueError(f"api {api_key} is not a raft core request")
    src, message = decoder(request, _metadata_partition(request.topics))
    return src, message, request.cluster_id


def request_voter_key(entity: object) -> tuple[int, uuid.UUID] | None:
    """(voter id, voter directory id) a Vote or BeginQuorumEpoch (v1+, KIP-853) is addressed
    to, or None when the version has no such fields or the sender left the id unset (-1).
    The directory id is the zero UUID when the sender does not know it (a static quorum)."""
    request: Any = entity
    voter_id = getattr(request, "voter_id", -1)
    if voter_id < 0:
        return None
    partition = _metadata_partition(request.topics)
    # kio reads the zero UUID as None.
    return voter_id, getattr(partition, "voter_directory_id", None) or ZERO_DIRECTORY_ID


# ---------------------------------------------------------------- responses


def encode_raft_response(body: Response, *, api_key: int, api_version: int) -> object:
    """The kio response entity (of the request's api and version) for a core response.

    Errors are answered at partition level, as Kafka's KafkaRaftClient does; the top-level
    error code is NONE. RequestFailed is the driver's own signal and has no wire form.
    """
    if _RESPONSE_KEYS.get(type(body)) != api_key:
        raise TypeError(f"{type(body).__name__} does not answer api {api_key}")
    module: Any = _schema(api_key, api_version, EntityType.response)
    assert not isinstance(body, RequestFailed)  # excluded by the key check above
    leader = {"leader_id": body.leader_id, "leader_epoch": body.leader_epoch}
    partition: dict[str, object] = {"error_code": ErrorCode(body.error_code)}
    match body:
        case VoteResponse():
            partition |= leader | {"vote_granted": body.vote_granted}
            classes = ("TopicData", "PartitionData")
        case BeginQuorumEpochResponse() | EndQuorumEpochResponse():
            partition |= leader
            classes = ("TopicData", "PartitionData")
        case FetchResponse():
            diverging = {"epoch": body.diverging_epoch, "end_offset": body.diverging_end_offset}
            snapshot = {"end_offset": body.snapshot_end_offset, "epoch": body.snapshot_epoch}
            partition |= {
                "high_watermark": body.high_watermark,
                "log_start_offset": body.log_start_offset,
                "diverging_epoch": make(module.EpochEndOffset, diverging),
                "current_leader": make(module.LeaderIdAndEpoch, leader),
                "snapshot_id": make(module.SnapshotId, snapshot),
                "records": body.records,
            }
            classes = ("FetchableTopicResponse", "PartitionData")
        case FetchSnapshotResponse():
            snapshot = {"end_offset": body.snapshot_end_offset, "epoch": body.snapshot_epoch}
            partition |= {
                "snapshot_id": make(module.SnapshotId, snapshot),
                "current_leader": make(module.LeaderIdAndEpoch, leader),
                "size": body.size,
                "position": body.position,
                "unaligned_records": body.unaligned_records,
            }
            classes = ("TopicSnapshot", "PartitionSnapshot")
    topics = _topics(module, *classes, partition)
    top = {"error_code": ErrorCode.none, "topics": topics, "responses": topics}
    return make(getattr(module, type(body).__name__), top)


def with_node_endpoint(entity: object, node_id: int, address: tuple[str, int]) -> object:
    """``entity`` (a Fetch v17+ or Vote v2+ response) naming where ``node_id`` (the leader
    it names) listens, in KIP-853's NodeEndpoints tagged field; unchanged for versions
    without that field."""
    if not hasattr(entity, "node_endpoints"):
        return entity
    module: Any = sys.modules[type(entity).__module__]
    endpoint = module.NodeEndpoint(
        node_id=BrokerId(i32(node_id)), host=address[0], port=i32(address[1])
    )
    return dataclasses.replace(entity, node_endpoints=(endpoint,))  # type: ignore[type-var]


def decode_raft_response(entity: object) -> Response:
    """The core response for a KRaft response entity.

    A top-level error (Kafka answers INCONSISTENT_CLUSTER_ID, or an unsupported request, that
    way) becomes RequestFailed with that code: there is no partition data to act on.
    ValueError for an unexpected API or a response that is not about __cluster_metadata-0.
    """
    response: Any = entity
    api_key, _version = _api(response)
    if api_key not in _RESPONSE_KEYS.values():
        raise ValueError(f"api {api_key} is not a raft core response")
    if response.error_code != Errors.NONE:
        return RequestFailed(int(response.error_code))
    topics = response.responses if api_key == ApiKey.FETCH else response.topics
    partition = _metadata_partition(topics)
    error_code = int(partition.error_code)
    if api_key == ApiKey.VOTE:
        return VoteResponse(
            error_code, partition.leader_epoch, partition.leader_id, partition.vote_granted
        )
    if api_key == ApiKey.BEGIN_QUORUM_EPOCH:
        return BeginQuorumEpochResponse(error_code, partition.leader_epoch, partition.leader_id)
    if api_key == ApiKey.END_QUORUM_EPOCH:
        return EndQuorumEpochResponse(error_code, partition.leader_epoch, partition.leader_id)
    # current_leader is a tagged struct: kio fills in the schema's defaults when it is absent.
    leader = partition.current_leader
    if api_key == ApiKey.FETCH:
        return FetchResponse(
            error_code,
            leader.leader_epoch,
            leader.leader_id,
            high_watermark=partition.high_watermark,
            log_start_offset=partition.log_start_offset,
            records=bytes(partition.records or b""),
            diverging_epoch=partition.diverging_epoch.epoch,
            diverging_end_offset=partition.diverging_epoch.end_offset,
            snapshot_end_offset=partition.snapshot_id.end_offset,
            snapshot_epoch=partition.snapshot_id.epoch,
        )
    return FetchSnapshotResponse(
        error_code,
        leader.leader_epoch,
        leader.leader_id,
        snapshot_end_offset=partition.snapshot_id.end_offset,
        snapshot_epoch=partition.snapshot_id.epoch,
        size=partition.size,
        position=partition.position,
        unaligned_records=bytes(partition.unaligned_records),
    )


# ---------------------------------------------------------------- driver-answered APIs


def describe_quorum_response(
    *,
    leader_id: int,
    leader_epoch: int,
    high_watermark: int,
    voters: list[ReplicaProgress],
    observers: list[ReplicaProgress],
    now_ms: int,
    api_version: int,
    nodes: Sequence[tuple[int, Sequence[tuple[str, str, int]]]] = (),
) -> object:
    """DescribeQuorumResponse for __cluster_metadata-0 from the leader's replica progress.

    Timestamps are -1 when unknown (what ReplicaProgress holds then); the leader reports
    itself as fetched and caught up at ``now_ms``, as Kafka's LeaderState does, since it
    never fetches from itself. From v2 (KIP-853) each replica carries its directory id (the
    zero uuid when unknown) and ``nodes`` each voter's listeners, (name, host, port), as
    Kafka's RaftUtil.singletonDescribeQuorumResponse gives them.
    """
    module: Any = _schema(ApiKey.DESCRIBE_QUORUM, api_version, EntityType.response)

    def state(progress: ReplicaProgress) -> Any:
        own = progress.replica_id == leader_id
        values = {
            "replica_id": progress.replica_id,
            "replica_directory_id": progress.directory_id,  # None: on the wire, zero
            "log_end_offset": progress.end_offset,
            "last_fetch_timestamp": now_ms if own else progress.last_fetch_ms,
            "last_caught_up_timestamp": now_ms if own else progress.last_caught_up_ms,
        }
        return make(module.ReplicaState, values)

    extra: dict[str, object] = {}
    if hasattr(module, "Node"):
        extra["nodes"] = tuple(
            make(
                module.Node,
                {
                    "node_id": node_id,
                    "listeners": tuple(
                        make(module.Listener, {"name": name, "host": host, "port": port})
                        for name, host, port in listeners
                    ),
                },
            )
            for node_id, listeners in nodes
        )

    partition = {
        "error_code": ErrorCode.none,
        "leader_id": leader_id,
        "leader_epoch": leader_epoch,
        "high_watermark": high_watermark,
        "current_voters": tuple(state(p) for p in voters),
        "observers": tuple(state(p) for p in observers),
    }
    topics = _topics(module, "TopicData", "PartitionData", partition)
    return make(
        module.DescribeQuorumResponse, {"error_code": ErrorCode.none, "topics": topics, **extra}
    )


def error_response(api_key: int, api_version: int, error_code: int) -> object:
    """A response of any API kio knows, empty but for ``error_code`` at top level.

    Built from the schema alone, so the driver can refuse any request (unsupported version,
    wrong cluster id, not a controller) without per-API code. ValueError for an API whose
    response has no top-level error code (there Kafka reports errors per resource).
    """
    try:
        response_class: Any = load_response_schema(api_key, api_version)
    except KioIndexError as error:
        raise ValueError(f"kio has no api {api_key} v{api_version}") from error
    if "error_code" not in {item.name for item in fields(response_class)}:
        raise ValueError(f"{response_class.__name__} has no top-level error code")
    return make(response_class, {"error_code": ErrorCode(error_code)})
