"""The kafka scenario's data-plane checks (issue 28 items 2 and 3) as kraft-analyze runs
them: from the ``hw-advance``, ``replica-caught-up`` and ``duplicate-answer`` events, with
the code the simulator runs online, on hand-written events and on the traces of the pinned
planted-bug runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sim.analysis.job import analyze_local
from sim.analysis.load import read_trace_pandas
from tests.analysis.conftest import trace_run
from tests.analysis.test_checks import run_checks, write_run
from tests.planted import DATA_PLANE_BUG_CHECKS, KAFKA_BUG_ARGS, KAFKA_BUG_SEEDS

CONFIG = {
    "t_us": 0,
    "kind": "kafka-config",
    "topic": "jepsen",
    "acks": "all",
    "rf": 3,
    "partitions": 1,
    "idempotent": False,
    "group": "g",
    "offsets_log": "__consumer_offsets-0",
}


def hw_advance(t_us: int, diverged: dict[str, int]) -> dict[str, Any]:
    return {
        "t_us": t_us,
        "kind": "hw-advance",
        "node": "n4",
        "log": "jepsen-0",
        "epoch": 3,
        "from_hw": 10,
        "hw": 14,
        "checked": ["n5", "n6"],
        "diverged": diverged,
    }


def caught_up(node: str, end: int, diverged_at: int) -> dict[str, Any]:
    return {
        "t_us": 50,
        "kind": "replica-caught-up",
        "node": node,
        "log": "jepsen-0",
        "leader": "n4",
        "hw": 14,
        "end": end,
        "diverged_at": diverged_at,
        "bound_s": 10.0,
    }


# A producer's retried batch: producer 4000, epoch 0, sequence 17, one record, its CRC.
RETRIED = [4000, 0, 17, 0, 1234567]


def duplicate_answer(offset: int, found_base: int, found: list[int] | None) -> dict[str, Any]:
    return {
        "t_us": 30,
        "kind": "duplicate-answer",
        "node": "n5",
        "log": "jepsen-0",
        "epoch": 4,
        "offset": offset,
        "batch": RETRIED,
        "found_base": found_base,
        "found": found,
    }


def data_plane(violations: list[Any]) -> list[Any]:
    """The data-plane violations (the hand-written runs hold no operations, so liveness
    fails too; that is judged elsewhere)."""
    checks = ("committed-on-isr", "replica-catch-up", "duplicate-offset")
    return [v for v in violations if v.check in checks]


def test_a_high_watermark_over_a_diverged_isr_member_is_flagged(tmp_path: Path) -> None:
    clean = [CONFIG, hw_advance(20, {})]
    assert data_plane(run_checks(write_run(tmp_path, clean, scenario="kafka"))) == []
    bad = [CONFIG, hw_advance(20, {"n6": 13, "n5": 12})]
    [found] = data_plane(run_checks(write_run(tmp_path, bad, scenario="kafka")))
    assert found.message == (
        "committed-on-isr: n4, leader of jepsen-0 in epoch 3, moved its high watermark from "
        "10 to 14, but ISR member n5 holds other batches than the leader's from offset 12 "
        "of jepsen-0"
    )


def test_a_replica_short_or_diverged_after_the_final_reads_is_flagged(tmp_path: Path) -> None:
    ok = [CONFIG, caught_up("n5", 14, -1), caught_up("n6", 20, -1)]
    assert data_plane(run_checks(write_run(tmp_path, ok, scenario="kafka"))) == []
    bad = [CONFIG, caught_up("n5", 13, -1), caught_up("n6", 20, 7)]
    short, diverged = data_plane(run_checks(write_run(tmp_path, bad, scenario="kafka")))
    assert short.message.endswith(
        "within 10s of the final reads, but reached only offset 13 of jepsen-0"
    )
    assert short.message.startswith("replica-catch-up: n5's replica of jepsen-0 must hold")
    assert diverged.message.endswith(
        "holds other batches than the leader's from offset 7 of jepsen-0"
    )


def test_a_duplicate_answer_naming_an_offset_without_its_batch_is_flagged(
    tmp_path: Path,
) -> None:
    """Kafka answers a retried sequence with the original batch's base offset: the leader's
    log must hold that very batch there (issue 28 item 3, the check behind the producer
    state a truncation left stale)."""
    clean = [CONFIG, duplicate_answer(21, 21, RETRIED)]
    assert data_plane(run_checks(write_run(tmp_path, clean, scenario="kafka"))) == []
    other = [4001, 2, 17, 0, 7654321]  # another producer's batch now sits at offset 21
    bad = [
        CONFIG,
        duplicate_answer(21, 21, other),
        duplicate_answer(23, 22, [4000, 0, 16, 1, 99]),
        duplicate_answer(40, -1, None),
        duplicate_answer(21, 21, [*RETRIED[:4], 1234568]),  # same sequence, other content
    ]
    wrong, inside, nothing, content = data_plane(
        run_checks(write_run(tmp_path, bad, scenario="kafka"))
    )
    assert wrong.check == "duplicate-offset"
    assert wrong.message == (
        "duplicate-offset: n5, leader of jepsen-0 in epoch 4, answered the retry of producer "
        "4000 epoch 0 sequence 17 (1 records, crc 1234567) as a duplicate at offset 21, but "
        "in its log the batch there is producer 4001 epoch 2 sequence 17 (1 records, crc "
        "7654321)"
    )
    assert inside.message.endswith(
        "at offset 23, but in its log that offset is inside the batch at 22, producer 4000 "
        "epoch 0 sequence 16 (2 records, crc 99)"
    )
    assert nothing.message.endswith("at offset 40, but in its log no batch holds that offset")
    assert content.message.endswith(
        "the batch there is producer 4000 epoch 0 sequence 17 (1 records, crc 1234568)"
    )


@pytest.mark.parametrize("bug", sorted(DATA_PLANE_BUG_CHECKS))
def test_kraft_analyze_flags_the_pinned_data_plane_bug_runs(bug: str, tmp_path: Path) -> None:
    """The simulator's own verdict on each pinned run is among the violations kraft-analyze
    re-derives from its trace, under the same check."""
    seed = KAFKA_BUG_SEEDS[bug]
    trace_run(tmp_path, "kafka", seed, bug, "--duration", "20", *KAFKA_BUG_ARGS[bug])
    trace = read_trace_pandas(str(tmp_path))
    [verdict] = list(trace.runs["violation"])
    assert verdict.startswith(f"{DATA_PLANE_BUG_CHECKS[bug]}: "), verdict
    messages = set(analyze_local(trace).violations["message"])
    assert verdict in messages, (verdict, sorted(messages)[:5])


def state_isr(t_us: int, isr: list[int]) -> dict[str, Any]:
    """The controller's committed ISR of __transaction_state-0."""
    return {
        "t_us": t_us,
        "kind": "partition-state",
        "node": "n1",
        "topic": "__transaction_state",
        "partition": 0,
        "topic_id": "8a48c819-5ef8-47d9-8e93-a113b4dee7ea",
        "leader_id": str(isr[0]),
        "isr": isr,
        "replicas": isr,
        "epoch": 0,
        "elr": [],
        "last_known_elr": [],
        "offset_end": 36,
    }


