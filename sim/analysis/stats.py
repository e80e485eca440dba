"""Statistics of runs: fault windows, latency, leadership, availability, fault mix.

The per-run functions take pandas frames of one run's events (and operations) and are what
Spark applies per run; each run's latencies become a small mergeable histogram, which
``latency_table_spark`` (or ``latency_table_local``) merges over every run. Times are virtual
microseconds unless a name says otherwise.
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from sim.analysis.history import latest_us, pair_operations, records

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Faults that last. A partition (isolate, bridge and isolate-leader are partitions too) or
# a one-way cut ends with the ``restore`` of exactly the links it cut; ``heal`` ends every
# network fault. A crash (or a real process's kill) ends when the node starts again, a pause
# at resume. ``slow`` and ``enospc`` have no traced end, so their windows close at the next
# ``heal``/``heal-all`` (an upper bound). ``heal-all`` ends everything.
NODE_FAULTS = {"crash": "crash", "kill": "kill", "pause": "pause", "enospc": "enospc"}
NODE_FAULT_ENDS = {
    "start": ("crash", "kill"),
    "restart": ("crash", "kill"),
    "resume": ("pause",),
}
# Faults that are instants: they show in the fault mix but label no operation.
POINT_FAULTS = {"fsync-fail": "fsync", "reset": "reset", "refuse": "refuse"}
ROLE_PREFIX = "became-"
STATUSES = ("ok", "fail", "info", "pending", "orphan")

RUN_METRICS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("duration_us", pa.int64()),
        pa.field("has_leaders", pa.bool_()),
        pa.field("availability", pa.float64()),
        pa.field("leader_us", pa.int64()),
        pa.field("elections", pa.int64()),
        pa.field("elections_us", pa.list_(pa.int64())),
        pa.field("fault_kinds", pa.list_(pa.string())),
        pa.field("fault_windows", pa.int64()),
        *(pa.field(f"ops_{status}", pa.int64()) for status in STATUSES),
    ]
)


def _detail(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {}


def _events_in_order(events: pd.DataFrame) -> pd.DataFrame:
    return events.sort_values("seq", kind="stable")


def _run_end_us(events: pd.DataFrame, ops: pd.DataFrame | None = None) -> int:
    end = int(events["time_virtual_us"].max()) if not events.empty else 0
    return end if ops is None else max(end, latest_us(ops))


Window = tuple[str, str | None, str, int, int]  # fault, node, target, start_us, end_us


@dataclass(slots=True)
class _Cut:
    """An open network fault: the directed links it cut that were not cut already."""

    fault: str
    node: str | None
    target: str
    start_us: int
    links: frozenset[tuple[str, str]]


class _NetworkReplay:
    """Replays the simulated network's cut set, so each ``restore`` finds its fault.

    A ``restore`` event says only how many links it restored. The network cuts a link only
    if it is not cut already and restores exactly what a fault cut, so replaying the cut
    set gives each open fault its link count, and a restore ends the open fault with that
    count (the earliest, if two match; the earliest of all, if none does).
    """

    def __init__(self, rows: list[Window]) -> None:
        self.rows = rows
        self.cut: set[tuple[str, str]] = set()
        self.open: list[_Cut] = []
        self.stalls: list[tuple[int, str, str]] = []  # (end_us, src, dst), a min-heap

    def advance(self, at: int) -> None:
        while self.stalls and self.stalls[0][0] <= at:
            _, src, dst = heapq.heappop(self.stalls)
            self.cut.discard((src, dst))

    def cut_links(self, fault: str, node: str | None, target: str, at: int, links: set) -> None:
        added = frozenset(links - self.cut)
        self.cut |= added
        self.open.append(_Cut(fault, node, target, at, added))

    def restore(self, count: int, at: int) -> None:
        if not self.open:
            return
        cut = next((c for c in self.open if len(c.links) == count), self.open[0])
        self.open.remove(cut)
        self.cut -= cut.links
        self.rows.append((cut.fault, cut.node, cut.target, cut.start_us, at))

    def stall(self, src: str, dst: str, at: int, duration_us: int) -> None:
        self.cut.add((src, dst))
        heapq.heappush(self.stalls, (at + duration_us, src, dst))
        self.rows.append(("stall", None, f"{src}->{dst}", at, at + duration_us))

    def heal(self, at: int) -> None:
        for cut in self.open:
            self.rows.append((cut.fault, cut.node, cut.target, cut.start_us, at))
        self.open.clear()
        self.cut.clear()


def _partition_links(groups: list[list[str]]) -> set[tuple[str, str]]:
    links = set()
    for i, group in enumerate(groups):
        for other in groups[i + 1 :]:
            for a in group:
                for b in other:
                    links |= {(a, b), (b, a)}
    return links


def fault_windows(events: pd.DataFrame) -> pd.DataFrame:
    """Every fault of one run as [start_us, end_us) (instants have start == end)."""
    run_id = events["run_id"].iloc[0] if not events.empty else None
    end_of_run = _run_end_us(events)
    rows: list[Window] = []
    network = _NetworkReplay(rows)
    per_node: dict[tuple[str, str], tuple[str, int]] = {}

    def close_node(fault: str, node: str, at: int) -> None:
        opened = per_node.pop((fault, node), None)
        if opened is not None:
            rows.append((fault, node, opened[0], opened[1], at))

    def close_all(at: int) -> None:
        network.heal(at)
        for fault, name in [slot for slot in per_node if slot[0] in ("slow", "enospc")]:
            close_node(fault, name, at)

    columns = ("kind", "node", "time_virtual_us", "detail")
    for event in records(_events_in_order(events), columns):
        kind, node, at = event.kind, event.node, int(event.time_virtual_us)
        network.advance(at)
        detail = _detail(event.detail)
        if kind == "partition":
            groups = detail.get("groups", [])
            target = " | ".join(",".join(group) for group in groups)
            network.cut_links("partition", node, target, at, _partition_links(groups))
        elif kind == "oneway":
            src, dst = detail.get("src"), detail.get("dst")
            network.cut_links("oneway", node, f"{src}->{dst}", at, {(src, dst)})
        elif kind == "restore":
            network.restore(int(detail.get("links", 0)), at)
        elif kind == "stall":
            network.stall(detail["src"], detail["dst"], at, int(detail.get("duration_us", 0)))
        elif kind == "heal":
            close_all(at)
        elif kind == "slow" and node is not None:
            close_node("slow", node, at)
            per_node[("slow", node)] = (node, at)
        elif kind in NODE_FAULTS and node is not None:
            close_node(NODE_FAULTS[kind], node, at)
            per_node[(NODE_FAULTS[kind], node)] = (node, at)
        elif kind in NODE_FAULT_ENDS and node is not None:
            for fault in NODE_FAULT_ENDS[kind]:
                close_node(fault, node, at)
        elif kind == "clock-skew" and node is not None:
            close_node("skew", node, at)
            if detail.get("skew_ms"):
                per_node[("skew", node)] = (f"{node} {detail['skew_ms']:+d}ms", at)
        elif kind in POINT_FAULTS:
            target = node if node is not None else f"{detail.get('a')}-{detail.get('b')}"
            rows.append((POINT_FAULTS[kind], node, target, at, at))
        elif kind == "heal-all":
            close_all(at)
            for fault, name in list(per_node):
                close_node(fault, name, at)
    network.heal(end_of_run)
    for fault, name in list(per_node):
        close_node(fault, name, end_of_run)
    frame = pd.DataFrame(rows, columns=["fault", "node", "target", "start_us", "end_us"])
    frame.insert(0, "run_id", run_id)
    return frame.sort_values(["start_us", "fault"], kind="stable").reset_index(drop=True)


def label_operations(ops: pd.DataFrame, windows: pd.DataFrame) -> pd.Series:
    """For each operation, the sorted names of the faults under way when it was invoked."""
    spans = windows[windows["end_us"] > windows["start_us"]]
    if ops.empty or spans.empty:
        return pd.Series([[] for _ in range(len(ops))], index=ops.index, dtype=object)
    invoked = ops["invoke_us"].to_numpy(dtype=np.int64)
    kinds = sorted(set(spans["fault"]))
    active = np.zeros((len(invoked), len(kinds)), dtype=bool)
    for column, kind in enumerate(kinds):
        # Windows of one kind may overlap: a time is inside one while more have started
        # than ended (each [start, end) counted once), O(ops x log windows).
        of_kind = spans[spans["fault"] == kind]
        started = np.searchsorted(np.sort(of_kind["start_us"].to_numpy()), invoked, "right")
        ended = np.searchsorted(np.sort(of_kind["end_us"].to_numpy()), invoked, "right")
        active[:, column] = started > ended
    names = np.array(kinds, dtype=object)
    labels = [list(names[row]) for row in active]
    return pd.Series(labels, index=ops.index, dtype=object)


def operations_for_run(history: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """One run's operations, paired and labelled with the faults active at invoke time."""
    scenario = None
    if "scenario" in history and not history.empty:
        scenario = history["scenario"].iloc[0]
    ops = pair_operations(history.drop(columns=["scenario"], errors="ignore"))
    ops.insert(0, "scenario", scenario)
    ops["faults"] = label_operations(ops, fault_windows(events)) if not ops.empty else []
    return ops


