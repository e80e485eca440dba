"""The metadata scenario: controllers and brokers serving admin clients under faults.

Controllers n1..nC form the quorum; brokers n(C+1).. are raft observers that register,
heartbeat and answer admin requests by forwarding them to the active controller. Every node
runs the real KraftNode (kraft/node.py), the same assembly ``kraft-server start`` runs.
Client lanes (a process the nemesis leaves alone) create, delete, grow and reconfigure a
small set of topics through random brokers, one request at a time per lane.

Checked continuously, on every image any node publishes:
- image agreement: every node that applied offset X has the same image at X;
- applied offsets never go backwards within a node incarnation;
- every partition's leader is in its ISR, a new leader comes from the previous ISR (unclean
  election is off), and no fenced broker leads a partition;
- a broker serves clients (RUNNING) only once it has replayed its own registration.
At the end: acknowledged admin operations, followed by a read of every topic from the healed
cluster's image, are linearizable per topic (the WGL search of sim/analysis against the
topic model; unacknowledged operations may or may not have happened),
and after the heal every broker runs and a fresh topic can be created within the bound.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from dataclasses import dataclass, field

from broker.client import KafkaConnection
from broker.lifecycle import BrokerState
from kraft.config import ServerConfig, config_from_properties
from kraft.node import KraftNode
from log.runtime import Runtime
from metadata.controller.quorum_controller import CONTROLLER_BUGS
from metadata.image import MetadataImage, TopicsImage
from metadata.records import NO_LEADER, encode_record
from metadata.snapshot import image_records
from raft.core import Role
from raft.driver import BUGS as RAFT_BUGS
from sim import admin
from sim.analysis.linearizability import search
from sim.analysis.models import Operation, TopicModel
from sim.harness import ScenarioRun
from sim.nemesis import Nemesis
from sim.process import SimProcess
from sim.run import RunConfig, RunResult
from sim.trace import Trace
from sim.world import World

BUGS = {**CONTROLLER_BUGS, **RAFT_BUGS}
CLUSTER_ID = "a3JhZnQtc2ltLW1ldGFkYQ"
CONTROLLER_PORT = 9093
BROKER_PORT = 9092
TOPICS = ("t0", "t1", "t2", "t3")
FRESH_SHARE = 0.2
LANES = 6
OP_TIMEOUT_S = 6.0
HEAL_BOUND_S = 30.0
# Answers that say what holds after the request (the topic model reads them as such: a
# retried forward may itself have caused the state they report).
DEFINITE = {"NONE", "TOPIC_ALREADY_EXISTS", "UNKNOWN_TOPIC_OR_PARTITION", "INVALID_PARTITIONS"}
# Refusals before any record was written: the request did not happen.
NOT_APPLIED = {"INVALID_REPLICATION_FACTOR", "INVALID_CONFIG", "INVALID_REQUEST"}


class ImageDigests:
    """Digests of images by content, built part by part. An image shares every part a delta
    left alone (the broker map, each topic, the configs) with its predecessor by identity,
    so each part is hashed once however many images hold it; hashing whole images was most
    of a run's time."""

    __slots__ = ("_parts",)
    MAX_PARTS = 200_000

    def __init__(self) -> None:
        self._parts: dict[int, tuple[object, bytes]] = {}  # id -> (the part, its digest)

    def _part(self, part: object, as_image: MetadataImage) -> bytes:
        cached = self._parts.get(id(part))
        if cached is not None and cached[0] is part:
            return cached[1]
        hasher = hashlib.blake2b(digest_size=12)
        for record in image_records(as_image):
            hasher.update(encode_record(record))
        digest = hasher.digest()
        if len(self._parts) >= self.MAX_PARTS:
            self._parts.clear()
        self._parts[id(part)] = (part, digest)  # holding the part keeps its id unique
        return digest

    def digest(self, image: MetadataImage) -> str:
        hasher = hashlib.blake2b(digest_size=12)
        hasher.update(f"{image.offset}:{image.epoch}:{sorted(image.features.items())}".encode())
        hasher.update(f":{image.next_producer_id}".encode())
        hasher.update(self._part(image.cluster, MetadataImage(cluster=image.cluster)))
        for name, topic_id in sorted(image.topics.by_name.items()):
            topic = image.topics.by_id[topic_id]
            alone = TopicsImage(by_id={topic_id: topic}, by_name={name: topic_id})
            hasher.update(self._part(topic, MetadataImage(topics=alone)))
        hasher.update(self._part(image.configs, MetadataImage(configs=image.configs)))
        return hasher.hexdigest()


@dataclass(slots=True)
class Checker:
    trace: Trace
    violation: str | None = None
    digests: dict[int, tuple[str, str]] = field(default_factory=dict)
    images: ImageDigests = field(default_factory=ImageDigests)

    def fail(self, message: str) -> None:
        if self.violation is None:
            self.violation = message
            self.trace.event("violation", detail=message)


