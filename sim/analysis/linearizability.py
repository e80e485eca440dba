"""Is one key's history linearizable? A Wing-Gong-Lowe search, and a counterexample if not.

The search (Wing & Gong 1993, with Lowe's 2017 memoisation, as in Porcupine) walks the
history's call and return entries in trace order. At a call it tries to linearize that
operation now: apply it to the model, remove its entries, start again from the head. At a
return whose operation is not yet linearized the current prefix is impossible, so it
backtracks. A cache of (set of linearized operations, model state) prunes every
configuration already explored, which keeps typical histories close to linear time.

Operations of unknown outcome (info, pending) have no return entry: the search may place
them anywhere after their call, or never, which is exactly "may or may not have happened".
That freedom is what makes a history with many of them expensive: each subset of them
placed so far is a configuration of its own (the metadata scenario's seed 21 has 21 on one
topic, 2^21 subsets, and ran out of a 2,000,000-step budget). Two reductions, both exact,
keep the search polynomial in practice:

- **Dominance.** Configurations with the same linearized acknowledged operations and the
  same model state differ only in which unknown ones they used. One that used a superset
  can do nothing the other cannot (an unused unknown operation may stay unused, and it
  constrains nothing: it has no return), so it is pruned once the other was explored. This
  also prunes placing an unknown operation that changes nothing.
- **Interchangeable unknowns.** Unknown operations that look the same to the model (same
  function, arguments, status, output and error) are used in call order only: once both are
  callable, swapping them changes no state and no constraint.

Both rest on a model judging an operation by what it did (function, arguments, result,
status), never by its process or timing, as every model in ``models.py`` does.

A failed search is explained, not just reported: a binary search over prefixes of the
history (cut after the k-th return; linearizability is prefix-closed) finds the first
acknowledged operation that no linearization of what came before can explain. The
counterexample is that operation, the model state the deepest partial linearization
reached, and the operations concurrent with it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sim.analysis.models import Model, Operation, State

# A key's search gives up (verdict "unknown") after this many steps: a bound on the work of
# one Spark task. Real histories of one key need a few steps per operation.
MAX_STEPS = 2_000_000
_MAX_SHOWN = 12


@dataclass(slots=True)
class SearchResult:
    """The outcome of one search: linearizable, or not, or unknown (budget exhausted)."""

    verdict: str  # "ok" | "violation" | "unknown"
    steps: int
    linearization: list[int] = field(default_factory=list)  # op ids, deepest partial order
    state: State = None  # the model state after ``linearization``
    stuck: int | None = None  # op id whose return the deepest attempt could not pass


@dataclass(slots=True)
class Counterexample:
    """Why a history is not linearizable, in terms a reader can check by hand."""

    model: str
    op: Operation
    state: str
    prefix_ops: int
    concurrent: list[Operation]
    linearized_tail: list[Operation]

    def message(self, key: str | None) -> str:
        """One line: the first operation no linearization explains, and the state it saw."""
        where = f"key {key}" if key is not None else "history"
        return (
            f"linearizability ({self.model}) {where}: {self.op.describe()} cannot be "
            f"linearized; the longest linearization before it leaves the state at "
            f"{self.state} ({len(self.concurrent)} concurrent ops)"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form for the summary and the notebooks."""

        def op(o: Operation) -> dict[str, Any]:
            fields = dataclasses.asdict(o)
            for name in ("input", "output"):
                if isinstance(fields[name], tuple):
                    fields[name] = list(fields[name])
            fields["text"] = o.describe()
            return fields

        return {
            "model": self.model,
            "op": op(self.op),
            "state": self.state,
            "prefix_ops": self.prefix_ops,
            "concurrent": [op(o) for o in self.concurrent[:_MAX_SHOWN]],
            "linearized_tail": [op(o) for o in self.linearized_tail[-_MAX_SHOWN:]],
        }


