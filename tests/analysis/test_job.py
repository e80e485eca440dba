"""``kraft-analyze`` on traces written by ``kraft-sim``: it flags exactly the failing runs.

One Spark session serves the whole module (starting one costs seconds). The trace sets come
from conftest: clean echo runs, the same plus runs with the ack-before-fsync bug, and kafka
runs (two planted bugs, one honest run) whose report plots are checked against the trace.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sim import analyze_cli
from sim.analysis import kafka_stats, stats
from sim.analysis.checks import ECHO_HEAL_BOUND_S
from sim.analysis.job import Analysis, analyze_local
from sim.analysis.kafka_report import (
    DISAGREES,
    FOCUS_OFFSETS,
    plot_kafka_run,
    plot_offset_timeline,
)
from sim.analysis.load import LocalTrace, read_trace_pandas, run_dirs, spark_session
from sim.analysis.report import LATENCY_FAULTS
from sim.scenarios.echo import HEAL_BOUND_S
from sim.tracefmt import RUN_FILE
from tests.planted import (
    METADATA_BUG_SEEDS,
    METADATA_RAFT_BUG_SEEDS,
    RAFT_BUG_SEEDS,
)

from .conftest import TraceSets, named_partition, trace_run

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
    """Metadata-scenario runs of the config, stalled-replay and controlled-shutdown bugs at
    their catching seeds, and an honest run."""
    root = tmp_path_factory.mktemp("metadata-bug-traces")
    config_bug = "config-answer-before-commit"
    stall_bug = "observer-stops-on-fetch-error"
    shutdown_bug = "shutdown-keeps-leaders"
    runs = [(config_bug, METADATA_BUG_SEEDS[config_bug])]
    runs += [(shutdown_bug, METADATA_BUG_SEEDS[shutdown_bug])]
    runs += [(stall_bug, METADATA_RAFT_BUG_SEEDS[stall_bug][0]), (None, 1)]
    for bug, seed in runs:
        trace_run(root, "metadata", seed, bug)
    return root


def test_lost_config_changes_and_stale_replays_are_found_in_the_trace(
    spark: SparkSession, metadata_bug_traces: Path, tmp_path: Path
) -> None:
    """The config history (linearizability), the catch-up samples (stale-metadata) and the
    shutdown events (controlled-shutdown) re-derived from the trace flag exactly the runs
    the simulator failed."""
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
    assert "controlled-shutdown" in checks["shutdown-keeps-leaders"]


@pytest.fixture(scope="module")
def raft_bug_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Raft-scenario runs: each planted bug at the seed that catches it, and two honest runs."""
    root = tmp_path_factory.mktemp("raft-traces")
    runs = [(bug, seed) for bug, seed in RAFT_BUG_SEEDS.items()] + [(None, 1), (None, 2)]
    for bug, seed in runs:
        trace_run(root, "raft", seed, bug)
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
def kafka_report(
    spark: SparkSession, kafka_traces: Path, tmp_path_factory: pytest.TempPathFactory
) -> CliRun:
    return run_cli(str(kafka_traces), out=tmp_path_factory.mktemp("kafka-report"))


@pytest.fixture(scope="module")
def kafka_local(kafka_traces: Path) -> tuple[LocalTrace, Analysis]:
    """The kafka traces in pandas and their single-process analysis."""
    trace = read_trace_pandas(str(kafka_traces))
    return trace, analyze_local(trace)


def test_kafka_runs_are_judged_from_their_history_and_partition_events(
    kafka_report: CliRun, kafka_traces: Path, kafka_local: tuple[LocalTrace, Analysis]
) -> None:
    """The Jepsen checks re-derived from the trace flag exactly the runs the simulator
    failed, with the simulator's own first verdict among their violations."""
    expected = failing_runs_by_simulator(kafka_traces)
    trace, local = kafka_local
    runs = trace.runs
    assert set(runs.loc[runs["bug"].notna(), "run_id"]) == expected
    summary = json.loads((kafka_report.out / "summary.json").read_text())
    assert set(summary["violating_runs"]) == expected
    assert kafka_report.code == 1
    assert kafka_report.stdout == f"runs={len(runs)} violations={len(expected)}\n"
    for run_id, violation in zip(runs["run_id"], runs["violation"], strict=True):
        if violation is not None:
            messages = local.violations.loc[local.violations["run_id"] == run_id, "message"]
            assert violation in set(messages), (violation, list(messages))


