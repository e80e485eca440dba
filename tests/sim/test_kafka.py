"""The kafka scenario's checks (sim/analysis/kafka.py) on hand-made histories, and the
scenario itself: same seed, same digest, clients included."""

from __future__ import annotations

from sim.analysis import kafka as analysis
from sim.analysis.kafka import (
    COMMIT,
    OFFSET_FETCH,
    KafkaChecker,
    KafkaOp,
    PartitionStateChecker,
    PowerCuts,
    check_liveness,
)
from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import OFFSETS_LOG, run_kafka

K = "t-0"


def send(process: str, value: int, offset: int, at: int = 1, isr: tuple[int, ...] = (4, 5)):
    return KafkaOp(process, "send", K, "ok", value, offset, complete_us=at, isr=isr)


def poll(process: str, position: int, pairs: list[tuple[int, int]], hw: int, at: int = 2):
    return KafkaOp(process, "poll", K, "ok", position, hw, tuple(pairs), at, (4, 5))


def checks(*ops: KafkaOp, cuts: PowerCuts | None = None, acks_all: bool = True) -> list[str]:
    checker = KafkaChecker(acks_all=acks_all, cuts=cuts or PowerCuts())
    for op in ops:
        checker.add(op)
    return [v.check for v in checker.finish(100)]


def test_a_clean_history_has_no_violations() -> None:
    ops = [send("p0", 10, 0), send("p0", 11, 1), poll("c0", 0, [(0, 10), (1, 11)], 2)]
    assert checks(*ops) == []


def test_an_acknowledged_value_missing_below_the_reads_is_lost() -> None:
    ops = [send("p0", 10, 0), send("p1", 11, 1), poll("c0", 0, [(0, 10)], 2)]
    assert "lost-write" in checks(*ops)


def test_an_acknowledged_value_no_read_reached_is_unseen() -> None:
    assert checks(send("p0", 10, 0), poll("c0", 0, [], 0)) == ["unseen"]


def test_a_loss_is_excused_only_when_the_whole_acknowledging_isr_lost_power_after() -> None:
    ops = [send("p0", 10, 0, at=5), poll("c0", 0, [], 0, at=9)]
    partly = PowerCuts()
    partly.cut(4, 7)
    partly.cut(5, 3)  # before the acknowledgement: it still had the record afterwards
    assert checks(*ops, cuts=partly) == ["unseen"]
    wholly = PowerCuts()
    wholly.cut(4, 7)
    wholly.cut(5, 8)
    assert checks(*ops, cuts=wholly) == []


def test_a_loss_is_excused_when_a_later_isr_lost_power_while_it_stood() -> None:
    ops = [send("p0", 10, 0, at=5, isr=(4, 5, 6)), poll("c0", 0, [], 0, at=30)]
    cuts = PowerCuts()
    cuts.isr_changed(K, (4, 5, 6), 1)
    cuts.isr_changed(K, (5, 6), 10)  # 4 shrunk out: the record lives on 5 and 6
    cuts.cut(5, 12)
    assert checks(*ops, cuts=cuts) == ["unseen"]
    cuts.cut(6, 14)
    assert checks(*ops, cuts=cuts) == []
    regrown = PowerCuts()
    regrown.isr_changed(K, (5, 6), 10)
    regrown.cut(5, 12)
    regrown.isr_changed(K, (4, 5, 6), 13)  # 4 back before 6 lost power: 4 kept it
    regrown.cut(6, 14)
    assert checks(*ops, cuts=regrown) == ["unseen"]


