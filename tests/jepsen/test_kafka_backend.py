"""kraft-jepsen against Apache Kafka (``--kafka-lib``): the same harness, workload, nemesis
and checks on Kafka's own broker and controllers, started from the lib dir
scripts/kafka-dist.sh assembles from Maven Central (installed here on first use; later runs
reuse ./.cache and work offline). Needs root, java 17+ and mvn, like the kraft-py runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jepsen.run import RunOptions, run
from jepsen.servers import ApacheKafka
from jepsen.table import columns, system_of
from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas
from tests.jepsen.leftovers import leftovers
from tests.kafka_tools import (
    kafka_dist_lib,
    kafka_tools,  # noqa: F401  (pytest fixture: installs once)
)

ROOT = Path(__file__).resolve().parent.parent.parent
SCRIPT = ROOT / "scripts" / "kafka-dist.sh"
INSTALL_TIMEOUT_S = 600.0


def test_a_node_is_kafkas_own_main_class_on_the_lib_dirs_jars(tmp_path: Path) -> None:
    lib = kafka_dist_lib()
    kafka = ApacheKafka(lib)
    argv = kafka.start_argv(tmp_path / "node1.properties")
    assert argv[0] == "java"
    assert argv[-3:] == [f"{lib.resolve()}/*", "kafka.Kafka", str(tmp_path / "node1.properties")]
    assert len(kafka.random_uuid()) == 22  # StorageTool answers: the classpath is complete
    # The script's own launcher: the answer alone on stdout (the tool logs to stderr).
    out = subprocess.run(
        ["bash", str(SCRIPT), "storage", "random-uuid"], capture_output=True, text=True, check=True
    )
    assert len(out.stdout.strip()) == 22 and out.stdout.count("\n") == 1, out.stdout


def test_a_short_fault_run_against_apache_kafka_is_judged_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    options = RunOptions(
        trace_dir=tmp_path / "traces",
        controllers=1,
        brokers=3,
        time_limit_s=20.0,
        nemeses=("partition", "kill", "clock"),
        seed=2,
        kafka_lib=kafka_dist_lib(),
    )
    report = run(options)
    assert report.run_id.startswith("jepsen-kafka-s2-")
    assert leftovers(report.tag, report.work_dir) == []
    assert not report.work_dir.exists()
    trace = read_trace_pandas(str(options.trace_dir))
    history, events = trace.history, trace.events
    ok = history[history["type"] == "ok"]
    assert {"send", "poll"} <= set(ok["f"])
    assert {"heal", "final"} <= set(ok["process"])
    assert report.faults >= 1
    # Kafka's Metadata and its controllers' DescribeQuorum both answer the leader watch.
    led = set(events[events["kind"] == "became-leader"]["log"])
    assert {"__cluster_metadata-0", "jepsen-0"} <= led, led
    # A JVM under wall-clock-only libfaketime crawls: the clock nemesis keeps its schedule,
    # moves no clock, and the run says why.
    skipped = events[events["kind"] == "nemesis-skipped"]
    assert list(skipped["detail"].str.contains("--fake-monotonic")) == [True]
    assert "clock-skew" not in set(events["kind"])
    analysis = analyze_local(trace)
    assert analysis.violating_runs == [], analysis.violations.to_dict("records")


@pytest.mark.usefixtures("kafka_tools")
def test_transactional_lanes_against_apache_kafka_are_judged_by_the_same_checks(
    tmp_path: Path,
) -> None:
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
        kafka_lib=kafka_dist_lib(),
    )
    report = run(options)
    assert leftovers(report.tag, report.work_dir) == []
    trace = read_trace_pandas(str(options.trace_dir))
    ok = trace.history[trace.history["type"] == "ok"]
    ends = ok[ok["f"] == "txn-end"]
    committers = {p.split(".")[0] for p in ends[ends["value"] == 1]["process"]}
    assert {"tp0", "tp1"} <= committers
    # Kafka's coordinator served both clients: the Java lane's EndTxn was answered too. Its
    # commit is not asserted: in a loaded clean-clone run its JVM took 20 s to send, a fault
    # timed its first send out, and it aborted both transactions it had time for (the lane
    # draws commit or abort), with every check clean.
    assert "jt0" in {p.split(".")[0] for p in ends["process"]}
    assert 0 in set(ends["value"])
    polls = ok[ok["f"] == "rc-poll"]
    read = polls[polls["values"].map(lambda values: values is not None and len(values) > 0)]
    # The Java lane's own polls may all fall after the time limit on a loaded machine (a send
    # timed out by a fault and the abort after it took 15 s of 30 in a clean-clone run); its
    # final read after the heal is always made.
    readers = {p.split(".")[0].split("/")[0] for p in read["process"]}
    assert {"rc0", "txn-final", "jtxn-final"} <= readers
    analysis = analyze_local(trace)
    assert analysis.violating_runs == [], analysis.violations.to_dict("records")
    # The table's column for this run: Apache Kafka, the same counts.
    (column,) = columns(str(options.trace_dir), report.run_id)
    assert system_of(column.run_id) == "Apache Kafka"
    assert column.commits == int((ends["value"] == 1).sum()) and column.counts == {}
