"""What a run is checked for, re-derived from its history and node events alone.

Two kinds of checks, each a plain function over pandas frames that Spark applies as a
grouped map (so one Spark task holds one key, or one run):

- per key: the operations on one key must be linearizable against the scenario's model
  (``check_key``; Spark groups by run and key, P-compositionality makes that sound), and
  the history must be well formed (no completion without an invoke);
- per run: node-event checks (``RUN_CHECKS``): no simulated process crashed with an
  exception; election safety (one leader per epoch); high watermarks never move back;
  no committed offset lost to a truncation or recovery, and no leader elected without
  the committed log; plus a scenario's own checks (echo: liveness after the heal).

The simulator's own verdict (the run table's ``outcome``) is never read here.

Adding a scenario: register a ``ScenarioChecks`` in ``SCENARIOS`` with the models covering
its functions and any run checks of its own; the generic Raft checks apply to every
scenario and are silent when its events carry no Raft vocabulary (docs/traces.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from sim.analysis.catch_up import CHECK as CATCH_UP_CHECK
from sim.analysis.catch_up import CatchUp
from sim.analysis.history import INDETERMINATE, latest_us, op_value, pair_operations, records
from sim.analysis.kafka import (
    ACL_ANSWER,
    COMMIT,
    COMMIT_EPOCH_UNKNOWN,
    KAFKA_OPS,
    MEMBER_ASSIGNMENT,
    OFFSETS_TOPIC,
    QUOTA_ANSWER,
    TXN_STATE_TOPIC,
    AssignmentChecker,
    BatchIdentity,
    KafkaChecker,
    KafkaOp,
    PartitionStateChecker,
    PowerCuts,
    QuotaChecker,
    broker_id,
    check_acl_answer,
    check_committed_on_isr,
    check_duplicate_answer,
    check_liveness,
    check_replica_caught_up,
)
from sim.analysis.linearizability import MAX_STEPS, explain, search
from sim.analysis.models import METADATA_MODELS, EchoModel, Model, Operation
from sim.analysis.quorum_rules import (
    cut_off_violation,
    resign_violation,
    snapshot_load_violation,
    truncation_violation,
)
from sim.analysis.shutdowns import CHECK as SHUTDOWN_CHECK
from sim.analysis.shutdowns import overdue
from sim.analysis.stats import ROLE_PREFIX
from sim.analysis.txn import TXN_END, TXN_OPS, CtpKeys, TxnChecker, TxnOp

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# The echo scenario's heal bound (sim.scenarios.echo.HEAL_BOUND_S; a test keeps them equal).
# Not imported: that would load every scenario, and the raft stack, into each Spark worker.
ECHO_HEAL_BOUND_S = 10.0

# A key with more observed operations than this is not searched (verdict "unknown"): the
# search's memo keys are bitsets over a key's operations, so memory grows with its square.
MAX_OPS_PER_KEY = 20_000

# Events after which a node's log ends at ``offset_to``: a protocol truncation (the raft core
# says "truncation") or a restart's recovery.
TRUNCATING_KINDS = frozenset({"truncate", "truncation", "recovered"})

KEY_RESULT_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("key", pa.string()),
        pa.field("model", pa.string()),
        pa.field("ops", pa.int64()),
        pa.field("result", pa.string()),
        pa.field("steps", pa.int64()),
        pa.field("message", pa.string()),
        pa.field("counterexample", pa.string()),
    ]
)
VIOLATION_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("check", pa.string()),
        pa.field("node", pa.string()),
        pa.field("time_virtual_us", pa.int64()),
        pa.field("message", pa.string()),
    ]
)


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant of one run."""

    check: str
    message: str
    time_virtual_us: int | None = None
    node: str | None = None


@dataclass(frozen=True, slots=True)
class RunData:
    """What a run check sees: one run's operations and node events, in trace order."""

    run_id: str
    scenario: str | None
    ops: pd.DataFrame
    events: pd.DataFrame


RunCheck = Callable[[RunData], list[Violation]]


@dataclass(frozen=True, slots=True)
class ScenarioChecks:
    """A scenario's models (each covers the functions it names) and its own run checks."""

    models: tuple[Callable[[], Model], ...] = ()
    run_checks: tuple[RunCheck, ...] = ()

    def model_for(self, f: str) -> Model | None:
        for factory in self.models:
            model = factory()
            if f in model.functions:
                return model
        return None


# ---- per key: linearizability -------------------------------------------------------------


_OPERATION_COLUMNS = (
    "index",
    "process",
    "f",
    "status",
    "value_in",
    "value_in_text",
    "values_in",
    "value_out",
    "value_out_text",
    "values_out",
    "error",
    "invoke_us",
    "complete_us",
    "invoke_seq",
    "complete_seq",
)


def _operations(ops: pd.DataFrame, model: Model) -> list[Operation]:
    observed: list[Operation] = []
    ordered = ops.sort_values("invoke_seq", kind="stable")
    for row in records(ordered, _OPERATION_COLUMNS):
        known = row.status not in INDETERMINATE
        op = Operation(
            id=len(observed),
            index=int(row.index),
            process=str(row.process),
            f=str(row.f),
            input=op_value(row.value_in, row.value_in_text, row.values_in),
            output=op_value(row.value_out, row.value_out_text, row.values_out) if known else None,
            status=row.status,
            error=row.error,
            invoke_us=int(row.invoke_us),
            complete_us=int(row.complete_us) if known and row.complete_us is not None else None,
            invoke_seq=int(row.invoke_seq),
            complete_seq=int(row.complete_seq) if known and row.complete_seq is not None else None,
        )
        if model.observes(op):
            observed.append(op)
    return observed


