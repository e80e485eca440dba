"""The local replica state machine and the leader's high watermark and ISR logic
(broker/partition.py), sans I/O: a stand-in log that only has a log end and an epoch cache."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from broker.partition import (
    REPLICA_TRANSITIONS,
    IllegalReplicaTransition,
    Partition,
    ReplicaState,
    Transition,
)
from broker.producer_state import ProducerState
from metadata.image import PartitionRegistration

ME = 1
LAG_MS = 10_000


@dataclass
class EpochCache:
    entries: list[tuple[int, int]] = field(default_factory=list)

    def assign(self, epoch: int, offset: int) -> None:
        self.entries.append((epoch, offset))


@dataclass
class StubLog:
    log_end_offset: int = 0
    leader_epoch_cache: EpochCache = field(default_factory=EpochCache)


def registration(
    leader: int, isr: tuple[int, ...], leader_epoch: int = 1, partition_epoch: int = 1
) -> PartitionRegistration:
    return PartitionRegistration((1, 2, 3), isr, leader, leader_epoch, partition_epoch)


def replica(log_end: int = 0) -> tuple[Partition, StubLog]:
    log = StubLog(log_end)
    stub: Any = log
    return Partition("t", 0, uuid.UUID(int=1), stub, ProducerState(), ME), log


def everyone(_broker: int) -> bool:
    return True


def test_a_new_leader_records_its_epoch_start_and_restarts_follower_progress() -> None:
    partition, log = replica(log_end=7)
    transition = partition.apply(registration(ME, (1, 2, 3), leader_epoch=4), now_ms=100)
    assert (transition.before, transition.after, transition.new_epoch) == (
        ReplicaState.NONE,
        ReplicaState.LEADER,
        True,
    )
    assert log.leader_epoch_cache.entries == [(4, 7)]
    assert partition.leader_epoch_start_offset == 7
    assert sorted(partition.remote) == [2, 3]
    assert all(p.log_end_offset == -1 for p in partition.remote.values())


def test_an_isr_change_in_the_same_epoch_is_not_a_new_epoch() -> None:
    partition, log = replica(log_end=7)
    partition.apply(registration(ME, (1, 2, 3)), now_ms=0)
    partition.update_follower_fetch(2, 7, now_ms=5)
    transition = partition.apply(registration(ME, (1, 2), partition_epoch=2), now_ms=10)
    assert not transition.new_epoch
    assert log.leader_epoch_cache.entries == [(1, 7)]  # recorded once
    assert partition.remote[2].log_end_offset == 7  # progress kept


@pytest.mark.parametrize(
    ("steps", "legal"),
    [
        (["leader", "follower", "leader"], True),
        (["follower", "follower2"], True),
        (["leader", "stop"], True),
        (["follower", "stop", "leader"], False),  # a stopped replica never comes back
        (["stop", "stop"], False),
    ],
)
def test_only_the_table_s_transitions_are_legal(steps: list[str], legal: bool) -> None:
    partition, _ = replica()
    epoch = 0

    def step(name: str) -> None:
        nonlocal epoch
        epoch += 1
        if name == "stop":
            partition.stop()
        else:
            leader = ME if name == "leader" else 2
            partition.apply(registration(leader, (1, 2, 3), leader_epoch=epoch), now_ms=0)

    if legal:
        for name in steps:
            step(name)
    else:
        with pytest.raises(IllegalReplicaTransition):
            for name in steps:
                step(name)
    assert (ReplicaState.STOPPED, ReplicaState.LEADER) not in REPLICA_TRANSITIONS


def test_a_leader_epoch_going_backwards_is_illegal() -> None:
    partition, _ = replica()
    partition.apply(registration(2, (1, 2, 3), leader_epoch=5, partition_epoch=5), now_ms=0)
    with pytest.raises(IllegalReplicaTransition):
        partition.apply(registration(ME, (1, 2, 3), leader_epoch=4, partition_epoch=9), 0)


def test_an_image_older_than_the_alter_partition_answer_is_skipped() -> None:
    """Kafka seed 80: the leader's AlterPartition answer (partition epoch 6) arrived before
    the replay of the earlier change at epoch 5; that image must not undo the ISR (it
    raised IllegalReplicaTransition and killed the broker)."""
    partition, _ = replica(log_end=10)
    partition.apply(registration(ME, (1, 2, 3), leader_epoch=1, partition_epoch=4), now_ms=0)
    partition.pending_isr = (1, 2)
    assert partition.isr_committed(1, 6, (1, 2))
    stale = registration(ME, (1, 2, 3), leader_epoch=1, partition_epoch=5)
    assert partition.apply(stale, now_ms=0) == Transition(
        ReplicaState.LEADER, ReplicaState.LEADER, new_epoch=False
    )
    assert (partition.isr, partition.partition_epoch) == ((1, 2), 6)
    partition.apply(registration(ME, (1, 2), leader_epoch=1, partition_epoch=6), now_ms=0)
    assert (partition.isr, partition.partition_epoch) == ((1, 2), 6)


def test_the_high_watermark_is_the_least_log_end_over_the_isr_and_never_goes_back() -> None:
    partition, log = replica(log_end=0)
    partition.apply(registration(ME, (1, 2, 3)), now_ms=0)
    log.log_end_offset = 10
    assert not partition.maybe_increment_high_watermark(0, LAG_MS, everyone)  # LEOs unknown
    partition.update_follower_fetch(2, 10, now_ms=1)
    partition.update_follower_fetch(3, 4, now_ms=1)
    assert partition.maybe_increment_high_watermark(1, LAG_MS, everyone)
    assert partition.high_watermark == 4
    partition.update_follower_fetch(3, 10, now_ms=2)
    partition.maybe_increment_high_watermark(2, LAG_MS, everyone)
    assert partition.high_watermark == 10
    # A follower reporting less (it restarted and truncated) never pulls it back.
    partition.update_follower_fetch(3, 6, now_ms=3)
    assert not partition.maybe_increment_high_watermark(3, LAG_MS, everyone)
    assert partition.high_watermark == 10


def test_the_high_watermark_waits_for_a_replica_being_added() -> None:
    partition, log = replica(log_end=10)
    partition.apply(registration(ME, (1, 2)), now_ms=0)
    partition.update_follower_fetch(2, 10, now_ms=1)
    partition.update_follower_fetch(3, 10, now_ms=1)
    assert partition.isr_to_expand(3, everyone) == (1, 2, 3)
    partition.pending_isr = (1, 2, 3)
    log.log_end_offset = 12
    partition.update_follower_fetch(2, 12, now_ms=2)
    partition.maybe_increment_high_watermark(2, LAG_MS, everyone)
    assert partition.high_watermark == 10  # 3 is in the maximal ISR at 10
    partition.update_follower_fetch(3, 12, now_ms=3)
    partition.maybe_increment_high_watermark(3, LAG_MS, everyone)
    assert partition.high_watermark == 12


def test_a_replica_joins_only_at_the_high_watermark_and_this_epoch_s_start() -> None:
    partition, _log = replica(log_end=10)
    partition.apply(registration(ME, (1, 2), leader_epoch=3), now_ms=0)  # epoch starts at 10
    partition.update_follower_fetch(2, 10, now_ms=1)
    partition.maybe_increment_high_watermark(1, LAG_MS, everyone)
    partition.update_follower_fetch(3, 9, now_ms=1)
    assert partition.isr_to_expand(3, everyone) is None  # below the HW and epoch start
    partition.update_follower_fetch(3, 10, now_ms=2)
    assert partition.isr_to_expand(3, lambda broker: broker != 3) is None  # fenced
    assert partition.isr_to_expand(3, everyone) == (1, 2, 3)
    partition.pending_isr = (1, 2, 3)
    assert partition.isr_to_expand(3, everyone) is None  # one proposal at a time


def test_a_follower_not_caught_up_within_the_lag_time_leaves_the_isr() -> None:
    partition, log = replica(log_end=10)
    partition.apply(registration(ME, (1, 2, 3)), now_ms=0)
    partition.update_follower_fetch(2, 10, now_ms=1_000)
    partition.update_follower_fetch(3, 10, now_ms=1_000)
    log.log_end_offset = 20
    partition.update_follower_fetch(2, 20, now_ms=9_000)
    assert partition.isr_to_shrink(now_ms=LAG_MS, lag_time_max_ms=LAG_MS) is None
    # 3 was last caught up at 1 000 ms: past the lag time at 11 001 ms.
    assert partition.isr_to_shrink(now_ms=11_001, lag_time_max_ms=LAG_MS) == (1, 2)


def test_a_follower_fetching_steadily_behind_a_moving_log_stays_caught_up() -> None:
    """Kafka's rule: reaching the leader's log end as of the previous fetch counts as
    caught up at that fetch's time, so a busy partition does not evict a keeping-up
    follower."""
    partition, log = replica(log_end=10)
    partition.apply(registration(ME, (1, 2)), now_ms=0)
    for now in range(0, 30_000, 500):
        partition.update_follower_fetch(2, log.log_end_offset, now_ms=now)
        log.log_end_offset += 5  # appends land between every two fetches
    assert partition.isr_to_shrink(now_ms=30_000, lag_time_max_ms=LAG_MS) is None


def test_an_alter_partition_answer_older_than_the_image_is_ignored() -> None:
    partition, _ = replica(log_end=10)
    partition.apply(registration(ME, (1, 2, 3), partition_epoch=5), now_ms=0)
    partition.pending_isr = (1, 2)
    assert not partition.isr_committed(1, 5, (1, 2))
    assert partition.isr == (1, 2, 3) and partition.pending_isr is None
    partition.pending_isr = (1, 2)
    assert partition.isr_committed(1, 6, (1, 2))
    assert (partition.isr, partition.partition_epoch) == ((1, 2), 6)


def test_a_follower_high_watermark_never_passes_its_log_end() -> None:
    partition, _log = replica(log_end=5)
    partition.apply(registration(2, (1, 2, 3)), now_ms=0)
    partition.follower_high_watermark(9)
    assert partition.high_watermark == 5
