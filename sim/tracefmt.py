"""The columnar trace: versioned Parquet tables a run writes and Spark reads (docs/traces.md).

``Trace.event`` stays the single source of truth: this module only re-shapes its events. A
``ParquetTraceWriter`` subscribes to a run's trace and files every event into one of two
tables as it happens (``op`` events become history rows, everything else node events), then
adds one run row when the run ends and publishes the run's directory in one rename:

    DIR/runs/run_id=<id>/run.parquet      one row: configuration, outcome, digest, durations
    DIR/runs/run_id=<id>/history.parquet  the operation history (invoke/ok/fail/info)
    DIR/runs/run_id=<id>/events.parquet   node and fault events

A run directory appears complete or not at all, so many sweep workers (processes, machines
with a shared file system) can add runs to one DIR with no coordination, and a reader never
sees half a run. Wall-clock time is recorded here and only here: it is not deterministic, so
it must never reach the digest.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from sim.run import RunConfig, RunResult
    from sim.trace import Trace

# Bump on any change a reader could misread: a column renamed, removed, retyped or given a
# new meaning. Adding a nullable column does not bump it (readers fill it with nulls).
SCHEMA_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
METADATA_VERSION_KEY = b"kraft.trace.schema_version"
METADATA_TABLE_KEY = b"kraft.trace.table"

RUNS_DIR = "runs"
RUN_FILE = "run.parquet"
HISTORY_FILE = "history.parquet"
EVENTS_FILE = "events.parquet"

# Operation types of the history (Jepsen's vocabulary): info = outcome unknown.
OP_TYPES = ("invoke", "ok", "fail", "info")


def _schema(table: str, fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(
        fields,
        metadata={METADATA_VERSION_KEY: str(SCHEMA_VERSION).encode(), METADATA_TABLE_KEY: table},
    )


RUNS_SCHEMA = _schema(
    "runs",
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("scenario", pa.string(), nullable=False),
        pa.field("seed", pa.int64(), nullable=False),
        pa.field("nodes", pa.int32(), nullable=False),
        pa.field("duration_faults_s", pa.float64(), nullable=False),
        pa.field("faults", pa.list_(pa.string()), nullable=False),
        pa.field("bug", pa.string()),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("violation", pa.string()),
        pa.field("digest", pa.string(), nullable=False),
        pa.field("duration_virtual_s", pa.float64(), nullable=False),
        pa.field("duration_wall_s", pa.float64(), nullable=False),
        pa.field("time_started_wall_ns", pa.int64(), nullable=False),
        pa.field("code_version", pa.string(), nullable=False),
        pa.field("trace_events", pa.int64(), nullable=False),
        pa.field("history_rows", pa.int64(), nullable=False),
        pa.field("event_rows", pa.int64(), nullable=False),
    ],
)

HISTORY_SCHEMA = _schema(
    "history",
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("index", pa.int64(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("process", pa.string(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("f", pa.string(), nullable=False),
        pa.field("key", pa.string()),
        pa.field("value", pa.int64()),
        pa.field("value_text", pa.string()),
        pa.field("values", pa.list_(pa.int64())),
        pa.field("offset", pa.int64()),
        pa.field("error", pa.string()),
        pa.field("time_virtual_us", pa.int64(), nullable=False),
        pa.field("time_wall_ns", pa.int64(), nullable=False),
        pa.field("node", pa.string()),
        pa.field("incarnation", pa.int32()),
        pa.field("detail", pa.string()),
    ],
)

EVENTS_SCHEMA = _schema(
    "events",
    [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("time_virtual_us", pa.int64(), nullable=False),
        pa.field("time_wall_ns", pa.int64(), nullable=False),
        pa.field("node", pa.string()),
        pa.field("incarnation", pa.int32()),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("log", pa.string()),
        pa.field("epoch", pa.int64()),
        pa.field("leader", pa.string()),
        pa.field("offset_high_watermark", pa.int64()),
        pa.field("offset_from", pa.int64()),
        pa.field("offset_to", pa.int64()),
        pa.field("offset_end", pa.int64()),
        pa.field("offset_committed", pa.int64()),
        pa.field("detail", pa.string()),
    ],
)

# Trace field names (as scenarios and the raft core spell them) -> event columns. A field
# whose name is a column maps to itself; anything else lands in ``detail`` as JSON.
_EVENT_FIELD_ALIASES: dict[str, str] = {
    "leader_id": "leader",
    "high_watermark": "offset_high_watermark",
    "from_offset": "offset_from",
    "to_offset": "offset_to",
    "end_offset": "offset_end",
    "committed": "offset_committed",
}
# Per-kind aliases: echo's ``recovered`` says how many records survived (the log end after
# recovery) and how many the node had acknowledged as durable (its committed offset).
_KIND_FIELD_ALIASES: dict[str, dict[str, str]] = {
    "recovered": {"records": "offset_to", "synced": "offset_committed"},
}
_EVENT_INT_COLUMNS = (
    "epoch",
    "offset_high_watermark",
    "offset_from",
    "offset_to",
    "offset_end",
    "offset_committed",
)
_EVENT_TEXT_COLUMNS = ("log", "leader")
# Fields that are the event's frame, not its content.
_FRAME_FIELDS = frozenset({"t_us", "kind", "node", "incarnation"})
_OP_FIELDS = frozenset({"type", "f", "key", "value", "values", "offset", "error", "process"})


def run_id_for(config: RunConfig) -> str:
    """A readable id naming one configuration: the same config always maps to the same id.

    Running a configuration again replaces its directory, which is what a deterministic
    simulator wants (same config, same trace); a changed duration, fault mix, size or bug is
    a different run.
    """
    fields: list[object] = [
        config.scenario,
        config.seed,
        config.duration_s,
        list(config.faults),
        config.bug,
        config.nodes,
        config.voters,
        config.observers,
        config.controllers,
        config.brokers,
    ]
    if config.scenario == "kafka":  # other scenarios' ids stay as they were
        fields += [config.partitions, config.rf, config.acks, config.idempotent]
        if config.compact:  # runs without it keep their ids
            fields.append("compact")
    identity = json.dumps(fields, separators=(",", ":"))
    short = hashlib.blake2b(identity.encode(), digest_size=4).hexdigest()
    return f"{config.scenario}-s{config.seed}-{short}"


@functools.cache
def code_version() -> str:
    """The package version plus ``git describe`` of the checkout, when there is one."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        package = version("kraft-py")
    except PackageNotFoundError:
        package = "0+unknown"
    root = Path(__file__).resolve().parent.parent
    try:
        # GIT_OPTIONAL_LOCKS=0: --dirty must not refresh (write) the index of a checkout
        # other people are working in.
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},
        )
    except (OSError, subprocess.SubprocessError):
        return package
    text = described.stdout.strip()
    return f"{package}+g{text}" if described.returncode == 0 and text else package


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _int_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    )