def check_key(
    ops: pd.DataFrame, scenario: str | None, max_steps: int = MAX_STEPS
) -> list[dict[str, Any]]:
    """Check one key of one run: well-formedness, then each model over its functions."""
    if ops.empty:
        return []
    run_id = str(ops["run_id"].iloc[0])
    key = ops["key"].iloc[0]
    key = None if key is None or pd.isna(key) else str(key)
    results: list[dict[str, Any]] = []
    orphans = ops[ops["status"] == "orphan"]
    for row in records(orphans, ("index", "process", "f")):
        results.append(
            {
                "run_id": run_id,
                "key": key,
                "model": "history",
                "ops": 1,
                "result": "violation",
                "steps": 0,
                "message": (
                    f"history: #{row.index} {row.process} {row.f} completed "
                    "with no open invoke of that function and key"
                ),
                "counterexample": None,
            }
        )
    spec = SCENARIOS.get(scenario or "", ScenarioChecks())
    checked = ops[ops["status"] != "orphan"]
    model_of = {f: spec.model_for(str(f)) for f in checked["f"].unique()}
    by_model: dict[str, tuple[Model, list[int]]] = {}
    for position, f in enumerate(checked["f"]):
        model = model_of[f]
        if model is not None:
            by_model.setdefault(model.name, (model, []))[1].append(position)
    for name, (model, positions) in sorted(by_model.items()):
        operations = _operations(checked.iloc[positions], model)
        row = {"run_id": run_id, "key": key, "model": name, "ops": len(operations)}
        if len(operations) > MAX_OPS_PER_KEY:
            results.append(
                {
                    **row,
                    "result": "unknown",
                    "steps": 0,
                    "message": f"{len(operations)} operations on one key exceed the bound",
                    "counterexample": None,
                }
            )
            continue
        outcome = search(model, operations, max_steps)
        message = counterexample = None
        if outcome.verdict == "violation":
            found = explain(model, operations, max_steps)
            if found is not None:
                message = found.message(key)
                counterexample = json.dumps(found.to_dict(), default=str)
            else:
                message = f"linearizability ({name}) key {key}: no linearization"
        elif outcome.verdict == "unknown":
            message = f"search gave up after {outcome.steps} steps"
        results.append(
            {
                **row,
                "result": outcome.verdict,
                "steps": outcome.steps,
                "message": message,
                "counterexample": counterexample,
            }
        )
    return results


def check_key_history_rows(history: pd.DataFrame) -> list[dict[str, Any]]:
    """``check_key`` on the raw history rows of one key of one run (with a scenario column).

    A completion repeats its invoke's key, so a key's rows pair among themselves.
    """
    if history.empty:
        return []
    scenario = history["scenario"].iloc[0] if "scenario" in history else None
    return check_key(pair_operations(history.drop(columns=["scenario"], errors="ignore")), scenario)


def check_key_history(history: pd.DataFrame) -> pd.DataFrame:
    """Spark grouped map over (run_id, key): ``check_key_history_rows`` as a frame."""
    return pd.DataFrame(check_key_history_rows(history), columns=KEY_RESULT_SCHEMA.names)


# ---- per run: node events -----------------------------------------------------------------


def _log(value: str | None) -> str:
    return "" if value is None else str(value)


def _int(value: float | int | None) -> int | None:
    return None if value is None else int(value)


def check_crash_free(run: RunData) -> list[Violation]:
    """A simulated process's code raised (``process-failed``) or the loop reported an error."""
    found = []
    for event in records(run.events, ("kind", "node", "time_virtual_us", "detail")):
        if event.kind in ("process-failed", "loop-error"):
            detail = json.loads(event.detail) if isinstance(event.detail, str) else {}
            where = event.node or "loop"
            found.append(
                Violation(
                    "crash-free",
                    f"crash-free: {where} raised {detail.get('error', '?')}",
                    int(event.time_virtual_us),
                    event.node,
                )
            )
    return found


def check_election_safety(run: RunData) -> list[Violation]:
    """At most one node becomes leader of a log in any one epoch."""
    leaders = run.events[run.events["kind"] == f"{ROLE_PREFIX}leader"]
    found = []
    seen: dict[tuple[str, int], str] = {}
    for event in records(leaders, ("node", "time_virtual_us", "log", "epoch")):
        epoch = _int(event.epoch)
        if epoch is None:
            continue
        slot = (_log(event.log), epoch)
        first = seen.setdefault(slot, event.node)
        if first != event.node:
            log = f" of log {slot[0]}" if slot[0] else ""
            found.append(
                Violation(
                    "election-safety",
                    f"election-safety: {first} and {event.node} both became leader{log} "
                    f"in epoch {epoch}",
                    int(event.time_virtual_us),
                    event.node,
                )
            )
    return found


# Events after which a node no longer runs the incarnation that led (an OSError exit too).
_NOT_RUNNING = frozenset({"crash", "exit", "process-failed", "start", "restart"})


