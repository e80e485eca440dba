#!/usr/bin/env python3
"""Draw docs/grafana-dashboard.json as a PNG from a real run (docs/dashboard.png).

    bash scripts/setup-venv.sh test,docs          # confluent-kafka, matplotlib (pinned)
    .venv/bin/python scripts/render-dashboard.py  # about three minutes

By default it starts a small real cluster (three combined broker+controller kraft-server
processes on 127.0.0.1-3, each serving /metrics on its metrics.listener) and a real
Prometheus (Debian's ``prometheus`` package, as tests/kraft/test_prometheus.py uses) scraping
them every second; creates two topics (replication factor 3), runs a produce/consume load
for ``--warmup`` (60, so the dashboard's ``[1m]`` rates are steady) plus ``--seconds`` (60,
the window drawn) and, unless ``--no-fault``, stops one node with a controlled shutdown for
the middle fifth of the window and starts it again, so the replication and quorum panels
have something to show. With ``--prometheus URL`` it starts nothing and draws the last
``--seconds`` of that Prometheus instead.

Every panel is the dashboard's own: the grid position, title, unit, thresholds and each
target's PromQL expression and legend format are read from the JSON, the expressions are
evaluated by Prometheus (query_range over the run, an instant query for tables), and the
template variables take the values ``--instance`` (all), ``--topic`` and ``--partition``
give. Nothing here is part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NODES = (1, 2, 3)
TOPICS = {"orders": 6, "clicks": 3}  # name -> partitions; replication factor 3
GROUP = "dashboard-readers"
RUN_DEADLINE_S = 90.0  # for the cluster and Prometheus to come up

# Grafana's dark theme, near enough.
BACKGROUND, PANEL, TEXT, GRID = "#111217", "#181b1f", "#ccccdc", "#2c3235"
PALETTE = ["#73bf69", "#f2cc0c", "#8ab8ff", "#ff780a", "#f2495c", "#5794f2", "#b877d9", "#fade2a"]
COLORS = {"green": "#73bf69", "red": "#f2495c", "yellow": "#fade2a", "orange": "#ff9830"}


# ---------------------------------------------------------------- the cluster and its load


def wait_for(condition: Any, what: str, deadline_s: float = RUN_DEADLINE_S) -> Any:
    deadline = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"render-dashboard: {what}: not within {deadline_s:g}s")
        time.sleep(0.2)


def free_port(host: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_open(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def node_configs(root: Path) -> tuple[dict[int, dict[str, str]], dict[int, tuple[str, int]]]:
    """Three combined nodes on 127.0.0.N with free ports; (their properties, Kafka ports)."""
    ports = {n: (f"127.0.0.{n}", free_port(f"127.0.0.{n}")) for n in NODES}
    controller = {n: free_port(f"127.0.0.{n}") for n in NODES}
    voters = ",".join(f"{n}@127.0.0.{n}:{controller[n]}" for n in NODES)
    nodes = {}
    for n in NODES:
        host, port = ports[n]
        nodes[n] = {
            "process.roles": "broker,controller",
            "node.id": str(n),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller[n]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(root / f"data{n}"),
            "default.replication.factor": "3",
            "offsets.topic.replication.factor": "3",
            "replica.lag.time.max.ms": "3000",
            "metrics.listener": f"http://{host}:{free_port(host)}",
        }
    return nodes, ports


@contextmanager
def cluster_and_prometheus(root: Path) -> Iterator[tuple[Any, dict, str]]:
    """(the node processes, their Kafka ports, Prometheus's URL), all stopped on exit."""
    from jepsen.processes import Processes

    prometheus_binary = shutil.which("prometheus")
    if prometheus_binary is None:
        raise SystemExit(
            "render-dashboard: no prometheus on PATH (apt-get install prometheus), "
            "or give --prometheus URL"
        )
    nodes, ports = node_configs(root)
    targets = [props["metrics.listener"].removeprefix("http://") for props in nodes.values()]
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": "kraft", "static_configs": [{"targets": targets}]}],
    }
    (root / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    web = f"127.0.0.1:{free_port('127.0.0.1')}"
    procs = Processes(root, nodes)
    prometheus = None
    try:
        for node in nodes:
            procs.start(node)
        with open(root / "prometheus.log", "w") as log:
            prometheus = subprocess.Popen(
                [
                    prometheus_binary,
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={root / 'tsdb'}",
                    f"--web.listen-address={web}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        base = f"http://{web}"
        for node in NODES:
            wait_for(lambda n=node: port_open(*ports[n]), f"node {node} serves")
        wait_for(lambda: scalar(base, 'count(up{job="kraft"} == 1)') == 3, "Prometheus scrapes")
        yield procs, ports, base
    finally:
        if prometheus is not None:
            prometheus.send_signal(signal.SIGTERM)
            prometheus.wait(30)
        procs.cleanup()


def run_load(procs: Any, ports: dict, seconds: float, fault: tuple[float, float] | None) -> float:
    """Produce to both topics at a steady rate and consume them in one group, for
    ``seconds``; node 3 is down (controlled shutdown) between the two times of ``fault``
    (seconds into the load). The wall-clock time the load started."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    servers = ",".join(f"{host}:{port}" for host, port in ports.values())
    admin = AdminClient({"bootstrap.servers": servers})
    new = [NewTopic(name, partitions, 3) for name, partitions in TOPICS.items()]
    for future in admin.create_topics(new).values():
        future.result(60)
    stop = threading.Event()
    consumed = [0]

    def consume() -> None:
        consumer = Consumer(
            {"bootstrap.servers": servers, "group.id": GROUP, "auto.offset.reset": "earliest"}
        )
        consumer.subscribe(list(TOPICS))
        while not stop.is_set():
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                consumed[0] += 1
        consumer.close()

    reader = threading.Thread(target=consume)
    reader.start()
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 5})
    started, wall_started = time.monotonic(), time.time()
    sent = 0
    down = False
    try:
        while (elapsed := time.monotonic() - started) < seconds:
            if fault and not down and fault[0] <= elapsed < fault[1]:
                procs.signal(3, signal.SIGTERM)
                down = True
            if fault and down and elapsed >= fault[1] and not procs.alive(3):
                procs.start(3)
                fault = None
            # About 400 records a second, one topic busier than the other.
            for i in range(20):
                topic = "orders" if i % 3 else "clicks"
                producer.produce(topic, key=str(sent).encode(), value=b"x" * (100 + sent % 400))
                sent += 1
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(30)
    finally:
        stop.set()
        reader.join(30)
    print(f"produced {sent} records, consumed {consumed[0]}", file=sys.stderr)
    return wall_started


# ---------------------------------------------------------------- Prometheus's answers


def api(base: str, path: str, params: dict[str, str]) -> list[dict]:
    url = f"{base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
    except OSError:
        return []
    if body.get("status") != "success":
        raise SystemExit(f"render-dashboard: Prometheus refused {params.get('query')}: {body}")
    return list(body["data"]["result"])


def scalar(base: str, promql: str) -> float | None:
    found = api(base, "query", {"query": promql})
    return float(found[0]["value"][1]) if found else None


def substitute(text: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: variables.get(m.group(1), m.group(0)), text)


def legend(fmt: str, labels: dict[str, str], expr: str) -> str:
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()
    shown = {k: v for k, v in labels.items() if k not in ("__name__", "job")}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or expr


def series(
    base: str, panel: dict, variables: dict[str, str], start: float, end: float, step: float
):
    """(legend, times relative to start, values) for each series of each target."""
    out = []
    for target in panel.get("targets", ()):
        expr = substitute(target["expr"], variables)
        params = {"query": expr, "start": f"{start}", "end": f"{end}", "step": f"{step}"}
        for item in api(base, "query_range", params):
            times: list[float] = []
            values: list[float] = []
            for stamp, value in item["values"]:
                if times and float(stamp) - start - times[-1] > 1.5 * step:
                    times.append(times[-1] + step)  # a gap (a node down): drawn as one,
                    values.append(math.nan)  # as Grafana leaves missing points unjoined
                times.append(float(stamp) - start)
                values.append(float(value))
            out.append(
                (legend(target.get("legendFormat", ""), item["metric"], expr), times, values)
            )
    return out


# ---------------------------------------------------------------- drawing


def human(value: float, unit: str | None) -> str:
    if value is None or math.isnan(value):
        return "no data"
    if unit == "percentunit":
        return f"{value * 100:.0f}%" if abs(value) >= 0.1 else f"{value * 100:.1f}%"
    suffix = {"Bps": "/s", "ops": "/s", "reqps": " req/s", "ms": " ms"}.get(unit or "", "")
    if unit in ("bytes", "Bps"):
        for prefix in ("B", "KiB", "MiB", "GiB"):
            if abs(value) < 1024 or prefix == "GiB":
                return (
                    f"{value:.0f} {prefix}{suffix}"
                    if prefix == "B"
                    else f"{value:.1f} {prefix}{suffix}"
                )
            value /= 1024
    if abs(value) >= 10_000:
        return f"{value / 1000:.0f}k{suffix}"
    if value == int(value):
        return f"{int(value)}{suffix}"
    return f"{value:.2f}{suffix}"


def threshold_color(panel: dict, value: float) -> str:
    steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps")
    if not steps:
        return PALETTE[0]
    color = steps[0]["color"]
    for step in steps[1:]:
        if step["value"] is not None and value >= step["value"]:
            color = step["color"]
    return COLORS.get(color, color)


def draw(
    dashboard: dict,
    data: dict[int, Any],
    variables: dict[str, str],
    out: Path,
    note: str,
    window_s: float,
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit_height = 0.3  # inches per grid unit (Grafana's is 30 px)
    width, height = 20.0, rows * unit_height + 0.8
    figure = plt.figure(figsize=(width, height), facecolor=BACKGROUND)
    figure.text(
        0.01,
        1 - 0.25 / height,
        dashboard["title"],
        color=TEXT,
        fontsize=16,
        va="top",
        weight="bold",
    )
    figure.text(0.99, 1 - 0.25 / height, note, color="#8e8e8e", fontsize=9, va="top", ha="right")
    top = 0.7  # inches reserved above the grid

    def box(grid: dict) -> list[float]:
        pad = 0.06
        left = grid["x"] / 24 + pad / width
        right = (grid["x"] + grid["w"]) / 24 - pad / width
        upper = 1 - (top + grid["y"] * unit_height) / height
        lower = 1 - (top + (grid["y"] + grid["h"]) * unit_height) / height
        return [left, lower + pad / height, right - left, upper - lower - 2 * pad / height]

    for panel in panels:
        grid, kind = panel["gridPos"], panel["type"]
        title = substitute(panel.get("title", ""), variables)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if kind == "row":
            left, lower, w, h = box(grid)
            figure.text(
                left, lower + h / 2, title, color=TEXT, fontsize=12, weight="bold", va="center"
            )
            continue
        left, lower, w, h = box(grid)
        title_band = 0.34 / height
        if kind == "timeseries":  # room for the tick labels, as Grafana leaves
            margin_x, margin_y = 0.72 / width, 0.26 / height
            place = [left + margin_x, lower + margin_y, w - margin_x - 0.1 / width]
            ax = figure.add_axes([*place, h - margin_y - title_band])
        else:
            ax = figure.add_axes([left, lower, w, h - title_band])
        figure.text(
            left + 0.004,
            lower + h * 0.985,
            title,
            color=TEXT,
            fontsize=9.5,
            va="top",
            weight="bold",
        )
        ax.set_facecolor(PANEL)
        figure.patches.append(
            matplotlib.patches.Rectangle(
                (left, lower),
                w,
                h,
                transform=figure.transFigure,
                facecolor=PANEL,
                edgecolor=GRID,
                linewidth=0.8,
                zorder=-1,
            )
        )
        for spine in ax.spines.values():
            spine.set_visible(False)
        found = data.get(panel["id"], [])
        if kind == "stat":
            ax.set_axis_off()
            values = [
                (name, next((v for v in reversed(vs) if not math.isnan(v)), float("nan")))
                for name, _, vs in found
            ]
            if not values:
                ax.text(
                    0.5,
                    0.45,
                    "no data",
                    color="#8e8e8e",
                    fontsize=16,
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
            for i, (name, value) in enumerate(values):
                x = (i + 0.5) / len(values)
                ax.text(
                    x,
                    0.45,
                    human(value, unit),
                    color=threshold_color(panel, value),
                    fontsize=30 if len(values) == 1 else 24,
                    ha="center",
                    va="center",
                    weight="bold",
                    transform=ax.transAxes,
                )
                if name and len(values) > 1:
                    ax.text(
                        x, 0.05, name, color=TEXT, fontsize=9, ha="center", transform=ax.transAxes
                    )
        elif kind == "table":
            ax.set_axis_off()
            rows_data = found
            if not rows_data:
                ax.text(0.5, 0.5, "no data", color="#8e8e8e", ha="center", transform=ax.transAxes)
                continue
            keys = sorted({k for labels in rows_data for k in labels} - {"__name__", "job"})
            cells = [[labels.get(k, "") for k in keys] for labels in rows_data]
            table = ax.table(cellText=cells, colLabels=keys, loc="upper center", cellLoc="left")
            table.auto_set_font_size(False)
            table.set_fontsize(8.5)
            for cell in table.get_celld().values():
                cell.set_facecolor(PANEL)
                cell.set_edgecolor(GRID)
                cell.get_text().set_color(TEXT)
        else:
            ax.tick_params(colors="#8e8e8e", labelsize=7.5)
            ax.grid(color=GRID, linewidth=0.6)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda s, _: f"{s:.0f}s"))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, u=unit: human(v, u)))
            ax.yaxis.set_major_locator(MaxNLocator(4))
            ax.set_xlim(0, window_s)  # one time axis for every panel, as Grafana's
            if not found:
                ax.set_yticks([])
                ax.text(
                    0.5,
                    0.5,
                    "no data",
                    color="#8e8e8e",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
            for i, (name, times, values) in enumerate(found[:8]):
                ax.plot(times, values, color=PALETTE[i % len(PALETTE)], linewidth=1.3, label=name)
            if found:
                ax.set_ylim(
                    bottom=min(0, *(v for _, _, vs in found for v in vs if not math.isnan(v)))
                )
                ax.legend(
                    loc="upper left",
                    fontsize=6.5,
                    frameon=True,
                    facecolor=PANEL,
                    edgecolor="none",
                    framealpha=0.75,
                    labelcolor=TEXT,
                    ncol=2 if len(found) > 3 else 1,
                    handlelength=1.2,
                )
    figure.savefig(out, facecolor=BACKGROUND, dpi=90)
    plt.close(figure)
    shrink(out)


def shrink(path: Path) -> None:
    """Few colours are used: a palette PNG is a fraction of the size."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    small.save(path, optimize=True)


# ---------------------------------------------------------------- main


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dashboard", type=Path, default=ROOT / "docs" / "grafana-dashboard.json")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard.png")
    parser.add_argument(
        "--prometheus", metavar="URL", help="draw from this Prometheus; start nothing"
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="length of the load / window")
    parser.add_argument(
        "--warmup", type=float, default=60.0, help="load before the drawn window, seconds"
    )
    parser.add_argument("--step", type=float, default=2.0, help="query_range step, seconds")
    parser.add_argument("--no-fault", action="store_true", help="do not stop a node mid-run")
    parser.add_argument("--instance", default=".*", help="$instance (a regex; default all)")
    parser.add_argument("--topic", default="orders", help="$topic")
    parser.add_argument("--partition", default="0", help="$partition")
    args = parser.parse_args()
    dashboard = json.loads(args.dashboard.read_text())
    variables = {"instance": args.instance, "topic": args.topic, "partition": args.partition}
    titles = {**variables, "instance": "(all)" if args.instance == ".*" else args.instance}

    def collect(base: str, start: float, end: float) -> dict[int, Any]:
        data: dict[int, Any] = {}
        for panel in dashboard["panels"]:
            if panel["type"] == "table":
                data[panel["id"]] = [
                    item["metric"]
                    for target in panel.get("targets", ())
                    for item in api(
                        base,
                        "query",
                        {"query": substitute(target["expr"], variables), "time": f"{end}"},
                    )
                ]
            elif panel["type"] != "row":
                data[panel["id"]] = series(base, panel, variables, start, end, args.step)
        return data

    if args.prometheus:
        end = time.time()
        start = end - args.seconds
        data = collect(args.prometheus.rstrip("/"), start, end)
        note = f"from {args.prometheus}, last {args.seconds:g}s"
    else:
        scratch = tempfile.TemporaryDirectory(prefix="render-dashboard-")
        with scratch, cluster_and_prometheus(Path(scratch.name)) as (procs, ports, base):
            # The [1m] rates need a minute of history before they show the steady rate.
            window = (args.warmup + 0.4 * args.seconds, args.warmup + 0.6 * args.seconds)
            total = args.warmup + args.seconds
            began = run_load(procs, ports, total, None if args.no_fault else window)
            start = began + args.warmup
            end = time.time()
            wait_for(  # the scrapes of the run's last second are in
                lambda: (scalar(base, 'min(timestamp(up{job="kraft"}))') or 0) > end,
                "the last scrapes",
            )
            data = collect(base, start, end)
        fault = "" if args.no_fault else ", node 3 stopped for its middle fifth"
        note = (
            f"a real run: 3 combined kraft-server nodes under produce/consume load, the "
            f"{args.seconds:g}s after a {args.warmup:g}s warm-up{fault}; "
            "scripts/render-dashboard.py"
        )
    draw(dashboard, data, titles, args.out, note, end - start)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
