"""The human report (Markdown with PNG plots) and the machine summary (JSON) of an analysis.

The plot functions draw on a given matplotlib Axes so the notebooks use them as they are.
Every plot labels its axes with units; fault windows are shaded in one colour per fault
kind (instant faults are thin vertical lines) so a latency spike can be matched to its cause.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

if "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # reports are written headless; a notebook keeps its inline backend

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.patches import Patch

from sim.analysis import stats

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from sim.analysis.job import Analysis
    from sim.analysis.load import LocalTrace

FAULT_COLORS = {
    "partition": "#d62728",
    "oneway": "#ff9896",
    "slow": "#bcbd22",
    "stall": "#9467bd",
    "crash": "#8c564b",
    "pause": "#ff7f0e",
    "enospc": "#17becf",
    "skew": "#7f7f7f",
    "fsync": "#e377c2",
    "reset": "#1f77b4",
    "refuse": "#aec7e8",
}
STATE_COLORS = {
    "down": "#8c564b",
    "paused": "#ff7f0e",
    "leader": "#2ca02c",
    "follower": "#98df8a",
    "candidate": "#ffdd57",
    "prospective": "#f7e7a1",
    "unattached": "#dddddd",
    "resigned": "#c7c7c7",
}
STATUS_MARKERS = (("ok", ".", "#1f77b4"), ("fail", "x", "#d62728"), ("info", "^", "#ff7f0e"))
# Faults shaded behind latency: those that hold up requests. Clock skew, ENOSPC and instant
# faults are drawn per node on the node timeline instead, where they do not hide the points.
LATENCY_FAULTS = ("partition", "oneway", "slow", "stall", "crash", "pause")
_MAX_ROWS = 200
_RUN_COLUMNS = (
    "run_id",
    "seed",
    "bug",
    "verdict",
    "ops_ok",
    "ops_fail",
    "duration_s",
    "availability",
    "fault_kinds",
)


def _fault_color(fault: str) -> str:
    return FAULT_COLORS.get(fault, "#bbbbbb")


def shade_faults(ax: Axes, windows: pd.DataFrame, *, legend: bool = True) -> None:
    """Shade each fault window on a time axis in seconds; instants become vertical lines."""
    seen: set[str] = set()
    for window in windows.itertuples(index=False):
        color = _fault_color(window.fault)
        start_s, end_s = window.start_us / 1e6, window.end_us / 1e6
        if end_s > start_s:
            ax.axvspan(start_s, end_s, color=color, alpha=0.18, lw=0)
        else:
            ax.axvline(start_s, color=color, alpha=0.6, lw=0.8, ls=":")
        seen.add(window.fault)
    if legend and seen:
        handles = [Patch(color=_fault_color(f), alpha=0.4, label=f) for f in sorted(seen)]
        ax.legend(handles=handles, title="faults", loc="upper left", fontsize=7, ncol=2)


def plot_latency_over_time(
    ops: pd.DataFrame,
    windows: pd.DataFrame,
    ax: Axes | None = None,
    *,
    title: str = "",
    what: str = "operation",
) -> Axes:
    """Latency of every completed operation against its invoke time, fault windows shaded
    (``info``: the outcome is unknown, e.g. a timeout)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 4))
    shade_faults(ax, windows[windows["fault"].isin(LATENCY_FAULTS)])
    for status, marker, color in STATUS_MARKERS:
        done = ops[(ops["status"] == status) & ops["latency_us"].notna()]
        if not done.empty:
            ax.scatter(
                done["invoke_us"] / 1e6,
                done["latency_us"].astype("float64") / 1000.0,
                s=6,
                marker=marker,
                color=color,
                label=f"{status} ({len(done)})",
            )
    ax.set_yscale("log")
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel(f"{what} latency (ms, log scale)")
    ax.set_title(title or f"{what.capitalize()} latency over time")
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        first = ax.get_legend()
        ax.legend(handles, labels, loc="upper right", fontsize=7, title="operations")
        if first is not None:
            ax.add_artist(first)
    ax.grid(True, which="major", alpha=0.3)
    return ax