def check_high_watermarks(run: RunData) -> list[Violation]:
    """A node's HW never moves back within an incarnation; a leader's never below a committed one.

    The committed offset of a log is the highest HW any of its leaders has reported; a
    later leader reporting less has lost committed entries (or is exposing a stale HW).
    """
    found = []
    role: dict[tuple[str, str], str] = {}  # (node, log) -> role
    node_hw: dict[tuple[str, str, int], int] = {}
    committed: dict[str, tuple[int, int]] = {}  # log -> (highest leader HW, its epoch)
    columns = ("kind", "node", "time_virtual_us", "log", "incarnation", "epoch")
    for event in records(run.events, (*columns, "offset_high_watermark")):
        kind, node, log = event.kind, event.node, _log(event.log)
        if kind.startswith(ROLE_PREFIX):
            role[(node, log)] = kind[len(ROLE_PREFIX) :]
        elif kind in _NOT_RUNNING:
            for slot in [slot for slot in role if slot[0] == node]:
                del role[slot]
        hw = _int(event.offset_high_watermark)
        if hw is None or node is None:
            continue
        at = int(event.time_virtual_us)
        incarnation = _int(event.incarnation) or 0
        previous = node_hw.get((node, log, incarnation))
        if previous is not None and hw < previous:
            found.append(
                Violation(
                    "high-watermark",
                    f"high-watermark: {node} moved its HW{_of(log)} back from {previous} to {hw}",
                    at,
                    node,
                )
            )
        node_hw[(node, log, incarnation)] = max(hw, previous or hw)
        if role.get((node, log)) == "leader":
            epoch = _int(event.epoch) or 0
            known_hw, known_epoch = committed.get(log, (hw, 0))
            # A deposed leader of an older epoch may still report what its epoch committed
            # (say, on waking from a pause); a leader of the committing epoch or a newer one
            # has every committed entry and only moves its HW past its epoch's start.
            if hw < known_hw and epoch >= known_epoch:
                found.append(
                    Violation(
                        "high-watermark",
                        f"high-watermark: leader {node} (epoch {epoch}) reported "
                        f"HW {hw}{_of(log)} below the committed offset {known_hw}",
                        at,
                        node,
                    )
                )
            if hw >= known_hw:
                committed[log] = (hw, max(epoch, known_epoch))
    return found


def _of(log: str) -> str:
    return f" of log {log}" if log else ""


def check_committed_offsets(run: RunData) -> list[Violation]:
    """No committed offset is lost: not by a truncation or recovery, nor by a new leader.

    A node's committed offset is what it itself acknowledged: an explicit durable claim an
    event carries (``offset_committed``, e.g. echo's fsynced records), else the HW it
    reported in this incarnation. A ``truncate`` or ``recovered`` event whose ``offset_to``
    is below it lost committed entries. A ``became-leader`` event whose ``offset_end``
    is below the log's committed offset (the highest leader HW) elected a leader without
    them (leader completeness).
    """
    found = []
    node_hw: dict[tuple[str, str], tuple[int, int]] = {}  # (node, log) -> (incarnation, hw)
    claimed: dict[tuple[str, str], int] = {}
    role: dict[tuple[str, str], str] = {}
    cluster: dict[str, int] = {}
    columns = ("kind", "node", "time_virtual_us", "log", "incarnation", "epoch")
    offsets = ("offset_committed", "offset_to", "offset_high_watermark", "offset_end")
    for event in records(run.events, (*columns, *offsets)):
        kind, node, log = event.kind, event.node, _log(event.log)
        if node is None:
            continue
        at = int(event.time_virtual_us)
        incarnation = _int(event.incarnation) or 0
        if kind.startswith(ROLE_PREFIX):
            role[(node, log)] = kind[len(ROLE_PREFIX) :]
        claim = _int(event.offset_committed)
        if kind in TRUNCATING_KINDS:
            to = _int(event.offset_to)
            if to is not None:
                if claim is not None:
                    bound = claim
                else:
                    hw_incarnation, hw = node_hw.get((node, log), (incarnation, 0))
                    bound = max(
                        claimed.get((node, log), 0), hw if hw_incarnation == incarnation else 0
                    )
                if to < bound:
                    verb = "recovered" if kind == "recovered" else "truncated"
                    found.append(
                        Violation(
                            "committed-offset-lost",
                            f"committed-offset-lost: {node} {verb}{_of(log)} to offset {to}, "
                            f"below offset {bound} it had committed",
                            at,
                            node,
                        )
                    )
        elif claim is not None:
            claimed[(node, log)] = max(claimed.get((node, log), 0), claim)
        hw = _int(event.offset_high_watermark)
        if hw is not None:
            node_hw[(node, log)] = (incarnation, hw)
            if role.get((node, log)) == "leader":
                cluster[log] = max(cluster.get(log, 0), hw)
        end = _int(event.offset_end)
        if kind == f"{ROLE_PREFIX}leader" and end is not None and end < cluster.get(log, 0):
            found.append(
                Violation(
                    "committed-offset-lost",
                    f"committed-offset-lost: {node} became leader{_of(log)} in epoch "
                    f"{_int(event.epoch)} with log end {end}, below the committed offset "
                    f"{cluster[log]}",
                    at,
                    node,
                )
            )
    return found


def check_echo_liveness(run: RunData) -> list[Violation]:
    """After ``heal-all``, within the heal bound every node completes and serves an echo.

    A run that ended before the bound elapsed (stopped early by another failure) is not
    judged: its history cannot show whether progress would have come.
    """
    heals = run.events[run.events["kind"] == "heal-all"]
    if heals.empty:
        return []
    healed_at = int(heals["time_virtual_us"].iloc[-1])
    deadline = healed_at + round(ECHO_HEAL_BOUND_S * 1_000_000)
    nodes = sorted(set(run.events.loc[run.events["kind"] == "start", "node"].dropna()))
    ops = run.ops
    acked = ops[(ops["status"] == "ok") & ops["complete_us"].notna()]
    acked = acked[(acked["complete_us"] >= healed_at) & (acked["complete_us"] <= deadline)]
    completed, served = set(acked["node"]), set(acked["key"])
    stuck = [n for n in nodes if n not in completed or n not in served]
    if not stuck:
        return []
    last = max(int(run.events["time_virtual_us"].max()), latest_us(ops))
    if last < deadline:
        return []
    return [
        Violation(
            "liveness",
            f"liveness: {','.join(stuck)} made no progress within "
            f"{ECHO_HEAL_BOUND_S:.0f}s of healing",
            deadline,
            None,
        )
    ]


