"""The text scenarios of tests/raft/scenarios/: each file drives one RaftCore by hand and
holds the exact output expected after every step (format: tests/raft/scenario_runner.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raft.core import CORE_BUGS, MEMBER_BUGS, OBSERVER_BUGS
from tests.raft.scenario_runner import ScenarioError, ScenarioRunner, parse_file, run_file

SCENARIOS = Path(__file__).parent / "scenarios"
FILES = sorted(SCENARIOS.glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path) -> None:
    run_file(path, rewrite=os.environ.get("SCENARIO_REWRITE") == "1")


def test_there_are_at_least_25_scenarios() -> None:
    assert len(FILES) >= 25, [p.name for p in FILES]


def test_a_changed_expectation_fails_with_a_diff(tmp_path: Path) -> None:
    text = (
        "create id=1 voters=1,2,3\n----\n"
        "event RoleChanged role=unattached epoch=0 leader_id=-1\n"
        "state: unattached epoch=0 leader=-1 voted=-1 hw=0 end=0 flushed=0 voters=1,2,3\n"
    )
    path = tmp_path / "ok.txt"
    path.write_text(text)
    run_file(path)
    path.write_text(text.replace("unattached", "leader"))
    with pytest.raises(ScenarioError) as raised:
        run_file(path)
    assert "-state: leader epoch=0" in str(raised.value)
    assert "+state: unattached epoch=0" in str(raised.value)


def test_a_step_without_its_separator_is_refused() -> None:
    with pytest.raises(ScenarioError):
        parse_file("create id=1 voters=1\nstate: nothing\n")
    with pytest.raises(ScenarioError):
        ScenarioRunner().run("tick 10")


# Each planted bug of raft/core.py and the scenario that catches it: the scenarios assert
# behaviour a broken core gets wrong, not merely what the core happens to print.
CAUGHT_BY = {
    "vote-without-log-check": "vote_refused_to_shorter_log",
    "hw-from-previous-epoch": "leader_commits_only_its_own_epoch",
    "no-check-quorum": "check_quorum_leader_resigns",
    "no-truncate-on-divergence": "follower_truncates_on_diverging_epoch",
    "ack-before-fsync": "follower_fetches_and_appends",
    "truncate-to-high-watermark": "follower_truncates_to_own_epoch_end",
    "leader-counts-unflushed": "leader_high_watermark_on_majority",
    "fetch-before-flush": "follower_fetches_and_appends",
    "check-quorum-needs-fetch": "sole_voter_elects_itself",
    "snapshot-hw-not-adopted": "snapshot_follower_downloads",
    "voter-set-applied-at-commit": "voters_add_takes_effect_on_append",
    "removed-voter-keeps-leading": "removed_leader_resigns_after_commit",
    "observer-stops-on-fetch-error": "observer_follows_leader",
}


def test_every_planted_core_bug_has_a_scenario() -> None:
    assert set(CAUGHT_BY) == set(CORE_BUGS) | set(MEMBER_BUGS) | set(OBSERVER_BUGS)


@pytest.mark.parametrize("bug", sorted(CAUGHT_BY))
def test_a_planted_bug_fails_its_scenario(bug: str) -> None:
    path = SCENARIOS / f"{CAUGHT_BY[bug]}.txt"
    run_file(path)
    with pytest.raises(ScenarioError):
        run_file(path, planted=frozenset({bug}))
