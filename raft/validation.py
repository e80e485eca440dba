"""Which inbound quorum requests the core may act on at all, before any state is looked at.

Kafka's KafkaRaftClient refuses, before touching its state: negative ids and epochs, a Vote
whose last offset epoch is not below its candidate epoch, a Fetch whose last fetched epoch is
above its current leader epoch (INVALID_REQUEST); and, for a static voter set as ours, a Vote
or Begin/EndQuorumEpoch from a node that is not a voter, or to a node that is not one
(INCONSISTENT_VOTER_SET). On top of Kafka's rules: no epoch above MAX_EPOCH (the next one
must still fit a record batch header; Kafka would overflow there), and no request naming
this node as its sender (a node never asks itself; such a request is forged). The checks
that depend on the current epoch (FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) stay with the
handlers in raft/core.py.

Also here, :class:`EpochRaiseBudget`: how far and how fast messages may raise a node's epoch
(the "epoch cliff" of issue 22: one forged Vote at epoch 2^31-2 per voter left a quorum with
no next epoch to elect in, for ever). Why these bounds: docs/raft.md, "Epoch cliff".
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from raft.messages import (
    MAX_EPOCH,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Errors,
    FetchRequest,
    FetchSnapshotRequest,
    Request,
    VoteRequest,
)

# The most one inbound message may raise a node's epoch: a voter that missed more elections
# than this (offline meanwhile) catches up over several messages, this many epochs each.
EPOCH_JUMP_MAX = 1000
# The sustained rate at which inbound messages may raise it. Elections are at least an
# election timeout apart, so a healthy quorum raises epochs by a few a second at most; at
# this rate 2^31 epochs take 248 days, time for an operator to notice (the node logs each
# refused raise) and use `kraft-server quorum-state --reset-epoch`.
EPOCH_RAISES_PER_S = 100


def _epoch_ok(epoch: int) -> bool:
    return 0 <= epoch <= MAX_EPOCH


def request_error(body: Request, *, node_id: int, voters: Collection[int]) -> int | None:
    """The error code that refuses ``body`` outright, or None if the core may handle it."""
    match body:
        case VoteRequest():
            if (
                body.candidate_id < 0
                or body.candidate_id == node_id
                or not _epoch_ok(body.candidate_epoch)
                or body.last_offset < 0
                or not 0 <= body.last_offset_epoch < body.candidate_epoch
            ):
                return Errors.INVALID_REQUEST
            return _voter_only(body.candidate_id, node_id, voters)
        case BeginQuorumEpochRequest() | EndQuorumEpochRequest():
            if body.leader_id < 0 or body.leader_id == node_id or not _epoch_ok(body.leader_epoch):
                return Errors.INVALID_REQUEST
            return _voter_only(body.leader_id, node_id, voters)
        case FetchRequest():
            if (
                body.replica_id == node_id
                or body.current_leader_epoch < 0
                or body.fetch_offset < 0
                or not 0 <= body.last_fetched_epoch <= body.current_leader_epoch
                or body.max_wait_ms < 0
                or body.max_bytes < 0
            ):
                return Errors.INVALID_REQUEST
        case FetchSnapshotRequest():
            if (
                body.replica_id == node_id
                or body.current_leader_epoch < 0
                or body.snapshot_end_offset < 0
                or not _epoch_ok(body.snapshot_epoch)
                or body.position < 0
                or body.max_bytes < 0
            ):
                return Errors.INVALID_REQUEST
    return None


def _voter_only(sender: int, node_id: int, voters: Collection[int]) -> int | None:
    """Elections are among voters: both ends of the RPC must be in the static voter set."""
    if node_id not in voters or sender not in voters:
        return Errors.INCONSISTENT_VOTER_SET
    return None


def raised_epoch(body: object) -> int | None:
    """The epoch ``body`` would move its receiver to if higher than the receiver's, or None
    for messages that never move it (a pre-vote, a fetch, a failure)."""
    match body:
        case VoteRequest():
            return None if body.pre_vote else body.candidate_epoch
        case BeginQuorumEpochRequest() | EndQuorumEpochRequest():
            return body.leader_epoch
        case FetchRequest() | FetchSnapshotRequest():
            return None
    epoch = getattr(body, "leader_epoch", None)  # any response
    return epoch if isinstance(epoch, int) else None


@dataclass(slots=True)
class EpochRaiseBudget:
    """A token bucket of epochs: inbound messages may raise the node's epoch by at most
    EPOCH_JUMP_MAX at once and EPOCH_RAISES_PER_S on average. The node's own elections (one
    epoch each) do not draw on it. Starts full, also after a restart."""

    updated_ms: int
    credit: float = EPOCH_JUMP_MAX

    def allowance(self, now_ms: int) -> int:
        """How many epochs a message arriving at ``now_ms`` may raise the epoch by."""
        elapsed_ms = max(0, now_ms - self.updated_ms)
        self.credit = min(EPOCH_JUMP_MAX, self.credit + elapsed_ms * EPOCH_RAISES_PER_S / 1000)
        self.updated_ms = now_ms
        return int(self.credit)

    def spend(self, epochs: int) -> None:
        assert 0 <= epochs <= self.credit, (epochs, self.credit)
        self.credit -= epochs