# What check quorum buys (docs/raft.md): a cut-off leader resigns within fetch.timeout plus
# a check period, so an older-epoch leader keeps running beside a newer one for less than
# this. The raft scenario's online checker uses the same bound.
DUAL_LEADER_BOUND_US = 1_500_000


def check_dual_leadership(run: RunData) -> list[Violation]:
    """No running (not crashed, not paused) leader of an older epoch keeps leading for more
    than DUAL_LEADER_BOUND_US after a newer epoch's leader is running."""
    leading: dict[str, int] = {}
    paused: set[str] = set()
    since: dict[str, int] = {}
    columns = ("kind", "node", "time_virtual_us", "epoch")
    for event in records(run.events, columns):
        kind, node, now = event.kind, event.node, int(event.time_virtual_us)
        if node is not None:
            if kind == f"{ROLE_PREFIX}leader" and _int(event.epoch) is not None:
                leading[node] = int(event.epoch)
            elif kind.startswith(ROLE_PREFIX) or kind in _NOT_RUNNING:
                leading.pop(node, None)
            elif kind == "pause":
                paused.add(node)
            elif kind == "resume":
                paused.discard(node)
        running = {n: e for n, e in leading.items() if n not in paused}
        newest = max(running.values(), default=None)
        for name, epoch in running.items():
            if newest is None or epoch >= newest:
                since.pop(name, None)
                continue
            started = since.setdefault(name, now)
            if now - started > DUAL_LEADER_BOUND_US:
                return [
                    Violation(
                        "check-quorum",
                        f"check-quorum: {name} still leads epoch {epoch} "
                        f"{(now - started) / 1e6:.1f}s after epoch {newest} elected another leader",
                        now,
                        name,
                    )
                ]
        for name in list(since):
            if name not in running:
                del since[name]
    return []


def _detail(value: object) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else {}


def check_snapshot_loads(run: RunData) -> list[Violation]:
    """A node that loaded a snapshot (``snapshot-loaded``) has a high watermark at least its
    end and a log that starts exactly there (quorum_rules, as the online checker)."""
    found = []
    loads = run.events[run.events["kind"] == "snapshot-loaded"]
    columns = ("node", "time_virtual_us", "offset_end", "offset_high_watermark", "detail")
    for event in records(loads, columns):
        end, hw = _int(event.offset_end), _int(event.offset_high_watermark)
        log_start = _detail(event.detail).get("log_start")
        if end is None or hw is None or log_start is None:
            continue
        message = snapshot_load_violation(str(event.node), end, hw, int(log_start))
        if message is not None:
            found.append(
                Violation("snapshot-load", message, int(event.time_virtual_us), event.node)
            )
    return found


def check_truncated_commits(run: RunData) -> list[Violation]:
    """No truncation cuts a committed record: the first record a ``truncation`` cut
    (``cut_epoch``) must not have the epoch a ``commit`` event applied at its offset before
    (quorum_rules, as the online checker; the node's own HW is check_committed_offsets')."""
    found = []
    committed: dict[int, int] = {}  # offset -> epoch of the record committed there
    columns = ("kind", "node", "time_virtual_us", "offset_from", "offset_to", "epoch", "detail")
    events = run.events[run.events["kind"].isin(["commit", "truncation"])]
    for event in records(events, columns):
        start, end = _int(event.offset_from), _int(event.offset_to)
        if start is None or end is None:
            continue
        if event.kind == "commit":
            for offset in range(start, end):
                committed.setdefault(offset, _int(event.epoch) or 0)
            continue
        cut_epoch = _detail(event.detail).get("cut_epoch")
        message = truncation_violation(str(event.node), end, cut_epoch, committed.get(end))
        if message is not None:
            found.append(
                Violation("committed-lost", message, int(event.time_virtual_us), event.node)
            )
    return found


def check_resignations(run: RunData) -> list[Violation]:
    """A leader resigns (``became-resigned`` after ``became-leader`` within one incarnation)
    only when it can lose its quorum, which a sole voter cannot (quorum_rules)."""
    found = []
    led: dict[str, int] = {}
    columns = ("kind", "node", "time_virtual_us", "epoch", "detail")
    for event in records(run.events, columns):
        kind, node = event.kind, event.node
        if node is None:
            continue
        if kind == f"{ROLE_PREFIX}leader":
            led[node] = _int(event.epoch) or 0
        elif kind == f"{ROLE_PREFIX}resigned" and node in led:
            voters = _detail(event.detail).get("voters")
            message = None if voters is None else resign_violation(node, led[node], int(voters))
            if message is not None:
                found.append(Violation("check-quorum", message, int(event.time_virtual_us), node))
        if (
            kind.startswith(ROLE_PREFIX) and kind != f"{ROLE_PREFIX}leader"
        ) or kind in _NOT_RUNNING:
            led.pop(node, None)
    return found


