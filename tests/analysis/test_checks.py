"""Run checks and statistics on small synthetic runs, written through the real trace writer."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pandas as pd

from sim.analysis import checks, stats
from sim.analysis.history import pair_operations
from sim.analysis.job import analyze_local
from sim.analysis.load import LocalTrace, read_trace_pandas
from sim.run import RunConfig, RunResult
from sim.tracefmt import ParquetTraceWriter

_seeds = itertools.count(1)


def write_run(root: Path, records: list[dict[str, Any]], scenario: str = "raft") -> LocalTrace:
    """Publish one run made of ``records`` (Trace.event dicts) and read it back."""
    config = RunConfig(scenario, next(_seeds))
    writer = ParquetTraceWriter(root, config)
    for record in records:
        writer.add({"node": None, **record})
    writer.commit(RunResult(config.seed, None, "0" * 32, 1.0, 0.1))
    return read_trace_pandas(str(root), [writer.run_id])


def run_checks(trace: LocalTrace) -> list[checks.Violation]:
    ops = stats.operations_for_run(trace.history, trace.events)
    scenario = str(trace.runs["scenario"].iloc[0])
    events = trace.events.assign(scenario=scenario)
    return checks.check_run(checks.run_data(ops.assign(scenario=scenario), events))


def start(node: str, t_us: int = 0, incarnation: int = 1) -> dict[str, Any]:
    return {"t_us": t_us, "kind": "start", "node": node, "incarnation": incarnation}


def role(node: str, name: str, epoch: int, t_us: int, **extra: Any) -> dict[str, Any]:
    return {"t_us": t_us, "kind": f"became-{name}", "node": node, "epoch": epoch, **extra}


def hw(node: str, value: int, t_us: int) -> dict[str, Any]:
    return {"t_us": t_us, "kind": "high-watermark", "node": node, "high_watermark": value}


def test_two_leaders_in_one_epoch_break_election_safety(tmp_path: Path) -> None:
    ok = write_run(
        tmp_path,
        [start("n1"), start("n2"), role("n1", "leader", 1, 10), role("n2", "leader", 2, 20)],
    )
    assert run_checks(ok) == []
    bad = write_run(
        tmp_path,
        [start("n1"), start("n2"), role("n1", "leader", 3, 10), role("n2", "leader", 3, 20)],
    )
    [found] = run_checks(bad)
    assert found.check == "election-safety"
    assert found.message == "election-safety: n1 and n2 both became leader in epoch 3"


def test_high_watermark_may_restart_after_a_crash_but_never_move_back(tmp_path: Path) -> None:
    restarted = [
        start("n1"),
        hw("n1", 5, 10),
        {"t_us": 20, "kind": "crash", "node": "n1"},
        start("n1", 30, 2),
        hw("n1", 2, 40),
    ]
    assert run_checks(write_run(tmp_path, restarted)) == []
    backwards = [start("n1"), hw("n1", 5, 10), hw("n1", 4, 20)]
    [found] = run_checks(write_run(tmp_path, backwards))
    assert found.check == "high-watermark"
    assert "back from 5 to 4" in found.message


def test_leader_reporting_less_than_the_committed_offset_is_flagged(tmp_path: Path) -> None:
    records = [
        start("n1"),
        start("n2"),
        role("n1", "leader", 1, 10),
        hw("n1", 8, 20),
        role("n2", "leader", 2, 30),
        hw("n2", 6, 40),
    ]
    [found] = run_checks(write_run(tmp_path, records))
    assert found.check == "high-watermark"
    assert "below the committed offset 8" in found.message


def test_a_deposed_leader_may_still_report_its_own_epochs_commit(tmp_path: Path) -> None:
    """A leader of epoch 1, paused while epoch 2 committed more, wakes and reports the HW
    its epoch reached before it learns it was deposed: not a lost commit."""
    records = [
        start("n1"),
        start("n2"),
        role("n1", "leader", 1, 10),
        {**hw("n1", 5, 20), "epoch": 1},
        role("n2", "leader", 2, 30),
        {**hw("n2", 20, 40), "epoch": 2},
        {**hw("n1", 6, 50), "epoch": 1},
    ]
    assert run_checks(write_run(tmp_path, records)) == []


def test_truncation_below_own_high_watermark_loses_committed_offsets(tmp_path: Path) -> None:
    def truncate(to: int, t_us: int) -> dict[str, Any]:
        return {"t_us": t_us, "kind": "truncation", "node": "n2", "from_offset": 9, "to_offset": to}

    fine = [start("n2"), hw("n2", 5, 10), truncate(5, 20)]
    assert run_checks(write_run(tmp_path, fine)) == []
    lost = [start("n2"), hw("n2", 5, 10), truncate(3, 20)]
    [found] = run_checks(write_run(tmp_path, lost))
    assert found.check == "committed-offset-lost"
    assert found.message == (
        "committed-offset-lost: n2 truncated to offset 3, below offset 5 it had committed"
    )


def test_new_leader_without_the_committed_log_is_flagged(tmp_path: Path) -> None:
    records = [
        start("n1"),
        start("n2"),
        role("n1", "leader", 1, 10),
        hw("n1", 8, 20),
        role("n2", "leader", 2, 30, end_offset=6),
    ]
    [found] = run_checks(write_run(tmp_path, records))
    assert found.check == "committed-offset-lost"
    assert "log end 6, below the committed offset 8" in found.message


def test_recovery_below_acknowledged_records_is_lost_durability(tmp_path: Path) -> None:
    def recovered(records: int, synced: int) -> dict[str, Any]:
        return {"t_us": 50, "kind": "recovered", "node": "n3", "records": records, "synced": synced}

    assert run_checks(write_run(tmp_path, [start("n3"), recovered(12, 12)], "echo")) == []
    [found] = run_checks(write_run(tmp_path, [start("n3"), recovered(10, 12)], "echo"))
    assert found.message == (
        "committed-offset-lost: n3 recovered to offset 10, below offset 12 it had committed"
    )


def test_a_raising_process_is_a_violation(tmp_path: Path) -> None:
    records = [start("n1"), {"t_us": 7, "kind": "process-failed", "node": "n1", "error": "Boom()"}]
    [found] = run_checks(write_run(tmp_path, records))
    assert found.message == "crash-free: n1 raised Boom()"


def echo_op(node: str, peer: str, seq: int, t_us: int, kind: str) -> dict[str, Any]:
    return {"t_us": t_us, "kind": "op", "node": node, "type": kind, "f": "echo", "key": peer}


def echo_round(a: str, b: str, seq: int, t_us: int) -> list[dict[str, Any]]:
    return [
        {**echo_op(a, b, seq, t_us, "invoke"), "value": seq},
        {**echo_op(a, b, seq, t_us + 1000, "ok"), "value": seq},
    ]


def test_echo_liveness_needs_every_node_to_serve_and_complete_after_healing(
    tmp_path: Path,
) -> None:
    healed = {"t_us": 1_000_000, "kind": "heal-all"}
    late = 12_000_000  # past the 10 s bound
    lively = [
        start("n1"),
        start("n2"),
        healed,
        *echo_round("n1", "n2", 1, 2_000_000),
        *echo_round("n2", "n1", 1, 2_500_000),
        {"t_us": late, "kind": "pause", "node": "n1"},
    ]
    assert run_checks(write_run(tmp_path, lively, "echo")) == []
    stuck = [*lively[:4], {"t_us": late, "kind": "pause", "node": "n1"}]
    [found] = run_checks(write_run(tmp_path, stuck, "echo"))
    assert found.message == "liveness: n1,n2 made no progress within 10s of healing"
    cut_short = stuck[:4]  # the trace ends before the bound: not judged
    assert run_checks(write_run(tmp_path, cut_short, "echo")) == []


def test_pairing_finds_pending_info_and_orphan_completions(tmp_path: Path) -> None:
    records = [
        start("n1"),
        {"t_us": 1, "kind": "op", "node": "n1", "type": "invoke", "f": "w", "key": "k", "value": 1},
        {"t_us": 2, "kind": "op", "node": "n1", "type": "info", "f": "w", "key": "k", "value": 1},
        {"t_us": 3, "kind": "op", "node": "n1", "type": "invoke", "f": "w", "key": "k", "value": 2},
        {"t_us": 4, "kind": "op", "node": "n2", "type": "ok", "f": "w", "key": "k", "value": 3},
    ]
    trace = write_run(tmp_path, records)
    ops = pair_operations(trace.history)
    assert list(ops["status"]) == ["info", "pending", "orphan"]
    assert list(ops["latency_us"].astype("float")[:1]) == [1.0]
    [row] = checks.check_key(ops, "raft")
    assert row["model"] == "history" and row["result"] == "violation"
    assert (
        row["message"]
        == "history: #3 n2:0 w completed with no open invoke of that function and key"
    )


def test_fault_windows_and_operation_labels(tmp_path: Path) -> None:
    records = [
        start("n1"),
        start("n2"),
        {"t_us": 100, "kind": "partition", "groups": [["n1"], ["n2"]]},
        {"t_us": 150, "kind": "crash", "node": "n2"},
        {"t_us": 300, "kind": "heal"},
        {"t_us": 400, "kind": "start", "node": "n2", "incarnation": 2},
        {"t_us": 500, "kind": "stall", "src": "n1", "dst": "n2", "duration_us": 50},
        {"t_us": 600, "kind": "enospc", "node": "n1"},
        {"t_us": 650, "kind": "fsync-fail", "node": "n1", "count": 1},
        {"t_us": 700, "kind": "heal-all"},
        {"t_us": 120, "kind": "op", "node": "n1", "type": "invoke", "f": "echo", "key": "n2"},
        {"t_us": 800, "kind": "op", "node": "n1", "type": "ok", "f": "echo", "key": "n2"},
    ]
    trace = write_run(tmp_path, sorted(records, key=lambda r: r["t_us"]))
    windows = stats.fault_windows(trace.events)
    spans = {(w.fault, w.start_us, w.end_us) for w in windows.itertuples()}
    assert spans == {
        ("partition", 100, 300),
        ("crash", 150, 400),
        ("stall", 500, 550),
        ("enospc", 600, 700),
        ("fsync", 650, 650),
    }
    ops = stats.operations_for_run(trace.history, trace.events)
    assert list(ops["faults"].iloc[0]) == ["partition"]


def test_each_restore_ends_the_partition_whose_links_it_restores(tmp_path: Path) -> None:
    nodes = ["n1", "n2", "n3", "n4"]
    rest = [["n1", "n2", "n3"], ["n4"]]
    records = [
        *(start(n) for n in nodes),
        {"t_us": 100, "kind": "stall", "src": "n1", "dst": "n4", "duration_us": 1000},
        {"t_us": 200, "kind": "partition", "groups": [["n3"], ["n1", "n2", "n4"]]},  # 6 links
        {"t_us": 300, "kind": "partition", "groups": rest},  # 6, but n3<->n4 and n1->n4 cut
        {"t_us": 400, "kind": "restore", "links": 3},  # the second partition ends first
        {"t_us": 500, "kind": "restore", "links": 6},
    ]
    trace = write_run(tmp_path, records)
    spans = {
        (w.target, w.start_us, w.end_us) for w in stats.fault_windows(trace.events).itertuples()
    }
    assert spans == {
        ("n1->n4", 100, 1100),
        ("n3 | n1,n2,n4", 200, 500),
        ("n1,n2,n3 | n4", 300, 400),
    }


def test_availability_and_election_durations(tmp_path: Path) -> None:
    records = [
        start("n1"),
        start("n2"),
        start("n3"),
        role("n1", "candidate", 1, 0),
        role("n1", "leader", 1, 200),
        role("n2", "follower", 1, 210),
        {"t_us": 500, "kind": "crash", "node": "n1"},
        role("n2", "candidate", 2, 600),
        role("n2", "leader", 2, 900),
        start("n1", 940, 2),
        role("n1", "leader", 1, 950),  # a deposed leader of an old epoch does not count
        role("n3", "follower", 2, 1000),
    ]
    trace = write_run(tmp_path, records)
    lead = stats.leadership(trace.events)
    assert lead["elections_us"] == [200, 400]
    assert lead["availability"] == (300 + 100) / 1000
    timeline = stats.node_timeline(trace.events)
    spans = set(timeline.itertuples(index=False, name=None))
    assert ("n1", "process", "down", 500, 940) in spans


def test_local_analysis_turns_violations_into_run_verdicts(tmp_path: Path) -> None:
    write_run(tmp_path, [start("n1"), role("n1", "leader", 1, 5)])
    write_run(
        tmp_path, [start("n1"), start("n2"), *[role(n, "leader", 4, 9) for n in ("n1", "n2")]]
    )
    analysis = analyze_local(read_trace_pandas(str(tmp_path)))
    assert analysis.verdict_line() == "runs=2 violations=1"
    flagged = analysis.verdicts.set_index("run_id").loc[analysis.violating_runs[0]]
    assert flagged["checks"] == ["election-safety"]
    assert flagged["simulator_outcome"] == "ok"  # the analysis judged on its own
    assert isinstance(analysis.summary()["per_run"], list)
    assert pd.api.types.is_float_dtype(analysis.verdicts["availability"])


def commit(node: str, start: int, end: int, epoch: int, t_us: int) -> dict[str, Any]:
    return {
        "t_us": t_us,
        "kind": "commit",
        "node": node,
        "from_offset": start,
        "to_offset": end,
        "epoch": epoch,
        "records": "00",
    }


def test_a_leader_must_commit_through_an_entry_of_its_own_epoch(tmp_path: Path) -> None:
    """Raft's figure 8: the leader of epoch 2 may not expose epoch 1's tail (offsets 3-4)
    as committed on its own; only with its LeaderChange at offset 5 (epoch 2)."""
    elected = [start("n1"), role("n1", "follower", 1, 5), role("n1", "leader", 2, 10)]
    honest = [*elected, hw("n1", 6, 20), commit("n1", 3, 5, 1, 20), commit("n1", 5, 6, 2, 20)]
    assert run_checks(write_run(tmp_path, honest)) == []
    early = [*elected, hw("n1", 5, 20), commit("n1", 3, 5, 1, 20)]
    [found] = run_checks(write_run(tmp_path, early))
    assert found.check == "commit-own-epoch"
    assert found.message == (
        "commit-own-epoch: n1 (leader of epoch 2) advanced its high watermark to 5 over an "
        "entry of epoch 1"
    )
    # A follower applies older epochs' batches freely: the rule binds leaders.
    follower = [start("n2"), role("n2", "follower", 2, 10), hw("n2", 5, 20)]
    assert run_checks(write_run(tmp_path, [*follower, commit("n2", 3, 5, 1, 20)])) == []


def image(
    node: str,
    t_us: int,
    offset: int,
    leader: int,
    isr: list[int],
    replicas: list[int] | None = None,
) -> dict[str, Any]:
    """A ``partition-state`` event: ``node`` replayed partition 0's change at ``offset``."""
    return {
        **({"replicas": replicas} if replicas is not None else {}),
        "t_us": t_us,
        "kind": "partition-state",
        "node": node,
        "offset_end": offset,
        "topic": "jepsen",
        "topic_id": "t1",
        "partition": 0,
        "leader_id": str(leader),
        "isr": isr,
    }


