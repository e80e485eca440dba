"""Each invariant of the raft scenario fires on a crafted history that breaks it, and stays
quiet on the nearest honest one, so a checker that is switched off or broken fails here."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest

from log.records import Record
from raft.core import HighWatermarkAdvanced, Role, RoleChanged, Truncated
from raft.driver import CommittedBatch
from raft.snapshot import SnapshotId
from sim.scenarios.dual_leader import DualLeaderWatch
from sim.scenarios.raft_checks import Checker, Entry, NodeListener
from sim.world import World
from tests.sim.fakes import Process


@dataclass(slots=True)
class Log:
    """A node's log as the checker sees it: offset -> (epoch, value)."""

    held: dict[int, Entry] = field(default_factory=dict)
    cut: tuple[int, int] | None = None
    start: int | None = None  # where the log starts when a snapshot holds what is below

    def start_offset(self) -> int:
        return self.start if self.start is not None else min(self.held, default=0)

    def end_offset(self) -> int:
        return max(self.held, default=-1) + 1

    def epoch_for_offset(self, offset: int) -> int:
        return self.held[offset][0] if offset in self.held else 0

    def entries(self) -> dict[int, Entry]:
        return dict(self.held)

    def cut_entry_epoch(self, offset: int) -> int | None:
        return self.cut[1] if self.cut is not None and self.cut[0] == offset else None

    def truncate(self, offset: int) -> Truncated:
        end = self.end_offset()
        self.cut = (offset, self.held[offset][0])
        self.held = {o: e for o, e in self.held.items() if o < offset}
        return Truncated(end, offset)


@dataclass(slots=True)
class Node:
    """A running node as the checker sees it."""

    high_watermark: int = 0


def log_of(*epochs: int) -> Log:
    return Log({offset: (epoch, f"r{offset}".encode()) for offset, epoch in enumerate(epochs)})


@pytest.fixture
def checker(world: World) -> Checker:
    return Checker(world.trace)


def node(checker: Checker, name: str, log: Log, *, voter: bool = True) -> NodeListener:
    process = Process(name)
    if voter:
        checker.voter_logs[name] = log
        checker.voter_alive[name] = process
    return checker.listener(process, log, Node())


def lead(listener: NodeListener, epoch: int) -> None:
    listener.handle_event(RoleChanged(Role.LEADER, epoch, int(listener.process.name[1:])))


def follow(listener: NodeListener, epoch: int, leader: int = 1) -> None:
    listener.handle_event(RoleChanged(Role.FOLLOWER, epoch, leader))


def commit(listener: NodeListener, base: int, epoch: int, *values: bytes) -> None:
    records = tuple(Record(None, v, 0, offset_delta=i) for i, v in enumerate(values))
    listener.handle_commit(CommittedBatch(base, epoch, False, records))


def kind(checker: Checker) -> str | None:
    return None if checker.violation is None else checker.violation.split(":")[0]


def test_epoch_durable_fires_when_a_node_forgets_its_epoch(checker: Checker) -> None:
    n1 = node(checker, "n1", log_of())
    follow(n1, 3)
    follow(n1, 3)
    assert kind(checker) is None
    restarted = checker.listener(Process("n1", incarnation=2), log_of(), Node())
    follow(restarted, 2)
    assert kind(checker) == "epoch-durable"


def test_election_safety_fires_on_two_leaders_of_one_epoch(checker: Checker) -> None:
    n1, n2 = node(checker, "n1", log_of()), node(checker, "n2", log_of())
    lead(n1, 1)
    lead(n2, 2)
    assert kind(checker) is None
    lead(n1, 2)
    assert kind(checker) == "election-safety"


def test_leader_completeness_fires_on_a_leader_missing_a_committed_record(
    checker: Checker,
) -> None:
    n1, n2 = node(checker, "n1", log_of(1, 1)), node(checker, "n2", log_of(1))
    commit(n1, 0, 1, b"r0", b"r1")
    lead(n1, 2)
    assert kind(checker) is None
    lead(n2, 3)
    assert kind(checker) == "leader-completeness"


