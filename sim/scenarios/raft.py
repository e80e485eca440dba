"""The raft scenario: a KRaft quorum (plus observers) under faults, checked continuously.

Each voter runs the real RaftNode (driver, transport over simulated TCP, metadata log on the
simulated disk). Whoever leads proposes records and waits for them to commit. The checker
listens to every node incarnation and holds the quorum to Raft's invariants:
- election safety: at most one leader per epoch;
- leader completeness: a new leader's log holds every committed record;
- state machine safety: no two nodes commit different records at one offset, and each
  incarnation applies offsets in order, each once;
- committed records are never lost: no truncation below a node's high watermark, and every
  acknowledged proposal is in the final committed log at its offset;
- high watermark monotone per node incarnation;
- a leader commits through its own epoch (KIP-595's rule, Raft's figure 8): it advances
  its high watermark only over an entry of its epoch, never over older entries alone;
- committed means stored on a majority: when a leader advances its high watermark, the
  entry below it is in the logs of a majority of voters (those the checker cannot read,
  being down, count in the leader's favour);
- bounded dual leadership (what check quorum buys): a running leader that no longer has a
  quorum gives up within fetch.timeout plus slack, so two running leaders never coexist
  for longer than that;
- liveness: after the heal phase a single leader exists and a fresh proposal commits on
  every live node within 10 virtual seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass, field

from log.batch import decode_batch, iter_batches
from log.records import Record
from log.runtime import Runtime
from raft.core import HighWatermarkAdvanced, NotLeaderError, Role, RoleChanged, Truncated
from raft.disk_log import DiskLog
from raft.driver import (
    BUGS,
    CommittedBatch,
    LeadershipLost,
    ProposalLost,
    RaftNode,
    RaftNodeConfig,
)
from raft.snapshot import SnapshotId
from sim.harness import ScenarioRun
from sim.nemesis import Nemesis
from sim.process import SimProcess
from sim.run import RunConfig, RunResult
from sim.trace import Trace
from sim.world import World

PORT = 9093
CLUSTER_ID = "kraft-sim-cluster-000A"
METADATA_DIR = "/data/__cluster_metadata-0"
HEAL_BOUND_S = 10.0
# A cut-off leader resigns within fetch.timeout (2 s) plus one check period (0.5 s) of
# losing its quorum, while a successor needs fetch.timeout plus an election: honest overlap
# stays under a second. Without check quorum it lasts as long as the partition.
DUAL_LEADER_BOUND_S = 1.5
PROPOSERS = 3
SNAPSHOT_EVERY_RECORDS = 40
SNAPSHOT_CHECK_S = 2.0


def _read_all(log: DiskLog) -> dict[int, tuple[int, bytes | None]]:
    """offset -> (epoch, value) of every record a node holds: its snapshot, then its log."""
    entries: dict[int, tuple[int, bytes | None]] = {}
    snapshot = log.latest_snapshot()
    if snapshot is not None:
        for record in log.load_snapshot(snapshot):
            offset_text, _, epoch_text = (record.key or b"").decode().partition(":")
            entries[int(offset_text)] = (int(epoch_text), record.value)
    offset = log.start_offset()
    for _ in range(100_000):
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for position, _header in iter_batches(data):
            header, records = decode_batch(data, position)
            for record in records:
                entries[header.base_offset + (record.offset_delta or 0)] = (
                    header.partition_leader_epoch,
                    record.value,
                )
            offset = header.next_offset
    return entries


@dataclass(slots=True)
class Checker:
    """Raft's invariants over every node incarnation of one run."""

    trace: Trace
    loop: asyncio.AbstractEventLoop
    violation: str | None = None
    leaders: dict[int, str] = field(default_factory=dict)
    committed: dict[int, tuple[int, bytes | None]] = field(default_factory=dict)
    acked: dict[int, bytes] = field(default_factory=dict)
    leading: dict[str, int] = field(default_factory=dict)
    dual_since: dict[str, float] = field(default_factory=dict)
    max_commit: int = 0
    # The largest epoch each node has acted in (every role change carries a persisted epoch).
    epochs: dict[str, int] = field(default_factory=dict)
    # Each voter's log as of its latest incarnation, and whether that incarnation runs.
    voter_logs: dict[str, DiskLog] = field(default_factory=dict)
    voter_alive: dict[str, SimProcess] = field(default_factory=dict)

    def max_epoch(self, node: str) -> int:
        return self.epochs.get(node, 0)

    def fail(self, message: str) -> None:
        if self.violation is None:
            self.violation = message
            self.trace.event("violation", detail=message)

    def check_own_epoch(self, leader: str, log: DiskLog, high_watermark: int) -> None:
        """A leader's new high watermark must sit just above an entry of its own epoch:
        entries of earlier epochs commit only together with one of its own."""
        epoch = self.leading[leader]
        entry_epoch = log.epoch_for_offset(high_watermark - 1)
        if entry_epoch != epoch:
            self.fail(
                f"commit-own-epoch: {leader} (leader of epoch {epoch}) advanced its high "
                f"watermark to {high_watermark} over an entry of epoch {entry_epoch}"
            )

    def check_majority(self, leader: str, high_watermark: int) -> None:
        """The entry just below a leader's new high watermark must sit on a majority."""
        offset = high_watermark - 1
        if offset < 0 or leader not in self.voter_logs:
            return
        epoch = self.voter_logs[leader].epoch_for_offset(offset)
        holding = unknown = 0
        for name, log in self.voter_logs.items():
            if not self.voter_alive[name].alive:
                unknown += 1
            elif log.end_offset() > offset and (
                log.start_offset() > offset or log.epoch_for_offset(offset) == epoch
            ):
                holding += 1
        if holding + unknown <= len(self.voter_logs) // 2:
            self.fail(
                f"committed-majority: {leader} advanced its high watermark to {high_watermark} "
                f"but offset {offset} (epoch {epoch}) is on only {holding} of "
                f"{len(self.voter_logs)} voters"
            )

    def listener(self, process: SimProcess, log: DiskLog) -> NodeListener:
        return NodeListener(self, process, process.incarnation, log)

    def check_dual_leadership(self, processes: dict[str, SimProcess]) -> None:
        """Called periodically: how long has a stale leader kept running beside a newer one?"""
        now = self.loop.time()
        running = {
            name: epoch
            for name, epoch in self.leading.items()
            if processes[name].alive and not processes[name].paused
        }
        newest = max(running.values(), default=None)
        for name, epoch in running.items():
            if newest is not None and epoch < newest:
                since = self.dual_since.setdefault(name, now)
                if now - since > DUAL_LEADER_BOUND_S:
                    self.fail(
                        f"check-quorum: {name} still leads epoch {epoch} {now - since:.1f}s "
                        f"after epoch {newest} elected another leader"
                    )
            else:
                self.dual_since.pop(name, None)
        for name in list(self.dual_since):
            if name not in running:
                del self.dual_since[name]


