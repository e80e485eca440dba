"""The transactional checks (sim/analysis/txn.py) on crafted histories: each anomaly is
found in a history that has it, and its honest neighbour passes, so a check switched off
fails here."""

from __future__ import annotations

from sim.analysis.kafka import TXN_STATE_TOPIC, BatchIdentity, PowerCuts, check_duplicate_answer
from sim.analysis.txn import LSO_STUCK, RC_POLL, TXN_END, TXN_SEND, TxnChecker, TxnOp

P0, P1 = "jepsen-txn-0", "jepsen-txn-1"


def send(value: int, key: str, offset: int, txn: str, at: int) -> TxnOp:
    return TxnOp("tp0.0", TXN_SEND, key, "ok", value, offset, txn=txn, time_us=at, isr=(4, 5))


def end(txn: str, commit: bool, status: str, at: int) -> TxnOp:
    return TxnOp("tp0.0", TXN_END, txn, status, int(commit), time_us=at)


def poll(
    key: str,
    position: int,
    records: tuple[tuple[int, int], ...],
    lso: int,
    at: int,
    process: str = "rc0.0",
    reached: int | None = None,
    invoked: int = -1,
) -> TxnOp:
    if reached is None:
        reached = records[-1][0] + 1 if records else position
    return TxnOp(
        process,
        RC_POLL,
        key,
        "ok",
        position,
        lso,
        records,
        time_us=at,
        reached=reached,
        invoke_us=invoked,
    )


def committed(txn: str, at: int) -> list[TxnOp]:
    return [end(txn, True, "invoke", at), end(txn, True, "ok", at + 1)]


def checks_of(ops: list[TxnOp], cuts: PowerCuts | None = None) -> list[str]:
    checker = TxnChecker(cuts=cuts or PowerCuts())
    for op in ops:
        checker.add(op)
    checker.finish(10_000)
    return [v.check for v in checker.violations]


def two_partition_commit() -> list[TxnOp]:
    return [send(1, P0, 0, "t1", 10), send(2, P1, 0, "t1", 11), *committed("t1", 20)]


def test_an_honest_history_passes() -> None:
    ops = [
        *two_partition_commit(),
        send(3, P0, 2, "t2", 30),  # offset 1 is t1's commit marker
        end("t2", False, "invoke", 40),
        end("t2", False, "ok", 41),
        poll(P0, 0, ((0, 1),), 4, 50),
        poll(P1, 0, ((0, 2),), 2, 51),
        poll(P0, 1, (), 4, 52),  # t2's record dropped, its marker at 3 passed
    ]
    assert checks_of(ops) == []


def test_aborted_read() -> None:
    ops = [send(3, P0, 0, "t2", 30), end("t2", False, "invoke", 40), end("t2", False, "ok", 41)]
    assert checks_of([*ops, poll(P0, 0, ((0, 3),), 2, 50)]) == ["aborted-read"]
    # Read before the abort was acknowledged: still an aborted read, judged at the end.
    assert checks_of([*ops[:2], poll(P0, 0, ((0, 3),), 2, 40), ops[2]]) == ["aborted-read"]


def test_aborted_read_after_a_power_cut_that_may_have_lost_the_marker() -> None:
    """Kafka seed 10 with --transactions, in small: t2's abort is acknowledged, then the
    whole ISR of P0 loses power, which may lose the abort marker and leave t2 open there
    (the producer's next commit then ends it as committed, as in Kafka). A read after the
    cut is excused as the marker's loss is; a read before it, or with no cut, is not."""
    aborted = [send(3, P0, 0, "t2", 30), end("t2", False, "invoke", 40), end("t2", False, "ok", 41)]
    cuts = PowerCuts()
    cuts.isr_changed(P0, (4, 5), 0)
    for broker in (4, 5):
        cuts.cut(broker, 45)
    after = poll(P0, 0, ((0, 3),), 2, 50, invoked=49)
    assert checks_of([*aborted, after], cuts) == []
    assert checks_of([*aborted, after]) == ["aborted-read"]
    before = poll(P0, 0, ((0, 3),), 2, 50, invoked=44)  # answered before the cut, maybe
    assert checks_of([*aborted, before], cuts) == ["aborted-read"]
    one = PowerCuts()
    one.isr_changed(P0, (4, 5), 0)
    one.cut(4, 45)  # a member left with power keeps the marker
    assert checks_of([*aborted, after], one) == ["aborted-read"]