def check_cut_off_leaders(run: RunData) -> list[Violation]:
    """No leader keeps leading for more than CUT_OFF_BOUND_S cut off from a majority of the
    voters: spells from ``quorum-cut-off`` to ``quorum-cut-off-end`` (the simulator traces
    both, knowing the network), or to the end of the trace (quorum_rules)."""
    since: dict[str, tuple[int, int]] = {}
    last_us = 0
    found = []
    columns = ("kind", "node", "time_virtual_us", "epoch")
    for event in records(run.events, columns):
        kind, node, now = event.kind, event.node, int(event.time_virtual_us)
        last_us = max(last_us, now)
        if kind == "quorum-cut-off" and node is not None:
            since[node] = (now, _int(event.epoch) or 0)
        elif kind == "quorum-cut-off-end" and node in since:
            start, epoch = since.pop(node)
            message = cut_off_violation(node, epoch, (now - start) / 1e6)
            if message is not None:
                found.append(Violation("cut-off-leader", message, now, node))
    for node, (start, epoch) in sorted(since.items()):
        message = cut_off_violation(node, epoch, (last_us - start) / 1e6)
        if message is not None:
            found.append(Violation("cut-off-leader", message, last_us, node))
    return found


def check_state_machine_safety(run: RunData) -> list[Violation]:
    """Every node that applied a committed batch at an offset applied the same one: same
    end, epoch and record digest (``commit`` events)."""
    seen: dict[int, tuple[int | None, int | None, str, str]] = {}
    commits = run.events[run.events["kind"] == "commit"]
    columns = ("node", "time_virtual_us", "offset_from", "offset_to", "epoch", "detail")
    for event in records(commits, columns):
        detail = json.loads(event.detail) if isinstance(event.detail, str) else {}
        base = _int(event.offset_from)
        if base is None:
            continue
        entry = (_int(event.offset_to), _int(event.epoch), str(detail.get("records")))
        known = seen.setdefault(base, (*entry, event.node))
        if known[:3] != entry:
            return [
                Violation(
                    "state-machine-safety",
                    f"state-machine-safety: offset {base} applied as (end {known[0]}, epoch "
                    f"{known[1]}) on {known[3]} and as (end {entry[0]}, epoch {entry[1]}) on "
                    f"{event.node}, or with different records",
                    int(event.time_virtual_us),
                    event.node,
                )
            ]
    return []


def check_commit_own_epoch(run: RunData) -> list[Violation]:
    """A leader advances its high watermark only over an entry of its own epoch (KIP-595's
    rule against Raft's figure 8): earlier epochs' entries commit only together with one of
    its own. Judged from a leader's ``high-watermark`` event and the ``commit`` event in
    which that node then applies the batch just below the new high watermark."""
    found = []
    leading: dict[str, int] = {}
    pending: dict[str, tuple[int, int]] = {}  # node -> (high watermark, epoch led)
    columns = ("kind", "node", "time_virtual_us", "epoch", "offset_high_watermark")
    for event in records(run.events, (*columns, "offset_from", "offset_to")):
        kind, node = event.kind, event.node
        if node is None:
            continue
        if kind == f"{ROLE_PREFIX}leader":
            leading[node] = _int(event.epoch) or 0
        elif kind.startswith(ROLE_PREFIX) or kind in _NOT_RUNNING:
            leading.pop(node, None)
            pending.pop(node, None)
        elif kind == "high-watermark" and node in leading:
            hw = _int(event.offset_high_watermark)
            if hw is not None and hw > 0:
                pending[node] = (hw, leading[node])
        elif kind == "commit" and node in pending:
            hw, epoch = pending[node]
            start, end = _int(event.offset_from), _int(event.offset_to)
            if start is None or end is None or not start < hw <= end:
                continue
            del pending[node]
            if _int(event.epoch) != epoch:
                found.append(
                    Violation(
                        "commit-own-epoch",
                        f"commit-own-epoch: {node} (leader of epoch {epoch}) advanced its "
                        f"high watermark to {hw} over an entry of epoch {_int(event.epoch)}",
                        int(event.time_virtual_us),
                        node,
                    )
                )
    return found


def check_metadata_images(run: RunData) -> list[Violation]:
    """The metadata scenario's image changes (``broker-state``, ``partition-state``, in
    offset order): a partition's leader is in its ISR, a new leader comes from the previous
    ISR, ELR or last known leader (unclean election is off there), and no fenced broker
    leads.

    Every node reports the changes it replays, and a restarted one replays the log from its
    start again: each broker's or partition's changes are taken once, in offset order, so
    an old state reported late is not read as a new election."""
    found: list[Violation] = []
    fenced: dict[int, bool] = {}
    partitions: dict[tuple[str, int], tuple[int, tuple[int, ...], tuple[int, ...]]] = {}
    applied: dict[tuple[str, int] | int, int] = {}  # broker or partition -> offset taken
    kinds = run.events["kind"].isin(("broker-state", "partition-state"))
    changes = run.events[kinds].sort_values("offset_end", kind="stable")
    columns = ("kind", "node", "time_virtual_us", "leader", "offset_end", "detail")
    for event in records(changes, columns):
        detail = json.loads(event.detail) if isinstance(event.detail, str) else {}
        subject: tuple[str, int] | int = (
            int(detail["broker"])
            if event.kind == "broker-state"
            else (str(detail["topic_id"]), int(detail["partition"]))
        )
        offset = int(event.offset_end)
        if applied.get(subject, -1) >= offset:
            continue
        applied[subject] = offset
        if event.kind == "broker-state":
            fenced[int(detail["broker"])] = bool(detail["fenced"])
            continue
        where = f"{detail['topic']}-{detail['partition']} at offset {offset}"
        leader, isr = int(event.leader), tuple(int(r) for r in detail["isr"])
        replicas = tuple(int(r) for r in detail.get("replicas", ()))  # older traces: none
        # KIP-966: the ELR and the last known leader may lead cleanly too (older traces
        # carry neither).
        eligible = isr + tuple(
            int(r) for key in ("elr", "last_known_elr") for r in detail.get(key, ())
        )
        slot = (str(detail["topic_id"]), int(detail["partition"]))
        previous = partitions.get(slot)
        partitions[slot] = (leader, eligible, replicas)
        if leader == -1:
            continue
        problem = None
        if leader not in isr:
            problem = f"leader-in-isr: {where} led by {leader} outside its ISR {list(isr)}"
        elif (
            previous is not None
            and leader != previous[0]
            and leader not in previous[1]
            and replicas == previous[2]  # a completed reassignment may elect a new member
        ):
            problem = (
                f"leader-from-isr: {where} elected {leader} from outside its ISR "
                f"{list(previous[1])}"
            )
        elif fenced.get(leader, True):
            problem = f"fenced-leader: {where} led by fenced broker {leader}"
        if problem is not None:
            check = problem.partition(":")[0]
            found.append(Violation(check, problem, int(event.time_virtual_us), event.node))
    return found


