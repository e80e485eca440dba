"""The metadata scenario: controllers and brokers serving admin clients under faults.

Controllers n1..nC form the quorum; brokers n(C+1).. are raft observers that register,
heartbeat and answer admin requests by forwarding them to the active controller. Every node
runs the real KraftNode (kraft/node.py), the same assembly ``kraft-server start`` runs.
Client lanes (a process the nemesis leaves alone) create, delete, grow and reconfigure a
small set of topics through random brokers, one request at a time per lane; one more lane
changes broker configs at the controllers directly (KIP-919).

Checked continuously, on every image any node publishes:
- image agreement: every node that applied offset X has the same image at X;
- applied offsets never go backwards within a node incarnation;
- every partition's leader is in its ISR, a new leader comes from the previous ISR (unclean
  election is off), and no fenced broker leads a partition;
- a broker serves clients (RUNNING) only once it has replayed its own registration;
- on the controllers' quorum: a leader commits only through an entry of its own epoch, and
  a stale leader gives up within the check-quorum bound once another is elected.
At the end: acknowledged admin operations, followed by a read of every topic and broker
config from the healed cluster's image, are linearizable per key (the WGL search of
sim/analysis against METADATA_MODELS; unacknowledged operations may or may not have happened;
a search out of budget makes the run ``unknown``); after the heal every node replays what was
committed before it within a bound (bounded staleness), and every broker runs and a fresh
topic can be created within the liveness bound. A node dying of an unexpected exception ends
the run at once as ``crashed``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.client import KafkaConnection
from broker.lifecycle import BrokerState
from kraft.config import ServerConfig, config_from_properties
from kraft.metrics import NodeMetrics
from kraft.node import CONTROLLED_SHUTDOWN_TIMEOUT_S, KraftNode
from log.runtime import Runtime
from metadata.controller.quorum_controller import CONTROLLER_BUGS
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE
from raft.core import Role
from raft.driver import NODE_BUGS as RAFT_BUGS
from sim import admin
from sim.analysis import shutdowns
from sim.analysis.catch_up import CatchUp
from sim.analysis.linearizability import MAX_STEPS, search
from sim.analysis.models import METADATA_MODELS, Operation
from sim.harness import ScenarioRun
from sim.nemesis import Nemesis
from sim.process import SimProcess
from sim.run import RunConfig, RunResult
from sim.scenarios.dual_leader import DualLeaderWatch
from sim.scenarios.metadata_checks import Checker, ImageWatcher, LeaderWatcher
from sim.world import World

BUGS = {**CONTROLLER_BUGS, **RAFT_BUGS}
CLUSTER_ID = "a3JhZnQtc2ltLW1ldGFkYQ"
CONTROLLER_PORT = 9093
BROKER_PORT = 9092
TOPICS = ("t0", "t1", "t2", "t3")
FRESH_SHARE = 0.2
FRESH_CONFIG_SHARE = 0.25
LANES = 6
OP_TIMEOUT_S = 6.0
HEAL_BOUND_S = 30.0
BROKER_CONFIG = "num.io.threads"  # the broker config the controller lane sets (harmless here)
# Faults of a node's life beyond a power cut, shared with the kafka scenario, with their
# weights: a graceful shutdown (SIGTERM, then a restart after the hold) of a broker (what a
# rolling restart does most) or of a controller, and the raft scenario's brown-out (every
# node loses power; rarer, since it stops the whole cluster for seconds). They run on the
# nemesis's separate schedule, so the older faults of every seed stay where they were.
LIFECYCLE_FAULTS = {"shutdown-broker": 3, "shutdown-controller": 1, "stall-crash": 1}
FAULTS = ("depose-controller", *LIFECYCLE_FAULTS)  # the scenario's own, beyond the nemesis's
# Every judged shutdown stops within the bound, so one stopped before the broker's own
# timeout was let go by the controller (and must lead nothing).
assert shutdowns.BOUND_S < CONTROLLED_SHUTDOWN_TIMEOUT_S
# Check-quorum resigns a cut-off leader after controller.quorum.fetch.timeout.ms (2 s); the
# others elect one after their own fetch timeout and an election.
DEPOSE_MIN_S = 5.0
# Every node replays what was committed before the heal within this bound: a third of the
# liveness bound, so a stalled replay is named as such before it shows up as a liveness loss.
CATCH_UP_BOUND_S = 10.0
CATCH_UP_SAMPLE_S = 0.25
# Answers that say what holds after the request (the topic model reads them as such: a
# retried forward may itself have caused the state they report).
DEFINITE = {"NONE", "TOPIC_ALREADY_EXISTS", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_PARTITIONS"}
# Refusals before any record was written: the request did not happen.
NOT_APPLIED = {"INVALID_REPLICATION_FACTOR", "INVALID_CONFIG", "INVALID_REQUEST"}


def admin_status(error: str) -> str:
    """A history status for an admin request's answer (a Kafka error name): ``ok``;
    ``fail`` when the answer says what holds after it (DEFINITE, which the topic model reads)
    or that it was refused before any record (NOT_APPLIED); else ``info``, may or may not
    have happened (NOT_CONTROLLER, REQUEST_TIMED_OUT, a client's own timeout...)."""
    if error == "NONE":
        return "ok"
    return "fail" if error in DEFINITE or error in NOT_APPLIED else "info"


@dataclass(slots=True)
class TopicPicks:
    """Which topic operation a client lane does next: (function, topic, value). Shared by
    the simulator's lanes and kraft-jepsen's real admin clients (jepsen/admin.py), so both
    histories have one shape, checked against METADATA_MODELS."""

    fresh: dict[int, int] = field(default_factory=dict)  # lane -> its latest fresh topic
    reconfigured: dict[int, bool] = field(default_factory=dict)
    config_changes: int = 0

    def pick(self, rng: random.Random, lane: int) -> tuple[str, str, int | None]:
        fresh = self.fresh.setdefault(lane, 0)
        roll = rng.random()
        if roll < FRESH_SHARE + FRESH_CONFIG_SHARE:
            if roll >= FRESH_SHARE and fresh and not self.reconfigured.get(lane, False):
                # Reconfigure the lane's latest topic of its own, once, to a value no other
                # change sets: nothing can overwrite, repeat or delete the change, so the
                # final read shows it if it was acknowledged and lost.
                self.reconfigured[lane] = True
                self.config_changes += 1
                value = 3_600_000 + self.config_changes
                return "alter-config", f"u{lane}-{fresh}", value
            # A topic of its own that nothing else touches: if an acknowledged create is
            # lost, the final read says so and no other operation can explain it away.
            self.fresh[lane] = fresh + 1
            self.reconfigured[lane] = False
            return "create", f"u{lane}-{fresh + 1}", 1
        topic = rng.choice(TOPICS)
        if roll < 0.6:
            return "create", topic, rng.randint(1, 3)
        if roll < 0.73:
            return "delete", topic, None
        if roll < 0.9:
            return "create-partitions", topic, rng.randint(2, 6)
        # Few values on the shared topics: each distinct value of an operation of unknown
        # outcome is one more state for the linearizability search to carry.
        return "alter-config", topic, rng.choice((60_000, 120_000, 3_600_000))


@dataclass(slots=True)
class Op:
    """One admin operation of the history, as the linearizability check needs it."""

    process: str
    f: str
    key: str
    value: int | None
    invoke_us: int
    invoke_seq: int
    status: str = "pending"
    output: int | None = None
    error: str | None = None
    complete_us: int | None = None
    complete_seq: int | None = None


@dataclass(slots=True)
class Shutdown:
    """One graceful shutdown (SIGTERM) of a node incarnation."""

    node: str
    incarnation: int
    began_us: int
    controlled: bool  # a RUNNING broker: it asks the controller to move its leaderships
    broker_epoch: int


@dataclass(slots=True)
class Cluster:
    world: World
    config: RunConfig
    checker: Checker
    controllers: list[str]
    brokers: list[str]
    nodes: dict[str, KraftNode] = field(default_factory=dict)
    history: list[Op] = field(default_factory=list)
    picks: TopicPicks = field(default_factory=TopicPicks)
    broker_configs: int = 0
    ops_ok: int = 0
    # Server properties a scenario sets on top of these (the kafka scenario's replication).
    extra_props: dict[str, str] = field(default_factory=dict)
    shutdowns: dict[str, Shutdown] = field(default_factory=dict)  # the latest per node
    # The incarnation that built each of ``nodes``: a restarted process keeps its old,
    # dead node there until its new ``main`` first runs.
    node_incarnations: dict[str, int] = field(default_factory=dict)

    def node_id(self, name: str) -> int:
        return int(name[1:])

    def server_config(self, name: str) -> ServerConfig:
        voters = ",".join(f"{self.node_id(c)}@{c}:{CONTROLLER_PORT}" for c in self.controllers)
        controller = name in self.controllers
        props = {
            "process.roles": "controller" if controller else "broker",
            "node.id": str(self.node_id(name)),
            "controller.quorum.voters": voters,
            "listeners": (
                f"CONTROLLER://{name}:{CONTROLLER_PORT}"
                if controller
                else f"PLAINTEXT://{name}:{BROKER_PORT}"
            ),
            "controller.listener.names": "CONTROLLER",
            "log.dirs": "/data",
            "num.partitions": "1",
            "default.replication.factor": str(min(2, len(self.brokers))),
            # Sessions a third of Kafka's defaults: more fencing and more elections per run.
            "broker.heartbeat.interval.ms": "700",
            "broker.session.timeout.ms": "3000",
            # Snapshots every few KiB so loading them is exercised in every run.
            "metadata.log.max.record.bytes.between.snapshots": "4096",
        }
        if not controller:
            props["broker.rack"] = f"rack-{self.node_id(name) % 2}"
        props.update(self.extra_props)
        return config_from_properties(props, f"{name}.properties")

    def node_options(self, process: SimProcess) -> dict[str, Any]:
        """More KraftNode arguments for ``process``'s new incarnation (a scenario's hooks)."""
        return {}

    async def main(self, runtime: Runtime, process: SimProcess) -> None:
        self.nodes.pop(process.name, None)
        bugs = frozenset({self.config.bug}) if self.config.bug else frozenset()
        watcher = ImageWatcher(self.checker, process, process.incarnation)
        leader = LeaderWatcher(self.checker, process, process.incarnation, lambda: node.log)
        node = KraftNode(
            runtime,
            self.server_config(process.name),
            CLUSTER_ID,
            bugs=bugs,
            publishers=(watcher,),
            raft_listeners=(leader,),
            metrics=NodeMetrics(),  # counted in every run, rendered at each broker's start
            **self.node_options(process),
        )
        self.nodes[process.name] = node
        self.node_incarnations[process.name] = process.incarnation
        await node.start()
        work = [node.wait()]
        if node.lifecycle_ready is not None:
            work.append(self._watch_broker(process, node))
        await asyncio.gather(*work)

    async def _watch_broker(self, process: SimProcess, node: KraftNode) -> None:
        """A broker must be unfenced only on a heartbeat in which it asked for it, having
        replayed its own registration, and must serve clients only after that."""
        assert node.lifecycle_ready is not None
        epoch, offset, unfenced_by = await node.lifecycle_ready
        if not process.alive:
            return
        want_fence, reported = unfenced_by if unfenced_by is not None else (False, offset - 1)
        self.world.trace.event(
            "broker-serving",
            node=process.name,
            epoch=epoch,
            offset_end=offset,
            want_fence=want_fence,
            reported=reported,
        )
        self.checker.check_serving(process.name, epoch, offset, unfenced_by)
        assert node.metrics is not None
        node.metrics.exposition()  # a collector failing in some state fails the run

    # ---- graceful shutdown -------------------------------------------------------------
    def terminate(self, nemesis: Nemesis, name: str, hold_s: float) -> None:
        """SIGTERM to ``name``: ``KraftNode.shutdown`` as ``kraft-server`` runs it (a broker's
        controlled shutdown, a leader's EndQuorumEpoch), then exit; back after ``hold_s``."""
        process = self.world.processes[name]
        node = self.nodes.get(name)
        ongoing = self.shutdowns.get(name)
        if node is None or not process.alive or process.paused:
            return
        if self.node_incarnations.get(name) != process.incarnation:
            # Restarted this instant (supervision restarts right before a fault), its new
            # node not built yet: the one in ``nodes`` is the dead incarnation's. Its
            # shutdown would stop nothing that runs (a broker's controlled shutdown, its
            # heartbeat loop cancelled with it, waits out the 30 s timeout) while the new
            # incarnation serves on. A SIGTERM that early is one before the start: none.
            return
        if ongoing is not None and ongoing.incarnation == process.incarnation:
            return
        lifecycle = node.lifecycle
        shutdown = Shutdown(
            name,
            process.incarnation,
            self.world.trace.now_us(),
            lifecycle is not None and lifecycle.state is BrokerState.RUNNING,
            -1 if lifecycle is None else lifecycle.broker_epoch,
        )
        self.shutdowns[name] = shutdown
        process.terminate(node.shutdown, lambda: self._exited(nemesis, shutdown, hold_s))
        self.world.loop.call_later(shutdowns.BOUND_S + 2e-6, self._judge_shutdown, shutdown)

    def _exited(self, nemesis: Nemesis, shutdown: Shutdown, hold_s: float) -> None:
        if shutdown.controlled:
            committed = max(
                (
                    node.raft.high_watermark
                    for name in self.controllers
                    if (node := self.nodes.get(name)) is not None
                    and self.world.processes[name].alive
                    and node.raft is not None
                    and node.raft.core is not None
                ),
                default=0,
            )
            self.checker.expect_leads_nothing(
                self.node_id(shutdown.node), shutdown.broker_epoch, committed
            )
        nemesis.down_for(shutdown.node, hold_s)

    def _judge_shutdown(self, shutdown: Shutdown) -> None:
        process = self.world.processes[shutdown.node]
        if process.alive and process.incarnation == shutdown.incarnation:
            found = shutdowns.overdue(
                shutdown.node, shutdown.began_us, None, self.world.trace.now_us()
            )
            if found is not None:
                self.checker.fail(found)

    async def shutdowns_judged(self) -> None:
        """Until every shutdown still under way has been judged (its bound has passed)."""
        loop = self.world.loop
        for shutdown in self.shutdowns.values():
            process = self.world.processes[shutdown.node]
            if process.alive and process.incarnation == shutdown.incarnation:
                wait_s = shutdown.began_us / 1e6 + shutdowns.BOUND_S + 1e-3 - loop.time()
                if wait_s > 0:
                    await asyncio.sleep(wait_s)

    # ---- the workload -------------------------------------------------------------------
    async def lane(self, runtime: Runtime, lane: int) -> None:
        """A client's admin requests on topics, through random brokers (forwarded)."""
        pick = lambda rng: self.picks.pick(rng, lane)  # noqa: E731
        await self._run_lane(runtime, f"client:{lane}", self.brokers, BROKER_PORT, pick)

    async def controller_lane(self, runtime: Runtime) -> None:
        """An admin client talking to the controllers directly (KIP-919's
        ``--bootstrap-controller``), changing broker configs. Its requests do not queue
        behind other clients' in a broker's one forwarding connection, so while a deposed
        controller still believes it leads, every change it sends there is answered by it."""
        pick = lambda rng: self._pick_broker_config()  # noqa: E731
        await self._run_lane(runtime, "client:c", self.controllers, CONTROLLER_PORT, pick)

    async def _run_lane(
        self,
        runtime: Runtime,
        process: str,
        servers: list[str],
        port: int,
        pick: Callable[[random.Random], tuple[str, str, int | None]],
    ) -> None:
        """One request at a time to a random server of ``servers``, another one after a
        failure or a NOT_CONTROLLER answer."""
        rng, trace = runtime.rng, self.world.trace
        conn: KafkaConnection | None = None
        while True:
            await asyncio.sleep(rng.uniform(0.02, 0.2))
            f, key, value = pick(rng)
            op = Op(process, f, key, value, trace.now_us(), trace.count)
            self.history.append(op)
            trace.event("op", process=process, type="invoke", f=f, key=key, value=value)
            try:
                if conn is None or conn.closed:
                    conn = KafkaConnection(process)
                    await conn.connect(rng.choice(servers), port, 1.0)
                error = await self._request(conn, f, key, value)
            except (OSError, TimeoutError, ConnectionError) as failure:
                op.status, op.error = "info", type(failure).__name__
                if conn is not None:
                    await conn.close()
                conn = None
            else:
                op.status = admin_status(error)
                if op.status == "ok":
                    self.ops_ok += 1
                else:
                    op.error = error
                if error == "NOT_CONTROLLER":
                    await conn.close()
                    conn = None
            op.complete_us, op.complete_seq = trace.now_us(), trace.count
            trace.event(
                "op", process=process, type=op.status, f=f, key=key, value=value, error=op.error
            )

    def _pick_broker_config(self) -> tuple[str, str, int | None]:
        """A config change of a broker resource no other change touches (ids past any
        real broker's): a lost acknowledged change shows in the final read."""
        self.broker_configs += 1
        return "alter-broker-config", f"broker:{1000 + self.broker_configs}", 1 + len(self.history)

    async def _request(self, conn: KafkaConnection, f: str, topic: str, value: int | None) -> str:
        if f == "create":
            assert value is not None
            return await admin.create_topic(conn, topic, value, -1, OP_TIMEOUT_S)
        if f == "delete":
            return await admin.delete_topic(conn, topic, OP_TIMEOUT_S)
        if f == "create-partitions":
            assert value is not None
            return await admin.create_partitions(conn, topic, value, OP_TIMEOUT_S)
        if f == "alter-broker-config":
            broker = topic.removeprefix("broker:")
            return await admin.alter_config(
                conn, BROKER_RESOURCE, broker, BROKER_CONFIG, str(value), OP_TIMEOUT_S
            )
        return await admin.alter_topic_config(conn, topic, "retention.ms", str(value), OP_TIMEOUT_S)

    # ---- the quorum -----------------------------------------------------------------------
    def leading_epochs(self) -> dict[str, int]:
        """Controller -> epoch of every live controller that believes it leads."""
        leading = {}
        for name in self.controllers:
            node = self.nodes.get(name)
            raft = None if node is None else node.raft
            if (
                self.world.processes[name].alive
                and raft is not None
                and raft.core is not None
                and raft.role is Role.LEADER
            ):
                leading[name] = raft.epoch
        return leading

    def active_controller(self) -> str | None:
        leading = list(self.leading_epochs())
        return leading[0] if len(leading) == 1 else None

    async def watch_leaders(self) -> None:
        """Two running leaders coexist only briefly (check quorum), as in the raft scenario."""
        watch, processes = DualLeaderWatch(), self.world.processes
        while True:
            await asyncio.sleep(0.1)
            running = {
                name: epoch
                for name, epoch in self.leading_epochs().items()
                if not processes[name].paused
            }
            found = watch.observe(self.world.loop.time(), running)
            if found is not None:
                self.checker.fail(found)

    # ---- the end ---------------------------------------------------------------------------
    async def heal_check(self) -> None:
        """After healing: every broker runs, and a fresh topic is created through each."""
        loop = self.world.loop
        deadline = loop.time() + HEAL_BOUND_S
        pending = list(self.brokers)
        while pending and loop.time() < deadline and self.checker.violation is None:
            await asyncio.sleep(0.2)
            broker = pending[0]
            node = self.nodes.get(broker)
            if (
                node is None
                or node.lifecycle is None
                or node.lifecycle.state is not BrokerState.RUNNING
            ):
                continue
            conn = KafkaConnection("heal")
            try:
                await conn.connect(broker, BROKER_PORT, 1.0)
                error = await admin.create_topic(conn, f"heal-{broker}", 1, 1, OP_TIMEOUT_S)
            except (OSError, TimeoutError, ConnectionError):
                continue
            finally:
                await conn.close()
            if error == "NONE":
                pending.pop(0)
        if pending and self.checker.violation is None:
            self.checker.fail(
                f"liveness: {pending[0]} could not create a topic within {HEAL_BOUND_S:.0f}s "
                "of healing"
            )

    async def watch_catch_up(self) -> None:
        """Bounded staleness: within the heal bound every node replays the metadata log up
        to the highest offset published when the heal began (sim/analysis/catch_up.py). The
        samples go to the trace (``metadata-applied``) for kraft-analyze's copy."""
        trace, processes = self.world.trace, self.world.processes
        names = tuple(self.controllers + self.brokers)
        target = max(self.checker.digests, default=0)
        start = trace.now_us()
        trace.event("heal-start", offset_end=target, nodes=list(names), bound_s=CATCH_UP_BOUND_S)
        watch = CatchUp(target, start, int(CATCH_UP_BOUND_S * 1e6), names)
        while watch.lagging() and trace.now_us() - start <= watch.bound_us:
            for name in watch.lagging():
                node = self.nodes.get(name)
                if not processes[name].alive or node is None or node.loader is None:
                    continue
                offset = node.loader.image.offset
                if watch.last.get(name) != offset:
                    trace.event("metadata-applied", node=name, offset_end=offset)
                    watch.observe(name, offset, trace.now_us())
            await asyncio.sleep(CATCH_UP_SAMPLE_S)
        for message in watch.violations():
            self.checker.fail(message)

    def keys(self) -> list[str]:
        """Every topic or broker config the workload touched, in first-touch order."""
        return list(dict.fromkeys(op.key for op in self.history if op.process != "final"))

    def read_final_state(self) -> None:
        """Read every topic and broker config once from the healed cluster's committed image
        (the active controller's), as the history's last operations: an acknowledged change
        that the log lost shows up here even when no later operation touches its key."""
        active = self.active_controller()
        node = self.nodes.get(active) if active is not None else None
        if node is None or node.loader is None:
            return  # the liveness check has already failed the run
        image = node.loader.image
        for key in self.keys():
            if key.startswith("broker:"):
                resource = (BROKER_RESOURCE, key.removeprefix("broker:"))
                value = image.configs.get(resource, {}).get(BROKER_CONFIG)
                self._final_read(key, "read-broker-config", None if value is None else int(value))
                continue
            found = image.topics.get(key)
            self._final_read(key, "read", None if found is None else len(found.partitions))
            retention = image.configs.get((TOPIC_RESOURCE, key), {}).get("retention.ms")
            self._final_read(key, "read-config", None if retention is None else int(retention))

    def _final_read(self, key: str, f: str, value: int | None) -> None:
        trace = self.world.trace
        op = Op("final", f, key, None, trace.now_us(), trace.count)
        trace.event("op", process="final", type="invoke", f=f, key=key, value=None)
        op.status, op.output = "ok", value
        op.complete_us, op.complete_seq = trace.now_us(), trace.count
        trace.event("op", process="final", type="ok", f=f, key=key, value=value)
        self.history.append(op)

    def check_linearizable(self, max_steps: int = MAX_STEPS) -> None:
        """Per key, the history is linearizable against its model (METADATA_MODELS, as
        kraft-analyze checks it); a search out of budget makes the run ``unknown`` (never a
        pass), a failed one a violation."""
        by_key: dict[str, list[Op]] = {}
        for op in self.history:
            by_key.setdefault(op.key, []).append(op)
        for key, history in by_key.items():
            for model in (factory() for factory in METADATA_MODELS):
                ops = []
                for op in history:
                    if op.f not in model.functions:
                        continue
                    determinate = op.status in ("ok", "fail")
                    candidate = Operation(
                        id=len(ops),
                        index=op.invoke_seq,
                        process=op.process,
                        f=op.f,
                        input=op.value,
                        output=op.output,
                        status=op.status,
                        error=op.error,
                        invoke_us=op.invoke_us,
                        complete_us=op.complete_us if determinate else None,
                        invoke_seq=op.invoke_seq,
                        complete_seq=op.complete_seq if determinate else None,
                    )
                    if model.observes(candidate):
                        ops.append(candidate)
                if not ops:
                    continue
                result = search(model, ops, max_steps)
                if result.verdict == "unknown" and self.checker.unknown is None:
                    self.checker.unknown = (
                        f"linearizability: {model.name} {key} undecided after {result.steps} "
                        f"steps ({len(ops)} ops)"
                    )
                if result.verdict == "violation":
                    stuck = ops[result.stuck].describe() if result.stuck is not None else "?"
                    self.checker.fail(
                        f"linearizability: {model.name} {key}: {stuck} cannot be linearized "
                        f"({len(ops)} ops; state {model.describe_state(result.state)})"
                    )
                    return


def _controller_faults(cluster: Cluster) -> dict[str, Callable[[Nemesis, float], None]]:
    """The metadata scenario's own faults (part of its ``--faults all``)."""

    def depose_controller(nemesis: Nemesis, hold_s: float) -> None:
        # Cut the active controller from the other controllers only: brokers still reach
        # it and forward requests to it until check-quorum makes it resign, the window in
        # which a controller that answers before its records commit loses acknowledged
        # changes (isolate-leader cuts the brokers off too, so they could not ask it). The
        # cut lasts long enough for the others to elect a leader, whose first record then
        # truncates whatever the deposed one appended.
        active = cluster.active_controller()
        others = [c for c in cluster.controllers if c != active]
        if active is not None and others:
            net = nemesis.world.network
            cut = net.partition([active], others)
            nemesis.world.loop.call_later(max(hold_s, DEPOSE_MIN_S), net.restore, cut)

    return {"depose-controller": depose_controller, **lifecycle_faults(cluster)}


def lifecycle_faults(cluster: Cluster) -> dict[str, Callable[[Nemesis, float], None]]:
    """``LIFECYCLE_FAULTS``, drawing from the nemesis's separate stream."""

    def shutdown(names: list[str]) -> Callable[[Nemesis, float], None]:
        def fault(nemesis: Nemesis, hold_s: float) -> None:
            cluster.terminate(nemesis, nemesis.separate_rng.choice(names), hold_s)

        return fault

    def stall_crash(nemesis: Nemesis, hold_s: float) -> None:
        nemesis.stall_crash(cluster.controllers, hold_s, nemesis.separate_rng)

    return {
        "shutdown-broker": shutdown(cluster.brokers),
        "shutdown-controller": shutdown(cluster.controllers),
        "stall-crash": stall_crash,
    }


def run_metadata(config: RunConfig) -> RunResult:
    """Run the metadata scenario once and judge it."""
    run = ScenarioRun(config, BUGS)
    world = run.world
    checker = Checker(world.trace)
    controllers = [f"n{i}" for i in range(1, config.controllers + 1)]
    brokers = [f"n{config.controllers + i}" for i in range(1, config.brokers + 1)]
    cluster = Cluster(world, config, checker, controllers, brokers)
    for name in controllers + brokers:
        process = world.add_process(name)
        process.start(lambda rt, p=process: cluster.main(rt, p))
    stop_workload = asyncio.Event()
    healed = asyncio.Event()

    async def client_main(runtime: Runtime) -> None:
        lanes = [asyncio.ensure_future(cluster.lane(runtime, i)) for i in range(LANES)]
        lanes.append(asyncio.ensure_future(cluster.controller_lane(runtime)))
        await stop_workload.wait()
        for task in lanes:  # what is still in flight stays of unknown outcome
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        await cluster.heal_check()
        healed.set()

    client = world.add_process("client")
    client.start(client_main)
    nemesis = Nemesis(
        world,
        controllers + brokers,
        config.faults,
        leader=cluster.active_controller,
        custom=_controller_faults(cluster),
        supervise=True,
        separate=LIFECYCLE_FAULTS,
    )

    async def drive() -> None:
        watcher = world.loop.create_task(cluster.watch_leaders())
        await nemesis.run(config.duration_s)
        nemesis.heal_all()
        catch_up = world.loop.create_task(cluster.watch_catch_up())
        stop_workload.set()
        await healed.wait()
        await catch_up
        await cluster.shutdowns_judged()
        watcher.cancel()
        cluster.read_final_state()
        cluster.check_linearizable()

    return run.finish(
        drive(),
        lambda: checker.violation,
        checker.fail,
        lambda: {
            "ops": len(cluster.history),
            "ok": cluster.ops_ok,
            "offset": max(checker.digests, default=0),
            "faults": nemesis.injected,
        },
        unknown=lambda: checker.unknown,
    )
