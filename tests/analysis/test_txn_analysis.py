"""``kraft-analyze`` on kafka runs with ``--transactions``: the transactional checks
(sim/analysis/txn.py) replayed from the trace flag exactly the runs the simulator failed, each
planted ``txn-*`` bug at its pinned seed, and the simulator's own verdict is among them."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.bugs import (
    TXN_COMPLETE_BEFORE_MARKERS,
    TXN_LSO_IGNORES_OPEN,
    TXN_NO_ABORTED_LIST,
    TXN_OFFSETS_KEPT_ON_ABORT,
)
from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas
from sim.analysis.txn import CHECKS
from tests.planted import KAFKA_BUG_ARGS, KAFKA_BUG_SEEDS

from .conftest import trace_run

TXN_BUGS = (
    TXN_LSO_IGNORES_OPEN,
    TXN_NO_ABORTED_LIST,
    TXN_COMPLETE_BEFORE_MARKERS,
    TXN_OFFSETS_KEPT_ON_ABORT,
)


@pytest.fixture(scope="module")
def txn_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each txn-* bug at its pinned seed (20 s, as pinned) and one honest short run."""
    root = tmp_path_factory.mktemp("txn-traces")
    for bug in TXN_BUGS:
        trace_run(
            root, "kafka", KAFKA_BUG_SEEDS[bug], bug, "--duration", "20", *KAFKA_BUG_ARGS[bug]
        )
    trace_run(root, "kafka", 1, None, "--duration", "10", "--transactions")
    return root


def test_transactional_runs_are_judged_from_their_history(txn_traces: Path) -> None:
    trace = read_trace_pandas(str(txn_traces))
    local = analyze_local(trace)
    runs = trace.runs
    failed = set(runs.loc[runs["outcome"] == "violation", "run_id"])
    assert failed == set(runs.loc[runs["bug"].notna(), "run_id"])
    assert len(failed) == len(TXN_BUGS)
    flagged = set(local.violations["run_id"])
    assert flagged == failed
    for run_id, violation in zip(runs["run_id"], runs["violation"], strict=True):
        if violation is None:
            continue
        found = local.violations.loc[local.violations["run_id"] == run_id]
        assert violation in set(found["message"]), (violation, list(found["message"]))
        assert violation.split(":")[0] in CHECKS
