"""kraft-jepsen's transactional lanes (``--txn-lanes``): librdkafka's transactional
producers and read_committed consumers on real processes, judged by the simulator's
transactional checks (sim/analysis/txn.py) through the trace; a planted transactional bug
in the real servers is flagged; the anomalies table names both systems.

Needs root (network namespaces, iptables), as kraft-jepsen itself does."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from jepsen.cli import main
from jepsen.java_lane import JAVA_SOURCE
from jepsen.run import RunOptions, run
from jepsen.table import Column, render
from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas
from tests.jepsen.leftovers import leftovers, processes_running
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)


def _txn_ops(history: pd.DataFrame) -> pd.DataFrame:
    return history[history["f"].isin(["txn-send", "txn-end", "rc-poll"])]


@pytest.mark.usefixtures("kafka_tools")
def test_a_short_fault_run_with_transactional_lanes_is_judged_clean(tmp_path: Path) -> None:
    options = RunOptions(
        trace_dir=tmp_path / "traces",
        controllers=1,
        brokers=3,
        time_limit_s=20.0,
        nemeses=("partition", "kill"),
        seed=2,
        admin_lanes=0,
        txn_lanes=2,
        java_txn_lanes=1,
    )
    report = run(options)
    assert leftovers(report.tag, report.work_dir) == []
    assert not processes_running(str(JAVA_SOURCE))  # the transactional lane's JVMs are gone
    trace = read_trace_pandas(str(options.trace_dir))
    ok = _txn_ops(trace.history)
    ok = ok[ok["type"] == "ok"]
    ends = ok[ok["f"] == "txn-end"]
    assert {0, 1} <= set(ends["value"]), "both commits and aborts were acknowledged"
    assert (ok["f"] == "txn-send").sum() > 0
    polls = ok[ok["f"] == "rc-poll"]
    read = polls[polls["values"].map(lambda values: values is not None and len(values) > 0)]
    # librdkafka's read_committed consumers, and both clients' final reads (the Java lane's
    # own polls may all fall after the time limit on a loaded machine)
    readers = {p.split(".")[0].split("/")[0] for p in read["process"]}
    assert {"rc0", "rc1", "txn-final", "jtxn-final"} <= readers
    committers = {p.split(".")[0] for p in ends[ends["value"] == 1]["process"]}
    assert {"tp0", "tp1", "jt0"} <= committers  # and both clients' producers committed
    assert report.faults >= 1
    analysis = analyze_local(trace)
    assert analysis.violating_runs == [], analysis.violations.to_dict("records")


@pytest.mark.parametrize(
    ("bug", "flagged"),
    [
        # read_committed Fetch answers without the aborted transactions, so the clients
        # cannot drop aborted records and hand them over.
        ("txn-no-aborted-list", {"aborted-read"}),
        # The last stable offset is the high watermark: records of open transactions are
        # served before their commit was asked for, and those of ones that then abort.
        ("txn-lso-ignores-open", {"aborted-read", "intermediate-read"}),
    ],
)
def test_a_planted_transactional_bug_in_real_servers_is_flagged(
    tmp_path: Path, bug: str, flagged: set[str]
) -> None:
    options = RunOptions(
        trace_dir=tmp_path / "traces",
        controllers=1,
        brokers=3,
        time_limit_s=10.0,
        nemeses=(),
        seed=1,
        admin_lanes=0,
        txn_lanes=2,
        bug=bug,
    )
    report = run(options)
    assert leftovers(report.tag, report.work_dir) == []
    analysis = analyze_local(read_trace_pandas(str(options.trace_dir)))
    assert set(analysis.violations["check"]) == flagged, analysis.violations


def test_the_table_puts_each_systems_findings_per_check_side_by_side() -> None:
    table = render(
        [
            Column("jepsen-s1-a", {"aborted-read": 3}, 10, 4, 50),
            Column("jepsen-kafka-s1-b", {"torn-transaction": 1, "lost-write": 2}, 9, 5, 40),
        ]
    ).splitlines()
    assert table[0].split() == ["check", "kraft-py", "Apache", "Kafka"]
    rows = {line.rsplit(None, 2)[0].strip(): line.split()[-2:] for line in table[2:]}
    assert rows["aborted-read"] == ["3", "0"]
    assert rows["torn-transaction"] == ["0", "1"]
    assert rows["lost-write"] == ["0", "2"]  # a plain check that found something is listed
    assert rows["transactions committed"] == ["10", "9"]
    assert "ctp-exactly-once" not in rows  # no real lane runs the worker


def test_the_table_of_a_trace_dir_without_the_run_is_a_one_line_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["table", "--trace", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"kraft-jepsen table: {tmp_path} holds no runs\n", err
