"""The transactional checks of the kafka scenario (``--transactions``): one implementation,
fed online by the simulator as operations complete and replayed by ``kraft-analyze`` from
the trace (sim/analysis/checks.py ``check_kafka``).

The history: each transactional producer's sends (``txn-send``, one unique value to one
partition, with the transaction it belongs to), its transaction ends (``txn-end``: value 1
to commit, 0 to abort; ok means the coordinator acknowledged that outcome) and
read_committed polls (``rc-poll``: the (offset, value) pairs kept, with the partition's last
stable offset in the answer). The checks, named as in docs/transactions.md:

- ``aborted-read``: a read_committed poll returned a value of a transaction whose abort was
  acknowledged;
- ``intermediate-read``: a read_committed poll returned a value before its transaction's
  commit was asked for (EndTxn with commit invoked), so before it could be committed;
- ``lost-committed-write``: no write of an acknowledged committed transaction was ever
  read, though reads passed their offsets;
- ``torn-transaction``: some writes of a transaction were read and some, at offsets reads
  passed, never were (for a committed one, or one whose end is unknown: a read says it
  committed);
- ``duplicate``: one value read at two offsets;
- ``beyond-lso``: a read_committed poll returned a record at or past the last stable offset
  the same answer gave;
- ``nonmonotonic-rc-poll``: a read_committed consumer read a partition's offsets out of
  order.

A read passed a write's offset when it was invoked after the write was acknowledged and
its answer reached past that offset: only such a read was served by a log that held the
write. A read invoked earlier may have reached past the offset in a log a whole-ISR power
cut then shortened, so that later writes reuse its offsets (kafka seed 3 with
--transactions: reads reached offset 276 of a partition before a power cut left it ending
at 201; a committed write at 202 then stayed behind a transaction the cut left open, never
readable, and no read invoked after it passed 200).

Losses a whole-ISR power cut allows (sim/analysis/kafka.py ``PowerCuts``) are excused as the
plain sends' are.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

from sim.analysis.kafka import KafkaViolation, PowerCuts

TXN_SEND = "txn-send"
TXN_END = "txn-end"
RC_POLL = "rc-poll"
TXN_OPS = (TXN_SEND, TXN_END, RC_POLL)
CHECKS = (
    "aborted-read",
    "intermediate-read",
    "lost-committed-write",
    "torn-transaction",
    "duplicate",
    "beyond-lso",
    "nonmonotonic-rc-poll",
)


@dataclass(frozen=True, slots=True)
class TxnOp:
    """One completed (or, for ``txn-end``, invoked) transactional operation."""

    process: str
    f: str
    key: str  # the partition ("<topic>-<n>"), or the transaction for txn-end
    status: str  # ok, fail, info; "invoke" for a txn-end just asked for
    value: int | None = None  # the value sent; 1/0 commit/abort; a poll's position
    offset: int | None = None  # a send's offset; a poll's last stable offset
    records: tuple[tuple[int, int], ...] = ()
    txn: str = ""  # the transaction a send belongs to
    time_us: int = 0
    isr: tuple[int, ...] = ()  # the leader's ISR when it acknowledged a send
    reached: int = -1  # a poll's next position: it saw every stable record below this
    invoked_us: int | None = None  # a poll's invocation (None: take its completion)


@dataclass(slots=True)
class _Txn:
    writes: list[TxnOp] = field(default_factory=list)  # acknowledged sends
    commit_asked_us: int | None = None
    outcome: str | None = None  # "commit" or "abort" once acknowledged


@dataclass(slots=True)
class TxnChecker:
    """The transactional checks over a history fed in completion order."""

    cuts: PowerCuts = field(default_factory=PowerCuts)
    violations: list[KafkaViolation] = field(default_factory=list)
    excused: int = 0
    commits_ok: int = 0
    aborts_ok: int = 0
    rc_polls_ok: int = 0
    _txns: dict[str, _Txn] = field(default_factory=dict)
    _txn_of: dict[int, str] = field(default_factory=dict)  # value -> transaction
    _read_at: dict[int, tuple[str, int]] = field(default_factory=dict)  # value -> where read
    _reads: list[tuple[TxnOp, int, int]] = field(default_factory=list)  # poll, offset, value
    # key -> (invocation, next position) of each poll: what it read below, from when
    _reached: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    _last_poll: dict[tuple[str, str], int] = field(default_factory=dict)

    def _fail(self, check: str, message: str, time_us: int) -> None:
        self.violations.append(KafkaViolation(check, f"{check}: {message}", time_us))

    def add(self, op: TxnOp) -> None:
        """One operation at its completion (a txn-end also at its invocation)."""
        if op.f == TXN_SEND:
            self._txn_of[op.value] = op.txn  # type: ignore[index]
            txn = self._txns.setdefault(op.txn, _Txn())
            if op.status == "ok":
                txn.writes.append(op)
        elif op.f == TXN_END:
            txn = self._txns.setdefault(op.key, _Txn())
            if op.status == "invoke" and op.value == 1 and txn.commit_asked_us is None:
                txn.commit_asked_us = op.time_us
            elif op.status == "ok":
                txn.outcome = "commit" if op.value == 1 else "abort"
                self.commits_ok += op.value == 1
                self.aborts_ok += op.value == 0
        elif op.f == RC_POLL and op.status == "ok":
            self._poll(op)

    def _poll(self, op: TxnOp) -> None:
        self.rc_polls_ok += 1
        lso = op.offset if op.offset is not None else -1
        last = self._last_poll.get((op.process, op.key), -1)
        for offset, value in op.records:
            if offset <= last:
                self._fail(
                    "nonmonotonic-rc-poll",
                    f"{op.process} read offset {offset} of {op.key} after offset {last}",
                    op.time_us,
                )
            last = max(last, offset)
            if offset >= lso >= 0:
                self._fail(
                    "beyond-lso",
                    f"{op.process} read offset {offset} of {op.key} (value {value}) at or "
                    f"past the last stable offset {lso} of the same answer",
                    op.time_us,
                )
            where = self._read_at.setdefault(value, (op.key, offset))
            if where != (op.key, offset):
                self._fail(
                    "duplicate",
                    f"value {value} was read at offset {offset} of {op.key} and at offset "
                    f"{where[1]} of {where[0]}",
                    op.time_us,
                )
            name = self._txn_of.get(value)
            txn = self._txns.get(name) if name is not None else None
            if txn is not None and txn.outcome == "abort":  # known now: say so at once
                self._aborted_read(op, offset, value)
            else:  # judged at the end, when the transaction's outcome is known
                self._reads.append((op, offset, value))
        self._last_poll[(op.process, op.key)] = last
        invoked = op.time_us if op.invoked_us is None else op.invoked_us
        self._reached.setdefault(op.key, []).append((invoked, op.reached))

    def _aborted_read(self, op: TxnOp, offset: int, value: int) -> None:
        self._fail(
            "aborted-read",
            f"{op.process} read value {value} at offset {offset} of {op.key}, a write of "
            f"transaction {self._txn_of[value]}, whose abort was acknowledged",
            op.time_us,
        )

    def finish(self, end_us: int) -> list[KafkaViolation]:
        """The end-of-history checks (after the final read_committed reads)."""
        found_before = len(self.violations)
        for op, offset, value in self._reads:
            name = self._txn_of.get(value)
            txn = self._txns.get(name) if name is not None else None
            if txn is None:
                continue
            if txn.outcome == "abort":
                self._aborted_read(op, offset, value)
            elif txn.commit_asked_us is None or txn.commit_asked_us > op.time_us:
                self._fail(
                    "intermediate-read",
                    f"{op.process} read value {value} at offset {offset} of {op.key}, a write "
                    f"of transaction {name}, before its commit was asked for",
                    op.time_us,
                )
        reached = {key: _ReachedSince.of(polls) for key, polls in self._reached.items()}
        for name, txn in self._txns.items():
            if txn.outcome == "abort" or not txn.writes:
                continue
            seen = [w for w in txn.writes if w.value in self._read_at]
            passed = [
                w
                for w in txn.writes
                if w.value not in self._read_at
                and w.offset is not None
                and w.key in reached
                and w.offset < reached[w.key].since(w.time_us)
            ]
            unexcused = [w for w in passed if not self._excused(w)]
            self.excused += len(passed) - len(unexcused)
            if not unexcused:
                continue
            missing = ", ".join(f"{w.value} at offset {w.offset} of {w.key}" for w in unexcused)
            if seen:
                self._fail(
                    "torn-transaction",
                    f"transaction {name} ({txn.outcome or 'end unknown'}): "
                    f"{len(seen)} of its writes were read, but never {missing}",
                    end_us,
                )
            elif txn.outcome == "commit":
                self._fail(
                    "lost-committed-write",
                    f"transaction {name}, whose commit was acknowledged: no read found {missing}",
                    end_us,
                )
        return self.violations[found_before:]

    def _excused(self, write: TxnOp) -> bool:
        return self.cuts.may_have_lost(write.key, write.isr, write.time_us)


@dataclass(frozen=True, slots=True)
class _ReachedSince:
    """One partition's polls by invocation: how far those invoked at or after a time read."""

    starts: tuple[int, ...]  # invocation times, ascending
    furthest: tuple[int, ...]  # furthest[i]: the furthest position polls starts[i:] reached

    @classmethod
    def of(cls, polls: list[tuple[int, int]]) -> _ReachedSince:
        """From (invocation, next position) pairs in any order."""
        ordered = sorted(polls)
        furthest, best = [], 0
        for _start, position in reversed(ordered):
            best = max(best, position)
            furthest.append(best)
        return cls(tuple(start for start, _ in ordered), tuple(reversed(furthest)))

    def since(self, time_us: int) -> int:
        """The furthest position a poll invoked at or after ``time_us`` reached (0: none)."""
        index = bisect_left(self.starts, time_us)
        return self.furthest[index] if index < len(self.furthest) else 0
