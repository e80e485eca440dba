"""The Raft core alone: elections, replication, commit, divergence, check quorum."""

from __future__ import annotations

import random

import pytest

from raft.core import Role
from raft.messages import FetchRequest, Inbound, VoteRequest
from tests.raft.harness import CoreCluster, log_entries


def elect(cluster: CoreCluster, rng: random.Random, steps: int = 100) -> int:
    for _ in range(steps):
        cluster.run(1, rng)
        leader = cluster.leader()
        if leader is not None:
            return leader
    raise AssertionError("no leader elected")


@pytest.mark.parametrize("voters", [1, 3, 5])
def test_a_healthy_cluster_elects_one_leader_and_commits(voters: int) -> None:
    rng = random.Random(1)
    cluster = CoreCluster(voters=voters, observers=1)
    leader = elect(cluster, rng)
    for _ in range(5):
        assert cluster.propose() is not None
    cluster.run(20, rng)
    assert sorted(cluster.acked) == sorted(cluster.committed)[-5:]
    hw = cluster.cores[leader].high_watermark
    for node in cluster.node_ids:
        assert cluster.cores[node].high_watermark == hw
        assert log_entries(cluster.logs[node]) == log_entries(cluster.logs[leader])
    observer = cluster.cores[100]
    assert observer.role is Role.FOLLOWER and observer.leader_id == leader


def test_leader_change_record_opens_every_epoch() -> None:
    rng = random.Random(2)
    cluster = CoreCluster(voters=3)
    leader = elect(cluster, rng)
    entries = log_entries(cluster.logs[leader])
    epoch = cluster.cores[leader].epoch
    assert entries[0][0] == epoch


def test_leader_crash_elects_a_new_leader_with_every_committed_entry() -> None:
    rng = random.Random(3)
    cluster = CoreCluster(voters=3)
    leader = elect(cluster, rng)
    for _ in range(3):
        cluster.propose()
    cluster.run(10, rng)
    committed = dict(cluster.committed)
    cluster.crash(leader)
    new_leader = elect(cluster, rng)
    assert cluster.cores[new_leader].epoch > cluster.cores[leader].epoch - 1
    entries = log_entries(cluster.logs[new_leader])
    for offset, entry in committed.items():
        assert entries[offset] == entry


def test_restarted_leader_resigns_instead_of_leading_its_old_epoch() -> None:
    rng = random.Random(4)
    cluster = CoreCluster(voters=3)
    leader = elect(cluster, rng)
    epoch = cluster.cores[leader].epoch
    cluster.crash(leader)
    assert cluster.cores[leader].role is Role.RESIGNED
    new_leader = elect(cluster, rng)
    assert cluster.cores[new_leader].epoch > epoch


def test_isolated_leader_resigns_by_check_quorum() -> None:
    rng = random.Random(5)
    cluster = CoreCluster(voters=3)
    leader = elect(cluster, rng)
    for _ in range(60):  # 3 s of silence: drop everything
        cluster.pool.clear()
        cluster.advance(50)
    assert cluster.cores[leader].role is not Role.LEADER


def test_isolated_leader_keeps_leading_with_the_no_check_quorum_bug() -> None:
    rng = random.Random(5)
    cluster = CoreCluster(voters=3, bugs=frozenset({"no-check-quorum"}))
    leader = elect(cluster, rng)
    for _ in range(60):
        cluster.pool.clear()
        cluster.advance(50)
    assert cluster.cores[leader].role is Role.LEADER


def test_fetch_with_a_diverging_log_gets_the_diverging_epoch() -> None:
    rng = random.Random(6)
    cluster = CoreCluster(voters=1)
    elect(cluster, rng)
    core = cluster.cores[1]
    core.step(
        Inbound(
            2,
            FetchRequest(
                replica_id=2,
                current_leader_epoch=core.epoch,
                fetch_offset=5,
                last_fetched_epoch=core.epoch,
                max_wait_ms=0,
                max_bytes=1000,
            ),
            reply_to="conn",
        )
    )
    (out,) = [m for m in core.ready().messages if m.reply_to == "conn"]
    assert out.body.diverging_epoch == core.epoch  # type: ignore[union-attr]
    assert out.body.diverging_end_offset == cluster.logs[1].end_offset()  # type: ignore[union-attr]


def test_pre_vote_does_not_disturb_a_healthy_leader() -> None:
    rng = random.Random(7)
    cluster = CoreCluster(voters=3)
    leader = elect(cluster, rng)
    epoch = cluster.cores[leader].epoch
    follower = next(n for n in cluster.voter_ids if n != leader)
    # The follower misses fetches for a while (its messages dropped), then rejoins.
    cluster.isolated = {follower}
    cluster.run(50, rng)
    cluster.isolated = set()
    cluster.run(40, rng)
    assert cluster.leader() == leader
    assert cluster.cores[leader].epoch == epoch


@pytest.mark.parametrize(
    ("bugs", "granted"), [(frozenset(), False), (frozenset({"vote-without-log-check"}), True)]
)
def test_vote_is_granted_only_to_an_up_to_date_log(bugs: frozenset[str], granted: bool) -> None:
    rng = random.Random(8)
    cluster = CoreCluster(voters=3, bugs=bugs)
    leader = elect(cluster, rng)
    for _ in range(3):
        cluster.propose()
    cluster.run(10, rng)
    voter = cluster.cores[next(n for n in cluster.voter_ids if n != leader)]
    stale = VoteRequest(
        candidate_epoch=voter.epoch + 1,
        candidate_id=leader,
        last_offset_epoch=voter.epoch,
        last_offset=1,
        pre_vote=False,
    )
    voter.step(Inbound(leader, stale, reply_to="conn"))
    (answer,) = [m.body for m in voter.ready().messages if m.reply_to == "conn"]
    assert answer.vote_granted is granted  # type: ignore[union-attr]