def test_intermediate_read() -> None:
    early = [send(1, P0, 0, "t1", 10), poll(P0, 0, ((0, 1),), 1, 15), *committed("t1", 20)]
    assert checks_of(early) == ["intermediate-read"]
    late = [send(1, P0, 0, "t1", 10), *committed("t1", 20), poll(P0, 0, ((0, 1),), 2, 25)]
    assert checks_of(late) == []


def test_an_intermediate_read_after_the_coordinators_whole_isr_lost_power_is_excused() -> None:
    """Kafka seed 269 at 5 brokers: t1's abort went unanswered when every member of its
    coordinator's __transaction_state ISR lost power; back with an older state (an earlier
    transaction still to complete) the coordinator wrote that one's commit markers again,
    which under TV1 ended t1 as a commit, so its write was read before any commit was
    asked for. Excused only when the cut falls between the write and the read, and the
    whole ISR lost power."""
    ops = [
        send(1, P0, 0, "t1", 10),
        end("t1", False, "invoke", 12),
        end("t1", False, "info", 40),
        poll(P0, 0, ((0, 1),), 2, 60, invoked=55),
    ]
    assert checks_of(ops) == ["intermediate-read"]

    def coordinator_cut(*brokers: int, at: int) -> PowerCuts:
        cuts = PowerCuts()
        cuts.isr_changed(f"{TXN_STATE_TOPIC}-2", (4, 5), 0)
        for broker in brokers:
            cuts.cut(broker, at)
        return cuts

    assert checks_of(ops, coordinator_cut(4, 5, at=30)) == []
    assert checks_of(ops, coordinator_cut(4, at=30)) == ["intermediate-read"]  # 5 kept it
    assert checks_of(ops, coordinator_cut(4, 5, at=5)) == ["intermediate-read"]  # before
    assert checks_of(ops, coordinator_cut(4, 5, at=58)) == ["intermediate-read"]  # after


def test_lost_committed_write_and_its_power_cut_excuse() -> None:
    ops = [*two_partition_commit(), send(5, P0, 2, "t3", 30), *committed("t3", 40)]
    reads = [poll(P0, 0, ((2, 5),), 4, 50), poll(P1, 0, (), 2, 51)]
    assert checks_of([*ops, *reads]) == ["lost-committed-write"]
    cuts = PowerCuts()
    for broker in (4, 5):  # the whole ISR lost power after the writes
        cuts.cut(broker, 25)
    assert checks_of([*ops, *reads], cuts) == []


def test_a_write_answered_as_the_duplicate_of_a_reissued_epochs_batch_is_excused() -> None:
    """After a power cut on every replica of a __transaction_state partition, the
    coordinator may hand a producer id and epoch out again; the new producer's first batch
    then repeats an old batch's identity, the leader answers it as that duplicate, and its
    records never enter the log (kafka --transactions --brokers 5 seed 86). The excused
    duplicate answer excuses that write's loss too, and only after such a cut."""
    old = BatchIdentity(2000, 1, 0, 0, 1553660678)
    new = BatchIdentity(2000, 1, 0, 0, 2580043477)
    ops = [send(5, P0, 2, "t3", 30), *committed("t3", 40)]
    reads = [poll(P0, 2, ((2, 7),), 4, 50)]  # the old batch's value where 5 was acknowledged
    intact = PowerCuts()
    intact.isr_changed(f"{TXN_STATE_TOPIC}-0", (4, 5), 1)
    intact.cut(4, 10)  # one replica of the coordinator's log kept it: nothing taken back
    assert check_duplicate_answer("n5", P0, 3, 2, new, 2, old, 29, intact) is not None
    assert checks_of([*ops, *reads], intact) == ["lost-committed-write"]
    lost = PowerCuts()
    lost.isr_changed(f"{TXN_STATE_TOPIC}-0", (4, 5), 1)
    lost.cut(4, 10)
    lost.cut(5, 11)
    assert check_duplicate_answer("n5", P0, 3, 2, new, 2, old, 29, lost) is None
    assert checks_of([*ops, *reads], lost) == []


def test_torn_transaction() -> None:
    reads = [poll(P0, 0, ((0, 1),), 2, 30), poll(P1, 0, ((1, 9),), 3, 31)]
    assert checks_of([*two_partition_commit(), *reads]) == ["torn-transaction"]
    whole = [poll(P0, 0, ((0, 1),), 2, 30), poll(P1, 0, ((0, 2),), 2, 31)]
    assert checks_of([*two_partition_commit(), *whole]) == []


