"""The dependency-cycle checks (G0, G1c) and the consume-transform-produce checks of
sim/analysis/txn.py on hand-built histories: each anomaly is found in a history that has it,
and its honest neighbour passes, so a check switched off fails here."""

from __future__ import annotations

from sim.analysis.kafka import PowerCuts
from sim.analysis.txn import (
    CTP_OFFSETS,
    CTP_POSITION,
    FINAL_POSITION,
    RC_POLL,
    TXN_END,
    TXN_SEND,
    CtpHistory,
    CtpKeys,
    GraphTxn,
    GraphWrite,
    TxnChecker,
    TxnOp,
    dependency_cycles,
)

P0, P1 = "jepsen-txn-0", "jepsen-txn-1"
OUT = "jepsen-ctp-0"
KEYS = CtpKeys(P0, OUT, "__consumer_offsets-0")


def send(
    value: int,
    key: str,
    offset: int,
    txn: str,
    invoked: int,
    source: tuple[int, int] | None = None,
) -> TxnOp:
    """An acknowledged send, invoked at ``invoked`` and acknowledged 1 µs later."""
    return TxnOp(
        txn.split("/")[0],
        TXN_SEND,
        key,
        "ok",
        value,
        offset,
        txn=txn,
        time_us=invoked + 1,
        isr=(4, 5),
        invoke_us=invoked,
        source=source,
    )


def commit(txn: str, at: int) -> list[TxnOp]:
    process = txn.split("/")[0]
    return [
        TxnOp(process, TXN_END, txn, "invoke", 1, time_us=at),
        TxnOp(process, TXN_END, txn, "ok", 1, time_us=at + 1),
    ]


def final_read(key: str, records: tuple[tuple[int, int], ...], at: int = 1000) -> TxnOp:
    reached = records[-1][0] + 2 if records else 0
    lso = reached
    return TxnOp("txn-final", RC_POLL, key, "ok", 0, lso, records, time_us=at, reached=reached)


def checks_of(ops: list[TxnOp], ctp: CtpKeys | None = None) -> list[str]:
    checker = TxnChecker(cuts=PowerCuts(), ctp=ctp)
    for op in ops:
        checker.add(op)
    checker.finish(10_000)
    return [v.check for v in checker.violations]


# ---- G0 ------------------------------------------------------------------------------------
def write_cycle(d_offset: int) -> list[TxnOp]:
    """t1 sends a to p0 then b to p1; t2 sends c to p1 then d to p0, each send invoked after
    the one before it was acknowledged. b precedes c on p1. d at offset 0 of p0 precedes a,
    though a was acknowledged before d was sent: a write cycle (G0)."""
    return [
        send(1, P0, 1, "t1/1", 10),  # a
        send(2, P1, 0, "t1/1", 12),  # b
        *commit("t1/1", 14),
        send(3, P1, 1, "t2/2", 20),  # c
        send(4, P0, d_offset, "t2/2", 22),  # d
        *commit("t2/2", 24),
        final_read(P0, tuple(sorted([(1, 1), (d_offset, 4)]))),
        final_read(P1, ((0, 2), (1, 3))),
    ]


def test_g0_a_write_appended_below_one_acknowledged_before_it_was_sent() -> None:
    assert checks_of(write_cycle(0)) == ["G0"]
    assert checks_of(write_cycle(3)) == []


def test_concurrent_transactions_may_interleave_in_opposite_orders() -> None:
    """Kafka orders records by append: x and y writing p0 and p1 at once may land x first
    on p0 and y first on p1. A graph between whole transactions has a write cycle here
    (Jepsen's, with ww inference on); split into writes and commits it has none."""
    x = GraphTxn("x", (GraphWrite(P0, 0, 10, 11), GraphWrite(P1, 3, 14, 15)))
    y = GraphTxn("y", (GraphWrite(P0, 1, 12, 13), GraphWrite(P1, 2, 13, 14)))
    assert dependency_cycles([x, y]) == []


