"""Issue 22 item 7, the epoch cliff: one forged Vote per voter at epoch 2^31-2 left the quorum
with no next epoch, for ever. Messages may now raise a node's epoch by at most
EPOCH_JUMP_MAX at once and EPOCH_RAISES_PER_S on average; a voter that really fell behind
still catches up, a few messages (and seconds) later."""

from __future__ import annotations

import random

from raft.core import Role
from raft.messages import (
    MAX_EPOCH,
    BeginQuorumEpochRequest,
    Errors,
    Inbound,
    VoteRequest,
)
from raft.quorum_state import QuorumState
from raft.validation import EPOCH_JUMP_MAX, EPOCH_RAISES_PER_S
from tests.raft.harness import CoreCluster
from tests.raft.test_core import elect

DEAD_CONNECTION = (0, 0)  # an incarnation no node has: the answer is not delivered


def forge(cluster: CoreCluster, src: int, dst: int, body: object) -> list[object]:
    """Step a request from ``src`` into ``dst`` (not through the pool); its answers."""
    core = cluster.cores[dst]
    core.step(Inbound(src, body, reply_to=DEAD_CONNECTION))  # type: ignore[arg-type]
    answers = [m.body for m in core._ready.messages if m.reply_to == DEAD_CONNECTION]
    cluster._drain(dst)
    return answers


def test_forged_votes_at_the_last_epoch_leave_a_quorum_that_elects_again() -> None:
    rng = random.Random(5)
    cluster = CoreCluster(voters=3)
    elect(cluster, rng)
    before = {v: cluster.cores[v].epoch for v in cluster.voter_ids}
    for voter in cluster.voter_ids:
        other = next(v for v in cluster.voter_ids if v != voter)
        (reply,) = forge(cluster, other, voter, VoteRequest(MAX_EPOCH, other, 0, 0, False))
        assert reply.error_code == Errors.UNKNOWN_LEADER_EPOCH  # type: ignore[attr-defined]
        assert reply.vote_granted is False  # type: ignore[attr-defined]
        core = cluster.cores[voter]
        assert core.epoch == before[voter] + EPOCH_JUMP_MAX and core.voted_id == -1
    leader = elect(cluster, rng, steps=400)
    assert cluster.cores[leader].epoch < MAX_EPOCH
    offset = cluster.propose()
    assert offset is not None
    cluster.run(20, rng)
    assert offset in cluster.committed


def test_a_stream_of_forged_raises_is_held_to_the_rate() -> None:
    rng = random.Random(6)
    cluster = CoreCluster(voters=3)
    leader = elect(cluster, rng)
    victim = next(v for v in cluster.voter_ids if v != leader)
    core = cluster.cores[victim]
    start = core.epoch
    for step in range(1, 200):  # each claims a leader 1,000,000 epochs further on
        forge(cluster, leader, victim, BeginQuorumEpochRequest(start + step * 10**6, leader))
    assert core.epoch == start + EPOCH_JUMP_MAX
    cluster.advance(10_000)  # ten seconds refill 1,000 epochs of credit (at most the jump)
    forge(cluster, leader, victim, BeginQuorumEpochRequest(MAX_EPOCH, leader))
    assert core.epoch == start + EPOCH_JUMP_MAX + min(EPOCH_JUMP_MAX, 10 * EPOCH_RAISES_PER_S)


def test_a_voter_far_behind_catches_up_and_follows() -> None:
    """Two voters at epoch 5,000 elect a leader; the third, at epoch 0, is 5,000 epochs
    behind (offline through that many elections): it reaches the leader's epoch a
    thousand epochs a message, then follows it."""
    rng = random.Random(7)
    cluster = CoreCluster(voters=3)
    for voter in (1, 2):
        cluster.states[voter] = QuorumState(leader_epoch=5000)
        cluster.crash(voter)
    leader = elect(cluster, rng, steps=200)
    assert leader in (1, 2)
    epoch = cluster.cores[leader].epoch
    laggard = cluster.cores[3]
    for _ in range(2000):  # up to 100 virtual seconds
        if laggard.role is Role.FOLLOWER and laggard.epoch == epoch:
            break
        cluster.run(1, rng)
    assert (laggard.role, laggard.epoch, laggard.leader_id) == (Role.FOLLOWER, epoch, leader)
    offset = cluster.propose()
    assert offset is not None
    cluster.run(20, rng)
    assert cluster.cores[3].high_watermark > offset
