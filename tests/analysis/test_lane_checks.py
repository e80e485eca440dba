"""The checks of the kafka scenario's refusal lanes replayed by kraft-analyze from a trace:
``acl-bypassed`` from the ``--acls`` lane's ``acl-answer`` events, ``quota-exceeded`` from
the ``--quotas`` lane's ``quota-answer`` events (sim/analysis/kafka.py, the code the
simulator runs online). The run with each lane's planted bug is flagged, with the
simulator's own message, and an honest run beside it is not."""

from __future__ import annotations

import pytest

from sim.analysis.job import analyze_local
from sim.analysis.kafka import ACL_BYPASSED, QUOTA_EXCEEDED
from sim.analysis.load import read_trace_pandas
from tests.planted import KAFKA_BUG_ARGS, KAFKA_BUG_SEEDS

from .conftest import trace_run

LANES = {"allow-before-deny": ACL_BYPASSED, "throttle-without-mute": QUOTA_EXCEEDED}


@pytest.fixture(scope="module", params=sorted(LANES))
def lane_traces(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str]:
    bug: str = request.param
    root = tmp_path_factory.mktemp(bug)
    trace_run(root, "kafka", KAFKA_BUG_SEEDS[bug], bug, "--duration", "20", *KAFKA_BUG_ARGS[bug])
    trace_run(root, "kafka", 2, None, "--duration", "10", *KAFKA_BUG_ARGS[bug])
    return str(root), bug


def test_kraft_analyze_flags_the_planted_run_from_its_lane_events(
    lane_traces: tuple[str, str],
) -> None:
    root, bug = lane_traces
    trace = read_trace_pandas(root)
    runs = trace.runs
    assert len(runs) == 2
    failed = runs.loc[runs["outcome"] == "violation"]
    assert list(failed["bug"]) == [bug]
    assert failed["violation"].iloc[0].startswith(LANES[bug] + ": ")
    found = analyze_local(trace).violations
    assert set(found["run_id"]) == set(failed["run_id"])
    assert failed["violation"].iloc[0] in set(found["message"])