def test_image_changes_replayed_after_a_restart_are_not_new_elections(tmp_path: Path) -> None:
    """n2 restarts and replays the log from its start, reporting offset 16's leader 4 after
    n1 reported offset 30's leader 5 with ISR [5, 6]: an old state, not an election. A
    leader from outside the ISR at offset 40, reported by both nodes, is one violation."""
    brokers = [
        {"t_us": 1, "kind": "broker-state", "node": "n1", "offset_end": 5, "broker": b}
        | {"fenced": False}
        for b in (4, 5, 6)
    ]
    history = [
        *brokers,
        image("n1", 10, 16, 4, [4, 5, 6]),
        image("n2", 11, 16, 4, [4, 5, 6]),
        image("n1", 20, 30, 5, [5, 6]),
        image("n2", 21, 30, 5, [5, 6]),
        {"t_us": 25, "kind": "crash", "node": "n2"},
        start("n2", 26, 2),
        image("n2", 27, 16, 4, [4, 5, 6]),
        image("n2", 27, 30, 5, [5, 6]),
    ]
    assert run_checks(write_run(tmp_path, history, scenario="metadata")) == []
    unclean = [image(node, 40 + i, 40, 4, [4]) for i, node in enumerate(("n2", "n1"))]
    [found] = run_checks(write_run(tmp_path, history + unclean, scenario="metadata"))
    assert (
        found.message
        == "leader-from-isr: jepsen-0 at offset 40 elected 4 from outside its ISR [5, 6]"
    )
    assert (found.node, found.time_virtual_us) == ("n2", 40)
    # A completed reassignment (the replicas change) may elect the replica it just added.
    moved = [image("n1", 50, 50, 5, [5, 6]), image("n1", 60, 60, 4, [4, 6], [4, 6])]
    assert run_checks(write_run(tmp_path, history + moved, scenario="metadata")) == []


