"""The Parquet trace: one published directory per run, versioned, faithful to Trace.event."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.analysis.load import TraceDirError, read_trace_pandas, run_dirs
from sim.nemesis import FAULTS
from sim.run import RunConfig, RunResult
from sim.scenarios.echo import run_echo
from sim.tracefmt import (
    EVENTS_FILE,
    HISTORY_FILE,
    METADATA_VERSION_KEY,
    RUN_FILE,
    SCHEMA_VERSION,
    ParquetTraceWriter,
    run_id_for,
)

BIN = Path(sys.executable).parent


def echo_config(seed: int, **kwargs: object) -> RunConfig:
    return RunConfig("echo", seed, duration_s=15, faults=FAULTS, **kwargs)  # type: ignore[arg-type]


def test_run_directory_holds_three_versioned_tables(tmp_path: Path) -> None:
    result = run_echo(echo_config(4, trace_dir=str(tmp_path)))
    [run_dir] = run_dirs(str(tmp_path))
    assert run_dir.name == f"run_id={run_id_for(echo_config(4))}"
    assert sorted(p.name for p in run_dir.iterdir()) == [EVENTS_FILE, HISTORY_FILE, RUN_FILE]
    for name in (RUN_FILE, HISTORY_FILE, EVENTS_FILE):
        table = pq.read_table(run_dir / name)
        assert table.schema.metadata[METADATA_VERSION_KEY] == str(SCHEMA_VERSION).encode()
        assert set(table["schema_version"].to_pylist()) == {SCHEMA_VERSION}
    trace = read_trace_pandas(str(tmp_path))
    [run] = trace.runs.to_dict("records")
    assert run["digest"] == result.digest
    assert run["outcome"] == ("ok" if result.ok else "violation")
    assert (
        run["history_rows"]
        == len(trace.history)
        == result.stats["ops"] + len(trace.history[trace.history["type"] != "invoke"])
    )
    assert run["code_version"].startswith("0.1.0")
    assert "verdict" not in set(trace.events["kind"])
    assert (trace.history["time_wall_ns"] >= run["time_started_wall_ns"]).all()


def test_parquet_trace_leaves_digest_and_jsonl_unchanged(tmp_path: Path) -> None:
    plain = run_echo(echo_config(6, trace_path=str(tmp_path / "a.jsonl")))
    traced = run_echo(
        echo_config(6, trace_path=str(tmp_path / "b.jsonl"), trace_dir=str(tmp_path / "dir"))
    )
    assert plain.digest == traced.digest
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()


def test_every_trace_event_lands_in_exactly_one_table(tmp_path: Path) -> None:
    run_echo(echo_config(3, trace_path=str(tmp_path / "t.jsonl"), trace_dir=str(tmp_path)))
    lines = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    trace = read_trace_pandas(str(tmp_path))
    ops = [line for line in lines if line["kind"] == "op"]
    others = [line for line in lines if line["kind"] not in ("op", "verdict")]
    assert len(trace.history) == len(ops)
    assert len(trace.events) == len(others)
    assert list(trace.history["type"]) == [op["type"] for op in ops]
    assert list(trace.history["value"]) == [op["value"] for op in ops]
    assert sorted(trace.history["seq"].tolist() + trace.events["seq"].tolist()) == [
        i for i, line in enumerate(lines) if line["kind"] != "verdict"
    ]
    recovered = trace.events[trace.events["kind"] == "recovered"]
    assert recovered["offset_to"].notna().all() and recovered["offset_committed"].notna().all()


def test_restarts_are_named_and_processes_change_with_incarnation(tmp_path: Path) -> None:
    run_echo(RunConfig("echo", 5, duration_s=30, faults=("crash",), trace_dir=str(tmp_path)))
    trace = read_trace_pandas(str(tmp_path))
    restarts = trace.events[trace.events["kind"] == "restart"]
    assert not restarts.empty
    assert (restarts["incarnation"] > 1).all()
    node = restarts["node"].iloc[0]
    processes = set(trace.history.loc[trace.history["node"] == node, "process"])
    assert {f"{node}:1", f"{node}:2"} <= processes


def test_rerunning_a_configuration_replaces_its_directory(tmp_path: Path) -> None:
    run_echo(echo_config(2, trace_dir=str(tmp_path)))
    run_echo(echo_config(2, trace_dir=str(tmp_path)))
    run_echo(echo_config(2, trace_dir=str(tmp_path), bug="ack-before-fsync"))
    assert len(run_dirs(str(tmp_path))) == 2
    assert [p.name for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")] == []


def test_half_written_runs_are_invisible(tmp_path: Path) -> None:
    run_echo(echo_config(2, trace_dir=str(tmp_path)))
    staging = tmp_path / "runs" / ".tmp-echo-s9-deadbeef-1-0"
    staging.mkdir()
    (staging / HISTORY_FILE).write_bytes(b"not parquet")
    assert len(read_trace_pandas(str(tmp_path)).runs) == 1


def _fake_result() -> RunResult:
    return RunResult(seed=1, violation=None, digest="0" * 32, virtual_s=1.0, wall_s=0.1)


def test_writer_maps_raft_vocabulary_to_columns(tmp_path: Path) -> None:
    writer = ParquetTraceWriter(tmp_path, RunConfig("raft", 1))
    records = [
        {"t_us": 0, "kind": "start", "node": "n1", "incarnation": 1},
        {"t_us": 5, "kind": "became-leader", "node": "n1", "epoch": 3, "leader_id": 1},
        {"t_us": 6, "kind": "high-watermark", "node": "n1", "high_watermark": 7, "epoch": 3},
        {"t_us": 7, "kind": "truncation", "node": "n1", "from_offset": 9, "to_offset": 4},
        {"t_us": 8, "kind": "partition", "node": None, "groups": [["n1"], ["n2", "n3"]]},
        {"t_us": 9, "kind": "op", "node": "n1", "type": "invoke", "f": "cas", "value": [1, 2]},
        {"t_us": 9, "kind": "op", "node": "n1", "type": "ok", "f": "cas", "value": "x", "k": 1},
    ]
    for record in records:
        writer.add(record)
    writer.commit(_fake_result())
    trace = read_trace_pandas(str(tmp_path))
    events = trace.events.set_index("kind")
    assert events.loc["became-leader", "leader"] == "1"
    assert events.loc["became-leader", "epoch"] == 3
    assert events.loc["high-watermark", "offset_high_watermark"] == 7
    assert events.loc["truncation", ["offset_from", "offset_to"]].tolist() == [9, 4]
    assert json.loads(events.loc["partition", "detail"]) == {"groups": [["n1"], ["n2", "n3"]]}
    assert pd_list(trace.history["values"].iloc[0]) == [1, 2]
    assert trace.history["value_text"].iloc[1] == "x"
    assert json.loads(trace.history["detail"].iloc[1]) == {"k": 1}
    assert list(trace.history["process"]) == ["n1:1", "n1:1"]


def pd_list(value: object) -> list[int]:
    return [int(v) for v in value]  # type: ignore[attr-defined]


def test_unknown_schema_version_is_refused(tmp_path: Path) -> None:
    run_echo(echo_config(2, trace_dir=str(tmp_path)))
    [run_dir] = run_dirs(str(tmp_path))
    table = pq.read_table(run_dir / RUN_FILE)
    future = table.set_column(0, "schema_version", pa.array([99], pa.int16()))
    pq.write_table(future, run_dir / RUN_FILE)
    with pytest.raises(TraceDirError, match="schema version 99 is not supported"):
        read_trace_pandas(str(tmp_path))


def test_kraft_sim_trace_takes_a_directory_for_run_and_sweep(tmp_path: Path) -> None:
    kraft_sim = str(BIN / "kraft-sim")
    common = ["--scenario", "echo", "--duration", "5", "--trace", str(tmp_path / "t")]
    run = subprocess.run(
        [kraft_sim, "run", "--seed", "1", *common, "--trace-jsonl", str(tmp_path / "t.jsonl")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    sweep = subprocess.run(
        [kraft_sim, "sweep", "--seeds", "1-3", "--jobs", "2", *common],
        capture_output=True,
        text=True,
        check=False,
    )
    assert sweep.returncode == 0, sweep.stderr
    assert len(run_dirs(str(tmp_path / "t"))) == 3
    assert (tmp_path / "t.jsonl").read_text().startswith("{")

    (tmp_path / "file").write_text("")
    bad = subprocess.run(
        [kraft_sim, "run", "--seed", "1", "--scenario", "echo", "--trace", str(tmp_path / "file")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"kraft-sim: --trace takes a directory; {tmp_path / 'file'} is a file"
    ]