@dataclass(slots=True)
class NodeListener:
    """One incarnation of one node, reporting to the checker."""

    checker: Checker
    process: SimProcess
    incarnation: int
    log: DiskLog
    high_watermark: int = 0
    applied: int = 0
    # The replicated state: every committed record (offset, epoch, value), in order.
    state: list[tuple[int, int, bytes | None]] = field(default_factory=list)
    snapshots_loaded: int = 0

    def live(self) -> bool:
        """False for a crashed incarnation whose tasks are still unwinding."""
        return self.process.alive and self.process.incarnation == self.incarnation

    def handle_event(self, event: object) -> None:
        checker, name = self.checker, self.process.name
        if not self.live():
            return
        if isinstance(event, RoleChanged):
            if event.epoch < checker.max_epoch(name):
                checker.fail(
                    f"epoch-durable: {name} is back at epoch {event.epoch} after acting in "
                    f"epoch {checker.max_epoch(name)} (its quorum-state was lost)"
                )
            checker.epochs[name] = max(event.epoch, checker.max_epoch(name))
            if event.role is Role.LEADER:
                checker.leading[name] = event.epoch
            else:
                checker.leading.pop(name, None)
            # A leader's log end lets kraft-analyze check leader completeness on its own.
            end = {"end_offset": self.log.end_offset()} if event.role is Role.LEADER else {}
            checker.trace.event(
                f"became-{event.role.value}",
                node=name,
                epoch=event.epoch,
                leader=event.leader_id,
                **end,
            )
            if event.role is Role.LEADER:
                self._became_leader(event.epoch)
        elif isinstance(event, HighWatermarkAdvanced):
            if event.high_watermark < self.high_watermark:
                checker.fail(
                    f"hw-monotone: {name} went from {self.high_watermark} back to "
                    f"{event.high_watermark}"
                )
            self.high_watermark = event.high_watermark
            checker.trace.event(
                "high-watermark",
                node=name,
                high_watermark=event.high_watermark,
                epoch=checker.max_epoch(name),
            )
            if name in checker.leading:
                checker.check_own_epoch(name, self.log, event.high_watermark)
                checker.check_majority(name, event.high_watermark)
        elif isinstance(event, Truncated):
            checker.trace.event(
                "truncation", node=name, from_offset=event.from_offset, to_offset=event.to_offset
            )
            if event.to_offset < self.high_watermark:
                checker.fail(
                    f"committed-lost: {name} truncated to {event.to_offset} below its high "
                    f"watermark {self.high_watermark}"
                )

    def _became_leader(self, epoch: int) -> None:
        checker, name = self.checker, self.process.name
        previous = checker.leaders.setdefault(epoch, name)
        if previous != name:
            checker.fail(f"election-safety: {previous} and {name} both led epoch {epoch}")
            return
        entries = _read_all(self.log)
        for offset in sorted(checker.committed):
            if entries.get(offset) != checker.committed[offset]:
                checker.fail(
                    f"leader-completeness: {name} leads epoch {epoch} without committed "
                    f"offset {offset} ({checker.committed[offset]} vs {entries.get(offset)})"
                )
                return

    def handle_commit(self, batch: CommittedBatch) -> None:
        checker, name = self.checker, self.process.name
        if not self.live():
            return
        if batch.base_offset != self.applied:
            checker.fail(
                f"apply-order: {name} applied offset {batch.base_offset} after {self.applied}"
            )
        for index, record in enumerate(batch.records):
            offset = batch.base_offset + (record.offset_delta or index)
            entry = (batch.epoch, record.value)
            known = checker.committed.setdefault(offset, entry)
            if known != entry:
                checker.fail(
                    f"state-machine-safety: offset {offset} committed as {known} and as "
                    f"{entry} on {name}"
                )
            self.applied = offset + 1
            self.state.append((offset, batch.epoch, record.value))
            checker.max_commit = max(checker.max_commit, offset)
        # What this node applied, as a digest kraft-analyze can compare across nodes.
        hasher = hashlib.blake2b(digest_size=8)
        for record in batch.records:
            hasher.update(record.value or b"")
            hasher.update(b"\0")
        checker.trace.event(
            "commit",
            node=name,
            from_offset=batch.base_offset,
            to_offset=self.applied,
            epoch=batch.epoch,
            records=hasher.hexdigest(),
        )

    def snapshot_records(self) -> list[Record]:
        """The state as snapshot records: key "offset:epoch", the record's value."""
        return [Record(f"{o}:{e}".encode(), v, 0) for o, e, v in self.state]

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        checker, name = self.checker, self.process.name
        if not self.live():
            return
        state = []
        for record in records:
            offset_text, _, epoch_text = (record.key or b"").decode().partition(":")
            state.append((int(offset_text), int(epoch_text), record.value))
        if [o for o, _, _ in state] != list(range(snapshot.end_offset)):
            checker.fail(f"snapshot: {name} loaded {snapshot} without every offset below its end")
            return
        for offset, epoch, value in state:
            known = checker.committed.setdefault(offset, (epoch, value))
            if known != (epoch, value):
                checker.fail(
                    f"snapshot: {name} loaded {snapshot} with {(epoch, value)} at offset {offset}, "
                    f"committed as {known}"
                )
                return
        self.state = state
        self.applied = snapshot.end_offset
        self.snapshots_loaded += 1
        checker.trace.event(
            "snapshot-loaded", node=name, end_offset=snapshot.end_offset, epoch=snapshot.epoch
        )