def test_hw_monotone_fires_when_a_high_watermark_moves_back(checker: Checker) -> None:
    n1 = node(checker, "n1", log_of(1, 1, 1))
    n1.handle_event(HighWatermarkAdvanced(2))
    n1.handle_event(HighWatermarkAdvanced(2))
    assert kind(checker) is None
    n1.handle_event(HighWatermarkAdvanced(1))
    assert kind(checker) == "hw-monotone"


def test_commit_own_epoch_fires_when_a_leader_commits_only_older_entries(
    checker: Checker,
) -> None:
    logs = [log_of(1, 1, 2), log_of(1, 1, 2), log_of(1, 1)]
    n1, *_ = [node(checker, f"n{i + 1}", log) for i, log in enumerate(logs)]
    lead(n1, 2)
    n1.handle_event(HighWatermarkAdvanced(3))  # over its own entry at offset 2: fine
    assert kind(checker) is None
    other = Checker(checker.trace)
    m1, *_ = [node(other, f"n{i + 1}", log) for i, log in enumerate(logs)]
    lead(m1, 2)
    m1.handle_event(HighWatermarkAdvanced(2))  # over epoch-1 entries alone (figure 8)
    assert kind(other) == "commit-own-epoch"


def test_committed_majority_fires_when_a_leader_commits_on_a_minority(
    checker: Checker,
) -> None:
    n1 = node(checker, "n1", log_of(1, 1))
    node(checker, "n2", log_of(1, 1))
    node(checker, "n3", log_of(1))
    lead(n1, 1)
    n1.handle_event(HighWatermarkAdvanced(2))  # offset 1 on n1 and n2: a majority
    assert kind(checker) is None
    other = Checker(checker.trace)
    m1 = node(other, "n1", log_of(1, 1))
    node(other, "n2", log_of(1))
    node(other, "n3", log_of(1, 2))  # a different record (epoch 2) at offset 1
    lead(m1, 1)
    m1.handle_event(HighWatermarkAdvanced(2))
    assert kind(other) == "committed-majority"


def test_committed_majority_gives_a_down_voter_the_benefit_of_the_doubt(
    checker: Checker,
) -> None:
    n1 = node(checker, "n1", log_of(1, 1))
    node(checker, "n2", log_of(1))
    node(checker, "n3", log_of(1))
    checker.voter_alive["n2"].alive = False
    lead(n1, 1)
    n1.handle_event(HighWatermarkAdvanced(2))
    assert kind(checker) is None


def test_committed_majority_judges_voters_by_directory_id(checker: Checker) -> None:
    """KIP-853: a voter is a (name, directory id) replica. n3's disk was wiped (d3 -> d4):
    the voter entry naming d3 is judged by what d3 held when its disk went (raft seed 112
    with 5 voters: a pre-wipe acknowledgement counted, as it should), and the new disk's
    log never stands in for it."""
    d = {i: uuid.UUID(int=i) for i in range(1, 5)}
    voters = [("n1", d[1]), ("n2", d[2]), ("n3", d[3])]
    checker.voters_of = lambda _leader: tuple(voters)
    n1 = node(checker, "n1", log_of(1, 1))
    node(checker, "n2", log_of(1))
    node(checker, "n3", log_of(1, 1))
    checker.directories.update({"n1": d[1], "n2": d[2], "n3": d[3]})
    checker.retire("n3")  # its last log held offset 1
    node(checker, "n3", log_of())  # the fresh disk
    checker.directories["n3"] = d[4]
    lead(n1, 1)
    n1.handle_event(HighWatermarkAdvanced(2))
    assert kind(checker) is None
    # The other way round: the old replica never held offset 1, the new one does.
    other = Checker(checker.trace)
    other.voters_of = lambda _leader: tuple(voters)
    m1 = node(other, "n1", log_of(1, 1))
    node(other, "n2", log_of(1))
    node(other, "n3", log_of(1))
    other.directories.update({"n1": d[1], "n2": d[2], "n3": d[3]})
    other.retire("n3")
    node(other, "n3", log_of(1, 1))
    other.directories["n3"] = d[4]
    lead(m1, 1)
    m1.handle_event(HighWatermarkAdvanced(2))
    assert kind(other) == "committed-majority"
    assert "n3 (wiped)" in (other.violation or "")