def loaded(node: str, end: int, high_watermark: int, log_start: int, t_us: int) -> dict[str, Any]:
    return {
        "t_us": t_us,
        "kind": "snapshot-loaded",
        "node": node,
        "end_offset": end,
        "epoch": 1,
        "high_watermark": high_watermark,
        "log_start": log_start,
    }


def test_a_snapshot_load_must_adopt_its_end_as_high_watermark_and_log_start(
    tmp_path: Path,
) -> None:
    assert run_checks(write_run(tmp_path, [start("n1"), loaded("n1", 40, 42, 40, 10)])) == []
    [low] = run_checks(write_run(tmp_path, [start("n1"), loaded("n1", 40, 0, 40, 10)]))
    assert low.check == "snapshot-load"
    assert low.message == (
        "snapshot-load: n1 loaded the snapshot ending at 40 but its high watermark is 0"
    )
    [kept] = run_checks(write_run(tmp_path, [start("n1"), loaded("n1", 40, 40, 0, 10)]))
    assert kept.message.endswith("but its log starts at 0")


def test_a_sole_voter_never_resigns_but_one_of_three_may(tmp_path: Path) -> None:
    def resign(voters: int) -> list[dict[str, Any]]:
        led = [start("n1"), role("n1", "leader", 1, 10)]
        return [*led, role("n1", "resigned", 1, 20, voters=voters)]

    assert run_checks(write_run(tmp_path, resign(3))) == []
    # Restarting as resigned after leading is no resignation of a running leader.
    restarted = [
        start("n1"),
        role("n1", "leader", 1, 10),
        {"t_us": 15, "kind": "crash", "node": "n1"},
        start("n1", 16, 2),
        role("n1", "resigned", 1, 20, voters=1),
    ]
    assert run_checks(write_run(tmp_path, restarted)) == []
    [found] = run_checks(write_run(tmp_path, resign(1)))
    assert found.check == "check-quorum"
    assert "the sole voter, resigned epoch 1" in found.message