def node_timeline(events: pd.DataFrame) -> pd.DataFrame:
    """Per node, intervals of ``down``/``paused`` and of Raft roles (``leader``, ...)."""
    end_of_run = _run_end_us(events)
    rows: list[tuple[str, str, str, int, int]] = []
    open_state: dict[tuple[str, str], tuple[str, int]] = {}

    def close(node: str, layer: str, at: int) -> None:
        opened = open_state.pop((node, layer), None)
        if opened is not None and at > opened[1]:
            rows.append((node, layer, opened[0], opened[1], at))

    def open_(node: str, layer: str, state: str, at: int) -> None:
        close(node, layer, at)
        open_state[(node, layer)] = (state, at)

    for event in records(_events_in_order(events), ("kind", "node", "time_virtual_us")):
        kind, node, at = event.kind, event.node, int(event.time_virtual_us)
        if node is None:
            continue
        if kind == "crash":
            open_(node, "process", "down", at)
            close(node, "role", at)
        elif kind in ("start", "restart", "resume"):
            close(node, "process", at)
        elif kind == "pause":
            open_(node, "process", "paused", at)
        elif kind.startswith(ROLE_PREFIX):
            open_(node, "role", kind[len(ROLE_PREFIX) :], at)
    for node, layer in list(open_state):
        close(node, layer, end_of_run)
    return pd.DataFrame(rows, columns=["node", "layer", "state", "start_us", "end_us"])