def after_a_power_cut() -> list[TxnOp]:
    """Kafka seed 3 with --transactions, in small: reads reach offset 6 of P0; a power cut of
    its whole ISR leaves it ending at 3, with a transaction open at 2 that no coordinator
    will end, so the last stable offset stays at 2. Then t9 writes at offset 4 of P0 and at
    offset 0 of P1, and commits; its write on P1 is read, the one on P0 stays behind the LSO
    (not lost: every read of P0 invoked since reaches only offset 2)."""
    return [
        send(1, P0, 0, "t1", 10),
        *committed("t1", 11),
        poll(P0, 0, ((0, 1),), 7, 20, reached=7),  # offsets 2-6: t2's write and markers
        send(5, P0, 4, "t9", 40),
        send(6, P1, 0, "t9", 41),
        *committed("t9", 42),
        poll(P1, 0, ((0, 6),), 2, 50),
        poll(P0, 1, (), 2, 51, process="txn-final", reached=2, invoked=49),
    ]


def test_reads_of_a_log_before_a_power_cut_pass_no_later_write() -> None:
    """A poll invoked before a write was acknowledged may have read a longer log that a
    power cut then shortened: it says nothing of the write's offset (the false torn
    transaction of kafka seed 3). A read invoked after the write that passes its offset
    without it still makes the transaction torn, or its lone write lost."""
    assert checks_of(after_a_power_cut()) == []
    passed = poll(P0, 2, (), 6, 60, process="txn-final", reached=6, invoked=55)
    assert checks_of([*after_a_power_cut(), passed]) == ["torn-transaction"]
    # Invoked before the write was acknowledged but answered after it: not a reader of it.
    early = poll(P0, 2, (), 6, 60, process="txn-final", reached=6, invoked=39)
    assert checks_of([*after_a_power_cut(), early]) == []
    lone = [send(5, P0, 4, "t9", 40), *committed("t9", 42)]
    before = poll(P0, 0, (), 7, 20, reached=7, invoked=19)
    assert checks_of([before, *lone]) == []
    assert checks_of([before, *lone, passed]) == ["lost-committed-write"]


def test_a_read_from_above_a_write_does_not_pass_it() -> None:
    """Kafka seed 8 with --transactions, in small: the worker restarts at the committed input
    offset 5, which a power cut had taken from P0 and later writes regrew; its polls from 5
    reach 7 but never read over t9's committed write at 4, which the LSO (held at 2 by a
    transaction the cut left open) keeps from every reader. Not torn: a read from 4 or
    below that reaches past it is."""
    above = poll(P0, 5, (), 2, 60, process="ctp3", reached=7, invoked=55)
    assert checks_of([*after_a_power_cut(), above]) == []
    over = poll(P0, 4, (), 6, 60, process="ctp3", reached=7, invoked=55)
    assert checks_of([*after_a_power_cut(), over]) == ["torn-transaction"]


def test_duplicate_beyond_lso_and_nonmonotonic() -> None:
    base = two_partition_commit()
    assert checks_of([*base, poll(P0, 0, ((0, 1), (3, 1)), 5, 30)]) == ["duplicate"]
    assert checks_of([*base, poll(P0, 0, ((0, 1),), 0, 30)]) == ["beyond-lso"]
    again = [poll(P0, 0, ((0, 1),), 2, 30), poll(P0, 0, ((0, 1),), 2, 31)]
    assert checks_of([*base, *again]) == ["nonmonotonic-rc-poll"]
    other = [poll(P0, 0, ((0, 1),), 2, 30), poll(P0, 0, ((0, 1),), 2, 31, process="rc1.0")]
    assert checks_of([*base, *other]) == []


def test_a_last_stable_offset_stuck_after_the_heal_is_a_hanging_transaction() -> None:
    """The final reads found P0's last stable offset held at 7 below its high watermark 9
    (``lso-stuck``): a transaction no coordinator will end. Excused when a whole ISR of P0
    lost power (the closing marker may be gone) or of a __transaction_state partition (the
    coordinator may have forgotten the transaction); a cut of only part of an ISR excuses
    nothing."""
    stuck = TxnOp("txn-final", LSO_STUCK, P0, "ok", 9, 7, time_us=100)
    assert checks_of([stuck]) == ["hanging-transaction"]
    for key in (P0, "__transaction_state-2"):
        cuts = PowerCuts()
        cuts.isr_changed(key, (4, 5), 0)
        for broker in (4, 5):
            cuts.cut(broker, 50)
        assert checks_of([stuck], cuts) == [], key
        part = PowerCuts()
        part.isr_changed(key, (4, 5), 0)
        part.cut(4, 50)
        assert checks_of([stuck], part) == ["hanging-transaction"], key