def check_broker_serving(run: RunData) -> list[Violation]:
    """A broker is unfenced only on a heartbeat where it asked for it having replayed its
    registration, and opens its listener only after that (``broker-serving`` events)."""
    found = []
    serving = run.events[run.events["kind"] == "broker-serving"]
    for event in records(serving, ("node", "time_virtual_us", "epoch", "offset_end", "detail")):
        detail = json.loads(event.detail) if isinstance(event.detail, str) else {}
        epoch, offset = _int(event.epoch), _int(event.offset_end)
        if epoch is None or offset is None:
            continue
        reported = int(detail.get("reported", epoch))
        if detail.get("want_fence") or reported < epoch or offset <= epoch:
            found.append(
                Violation(
                    "unfenced-early",
                    f"unfenced-early: {event.node} (broker epoch {epoch}) was unfenced on a "
                    f"heartbeat with want_fence={detail.get('want_fence')} at offset "
                    f"{detail.get('reported')} and serves from offset {offset}",
                    int(event.time_virtual_us),
                    event.node,
                )
            )
    return found


def check_metadata_catch_up(run: RunData) -> list[Violation]:
    """Bounded staleness after the heal (sim/analysis/catch_up.py): every node listed by the
    ``heal-start`` event reaches its ``offset_end`` within ``bound_s``, judged from the
    ``metadata-applied`` samples."""
    kinds = run.events["kind"].isin(("heal-start", "metadata-applied"))
    columns = ("kind", "node", "time_virtual_us", "offset_end", "detail")
    watch: CatchUp | None = None
    end_us = 0
    for event in records(run.events[kinds], columns):
        at = int(event.time_virtual_us)
        end_us = max(end_us, at)
        if event.kind == "heal-start":
            detail = json.loads(event.detail) if isinstance(event.detail, str) else {}
            if event.offset_end is None or "nodes" not in detail:
                return []  # a trace from before the check
            bound_us = int(float(detail["bound_s"]) * 1e6)
            nodes = tuple(str(n) for n in detail["nodes"])
            watch = CatchUp(int(event.offset_end), at, bound_us, nodes)
        elif watch is not None:
            watch.observe(str(event.node), int(event.offset_end), at)
    if watch is None:
        return []
    return [Violation(CATCH_UP_CHECK, message, end_us) for message in watch.violations()]


def check_controlled_shutdowns(run: RunData) -> list[Violation]:
    """A node told to stop (``terminate``) ends that incarnation (``exit`` or ``crash``)
    within the bound (sim/analysis/shutdowns.py), judged up to the end of the trace."""
    kinds = run.events["kind"].isin(("terminate", "exit", "crash"))
    columns = ("kind", "node", "time_virtual_us")
    began: dict[str, int] = {}
    found: list[Violation] = []
    end_us = int(run.events["time_virtual_us"].max()) if not run.events.empty else 0
    for event in records(run.events[kinds], columns):
        at, node = int(event.time_virtual_us), str(event.node)
        if event.kind == "terminate":
            began[node] = at
            continue
        start = began.pop(node, None)
        message = None if start is None else overdue(node, start, at, end_us)
        if message is not None:
            found.append(Violation(SHUTDOWN_CHECK, message, at, node))
    for node, start in began.items():
        message = overdue(node, start, None, end_us)
        if message is not None:
            found.append(Violation(SHUTDOWN_CHECK, message, start, node))
    return found


# The trace events check_kafka replays, besides the operations: power cuts and ISRs (what
# an acknowledgement promised), the sampled partition state, and the data plane's own
# events (a leader's high watermark move with its ISR's batches compared, each replica's
# state after the final reads, the batch a duplicate answer named).
KAFKA_EVENT_KINDS = (
    "crash",
    "partition-state",
    "partition-hw",
    "partition-truncate",
    "hw-advance",
    "replica-caught-up",
    "duplicate-answer",
    MEMBER_ASSIGNMENT,
    ACL_ANSWER,
    QUOTA_ANSWER,
)


