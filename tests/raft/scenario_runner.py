"""Raft scenarios as text files, in the manner of etcd-raft's datadriven tests.

One file in ``tests/raft/scenarios/`` drives one ``RaftCore`` (the node under test) by hand:
every message it receives is written out, and after every step the file holds exactly what
the core handed the driver and the state it is in. A protocol change shows up as a readable
diff of these files. The format, one step per block, blocks separated by a blank line::

    # comments (lines starting with '#') may precede a step
    deliver 2 Vote candidate_epoch=1 last_offset_epoch=0 last_offset=0
    ----
    persist epoch=1 leader=-1 voted=2
    reply 2 VoteResp error_code=0 leader_epoch=1 leader_id=-1 vote_granted=true
    state: unattached epoch=1 leader=-1 voted=2 hw=0 end=0 flushed=0 voters=1,2,3

Above the ``----``, the step; below it, the expected output: what ``ready()`` returned (in
the order the driver carries it out), then one ``state:`` line (role, epoch, leader, vote,
high watermark, log end offset, flushed offset, voter ids in force).

Steps:

- ``create id=1 voters=1,2,3 [epoch=E leader=L voted=V voted_dir=dN] [dir=dN] [dynamic]
  [log=BATCH,...] [snapshot=END@EPOCH] [bugs=a,b] [bootstrap=-1,-2] [NAME_ms=N]``: a new
  core (first step of every file); ``NAME_ms`` sets that RaftConfig timeout. ``dynamic``:
  kraft.version 1, each voter v on directory ``dv`` and this node on ``d<id>`` unless
  ``dir=`` says otherwise. The log is flushed at start, as the driver does before it builds
  the core. ``snapshot``: the log starts at END after a snapshot of ``SNAPSHOT_BYTES``
  bytes. The core's random election timeouts come from a fixed seed.
- ``tick MS``: MS milliseconds pass (the clock starts at 0), then ``tick``.
- ``deliver SRC [#CORR] TYPE field=value ...``: a request from SRC, or (with ``#CORR``, the
  correlation id printed on the core's request) a response to one. TYPE is a short name of
  a raft/messages.py class (``TYPES``); fields are its Kafka field names. Fields in
  ``DEFAULTS`` may be left out (``candidate_id``, ``leader_id`` and ``replica_id`` default
  to SRC).
- ``propose N``: N records proposed on the core (prints the last offset, or the refusal).
- ``flushed [OFFSET]``: the driver synced the log (to its end by default).
- ``change-voters add|remove|update ID [dir=dN]``: ``RaftCore.change_voters``.
- ``resign``: graceful shutdown of a leader.
- ``restart``: a crash; the log keeps what was flushed, the core is rebuilt from the last
  persisted quorum state.

Output lines: ``persist`` (quorum-state written), ``send DST #CORR TYPE ...`` (a request),
``reply DST TYPE ...`` (an answer on the connection a request came on), ``truncate OFFSET``
(carried out at once, then ``truncated`` is called), ``chunk`` / ``install`` (a snapshot
download; an install is carried out at once), ``flush`` (asked; the log is synced only by a
``flushed`` step), ``event ...``. A field is printed only if it is required or differs from
its default. Values: ``true``/``false``, ids as integers, directory ids as ``dN``
(``uuid.UUID(int=N)``), lists comma-separated, byte strings as ``NB`` (N bytes), and
records as batches ``BASE-LAST@EPOCH`` (control batches add ``:lc`` LeaderChange, ``:kvN``
KRaftVersionRecord, ``:voters(1.2.3)`` VotersRecord; data records hold ``v<offset>``).

Run ``SCENARIO_REWRITE=1 pytest tests/raft/test_scenarios.py`` to write the actual output
into the files (then read the diff before committing it: the files are the expectations).
"""

from __future__ import annotations

import dataclasses
import difflib
import random
import shlex
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from log.batch import decode_batch, encode_batch, iter_batches
from log.records import ControlRecordType, Record, decode_control_key
from raft.control import leader_change_record
from raft.core import NotLeaderError, RaftConfig, RaftCore, Ready
from raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Inbound,
    RequestFailed,
    VoteRequest,
    VoteResponse,
)
from raft.quorum_state import QuorumState
from raft.replicated_log import MemoryLog
from raft.snapshot import SnapshotId
from raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    Endpoint,
    Voter,
    VoterSet,
    decode_kraft_version,
    decode_voters,
    kraft_version_record,
    voters_record,
)