def test_a_cut_off_leader_must_resign_within_the_bound(tmp_path: Path) -> None:
    def spell(end_us: int | None) -> list[dict[str, Any]]:
        cut = {"t_us": 1_000_000, "kind": "quorum-cut-off", "node": "n1", "epoch": 1}
        events = [start("n1"), role("n1", "leader", 1, 10), cut]
        if end_us is not None:
            events.append({"t_us": end_us, "kind": "quorum-cut-off-end", "node": "n1", "epoch": 1})
        events.append(hw("n2", 1, 9_000_000))
        return events

    assert run_checks(write_run(tmp_path, spell(4_400_000))) == []
    [late] = run_checks(write_run(tmp_path, spell(4_600_000)))
    assert late.check == "cut-off-leader"
    assert late.message == (
        "cut-off-leader: n1 led epoch 1 for 3.6s cut off from a majority of the voters"
    )
    [never] = run_checks(write_run(tmp_path, spell(None)))  # still cut off when the run ends
    assert never.message.startswith("cut-off-leader: n1 led epoch 1 for 8.0s")


def test_a_truncation_must_not_cut_the_record_committed_at_its_offset(tmp_path: Path) -> None:
    """n2's HW (2) lags what n1 committed (offsets 0-4 of epoch 1): truncating to 3 cuts the
    committed record if the first record cut is of epoch 1, not if it is a stale one."""

    def truncate(cut_epoch: int) -> dict[str, Any]:
        return {
            "t_us": 30,
            "kind": "truncation",
            "node": "n2",
            "from_offset": 6,
            "to_offset": 3,
            "cut_epoch": cut_epoch,
        }

    before = [start("n1"), start("n2"), commit("n1", 0, 5, 1, 10), hw("n2", 2, 20)]
    assert run_checks(write_run(tmp_path, [*before, truncate(2)])) == []
    [found] = run_checks(write_run(tmp_path, [*before, truncate(1)]))
    assert found.check == "committed-lost"
    assert found.message == (
        "committed-lost: n2 truncated to 3, cutting the record of epoch 1 the cluster "
        "committed there"
    )


