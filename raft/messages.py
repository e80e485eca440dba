"""The KRaft RPCs as the core sees them: small frozen dataclasses, no wire format.

Field names follow Kafka's schemas (VoteRequest.json, FetchRequest.json, ...) so the
translation to the wire (raft/codec.py, via kio) is a field-by-field copy. Keeping the core on
these instead of kio's nested topic/partition entities keeps it small and its property tests
fast; KRaft only ever replicates one partition (__cluster_metadata-0).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any


class Errors:
    """Kafka error codes the quorum uses."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    NETWORK_EXCEPTION = 13
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    INCONSISTENT_CLUSTER_ID = 104
    UNSUPPORTED_VERSION = 35
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


NO_LEADER = -1
# The largest epoch a node takes from a peer, holds or loads from quorum-state: one below
# the int32 maximum, so that the next epoch (an election's epoch + 1) always fits the record
# batch header's partition_leader_epoch field. Reaching it takes 2^31 elections; a request
# that names it (or more) is forged or corrupt and is refused with INVALID_REQUEST.
MAX_EPOCH = 2**31 - 2


@dataclass(frozen=True, slots=True)
class VoteRequest:
    candidate_epoch: int
    candidate_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool
    # Vote v1+ (KIP-853) ReplicaDirectoryId: the candidate's disk. A vote is given to
    # (id, directory id), so a re-formatted candidate cannot collect its predecessor's.
    candidate_directory_id: uuid.UUID | None = None
    # Vote v1+ VoterDirectoryId: the disk of the voter asked, as the candidate's voter set
    # names it. A replica on another disk (re-formatted, empty) refuses with
    # INVALID_VOTER_KEY instead of voting in place of the voter that held the log.
    voter_directory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: int
    leader_epoch: int
    leader_id: int
    vote_granted: bool


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    leader_epoch: int
    leader_id: int
    # v1+ VoterDirectoryId: the disk of the voter told, as the leader's voter set names it.
    voter_directory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: int
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    leader_epoch: int
    leader_id: int
    preferred_successors: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: int
    leader_epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class FetchRequest:
    replica_id: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    max_wait_ms: int
    max_bytes: int
    # Fetch v17 (KIP-853): the fetcher's metadata directory id. The leader of a static
    # quorum learns its voters' directory ids from it (the kraft.version 1 upgrade needs
    # them); None when unknown.
    replica_directory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int
    leader_epoch: int
    leader_id: int
    high_watermark: int = -1
    log_start_offset: int = 0
    records: bytes = b""
    # Set when the fetcher's log diverges: truncate to at most end_offset of this epoch.
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    # Set when fetch_offset is below the log start: fetch this snapshot instead.
    snapshot_end_offset: int = -1
    snapshot_epoch: int = -1


@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    replica_id: int
    current_leader_epoch: int
    snapshot_end_offset: int
    snapshot_epoch: int
    position: int
    max_bytes: int


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error_code: int
    leader_epoch: int
    leader_id: int
    snapshot_end_offset: int = -1
    snapshot_epoch: int = -1
    size: int = 0
    position: int = 0
    unaligned_records: bytes = b""


@dataclass(frozen=True, slots=True)
class RequestFailed:
    """Delivered in place of a response when the request timed out or its connection broke."""

    error_code: int


Request = (
    VoteRequest
    | BeginQuorumEpochRequest
    | EndQuorumEpochRequest
    | FetchRequest
    | FetchSnapshotRequest
)
Response = (
    VoteResponse
    | BeginQuorumEpochResponse
    | EndQuorumEpochResponse
    | FetchResponse
    | FetchSnapshotResponse
    | RequestFailed
)


@dataclass(frozen=True, slots=True)
class Inbound:
    """A message delivered to the core.

    A request carries ``reply_to`` (the driver's handle for the connection it came on); a
    response carries the ``correlation_id`` of the core's request it answers.
    """

    src: int
    body: Request | Response
    correlation_id: int = -1
    reply_to: Any = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Outbound:
    """A message the core wants sent: a request to ``dst`` or a response via ``reply_to``."""

    dst: int
    body: Request | Response
    correlation_id: int = -1
    reply_to: Any = field(default=None, compare=False)