def test_a_record_read_after_its_isr_lost_power_may_be_replaced_as_its_send_may_be_lost() -> None:
    """Kafka seed 182: the controller shrank the ISR to {6} (the brokers were fenced), the
    deposed leader 4 still acknowledged value 10 with its own ISR {4, 5, 6} (its followers
    had not heard), 5 and 6 lost power, 4 served a read of it, and 6 came back as the
    leader without it: offset 0 was reused. The send's loss is excused (the ISR {6} lost
    power while it stood), so the read of it being replaced is too; without that cut it is
    a violation."""
    isr = (4, 5, 6)
    ops = [
        KafkaOp("p0", "send", K, "ok", 10, 0, complete_us=12, isr=isr),
        KafkaOp("c0", "poll", K, "ok", 0, 1, ((0, 10),), 14, isr),
        KafkaOp("p1", "send", K, "ok", 11, 0, complete_us=30, isr=(6,)),
        KafkaOp("c1", "poll", K, "ok", 0, 1, ((0, 11),), 31, (6,)),
    ]

    def cuts(*brokers: int) -> PowerCuts:
        result = PowerCuts()
        result.isr_changed(K, isr, 1)
        result.isr_changed(K, (6,), 10)
        for broker in brokers:
            result.cut(broker, 13)
        result.isr_changed(K, (6,), 20)
        return result

    assert checks(*ops, cuts=cuts(5, 6)) == []
    assert checks(*ops, cuts=cuts(5)) == ["inconsistent-offsets"]


def test_acks_1_promises_nothing_about_sends() -> None:
    assert checks(send("p0", 10, 0), poll("c0", 0, [], 0), acks_all=False) == []


def test_one_value_at_two_offsets_is_a_duplicate() -> None:
    assert checks(poll("c0", 0, [(0, 7), (1, 7)], 2)) == ["duplicate"]
    # Acknowledged at the second offset, where it was read too: a duplicate, nothing else.
    assert checks(send("p0", 7, 1), poll("c0", 0, [(0, 7), (1, 7)], 2)) == ["duplicate"]


def test_two_values_at_one_offset_are_inconsistent() -> None:
    ops = [poll("c0", 0, [(0, 7)], 1), poll("c1", 0, [(0, 8)], 1)]
    assert checks(*ops) == ["inconsistent-offsets"]
    assert checks(send("p0", 9, 0), poll("c1", 0, [(0, 8)], 1)) == ["inconsistent-offsets"]


def test_a_producer_whose_offsets_go_back_is_non_monotonic() -> None:
    ops = [send("p0", 1, 5), send("p0", 2, 4), poll("c0", 4, [(4, 2), (5, 1)], 6)]
    assert checks(*ops) == ["nonmonotonic-send"]


def test_a_consumer_reading_back_is_non_monotonic() -> None:
    ops = [poll("c0", 0, [(0, 1), (1, 2)], 2), poll("c0", 0, [(0, 1)], 2)]
    assert checks(*ops) == ["nonmonotonic-poll"]


def test_a_consumer_jumping_over_held_offsets_skips() -> None:
    ops = [poll("c0", 0, [(0, 1), (2, 3)], 3), poll("c1", 0, [(0, 1), (1, 2), (2, 3)], 3)]
    assert checks(*ops) == ["poll-skip"]


def test_a_leader_high_watermark_moving_back_in_its_epoch_is_flagged() -> None:
    states = PartitionStateChecker()
    assert states.on_hw("n4", 1, K, 3, 10, (4, 5), 1) is None
    assert states.on_hw("n4", 1, K, 4, 8, (4, 5), 2) is None  # a new epoch starts afresh
    found = states.on_hw("n4", 1, K, 4, 7, (4, 5), 3)
    assert found is not None and found.check == "high-watermark"


def test_truncating_below_a_committed_offset_is_flagged_unless_the_isr_lost_power() -> None:
    cuts = PowerCuts()
    states = PartitionStateChecker(cuts=cuts)
    states.on_hw("n4", 1, K, 3, 10, (4, 5), 1)
    assert states.on_truncate("n6", K, 10, 2) is None
    found = states.on_truncate("n6", K, 9, 2)
    assert found is not None and found.check == "committed-truncated"
    cuts.isr_changed(K, (4, 5), 3)
    assert states.on_truncate("n6", K, 9, 4) is None  # out of the ISR: an old epoch's tail
    cuts.isr_changed(K, (4, 5, 6), 5)
    assert states.on_truncate("n6", K, 9, 6) is not None
    cuts.cut(4, 5)
    cuts.cut(5, 6)
    assert states.on_truncate("n6", K, 9, 7) is None


G = "g/t-0"