def plot_node_timeline(
    timeline: pd.DataFrame,
    windows: pd.DataFrame,
    ax: Axes | None = None,
    *,
    nodes: Iterable[str] = (),
    marks: pd.DataFrame | None = None,
    title: str = "",
) -> Axes:
    """One row per node: down/paused spans and Raft roles; faults and violations marked."""
    names = sorted(set(nodes) | set(timeline["node"]), key=_node_order)
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 0.45 * max(len(names), 3) + 1.2))
    shade_faults(ax, windows[windows["node"].isna()], legend=False)
    row = {name: i for i, name in enumerate(names)}
    seen: set[str] = set()
    for span in timeline.itertuples(index=False):
        y = row[span.node]
        height, offset = (0.8, 0.1) if span.layer == "process" else (0.4, 0.3)
        ax.broken_barh(
            [(span.start_us / 1e6, (span.end_us - span.start_us) / 1e6)],
            (y + offset, height),
            color=STATE_COLORS.get(span.state, "#cccccc"),
        )
        seen.add(span.state)
    node_faults = windows[windows["node"].notna() & ~windows["fault"].isin(["crash", "pause"])]
    for window in node_faults.itertuples(index=False):
        if window.node in row:
            ax.plot(
                [window.start_us / 1e6, max(window.end_us, window.start_us + 20_000) / 1e6],
                [row[window.node] + 0.05] * 2,
                color=_fault_color(window.fault),
                lw=3,
            )
            seen.add(f"fault:{window.fault}")
    if marks is not None:
        for mark in marks.itertuples(index=False):
            if mark.time_virtual_us is not None and not pd.isna(mark.time_virtual_us):
                ax.axvline(mark.time_virtual_us / 1e6, color="black", ls="--", lw=1)
                seen.add("violation")
    ax.set_yticks([i + 0.5 for i in range(len(names))], names)
    ax.set_ylim(0, len(names))
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("node")
    ax.set_title(title or "Node timeline (process state, Raft role, faults)")
    handles = [
        Patch(color=STATE_COLORS.get(state, "#cccccc"), label=state)
        for state in sorted(s for s in seen if not s.startswith("fault:") and s != "violation")
    ]
    handles += [
        Patch(color=_fault_color(s[6:]), label=s[6:]) for s in sorted(seen) if s[:6] == "fault:"
    ]
    if "violation" in seen:
        handles.append(plt.Line2D([], [], color="black", ls="--", label="violation"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def _node_order(name: str) -> tuple[int, str]:
    digits = "".join(ch for ch in name if ch.isdigit())
    return (int(digits) if digits else 0, name)


def plot_latency_percentiles(latency: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """p50 and p99 latency per fault kind (``none``: no fault under way), per function."""
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4))
    table = latency[latency["fault"] != "all"]
    labels = [f"{f}\n{fault}" for f, fault in zip(table["f"], table["fault"], strict=True)]
    x = range(len(table))
    ax.bar([i - 0.2 for i in x], table["p50_ms"], width=0.4, label="p50", color="#1f77b4")
    ax.bar([i + 0.2 for i in x], table["p99_ms"], width=0.4, label="p99", color="#d62728")
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("function / fault under way at invoke")
    ax.set_ylabel("latency (ms, log scale)")
    ax.set_title("Latency of acknowledged operations by fault")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def plot_fault_mix(fault_mix: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Share of violating runs among runs that saw each fault, and among those that did not."""
    if ax is None:
        _, ax = plt.subplots(figsize=(10, 4))
    seen = fault_mix[fault_mix["grouping"] == "fault seen"].set_index("value")
    unseen = fault_mix[fault_mix["grouping"] == "fault not seen"].set_index("value")
    kinds = list(seen.index)
    x = range(len(kinds))
    ax.bar(
        [i - 0.2 for i in x],
        seen["rate"].reindex(kinds).fillna(0),
        width=0.4,
        label="runs that saw the fault",
    )
    ax.bar(
        [i + 0.2 for i in x],
        unseen["rate"].reindex(kinds).fillna(0),
        width=0.4,
        label="runs that did not",
    )
    for i, kind in enumerate(kinds):
        for shift, table in ((-0.2, seen), (0.2, unseen)):
            if kind in table.index:
                ax.annotate(
                    f"n={int(table.loc[kind, 'runs'])}",
                    (i + shift, float(table.loc[kind, "rate"]) if table.loc[kind, "runs"] else 0),
                    ha="center",
                    va="bottom",
                    fontsize=6,
                )
    ax.set_xticks(list(x), kinds, fontsize=8, rotation=30)
    ax.set_ylim(0, 1.12)
    ax.set_xlabel("fault kind")
    ax.set_ylabel("fraction of runs with a violation")
    ax.set_title("Verdicts by fault mix")
    ax.legend(fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return ax


def plot_availability(metrics: pd.DataFrame, axes: tuple[Axes, Axes] | None = None) -> None:
    """Per-run availability (time with a leader) and election durations, as histograms."""
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    led = metrics[metrics["has_leaders"].fillna(False).astype(bool)]
    axes[0].hist(led["availability"].astype("float64") * 100, bins=20, color="#2ca02c")
    axes[0].set_xlabel("time with a leader (% of the run)")
    axes[0].set_ylabel("runs")
    axes[0].set_title("Availability per run")
    durations = [us / 1000.0 for row in led["elections_us"] for us in row]
    axes[1].hist(durations, bins=30, color="#9467bd")
    axes[1].set_xlabel("election duration (ms)")
    axes[1].set_ylabel("elections")
    axes[1].set_title("Leader election durations")


# ---- files ------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if pd.isna(value) else f"{value:.3g}"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame, limit: int = _MAX_ROWS) -> str:
    """A GitHub-flavoured Markdown table of ``frame`` (first ``limit`` rows)."""
    if frame.empty:
        return "_(none)_\n"
    shown = frame.head(limit)
    lines = [
        "| " + " | ".join(str(c) for c in shown.columns) + " |",
        "|" + "---|" * len(shown.columns),
    ]
    for row in shown.itertuples(index=False):
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    if len(frame) > limit:
        lines.append(f"\n_{len(frame) - limit} more rows in summary.json_")
    return "\n".join(lines) + "\n"


def showcase_runs(analysis: Analysis, count: int = 2) -> list[str]:
    """Runs worth a picture: the first violating run, then the clean run with most faults."""
    verdicts = analysis.verdicts
    chosen = list(analysis.violating_runs[:1])
    clean = verdicts[verdicts["verdict"] == "ok"].merge(
        analysis.metrics[["run_id", "fault_windows"]], on="run_id"
    )
    if not clean.empty:
        busiest = clean.sort_values(["fault_windows", "run_id"], ascending=[False, True])
        chosen.append(str(busiest["run_id"].iloc[0]))
    return chosen[:count]


def plot_run(trace: LocalTrace, run_id: str, analysis: Analysis | None = None) -> plt.Figure:
    """Latency over time above the node timeline of one run, on a shared time axis."""
    history = trace.history[trace.history["run_id"] == run_id]
    events = trace.events[trace.events["run_id"] == run_id]
    ops = stats.operations_for_run(history, events)
    windows = stats.fault_windows(events)
    timeline = stats.node_timeline(events)
    nodes = events.loc[events["kind"] == "start", "node"].dropna().unique()
    figure, (top, bottom) = plt.subplots(
        2,
        1,
        figsize=(12, 3.5 + 0.35 * max(len(nodes), 3)),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 2]},
    )
    marks = None
    if analysis is not None:
        marks = analysis.violations[analysis.violations["run_id"] == run_id]
    plot_latency_over_time(ops, windows, top, title=f"{run_id}: operation latency")
    plot_node_timeline(timeline, windows, bottom, nodes=nodes, marks=marks, title="node timeline")
    figure.tight_layout()
    return figure


def write_report(
    analysis: Analysis,
    out_dir: str | Path,
    *,
    trace_dir: str,
    runs: dict[str, LocalTrace] | None = None,
) -> Path:
    """Write summary.json, report.md and the PNGs under ``out_dir``; returns report.md."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = analysis.summary()
    summary["trace_dir"] = trace_dir
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")

    lines = [
        "# kraft-analyze report",
        "",
        f"**`{analysis.verdict_line()}`** over `{trace_dir}`: {analysis.history_rows} history "
        f"rows, {analysis.operations} operations, {analysis.keys_checked} (run, key) "
        "histories checked for linearizability.",
        "",
        "Verdicts are re-derived from each run's history and node events; the simulator's "
        "own verdict is shown only for comparison.",
        "",
    ]
    verdicts = analysis.verdicts
    agree = int(
        ((verdicts["verdict"] == "violation") == (verdicts["simulator_outcome"] == "violation"))
        .astype(int)
        .sum()
    )
    lines += [f"The simulator agrees on {agree} of {len(verdicts)} runs.", ""]
    lines += ["## Violating runs", ""]
    violating = verdicts[verdicts["verdict"] == "violation"].assign(
        first_violation=lambda f: [v[0] for v in f["violations"]]
    )
    lines.append(
        markdown_table(
            violating[["run_id", "seed", "bug", "checks", "first_violation", "simulator_outcome"]]
        )
    )
    lines += ["## All violations", ""]
    lines.append(markdown_table(analysis.violations[["run_id", "check", "node", "message"]]))
    lines += ["## Runs", ""]
    lines.append(markdown_table(verdicts[list(_RUN_COLUMNS)]))
    inconclusive = analysis.keys[analysis.keys["result"] == "unknown"]
    if not inconclusive.empty:
        lines += ["## Inconclusive keys (search budget exhausted)", ""]
        lines.append(markdown_table(inconclusive[["run_id", "key", "model", "ops", "message"]]))

    lines += ["## Latency of acknowledged operations (ms)", ""]
    if not analysis.latency.empty:
        lines.append(markdown_table(analysis.latency))
        figure, ax = plt.subplots(figsize=(10, 4))
        plot_latency_percentiles(analysis.latency, ax)
        save_figure(figure, out / "latency_percentiles.png")
        lines += ["", "![latency percentiles](latency_percentiles.png)", ""]

    lines += ["## Availability and elections", ""]
    overall = analysis.availability_overall()
    if overall is None:
        lines.append(
            "No run has leadership events (became-leader/follower/candidate), so availability "
            "and election durations do not apply to these scenarios."
        )
    else:
        elections = analysis.election_durations_ms()
        lines.append(
            f"Time with a leader over all runs: {overall:.1%}. Elections: {len(elections)}, "
            f"p50 {elections.quantile(0.5):.0f} ms, p99 {elections.quantile(0.99):.0f} ms."
        )
        figure, axes = plt.subplots(1, 2, figsize=(11, 3.5))
        plot_availability(analysis.metrics, axes)
        save_figure(figure, out / "availability.png")
        lines += ["", "![availability](availability.png)"]
    lines += ["", "## Verdicts by fault mix", ""]
    lines.append(markdown_table(analysis.fault_mix))
    if not analysis.fault_mix.empty and (analysis.fault_mix["grouping"] == "fault seen").any():
        figure, ax = plt.subplots(figsize=(10, 4))
        plot_fault_mix(analysis.fault_mix, ax)
        save_figure(figure, out / "fault_mix.png")
        lines += ["", "![fault mix](fault_mix.png)", ""]

    # Imported here: the kafka plots build on this module's.
    from sim.analysis.kafka_report import kafka_run_section

    scenario_of = dict(zip(analysis.verdicts["run_id"], analysis.verdicts["scenario"], strict=True))
    for run_id in sorted(runs or {}):
        trace = runs[run_id]  # type: ignore[index]
        if scenario_of.get(run_id) == "kafka":
            lines += kafka_run_section(trace, run_id, analysis, out)
            continue
        name = f"run-{run_id}.png"
        save_figure(plot_run(trace, run_id, analysis), out / name)
        label = "violating" if run_id in analysis.violating_runs else "clean"
        lines += [f"## Run {run_id} ({label})", "", f"![{run_id}]({name})", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report


def save_figure(figure: plt.Figure, path: Path) -> None:
    """Write ``figure`` as a PNG at ``path`` and free it."""
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