def report_sections(report: str) -> dict[str, str]:
    """The report's ``## Run <id> (violating|clean)`` sections, by run id."""
    parts = re.split(r"^## Run (\S+) \((?:violating|clean)\)$", report, flags=re.MULTILINE)
    return {
        run_id: body.split("\n## ", 1)[0]
        for run_id, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def test_kafka_report_draws_offsets_only_around_the_violating_partition(
    kafka_report: CliRun, kafka_local: tuple[LocalTrace, Analysis]
) -> None:
    """The report shows the first violating run and a clean one, each with its produce
    latency and availability figure and its sends counted as the history has them; only the
    violating run gets offset timelines, one of them of the partition and check the
    simulator's own verdict names."""
    trace = kafka_local[0]
    runs = trace.runs.set_index("run_id")
    sections = report_sections((kafka_report.out / "report.md").read_text())
    outcome = {run_id: runs.loc[run_id, "outcome"] for run_id in sections}
    assert sorted(outcome.values()) == ["ok", "violation"], outcome
    [bad] = [run_id for run_id, verdict in outcome.items() if verdict == "violation"]
    [good] = [run_id for run_id, verdict in outcome.items() if verdict == "ok"]

    message = runs.loc[bad, "violation"]
    check, key = named_partition(message)
    assert f"### Offsets of {key} around `{check}`" in sections[bad]
    assert f"> {message}" in sections[bad]
    png = kafka_report.out / f"offsets-{bad}-{check}.png"
    assert png.stat().st_size > 10_000 and f"]({png.name})" in sections[bad]
    drawn = [path.name for path in kafka_report.out.glob("offsets-*.png")]
    assert drawn and all(name.startswith(f"offsets-{bad}-") for name in drawn), drawn
    assert "### Offsets" not in sections[good]

    history = trace.history
    for run_id, section in sections.items():
        assert (kafka_report.out / f"run-{run_id}.png").stat().st_size > 10_000
        assert f"](run-{run_id}.png)" in section
        sends = history[(history["run_id"] == run_id) & (history["f"] == "send")]
        count = sends["type"].value_counts()
        ok, fail, info = (int(count.get(status, 0)) for status in ("ok", "fail", "info"))
        pending = int(count["invoke"]) - ok - fail - info
        assert f"Sends: {ok} ok, {fail} fail, {info} info, {pending} pending." in section


def test_kafka_run_figures_shade_faults_and_mark_the_violating_offset(
    kafka_local: tuple[LocalTrace, Analysis],
) -> None:
    """On the ack-before-fetch run: the availability panel shades every fault window, its
    bars add up to the acknowledged sends, and the offset timeline of the partition the
    simulator flagged shows a read disagreeing with the acknowledged send at that offset."""
    trace, analysis = kafka_local
    runs = trace.runs.set_index("run_id")
    [run_id] = runs.index[runs["bug"] == "ack-before-fetch"]
    message = runs.loc[run_id, "violation"]
    found = re.search(r"acknowledged at offset (\d+) of (\S+), which was read", message)
    assert found is not None, message
    offset, key = int(found.group(1)), found.group(2)
    history = trace.history[trace.history["run_id"] == run_id]
    events = trace.events[trace.events["run_id"] == run_id]

    figure = plot_kafka_run(trace, run_id, analysis)
    availability = next(ax for ax in figure.axes if ax.get_title() == "produce availability")
    rate = next(ax for ax in figure.axes if ax.get_ylabel() == "acknowledged sends per second")
    windows = stats.fault_windows(events)
    spans = windows[
        windows["fault"].isin(LATENCY_FAULTS) & (windows["end_us"] > windows["start_us"])
    ]
    assert len(spans) > 0 and len(availability.patches) == len(spans)
    acknowledged = int(((history["f"] == "send") & (history["type"] == "ok")).sum())
    bucket_s = kafka_stats.DEFAULT_BUCKET_US / 1e6
    assert sum(bar.get_height() for bar in rate.patches) * bucket_s == pytest.approx(acknowledged)
    assert any(line.get_linestyle() == "--" for line in availability.lines), "violation unmarked"
    plt.close(figure)

    ops = stats.operations_for_run(history, events)
    focus = kafka_stats.Focus("inconsistent-offsets", key, offset, None, message)
    _, ax = plt.subplots()
    plot_offset_timeline(ops, events, key, ax, focus=focus)
    series = {collection.get_label(): collection for collection in ax.collections}
    assert offset in series["acknowledged send"].get_offsets()[:, 1]
    assert offset in series[DISAGREES].get_offsets()[:, 1]
    low, high = ax.get_ylim()
    assert low < offset < high and high - low < 4 * FOCUS_OFFSETS
    plt.close("all")