def commit(
    process: str,
    offset: int,
    start: int,
    end: int,
    status: str = "ok",
    *,
    epoch: int = 1,
    isr: tuple[int, ...] = (4, 5),
) -> KafkaOp:
    return KafkaOp(process, COMMIT, G, status, offset, None, (), end, isr, start, epoch)


def fetched(process: str, offset: int, start: int, end: int, *, epoch: int = 1) -> KafkaOp:
    return KafkaOp(process, OFFSET_FETCH, G, "ok", None, offset, (), end, (4, 5), start, epoch)


def group_checks(*ops: KafkaOp, cuts: PowerCuts | None = None) -> list[str]:
    checker = KafkaChecker(cuts=cuts or PowerCuts(), offsets_log="__consumer_offsets-1")
    for op in sorted(ops, key=lambda op: op.complete_us):
        checker.add(op)
    return [v.check for v in checker.finish(1000)]


def test_a_fetch_after_an_acknowledged_commit_sees_it_or_a_later_one() -> None:
    assert group_checks(commit("g0", 5, 1, 2), fetched("g1", 5, 3, 4)) == []
    assert group_checks(commit("g0", 5, 1, 2), commit("g0", 9, 3, 4), fetched("g1", 9, 5, 6)) == []


def test_an_acknowledged_commit_the_fetch_does_not_see_is_lost() -> None:
    assert group_checks(commit("g0", 5, 1, 2), fetched("g1", -1, 3, 4)) == ["lost-commit"]
    ops = [commit("g0", 3, 1, 2), commit("g0", 5, 3, 4), fetched("g1", 3, 5, 6)]
    assert group_checks(*ops) == ["lost-commit"]


def test_a_lower_commit_that_may_have_come_later_explains_an_older_offset() -> None:
    # g1's commit of 3 overlapped g0's commit of 5, or was never answered: it may be last.
    for late in (commit("g1", 3, 1, 4), commit("g1", 3, 1, 0, "pending")):
        assert group_checks(commit("g0", 5, 2, 3), late, fetched("g2", 3, 5, 6)) == []
    assert (
        group_checks(commit("g0", 5, 2, 3), commit("g1", 3, 1, 4, "info"), fetched("g2", 3, 5, 6))
        == []
    )
    # A refused commit never happened.
    refused = commit("g1", 3, 1, 4, "fail")
    assert group_checks(commit("g0", 5, 2, 3), refused, fetched("g2", 3, 5, 6)) == ["lost-commit"]


def test_a_fetch_overlapping_the_commit_may_miss_it() -> None:
    assert group_checks(commit("g0", 5, 1, 4), fetched("g1", -1, 3, 5)) == []


def test_a_deposed_coordinator_may_answer_from_its_older_epoch() -> None:
    ops = [commit("g0", 3, 1, 2, epoch=1), commit("g0", 5, 3, 4, epoch=2)]
    assert group_checks(*ops, fetched("g1", 3, 5, 6, epoch=1)) == []
    assert group_checks(*ops, fetched("g1", 3, 5, 6, epoch=2)) == ["lost-commit"]


def test_a_commit_whose_whole_isr_lost_power_may_be_lost() -> None:
    cuts = PowerCuts()
    cuts.cut(4, 3)
    cuts.cut(5, 4)
    ops = [commit("g0", 3, 1, 2, isr=(4, 5)), fetched("g1", -1, 5, 6)]
    assert group_checks(*ops, cuts=cuts) == []
    assert group_checks(*ops) == ["lost-commit"]


def test_a_power_cut_in_the_microsecond_of_the_acknowledgement_may_lose_the_commit() -> None:
    """kafka --reassign --brokers 5 seed 12: the whole ISR lost power in the very
    microsecond the commit was answered, after the answer, and its unsynced record with it."""
    ops = [commit("g0", 3, 1, 2, isr=(4, 5)), fetched("g1", -1, 5, 6)]
    same = PowerCuts()
    same.cut(4, 2)
    same.cut(5, 2)
    assert group_checks(*ops, cuts=same) == []
    before = PowerCuts()
    before.cut(4, 1)  # a microsecond before: restarted, the member had the record again
    before.cut(5, 2)
    assert group_checks(*ops, cuts=before) == ["lost-commit"]


