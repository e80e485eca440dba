"""The anomalies table: what each check found, for kraft-py and Apache Kafka side by side on
the same schedule.

A run's schedule is its seed, nemeses, node count and time limit: two runs that share them
drew the same faults (docs/jepsen.md, "The nemesis"). After a run, ``kraft-jepsen run``
prints one column per system for the newest run of each in the trace directory with the
run's schedule (kraft-py's run ids are ``jepsen-s<seed>-...``, Apache Kafka's
``jepsen-kafka-s<seed>-...``), so running the same command with and without ``--kafka-lib``
into one trace directory gives the comparison. The counts are violations, as kraft-analyze
gives them (sim/analysis/checks.py): the transactional checks are sim/analysis/txn.py's, the
one definition the simulator uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas
from sim.analysis.txn import CHECKS, RC_POLL, TXN_END

KAFKA_PREFIX = "jepsen-kafka-"
# The consume-transform-produce checks judge the simulator's worker, which no real lane runs.
NOT_RUN = ("ctp-exactly-once", "ctp-offsets")
# No real client says which answer a record came from, so no poll carries its answer's LSO.
NO_INPUT = ("beyond-lso",)


def system_of(run_id: str) -> str:
    return "Apache Kafka" if run_id.startswith(KAFKA_PREFIX) else "kraft-py"


@dataclass(frozen=True, slots=True)
class Column:
    """One run's figures for the table."""

    run_id: str
    counts: dict[str, int]  # check -> violations
    commits: int  # transactions whose commit the coordinator acknowledged
    aborts: int
    rc_polls: int  # read_committed polls answered


def _schedule(runs: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """The runs of ``runs`` with ``run_id``'s schedule."""
    this = runs[runs["run_id"] == run_id].iloc[0]
    faults = tuple(this["faults"])
    same = runs[
        (runs["seed"] == this["seed"])
        & (runs["nodes"] == this["nodes"])
        & (runs["duration_faults_s"] == this["duration_faults_s"])
        & runs["faults"].map(lambda found: tuple(found) == faults)
    ]
    return same.sort_values("time_started_wall_ns")


def _runs(trace_dir: str) -> pd.DataFrame:
    try:
        runs = read_trace_pandas(trace_dir).runs
    except (FileNotFoundError, ValueError):
        runs = pd.DataFrame()
    if runs.empty:
        raise LookupError(f"{trace_dir} holds no runs")
    return runs


def newest_run(trace_dir: str) -> str:
    """The run of ``trace_dir`` started last (LookupError when it holds none)."""
    runs = _runs(trace_dir)
    return str(runs.sort_values("time_started_wall_ns")["run_id"].iloc[-1])


def columns(trace_dir: str, run_id: str) -> list[Column]:
    """The newest run of each system with ``run_id``'s schedule, kraft-py first
    (LookupError when the trace dir does not hold ``run_id``)."""
    runs = _runs(trace_dir)
    if run_id not in set(runs["run_id"]):
        raise LookupError(f"{trace_dir} holds no run {run_id}")
    newest: dict[str, str] = {}
    for found in _schedule(runs, run_id)["run_id"]:
        newest[system_of(found)] = found
    newest[system_of(run_id)] = run_id
    found_columns = []
    for system in ("kraft-py", "Apache Kafka"):
        if system not in newest:
            continue
        trace = read_trace_pandas(trace_dir, [newest[system]])
        analysis = analyze_local(trace)
        counts = analysis.violations["check"].value_counts().to_dict()
        history = trace.history
        ok = history[history["type"] == "ok"]
        ends = ok[ok["f"] == TXN_END]["value"]
        found_columns.append(
            Column(
                newest[system],
                {str(k): int(v) for k, v in counts.items()},
                int((ends == 1).sum()),
                int((ends == 0).sum()),
                int((ok["f"] == RC_POLL).sum()),
            )
        )
    return found_columns


def render(found: list[Column]) -> str:
    """The table as aligned text: a row per check, a column per system."""
    checks = [c for c in CHECKS if c not in NOT_RUN]
    others = sorted({check for column in found for check in column.counts} - set(checks))
    header = ["check", *(system_of(c.run_id) for c in found)]
    rows = [header]
    rows.append(["run", *(c.run_id for c in found)])
    rows.append(["transactions committed", *(str(c.commits) for c in found)])
    rows.append(["transactions aborted", *(str(c.aborts) for c in found)])
    rows.append(["read_committed polls", *(str(c.rc_polls) for c in found)])
    for check in [*checks, *others]:
        note = " (no LSO per answer)" if check in NO_INPUT else ""
        rows.append([check + note, *(str(c.counts.get(check, 0)) for c in found)])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )
