"""The kafka scenario's transactional lanes (``--transactions``): transactions commit and
abort under every fault and Jepsen's delay-txn schedule, the consume-transform-produce worker
commits and restarts, the checks pass on correct code, and the same seed gives the same
digest."""

from __future__ import annotations

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


def test_transactions_are_opt_in() -> None:
    """Without the flag a run has no transactional lanes and adds no figures."""
    result = run_kafka(RunConfig("kafka", 2, duration_s=3, faults=()))
    assert result.ok, result.summary()
    assert "txn_commits" not in result.stats
