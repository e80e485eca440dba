"""The ``kraft-analyze`` job: every run of a trace directory checked and summarised by Spark.

Plan: the history is partitioned by run once (and cached), then
1. grouped by (run, key) -> linearizability verdicts, one Python task per key's history
   (``checks.check_key_history``); a run-partitioned history needs no further shuffle;
2. cogrouped with the run's node events -> node-event and scenario checks, availability,
   elections, fault windows and a latency histogram per (function, fault) (``analyse_run``);
3. the histograms are merged by Spark into latency percentiles.
Only per-key and per-run rows reach the driver, so its memory does not grow with the number
of operations; operations are paired inside the Python tasks and never travel as rows.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from sim.analysis import checks, stats
from sim.analysis.history import PAIRING_COLUMNS
from sim.analysis.load import LocalTrace, check_versions, load_trace

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

VERDICT_COLUMNS = (
    "run_id",
    "scenario",
    "seed",
    "bug",
    "faults",
    "verdict",
    "violations",
    "checks",
    "inconclusive",
    "ops_ok",
    "ops_fail",
    "ops_info",
    "ops_pending",
    "ops_orphan",
    "duration_s",
    "availability",
    "elections",
    "fault_kinds",
    "simulator_outcome",
)


@dataclass(slots=True)
class Analysis:
    """Everything ``kraft-analyze`` reports, as small pandas frames."""

    verdicts: pd.DataFrame  # one row per run (VERDICT_COLUMNS)
    violations: pd.DataFrame  # one row per broken invariant (check, message, ...)
    keys: pd.DataFrame  # per-key linearizability results that are not "ok"
    keys_checked: int
    latency: pd.DataFrame  # percentiles per function and fault
    metrics: pd.DataFrame  # per-run leadership and fault figures
    fault_mix: pd.DataFrame
    history_rows: int
    operations: int

    @property
    def runs(self) -> int:
        return len(self.verdicts)

    @property
    def violating_runs(self) -> list[str]:
        flagged = self.verdicts[self.verdicts["verdict"] == "violation"]
        return sorted(flagged["run_id"])

    def verdict_line(self) -> str:
        """The one line ``kraft-analyze`` prints: ``runs=N violations=V``."""
        return f"runs={self.runs} violations={len(self.violating_runs)}"

    def availability_overall(self) -> float | None:
        """Time with a leader over all runs that have leaders (None when none has)."""
        led = self.metrics[self.metrics["has_leaders"]]
        if led.empty:
            return None
        return float(led["leader_us"].sum() / led["duration_us"].sum())

    def election_durations_ms(self) -> pd.Series:
        durations = [us / 1000.0 for row in self.metrics["elections_us"] for us in row]
        return pd.Series(durations, dtype="float64")

    def summary(self) -> dict[str, Any]:
        """The machine-readable summary (summary.json)."""
        elections = self.election_durations_ms()
        return {
            "runs": self.runs,
            "violations": len(self.violating_runs),
            "violating_runs": self.violating_runs,
            "history_rows": self.history_rows,
            "operations": self.operations,
            "keys_checked": self.keys_checked,
            "availability_overall": self.availability_overall(),
            "elections": {
                "count": len(elections),
                "p50_ms": _maybe(elections.quantile(0.5)),
                "p99_ms": _maybe(elections.quantile(0.99)),
                "max_ms": _maybe(elections.max()),
            },
            "per_run": _records(self.verdicts),
            "violation_details": _records(self.violations),
            "keys_not_ok": _records(self.keys),
            "latency": _records(self.latency),
            "fault_mix": _records(self.fault_mix),
        }


def _maybe(value: float) -> float | None:
    return None if pd.isna(value) else float(value)


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return json.loads(frame.to_json(orient="records", default_handler=str))


RUN_RESULT_SCHEMA = pa.schema(
    [
        *stats.RUN_METRICS_SCHEMA,
        pa.field("violations_json", pa.string()),
        pa.field("latency_json", pa.string()),
    ]
)


_KEY_COLUMNS = (*PAIRING_COLUMNS, "value", "value_text", "values", "offset", "error", "scenario")


def analyse_run(history: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One run's checks and figures as one row of ``RUN_RESULT_SCHEMA`` (a Spark cogroup)."""
    ops = stats.operations_for_run(history, events)
    run = checks.run_data(ops, events)
    found = [dataclasses.asdict(v) for v in checks.check_run(run)]
    row = stats.run_metrics(run.events, run.ops)
    row["violations_json"] = json.dumps(found)
    row["latency_json"] = json.dumps(stats.latency_histograms(ops))
    return pd.DataFrame([row], columns=RUN_RESULT_SCHEMA.names)