@dataclass(slots=True)
class Cluster:
    """The simulated processes and their current RaftNodes."""

    world: World
    config: RunConfig
    checker: Checker
    voters: list[str]
    observers: list[str]
    nodes: dict[str, RaftNode] = field(default_factory=dict)
    ops: int = 0
    ops_ok: int = 0

    def node_id(self, name: str) -> int:
        return int(name[1:])

    def raft_config(self, name: str) -> RaftNodeConfig:
        return RaftNodeConfig(
            node_id=self.node_id(name),
            voters={self.node_id(v): (v, PORT) for v in self.voters},
            cluster_id=CLUSTER_ID,
            metadata_dir=METADATA_DIR,
            bugs=frozenset({self.config.bug}) if self.config.bug else frozenset(),
        )

    async def main(self, runtime: Runtime, process: SimProcess) -> None:
        # The previous incarnation's node is dead: nothing may reach it from now on.
        self.nodes.pop(process.name, None)
        log = await DiskLog.open(runtime, METADATA_DIR)
        node = RaftNode(runtime, self.raft_config(process.name), log)
        listener = self.checker.listener(process, log)
        if process.name in self.voters:
            self.checker.voter_logs[process.name] = log
            self.checker.voter_alive[process.name] = process
        node.add_listener(listener)
        await node.start()
        self.nodes[process.name] = node
        await asyncio.start_server(node.serve, None, PORT)
        loop = asyncio.get_running_loop()
        work = [loop.create_task(self._snapshots(node, listener))]
        if process.name in self.voters:
            work += [
                loop.create_task(self._propose(runtime, process, node, i)) for i in range(PROPOSERS)
            ]
        await asyncio.gather(node.wait(), *work)

    async def _snapshots(self, node: RaftNode, listener: NodeListener) -> None:
        """Each node snapshots its own state now and then; the log before it goes."""
        while True:
            await asyncio.sleep(SNAPSHOT_CHECK_S)
            latest = node.log.latest_snapshot()
            since = listener.applied - (latest.end_offset if latest is not None else 0)
            if since >= SNAPSHOT_EVERY_RECORDS:
                snapshot = await node.snapshot(listener.applied, listener.snapshot_records())
                self.world.trace.event(
                    "snapshot",
                    node=listener.process.name,
                    end_offset=snapshot.end_offset,
                    epoch=snapshot.epoch,
                )

    async def _propose(
        self, runtime: Runtime, process: SimProcess, node: RaftNode, lane: int
    ) -> None:
        trace, rng, seq = self.world.trace, runtime.rng, 0
        # Each lane is one client process of the history: one operation at a time.
        client = f"{process.name}:{process.incarnation}:{lane}"
        while True:
            await asyncio.sleep(rng.uniform(0.02, 0.2))
            if node.role is not Role.LEADER:
                continue
            seq += 1
            value = f"{process.name}.{process.incarnation}.{lane}.{seq}"
            self.ops += 1
            trace.event(
                "op", node=process.name, process=client, type="invoke", f="append", value=value
            )
            record = Record(None, value.encode(), runtime.clock.now_ms())
            try:
                offset = await asyncio.wait_for(node.propose_and_wait([record]), 5.0)
            except (LeadershipLost, TimeoutError):
                # It may still commit under the next leader: the outcome is unknown.
                trace.event(
                    "op", node=process.name, process=client, type="info", f="append", value=value
                )
                continue
            except (NotLeaderError, ProposalLost) as error:
                trace.event(
                    "op",
                    node=process.name,
                    process=client,
                    type="fail",
                    f="append",
                    value=value,
                    error=type(error).__name__,
                )
                continue
            self.ops_ok += 1
            self.checker.acked[offset] = value.encode()
            trace.event(
                "op",
                node=process.name,
                process=client,
                type="ok",
                f="append",
                value=value,
                offset=offset,
            )

    def live(self) -> list[str]:
        procs = self.world.processes
        return [n for n in self.voters + self.observers if procs[n].alive and n in self.nodes]

    def leaders(self) -> list[str]:
        """Running voters that believe they lead."""
        return [
            n
            for n in self.voters
            if n in self.nodes
            and self.world.processes[n].alive
            and self.nodes[n].role is Role.LEADER
        ]

    async def heal_check(self) -> None:
        """After healing: one leader, and a fresh proposal committed on every live node."""
        loop = self.world.loop
        deadline = loop.time() + HEAL_BOUND_S
        target: int | None = None
        while loop.time() < deadline and self.checker.violation is None:
            await asyncio.sleep(0.1)
            leaders = self.leaders()
            if target is None:
                if len(leaders) == 1:
                    try:
                        target = self.nodes[leaders[0]].propose([Record(None, b"heal", 0)])
                    except NotLeaderError:
                        continue
                continue
            if all(self.nodes[n].high_watermark > target for n in self.live()):
                return
        if self.checker.violation is None:
            detail = "no single leader" if target is None else f"offset {target} not everywhere"
            self.checker.fail(f"liveness: {detail} within {HEAL_BOUND_S:.0f}s of healing")