# ---- G1c -----------------------------------------------------------------------------------
def read_cycle(x_second_offset: int, x_second_at: int) -> list[TxnOp]:
    """x writes a to p0, then b to p1 and commits; the worker t reads a and writes o to
    p1. With b after o on p1, t saw x yet wrote before x finished: x -wr-> t -ww-> x (G1c)."""
    return [
        send(1, P0, 0, "x/1", 10),  # a
        send(3, P1, 0, "t/2", 20, source=(0, 1)),  # o, made from a
        send(2, P1, x_second_offset, "x/1", x_second_at),  # b
        *commit("t/2", 35),
        *commit("x/1", 40),
        final_read(P0, ((0, 1),)),
        final_read(P1, tuple(sorted([(0, 3), (x_second_offset, 2)]))),
    ]


def test_g1c_a_read_of_a_transaction_whose_writes_land_after_the_readers() -> None:
    assert checks_of(read_cycle(1, 30)) == ["G1c"]
    # Written before the worker's (lower offset): no cycle, and no other finding.
    honest = read_cycle(0, 12)
    honest[1] = send(3, P1, 2, "t/2", 45, source=(0, 1))
    honest[-1] = final_read(P1, ((0, 2), (2, 3)))
    assert checks_of(honest) == []


def test_a_pure_read_cycle_is_g1c() -> None:
    """Jepsen's g1c-pure-wr: each transaction read the other's write."""
    t1 = GraphTxn("t1", (GraphWrite(P0, 0, 10, 11),), ("t2",))
    t2 = GraphTxn("t2", (GraphWrite(P1, 0, 10, 11),), ("t1",))
    found = dependency_cycles([t1, t2])
    assert [check for check, _ in found] == ["G1c"]
    assert "t1" in found[0][1] and "t2" in found[0][1]


# ---- consume-transform-produce -------------------------------------------------------------
INPUTS = ((0, 10), (2, 11), (3, 12), (5, 13))


def test_ctp_exactly_once_in_order_passes() -> None:
    history = CtpHistory(
        INPUTS,
        INPUTS,
        ((100, 3, True), (200, 5, False), (300, 6, True)),
        (("ctp0", 0, 0), ("ctp1", 250, 3), (FINAL_POSITION, 400, 6)),
    )
    assert history.violations(1000) == []


def test_ctp_duplicate_order_and_mismatch() -> None:
    final = (FINAL_POSITION, 400, 6)
    twice = CtpHistory(INPUTS, (*INPUTS[:2], INPUTS[1], *INPUTS[2:]), ((100, 6, True),), (final,))
    assert [c for c, *_ in twice.violations(1000)] == ["ctp-exactly-once"]
    swapped = (INPUTS[1], INPUTS[0], *INPUTS[2:])
    reordered = CtpHistory(INPUTS, swapped, ((100, 6, True),), (final,))
    assert [c for c, *_ in reordered.violations(1000)] == ["ctp-exactly-once"]
    wrong = CtpHistory(INPUTS, ((0, 99), *INPUTS[1:]), ((100, 6, True),), (final,))
    assert [c for c, *_ in wrong.violations(1000)] == ["ctp-exactly-once"]


def test_ctp_offsets_ahead_of_and_behind_the_output() -> None:
    commits = ((100, 3, True), (200, 6, False))
    # Restarted at 6, the offset of a transaction whose output was never committed (the
    # planted txn-offsets-kept-on-abort): ahead.
    ahead = CtpHistory(INPUTS, INPUTS[:2], commits, (("ctp1", 250, 6),))
    assert [c for c, *_ in ahead.violations(1000)] == ["ctp-offsets"]
    behind = CtpHistory(INPUTS, INPUTS[:2], commits, (("ctp1", 250, 0),))
    assert [c for c, *_ in behind.violations(1000)] == ["ctp-offsets"]
    # At the end: input below the committed offset missing from the output, and output
    # past it.
    missing = CtpHistory(INPUTS, INPUTS[:1], ((100, 3, True),), ((FINAL_POSITION, 400, 3),))
    assert [c for c, *_ in missing.violations(1000)] == ["ctp-exactly-once"]
    past = CtpHistory(INPUTS, INPUTS[:3], ((100, 3, True),), ((FINAL_POSITION, 400, 3),))
    assert [c for c, *_ in past.violations(1000)] == ["ctp-offsets"]


