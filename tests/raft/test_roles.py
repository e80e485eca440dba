"""The role transition table (raft/roles.py): every move the core makes is in it, every
move in it is made by some scenario, and a move outside it raises."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings

import raft.core as core_module
from raft.core import RaftCore
from raft.quorum_state import QuorumState
from raft.replicated_log import MemoryLog
from raft.roles import INITIAL_ROLES, TRANSITIONS, IllegalTransition, Role, check_transition
from tests.raft.harness import CoreCluster, FixedClock
from tests.raft.scenario_runner import run_file
from tests.raft.test_core_properties import actions, play

SCENARIOS = Path(__file__).parent / "scenarios"
Move = tuple[Role | None, Role]
ALLOWED: set[Move] = {(None, role) for role in INITIAL_ROLES} | {
    (old, new) for old, targets in TRANSITIONS.items() for new in targets
}


@contextmanager
def recording_moves() -> Iterator[set[Move]]:
    """Every role change the core checks while this is open (still checked as usual)."""
    seen: set[Move] = set()

    def record(old: Role | None, new: Role) -> None:
        seen.add((old, new))
        check_transition(old, new)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(core_module, "check_transition", record)
        yield seen


def test_check_transition_allows_exactly_the_table() -> None:
    for old, new in itertools.product([None, *Role], Role):
        if (old, new) in ALLOWED:
            check_transition(old, new)
        else:
            with pytest.raises(IllegalTransition):
                check_transition(old, new)


def test_the_table_never_skips_pre_vote_and_only_a_leader_resigns() -> None:
    assert [old for old, new in ALLOWED if new is Role.CANDIDATE] == [Role.PROSPECTIVE]
    assert [old for old, new in ALLOWED if new is Role.LEADER] == [Role.CANDIDATE]
    assert {old for old, new in ALLOWED if new is Role.RESIGNED} == {None, Role.LEADER}


def test_the_core_refuses_a_move_outside_the_table() -> None:
    cluster = CoreCluster(voters=3)
    core = RaftCore(
        1,
        (1, 2, 3),
        MemoryLog(),
        QuorumState(),
        rng=random.Random(0),
        clock=FixedClock(cluster),
        now_ms=0,
    )
    assert core.role is Role.UNATTACHED
    with pytest.raises(IllegalTransition):
        core._set_role(Role.LEADER)  # an election without pre-vote and vote
    assert core.role is Role.UNATTACHED


def test_the_scenarios_walk_every_move_of_the_table() -> None:
    """The scenario files make every move the table allows, and no other: the table holds
    no move the core cannot make."""
    with recording_moves() as seen:
        for path in sorted(SCENARIOS.glob("*.txt")):
            run_file(path)
    assert seen == ALLOWED, {
        "never made": sorted(map(str, ALLOWED - seen)),
        "not in the table": sorted(map(str, seen - ALLOWED)),
    }


@settings(max_examples=60, deadline=None)
@given(actions)
def test_any_schedule_makes_only_moves_of_the_table(script: list[tuple[str, int]]) -> None:
    """Any interleaving of delivery, loss, duplication, time, proposals and crashes, in a
    static and a dynamic quorum with an observer: every role change is in the table
    (``_set_role`` raises IllegalTransition otherwise)."""
    for dynamic in (False, True):
        with recording_moves() as seen:
            play(CoreCluster(voters=3, observers=1, dynamic=dynamic), script)
        assert seen <= ALLOWED