def test_committed_lost_fires_on_truncation_below_the_nodes_high_watermark(
    checker: Checker,
) -> None:
    log = log_of(1, 1, 1, 1)
    n1 = node(checker, "n1", log)
    n1.handle_event(HighWatermarkAdvanced(2))
    n1.handle_event(log.truncate(3))
    assert kind(checker) is None
    n1.handle_event(log.truncate(1))
    assert kind(checker) == "committed-lost"


def test_committed_lost_compares_with_what_the_cluster_committed(checker: Checker) -> None:
    """A lagging follower (its own high watermark still 0) cuts a record the cluster
    committed: lost, though the node never learnt it was committed."""
    leader_log, lagging = log_of(1, 1), log_of(1, 1)
    n1, n3 = node(checker, "n1", leader_log), node(checker, "n3", lagging)
    commit(n1, 0, 1, b"r0", b"r1")
    n3.handle_event(lagging.truncate(1))
    assert kind(checker) == "committed-lost"
    assert "epoch 1 the cluster committed" in (checker.violation or "")


def test_committed_lost_allows_cutting_a_stale_record_at_a_committed_offset(
    checker: Checker,
) -> None:
    """A deposed leader's unreplicated record (epoch 1) sits where epoch 2 committed
    another: cutting it is the protocol working."""
    n1, stale = node(checker, "n1", log_of(1, 2)), log_of(1, 1)
    n2 = node(checker, "n2", stale)
    commit(n1, 0, 1, b"r0")
    commit(n1, 1, 2, b"r1")
    n2.handle_event(stale.truncate(1))
    assert kind(checker) is None


def test_apply_order_fires_when_a_node_skips_offsets(checker: Checker) -> None:
    n1 = node(checker, "n1", log_of())
    commit(n1, 0, 1, b"a", b"b")
    commit(n1, 2, 1, b"c")
    assert kind(checker) is None
    commit(n1, 5, 1, b"f")
    assert kind(checker) == "apply-order"


def test_state_machine_safety_fires_on_two_records_at_one_offset(checker: Checker) -> None:
    n1, n2, n3 = (node(checker, f"n{i}", log_of()) for i in (1, 2, 3))
    commit(n1, 0, 1, b"a", b"b")
    commit(n2, 0, 1, b"a", b"b")
    assert kind(checker) is None
    commit(n3, 0, 1, b"a", b"x")
    assert kind(checker) == "state-machine-safety"


def test_snapshot_fires_on_a_snapshot_that_disagrees_with_the_committed_log(
    checker: Checker,
) -> None:
    n1, n2 = node(checker, "n1", log_of()), node(checker, "n2", Log(start=2))
    n2.node.high_watermark = 2  # type: ignore[misc]
    commit(n1, 0, 1, b"a", b"b")
    n2.handle_load_snapshot(SnapshotId(2, 1), n1.snapshot_records())
    assert kind(checker) is None and n2.applied == 2
    forged = [Record(b"0:1", b"a", 0), Record(b"1:1", b"z", 0)]
    n2.handle_load_snapshot(SnapshotId(2, 1), forged)
    assert kind(checker) == "snapshot"


def test_acked_lost_fires_on_an_acknowledged_record_not_committed(checker: Checker) -> None:
    n1 = node(checker, "n1", log_of())
    commit(n1, 0, 1, b"a", b"b")
    checker.acked = {0: b"a", 1: b"b"}
    checker.check_acked()
    assert kind(checker) is None
    checker.acked[2] = b"c"
    checker.check_acked()
    assert kind(checker) == "acked-lost"


def test_a_dead_incarnation_reports_nothing(checker: Checker) -> None:
    n1 = node(checker, "n1", log_of(1, 1))
    n1.handle_event(HighWatermarkAdvanced(2))
    n1.process.alive = False
    n1.handle_event(HighWatermarkAdvanced(1))
    commit(n1, 7, 1, b"x")
    assert kind(checker) is None


def test_check_quorum_fires_when_a_stale_leader_outstays_the_bound(checker: Checker) -> None:
    n1, n2 = node(checker, "n1", log_of()), node(checker, "n2", log_of())
    lead(n1, 1)
    lead(n2, 2)
    processes = checker.voter_alive
    checker.check_dual_leadership(0.0, processes)
    checker.check_dual_leadership(1.0, processes)
    assert kind(checker) is None
    checker.check_dual_leadership(1.6, processes)
    assert kind(checker) == "check-quorum"