def crash(t_us: int, node: str) -> dict[str, Any]:
    return {"t_us": t_us, "kind": "crash", "node": node}


def test_a_reissued_producer_epoch_is_excused_only_after_the_coordinators_log_lost_power(
    tmp_path: Path,
) -> None:
    """A power cut on every replica of a __transaction_state partition can take back the
    epochs its coordinator handed out (Kafka does not fsync it either): the next producer
    gets an old epoch again, and its first batch repeats an old batch's producer, epoch and
    sequence with other content (kafka --transactions seed 1 under TV2 lanes). Excused then,
    and only in that form."""
    same_identity = duplicate_answer(21, 21, [*RETRIED[:4], 1234568])
    cut = [state_isr(5, [4, 5]), crash(10, "n4"), crash(11, "n5")]
    excused = [CONFIG, *cut, same_identity]
    assert data_plane(run_checks(write_run(tmp_path, excused, scenario="kafka"))) == []
    # One replica kept its log: nothing was taken back, so the reissue is the broker's.
    half = [CONFIG, state_isr(5, [4, 5]), crash(10, "n4"), same_identity]
    [flagged] = data_plane(run_checks(write_run(tmp_path, half, scenario="kafka")))
    assert flagged.check == "duplicate-offset"
    # Another producer's batch at the offset is never excused by lost coordinator state.
    other = duplicate_answer(21, 21, [4001, 2, 17, 0, 7654321])
    [wrong] = data_plane(run_checks(write_run(tmp_path, [CONFIG, *cut, other], scenario="kafka")))
    assert wrong.check == "duplicate-offset"