def leadership(events: pd.DataFrame) -> dict[str, Any]:
    """Time with a leader and election durations of one run (None if it has no leaders).

    A log has a leader while some live node leads it in the highest epoch seen so far (a
    deposed leader that has not heard of the new epoch does not count). An election is a
    stretch without a leader that ends when one is elected; the first starts at time 0.
    """
    end_of_run = _run_end_us(events)
    ordered = _events_in_order(events)
    roles = ordered[ordered["kind"].str.startswith(ROLE_PREFIX)]
    if roles.empty or end_of_run <= 0:
        return {"has_leaders": False, "leader_us": 0, "elections_us": [], "availability": None}
    logs = sorted({"" if log is None else str(log) for log in roles["log"]})
    leading: dict[str, dict[str, int]] = {log: {} for log in logs}  # log -> node -> epoch
    epoch_max: dict[str, int] = dict.fromkeys(logs, -1)
    leaderless_since: dict[str, int | None] = dict.fromkeys(logs, 0)
    leader_us: dict[str, int] = dict.fromkeys(logs, 0)
    led_since: dict[str, int | None] = dict.fromkeys(logs, None)
    elections: list[int] = []

    def has_leader(log: str) -> bool:
        return any(epoch == epoch_max[log] for epoch in leading[log].values())

    for event in records(ordered, ("kind", "node", "time_virtual_us", "log", "epoch")):
        kind, node, at = event.kind, event.node, int(event.time_virtual_us)
        touched = logs if kind == "crash" else ["" if event.log is None else str(event.log)]
        for log in touched:
            if log not in leading:
                continue
            if kind == "crash":
                leading[log].pop(node, None)
            elif kind.startswith(ROLE_PREFIX):
                epoch = -1 if event.epoch is None else int(event.epoch)
                epoch_max[log] = max(epoch_max[log], epoch)
                if kind == "became-leader":
                    leading[log][node] = epoch
                else:
                    leading[log].pop(node, None)
            else:
                continue
            now = has_leader(log)
            if now and led_since[log] is None:
                led_since[log] = at
                since = leaderless_since[log]
                if since is not None:
                    elections.append(at - since)
                leaderless_since[log] = None
            elif not now and led_since[log] is not None:
                leader_us[log] += at - led_since[log]
                led_since[log] = None
                leaderless_since[log] = at
    for log in logs:
        if led_since[log] is not None:
            leader_us[log] += end_of_run - led_since[log]
    availability = sum(leader_us.values()) / (end_of_run * len(logs))
    return {
        "has_leaders": True,
        "leader_us": int(sum(leader_us.values()) / len(logs)),
        "elections_us": elections,
        "availability": availability,
    }


