"""``acl-bypassed`` (sim/analysis/kafka.py check_acl_answer) replayed by kraft-analyze from a
trace's ``acl-answer`` events: the run with the planted ``allow-before-deny`` authorizer is
flagged, with the simulator's own message, and an honest run beside it is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.analysis.job import analyze_local
from sim.analysis.kafka import ACL_BYPASSED
from sim.analysis.load import read_trace_pandas
from tests.planted import KAFKA_BUG_ARGS, KAFKA_BUG_SEEDS

from .conftest import trace_run

BUG = "allow-before-deny"


@pytest.fixture(scope="module")
def acl_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("acl-traces")
    trace_run(root, "kafka", KAFKA_BUG_SEEDS[BUG], BUG, "--duration", "20", *KAFKA_BUG_ARGS[BUG])
    trace_run(root, "kafka", 2, None, "--duration", "10", *KAFKA_BUG_ARGS[BUG])
    return root


def test_kraft_analyze_flags_the_bypassing_run_from_its_acl_answers(acl_traces: Path) -> None:
    trace = read_trace_pandas(str(acl_traces))
    runs = trace.runs
    assert len(runs) == 2
    failed = runs.loc[runs["outcome"] == "violation"]
    assert list(failed["bug"]) == [BUG]
    assert failed["violation"].iloc[0].startswith(ACL_BYPASSED + ": ")
    found = analyze_local(trace).violations
    assert set(found["run_id"]) == set(failed["run_id"])
    assert failed["violation"].iloc[0] in set(found["message"])