SNAPSHOT_BYTES = 100
EPOCH_MS = 1_767_225_600_000  # the wall clock at scenario time 0

TYPES: dict[str, type] = {
    "Vote": VoteRequest,
    "VoteResp": VoteResponse,
    "Begin": BeginQuorumEpochRequest,
    "BeginResp": BeginQuorumEpochResponse,
    "End": EndQuorumEpochRequest,
    "EndResp": EndQuorumEpochResponse,
    "Fetch": FetchRequest,
    "FetchResp": FetchResponse,
    "FetchSnap": FetchSnapshotRequest,
    "FetchSnapResp": FetchSnapshotResponse,
    "Failed": RequestFailed,
}
NAMES = {cls: name for name, cls in TYPES.items()}
# Fields a ``deliver`` step may leave out; "src" stands for the sender's id.
DEFAULTS: dict[str, object] = {
    "candidate_id": "src",
    "leader_id": "src",
    "replica_id": "src",
    "error_code": 0,
    "pre_vote": False,
    "preferred_successors": (),
    "max_wait_ms": 0,
    "max_bytes": 1024 * 1024,
    "position": 0,
}


class ScenarioError(Exception):
    """A scenario file that cannot be read, or whose expectations differ from the run."""


class ScenarioLog(MemoryLog):
    """MemoryLog that may start after a snapshot (held in memory, ``SNAPSHOT_BYTES`` long)."""

    def __init__(self, snapshot: SnapshotId | None = None) -> None:
        super().__init__()
        self._snapshot = snapshot

    def _base(self) -> int:
        return self._snapshot.end_offset if self._snapshot is not None else 0

    def start_offset(self) -> int:
        return self._batches[0][0] if self._batches else self._base()

    def end_offset(self) -> int:
        return self._batches[-1][1] if self._batches else self._base()

    def last_fetched_epoch(self) -> int:
        if not self._batches and self._snapshot is not None:
            return self._snapshot.epoch
        return super().last_fetched_epoch()

    def latest_snapshot(self) -> SnapshotId | None:
        return self._snapshot

    def snapshot_size(self, snapshot: SnapshotId) -> int:
        if snapshot != self._snapshot:
            raise FileNotFoundError(snapshot.file_name)
        return SNAPSHOT_BYTES

    def read_snapshot_chunk(self, snapshot: SnapshotId, position: int, max_bytes: int) -> bytes:
        size = self.snapshot_size(snapshot)
        return b"s" * max(0, min(max_bytes, size - position))

    def install(self, snapshot: SnapshotId) -> None:
        """Restart the log at a downloaded snapshot's end (DurableLog.install_snapshot)."""
        self._snapshot = snapshot
        self._batches = []
        self._epochs = []


class FixedClock:
    """The wall clock the core stamps control records with, following scenario time."""

    def __init__(self, runner: ScenarioRunner) -> None:
        self._runner = runner

    def now_ms(self) -> int:
        return EPOCH_MS + self._runner.now_ms


# ---- values: text <-> Python ---------------------------------------------------------------
def directory(text: str) -> uuid.UUID:
    if not text.startswith("d"):
        raise ScenarioError(f"directory id {text!r} is not dN")
    return uuid.UUID(int=int(text[1:]))


def _ids(text: str, sep: str = ",") -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(sep) if part)


def parse_batches(text: str) -> bytes:
    """``BASE-LAST@EPOCH[:lc|:kvN|:voters(1.2)]`` tokens, comma-separated, as v2 batches."""
    out = bytearray()
    for token in text.split(","):
        span, _, kind = token.partition(":")
        offsets, _, epoch_text = span.partition("@")
        base, _, last = offsets.partition("-")
        first, end, epoch = int(base), int(last or base), int(epoch_text)
        records: list[Record]
        if not kind:
            records = [Record(None, f"v{o}".encode(), 0) for o in range(first, end + 1)]
        else:
            records = []
            for part in kind.split("+"):
                if part == "lc":
                    records.append(leader_change_record(0, (), (), 0))
                elif part.startswith("kv"):
                    records.append(kraft_version_record(int(part[2:]), 0))
                elif part.startswith("voters(") and part.endswith(")"):
                    ids = _ids(part[len("voters(") : -1], ".")
                    records.append(voters_record(VoterSet(tuple(voter(v) for v in ids)), 0))
                else:
                    raise ScenarioError(f"unknown control record {part!r} in {token!r}")
            if len(records) != end - first + 1:
                raise ScenarioError(f"{token!r}: {len(records)} records for its offsets")
        out += encode_batch(
            records, base_offset=first, partition_leader_epoch=epoch, is_control=bool(kind)
        )
    return bytes(out)