def _with_scenario(frame: DataFrame, runs: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return frame.join(F.broadcast(runs.select("run_id", "scenario")), "run_id")


def analyze(spark: SparkSession, trace_dir: str) -> Analysis:
    """Run the whole job over ``trace_dir`` (raises load.TraceDirError if it has no runs)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    frames = load_trace(spark, trace_dir)
    runs = frames.runs.toPandas()
    check_versions(runs, trace_dir)
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    # Only the columns the checks read travel to Python (wall times and details do not).
    history = (
        _with_scenario(frames.history, frames.runs)
        .select(*_KEY_COLUMNS, "node", "detail")
        .repartition(int(partitions or 8), "run_id")
        .cache()
    )
    events = _with_scenario(frames.events, frames.runs).drop("time_wall_ns", "schema_version")
    try:
        key_frame = checks.key_results(history.select(*_KEY_COLUMNS)).toPandas()
        run_results = (
            history.select(
                *PAIRING_COLUMNS, "value", "values", "offset", "error", "detail", "node", "scenario"
            )
            .groupBy("run_id")
            .cogroup(events.groupBy("run_id"))
            .applyInPandas(analyse_run, from_arrow_schema(RUN_RESULT_SCHEMA))
            .cache()
        )
        run_frame = run_results.drop("latency_json").toPandas()
        latency = stats.latency_table_spark(run_results)
        run_results.unpersist()
    finally:
        history.unpersist()
    return assemble(runs, key_frame, run_frame, latency, int(runs["history_rows"].sum()))


def analyze_local(trace: LocalTrace) -> Analysis:
    """The same analysis on pandas frames in this process (a few runs, or a baseline)."""
    runs = trace.runs
    check_versions(runs, "trace")
    scenario_of = dict(zip(runs["run_id"], runs["scenario"], strict=True))
    history = trace.history.assign(scenario=trace.history["run_id"].map(scenario_of))
    events = trace.events.assign(scenario=trace.events["run_id"].map(scenario_of))
    history_by_run = dict(tuple(history.groupby("run_id", sort=False)))
    events_by_run = dict(tuple(events.groupby("run_id", sort=False)))
    key_rows, run_rows = [], []
    for run_id in runs["run_id"]:
        run_history = history_by_run.get(run_id, history.iloc[0:0])
        run_events = events_by_run.get(run_id, events.iloc[0:0])
        for _, key_history in run_history.groupby(run_history["key"].fillna("\0"), sort=False):
            key_rows.extend(checks.check_key_history_rows(key_history))
        run_rows.append(analyse_run(run_history, run_events))
    key_frame = pd.DataFrame(key_rows, columns=checks.KEY_RESULT_SCHEMA.names)
    run_frame = pd.concat(run_rows, ignore_index=True)
    latency = stats.latency_table_local([json.loads(t) for t in run_frame.pop("latency_json")])
    return assemble(runs, key_frame, run_frame, latency, len(trace.history))


def _as_list(value: Any) -> list[Any]:
    """Arrow list cells arrive as arrays, lists or (after a left join) NaN."""
    if value is None or isinstance(value, float):
        return []
    return list(value)


def assemble(
    runs: pd.DataFrame,
    key_frame: pd.DataFrame,
    run_frame: pd.DataFrame,
    latency: pd.DataFrame,
    history_rows: int,
) -> Analysis:
    """Join the per-key and per-run results into one verdict per run."""
    run_violations = [
        {"run_id": run_id, **found}
        for run_id, text in zip(run_frame["run_id"], run_frame["violations_json"], strict=True)
        for found in json.loads(text)
    ]
    bad_keys = key_frame[key_frame["result"] == "violation"]
    key_violations = [
        {
            "run_id": run_id,
            "check": "history" if model == "history" else "linearizability",
            "node": None,
            "time_virtual_us": None,
            "message": message,
        }
        for run_id, model, message in zip(
            bad_keys["run_id"], bad_keys["model"], bad_keys["message"], strict=True
        )
    ]
    violations = pd.DataFrame(
        run_violations + key_violations,
        columns=["run_id", "check", "node", "time_virtual_us", "message"],
    )
    violations = violations.sort_values(["run_id", "check"], kind="stable").reset_index(drop=True)
    unknown = key_frame[key_frame["result"] == "unknown"].groupby("run_id").size()
    messages = violations.groupby("run_id")["message"].apply(list)
    kinds = violations.groupby("run_id")["check"].apply(lambda c: sorted(set(c)))
    metrics = run_frame.drop(columns=["violations_json"])
    metrics = metrics.assign(elections_us=[_as_list(e) for e in metrics["elections_us"]])
    verdicts = runs[["run_id", "scenario", "seed", "bug", "faults", "outcome"]].rename(
        columns={"outcome": "simulator_outcome"}
    )
    verdicts = verdicts.merge(metrics, on="run_id", how="left")
    for status in stats.STATUSES:
        verdicts[f"ops_{status}"] = verdicts[f"ops_{status}"].fillna(0).astype("int64")
    verdicts["violations"] = [messages.get(run_id, []) for run_id in verdicts["run_id"]]
    verdicts["checks"] = [kinds.get(run_id, []) for run_id in verdicts["run_id"]]
    verdicts["verdict"] = ["violation" if v else "ok" for v in verdicts["violations"]]
    verdicts["inconclusive"] = [int(unknown.get(run_id, 0)) for run_id in verdicts["run_id"]]
    verdicts["duration_s"] = verdicts["duration_us"].fillna(0) / 1e6
    verdicts["availability"] = pd.to_numeric(verdicts["availability"]).astype("float64")
    verdicts["fault_kinds"] = [_as_list(kinds) for kinds in verdicts["fault_kinds"]]
    verdicts["faults"] = [_as_list(faults) for faults in verdicts["faults"]]
    verdicts = verdicts[list(VERDICT_COLUMNS)].sort_values("run_id").reset_index(drop=True)
    return Analysis(
        verdicts=verdicts,
        violations=violations,
        keys=key_frame[key_frame["result"] != "ok"].reset_index(drop=True),
        keys_checked=len(key_frame),
        latency=latency,
        metrics=metrics,
        fault_mix=stats.fault_mix(verdicts),
        history_rows=history_rows,
        operations=int(verdicts[[f"ops_{s}" for s in stats.STATUSES]].sum().sum()),
    )