def check_kafka(run: RunData) -> list[Violation]:
    """The kafka scenario's checks (sim/analysis/kafka.py, the code the simulator runs
    online), replayed in trace order: operations at their completion, brokers' power cuts
    and partition-state events at theirs, then the end-of-history and liveness checks."""
    cuts = PowerCuts()
    config: dict[str, Any] = {}
    items: list[tuple[int, str, Any]] = []
    columns = ("seq", "kind", "node", "incarnation", "time_virtual_us", "log", "epoch", "leader")
    offsets = ("offset_to", "detail")
    for event in records(run.events, (*columns, *offsets)):
        if event.kind == "kafka-config":
            config = json.loads(event.detail) if isinstance(event.detail, str) else {}
        elif event.kind in KAFKA_EVENT_KINDS:
            items.append((int(event.seq), "event", event))
    if not config:
        return []
    op_columns = ("process", "f", "key", "status", "value_in", "offset", "values_out")
    done = ("invoke_us", "invoke_seq", "complete_us", "complete_seq", "detail_out")
    kafka_ops = []
    pending = []
    txn_items: list[tuple[int, str, Any]] = []
    for row in records(run.ops, (*op_columns, *done)):
        if row.f in TXN_OPS:
            txn_items.extend(_txn_items(row))
            continue
        # A commit still open at the end may have landed (the checker judges commits at the
        # end, pending ones included); any other open operation is not checked.
        if row.f == COMMIT and row.status == "pending":
            op = KafkaOp(
                str(row.process),
                COMMIT,
                str(row.key),
                "pending",
                _int(row.value_in),
                invoke_us=int(row.invoke_us),
            )
            pending.append((int(row.invoke_seq), "op", op))
            continue
        if row.f not in KAFKA_OPS or row.status not in ("ok", "fail", "info"):
            continue
        detail = json.loads(row.detail_out) if isinstance(row.detail_out, str) else {}
        pairs = [int(v) for v in row.values_out] if row.values_out is not None else []
        op = KafkaOp(
            str(row.process),
            str(row.f),
            str(row.key),
            str(row.status),
            _int(row.value_in),
            _int(row.offset),
            tuple(zip(pairs[::2], pairs[1::2], strict=True)),
            int(row.complete_us),
            tuple(int(r) for r in detail.get("isr", ())),
            int(row.invoke_us),
            int(detail.get("epoch", COMMIT_EPOCH_UNKNOWN)),
        )
        kafka_ops.append(op)
        items.append((int(row.complete_seq), "op", op))
    items.extend(txn_items)
    items.sort(key=lambda item: item[0])
    items.extend(sorted(pending, key=lambda item: item[0]))
    checker = KafkaChecker(
        acks_all=config.get("acks") == "all", cuts=cuts, offsets_log=config.get("offsets_log", "")
    )
    states = PartitionStateChecker(cuts=cuts)
    txn = TxnChecker(cuts=cuts, ctp=CtpKeys(**config["ctp"]) if "ctp" in config else None)
    assignments = AssignmentChecker(
        int(config.get("fence_after_us", 0)), cuts, str(config.get("offsets_log", ""))
    )
    quotas = QuotaChecker(
        float(config.get("quota_rate", 0)), float(config.get("quota_window_s", 0))
    )
    found: list[Violation] = []
    end_us = 0
    for _seq, what, item in items:
        if what == "op":
            checker.add(item)
            end_us = max(end_us, item.complete_us)
            continue
        if what == "txn":
            before = len(txn.violations)
            txn.add(item)
            found.extend(Violation(v.check, v.message, v.time_us) for v in txn.violations[before:])
            end_us = max(end_us, item.time_us)
            continue
        at = int(item.time_virtual_us)
        end_us = max(end_us, at)
        if item.kind == "crash":
            broker = broker_id(item.node)
            if broker is not None:
                cuts.cut(broker, at)
            continue
        detail = json.loads(item.detail) if isinstance(item.detail, str) else {}
        if item.kind == "partition-state":
            if detail.get("topic") in (
                config.get("topic"),
                OFFSETS_TOPIC,
                TXN_STATE_TOPIC,
                *config.get("txn_topics", ()),
            ):
                key = f"{detail['topic']}-{detail['partition']}"
                cuts.isr_changed(key, tuple(int(r) for r in detail["isr"]), at)
            continue
        if item.kind == "hw-advance":
            result = check_committed_on_isr(
                str(item.node),
                str(item.log),
                _int(item.epoch) or 0,
                int(detail["from_hw"]),
                int(detail["hw"]),
                {str(k): int(v) for k, v in detail.get("diverged", {}).items()},
                at,
            )
        elif item.kind == "replica-caught-up":
            result = check_replica_caught_up(
                str(item.node),
                str(item.log),
                str(item.leader),
                int(detail["hw"]),
                int(detail["end"]),
                int(detail["diverged_at"]),
                float(detail["bound_s"]),
                at,
            )
        elif item.kind == "duplicate-answer":
            held = detail.get("found")
            result = check_duplicate_answer(
                str(item.node),
                str(item.log),
                _int(item.epoch) or 0,
                int(detail["offset"]),
                BatchIdentity(*(int(v) for v in detail["batch"])),
                int(detail["found_base"]),
                None if held is None else BatchIdentity(*(int(v) for v in held)),
                at,
                cuts,
            )
        elif item.kind == ACL_ANSWER:
            result = check_acl_answer(
                str(item.node),
                str(detail["api"]),
                str(detail["resource"]),
                str(detail["error"]),
                at,
            )
        elif item.kind == QUOTA_ANSWER:
            result = quotas.answered(
                str(item.node),
                str(detail["connection"]),
                int(detail["sent_us"]),
                int(detail["bytes"]),
                str(detail["error"]),
                at,
            )
        elif item.kind == MEMBER_ASSIGNMENT:
            result = assignments.assigned(
                str(detail["group"]),
                str(detail["process"]),
                (int(p) for p in detail["partitions"]),
                authoritative=bool(detail["authoritative"]),
                sent_us=int(detail["sent_us"]),
                isr=tuple(int(r) for r in detail["isr"]),
                time_us=at,
            )
        elif item.kind == "partition-hw":
            result = states.on_hw(
                str(item.node),
                _int(item.incarnation) or 0,
                str(item.log),
                _int(item.epoch) or 0,
                int(detail["hw"]),
                tuple(int(r) for r in detail.get("isr", ())),
                at,
            )
        else:
            result = states.on_truncate(str(item.node), str(item.log), int(item.offset_to), at)
        if result is not None:
            found.append(Violation(result.check, result.message, at, item.node))
    for violation in checker.finish(end_us):
        found.append(Violation(violation.check, violation.message, violation.time_us))
    for violation in txn.finish(end_us):
        found.append(Violation(violation.check, violation.message, violation.time_us))
    topic, partitions = str(config.get("topic")), int(config.get("partitions", 0))
    for message in check_liveness(kafka_ops, partitions, topic):
        found.append(Violation(message.partition(":")[0], message, end_us))
    return found


