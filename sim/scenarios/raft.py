"""The raft scenario: a KRaft quorum (plus observers) under faults, checked continuously.

Each voter runs the real RaftNode (driver, transport over simulated TCP, metadata log on the
simulated disk). Whoever leads proposes records and waits for them to commit. The checker
listens to every node incarnation (sim/scenarios/raft_checks.py) and holds the quorum to
Raft's invariants:
- election safety: at most one leader per epoch;
- leader completeness: a new leader's log holds every committed record;
- state machine safety: no two nodes commit different records at one offset, and each
  incarnation applies offsets in order, each once;
- committed records are never lost: no truncation cuts a record the cluster committed (or
  goes below the node's own high watermark), and every acknowledged proposal is in the
  final committed log at its offset;
- high watermark monotone per node incarnation;
- a leader commits through its own epoch (KIP-595's rule, Raft's figure 8): it advances
  its high watermark only over an entry of its epoch, never over older entries alone;
- committed means stored on a majority: when a leader advances its high watermark, the
  entry below it is in the logs of a majority of voters (those the checker cannot read,
  being down, count in the leader's favour);
- bounded dual leadership (what check quorum buys): a running leader that no longer has a
  quorum gives up within fetch.timeout plus slack, so two running leaders never coexist
  for longer than that;
- cut-off leaders resign: a running leader that the network (or down and paused voters)
  cuts off from a majority of voters resigns within CUT_OFF_BOUND_S, whether or not the
  majority side elects anyone; and a leader never resigns while it is its own majority
  (a sole voter);
- snapshot loads: a node that loads a snapshot has a high watermark at least its end and a
  log that starts exactly there;
- liveness: after the heal phase a single leader exists and a fresh proposal commits on
  every live node within 10 virtual seconds.

With the opt-in ``membership`` fault (``--faults all,membership``) the quorum is dynamic
(KIP-853, kraft.version 1, every node formatted with the voters and their directory ids)
and the fault adds an observer as a voter, removes a voter (the leader too), or replaces a
voter's disk with a fresh one (a new directory id: the old replica is removed and the new
one added once it has caught up). The checks then judge every commit, resignation and
cut-off against the voter set in force at the leader (the latest in its log).

With ``kraft-upgrade`` as well (``--faults all,membership,kraft-upgrade``) the quorum starts
static (controller.quorum.voters, kraft.version 0, each disk with its directory id) and the
fault asks whoever leads to upgrade kraft.version to 1 (UpdateFeatures' path: the leader
appends KRaftVersionRecord + VotersRecord naming each voter by the directory id its
fetches carry); voter changes start once the upgrade is committed, so the upgrade itself
runs under every other fault, and the same checks hold across it.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field

from log.records import Record
from log.runtime import Runtime
from protocol.api_table import API_VERSIONS, CONTROLLER, ApiTable
from protocol.server import NetworkLimits, RequestBytesBudget, serve_connection
from protocol.wire import MAX_FRAME_BYTES
from raft.core import NotLeaderError, Role
from raft.driver import (
    BUGS,
    MEMBER_BUGS,
    LeadershipLost,
    ProposalLost,
    RaftNode,
    RaftNodeConfig,
)
from raft.messages import Errors
from raft.voters import KRAFT_VERSION_DYNAMIC, Endpoint, Voter, VoterSet
from sim.disk import SimDisk
from sim.harness import ScenarioRun
from sim.nemesis import Nemesis
from sim.process import SimProcess
from sim.run import RunConfig, RunResult
from sim.scenarios.raft_checks import Checker, NodeListener, WatchedDiskLog
from sim.world import World

PORT = 9093
LIMITS = NetworkLimits(listener="CONTROLLER")  # Kafka's defaults, as a controller listener has
CLUSTER_ID = "kraft-sim-cluster-000A"
METADATA_DIR = "/data/__cluster_metadata-0"
HEAL_BOUND_S = 10.0
PROPOSERS = 3
SNAPSHOT_EVERY_RECORDS = 40
SNAPSHOT_CHECK_S = 2.0
# The raft scenario's own fault (beyond the nemesis's): a brown-out of a majority of the
# voters (Nemesis.stall_crash), where durability ordering bugs lose committed records.
FAULTS = ("stall-crash",)
# Opt-in (so `all` and every pinned seed stay as they were): voter set changes (KIP-853).
OPT_IN_FAULTS = ("membership", "kraft-upgrade")
SCENARIO_BUGS = {**BUGS, **MEMBER_BUGS}
MEMBERSHIP_TIMEOUT_S = 5.0


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
    dynamic: bool = False
    # Start static (kraft.version 0) and upgrade under faults: the kraft-upgrade fault.
    static_start: bool = False
    upgrades: int = 0
    # Each node's disk generation: a replaced disk is a new replica (a new directory id).
    disks: dict[str, int] = field(default_factory=dict)
    changes: int = 0
    # The voter change in flight (one at a time, as an operator makes them).
    changing: asyncio.Task[object] | None = None
    # A voter whose disk was wiped and whose replacement (remove the old replica, add the
    # new one) has not completed yet, with its old replica: it cannot vote in either form.
    unreplaced: tuple[str, Voter] | None = None

    def node_id(self, name: str) -> int:
        return int(name[1:])

    def bugs(self) -> frozenset[str]:
        return frozenset({self.config.bug}) if self.config.bug else frozenset()

    def directory_id(self, name: str) -> uuid.UUID:
        return uuid.UUID(int=(self.node_id(name) << 32) + self.disks.get(name, 0) + 1)

    def voter(self, name: str) -> Voter:
        """``name`` on its current disk, as a VotersRecord names it."""
        endpoint = Endpoint("CONTROLLER", name, PORT)
        return Voter(self.node_id(name), self.directory_id(name), (endpoint,))

    def raft_config(self, name: str) -> RaftNodeConfig:
        if not self.dynamic:
            return RaftNodeConfig(
                node_id=self.node_id(name),
                voters={self.node_id(v): (v, PORT) for v in self.voters},
                cluster_id=CLUSTER_ID,
                metadata_dir=METADATA_DIR,
                bugs=self.bugs(),
            )
        # Formatted with --initial-controllers (the first voters with their directory ids);
        # a replaced disk with --no-initial-controllers: it finds the leader through the
        # bootstrap servers and learns the voter set from the log.
        fresh = self.disks.get(name, 0) > 0
        if self.static_start and not fresh:
            # Formatted static; the log's KRaftVersionRecord / VotersRecord take over once
            # the upgrade reaches it.
            return RaftNodeConfig(
                node_id=self.node_id(name),
                voters={self.node_id(v): (v, PORT) for v in self.voters},
                cluster_id=CLUSTER_ID,
                metadata_dir=METADATA_DIR,
                bugs=self.bugs(),
                directory_id=self.directory_id(name),
            )
        initial = None if fresh else VoterSet(tuple(self.voter(v) for v in self.voters))
        return RaftNodeConfig(
            node_id=self.node_id(name),
            voters={},
            cluster_id=CLUSTER_ID,
            metadata_dir=METADATA_DIR,
            bugs=self.bugs(),
            directory_id=self.directory_id(name),
            initial_voters=initial,
            initial_kraft_version=KRAFT_VERSION_DYNAMIC,
            bootstrap_servers=tuple((v, PORT) for v in self.voters),
        )

    def voter_names(self, leader: str) -> tuple[str, ...]:
        """The voter set in force at ``leader`` (the latest in its log), by name."""
        return tuple(name for name, _ in self.voter_replicas(leader))

    def voter_replicas(self, leader: str) -> tuple[tuple[str, uuid.UUID | None], ...]:
        """The voter set in force at ``leader`` (the latest in its log), as (name, directory
        id) replicas."""
        node = self.nodes.get(leader)
        if node is None or node.core is None:
            return tuple((name, self.directory_id(name)) for name in self.voters)
        return tuple((f"n{v.voter_id}", v.directory_id) for v in node.core.history.latest().voters)

    async def main(self, runtime: Runtime, process: SimProcess) -> None:
        # The previous incarnation's node is dead: nothing may reach it from now on, and
        # whatever it led ended with it (kraft-analyze reads the crash or exit the same
        # way), also while this one's start-up flush is stalled and it reports no role.
        self.nodes.pop(process.name, None)
        self.checker.leading.pop(process.name, None)
        log = await WatchedDiskLog.open(runtime, METADATA_DIR, bugs=self.bugs())
        node = RaftNode(runtime, self.raft_config(process.name), log)
        listener = self.checker.listener(process, log, node)
        if process.name in self.voters or self.dynamic:
            self.checker.voter_logs[process.name] = log
            self.checker.voter_alive[process.name] = process
            self.checker.directories[process.name] = self.directory_id(process.name)
        node.add_listener(listener)
        await node.start()
        self.nodes[process.name] = node
        # The quorum's controller listener as kraft/node.py serves it: production's
        # connection loop, with its limits and request budget, over the node's API table.
        served = ApiTable([API_VERSIONS, *node.apis()]).served(CONTROLLER)
        budget = RequestBytesBudget(MAX_FRAME_BYTES)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve_connection(
                reader, writer, served.handle, served.versions, limits=LIMITS, budget=budget
            )

        await asyncio.start_server(serve, None, PORT)
        loop = asyncio.get_running_loop()
        work = [loop.create_task(self._snapshots(node, listener))]
        if process.name in self.voters or self.dynamic:
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
            for n in (self.voters + self.observers if self.dynamic else self.voters)
            if n in self.nodes
            and self.world.processes[n].alive
            and self.nodes[n].role is Role.LEADER
        ]

    def cut_off_leaders(self) -> set[str]:
        """Running leaders from which fewer than a majority of voters (themselves included)
        are up, running and reachable both ways: they cannot hear a quorum's fetches."""
        procs, net = self.world.processes, self.world.network
        cut_off = set()
        for leader in self.leaders():
            if procs[leader].paused:
                continue
            replicas = self.voter_replicas(leader)
            voters = tuple(name for name, _ in replicas)
            if leader not in voters:
                continue  # a removed leader about to resign: not a quorum member any more
            # A voter whose disk was wiped is not heard at its address: the replica there
            # is another one (a new directory id), whose fetches are not the voter's.
            reachable = 1 + sum(
                1
                for voter, directory in replicas
                if voter != leader
                and (directory is None or directory == self.directory_id(voter))
                and procs[voter].alive
                and not procs[voter].paused
                and net.reachable(voter, leader)
                and net.reachable(leader, voter)
            )
            if reachable <= len(voters) // 2:
                cut_off.add(leader)
        return cut_off

    def removed_leaders(self) -> set[str]:
        """Running leaders whose removal from the voter set is committed."""
        removed = set()
        for name in self.leaders():
            core = self.nodes[name].core
            if core is None or self.world.processes[name].paused:
                continue
            if not core.is_voter and core.history.latest_offset() < core.high_watermark:
                removed.add(name)
        return removed

    def membership(self, nemesis: Nemesis, hold_s: float) -> None:
        """The membership fault: add an observer as a voter, remove a voter, or replace a
        voter's disk with a fresh one (remove the old replica, add the new one).

        It acts as an operator replacing one disk at a time: one change in flight at a
        time; while a replacement is unfinished the next injections retry it instead of
        anything new; and no wipe or removal takes the valid voters (those not wiped and
        unreplaced) to a minority of the voter set, which would lose the quorum for good
        (a wiped replica cannot vote in its old place)."""
        if self.changing is not None and not self.changing.done():
            return
        leading = self.leaders()
        if len(leading) != 1:
            return
        leader = leading[0]
        if self.static_start and not self.upgraded(leader):
            return  # a static quorum refuses voter changes (UNSUPPORTED_VERSION)
        rng = nemesis.rng
        if self.unreplaced is not None:
            self.changing = self.world.loop.create_task(self._replace(hold_s + 5, rng))
            return
        voters = self.voter_names(leader)
        everyone = self.voters + self.observers
        outside = [n for n in everyone if n not in voters]
        action = rng.choice(("add", "remove", "replace"))
        if action == "add" and outside:
            target = rng.choice(outside)
            steps = [("add", target)]
        elif action == "remove" and len(voters) > 1:
            target = rng.choice(voters)
            if not self._valid_majority([v for v in voters if v != target]):
                return
            steps = [("remove", target)]
        elif action == "replace" and len(voters) > 2:
            target = rng.choice([v for v in voters if v != leader])
            if not self._valid_majority(voters, wiped=target):
                return
            self.unreplaced = (target, self.voter(target))
            self._wipe(target)
            self.changing = self.world.loop.create_task(self._replace(hold_s + 5, rng))
            return
        else:
            return
        self.changing = self.world.loop.create_task(self._change(steps, None, hold_s + 5, rng))

    def _valid_majority(self, voters: list[str] | tuple[str, ...], wiped: str = "") -> bool:
        """Whether a majority of ``voters`` are valid: not wiped and unreplaced (nor
        ``wiped``, about to be)."""
        lost = {wiped, self.unreplaced[0] if self.unreplaced is not None else ""}
        return sum(1 for v in voters if v not in lost) > len(voters) // 2

    async def _replace(self, budget_s: float, rng: random.Random) -> None:
        """Replace the unreplaced voter: remove its old replica, then add the new one (each
        done once it succeeds, or the leader says it already is). Unfinished within the
        budget, it stays unreplaced and the next membership injection retries it."""
        assert self.unreplaced is not None
        target, old = self.unreplaced
        steps = [("remove-old", target), ("add", target)]
        if await self._change(steps, old, budget_s, rng):
            self.unreplaced = None

    def upgraded(self, leader: str) -> bool:
        """Whether kraft.version 1 is committed at ``leader``."""
        core = self.nodes[leader].core
        return core is not None and core.history.at(core.high_watermark)[0] >= (
            KRAFT_VERSION_DYNAMIC
        )

    def kraft_upgrade(self, nemesis: Nemesis, hold_s: float) -> None:
        """The kraft-upgrade fault: ask whoever leads to raise kraft.version to 1 (refused
        while a voter has not fetched in this epoch; asked again at the next injection)."""
        leading = self.leaders()
        if len(leading) != 1 or self.nodes[leading[0]].core is None:
            return
        node = self.nodes[leading[0]]
        code, _message, offset = node.upgrade_kraft_version(KRAFT_VERSION_DYNAMIC)
        self.world.trace.event("kraft-upgrade", node=leading[0], error=code, offset=offset)
        self.upgrades += code == Errors.NONE and offset >= 0

    def _wipe(self, name: str) -> None:
        """Power off ``name``, give it an empty disk (re-formatted: a new directory id), and
        start it again."""
        process = self.world.processes[name]
        if process.alive:
            process.crash()
        self.checker.retire(name)
        self.disks[name] = self.disks.get(name, 0) + 1
        self.checker.epochs.pop(name, None)  # its quorum-state went with the disk
        seed = f"disk/{self.world.seed}/{name}/{self.disks[name]}"
        process.disk = SimDisk(random.Random(seed), fsync_latency_s=process.disk.fsync_latency_s)
        self.world.trace.event("wipe-disk", node=name, generation=self.disks[name])
        process.restart()

    async def _change(
        self, steps: list[tuple[str, str]], old: Voter | None, budget_s: float, rng: random.Random
    ) -> bool:
        """Carry out voter changes in order on whoever leads, retrying while refused with
        REQUEST_TIMED_OUT (a change in flight, or the new voter still catching up); True if
        every step was done within the budget."""
        loop = self.world.loop
        deadline = loop.time() + budget_s
        for change, name in steps:
            voter = old if change == "remove-old" and old is not None else self.voter(name)
            kind = "remove" if change.startswith("remove") else "add"
            while loop.time() < deadline:
                leading = self.leaders()
                code = Errors.NOT_LEADER_OR_FOLLOWER
                if len(leading) == 1:
                    node = self.nodes[leading[0]]
                    try:
                        code = await asyncio.wait_for(
                            node.change_voters(kind, voter, MEMBERSHIP_TIMEOUT_S),
                            MEMBERSHIP_TIMEOUT_S + 1,
                        )
                    except (TimeoutError, ConnectionError):
                        code = Errors.REQUEST_TIMED_OUT
                self.world.trace.event(
                    "voter-change", change=kind, node=name, voter_id=voter.voter_id, error=code
                )
                if code in (Errors.NONE, Errors.DUPLICATE_VOTER, Errors.VOTER_NOT_FOUND):
                    self.changes += code == Errors.NONE
                    break
                await asyncio.sleep(rng.uniform(0.1, 0.5))
            else:
                return False
        return True

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
    run = ScenarioRun(config, SCENARIO_BUGS)
    world = run.world
    checker = Checker(world.trace, voters=config.voters)
    voters = [f"n{i}" for i in range(1, config.voters + 1)]
    observers = [f"n{100 + i}" for i in range(config.observers)]
    upgrade = "kraft-upgrade" in config.faults
    dynamic = "membership" in config.faults or upgrade
    cluster = Cluster(
        world, config, checker, voters, observers, dynamic=dynamic, static_start=upgrade
    )
    if dynamic:
        checker.voters_of = cluster.voter_replicas
    for name in voters + observers:
        process = world.add_process(name)
        process.start(lambda rt, p=process: cluster.main(rt, p))

    def leader() -> str | None:
        leading = cluster.leaders()
        return leading[0] if len(leading) == 1 else None

    nemesis = Nemesis(
        world,
        voters + observers,
        config.faults,
        leader=leader,
        custom={
            "stall-crash": lambda nemesis, hold_s: nemesis.stall_crash(voters, hold_s, nemesis.rng),
            "membership": cluster.membership,
            "kraft-upgrade": cluster.kraft_upgrade,
        },
        # Voter changes (and the upgrade) on their own schedule, so every run makes several.
        separate={"membership": 1, "kraft-upgrade": 1} if dynamic else None,
        separate_interval_s=(1.0, 4.0),
        supervise=True,
    )

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.1)
            checker.check_dual_leadership(world.loop.time(), world.processes)
            checker.check_cut_off(world.loop.time(), cluster.cut_off_leaders())
            if dynamic:
                checker.check_removed_leaders(world.loop.time(), cluster.removed_leaders())

    async def drive() -> None:
        watcher = world.loop.create_task(watch())
        await nemesis.run(config.duration_s)
        nemesis.heal_all()
        world.trace.event("heal-start")
        await cluster.heal_check()
        watcher.cancel()
        checker.check_acked()

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
            **({"voter_changes": cluster.changes} if dynamic else {}),
            **({"kraft_upgrades": cluster.upgrades} if upgrade else {}),
        },
    )
