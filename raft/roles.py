"""The roles of a KRaft replica, the state each role alone holds, and the legal moves.

As Kafka's QuorumState (UnattachedState, ProspectiveState, CandidateState, LeaderState,
FollowerState, ResignedState): what is true in every role (epoch, leader, vote, log) stays
on the core; what only an election or only a leader needs lives in an object made when
the role is entered and dropped when it is left, so no stale leader table or vote count
can outlive its role. Every role change is checked against ``TRANSITIONS``: a move the
table does not hold is a bug in the core, and raises instead of running on.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from raft.messages import FetchRequest
from raft.progress import ReplicaProgress


class Role(enum.Enum):
    UNATTACHED = "unattached"
    FOLLOWER = "follower"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    RESIGNED = "resigned"


# The roles a replica may start in: from its stored quorum-state (RESIGNED when that says it
# led the current epoch: it may have lost unflushed entries, so it must not lead it again).
INITIAL_ROLES = frozenset({Role.UNATTACHED, Role.FOLLOWER, Role.RESIGNED})

# role -> the roles it may move to. A move to the same role is a new epoch, leader or vote
# (Unattached, Follower); an election always goes through a pre-vote (KIP-996), and only a
# leader resigns. Every role steps down to Unattached or Follower on a newer epoch.
TRANSITIONS: dict[Role, frozenset[Role]] = {
    Role.UNATTACHED: frozenset({Role.UNATTACHED, Role.FOLLOWER, Role.PROSPECTIVE}),
    Role.FOLLOWER: frozenset({Role.UNATTACHED, Role.FOLLOWER, Role.PROSPECTIVE}),
    Role.PROSPECTIVE: frozenset({Role.UNATTACHED, Role.FOLLOWER, Role.CANDIDATE}),
    Role.CANDIDATE: frozenset({Role.UNATTACHED, Role.FOLLOWER, Role.PROSPECTIVE, Role.LEADER}),
    Role.LEADER: frozenset({Role.UNATTACHED, Role.FOLLOWER, Role.RESIGNED}),
    Role.RESIGNED: frozenset({Role.UNATTACHED, Role.FOLLOWER, Role.PROSPECTIVE}),
}


class IllegalTransition(AssertionError):
    """The core tried a role change that TRANSITIONS does not allow."""


def check_transition(old: Role | None, new: Role) -> None:
    """Raise IllegalTransition unless ``old`` (None: the replica is starting) may become
    ``new``."""
    allowed = INITIAL_ROLES if old is None else TRANSITIONS[old]
    if new not in allowed:
        raise IllegalTransition(f"role {old} -> {new} is not allowed")


@dataclass(slots=True)
class ElectionState:
    """Prospective and Candidate: the answers of this round (voter id -> granted)."""

    votes: dict[int, bool] = field(default_factory=dict)


@dataclass(slots=True)
class ParkedFetch:
    """A Fetch the leader holds until it has something new to say (long polling)."""

    src: int
    request: FetchRequest
    reply_to: object
    deadline_ms: int


@dataclass(slots=True)
class LeaderState:
    """Leader: what it knows of each replica in its epoch, and the fetches it holds."""

    since_ms: int
    # The log end when it was elected: nothing commits until an entry past it does
    # (Raft's figure-8 rule).
    epoch_start_offset: int
    progress: dict[int, ReplicaProgress] = field(default_factory=dict)
    parked: dict[int, ParkedFetch] = field(default_factory=dict)
    begin_epoch_sent_ms: dict[int, int] = field(default_factory=dict)