def format_batches(data: bytes) -> str:
    tokens = []
    for position, _header in iter_batches(data):
        header, records = decode_batch(data, position)
        token = f"{header.base_offset}-{header.next_offset - 1}@{header.partition_leader_epoch}"
        if header.is_control:
            parts = []
            for record in records:
                kind = decode_control_key(record.key)
                if kind is ControlRecordType.LEADER_CHANGE:
                    parts.append("lc")
                elif kind is ControlRecordType.KRAFT_VERSION:
                    parts.append(f"kv{decode_kraft_version(record.value)}")
                elif kind is ControlRecordType.KRAFT_VOTERS:
                    ids = decode_voters(record.value).ids()
                    parts.append(f"voters({'.'.join(map(str, ids))})")
                else:
                    parts.append(kind.name.lower())
            token += ":" + "+".join(parts)
        tokens.append(token)
    return ",".join(tokens)


def voter(voter_id: int, disk: uuid.UUID | None = None) -> Voter:
    """Voter ``voter_id`` on directory ``d<voter_id>`` unless ``disk`` says otherwise."""
    return Voter(
        voter_id,
        disk or uuid.UUID(int=voter_id),
        (Endpoint("CONTROLLER", f"n{voter_id}", 9093),),
    )


def format_value(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, uuid.UUID):
        return f"d{value.int}"
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, bytes):
        return format_batches(value) if name == "records" else f"{len(value)}B"
    return str(value)


def parse_value(name: str, text: str, kind: object) -> object:
    kind = str(kind)
    if "UUID" in kind:
        return directory(text)
    if "bool" in kind:
        if text not in ("true", "false"):
            raise ScenarioError(f"{name}={text!r}: true or false")
        return text == "true"
    if "tuple" in kind:
        return _ids(text)
    if "bytes" in kind:
        if name == "records":
            return parse_batches(text)
        return b"s" * int(text.removesuffix("B"))
    return int(text)


def format_body(body: object) -> str:
    parts = [NAMES[type(body)]]
    for f in dataclasses.fields(body):  # type: ignore[arg-type]
        value = getattr(body, f.name)
        has_default = f.default is not dataclasses.MISSING
        if has_default and value == f.default:
            continue
        parts.append(f"{f.name}={format_value(f.name, value)}")
    return " ".join(parts)


def parse_body(words: list[str], src: int) -> object:
    if not words or words[0] not in TYPES:
        raise ScenarioError(f"message type {words[:1]} is not one of {sorted(TYPES)}")
    cls = TYPES[words[0]]
    kinds = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, object] = {}
    for word in words[1:]:
        name, eq, text = word.partition("=")
        if not eq or name not in kinds:
            raise ScenarioError(f"{words[0]} has no field {name!r} (fields: {sorted(kinds)})")
        values[name] = parse_value(name, text, kinds[name].type)
    for name, f in kinds.items():
        if name in values or f.default is not dataclasses.MISSING:
            continue
        if name not in DEFAULTS:
            raise ScenarioError(f"{words[0]} needs {name}=")
        default = DEFAULTS[name]
        values[name] = src if default == "src" else default
    return cls(**values)


def format_event(event: object) -> str:
    parts = [type(event).__name__]
    for f in dataclasses.fields(event):  # type: ignore[arg-type]
        value = getattr(event, f.name)
        parts.append(f"{f.name}={getattr(value, 'value', value)}")
    return " ".join(parts)


# ---- the run -------------------------------------------------------------------------------
@dataclass
class Step:
    line: int
    comments: list[str]
    command: str
    expected: list[str]


