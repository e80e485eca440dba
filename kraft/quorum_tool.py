"""``kraft-server describe-quorum``: the quorum's state from any controller, like Kafka's
``kafka-metadata-quorum.sh --bootstrap-controller HOST:PORT describe --status/--replication``.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import timedelta

from kio.schema.add_raft_voter.v0.request import AddRaftVoterRequest
from kio.schema.add_raft_voter.v0.request import Listener as AddListener
from kio.schema.describe_quorum.v2.request import (
    DescribeQuorumRequest,
    PartitionData,
    TopicData,
)
from kio.schema.remove_raft_voter.v0.request import RemoveRaftVoterRequest
from kio.schema.types import TopicName
from kio.static.primitive import i32, i32Timedelta, u16

from protocol import wire
from protocol.api_keys import ApiKey
from protocol.connect import Connector
from raft import codec

DESCRIBE_QUORUM_VERSION = 2
CLIENT_ID = "kraft-server"


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int
    last_caught_up_timestamp: int


@dataclass(frozen=True, slots=True)
class QuorumStatus:
    error_code: int
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaStatus, ...]
    observers: tuple[ReplicaStatus, ...]


async def describe_quorum(
    host: str, port: int, timeout_s: float = 5.0, connector: Connector | None = None
) -> QuorumStatus:
    """Ask one controller for DescribeQuorum, connecting as ``connector`` says (TLS, SASL:
    ``--command-config``; plain TCP without one); OSError/TimeoutError if it cannot be
    reached or refuses the login."""
    reader, writer = await asyncio.wait_for(
        (connector or Connector()).open(host, port, CLIENT_ID), timeout_s
    )
    try:
        request = DescribeQuorumRequest(
            topics=(
                TopicData(
                    topic_name=TopicName(codec.METADATA_TOPIC),
                    partitions=(PartitionData(partition_index=i32(0)),),
                ),
            )
        )
        header = wire.RequestHeader(ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION, 1, CLIENT_ID)
        writer.write(wire.encode_request(header, request))
        frame = await asyncio.wait_for(wire.read_frame(reader), timeout_s)
    finally:
        writer.close()
    _cid, response = wire.decode_response(ApiKey.DESCRIBE_QUORUM, DESCRIBE_QUORUM_VERSION, frame)
    top_error = int(response.error_code)  # type: ignore[attr-defined]
    if top_error != 0 or not response.topics:  # type: ignore[attr-defined]
        return QuorumStatus(top_error or -1, -1, -1, -1, (), ())
    partition = response.topics[0].partitions[0]  # type: ignore[attr-defined]

    def replicas(states: tuple) -> tuple[ReplicaStatus, ...]:
        return tuple(
            ReplicaStatus(
                int(s.replica_id),
                int(s.log_end_offset),
                int(s.last_fetch_timestamp),
                int(s.last_caught_up_timestamp),
            )
            for s in states
        )

    return QuorumStatus(
        error_code=int(partition.error_code),
        leader_id=int(partition.leader_id),
        leader_epoch=int(partition.leader_epoch),
        high_watermark=int(partition.high_watermark),
        voters=replicas(partition.current_voters),
        observers=replicas(partition.observers),
    )


async def change_voter(
    host: str,
    port: int,
    change: str,
    voter_id: int,
    directory_id: uuid.UUID,
    endpoints: tuple[tuple[str, str, int], ...] = (),
    timeout_s: float = 30.0,
    connector: Connector | None = None,
) -> int:
    """AddRaftVoter (``change`` "add", with the new voter's (listener, host, port)s) or
    RemoveRaftVoter ("remove") against one controller, connecting as ``connector`` says;
    its error code (0 once the change is committed). OSError/TimeoutError if it cannot be
    reached or refuses the login."""
    reader, writer = await asyncio.wait_for(
        (connector or Connector()).open(host, port, CLIENT_ID), timeout_s
    )
    try:
        request: object
        if change == "add":
            key = ApiKey.ADD_RAFT_VOTER
            request = AddRaftVoterRequest(
                cluster_id=None,
                timeout=i32Timedelta.parse(timedelta(seconds=timeout_s)),
                voter_id=i32(voter_id),
                voter_directory_id=directory_id,
                listeners=tuple(
                    AddListener(name=name, host=h, port=u16(p)) for name, h, p in endpoints
                ),
            )
        else:
            key = ApiKey.REMOVE_RAFT_VOTER
            request = RemoveRaftVoterRequest(
                cluster_id=None, voter_id=i32(voter_id), voter_directory_id=directory_id
            )
        writer.write(wire.encode_request(wire.RequestHeader(key, 0, 1, CLIENT_ID), request))
        frame = await asyncio.wait_for(wire.read_frame(reader), timeout_s + 5)
    finally:
        writer.close()
    _cid, response = wire.decode_response(key, 0, frame)
    return int(response.error_code)  # type: ignore[attr-defined]


def format_status(status: QuorumStatus) -> str:
    """The ``describe --status`` view."""
    lag = max((status.high_watermark - v.log_end_offset for v in status.voters), default=0)
    return "\n".join(
        [
            f"LeaderId:        {status.leader_id}",
            f"LeaderEpoch:     {status.leader_epoch}",
            f"HighWatermark:   {status.high_watermark}",
            f"MaxFollowerLag:  {max(lag, 0)}",
            f"CurrentVoters:   {[v.replica_id for v in status.voters]}",
            f"CurrentObservers: {[o.replica_id for o in status.observers]}",
        ]
    )


def format_replication(status: QuorumStatus) -> str:
    """The ``describe --replication`` view."""
    rows = ["NodeId  LogEndOffset  Lag  LastFetchTimestamp  LastCaughtUpTimestamp  Status"]
    for kind, replicas in (("Follower", status.voters), ("Observer", status.observers)):
        for r in replicas:
            role = "Leader" if r.replica_id == status.leader_id else kind
            lag = max(status.high_watermark - r.log_end_offset, 0)
            rows.append(
                f"{r.replica_id:<7} {r.log_end_offset:<13} {lag:<4} "
                f"{r.last_fetch_timestamp:<19} {r.last_caught_up_timestamp:<22} {role}"
            )
    return "\n".join(rows)