def run_raft(config: RunConfig) -> RunResult:
    """Run the raft scenario once and judge it."""
    run = ScenarioRun(config, BUGS)
    world = run.world
    checker = Checker(world.trace, world.loop)
    voters = [f"n{i}" for i in range(1, config.voters + 1)]
    observers = [f"n{100 + i}" for i in range(config.observers)]
    cluster = Cluster(world, config, checker, voters, observers)
    for name in voters + observers:
        process = world.add_process(name)
        process.start(lambda rt, p=process: cluster.main(rt, p))

    def leader() -> str | None:
        leading = cluster.leaders()
        return leading[0] if len(leading) == 1 else None

    nemesis = Nemesis(world, voters + observers, config.faults, leader=leader)

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.1)
            checker.check_dual_leadership(world.processes)

    async def drive() -> None:
        watcher = world.loop.create_task(watch())
        await nemesis.run(config.duration_s)
        nemesis.heal_all()
        world.trace.event("heal-start")
        await cluster.heal_check()
        watcher.cancel()
        for offset, value in sorted(checker.acked.items()):
            if checker.committed.get(offset, (None, None))[1] != value:
                checker.fail(
                    f"acked-lost: acknowledged {value!r} at offset {offset} is not committed there"
                )
                break

    return run.finish(
        drive(),
        lambda: checker.violation,
        checker.fail,
        lambda: {
            "ops": cluster.ops,
            "ok": cluster.ops_ok,
            "committed": len(checker.committed),
            "epochs": len(checker.leaders),
            "faults": nemesis.injected,
        },
    )