def test_dual_leadership_is_forgiven_when_the_stale_leader_stops() -> None:
    watch = DualLeaderWatch(bound_s=1.5)
    assert watch.observe(0.0, {"n1": 1, "n2": 2}) is None
    assert watch.observe(1.0, {"n2": 2}) is None  # n1 resigned (or was paused / crashed)
    assert watch.observe(2.0, {"n1": 1, "n2": 2}) is None  # a new stale stretch starts
    assert watch.observe(3.4, {"n1": 1, "n2": 2}) is None
    found = watch.observe(3.6, {"n1": 1, "n2": 2})
    assert found is not None and found.startswith("check-quorum: n1 still leads epoch 1")


def loaded(checker: Checker, high_watermark: int, log_start: int) -> NodeListener:
    """n2 loads n1's snapshot of two committed records, its core then at the given high
    watermark and its log at the given start."""
    n1 = node(checker, "n1", log_of())
    commit(n1, 0, 1, b"a", b"b")
    n2 = checker.listener(Process("n2"), Log(start=log_start), Node(high_watermark))
    n2.handle_load_snapshot(SnapshotId(2, 1), n1.snapshot_records())
    return n2


def test_snapshot_load_is_quiet_when_the_node_adopts_the_snapshot(checker: Checker) -> None:
    loaded(checker, high_watermark=3, log_start=2)
    assert kind(checker) is None


def test_snapshot_load_fires_when_the_high_watermark_stays_below_the_snapshot(
    checker: Checker,
) -> None:
    loaded(checker, high_watermark=0, log_start=2)
    assert kind(checker) == "snapshot-load" and "high watermark is 0" in str(checker.violation)


def test_snapshot_load_fires_when_the_log_start_does_not_move(checker: Checker) -> None:
    loaded(checker, high_watermark=2, log_start=0)
    assert kind(checker) == "snapshot-load" and "log starts at 0" in str(checker.violation)


def test_a_sole_voter_that_resigns_fires(world: World) -> None:
    checker = Checker(world.trace, voters=1)
    n1 = node(checker, "n1", log_of())
    lead(n1, 1)
    n1.handle_event(RoleChanged(Role.RESIGNED, 1, 1))
    assert kind(checker) == "check-quorum" and "sole voter" in str(checker.violation)


def test_a_resigning_leader_of_three_voters_and_a_restart_as_resigned_are_quiet(
    checker: Checker,
) -> None:
    n1 = node(checker, "n1", log_of())
    lead(n1, 1)
    n1.handle_event(RoleChanged(Role.RESIGNED, 1, 1))
    sole = Checker(checker.trace, voters=1)
    restarted = sole.listener(Process("n1", incarnation=2), log_of(), Node())
    restarted.handle_event(RoleChanged(Role.RESIGNED, 1, 1))  # it led before the restart
    assert kind(checker) is None and kind(sole) is None


def test_cut_off_leader_fires_when_it_outstays_the_bound(checker: Checker) -> None:
    n1 = node(checker, "n1", log_of())
    lead(n1, 1)
    checker.check_cut_off(0.0, {"n1"})
    checker.check_cut_off(3.5, {"n1"})
    assert kind(checker) is None
    checker.check_cut_off(3.6, {"n1"})
    assert kind(checker) == "cut-off-leader"


def test_cut_off_leader_is_quiet_when_the_leader_resigns_or_reconnects(
    checker: Checker,
) -> None:
    n1 = node(checker, "n1", log_of())
    lead(n1, 1)
    checker.check_cut_off(0.0, {"n1"})
    checker.check_cut_off(2.6, set())  # reconnected (or resigned) within the bound
    checker.check_cut_off(3.0, {"n1"})  # a new spell starts
    checker.check_cut_off(6.4, {"n1"})
    n1.handle_event(RoleChanged(Role.RESIGNED, 1, 1))
    checker.check_cut_off(6.45, {"n1"})  # no longer a leader: the spell lasted 3.45 s
    assert kind(checker) is None
