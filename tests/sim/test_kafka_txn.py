"""The kafka scenario's transactional lanes (``--transactions``): transactions commit and
abort under every fault and Jepsen's delay-txn schedule, the consume-transform-produce worker
commits and restarts, the checks pass on correct code, and the same seed gives the same
digest."""

from __future__ import annotations

import json
from pathlib import Path

from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka
from sim.scenarios.kafka_txn import TXN_FAULTS


def test_transactions_commit_and_abort_and_the_run_is_deterministic() -> None:
    faults = FAULTS + KAFKA_FAULTS + TXN_FAULTS
    config = RunConfig("kafka", 2, duration_s=8, faults=faults, transactions=True)
    first, second = run_kafka(config), run_kafka(config)
    assert first.ok, first.summary()
    assert first.stats["txn_commits"] > 0 and first.stats["txn_aborts"] > 0
    assert first.stats["rc_polls"] > 0
    # The consume-transform-produce worker committed, and started again from its committed
    # offset after an abort, a fence or a crash.
    assert first.stats["ctp_commits"] > 0 and first.stats["ctp_restarts"] > 0
    assert first.digest == second.digest


def test_a_fenced_producer_is_closed_and_its_lane_goes_on_as_a_new_instance(
    tmp_path: Path,
) -> None:
    """PRODUCER_FENCED or INVALID_PRODUCER_EPOCH is fatal to a Kafka producer: the lane (or
    the worker) closes it and a new instance of the same transactional id, the next
    process, takes over and commits again. Seed 10's three fences (in 10 s of every fault)
    are InitProducerId answers to a lane that, after an error, asked to bump an epoch its
    coordinator had moved past: the lanes asked again and again until they crashed."""
    trace = tmp_path / "trace.jsonl"
    config = RunConfig(
        "kafka",
        10,
        duration_s=10,
        faults=FAULTS + KAFKA_FAULTS,
        transactions=True,
        trace_path=str(trace),
    )
    result = run_kafka(config)
    assert result.ok, result.summary()
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    fenced = [e for e in events if e["kind"] == "txn-fenced"]
    assert len(fenced) == result.stats["txn_fenced"] > 0
    assert {e["error"] for e in fenced} <= {"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"}
    for fence in fenced:
        process = fence["process"]
        if process.startswith("tp"):  # a producer lane's processes: tp<lane>.<generation>
            lane, generation = process.split(".")
            successor = f"{lane}.{int(generation) + 1}"
        else:  # the worker's: ctp<generation>
            successor = f"ctp{int(process.removeprefix('ctp')) + 1}"
        assert any(
            e["kind"] == "op"
            and e["process"] == successor
            and e["f"] == "txn-end"
            and e["type"] == "ok"
            and e["t_us"] > fence["t_us"]
            for e in events
        ), f"{process} was fenced and {successor} never ended a transaction"


def test_transactions_are_opt_in() -> None:
    """Without the flag a run has no transactional lanes and adds no figures."""
    result = run_kafka(RunConfig("kafka", 2, duration_s=3, faults=()))
    assert result.ok, result.summary()
    assert "txn_commits" not in result.stats