def search(model: Model, ops: Sequence[Operation], max_steps: int = MAX_STEPS) -> SearchResult:
    """Run the WGL search over ``ops`` (ids 0..n-1, all observed by ``model``)."""
    # Entries in trace order: (seq, is_call, op id). Unknown outcomes get no return entry.
    entries: list[tuple[int, bool, int]] = []
    for op in ops:
        entries.append((op.invoke_seq, True, op.id))
        if op.determinate:
            assert op.complete_seq is not None
            entries.append((op.complete_seq, False, op.id))
    entries.sort(key=lambda e: (e[0], not e[1]))
    n = len(entries)
    head = n  # a sentinel entry before the first one; -1 ends the list
    nxt = [*(i + 1 if i + 1 < n else -1 for i in range(n)), 0 if n else -1]
    prv = [*(i - 1 if i > 0 else head for i in range(n)), -1]
    is_call = [e[1] for e in entries]
    op_of = [e[2] for e in entries]
    return_of: dict[int, int] = {}
    for position, (_, call, op_id) in enumerate(entries):
        if not call:
            return_of[op_id] = position
    unknown_mask, twin_before = _unknowns(ops, return_of)

    def unlink(i: int) -> None:
        p, q = prv[i], nxt[i]
        nxt[p] = q
        if q != -1:
            prv[q] = p

    def relink(i: int) -> None:
        p, q = prv[i], nxt[i]
        nxt[p] = i
        if q != -1:
            prv[q] = i

    remaining_returns = len(return_of)
    state = model.init()
    linearized = 0
    # (acknowledged ops linearized, state) -> the sets of unknown ops used to get there that
    # were explored; a configuration using a superset of one of them is dominated.
    explored: dict[tuple[int, State], list[int]] = {}
    stack: list[tuple[int, State]] = []
    best = SearchResult("violation", 0, [], state, None)
    best_depth = -1
    entry = nxt[head]
    steps = 0
    while remaining_returns > 0:
        steps += 1
        if steps > max_steps:
            return SearchResult("unknown", steps, best.linearization, best.state, best.stuck)
        if is_call[entry]:
            op = ops[op_of[entry]]
            twin = twin_before[op.id]
            if twin < 0 or linearized >> twin & 1:
                legal, after = model.step(state, op)
                marked = linearized | (1 << op.id)
                if legal and _first_visit(explored, marked, unknown_mask, after):
                    stack.append((entry, state))
                    state, linearized = after, marked
                    unlink(entry)
                    if op.id in return_of:
                        unlink(return_of[op.id])
                        remaining_returns -= 1
                    entry = nxt[head]
                    continue
            entry = nxt[entry]
            continue
        # A return entry whose operation is not linearized: this prefix is impossible.
        if len(stack) > best_depth:
            best_depth = len(stack)
            best = SearchResult("violation", 0, [op_of[e] for e, _ in stack], state, op_of[entry])
        if not stack:
            best.steps = steps
            return best
        entry, state = stack.pop()
        op_id = op_of[entry]
        linearized &= ~(1 << op_id)
        if op_id in return_of:
            relink(return_of[op_id])
            remaining_returns += 1
        relink(entry)
        entry = nxt[entry]
    order = [op_of[e] for e, _ in stack]
    return SearchResult("ok", steps, order, state, None)


def _unknowns(ops: Sequence[Operation], return_of: dict[int, int]) -> tuple[int, list[int]]:
    """The bit mask of the operations of unknown outcome, and for each of them the previous
    one (in call order) the model cannot tell apart from it, or -1."""
    mask = 0
    twin_before = [-1] * len(ops)
    last: dict[str, int] = {}
    for op in sorted(ops, key=lambda o: o.invoke_seq):
        if op.id in return_of:
            continue
        mask |= 1 << op.id
        looks = repr((op.f, op.input, op.status, op.output, op.error))
        twin_before[op.id] = last.get(looks, -1)
        last[looks] = op.id
    return mask, twin_before


def _first_visit(
    explored: dict[tuple[int, State], list[int]], marked: int, unknown_mask: int, state: State
) -> bool:
    """Record the configuration (``marked`` linearized, ``state``) as explored; False when it
    is dominated by one explored before (same acknowledged ops and state, fewer unknowns)."""
    used = marked & unknown_mask
    key = (marked & ~unknown_mask, state)
    seen = explored.get(key)
    if seen is None:
        explored[key] = [used]
        return True
    if any(earlier & ~used == 0 for earlier in seen):
        return False
    seen[:] = [earlier for earlier in seen if used & ~earlier != 0]
    seen.append(used)
    return True


def _prefix(ops: Sequence[Operation], cut_seq: int) -> list[Operation]:
    """The history as it stood at ``cut_seq``: later returns become unknown outcomes."""
    kept: list[Operation] = []
    for op in ops:
        if op.invoke_seq > cut_seq:
            continue
        if op.complete_seq is not None and op.complete_seq > cut_seq:
            op = dataclasses.replace(
                op, output=None, status="pending", error=None, complete_us=None, complete_seq=None
            )
        kept.append(dataclasses.replace(op, id=len(kept)))
    return kept


def explain(
    model: Model, ops: Sequence[Operation], max_steps: int = MAX_STEPS
) -> Counterexample | None:
    """The first acknowledged operation no linearization explains (None if there is none)."""
    returns = sorted(
        op.complete_seq for op in ops if op.determinate and op.complete_seq is not None
    )
    if not returns:
        return None
    lo, hi = 0, len(returns) - 1
    # Invariant: the prefix cut at returns[hi] fails; find the smallest such cut.
    if search(model, _prefix(ops, returns[hi]), max_steps).verdict != "violation":
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if search(model, _prefix(ops, returns[mid]), max_steps).verdict == "violation":
            hi = mid
        else:
            lo = mid + 1
    prefix = _prefix(ops, returns[hi])
    result = search(model, prefix, max_steps)
    failing = next(op for op in prefix if op.complete_seq == returns[hi])
    concurrent = [
        op
        for op in prefix
        if op.id != failing.id
        and op.invoke_seq < (failing.complete_seq or 0)
        and (op.complete_seq is None or op.complete_seq > failing.invoke_seq)
    ]
    return Counterexample(
        model=model.name,
        op=failing,
        state=model.describe_state(result.state),
        prefix_ops=len(prefix),
        concurrent=concurrent,
        linearized_tail=[prefix[i] for i in result.linearization],
    )