def _txn_items(row: Any) -> list[tuple[int, str, Any]]:
    """One transactional operation of the history as the TxnChecker's inputs, each at its
    place in the trace: a txn-end at its invocation too (a read before a commit was asked
    for is an intermediate read), every operation at its completion."""
    found: list[tuple[int, str, Any]] = []
    value = _int(row.value_in)
    if row.f == TXN_END:
        invoked = TxnOp(
            str(row.process), TXN_END, str(row.key), "invoke", value, time_us=int(row.invoke_us)
        )
        found.append((int(row.invoke_seq), "txn", invoked))
    if row.status not in ("ok", "fail", "info"):
        return found
    detail = json.loads(row.detail_out) if isinstance(row.detail_out, str) else {}
    pairs = [int(v) for v in row.values_out] if row.values_out is not None else []
    op = TxnOp(
        str(row.process),
        str(row.f),
        str(row.key),
        str(row.status),
        value,
        _int(row.offset),
        tuple(zip(pairs[::2], pairs[1::2], strict=True)),
        str(detail.get("txn", "")),
        int(row.complete_us),
        tuple(int(r) for r in detail.get("isr", ())),
        int(detail.get("reached", -1)),
        int(row.invoke_us),
        tuple(detail["source"]) if "source" in detail else None,  # type: ignore[arg-type]
    )
    found.append((int(row.complete_seq), "txn", op))
    return found


GENERIC_RUN_CHECKS: tuple[RunCheck, ...] = (
    check_crash_free,
    check_election_safety,
    check_high_watermarks,
    check_committed_offsets,
)

SCENARIOS: dict[str, ScenarioChecks] = {
    "echo": ScenarioChecks(models=(EchoModel,), run_checks=(check_echo_liveness,)),
    # The raft scenario is judged by the generic node-event checks; its history (proposals
    # and reads of the replicated log) gets a model when it records one.
    "raft": ScenarioChecks(
        run_checks=(
            check_dual_leadership,
            check_state_machine_safety,
            check_commit_own_epoch,
            check_snapshot_loads,
            check_truncated_commits,
            check_resignations,
            check_cut_off_leaders,
        )
    ),
    # Topic create/delete/create-partitions/alter-config and broker config changes with the
    # final reads, one topic or config per key (models.METADATA_MODELS), plus the image,
    # broker-lifecycle and catch-up checks from node events.
    "metadata": ScenarioChecks(
        models=METADATA_MODELS,
        run_checks=(
            check_metadata_images,
            check_broker_serving,
            check_metadata_catch_up,
            check_controlled_shutdowns,
        ),
    ),
    # The Kafka workload (sim/analysis/kafka.py) plus the metadata plane's image checks; a
    # real run (kraft-jepsen) adds the metadata scenario's admin workload, whose history the
    # metadata models check (the simulated kafka scenario records none).
    "kafka": ScenarioChecks(
        models=METADATA_MODELS,
        run_checks=(
            check_kafka,
            check_metadata_images,
            check_broker_serving,
            check_controlled_shutdowns,
        ),
    ),
}


def check_run(run: RunData) -> list[Violation]:
    """Every generic and scenario-specific run check of one run."""
    spec = SCENARIOS.get(run.scenario or "", ScenarioChecks())
    found: list[Violation] = []
    for check in (*GENERIC_RUN_CHECKS, *spec.run_checks):
        found.extend(check(run))
    return found


def run_data(ops: pd.DataFrame, events: pd.DataFrame) -> RunData:
    """Bundle one run's frames (events sorted into trace order)."""
    frames = [frame for frame in (ops, events) if not frame.empty]
    run_id = str(frames[0]["run_id"].iloc[0]) if frames else ""
    scenario = None
    for frame in frames:
        if "scenario" in frame:
            scenario = frame["scenario"].iloc[0]
            break
    return RunData(
        run_id=run_id,
        scenario=scenario,
        ops=ops,
        events=events.sort_values("seq", kind="stable").reset_index(drop=True),
    )


def key_results(history: DataFrame) -> DataFrame:
    """Spark: ``check_key`` for every (run, key) of a history with a scenario column."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return history.groupBy("run_id", "key").applyInPandas(
        check_key_history, from_arrow_schema(KEY_RESULT_SCHEMA)
    )
