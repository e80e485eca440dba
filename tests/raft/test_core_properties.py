"""Hypothesis drives several cores through any interleaving of message delivery, loss,
duplication and reordering, time, proposals and crashes; Raft's invariants must hold
throughout (the harness raises InvariantViolation), and once the network heals a leader is
elected and a fresh proposal commits everywhere."""

from __future__ import annotations

import random

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.raft.harness import CoreCluster

actions = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.integers(0, 1 << 16)),
        st.tuples(st.just("duplicate"), st.integers(0, 1 << 16)),
        st.tuples(st.just("drop"), st.integers(0, 1 << 16)),
        st.tuples(st.just("tick"), st.integers(1, 1500)),
        st.tuples(st.just("propose"), st.just(0)),
        st.tuples(st.just("crash"), st.integers(0, 1 << 16)),
        st.tuples(st.just("settle"), st.integers(1, 30)),
        st.tuples(st.just("isolate"), st.integers(0, 1 << 16)),
        st.tuples(st.just("heal"), st.just(0)),
    ),
    max_size=250,
)


def play(cluster: CoreCluster, script: list[tuple[str, int]]) -> None:
    rng = random.Random(len(script))
    for action, arg in script:
        if action == "settle":
            cluster.run(arg, rng)
        elif action == "isolate":
            cluster.isolated = {cluster.node_ids[arg % len(cluster.node_ids)]}
        elif action == "heal":
            cluster.isolated = set()
        elif action == "tick":
            cluster.advance(arg)
        elif action == "propose":
            cluster.propose()
        elif action == "crash":
            cluster.crash(cluster.node_ids[arg % len(cluster.node_ids)])
        elif cluster.pool:
            index = arg % len(cluster.pool)
            if action == "deliver":
                cluster.deliver(index)
            elif action == "duplicate":
                cluster.deliver(index, keep=True)
            else:
                cluster.drop(index)


def heals(cluster: CoreCluster, seed: int) -> None:
    """Once the network is healthy, some leader gets a fresh proposal committed everywhere.

    A proposal made just as leadership changes may legitimately be superseded, so a few
    rounds are allowed; each round is a fresh proposal by whoever leads then.
    """
    rng = random.Random(seed)
    cluster.isolated = set()
    for _ in range(10):
        target = None
        for _ in range(400):
            cluster.run(1, rng)
            if cluster.leader() is not None:
                target = cluster.propose()
                break
        assert target is not None, "no leader after healing"
        cluster.run(40, rng)
        if target in cluster.acked:
            # Then every node learns it is committed, within a bound: a node whose last
            # fetch was lost first waits out the request timeout (2 s, 40 steps of 50 ms),
            # then fetches the records and, in its next fetch, the high watermark.
            for _ in range(60):
                if all(cluster.cores[n].high_watermark > target for n in cluster.node_ids):
                    return
                cluster.run(1, rng)
            late = {n: cluster.cores[n].high_watermark for n in cluster.node_ids}
            raise AssertionError(f"offset {target} committed but not learned by all: {late}")
    raise AssertionError("no proposal committed within 10 rounds after healing")


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([1, 3, 5]), actions, st.integers(0, 1000))
@example(3, [("drop", 0), ("settle", 23), ("drop", 0), ("drop", 0)], 118)
def test_raft_invariants_hold_under_any_message_schedule(
    voters: int, script: list[tuple[str, int]], seed: int
) -> None:
    cluster = CoreCluster(voters=voters, observers=1, seed=seed)
    play(cluster, script)
    heals(cluster, seed)
