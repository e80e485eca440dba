"""``--aiokafka``: an unmodified aiokafka producer and group consumers run as lanes of the
kafka scenario, on virtual time, and their operations are judged with the others'."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka

KRAFT_SIM = str(Path(sys.executable).parent / "kraft-sim")


def _ops(trace: Path) -> list[dict]:
    return [e for e in map(json.loads, trace.read_text().splitlines()) if e["kind"] == "op"]


def test_aiokafka_lanes_same_seed_same_digest_under_faults(tmp_path: Path) -> None:
    config = RunConfig(
        "kafka",
        2,
        duration_s=8,
        faults=FAULTS + KAFKA_FAULTS,
        aiokafka=True,
        trace_path=str(tmp_path / "first.jsonl"),
    )
    first = run_kafka(config)
    second = run_kafka(replace(config, trace_path=None))
    assert first.ok, first.summary()
    assert first.digest == second.digest
    # The lanes did real work, and every kind of operation went into the history.
    stats = first.stats
    assert stats["aiokafka_sends"] > 0 and stats["aiokafka_polls"] > 0
    assert stats["aiokafka_commits"] > 0
    seen = {
        (op["process"].split(".")[0], op["f"], op["type"])
        for op in _ops(tmp_path / "first.jsonl")
        if op["process"].startswith(("ap", "ag"))
    }
    assert {("ap0", "send", "ok"), ("ag0", "poll", "ok"), ("ag0", "commit", "ok")} <= seen
    assert ("ag0", "offset-fetch", "ok") in seen or ("ag1", "offset-fetch", "ok") in seen


def test_a_duplicate_from_aiokafkas_own_retry_is_caught(tmp_path: Path) -> None:
    """With ``skip-sequence-check`` a leader appends a retried batch again. Without
    ``--idempotent`` the scenario's own producers never resend, so the duplicate the run
    reports is one aiokafka's producer retried of itself. Seed 7 is the first 20 s run that
    catches it."""
    trace = tmp_path / "trace.jsonl"
    args = ["--seed", "7", "--duration", "20", "--bug", "skip-sequence-check", "--aiokafka"]
    result = subprocess.run(
        [KRAFT_SIM, "run", "--scenario", "kafka", *args, "--trace-jsonl", str(trace)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.startswith("seed=7 VIOLATION duplicate: value "), result.stdout
    value = int(result.stdout.split("VIOLATION duplicate: value ", 1)[1].split()[0])
    senders = {o["process"] for o in _ops(trace) if o["f"] == "send" and o["value"] == value}
    assert senders and all(process.startswith("ap") for process in senders), senders


def test_aiokafka_lanes_need_acks_all() -> None:
    result = subprocess.run(
        [KRAFT_SIM, "run", "--scenario", "kafka", "--aiokafka", "--acks", "1", "--seed", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "kraft-sim: --aiokafka needs --scenario kafka and --acks all (idempotent)"
    )


@pytest.mark.slow
def test_aiokafka_sweep_is_clean() -> None:
    """Issue 28's sweep: seeds 1-100 with every fault (12 minutes with two jobs)."""
    args = ["--scenario", "kafka", "--aiokafka", "--faults", "all", "--seeds", "1-100"]
    result = subprocess.run(
        [KRAFT_SIM, "sweep", "--jobs", "2", "--quiet", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("seeds=100 ok=100 "), result.stdout