def test_a_committed_offset_going_backwards_between_fetches_is_flagged() -> None:
    # A commit of 5 that timed out (info) was read, then the offset went back to 3.
    ops = [commit("g0", 3, 1, 2), commit("g0", 5, 3, 4, "info"), fetched("g1", 5, 5, 6)]
    assert group_checks(*ops, fetched("g1", 3, 7, 8)) == ["offset-backwards"]
    assert group_checks(*ops, fetched("g1", 5, 7, 8)) == []
    # ... unless a commit of 3 may have come between the two fetches.
    assert group_checks(*ops, commit("g2", 3, 6, 7), fetched("g1", 3, 7, 8)) == []
    # ... or the later fetch came from a deposed coordinator (an older epoch).
    assert group_checks(*ops, fetched("g1", 3, 7, 8, epoch=0)) == []


def test_an_offset_read_after_its_commit_was_lost_to_power_cuts_may_go_back() -> None:
    """Kafka seed 279 (5 brokers): the commit of 5 was acknowledged by ISR {8, 5, 6}; the ISR
    shrank to {5, 6} and both lost power while it stood, so the commit may be lost; the
    deposed leader 8 still answered a fetch with 5 after the cuts, and the new leader's log
    had only 3. The commit's loss is excused, so the fetch of 5 going back to 3 is too."""
    log = "__consumer_offsets-1"
    isr = (8, 5, 6)
    ops = [
        commit("g0", 3, 1, 2, isr=isr),
        commit("g0", 5, 3, 4, isr=isr),
        KafkaOp("g1", OFFSET_FETCH, G, "ok", None, 5, (), 16, isr, 15, 1),
        fetched("g2", 3, 20, 21),
    ]

    def cuts(*brokers: int) -> PowerCuts:
        result = PowerCuts()
        result.isr_changed(log, isr, 1)
        result.isr_changed(log, (5, 6), 10)
        for at, broker in enumerate(brokers, start=12):
            result.cut(broker, at)
        return result

    assert group_checks(*ops, cuts=cuts(5, 6)) == []
    assert group_checks(*ops, cuts=cuts(5)) == ["lost-commit", "offset-backwards"]


def test_the_offsets_topic_name_is_the_brokers() -> None:
    # Not imported by the analysis (Spark workers load no broker code): kept equal here.
    assert OFFSETS_LOG.startswith(f"{analysis.OFFSETS_TOPIC}-")


def test_liveness_wants_a_heal_produce_and_final_reads_to_the_high_watermark() -> None:
    heal = KafkaOp("heal", "send", K, "ok", 1, 0)
    final = KafkaOp("final", "poll", K, "ok", 0, 1, ((0, 1),))
    assert check_liveness([heal, final], 1, "t") == []
    assert check_liveness([final], 1, "t") == [
        "liveness: t-0 took no acks=all produce after the heal"
    ]
    short = KafkaOp("final", "poll", K, "ok", 0, 2, ((0, 1),))
    assert check_liveness([heal, short], 1, "t") == [
        "liveness: the final reads of t-0 did not reach its high watermark"
    ]


def test_kafka_scenario_same_seed_same_digest_with_clients() -> None:
    config = RunConfig(
        "kafka", 3, duration_s=6, faults=FAULTS + KAFKA_FAULTS, idempotent=True, partitions=2
    )
    first, second = run_kafka(config), run_kafka(config)
    assert first.ok, first.summary()
    assert first.stats["sends"] > 0 and first.stats["polls"] > 0
    assert first.stats["resends"] > 0  # the acknowledged batches resent after the heal
    assert first.digest == second.digest


def test_kafka_scenario_with_every_request_authorized() -> None:
    """The StandardAuthorizer on every node (no ACLs, allow.everyone.if.no.acl.found): the
    checks run for every client, broker and controller request under the faults, and the
    history is as clean as without them."""
    config = RunConfig(
        "kafka", 5, duration_s=6, faults=FAULTS + KAFKA_FAULTS, idempotent=True, authorizer=True
    )
    result = run_kafka(config)
    assert result.ok, result.summary()
    assert result.stats["sends"] > 0 and result.stats["polls"] > 0