def run_metrics(events: pd.DataFrame, ops: pd.DataFrame) -> dict[str, Any]:
    """The figures of one run (``RUN_METRICS_SCHEMA``) from its events and operations."""
    windows = fault_windows(events)
    lead = leadership(events)
    counts = ops["status"].value_counts() if not ops.empty else pd.Series(dtype="int64")
    return {
        "run_id": events["run_id"].iloc[0] if not events.empty else ops["run_id"].iloc[0],
        "duration_us": _run_end_us(events, ops),
        "has_leaders": lead["has_leaders"],
        "availability": lead["availability"],
        "leader_us": lead["leader_us"],
        "elections": len(lead["elections_us"]),
        "elections_us": lead["elections_us"],
        "fault_kinds": sorted(set(windows["fault"])),
        "fault_windows": len(windows),
        **{f"ops_{status}": int(counts.get(status, 0)) for status in STATUSES},
    }


# ---- Spark aggregations over every run ---------------------------------------------------

PERCENTILES = (0.5, 0.9, 0.99)
# Latency histograms use buckets growing by 5%: any percentile read from the merged histogram
# is within 2.5% of the exact one, and per-run histograms merge by adding counts, so Spark
# never has to bring one run's operations next to another's.
LATENCY_BUCKET_GROWTH = 1.05
_LOG_GROWTH = math.log(LATENCY_BUCKET_GROWTH)
LATENCY_SCHEMA = "array<struct<f:string,fault:string,max_us:long,buckets:map<string,long>>>"


def latency_bucket(latency_us: np.ndarray) -> np.ndarray:
    """The histogram bucket of each latency; bucket b holds [growth**b, growth**(b+1)) µs."""
    return np.floor(np.log(np.maximum(latency_us, 1.0)) / _LOG_GROWTH).astype(np.int64)


def bucket_value_us(bucket: int) -> float:
    """The value a bucket stands for: the geometric middle of its bounds."""
    return float(LATENCY_BUCKET_GROWTH ** (bucket + 0.5))


def latency_histograms(ops: pd.DataFrame) -> list[dict[str, Any]]:
    """One run's acknowledged latencies per (function, fault) as sparse bucket counts.

    An operation invoked during several faults counts under each; ``none`` is the
    fault-free baseline and ``all`` every acknowledged operation.
    """
    acked = ops[(ops["status"] == "ok") & ops["latency_us"].notna()]
    if acked.empty:
        return []
    labels = [list(faults) if len(faults) else ["none"] for faults in acked["faults"]]
    frame = pd.DataFrame(
        {
            "f": acked["f"].to_numpy(),
            "fault": labels,
            "latency_us": acked["latency_us"].to_numpy(dtype="float64"),
        }
    ).explode("fault")
    everything = pd.DataFrame(
        {
            "f": acked["f"].to_numpy(),
            "fault": "all",
            "latency_us": acked["latency_us"].to_numpy(dtype="float64"),
        }
    )
    frame = pd.concat([everything, frame], ignore_index=True)
    frame["bucket"] = latency_bucket(frame["latency_us"].to_numpy(dtype="float64"))
    histograms = []
    for (f, fault), group in frame.groupby(["f", "fault"], sort=True):
        counts = group["bucket"].value_counts()
        histograms.append(
            {
                "f": f,
                "fault": fault,
                "max_us": int(group["latency_us"].max()),
                "buckets": {str(b): int(n) for b, n in counts.items()},  # JSON keys
            }
        )
    return histograms


