"""The Kafka scenario's plots: produce latency and availability over time, and one
partition's offsets around a violation; and their section of the report.

Like ``report``, every function draws on a given matplotlib Axes, so the notebooks call
them as they are; times are virtual seconds, fault windows are shaded as in ``report``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from sim.analysis import kafka_stats, stats
from sim.analysis.kafka_stats import Focus
from sim.analysis.report import (
    LATENCY_FAULTS,
    plot_latency_over_time,
    plot_node_timeline,
    save_figure,
    shade_faults,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from sim.analysis.job import Analysis
    from sim.analysis.load import LocalTrace

# Offsets shown either side of the one a violation names.
FOCUS_OFFSETS = 25
# Availability below this counts as an outage in the report's one-line summary.
OUTAGE_BELOW = 0.5
# The legend entry of reads that contradict an acknowledged send.
DISAGREES = "polled, not the acknowledged value"


def _mark_times(ax: Axes, times_us: list[int]) -> None:
    for time_us in times_us:
        ax.axvline(time_us / 1e6, color="black", ls="--", lw=1)


def plot_send_availability(
    table: pd.DataFrame,
    windows: pd.DataFrame,
    ax: Axes | None = None,
    *,
    marks_us: Sequence[int] = (),
    title: str = "",
    fault_legend: bool = True,
) -> Axes:
    """The fraction of sends acknowledged per bucket (line) over acknowledged sends per
    second (bars, right axis), fault windows shaded, violation times dashed."""
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 3.5))
    shade_faults(ax, windows[windows["fault"].isin(LATENCY_FAULTS)], legend=fault_legend)
    rate = ax.twinx()
    rate.set_ylabel("acknowledged sends per second")
    ax.set_zorder(rate.get_zorder() + 1)  # the line above the bars, shading below both
    ax.patch.set_visible(False)
    if len(table):
        width_s = float(table["end_us"].iloc[0] - table["start_us"].iloc[0]) / 1e6
        rate.bar(
            table["start_us"] / 1e6,
            table["ok_per_s"],
            width=width_s,
            align="edge",
            color="#c7c7c7",
            alpha=0.6,
            label="acknowledged sends/s",
        )
        # The last bucket's value carried to its end, so the step covers every bucket.
        edges = np.append(table["start_us"].to_numpy(), table["end_us"].iloc[-1]) / 1e6
        fraction = np.append(table["availability"].to_numpy(), table["availability"].iloc[-1])
        ax.step(edges, fraction, where="post", color="#2ca02c", lw=1.5, label="fraction ok")
    _mark_times(ax, list(marks_us))
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel("sends acknowledged (fraction)")
    ax.set_title(title or "Produce availability over time")
    lines = ax.get_legend_handles_labels()[0] + rate.get_legend_handles_labels()[0]
    first = ax.get_legend()
    ax.legend(lines, [h.get_label() for h in lines], loc="lower right", fontsize=7)
    if first is not None:
        ax.add_artist(first)
    ax.grid(True, alpha=0.3)
    return ax


def _zoom(focus: Focus | None, acked: pd.DataFrame, read: pd.DataFrame) -> tuple | None:
    """(x limits in s, y limits) around the offset ``focus`` names, or None."""
    if focus is None or focus.offset is None:
        return None
    low, high = focus.offset - FOCUS_OFFSETS, focus.offset + FOCUS_OFFSETS
    times = [frame.loc[frame["offset"].between(low, high), "time_us"] for frame in (acked, read)]
    near = pd.concat(times)
    if focus.time_us is not None:
        near = pd.concat([near, pd.Series([focus.time_us])])
    if near.empty:
        return None
    start, end = near.min() / 1e6, near.max() / 1e6
    pad = max(0.05 * (end - start), 0.2)
    return (start - pad, end + pad), (low - 1, high + 1)


def plot_offset_timeline(
    ops: pd.DataFrame,
    events: pd.DataFrame,
    key: str,
    ax: Axes | None = None,
    *,
    focus: Focus | None = None,
    zoom: bool = True,
) -> Axes:
    """One partition's offsets against time: acknowledged sends, polled records (in red
    where an acknowledged send put another value there), leaders' high watermarks and
    truncations; the violation's time and offset dashed, zoomed around them."""
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 4.5))
    windows = stats.fault_windows(events)
    shade_faults(ax, windows[windows["fault"].isin(LATENCY_FAULTS)])
    acked = kafka_stats.acknowledged_offsets(ops, key)
    read = kafka_stats.polled_records(ops, key)
    hw = kafka_stats.high_watermarks(events, key)
    cut = kafka_stats.truncations(events, key)
    series = []
    for node, marks in hw.groupby("node", sort=True):
        series += ax.step(
            marks["time_us"] / 1e6,
            marks["hw"],
            where="post",
            lw=1,
            alpha=0.8,
            label=f"high watermark ({node} leading)",
        )
    points = (
        (read[~read["disagrees"]], {"s": 5, "color": "#7f7f7f", "label": "polled"}),
        (
            acked,
            {"s": 16, "facecolors": "none", "edgecolors": "#1f77b4", "label": "acknowledged send"},
        ),
        (read[read["disagrees"]], {"s": 22, "marker": "x", "color": "#d62728", "label": DISAGREES}),
    )
    for frame, style in points:
        if not frame.empty:
            series.append(ax.scatter(frame["time_us"] / 1e6, frame["offset"], **style))
    for row in cut.itertuples(index=False):
        ax.annotate(
            "",
            xy=(row.time_us / 1e6, row.offset_to),
            xytext=(row.time_us / 1e6, row.offset_from),
            arrowprops={"arrowstyle": "->", "color": "#9467bd", "lw": 1.5},
        )
    if not cut.empty:
        series.append(plt.Line2D([], [], color="#9467bd", lw=1.5, label="truncation"))
    if focus is not None:
        if focus.time_us is not None:
            ax.axvline(focus.time_us / 1e6, color="black", ls="--", lw=1)
        if focus.offset is not None:
            ax.axhline(focus.offset, color="black", ls=":", lw=1)
        series.append(plt.Line2D([], [], color="black", ls="--", label=f"{focus.check}"))
    limits = _zoom(focus, acked, read) if zoom else None
    if limits is not None:
        ax.set_xlim(*limits[0])
        ax.set_ylim(*limits[1])
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel(f"offset in {key}")
    ax.set_title(f"{key}: acknowledged and polled offsets" + (" (zoomed)" if limits else ""))
    first = ax.get_legend()
    ax.legend(handles=series, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    if first is not None:
        ax.add_artist(first)
    ax.grid(True, alpha=0.3)
    return ax


def plot_kafka_run(trace: LocalTrace, run_id: str, analysis: Analysis | None = None) -> plt.Figure:
    """Produce latency, produce availability and the node timeline of one kafka run, on a
    shared time axis, violation times marked."""
    events, ops = _run_frames(trace, run_id)
    windows = stats.fault_windows(events)
    nodes = events.loc[events["kind"] == "start", "node"].dropna().unique()
    marks = None
    if analysis is not None:
        marks = analysis.violations[analysis.violations["run_id"] == run_id]
    figure, (top, middle, bottom) = plt.subplots(
        3,
        1,
        figsize=(12, 6.5 + 0.35 * max(len(nodes), 3)),
        sharex=True,
        gridspec_kw={"height_ratios": [3, 2, 2]},
    )
    plot_latency_over_time(
        kafka_stats.sends(ops), windows, top, title=f"{run_id}: produce latency", what="send"
    )
    table = kafka_stats.send_availability(ops, end_us=stats.latest_us(ops))
    times = [] if marks is None else _first_times(marks)
    plot_send_availability(
        table, windows, middle, marks_us=times, title="produce availability", fault_legend=False
    )
    plot_node_timeline(
        stats.node_timeline(events), windows, bottom, nodes=nodes, marks=marks, title="nodes"
    )
    figure.tight_layout()
    return figure


def _run_frames(trace: LocalTrace, run_id: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One run's node events and its paired operations."""
    events = trace.events[trace.events["run_id"] == run_id]
    history = trace.history[trace.history["run_id"] == run_id]
    return events, stats.operations_for_run(history, events)


def _first_times(violations: pd.DataFrame) -> list[int]:
    """The first time each check fired (one line per check, not per message)."""
    timed = violations.dropna(subset=["time_virtual_us"])
    return sorted(int(t) for t in timed.groupby("check")["time_virtual_us"].min())


def availability_line(table: pd.DataFrame, ops: pd.DataFrame) -> str:
    """One sentence: sends by outcome and how many buckets fell below ``OUTAGE_BELOW``."""
    counts = kafka_stats.sends(ops)["status"].value_counts()
    outcomes = ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "fail", "info", "pending"))
    judged = table.dropna(subset=["availability"])
    width_ms = int((table["end_us"] - table["start_us"]).iloc[0] // 1000) if len(table) else 0
    low = judged[judged["availability"] < OUTAGE_BELOW]
    lowest = f"{judged['availability'].min():.0%}" if not judged.empty else "n/a"
    idle = int((table["sends"] == 0).sum())
    return (
        f"Sends: {outcomes}. Of {len(table)} buckets of {width_ms} ms, {len(low)} had under "
        f"{OUTAGE_BELOW:.0%} of their sends acknowledged (lowest {lowest}) and {idle} had "
        "no send finish."
    )


def kafka_run_section(trace: LocalTrace, run_id: str, analysis: Analysis, out: Path) -> list[str]:
    """The report's Markdown for one kafka run; writes its PNGs under ``out``."""
    name = f"run-{run_id}.png"
    save_figure(plot_kafka_run(trace, run_id, analysis), out / name)
    events, ops = _run_frames(trace, run_id)
    table = kafka_stats.send_availability(ops, end_us=stats.latest_us(ops))
    label = "violating" if run_id in analysis.violating_runs else "clean"
    lines = [f"## Run {run_id} ({label})", "", f"![{run_id}]({name})", ""]
    lines += [availability_line(table, ops), ""]
    violations = analysis.violations[analysis.violations["run_id"] == run_id]
    for focus in kafka_stats.focuses(violations, kafka_stats.partition_keys(ops)):
        figure, ax = plt.subplots(figsize=(11, 4.5))
        plot_offset_timeline(ops, events, focus.key, ax, focus=focus)
        png = f"offsets-{run_id}-{focus.check}.png"
        save_figure(figure, out / png)
        lines += [f"### Offsets of {focus.key} around `{focus.check}`", ""]
        lines += [f"> {focus.message}", "", f"![{focus.check} in {focus.key}]({png})", ""]
    return lines
