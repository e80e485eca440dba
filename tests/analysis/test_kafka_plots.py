"""The Kafka scenario's figures over time (sim/analysis/kafka_stats.py) and their plots, on a
small history written through the real trace writer."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from sim.analysis import kafka_stats, stats
from sim.analysis.kafka_report import DISAGREES, plot_offset_timeline, plot_send_availability

from .test_checks import write_run

KEY = "jepsen-0"


def op(t_ms: float, process: str, kind: str, f: str = "send", **fields: Any) -> dict[str, Any]:
    record = {"t_us": int(t_ms * 1000), "kind": "op", "process": process, "type": kind, "f": f}
    return {**record, "key": KEY, **fields}


def send(start_ms: float, end_ms: float | None, status: str, value: int, **out: Any) -> list:
    process = f"p{value}"
    invoke = op(start_ms, process, "invoke", value=value)
    return [invoke] if end_ms is None else [invoke, op(end_ms, process, status, **out)]


def kafka_history() -> list[dict[str, Any]]:
    """Sends in 500 ms buckets: [0] 2 ok + 1 fail, [1] 1 ok + 1 info, [2] one never
    answered, [3] nothing finishes, [4] 2 ok, the second acknowledged at offset 1 again (as
    a leader that lost offset 1 would); one poll reads offset 1 holding 7 and offset 2
    holding 99, though the sends acknowledged there include values 8 and 4."""
    records = [
        *send(10, 100, "ok", 1, offset=0, isr=[1, 2, 3]),
        *send(20, 150, "ok", 7, offset=1, isr=[1, 2, 3]),
        *send(300, 400, "fail", 2, error="NOT_LEADER_OR_FOLLOWER"),
        *send(600, 700, "info", 3, error="REQUEST_TIMED_OUT"),
        *send(800, 900, "ok", 4, offset=2, isr=[1, 2, 3]),
        *send(1100, None, "", 5),
        *send(2100, 2200, "ok", 6, offset=3, isr=[1, 2, 3]),
        *send(2120, 2250, "ok", 8, offset=1, isr=[1]),
        op(2300, "c0", "invoke", "poll", value=0),
        op(2310, "c0", "ok", "poll", value=0, values=[0, 1, 1, 7, 2, 99], offset=4, isr=[1]),
    ]
    return sorted(records, key=lambda r: r["t_us"])


@pytest.fixture(scope="module")
def kafka_ops(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, pd.DataFrame]:
    trace = write_run(tmp_path_factory.mktemp("kafka"), kafka_history(), scenario="kafka")
    return stats.operations_for_run(trace.history, trace.events), trace.events


def test_availability_is_the_fraction_of_finished_sends_acknowledged_per_bucket(
    kafka_ops: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    table = kafka_stats.send_availability(kafka_ops[0], bucket_us=500_000)
    assert table["start_us"].tolist() == [0, 500_000, 1_000_000, 1_500_000, 2_000_000]
    assert table[["ok", "fail", "info", "pending"]].values.tolist() == [
        [2, 1, 0, 0],
        [1, 0, 1, 0],
        [0, 0, 0, 1],
        [0, 0, 0, 0],
        [2, 0, 0, 0],
    ]
    fraction = table["availability"].tolist()
    assert fraction[:3] == [pytest.approx(2 / 3), 0.5, 0.0]
    assert math.isnan(fraction[3]) and fraction[4] == 1.0
    assert table["ok_per_s"].tolist() == [4.0, 2.0, 0.0, 0.0, 4.0]
    longer = kafka_stats.send_availability(kafka_ops[0], bucket_us=1_000_000, end_us=4_100_000)
    assert len(longer) == 5 and longer["sends"].tolist() == [5, 1, 2, 0, 0]


def test_bucket_width_must_be_positive(kafka_ops: tuple[pd.DataFrame, pd.DataFrame]) -> None:
    with pytest.raises(ValueError, match="bucket_us must be positive"):
        kafka_stats.send_availability(kafka_ops[0], bucket_us=0)


def test_polled_records_disagreeing_with_an_acknowledgement_are_flagged(
    kafka_ops: tuple[pd.DataFrame, pd.DataFrame],
) -> None:
    acked = kafka_stats.acknowledged_offsets(kafka_ops[0], KEY)
    assert acked[["offset", "value"]].values.tolist() == [[0, 1], [1, 7], [2, 4], [3, 6], [1, 8]]
    read = kafka_stats.polled_records(kafka_ops[0], KEY)
    assert read[["offset", "value", "disagrees"]].values.tolist() == [
        [0, 1, False],
        [1, 7, True],
        [2, 99, True],
    ]
    assert read["time_us"].tolist() == [2_310_000] * 3


def test_violation_focus_names_the_partition_offset_and_time() -> None:
    keys = ["jepsen-1", "jepsen-10"]

    def focus(check: str, message: str) -> kafka_stats.Focus | None:
        row = {"check": check, "message": message, "time_virtual_us": 5_000}
        return kafka_stats.violation_focus(row, keys)

    found = focus("inconsistent-offsets", "offset 170 of jepsen-10 was read holding 1 and 2")
    assert (found.key, found.offset, found.time_us) == ("jepsen-10", 170, 5_000)
    found = focus("high-watermark", "n4, leader of jepsen-1 in epoch 2, moved back from 12 to 9")
    assert (found.key, found.offset) == ("jepsen-1", 9)
    found = focus("liveness", "liveness: jepsen-1 took no acks=all produce after the heal")
    assert (found.key, found.offset) == ("jepsen-1", None)
    assert focus("leader-from-isr", "jepsen-1 at offset 15 elected 6 from outside") is None
    assert focus("unseen", "offset 3 of jepsen-2 was never read") is None


def test_plots_label_their_axes_and_zoom_on_the_violation(
    kafka_ops: tuple[pd.DataFrame, pd.DataFrame], tmp_path: Path
) -> None:
    ops, events = kafka_ops
    windows = stats.fault_windows(events)
    _, (top, bottom) = plt.subplots(2, 1)
    table = kafka_stats.send_availability(ops)
    plot_send_availability(table, windows, top, marks_us=[1_200_000])
    assert top.get_xlabel() == "virtual time (s)"
    assert "fraction" in top.get_ylabel()
    focus = kafka_stats.Focus("inconsistent-offsets", KEY, 2, 2_310_000, "offset 2 of jepsen-0")
    plot_offset_timeline(ops, events, KEY, bottom, focus=focus)
    assert bottom.get_ylabel() == f"offset in {KEY}"
    low, high = bottom.get_ylim()
    assert low == 2 - 26 and high == 2 + 26
    labels = [text.get_text() for text in bottom.get_legend().get_texts()]
    assert DISAGREES in labels and "inconsistent-offsets" in labels
    plt.close("all")
