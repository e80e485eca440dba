"""``kraft-analyze`` on traces written by ``kraft-sim``: it flags exactly the failing runs.

One Spark session serves the whole module (starting one costs seconds). The trace sets come
from conftest: clean echo runs, and the same plus runs with the ack-before-fsync bug.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sim import analyze_cli
from sim.analysis.checks import ECHO_HEAL_BOUND_S
from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas, run_dirs, spark_session
from sim.scenarios.echo import HEAL_BOUND_S
from sim.tracefmt import RUN_FILE
from tests.planted import (
    KAFKA_BUG_ARGS,
    KAFKA_BUG_SEEDS,
    METADATA_BUG_SEEDS,
    METADATA_RAFT_BUG_SEEDS,
    RAFT_BUG_SEEDS,
)

from .conftest import TraceSets

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", shuffle_partitions=2)
    yield session
    session.stop()


@dataclass(frozen=True)
class CliRun:
    code: int
    stdout: str
    stderr: str
    out: Path


def run_cli(*args: str, out: Path) -> CliRun:
    """``kraft-analyze ARGS --out OUT`` in this process: it reuses the module's session."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = analyze_cli.main([*args, "--out", str(out)])
    return CliRun(code, stdout.getvalue(), stderr.getvalue(), out)


@pytest.fixture(scope="module")
def mixed_report(
    spark: SparkSession, traces: TraceSets, tmp_path_factory: pytest.TempPathFactory
) -> CliRun:
    return run_cli(str(traces.mixed), out=tmp_path_factory.mktemp("report"))


def failing_runs_by_simulator(trace_dir: Path) -> set[str]:
    runs = read_trace_pandas(str(trace_dir)).runs
    return set(runs.loc[runs["outcome"] == "violation", "run_id"])


def test_job_flags_exactly_the_runs_the_simulator_failed(
    mixed_report: CliRun, traces: TraceSets
) -> None:
    expected = failing_runs_by_simulator(traces.mixed)
    runs = read_trace_pandas(str(traces.mixed)).runs
    assert expected, "the planted bug must make at least one run fail"
    assert expected <= set(runs.loc[runs["bug"].notna(), "run_id"])
    summary = json.loads((mixed_report.out / "summary.json").read_text())
    assert set(summary["violating_runs"]) == expected
    assert mixed_report.code == 1
    assert mixed_report.stdout == f"runs={len(runs)} violations={len(expected)}\n"
    per_run = {row["run_id"]: row for row in summary["per_run"]}
    for run_id in expected:
        assert "committed-offset-lost" in per_run[run_id]["checks"]


def test_report_has_markdown_plots_and_summary(mixed_report: CliRun) -> None:
    report = (mixed_report.out / "report.md").read_text()
    assert report.startswith("# kraft-analyze report")
    for png in ("latency_percentiles.png", "fault_mix.png"):
        assert (mixed_report.out / png).stat().st_size > 10_000
        assert f"]({png})" in report
    run_plots = sorted(mixed_report.out.glob("run-*.png"))
    assert len(run_plots) == 2
    summary = json.loads((mixed_report.out / "summary.json").read_text())
    latency = {(row["f"], row["fault"]): row for row in summary["latency"]}
    assert latency[("echo", "none")]["p50_ms"] < latency[("echo", "partition")]["p99_ms"]
    assert summary["operations"] > 1000 and summary["keys_checked"] >= 6


def test_clean_sweep_reports_no_violations(
    spark: SparkSession, traces: TraceSets, tmp_path: Path
) -> None:
    result = run_cli(str(traces.clean), out=tmp_path)
    runs = len(run_dirs(str(traces.clean)))
    assert (result.code, result.stdout) == (0, f"runs={runs} violations=0\n")
    assert failing_runs_by_simulator(traces.clean) == set()