def parse_file(text: str) -> list[Step]:
    steps: list[Step] = []
    lines = text.splitlines()
    i = 0
    comments: list[str] = []
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            comments.append(line)
            i += 1
            continue
        start = i
        if i + 1 >= len(lines) or lines[i + 1] != "----":
            raise ScenarioError(f"line {i + 1}: a step is one line followed by '----'")
        i += 2
        expected = []
        while i < len(lines) and lines[i].strip():
            expected.append(lines[i])
            i += 1
        while comments and not comments[0].strip():
            comments.pop(0)
        steps.append(Step(start + 1, comments, line, expected))
        comments = []
    return steps


def format_file(steps: list[Step], actual: list[list[str]]) -> str:
    out: list[str] = []
    for step, lines in zip(steps, actual, strict=True):
        if out:
            out.append("")
        out.extend(step.comments)
        out.append(step.command)
        out.append("----")
        out.extend(lines)
    return "\n".join(out) + "\n"


@dataclass
class ScenarioRunner:
    """Drives one core through the steps of a file and records what it hands out."""

    now_ms: int = 0
    core: RaftCore | None = None
    log: ScenarioLog = field(default_factory=ScenarioLog)
    stored: QuorumState = field(default_factory=QuorumState)
    flushed_offset: int = 0
    options: dict[str, str] = field(default_factory=dict)
    output: list[str] = field(default_factory=list)
    incarnation: int = 0
    # Planted bugs added to every core built (to show that a scenario catches one).
    planted: frozenset[str] = frozenset()

    def run(self, command: str) -> list[str]:
        self.output = []
        words = shlex.split(command)
        verb, args = words[0], words[1:]
        if verb == "create":
            self._create(args)
        elif self.core is None:
            raise ScenarioError("the first step must be 'create'")
        elif verb == "tick":
            self.now_ms += int(args[0])
            self.core.tick(self.now_ms)
        elif verb == "deliver":
            self._deliver(args)
        elif verb == "propose":
            records = [Record(None, b"p", 0) for _ in range(int(args[0]))]
            try:
                self.output.append(f"proposed last={self.core.propose(records)}")
            except NotLeaderError as error:
                self.output.append(f"refused: {error}")
        elif verb == "flushed":
            offset = int(args[0]) if args else self.log.end_offset()
            self.flushed_offset = max(self.flushed_offset, offset)
            self.core.flushed(offset)
        elif verb == "change-voters":
            options = dict(a.split("=", 1) for a in args[2:])
            disk = directory(options["dir"]) if "dir" in options else None
            code, offset = self.core.change_voters(args[0], voter(int(args[1]), disk))
            self.output.append(f"change-voters error_code={code} offset={offset}")
        elif verb == "resign":
            self.core.resign()
        elif verb == "restart":
            if self.log.end_offset() > self.flushed_offset:
                self.log.truncate_now(self.flushed_offset)
            self._build()
        else:
            raise ScenarioError(f"unknown step {verb!r}")
        self._drain()
        core = self.core
        assert core is not None
        self.output.append(
            f"state: {core.role.value} epoch={core.epoch} leader={core.leader_id} "
            f"voted={core.voted_id} hw={core.high_watermark} end={self.log.end_offset()} "
            f"flushed={core.flushed_offset} voters={','.join(map(str, core.voters))}"
        )
        return self.output

    def _create(self, args: list[str]) -> None:
        self.options = dict(a.split("=", 1) if "=" in a else (a, "") for a in args)
        snapshot = None
        if "snapshot" in self.options:
            end, _, epoch = self.options["snapshot"].partition("@")
            snapshot = SnapshotId(int(end), int(epoch))
        self.log = ScenarioLog(snapshot)
        if self.options.get("log"):
            self.log.append_as_follower(parse_batches(self.options["log"]))
        self.flushed_offset = self.log.end_offset()
        voted_dir = self.options.get("voted_dir")
        self.stored = QuorumState(
            int(self.options.get("epoch", 0)),
            int(self.options.get("leader", -1)),
            int(self.options.get("voted", -1)),
            directory(voted_dir) if voted_dir else None,
        )
        self._build()

    def _build(self) -> None:
        options = self.options
        node_id = int(options["id"])
        ids = _ids(options["voters"])
        dynamic = "dynamic" in options
        base = VoterSet(tuple(voter(v) for v in ids)) if dynamic else VoterSet.static(ids)
        own = options.get("dir")
        disk = directory(own) if own else (uuid.UUID(int=node_id) if dynamic else None)
        self.incarnation += 1
        self.core = RaftCore(
            node_id,
            base,
            self.log,
            self.stored,
            rng=random.Random(self.incarnation),
            clock=FixedClock(self),
            now_ms=self.now_ms,
            bugs=frozenset(b for b in options.get("bugs", "").split(",") if b) | self.planted,
            kraft_version=KRAFT_VERSION_DYNAMIC if dynamic else 0,
            directory_id=disk,
            bootstrap=_ids(options.get("bootstrap", "")),
            config=RaftConfig(**{k: int(v) for k, v in options.items() if k.endswith("_ms")}),
        )

    def _deliver(self, args: list[str]) -> None:
        assert self.core is not None
        src = int(args[0])
        rest = args[1:]
        if rest and rest[0].startswith("#"):
            body = parse_body(rest[1:], src)
            message = Inbound(src, body, correlation_id=int(rest[0][1:]))  # type: ignore[arg-type]
        else:
            body = parse_body(rest, src)
            message = Inbound(src, body, reply_to="conn")  # type: ignore[arg-type]
        self.core.step(message)

    def _drain(self) -> None:
        """Carry out the core's work as the driver would, printing it."""
        core = self.core
        assert core is not None
        for _ in range(100):
            ready = core.ready()
            if ready.empty():
                return
            self._print(ready)
            if ready.state is not None:
                self.stored = ready.state
            if ready.truncate_to is not None:
                self.log.truncate_now(ready.truncate_to)
                self.flushed_offset = min(self.flushed_offset, ready.truncate_to)
                core.truncated(ready.truncate_to)
            if ready.install_snapshot is not None:
                self.log.install(ready.install_snapshot)
                self.flushed_offset = ready.install_snapshot.end_offset
                core.snapshot_installed(ready.install_snapshot)
        raise ScenarioError("the core kept producing work")

    def _print(self, ready: Ready) -> None:
        out = self.output
        if ready.state is not None:
            state = ready.state
            line = f"persist epoch={state.leader_epoch} leader={state.leader_id} "
            line += f"voted={state.voted_id}"
            if state.voted_directory_id is not None:
                line += f" voted_dir=d{state.voted_directory_id.int}"
            out.append(line)
        for message in ready.messages:
            if message.reply_to is not None:
                out.append(f"reply {message.dst} {format_body(message.body)}")
            else:
                out.append(
                    f"send {message.dst} #{message.correlation_id} {format_body(message.body)}"
                )
        if ready.truncate_to is not None:
            out.append(f"truncate {ready.truncate_to}")
        for snapshot, position, data in ready.snapshot_chunks:
            out.append(
                f"chunk {snapshot.end_offset}@{snapshot.epoch} position={position} {len(data)}B"
            )
        if ready.install_snapshot is not None:
            snapshot = ready.install_snapshot
            out.append(f"install {snapshot.end_offset}@{snapshot.epoch}")
        if ready.flush:
            out.append("flush")
        out.extend(f"event {format_event(e)}" for e in ready.events)


def run_file(path: Path, *, rewrite: bool = False, planted: frozenset[str] = frozenset()) -> None:
    """Run a scenario file; raise ScenarioError with a diff at the first step that differs
    (or, with ``rewrite``, write the actual output into the file). ``planted``: bugs of
    raft/core.py's tables to plant in the core."""
    steps = parse_file(path.read_text())
    if not steps or not steps[0].command.startswith("create"):
        raise ScenarioError(f"{path}: the first step must be 'create'")
    runner = ScenarioRunner(planted=planted)
    actual: list[list[str]] = []
    for step in steps:
        try:
            lines = runner.run(step.command)
        except ScenarioError as error:
            raise ScenarioError(f"{path}:{step.line}: {error}") from None
        actual.append(list(lines))
        if not rewrite and lines != step.expected:
            diff = "\n".join(
                difflib.unified_diff(step.expected, lines, "expected", "actual", lineterm="", n=20)
            )
            raise ScenarioError(f"{path}:{step.line}: {step.command}\n{diff}")
    if rewrite:
        path.write_text(format_file(steps, actual))
