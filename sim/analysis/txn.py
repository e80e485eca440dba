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
  order;
- ``G0`` and ``G1c``: a cycle of write-write dependencies, or of write-write and
  write-read ones with at least one write-read, between transactions, inferred from offsets
  as Jepsen's Kafka workload does (``dependency_cycles``);
- ``hanging-transaction``: after the heal, with every lane stopped, a partition's last
  stable offset stayed below its high watermark, unchanged through ``HANG_BOUND_S`` of
  answered final reads (``lso-stuck``): a transaction no coordinator will end (its
  producer's timeout would have aborted one it knew) holds read_committed consumers there
  for good, KAFKA-14402's hanging transaction;
- ``ctp-exactly-once`` and ``ctp-offsets``: the consume-transform-produce worker's committed
  output is not its committed input below its committed offset, each record once and in
  order; or an offset it found committed at a restart is not the end of the input its
  committed output covered then (``CtpHistory``).

A read passed a write's offset when it was invoked after the write was acknowledged and
read over that offset: from a position at or below it to an answer that reached past it.
Only such a read was served by a log that held the write. A read invoked earlier may have
reached past the offset in a log a whole-ISR power cut then shortened, so that later writes
reuse its offsets (kafka seed 3 with --transactions: reads reached offset 276 of a
partition before a power cut left it ending at 201; a committed write at 202 then stayed
behind a transaction the cut left open, never readable, and no read invoked after it passed
200). A read from a position above the offset did not read it, however far it reached: the
worker, restarted at the committed offset 42 of an input partition a power cut had
shortened to 22 and writes then regrew, polled from 42 and never over a committed write at
24 (kafka seed 8 with --transactions, once its producer lanes started a new instance after
a fence).

Losses a whole-ISR power cut allows (sim/analysis/kafka.py ``PowerCuts``) are excused as the
plain sends' are. An abort marker is such a record too: an aborted read is excused when,
after the abort was acknowledged and before the read was invoked, every member of an ISR of
the read's partition lost power while that ISR stood (the marker may be gone, leaving the
transaction open there; the producer's next transaction on the partition then ends it with
its own marker, a commit turning the aborted write into a committed one, as in Kafka:
kafka seed 10 with --transactions). An intermediate read is excused when every member of
an ISR of a ``__transaction_state`` partition lost power between the transaction's first
write and the read: the coordinator may have come back with an earlier transaction to
complete and written its commit markers again (``_coordinator_may_have_forgotten``).
"""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from sim.analysis.kafka import TXN_STATE_TOPIC, KafkaViolation, PowerCuts

TXN_SEND = "txn-send"
TXN_END = "txn-end"
RC_POLL = "rc-poll"
CTP_OFFSETS = "ctp-offsets"  # the worker's TxnOffsetCommit, in its transaction
CTP_POSITION = "ctp-position"  # the committed offset the worker (re)starts from
# The final reads found a partition's last stable offset stuck below its high watermark
# (value: the high watermark; offset: the last stable offset).
LSO_STUCK = "lso-stuck"
TXN_OPS = (TXN_SEND, TXN_END, RC_POLL, CTP_OFFSETS, CTP_POSITION, LSO_STUCK)
CHECKS = (
    "aborted-read",
    "intermediate-read",
    "lost-committed-write",
    "torn-transaction",
    "duplicate",
    "beyond-lso",
    "nonmonotonic-rc-poll",
    "G0",
    "G1c",
    "ctp-exactly-once",
    "ctp-offsets",
    "hanging-transaction",
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
    invoke_us: int = -1  # when a send or a poll was invoked (-1: not known)
    source: tuple[int, int] | None = None  # a worker's output: the input (offset, value)


@dataclass(frozen=True, slots=True)
class CtpKeys:
    """Where the consume-transform-produce worker reads, writes and commits its offsets:
    the partitions whose whole-ISR power cuts excuse its findings."""

    input: str
    output: str
    offsets: str


@dataclass(slots=True)
class _Txn:
    writes: list[TxnOp] = field(default_factory=list)  # acknowledged sends
    commit_asked_us: int | None = None
    outcome: str | None = None  # "commit" or "abort" once acknowledged
    offsets_committed: int | None = None  # a worker's TxnOffsetCommit (acknowledged)
    ended_us: int = 0  # when the outcome was acknowledged


@dataclass(slots=True)
class TxnChecker:
    """The transactional checks over a history fed in completion order."""

    cuts: PowerCuts = field(default_factory=PowerCuts)
    ctp: CtpKeys | None = None  # the consume-transform-produce worker's partitions, if any
    violations: list[KafkaViolation] = field(default_factory=list)
    excused: int = 0
    commits_ok: int = 0
    aborts_ok: int = 0
    rc_polls_ok: int = 0
    _txns: dict[str, _Txn] = field(default_factory=dict)
    _txn_of: dict[int, str] = field(default_factory=dict)  # value -> transaction
    _read_at: dict[int, tuple[str, int]] = field(default_factory=dict)  # value -> where read
    _reads: list[tuple[TxnOp, int, int]] = field(default_factory=list)  # poll, offset, value
    # key -> (invocation, position, next position) of each poll: what it read, from when
    _reached: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    _last_poll: dict[tuple[str, str], int] = field(default_factory=dict)
    _positions: list[TxnOp] = field(default_factory=list)  # the worker's ctp-position answers

    def _fail(self, check: str, message: str, time_us: int) -> None:
        self.violations.append(KafkaViolation(check, f"{check}: {message}", time_us))

    def add(self, op: TxnOp) -> None:
        """One operation at its completion (a txn-end also at its invocation)."""
        if op.f == TXN_SEND:
            self._txn_of[op.value] = op.txn  # type: ignore[index]
            txn = self._txns.setdefault(op.txn, _Txn())
            if op.status == "ok":
                txn.writes.append(op)
        elif op.f == CTP_OFFSETS:
            if op.status == "ok":
                self._txns.setdefault(op.txn, _Txn()).offsets_committed = op.value
        elif op.f == CTP_POSITION:
            if op.status == "ok":
                self._positions.append(op)
        elif op.f == TXN_END:
            txn = self._txns.setdefault(op.key, _Txn())
            if op.status == "invoke" and op.value == 1 and txn.commit_asked_us is None:
                txn.commit_asked_us = op.time_us
            elif op.status == "ok":
                txn.outcome = "commit" if op.value == 1 else "abort"
                txn.ended_us = op.time_us
                self.commits_ok += op.value == 1
                self.aborts_ok += op.value == 0
        elif op.f == RC_POLL and op.status == "ok":
            self._poll(op)
        elif op.f == LSO_STUCK and op.status == "ok":
            self._stuck(op)

    def _stuck(self, op: TxnOp) -> None:
        """A last stable offset the final reads found stuck. Excused when a whole ISR of the
        partition lost power (the marker that would have closed the transaction may be gone
        while the coordinator completed it) or of a ``__transaction_state`` partition (the
        coordinator may have forgotten the transaction while the partition kept it)."""
        if self.cuts.may_have_lost_between(op.key, 0, op.time_us) or (
            self.cuts.topic_may_have_lost(TXN_STATE_TOPIC, op.time_us)
        ):
            self.excused += 1
            return
        self._fail(
            "hanging-transaction",
            f"the last stable offset of {op.key} stayed at {op.offset}, below its high "
            f"watermark {op.value}, through the final reads: a transaction no coordinator "
            "will end holds read_committed consumers there",
            op.time_us,
        )

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
        invoked = op.time_us if op.invoke_us < 0 else op.invoke_us
        position = op.value if op.value is not None else 0
        self._reached.setdefault(op.key, []).append((invoked, position, op.reached))

    def _aborted_read(self, op: TxnOp, offset: int, value: int) -> None:
        txn = self._txns[self._txn_of[value]]
        invoked = op.time_us if op.invoke_us < 0 else op.invoke_us
        if self.cuts.may_have_lost(op.key, (), txn.ended_us, before_us=invoked):
            self.excused += 1  # the abort marker may be lost: excused as a lost write is
            return
        self._fail(
            "aborted-read",
            f"{op.process} read value {value} at offset {offset} of {op.key}, a write of "
            f"transaction {self._txn_of[value]}, whose abort was acknowledged",
            op.time_us,
        )

    def _coordinator_may_have_forgotten(self, txn: _Txn, read: TxnOp) -> bool:
        """Whether every member of an ISR of a ``__transaction_state`` partition lost power
        between the transaction's first acknowledged write and the read's invocation. The
        coordinator may then come back with an older state of the producer, an earlier
        transaction still to complete, and write that one's markers again; under TV1 (one
        epoch for every transaction) a commit marker ends the open transaction as a
        commit, as Kafka's would after the same loss (kafka seed 269 at 5 brokers: a TV1
        lane's abort went unanswered when every member of its coordinator's ISR lost
        power, and its open writes were read committed)."""
        first = min((w.time_us for w in txn.writes), default=0)
        invoked = read.time_us if read.invoke_us < 0 else read.invoke_us
        return self.cuts.topic_may_have_lost(TXN_STATE_TOPIC, invoked, after_us=first)

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
                if self._coordinator_may_have_forgotten(txn, op):
                    self.excused += 1
                    continue
                self._fail(
                    "intermediate-read",
                    f"{op.process} read value {value} at offset {offset} of {op.key}, a write "
                    f"of transaction {name}, before its commit was asked for",
                    op.time_us,
                )
        reached = {key: _ReadOver.of(polls) for key, polls in self._reached.items()}
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
                and reached[w.key].read_over(w.offset, w.time_us)
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
        for check, cycle in dependency_cycles(self._graph_txns()):
            self._fail(check, cycle, end_us)
        if self.ctp is not None:
            self._ctp_checks(self.ctp, end_us)
        return self.violations[found_before:]

    # ---- dependency cycles -----------------------------------------------------------------
    def _graph_txns(self) -> list[GraphTxn]:
        """The transactions of the history as the dependency graph sees them: their writes
        that were read (so in the log, where a read found them), and the transactions whose
        writes they read (a worker's output names the input record it came from)."""
        found: list[GraphTxn] = []
        for name, txn in self._txns.items():
            writes = tuple(
                GraphWrite(*self._read_at[w.value], w.invoke_us, w.time_us)
                for w in txn.writes
                if w.value in self._read_at
            )
            reads = tuple(
                writer
                for w in txn.writes
                if w.source is not None and (writer := self._txn_of.get(w.source[1])) is not None
            )
            if writes or reads:
                found.append(GraphTxn(name, writes, reads))
        return found

    # ---- consume-transform-produce -----------------------------------------------------------
    def _ctp_checks(self, keys: CtpKeys, end_us: int) -> None:
        """The worker's output against its input, and each offset it restarted from."""
        source_of = {
            w.value: w.source
            for txn in self._txns.values()
            for w in txn.writes
            if w.source is not None
        }
        inputs = sorted(
            (offset, value) for value, (key, offset) in self._read_at.items() if key == keys.input
        )
        output = sorted(
            (offset, source_of[value])
            for value, (key, offset) in self._read_at.items()
            if key == keys.output and value in source_of
        )
        worker = [
            (name, txn)
            for name, txn in self._txns.items()
            if any(w.source is not None for w in txn.writes)
        ]
        reached = _ReadOver.of(self._reached.get(keys.output, []))
        commits = []
        for _name, txn in worker:
            if txn.commit_asked_us is None or txn.offsets_committed is None:
                continue
            if any(w.value in self._read_at for w in txn.writes):
                visible: bool | None = True
            elif all(
                w.offset is not None and reached.read_over(w.offset, w.time_us) for w in txn.writes
            ):
                # Reads invoked after its output passed it and never found it: not committed,
                # unless a whole-ISR power cut may have taken the output (or its marker) since
                # it was acknowledged. That cut may have come after a restart that found this
                # transaction's offset committed, and its output with it (kafka seed 3 with
                # --transactions, on the branch whose CreateTopics waits for the broker's
                # partitions): whether it was committed then is not known.
                lost = any(self._excused(w) for w in txn.writes)
                visible = None if lost else False
            else:
                visible = None  # the final reads did not get that far: not known
            commits.append((txn.commit_asked_us, txn.offsets_committed, visible))
        history = CtpHistory(
            tuple(inputs),
            tuple(source for _offset, source in output),  # type: ignore[misc]
            tuple(sorted(commits, key=lambda c: c[0])),
            tuple((p.process, p.invoke_us, p.offset or 0) for p in self._positions),
        )

        def excused(since_us: int, until_us: int) -> bool:
            """Whether a whole ISR of the worker's partitions lost power in the window
            (records of its input, output or offsets may be gone: nothing to judge)."""
            return any(
                self.cuts.may_have_lost_between(key, since_us, until_us)
                for key in (keys.input, keys.output, keys.offsets)
            )

        for check, message, since_us, until_us in history.violations(end_us):
            if excused(since_us, until_us):
                self.excused += 1
            else:
                self._fail(check, message, end_us)

    def _excused(self, write: TxnOp) -> bool:
        """A write a whole-ISR power cut may have taken back, or one the leader answered as
        the duplicate of an old batch after the coordinator forgot the epoch it handed out
        (``PowerCuts.reissued``): the log never took it."""
        return (write.key, write.offset) in self.cuts.reissued or self.cuts.may_have_lost(
            write.key, write.isr, write.time_us
        )


# ---- dependency cycles (G0, G1c) -------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GraphWrite:
    """One write in the log: where a read found it, and when its send was invoked and
    acknowledged (-1: not known)."""

    key: str
    offset: int
    invoke_us: int = -1
    complete_us: int = -1


@dataclass(frozen=True, slots=True)
class GraphTxn:
    """One transaction as the dependency graph sees it: its writes in the log, and the
    transactions whose writes it read (before it wrote: a worker reads, then writes)."""

    name: str
    writes: tuple[GraphWrite, ...] = ()
    reads: tuple[str, ...] = ()


# ("w", partition, offset, txn) a write, ("c", txn, 0, "") its commit, ("r", txn, 0, "") its
# reads; an edge's kind is "ww", "wr", or "txn" (inside one transaction).
Node = tuple[str, str, int, str]
Edge = tuple[Node, Node, str]


def _write(write: GraphWrite, txn: str) -> Node:
    return ("w", write.key, write.offset, txn)


def dependency_edges(txns: Iterable[GraphTxn]) -> list[Edge]:
    """The dependencies of a history, inferred from offsets as Jepsen's Kafka workload
    infers them, between the parts of each transaction rather than between whole ones.

    - ww: on each partition, each write precedes the next one by offset (a log's order
      is its append order);
    - wr: a transaction that read a write of another comes after that one's commit
      (read_committed);
    - inside a transaction: each write precedes its commit; a send precedes the next one
      invoked after it was acknowledged; the reads of a worker's transaction precede its
      writes.

    Every edge is an order in time on a correct system, so any cycle is an anomaly. Kafka
    orders a partition's records by their append, not by their transaction's commit, so
    two transactions writing concurrently may interleave in opposite orders on two
    partitions: a write cycle between whole transactions that Kafka's protocol allows
    (Jepsen found it in Kafka itself, and its workload infers ww edges between whole
    transactions only with ``:ww-deps``). Split into its parts, such an interleaving has no
    cycle; a cycle needs a write appended before one that was acknowledged earlier (G0), or
    a read of a transaction whose writes land after the reader's (G1c).

    A partition where reads found two writes at one offset (a log that lost records and
    was written again) gives no ww edges: its append order is not known."""
    edges: set[Edge] = set()
    on: dict[str, list[Node]] = {}
    for txn in txns:
        commit: Node = ("c", txn.name, 0, "")
        for write in txn.writes:
            on.setdefault(write.key, []).append(_write(write, txn.name))
            edges.add((_write(write, txn.name), commit, "txn"))
        timed = sorted((w for w in txn.writes if w.invoke_us >= 0), key=lambda w: w.invoke_us)
        for before, after in itertools.pairwise(timed):
            if 0 <= before.complete_us < after.invoke_us:
                edges.add((_write(before, txn.name), _write(after, txn.name), "txn"))
        if txn.reads:
            read: Node = ("r", txn.name, 0, "")
            for writer in set(txn.reads) - {txn.name}:
                edges.add((("c", writer, 0, ""), read, "wr"))
            for write in txn.writes:
                edges.add((read, _write(write, txn.name), "txn"))
    for writes in on.values():
        ordered = sorted(set(writes), key=lambda node: node[2])
        if len({node[2] for node in ordered}) < len(ordered):
            continue
        for before, after in itertools.pairwise(ordered):
            edges.add((before, after, "ww"))
    return sorted(edges)


def dependency_cycles(txns: Iterable[GraphTxn]) -> list[tuple[str, str]]:
    """The anomalies of a history, one cycle each as (``G0`` or ``G1c``, its description):
    a strongly connected component of the dependency graph is G1c when a wr edge is in it
    (a cycle through that edge), else G0 (a cycle of ww and in-transaction edges)."""
    edges = dependency_edges(txns)
    found: list[tuple[str, str]] = []
    for component in _components(edges):
        inside = [e for e in edges if e[0] in component and e[1] in component]
        wr = next((e for e in inside if e[2] == "wr"), None)
        first = wr if wr is not None else next(e for e in inside if e[2] == "ww")
        cycle = _cycle_through(first, inside)
        found.append(("G1c" if wr is not None else "G0", _describe(cycle)))
    return found


def _describe(cycle: list[Edge]) -> str:
    """A cycle between transactions, as ``T1 -ww(p@o)-> T2 -wr-> T1``."""

    def owner(node: Node) -> str:
        return node[3] if node[0] == "w" else node[1]

    steps = [owner(cycle[0][0])]
    for _source, target, kind in cycle:
        if kind == "txn":
            continue
        where = f"({target[1]}@{target[2]})" if kind == "ww" else ""
        steps.append(f"-{kind}{where}-> {owner(target)}")
    return "dependency cycle " + " ".join(steps)


def _components(edges: list[Edge]) -> list[set[Node]]:
    """The strongly connected components of more than one node (Tarjan's, without
    recursion: a long run's graph is deeper than Python's stack)."""
    graph: dict[Node, list[Node]] = {}
    for a, b, _kind in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[Node, int] = {}
    low: dict[Node, int] = {}
    stack: list[Node] = []
    on_stack: set[Node] = set()
    found: list[set[Node]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            successors = graph[node]
            if child < len(successors):
                work.append((node, child + 1))
                nxt = successors[child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _cycle_through(first: Edge, edges: list[Edge]) -> list[Edge]:
    """``first`` and the shortest path back from its head to its tail over ``edges`` (all
    in one strongly connected component, so there is one)."""
    out: dict[Node, list[Edge]] = {}
    for edge in edges:
        out.setdefault(edge[0], []).append(edge)
    start, goal = first[1], first[0]
    came: dict[Node, Edge | None] = {start: None}
    queue = deque([start])
    while queue and goal not in came:
        node = queue.popleft()
        for edge in out.get(node, ()):
            if edge[1] not in came:
                came[edge[1]] = edge
                queue.append(edge[1])
    path: list[Edge] = []
    node = goal
    while node != start:
        step = came[node]
        assert step is not None
        path.append(step)
        node = step[0]
    return [first, *reversed(path)]


# ---- consume-transform-produce ---------------------------------------------------------------
FINAL_POSITION = "ctp-final"  # the process that reads the worker's committed offset at the end


@dataclass(frozen=True, slots=True)
class CtpHistory:
    """What the consume-transform-produce check judges.

    ``inputs``: the committed input records (offset, value), as the read_committed reads
    found them; ``output``: the committed output in its offset order, each as the input
    record (offset, value) it was made from; ``commits``: each worker transaction whose
    commit was asked for, in that order, as (when, the input offset it committed with
    TxnOffsetCommit, whether its output is committed: None if not known, because the final
    reads did not get that far or a whole-ISR power cut may have taken the output since, so
    that nothing depending on it is judged); ``positions``: each committed
    offset the worker read at a (re)start, and at the end (process ``ctp-final``), as
    (process, invoked at, offset)."""

    inputs: tuple[tuple[int, int], ...]
    output: tuple[tuple[int, int], ...]
    commits: tuple[tuple[int, int, bool | None], ...]
    positions: tuple[tuple[str, int, int], ...]

    def violations(self, end_us: int) -> list[tuple[str, str, int, int]]:
        """(check, message, and the window in which a power cut would excuse it) of each
        finding: a restart's offset between the last commit before it and it, the rest
        anywhere up to ``end_us``."""
        found: list[tuple[str, str, int, int]] = []
        committed = dict(self.inputs)
        seen: dict[int, int] = {}
        last = -1
        for offset, value in self.output:
            seen[offset] = seen.get(offset, 0) + 1
            if seen[offset] == 2:
                found.append(
                    (
                        "ctp-exactly-once",
                        f"input record {value} (offset {offset}) is in the committed output "
                        "more than once",
                        0,
                        end_us,
                    )
                )
            elif offset < last:
                found.append(
                    (
                        "ctp-exactly-once",
                        f"input record {value} (offset {offset}) follows offset {last} in the "
                        "committed output: out of input order",
                        0,
                        end_us,
                    )
                )
            if committed.get(offset, value) != value:
                found.append(
                    (
                        "ctp-exactly-once",
                        f"the committed output holds value {value} as input offset {offset}, "
                        f"whose committed record is {committed[offset]}",
                        0,
                        end_us,
                    )
                )
            last = max(last, offset)
        for process, invoked_us, offset in self.positions:
            latest = self._latest_committed(invoked_us)
            if latest is None:
                continue
            asked_us, expected = latest
            if max(offset, 0) != expected:
                side = "ahead of" if offset > expected else "behind"
                found.append(
                    (
                        "ctp-offsets",
                        f"{process} found committed input offset {offset}, {side} the "
                        f"committed output, which then covered the input below offset "
                        f"{expected}",
                        asked_us,
                        invoked_us,
                    )
                )
        finals = [offset for process, _t, offset in self.positions if process == FINAL_POSITION]
        if finals and all(visible is not None for _t, _o, visible in self.commits):
            end = max(finals[-1], 0)
            missing = [o for o in sorted(committed) if o < end and o not in seen]
            if missing:
                shown = ", ".join(map(str, missing[:5]))
                found.append(
                    (
                        "ctp-exactly-once",
                        f"{len(missing)} committed input records below the committed offset "
                        f"{end} are not in the committed output (offsets {shown})",
                        0,
                        end_us,
                    )
                )
            past = sorted(o for o in seen if o >= end)
            if past:
                found.append(
                    (
                        "ctp-offsets",
                        f"the committed output holds input offsets {past[:5]} at or past the "
                        f"committed offset {end}: the offsets run behind the output",
                        0,
                        end_us,
                    )
                )
        return found

    def _latest_committed(self, before_us: int) -> tuple[int, int] | None:
        """(when its commit was asked for, its offset) of the last worker transaction asked
        to commit before ``before_us`` whose output is committed ((0, 0) for none); None if
        a later one's outcome is not known."""
        for asked_us, offset, visible in reversed(self.commits):
            if asked_us >= before_us or visible is False:
                continue
            return None if visible is None else (asked_us, offset)
        return (0, 0)


@dataclass(frozen=True, slots=True)
class _ReadOver:
    """One partition's polls by invocation: which offsets those invoked at or after a time
    read over (a poll read [its position, its next position): every stable record there)."""

    starts: tuple[int, ...]  # invocation times, ascending
    spans: tuple[tuple[int, int], ...]  # spans[i]: (position, next position) of poll i

    @classmethod
    def of(cls, polls: list[tuple[int, int, int]]) -> _ReadOver:
        """From (invocation, position, next position) triples in any order."""
        ordered = sorted(polls)
        return cls(tuple(p[0] for p in ordered), tuple((p[1], p[2]) for p in ordered))

    def read_over(self, offset: int, time_us: int) -> bool:
        """Whether a poll invoked at or after ``time_us`` read over ``offset``. Asked only
        for the writes no read found (few), so a scan of the later polls is enough."""
        index = bisect_left(self.starts, time_us)
        return any(start <= offset < end for start, end in self.spans[index:])