@dataclass(slots=True)
class ImageWatcher:
    """A loader publisher on one node incarnation, holding each image to the invariants."""

    checker: Checker
    process: SimProcess
    incarnation: int
    offset: int = 0

    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        checker, name = self.checker, self.process.name
        if not (self.process.alive and self.process.incarnation == self.incarnation):
            return
        if after.offset < self.offset:
            checker.fail(
                f"applied-monotone: {name} went from offset {self.offset} to {after.offset}"
            )
        self.offset = after.offset
        digest = checker.images.digest(after)
        known, where = checker.digests.setdefault(after.offset, (digest, name))
        if known != digest:
            checker.fail(
                f"image-agreement: {name} and {where} hold different images at offset "
                f"{after.offset}"
            )
        if where == name and known == digest and not from_snapshot:
            self._trace_changes(before, after)
        brokers = after.cluster.brokers
        for topic in after.topics.by_id.values():
            previous = None if from_snapshot else before.topics.by_id.get(topic.topic_id)
            for index, partition in topic.partitions.items():
                leader = partition.leader
                if leader == NO_LEADER:
                    continue
                old = None if previous is None else previous.partitions.get(index)
                if old is not None and leader != old.leader and leader not in old.isr:
                    # Unclean election is off in this scenario and nothing grows an ISR
                    # (no replication yet), so a new leader must come from the old ISR.
                    checker.fail(
                        f"leader-from-isr: {topic.name}-{index} elected {leader} from outside "
                        f"its ISR {list(old.isr)} at offset {after.offset} on {name}"
                    )
                if leader not in partition.isr:
                    checker.fail(
                        f"leader-in-isr: {topic.name}-{index} led by {leader} outside its ISR "
                        f"{list(partition.isr)} at offset {after.offset} on {name}"
                    )
                registration = brokers.get(leader)
                if registration is None or registration.fenced:
                    checker.fail(
                        f"fenced-leader: {topic.name}-{index} led by fenced broker {leader} at "
                        f"offset {after.offset} on {name}"
                    )

    def _trace_changes(self, before: MetadataImage, after: MetadataImage) -> None:
        """The first node to apply an offset records what changed in the trace, so
        kraft-analyze can re-derive the image checks from node events alone: broker fencing
        first, then every partition whose registration changed (docs/traces.md)."""
        trace, name = self.checker.trace, self.process.name
        for broker_id, broker in sorted(after.cluster.brokers.items()):
            old = before.cluster.brokers.get(broker_id)
            if old is None or old.fenced != broker.fenced or old.epoch != broker.epoch:
                trace.event(
                    "broker-state",
                    node=name,
                    offset_end=after.offset,
                    broker=broker_id,
                    epoch=broker.epoch,
                    fenced=broker.fenced,
                )
        for topic_id, topic in after.topics.by_id.items():
            previous = before.topics.by_id.get(topic_id)
            for index, partition in sorted(topic.partitions.items()):
                if previous is not None and previous.partitions.get(index) == partition:
                    continue
                trace.event(
                    "partition-state",
                    node=name,
                    offset_end=after.offset,
                    epoch=partition.leader_epoch,
                    topic=topic.name,
                    topic_id=str(topic_id),
                    partition=index,
                    leader_id=str(partition.leader),
                    isr=list(partition.isr),
                )


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
class Cluster:
    world: World
    config: RunConfig
    checker: Checker
    controllers: list[str]
    brokers: list[str]
    nodes: dict[str, KraftNode] = field(default_factory=dict)
    history: list[Op] = field(default_factory=list)
    fresh: dict[int, int] = field(default_factory=dict)
    ops_ok: int = 0
    # Server properties a scenario sets on top of these (the kafka scenario's replication).
    extra_props: dict[str, str] = field(default_factory=dict)

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

    async def main(self, runtime: Runtime, process: SimProcess) -> None:
        self.nodes.pop(process.name, None)
        bugs = frozenset({self.config.bug}) if self.config.bug else frozenset()
        watcher = ImageWatcher(self.checker, process, process.incarnation)
        node = KraftNode(
            runtime,
            self.server_config(process.name),
            CLUSTER_ID,
            bugs=bugs,
            publishers=(watcher,),
        )
        self.nodes[process.name] = node
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
        if unfenced_by is not None:
            want_fence, reported = unfenced_by
            if want_fence or reported < epoch:
                self.checker.fail(
                    f"unfenced-early: the controller unfenced {process.name} (epoch {epoch}) "
                    f"answering a heartbeat with want_fence={want_fence} at offset {reported}"
                )
        if offset <= epoch:
            self.checker.fail(
                f"unfenced-early: {process.name} serves clients at metadata offset {offset}, "
                f"before its registration at offset {epoch}"
            )

    # ---- the workload -------------------------------------------------------------------
    async def lane(self, runtime: Runtime, lane: int) -> None:
        rng, trace = runtime.rng, self.world.trace
        process = f"client:{lane}"
        conn: KafkaConnection | None = None
        self.fresh[lane] = 0
        while True:
            await asyncio.sleep(rng.uniform(0.02, 0.2))
            f, topic, value = self._pick(rng, lane)
            op = Op(process, f, topic, value, trace.now_us(), trace.count)
            self.history.append(op)
            trace.event("op", process=process, type="invoke", f=f, key=topic, value=value)
            try:
                if conn is None or conn.closed:
                    broker = rng.choice(self.brokers)
                    conn = KafkaConnection(process)
                    await conn.connect(broker, BROKER_PORT, 1.0)
                error = await self._request(conn, f, topic, value)
            except (OSError, TimeoutError, ConnectionError) as failure:
                op.status, op.error = "info", type(failure).__name__
                if conn is not None:
                    await conn.close()
                conn = None
            else:
                if error == "NONE":
                    op.status = "ok"
                    self.ops_ok += 1
                elif error in DEFINITE or error in NOT_APPLIED:
                    op.status, op.error = "fail", error
                else:  # NOT_CONTROLLER, REQUEST_TIMED_OUT...: may or may not have happened
                    op.status, op.error = "info", error
            op.complete_us, op.complete_seq = trace.now_us(), trace.count
            trace.event(
                "op", process=process, type=op.status, f=f, key=topic, value=value, error=op.error
            )

    def _pick(self, rng: random.Random, lane: int) -> tuple[str, str, int | None]:
        """The next operation: (function, topic, value)."""
        roll = rng.random()
        if roll < FRESH_SHARE:
            # A topic of its own that nothing else touches: if an acknowledged create is
            # lost, the final read says so and no other operation can explain it away.
            self.fresh[lane] += 1
            return "create", f"u{lane}-{self.fresh[lane]}", 1
        topic = rng.choice(TOPICS)
        if roll < 0.45:
            return "create", topic, rng.randint(1, 3)
        if roll < 0.65:
            return "delete", topic, None
        if roll < 0.85:
            return "create-partitions", topic, rng.randint(2, 6)
        return "alter-config", topic, rng.choice((60_000, 120_000, 3_600_000))

    async def _request(self, conn: KafkaConnection, f: str, topic: str, value: int | None) -> str:
        if f == "create":
            assert value is not None
            return await admin.create_topic(conn, topic, value, -1, OP_TIMEOUT_S)
        if f == "delete":
            return await admin.delete_topic(conn, topic, OP_TIMEOUT_S)
        if f == "create-partitions":
            assert value is not None
            return await admin.create_partitions(conn, topic, value, OP_TIMEOUT_S)
        return await admin.alter_topic_config(conn, topic, "retention.ms", str(value), OP_TIMEOUT_S)

    # ---- the end ---------------------------------------------------------------------------
    def active_controller(self) -> str | None:
        leading = [
            name
            for name in self.controllers
            if name in self.nodes
            and self.world.processes[name].alive
            and self.nodes[name].raft is not None
            and self.nodes[name].raft.core is not None
            and self.nodes[name].raft.role is Role.LEADER
        ]
        return leading[0] if len(leading) == 1 else None

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

    def keys(self) -> list[str]:
        """Every topic the workload touched, in first-touch order."""
        return list(dict.fromkeys(op.key for op in self.history if op.process != "final"))

    def read_final_state(self) -> None:
        """Read every topic once from the healed cluster's committed image (the active
        controller's), as the history's last operation: an acknowledged change that the
        log lost shows up here even when no later operation touches its topic."""
        active = self.active_controller()
        node = self.nodes.get(active) if active is not None else None
        if node is None or node.loader is None:
            return  # the liveness check has already failed the run
        image, trace = node.loader.image, self.world.trace
        for topic in self.keys():
            found = image.topics.get(topic)
            count = None if found is None else len(found.partitions)
            op = Op("final", "read", topic, None, trace.now_us(), trace.count)
            trace.event("op", process="final", type="invoke", f="read", key=topic, value=None)
            op.status, op.output = "ok", count
            op.complete_us, op.complete_seq = trace.now_us(), trace.count
            trace.event("op", process="final", type="ok", f="read", key=topic, value=count)
            self.history.append(op)

    def check_linearizable(self) -> None:
        model = TopicModel()
        for topic in self.keys():
            ops = []
            for op in self.history:
                if op.key != topic or op.f not in model.functions:
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
            result = search(model, ops)
            if result.verdict == "violation":
                stuck = ops[result.stuck].describe() if result.stuck is not None else "?"
                self.checker.fail(
                    f"linearizability: topic {topic}: {stuck} cannot be linearized "
                    f"({len(ops)} ops; state {model.describe_state(result.state)})"
                )
                return


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
        await stop_workload.wait()
        for task in lanes:  # what is still in flight stays of unknown outcome
            task.cancel()
        await asyncio.gather(*lanes, return_exceptions=True)
        await cluster.heal_check()
        healed.set()

    client = world.add_process("client")
    client.start(client_main)
    nemesis = Nemesis(world, controllers + brokers, config.faults, leader=cluster.active_controller)

    async def drive() -> None:
        await nemesis.run(config.duration_s)
        nemesis.heal_all()
        world.trace.event("heal-start")
        stop_workload.set()
        await healed.wait()
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
    )