def latency_table(buckets: pd.DataFrame, maxima: pd.DataFrame) -> pd.DataFrame:
    """Percentiles (ms) per function and fault from merged bucket counts.

    ``buckets``: columns f, fault, bucket, count (summed over runs); ``maxima``: f, fault,
    max_us. The result has one row per (f, fault): ops, p50/p90/p99 and max in ms.
    """
    rows = []
    for (f, fault), group in buckets.groupby(["f", "fault"], sort=True):
        ordered = group.sort_values("bucket")
        cumulative = ordered["count"].cumsum().to_numpy()
        total = int(cumulative[-1])
        row: dict[str, Any] = {"f": f, "fault": fault, "ops": total}
        for q in PERCENTILES:
            position = int(np.searchsorted(cumulative, q * total, side="left"))
            row[f"p{round(q * 100)}_ms"] = bucket_value_us(ordered["bucket"].iloc[position]) / 1e3
        rows.append(row)
    table = pd.DataFrame(rows, columns=["f", "fault", "ops", *_percentile_columns()])
    table = table.merge(maxima, on=["f", "fault"], how="left")
    table["max_ms"] = table.pop("max_us") / 1000.0
    order = {"all": 0, "none": 1}
    table["_order"] = [order.get(fault, 2) for fault in table["fault"]]
    return table.sort_values(["f", "_order", "fault"]).drop(columns="_order").reset_index(drop=True)


def _percentile_columns() -> list[str]:
    return [f"p{round(q * 100)}_ms" for q in PERCENTILES]


def latency_table_spark(run_results: DataFrame) -> pd.DataFrame:
    """Spark: merge every run's ``latency_json`` histograms, then ``latency_table``."""
    from pyspark.sql import functions as F

    parsed = run_results.select(
        F.explode(F.from_json("latency_json", LATENCY_SCHEMA)).alias("h")
    ).select("h.f", "h.fault", "h.max_us", "h.buckets")
    maxima = parsed.groupBy("f", "fault").agg(F.max("max_us").alias("max_us")).toPandas()
    buckets = (
        parsed.select("f", "fault", F.explode("buckets").alias("bucket", "count"))
        .withColumn("bucket", F.col("bucket").cast("int"))
        .groupBy("f", "fault", "bucket")
        .agg(F.sum("count").alias("count"))
        .toPandas()
    )
    return latency_table(buckets, maxima)


def latency_table_local(histograms: list[list[dict[str, Any]]]) -> pd.DataFrame:
    """``latency_table`` from the per-run histograms of ``latency_histograms``, in pandas."""
    counts: dict[tuple[str, str, int], int] = {}
    maxima: dict[tuple[str, str], int] = {}
    for run in histograms:
        for h in run:
            slot = (h["f"], h["fault"])
            maxima[slot] = max(maxima.get(slot, 0), h["max_us"])
            for bucket, count in h["buckets"].items():
                key = (*slot, int(bucket))
                counts[key] = counts.get(key, 0) + count
    buckets = pd.DataFrame(
        [(f, fault, b, n) for (f, fault, b), n in counts.items()],
        columns=["f", "fault", "bucket", "count"],
    )
    maximum = pd.DataFrame(
        [(f, fault, m) for (f, fault), m in maxima.items()], columns=["f", "fault", "max_us"]
    )
    return latency_table(buckets, maximum)


def fault_mix(verdicts: pd.DataFrame) -> pd.DataFrame:
    """Violation rate by the faults a run actually saw, and by its configured mix and bug."""
    rows = []
    kinds = sorted({kind for kinds in verdicts["fault_kinds"] for kind in kinds})
    for kind in kinds:
        has = verdicts["fault_kinds"].map(lambda kinds, kind=kind: kind in kinds)
        rows.append(_mix_row("fault seen", kind, verdicts[has]))
        rows.append(_mix_row("fault not seen", kind, verdicts[~has]))
    configured = verdicts.assign(
        mix=[",".join(faults) or "none" for faults in verdicts["faults"]],
        bug_name=verdicts["bug"].fillna("none"),
    )
    for (mix, bug), group in configured.groupby(["mix", "bug_name"]):
        rows.append(_mix_row("configured", f"faults={mix} bug={bug}", group))
    return pd.DataFrame(rows, columns=["grouping", "value", "runs", "violating", "rate"])


def _mix_row(grouping: str, value: str, runs: pd.DataFrame) -> tuple[str, str, int, int, float]:
    violating = int((runs["verdict"] == "violation").sum())
    rate = violating / len(runs) if len(runs) else float("nan")
    return (grouping, value, len(runs), violating, rate)