def test_ctp_offsets_are_not_judged_past_what_the_final_reads_reached() -> None:
    unknown = ((100, 3, True), (200, 6, None))
    history = CtpHistory(INPUTS, INPUTS[:2], unknown, (("ctp1", 250, 6), (FINAL_POSITION, 400, 6)))
    assert history.violations(1000) == []


def test_ctp_checks_through_the_checker() -> None:
    """The worker's history as the lanes trace it: its output sends name their input, its
    TxnOffsetCommit and restarts are judged against what the final reads found."""
    inputs = [send(10, P0, 0, "tp0.0/1", 1), *commit("tp0.0/1", 3)]
    worker = [
        TxnOp("ctp0", CTP_POSITION, P0, "ok", offset=0, time_us=6, invoke_us=5),
        send(20, OUT, 0, "ctp0/2", 10, source=(0, 10)),
        TxnOp("ctp0", CTP_OFFSETS, KEYS.offsets, "ok", 1, txn="ctp0/2", time_us=12),
        *commit("ctp0/2", 13),
    ]
    reads = [final_read(P0, ((0, 10),)), final_read(OUT, ((0, 20),))]

    def final(offset: int) -> TxnOp:
        return TxnOp(
            FINAL_POSITION, CTP_POSITION, P0, "ok", offset=offset, time_us=901, invoke_us=900
        )

    assert checks_of([*inputs, *worker, final(1), *reads], KEYS) == []
    assert checks_of([*inputs, *worker, final(0), *reads], KEYS) == ["ctp-offsets", "ctp-offsets"]


def test_ctp_output_lost_to_a_power_cut_after_a_restart_leaves_that_restart_unjudged() -> None:
    """Kafka seed 3 with --transactions on the branch whose CreateTopics waits for the
    broker's partitions: the worker restarted from the offset of its last committed
    transaction, whose output every replica of the output partition held then; a
    whole-cluster power cut later took that output's unflushed records (acks=all promises
    nothing against every ISR member losing power) and the final reads passed its offsets
    without finding it. That transaction's output is not known to have been committed at the
    restart, so the restart's offset is not judged against an earlier one; with no power cut
    the same reads still convict it (and the lost output)."""
    inputs = [
        send(10, P0, 0, "tp0.0/1", 1),
        send(11, P0, 1, "tp0.0/1", 2),
        *commit("tp0.0/1", 3),
    ]
    worker = [
        TxnOp("ctp0", CTP_POSITION, P0, "ok", offset=0, time_us=6, invoke_us=5),
        send(20, OUT, 0, "ctp0/2", 10, source=(0, 10)),
        TxnOp("ctp0", CTP_OFFSETS, KEYS.offsets, "ok", 1, txn="ctp0/2", time_us=12),
        *commit("ctp0/2", 13),
        send(21, OUT, 2, "ctp0/3", 20, source=(1, 11)),
        TxnOp("ctp0", CTP_OFFSETS, KEYS.offsets, "ok", 2, txn="ctp0/3", time_us=22),
        *commit("ctp0/3", 23),
        TxnOp("ctp1", CTP_POSITION, P0, "ok", offset=2, time_us=31, invoke_us=30),
    ]
    # The final reads find ctp0/2's output only: ctp0/3's offsets now hold other records.
    reads = [final_read(P0, ((0, 10), (1, 11))), final_read(OUT, ((0, 20), (4, 99)))]

    def checks(cut_at: int | None) -> list[str]:
        cuts = PowerCuts()
        if cut_at is not None:
            for broker in (4, 5):  # the ISR the output's sends were acknowledged by
                cuts.cut(broker, cut_at)
        checker = TxnChecker(cuts=cuts, ctp=KEYS)
        for op in [*inputs, *worker, *reads]:
            checker.add(op)
        checker.finish(10_000)
        return [v.check for v in checker.violations]

    assert checks(None) == ["lost-committed-write", "ctp-offsets"]
    assert checks(500) == []  # the power cut after the restart excuses both
