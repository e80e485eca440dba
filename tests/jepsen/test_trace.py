"""A real run's trace (jepsen/history.py) is read by kraft-analyze like a simulated one: its
history feeds the kafka checks, its kills are fault windows."""

from __future__ import annotations

from pathlib import Path

from jepsen.history import Recorder
from sim.analysis import stats
from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas
from sim.run import RunConfig


def _run(tmp_path: Path, final_values: list[int]) -> Recorder:
    """One partition: sends of 0 and 1 acknowledged at offsets 0 and 1 around a kill of
    n4; the heal's send; the final reads find ``final_values`` from offset 0."""
    recorder = Recorder(tmp_path, RunConfig("kafka", 7, faults=("kill",)), "jepsen-s7-test")
    recorder.event("kafka-config", topic="jepsen", acks="all", rf=3, partitions=1)
    recorder.event("start", "n4", incarnation=1)
    for value, process in ((0, "p0.0"), (1, "p0.0"), (2, "heal")):
        recorder.op(process, "invoke", "send", "jepsen-0", value)
        if value == 1:
            recorder.event("kill", "n4")
        recorder.op(process, "ok", "send", "jepsen-0", value, offset=value)
        if value == 1:
            recorder.event("start", "n4", incarnation=2)
    pairs = [n for offset, value in enumerate(final_values) for n in (offset, value)]
    recorder.op("final", "invoke", "poll", "jepsen-0", 0)
    recorder.op("final", "ok", "poll", "jepsen-0", 0, values=pairs, offset=len(final_values))
    recorder.commit(7)
    return recorder


def test_a_clean_real_run_is_judged_clean_and_its_kill_is_a_fault_window(tmp_path: Path) -> None:
    _run(tmp_path, [0, 1, 2])
    trace = read_trace_pandas(str(tmp_path))
    analysis = analyze_local(trace)
    assert analysis.violating_runs == []
    assert list(trace.runs["run_id"]) == ["jepsen-s7-test"]
    assert list(trace.runs["outcome"]) == ["unknown"]
    windows = stats.fault_windows(trace.events)
    assert [(w.fault, w.node) for w in windows.itertuples()] == [("kill", "n4")]
    kinds = list(trace.events["kind"])
    assert kinds == ["kafka-config", "start", "kill", "restart"]


def test_an_acknowledged_write_a_real_run_lost_is_flagged(tmp_path: Path) -> None:
    _run(tmp_path, [0, 2])  # offset 1 holds the heal's value: 1 was lost
    analysis = analyze_local(read_trace_pandas(str(tmp_path)))
    assert analysis.violating_runs == ["jepsen-s7-test"]
    assert "inconsistent-offsets" in set(analysis.violations["check"])


def _admin_run(tmp_path: Path, final_partitions: int | None) -> None:
    """A real run's admin history (jepsen/admin.py): t0 created with 2 partitions and grown
    to 3, a create of t0 answered TOPIC_ALREADY_EXISTS, a retention change of unknown
    outcome; after the heal t0 reads ``final_partitions``."""
    recorder = Recorder(tmp_path, RunConfig("kafka", 8, faults=("pause",)), "jepsen-s8-admin")
    steps = (
        ("admin0.0", "create", 2, "ok", None),
        ("admin1.0", "create", 1, "fail", "TOPIC_ALREADY_EXISTS"),
        ("admin0.0", "create-partitions", 3, "ok", None),
        ("admin1.1", "alter-config", 60_000, "info", "_TIMED_OUT"),
    )
    for process, f, value, status, error in steps:
        recorder.op(process, "invoke", f, "t0", value)
        recorder.op(process, status, f, "t0", value, error=error)
    for f, found in (("read", final_partitions), ("read-config", 60_000)):
        recorder.op("admin-final/t0", "invoke", f, "t0", None)
        recorder.op("admin-final/t0", "ok", f, "t0", found)
    recorder.commit(8)


def test_a_real_runs_admin_history_is_checked_by_the_topic_model(tmp_path: Path) -> None:
    _admin_run(tmp_path / "clean", 3)
    clean = analyze_local(read_trace_pandas(str(tmp_path / "clean")))
    assert clean.violating_runs == [] and clean.keys_checked == 1
    _admin_run(tmp_path / "lost", 2)  # the acknowledged growth to 3 partitions was lost
    lost = analyze_local(read_trace_pandas(str(tmp_path / "lost")))
    assert lost.violating_runs == ["jepsen-s8-admin"]
    [message] = lost.violations["message"]
    assert message.startswith("linearizability (topic) key t0: ")
    assert "read() -> 2" in message
