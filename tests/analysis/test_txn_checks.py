"""The transactional checks (sim/analysis/txn.py) on crafted histories: each anomaly is
found in a history that has it, and its honest neighbour passes, so a check switched off
fails here."""

from __future__ import annotations

from sim.analysis.kafka import PowerCuts
from sim.analysis.txn import RC_POLL, TXN_END, TXN_SEND, TxnChecker, TxnOp

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
) -> TxnOp:
    reached = records[-1][0] + 1 if records else position
    return TxnOp(process, RC_POLL, key, "ok", position, lso, records, time_us=at, reached=reached)


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


def test_intermediate_read() -> None:
    early = [send(1, P0, 0, "t1", 10), poll(P0, 0, ((0, 1),), 1, 15), *committed("t1", 20)]
    assert checks_of(early) == ["intermediate-read"]
    late = [send(1, P0, 0, "t1", 10), *committed("t1", 20), poll(P0, 0, ((0, 1),), 2, 25)]
    assert checks_of(late) == []


def test_lost_committed_write_and_its_power_cut_excuse() -> None:
    ops = [*two_partition_commit(), send(5, P0, 2, "t3", 30), *committed("t3", 40)]
    reads = [poll(P0, 0, ((2, 5),), 4, 50), poll(P1, 0, (), 2, 51)]
    assert checks_of([*ops, *reads]) == ["lost-committed-write"]
    cuts = PowerCuts()
    for broker in (4, 5):  # the whole ISR lost power after the writes
        cuts.cut(broker, 25)
    assert checks_of([*ops, *reads], cuts) == []


def test_torn_transaction() -> None:
    reads = [poll(P0, 0, ((0, 1),), 2, 30), poll(P1, 0, ((1, 9),), 3, 31)]
    assert checks_of([*two_partition_commit(), *reads]) == ["torn-transaction"]
    whole = [poll(P0, 0, ((0, 1),), 2, 30), poll(P1, 0, ((0, 2),), 2, 31)]
    assert checks_of([*two_partition_commit(), *whole]) == []


def test_duplicate_beyond_lso_and_nonmonotonic() -> None:
    base = two_partition_commit()
    assert checks_of([*base, poll(P0, 0, ((0, 1), (3, 1)), 5, 30)]) == ["duplicate"]
    assert checks_of([*base, poll(P0, 0, ((0, 1),), 0, 30)]) == ["beyond-lso"]
    again = [poll(P0, 0, ((0, 1),), 2, 30), poll(P0, 0, ((0, 1),), 2, 31)]
    assert checks_of([*base, *again]) == ["nonmonotonic-rc-poll"]
    other = [poll(P0, 0, ((0, 1),), 2, 30), poll(P0, 0, ((0, 1),), 2, 31, process="rc1.0")]
    assert checks_of([*base, *other]) == []