@dataclass(slots=True)
class _Columns:
    """Column-wise rows of one table, appended as events arrive."""

    names: tuple[str, ...]
    data: dict[str, list[Any]]

    @classmethod
    def of(cls, schema: pa.Schema) -> _Columns:
        return cls(tuple(schema.names), {name: [] for name in schema.names})

    def append(self, row: dict[str, Any]) -> None:
        for name in self.names:
            self.data[name].append(row.get(name))

    def __len__(self) -> int:
        return len(self.data[self.names[0]])

    def table(self, schema: pa.Schema) -> pa.Table:
        return pa.Table.from_pydict(self.data, schema=schema)


class ParquetTraceWriter:
    """Collects one run's events and publishes them as a run directory under ``root``."""

    def __init__(
        self, root: str | os.PathLike[str], config: RunConfig, run_id: str | None = None
    ) -> None:
        self.root = Path(root)
        self.config = config
        # A real-process run (kraft-jepsen) is never repeated exactly: it names its own id.
        self.run_id = run_id or run_id_for(config)
        self._started_wall_ns = time.time_ns()
        self._history = _Columns.of(HISTORY_SCHEMA)
        self._events = _Columns.of(EVENTS_SCHEMA)
        self._incarnation: dict[str, int] = {}
        self._seq = 0

    def attach(self, trace: Trace) -> None:
        """Receive every event of ``trace`` from now on (the digest is not affected)."""
        trace.sink = self.add

    def add(self, record: dict[str, Any]) -> None:
        """File one trace event (the dict ``Trace.event`` hashed) into its table."""
        seq = self._seq
        self._seq += 1
        kind = record["kind"]
        node = record.get("node")
        if kind == "start" and node is not None and "incarnation" in record:
            self._incarnation[node] = int(record["incarnation"])
        incarnation = self._incarnation.get(node) if node is not None else None
        frame = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "seq": seq,
            "time_virtual_us": record["t_us"],
            "time_wall_ns": time.time_ns(),
            "node": node,
            "incarnation": incarnation,
        }
        if kind == "op":
            self._add_op(frame, record)
        elif kind != "verdict":
            # The simulator's verdict belongs to the run row; the events table holds only
            # what happened, so an analysis cannot lean on the simulator's own judgement.
            self._add_event(frame, kind, record)

    def _add_op(self, frame: dict[str, Any], record: dict[str, Any]) -> None:
        op_type = record["type"]
        assert op_type in OP_TYPES, f"unknown op type {op_type!r}"
        node = frame["node"]
        value = record.get("value")
        values = record.get("values")
        if values is None and _int_list(value):
            value, values = None, value  # a list of integers is a multi-valued argument/result
        value_int = _int_or_none(value)
        rest = {k: v for k, v in record.items() if k not in _FRAME_FIELDS and k not in _OP_FIELDS}
        process = record.get("process")
        if process is None:
            # A client dies with its incarnation; its successor is a new process (Jepsen's
            # rule), so a crashed client's open operation stays open, never completed.
            process = f"{node}:{frame['incarnation'] or 0}"
        self._history.append(
            {
                **frame,
                "index": len(self._history),
                "process": str(process),
                "type": op_type,
                "f": str(record["f"]),
                "key": _text(record.get("key")),
                "value": value_int,
                "value_text": None if value_int is not None else _text(value),
                "values": None if values is None else [int(v) for v in values],
                "offset": _int_or_none(record.get("offset")),
                "error": _text(record.get("error")),
                "detail": _text(rest) if rest else None,
            }
        )

    def _add_event(self, frame: dict[str, Any], kind: str, record: dict[str, Any]) -> None:
        if kind == "start" and (frame["incarnation"] or 1) > 1:
            kind = "restart"
        aliases = _KIND_FIELD_ALIASES.get(kind, {})
        row: dict[str, Any] = {**frame, "kind": kind}
        rest: dict[str, Any] = {}
        for name, value in record.items():
            if name in _FRAME_FIELDS:
                continue
            column = aliases.get(name) or _EVENT_FIELD_ALIASES.get(name, name)
            if column in _EVENT_INT_COLUMNS and _int_or_none(value) is not None:
                row[column] = value
            elif column in _EVENT_TEXT_COLUMNS and value is not None:
                row[column] = str(value)
            else:
                rest[name] = value
        row["detail"] = _text(rest) if rest else None
        self._events.append(row)

    def commit(self, result: RunResult) -> Path:
        """Write the three tables and publish the run directory atomically; returns it."""
        config = self.config
        run_row = {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "scenario": config.scenario,
            "seed": config.seed,
            "nodes": config.nodes,
            "duration_faults_s": float(config.duration_s),
            "faults": list(config.faults),
            "bug": config.bug,
            # A crash is a violation kind ("crashed: ..."); the analysis re-derives both.
            "outcome": "violation" if result.violation is not None else result.outcome,
            "violation": result.violation,
            "digest": result.digest,
            "duration_virtual_s": float(result.virtual_s),
            "duration_wall_s": float(result.wall_s),
            "time_started_wall_ns": self._started_wall_ns,
            "code_version": code_version(),
            "trace_events": self._seq,
            "history_rows": len(self._history),
            "event_rows": len(self._events),
        }
        runs = _Columns.of(RUNS_SCHEMA)
        runs.append(run_row)
        parent = self.root / RUNS_DIR
        parent.mkdir(parents=True, exist_ok=True)
        final = parent / f"run_id={self.run_id}"
        # Names starting with "." are skipped by Spark's and pyarrow's dataset listing, so
        # a half-written run is invisible until the rename below.
        staging = parent / f".tmp-{self.run_id}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            _write(self._history.table(HISTORY_SCHEMA), staging / HISTORY_FILE)
            _write(self._events.table(EVENTS_SCHEMA), staging / EVENTS_FILE)
            _write(runs.table(RUNS_SCHEMA), staging / RUN_FILE)
            _publish(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return final


def _write(table: pa.Table, path: Path) -> None:
    # zstd plus dictionary encoding keeps a small run's files at a few KiB; one row group
    # per file because a run is read whole.
    pq.write_table(table, path, compression="zstd", use_dictionary=True)


def _publish(staging: Path, final: Path) -> None:
    """Rename ``staging`` to ``final``; an older copy of the same run is replaced."""
    try:
        os.rename(staging, final)
        return
    except OSError:
        if not final.exists():
            raise
    retired = final.with_name(f".old-{final.name}-{uuid.uuid4().hex[:8]}")
    os.rename(final, retired)
    os.rename(staging, final)
    shutil.rmtree(retired, ignore_errors=True)


def check_version(version: int) -> None:
    """Refuse a table written by a schema this code does not know (ValueError)."""
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(
            f"trace schema version {version} is not supported "
            f"(this kraft-py reads {sorted(SUPPORTED_VERSIONS)})"
        )
