"""``exclusive-assignment`` (sim/analysis/kafka.py AssignmentChecker): KIP-848's promise that
a partition is never held by two members of a group at once, with its excuses (a member the
coordinator may have fenced, an answer from a deposed coordinator, power cuts that may have
lost the record that gave the partition), and kraft-analyze replaying it from a trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.analysis.job import analyze_local
from sim.analysis.kafka import EXCLUSIVE_ASSIGNMENT, AssignmentChecker, PowerCuts
from sim.analysis.load import read_trace_pandas
from tests.planted import KAFKA_BUG_ARGS, KAFKA_BUG_SEEDS

from .conftest import trace_run

FENCE_US = 5_000_000
LOG = "__consumer_offsets-1"


def checker(cuts: PowerCuts | None = None) -> AssignmentChecker:
    return AssignmentChecker(FENCE_US, cuts or PowerCuts(), LOG)


def take(
    c: AssignmentChecker,
    member: str,
    partitions: tuple[int, ...],
    at_us: int,
    *,
    sent_us: int | None = None,
    authoritative: bool = True,
) -> str | None:
    found = c.assigned(
        "g",
        member,
        partitions,
        authoritative=authoritative,
        sent_us=at_us - 1000 if sent_us is None else sent_us,
        isr=(1, 2),
        time_us=at_us,
    )
    return None if found is None else found.check


def test_a_partition_given_while_another_member_holds_it_is_a_violation() -> None:
    c = checker()
    assert take(c, "m", (0, 1), 1_000_000) is None
    assert take(c, "n", (2,), 1_500_000) is None  # a partition nobody holds
    assert take(c, "n", (1, 2), 2_000_000) == EXCLUSIVE_ASSIGNMENT
    assert [v.check for v in c.violations] == [EXCLUSIVE_ASSIGNMENT]


def test_a_partition_given_up_first_may_move() -> None:
    c = checker()
    take(c, "m", (0, 1), 1_000_000)
    assert take(c, "m", (0,), 1_900_000, authoritative=False) is None  # revoked it
    assert take(c, "n", (1,), 2_000_000) is None
    take(c, "m", (), 2_100_000)  # fenced, left or stopped: it holds nothing
    assert take(c, "n", (0, 1), 2_200_000) is None
    assert c.violations == []


def test_a_holder_the_coordinator_may_have_fenced_is_no_violation() -> None:
    c = checker()
    take(c, "m", (0,), 1_000_000, sent_us=900_000)
    # The coordinator answered m's heartbeat sent at 0.9 s: it may fence m from 5.9 s on.
    assert take(c, "n", (0,), 5_899_999) == EXCLUSIVE_ASSIGNMENT
    c = checker()
    take(c, "m", (0,), 1_000_000, sent_us=900_000)
    assert take(c, "n", (0,), 5_900_000) is None


def test_answers_of_a_deposed_coordinator_neither_protect_nor_are_judged() -> None:
    c = checker()
    take(c, "m", (0,), 1_000_000, authoritative=False)
    assert take(c, "n", (0,), 1_500_000) is None
    assert take(c, "m", (0, 1), 1_600_000, authoritative=False) is None
    assert c.violations == []


def test_a_holding_power_cuts_may_have_lost_is_no_violation() -> None:
    cuts = PowerCuts()
    c = checker(cuts)
    take(c, "m", (0,), 1_000_000)
    cuts.cut(1, 1_200_000)
    cuts.cut(2, 1_300_000)  # every replica that stored m's assignment lost power
    assert take(c, "n", (0,), 1_500_000) is None


def test_groups_are_judged_apart() -> None:
    c = checker()
    take(c, "m", (0,), 1_000_000)
    found = c.assigned(
        "other", "n", (0,), authoritative=True, sent_us=1_400_000, isr=(1,), time_us=1_500_000
    )
    assert found is None


@pytest.fixture(scope="module")
def assignment_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """assign-before-revoke at its pinned seed (20 s, as pinned) and an honest run."""
    root = tmp_path_factory.mktemp("assignment-traces")
    bug = "assign-before-revoke"
    trace_run(root, "kafka", KAFKA_BUG_SEEDS[bug], bug, "--duration", "20", *KAFKA_BUG_ARGS[bug])
    trace_run(root, "kafka", 2, None, "--duration", "10", "--consumer-protocol")
    return root


def test_kraft_analyze_flags_the_same_run_from_its_member_assignment_events(
    assignment_traces: Path,
) -> None:
    trace = read_trace_pandas(str(assignment_traces))
    local = analyze_local(trace)
    runs = trace.runs
    failed = runs.loc[runs["outcome"] == "violation"]
    assert list(failed["bug"]) == ["assign-before-revoke"]
    found = local.violations
    assert set(found["run_id"]) == set(failed["run_id"])
    assert failed["violation"].iloc[0].startswith(EXCLUSIVE_ASSIGNMENT + ": ")
    assert failed["violation"].iloc[0] in set(found["message"])