def test_a_node_told_to_stop_must_end_within_the_shutdown_bound(tmp_path: Path) -> None:
    """A graceful shutdown ends (exit, or a power cut meanwhile) within the bound; one still
    under way when the bound has passed, or ending late, is a controlled-shutdown violation;
    one the trace ends before the bound is not judged."""
    bound = 20_000_000

    def terminate(node: str, t_us: int) -> dict[str, Any]:
        return {"t_us": t_us, "kind": "terminate", "node": node, "incarnation": 1}

    honest = [
        start("n4"),
        start("n5"),
        terminate("n4", 1_000_000),
        {"t_us": 2_500_000, "kind": "exit", "node": "n4", "incarnation": 1},
        terminate("n5", 3_000_000),
        {"t_us": 3_000_000 + bound - 1, "kind": "crash", "node": "n5", "incarnation": 1},
        terminate("n6", 30_000_000),  # the trace ends 5 s later: not yet due
        {"t_us": 35_000_000, "kind": "heal-all"},
    ]
    assert run_checks(write_run(tmp_path, honest, scenario="metadata")) == []
    late = [
        terminate("n4", 1_000_000),
        {"t_us": 1_000_000 + bound + 1, "kind": "exit", "node": "n4", "incarnation": 1},
        terminate("n5", 2_000_000),
        {"t_us": 2_000_000 + bound + 5, "kind": "heal-all"},
    ]
    found = run_checks(write_run(tmp_path, late, scenario="kafka"))
    assert [(v.check, v.node) for v in found] == [
        ("controlled-shutdown", "n4"),
        ("controlled-shutdown", "n5"),
    ]
    assert found[0].message == (
        "controlled-shutdown: n4 was told to stop at 1.000s and was still running 20s later"
    )