def test_spark_and_single_process_analyses_agree(mixed_report: CliRun, traces: TraceSets) -> None:
    distributed = json.loads((mixed_report.out / "summary.json").read_text())
    local = json.loads(
        json.dumps(analyze_local(read_trace_pandas(str(traces.mixed))).summary(), default=str)
    )
    for part in ("per_run", "violation_details", "latency", "fault_mix", "keys_not_ok"):
        assert distributed[part] == local[part], part
    assert distributed["operations"] == local["operations"]


def test_unknown_schema_version_is_a_usage_error(
    spark: SparkSession, traces: TraceSets, tmp_path: Path
) -> None:
    shutil.copytree(traces.clean, tmp_path / "t")
    first = run_dirs(str(tmp_path / "t"))[0] / RUN_FILE
    table = pq.read_table(first)
    pq.write_table(table.set_column(0, "schema_version", pa.array([7], pa.int16())), first)
    result = run_cli(str(tmp_path / "t"), out=tmp_path / "report")
    assert result.code == 2
    assert result.stdout == ""
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith("trace schema version 7 is not supported (this kraft-py reads [1])")
    )


def test_missing_or_empty_trace_dir_exits_2_with_one_line(tmp_path: Path) -> None:
    for path in (tmp_path / "absent", tmp_path):
        result = subprocess.run(
            [str(BIN / "kraft-analyze"), str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 2
        assert result.stdout == ""
        [line] = result.stderr.strip().splitlines()
        assert line.startswith(f"kraft-analyze: {path}: no ")


def test_echo_heal_bound_matches_the_scenario() -> None:
    assert ECHO_HEAL_BOUND_S == HEAL_BOUND_S


@pytest.fixture(scope="module")
def metadata_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Metadata-scenario runs: one honest, one per controller planted bug at its seed."""
    root = tmp_path_factory.mktemp("metadata-traces")
    for bug in (None, "answer-before-commit", "unfence-before-caught-up", "leader-outside-isr"):
        seed = METADATA_BUG_SEEDS[bug] if bug else 1
        args = ["run", "--scenario", "metadata", "--seed", str(seed), "--trace", str(root)]
        args += ["--bug", bug] if bug else []
        result = subprocess.run(
            [str(BIN / "kraft-sim"), *args], capture_output=True, text=True, check=False
        )
        assert result.returncode in (0, 1), result.stderr
    return root


def test_metadata_runs_are_judged_from_their_history_and_image_events(
    spark: SparkSession, metadata_traces: Path, tmp_path: Path
) -> None:
    expected = failing_runs_by_simulator(metadata_traces)
    runs = read_trace_pandas(str(metadata_traces)).runs
    assert expected == set(runs.loc[runs["bug"].notna(), "run_id"])
    result = run_cli(str(metadata_traces), out=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["violating_runs"]) == expected
    assert result.stdout == f"runs={len(runs)} violations={len(expected)}\n"


@pytest.fixture(scope="module")
def metadata_bug_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Metadata-scenario runs of the config and stalled-replay bugs at their catching seeds,
    and an honest run."""
    root = tmp_path_factory.mktemp("metadata-bug-traces")
    config_bug = "config-answer-before-commit"
    stall_bug = "observer-stops-on-fetch-error"
    runs = [(config_bug, METADATA_BUG_SEEDS[config_bug])]
    runs += [(stall_bug, METADATA_RAFT_BUG_SEEDS[stall_bug][0]), (None, 1)]
    for bug, seed in runs:
        args = ["run", "--scenario", "metadata", "--seed", str(seed), "--trace", str(root)]
        result = subprocess.run(
            [str(BIN / "kraft-sim"), *args, *(["--bug", bug] if bug else [])],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == (1 if bug else 0), result.stdout + result.stderr
    return root


def test_lost_config_changes_and_stale_replays_are_found_in_the_trace(
    spark: SparkSession, metadata_bug_traces: Path, tmp_path: Path
) -> None:
    """The config history (linearizability) and the catch-up samples (stale-metadata)
    re-derived from the trace flag exactly the runs the simulator failed."""
    expected = failing_runs_by_simulator(metadata_bug_traces)
    runs = read_trace_pandas(str(metadata_bug_traces)).runs
    assert set(runs.loc[runs["bug"].notna(), "run_id"]) == expected
    result = run_cli(str(metadata_bug_traces), out=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["violating_runs"]) == expected
    assert result.stdout == f"runs={len(runs)} violations={len(expected)}\n"
    checks = {row["bug"]: row["checks"] for row in summary["per_run"] if row["run_id"] in expected}
    assert "linearizability" in checks["config-answer-before-commit"]
    assert "stale-metadata" in checks["observer-stops-on-fetch-error"]


@pytest.fixture(scope="module")
def raft_bug_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Raft-scenario runs: each planted bug at the seed that catches it, and two honest runs."""
    root = tmp_path_factory.mktemp("raft-traces")
    runs = [(bug, seed) for bug, seed in RAFT_BUG_SEEDS.items()] + [(None, 1), (None, 2)]
    for bug, seed in runs:
        args = ["run", "--scenario", "raft", "--seed", str(seed), "--trace", str(root)]
        result = subprocess.run(
            [str(BIN / "kraft-sim"), *args, *(["--bug", bug] if bug else [])],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == (1 if bug else 0), result.stdout + result.stderr
    return root


def test_every_raft_planted_bug_is_found_in_its_trace_alone(
    spark: SparkSession, raft_bug_traces: Path, tmp_path: Path
) -> None:
    """The analysis re-derives each raft bug's violation from the events, without the
    simulator's verdict: it flags exactly the runs the simulator failed."""
    expected = failing_runs_by_simulator(raft_bug_traces)
    runs = read_trace_pandas(str(raft_bug_traces)).runs
    assert set(runs.loc[runs["bug"].notna(), "run_id"]) == expected
    result = run_cli(str(raft_bug_traces), out=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["violating_runs"]) == expected
    assert result.stdout == f"runs={len(runs)} violations={len(expected)}\n"


@pytest.fixture(scope="module")
def kafka_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kafka-scenario runs: an honest one, and two planted bugs at their catching seeds."""
    root = tmp_path_factory.mktemp("kafka-traces")
    runs = [("ack-before-fetch", KAFKA_BUG_SEEDS["ack-before-fetch"])]
    runs += [("skip-sequence-check", KAFKA_BUG_SEEDS["skip-sequence-check"]), (None, 2)]
    for bug, seed in runs:
        args = ["run", "--scenario", "kafka", "--seed", str(seed), "--duration", "20"]
        extra = ["--bug", bug, *KAFKA_BUG_ARGS.get(bug, ())] if bug else []
        result = subprocess.run(
            [str(BIN / "kraft-sim"), *args, *extra, "--trace", str(root)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == (1 if bug else 0), result.stdout + result.stderr
    return root


def test_kafka_runs_are_judged_from_their_history_and_partition_events(
    spark: SparkSession, kafka_traces: Path, tmp_path: Path
) -> None:
    """The Jepsen checks re-derived from the trace flag exactly the runs the simulator
    failed, with the simulator's own first verdict among their violations."""
    expected = failing_runs_by_simulator(kafka_traces)
    runs = read_trace_pandas(str(kafka_traces)).runs
    assert set(runs.loc[runs["bug"].notna(), "run_id"]) == expected
    result = run_cli(str(kafka_traces), out=tmp_path)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["violating_runs"]) == expected
    assert result.stdout == f"runs={len(runs)} violations={len(expected)}\n"
    local = analyze_local(read_trace_pandas(str(kafka_traces)))
    for run_id, violation in zip(runs["run_id"], runs["violation"], strict=True):
        if violation is not None:
            messages = local.violations.loc[local.violations["run_id"] == run_id, "message"]
            assert violation in set(messages), (violation, list(messages))
