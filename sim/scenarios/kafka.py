"""The kafka scenario: controllers, brokers replicating a topic, producers and consumers.

The cluster is the metadata scenario's (every node the real KraftNode, its image checks
on) with one topic, ``jepsen``, of ``--partitions`` partitions and replication factor
``--rf``, min.insync.replicas 2 (1 when rf is 1). Once the topic has leaders, the nemesis
starts, and with it the workload (sim/kafka_client.py, the Kafka wire protocol):

- producer lanes send unique integer values, one record per request, to a random partition's
  leader with ``--acks``; an ``--idempotent`` producer numbers its batches and resends a
  batch whose outcome it does not know, with the same sequence, until acknowledged or 10 s
  passed (it then starts over with a new producer id, as Kafka's does);
- consumer lanes assign every partition and poll them in turn from their positions;
- a lane sometimes crashes (its connections dropped, its state forgotten) and restarts as a
  new process (Jepsen's rule), a consumer from offset 0.

Checked online as operations complete and at the end (sim/analysis/kafka.py, the same code
kraft-analyze runs): inconsistent offsets, duplicates, non-monotonic sends and polls, poll
skips, lost and unseen writes; on the brokers' partition state, sampled every few virtual
milliseconds: a leader's high watermark never moves back within its epoch, and no replica
truncates below an offset a leader committed (``partition-hw``, ``partition-truncate``
events). After the heal, within 30 s every partition has a leader in its ISR and takes an
acks=all produce (liveness); then the final reads fetch every partition up to its high
watermark.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from broker.bugs import BROKER_BUGS
from broker.client import KafkaConnection
from broker.replica_manager import Partition
from log.runtime import Runtime
from metadata.records import NO_LEADER
from sim import admin, kafka_client
from sim.analysis.kafka import (
    KafkaChecker,
    KafkaOp,
    PartitionStateChecker,
    PowerCuts,
    broker_id,
    check_liveness,
)
from sim.harness import ScenarioRun
from sim.nemesis import Nemesis
from sim.process import EPOCH_MS
from sim.run import RunConfig, RunResult
from sim.scenarios.metadata import BROKER_PORT, Checker, Cluster
from sim.scenarios.metadata import BUGS as METADATA_BUGS

# The broker's replication bugs, plus the controller's and Raft's (``leader-outside-isr``
# is the unclean election with the flag off: a leader from outside the ISR).
BUGS = {**BROKER_BUGS, **METADATA_BUGS}
TOPIC = "jepsen"
PRODUCERS = 4
CONSUMERS = 2
REQUEST_TIMEOUT_S = 3.0
SEND_TIMEOUT_S = 10.0  # an idempotent producer's delivery.timeout.ms
POLL_WAIT_S = 0.5
CRASH_CHANCE = 0.01  # per operation, a client lane crashes and restarts as a new process
SETUP_BOUND_S = 60.0
HEAL_BOUND_S = 30.0
SETTLE_S = 1.0  # the final reads' end: a high watermark unchanged this long
SAMPLE_S = 0.02
REPLICA_LAG_TIME_MAX_MS = 2000
# Kafka errors a produce answers before appending anything: the send did not happen.
NOT_APPENDED = {
    "NOT_ENOUGH_REPLICAS",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "INVALID_RECORD",
    "CORRUPT_MESSAGE",
    "INVALID_REQUIRED_ACKS",
    "OUT_OF_ORDER_SEQUENCE_NUMBER",
    "INVALID_PRODUCER_EPOCH",
}
# Kafka's own replication faults, on top of the nemesis's (``--faults all`` includes them).
FAULTS = ("isolate-partition-leader", "kill-partition-leader", "pause-follower")


def key_of(partition: int) -> str:
    return f"{TOPIC}-{partition}"


@dataclass(slots=True)
class Routing:
    """A client's view of where partitions lead, refreshed from any broker on error."""

    cluster: KafkaCluster
    client_id: str
    leaders: dict[int, kafka_client.PartitionInfo] = field(default_factory=dict)
    conns: dict[str, KafkaConnection] = field(default_factory=dict)

    async def conn(self, host: str) -> KafkaConnection:
        conn = self.conns.get(host)
        if conn is None or conn.closed:
            conn = self.conns[host] = KafkaConnection(self.client_id)
            try:
                await conn.connect(host, BROKER_PORT, REQUEST_TIMEOUT_S)
            except BaseException:
                del self.conns[host]
                raise
        return conn

    async def refresh(self, rng: random.Random) -> None:
        host = rng.choice(self.cluster.brokers)
        try:
            conn = await self.conn(host)
            error, found, _hosts = await kafka_client.partitions(conn, TOPIC, REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError):
            await self.drop(host)
            return
        if error == "NONE":
            self.leaders = found

    async def leader(self, partition: int, rng: random.Random) -> tuple[str, int] | None:
        """(host, leader epoch) of the partition's leader, refreshing once if unknown."""
        info = self.leaders.get(partition)
        if info is None or info.leader == NO_LEADER:
            await self.refresh(rng)
            info = self.leaders.get(partition)
        if info is None or info.leader == NO_LEADER:
            return None
        return f"n{info.leader}", info.leader_epoch

    async def drop(self, host: str) -> None:
        conn = self.conns.pop(host, None)
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        for host in list(self.conns):
            await self.drop(host)


@dataclass(slots=True)
class KafkaCluster(Cluster):
    """The metadata scenario's cluster plus the Kafka workload and its checks."""

    partitions: int = 3
    acks: int = -1
    idempotent: bool = False
    cuts: PowerCuts = field(default_factory=PowerCuts)
    kafka: KafkaChecker = field(default_factory=KafkaChecker)
    states: PartitionStateChecker = field(default_factory=PartitionStateChecker)
    ops: list[KafkaOp] = field(default_factory=list)
    next_value: int = 0
    sends: int = 0
    polls: int = 0
    # What the sampler last saw: (node, incarnation, key[, epoch]) -> high watermark, log end.
    _hw_seen: dict[tuple[str, int, str, int], int] = field(default_factory=dict)
    _end_seen: dict[tuple[str, int, str], int] = field(default_factory=dict)

    # ---- history ---------------------------------------------------------------------------
    def invoke(self, process: str, f: str, key: str, value: int) -> None:
        self.world.trace.event("op", process=process, type="invoke", f=f, key=key, value=value)

    def complete(self, op: KafkaOp) -> None:
        trace = self.world.trace
        fields: dict[str, object] = {"error": None}
        if op.offset is not None:
            fields["offset"] = op.offset
        if op.f == "poll" and op.status == "ok":
            fields["values"] = [n for pair in op.records for n in pair]
        if op.isr:
            fields["isr"] = list(op.isr)
        trace.event(
            "op", process=op.process, type=op.status, f=op.f, key=op.key, value=op.value, **fields
        )
        self.ops.append(op)
        before = len(self.kafka.violations)
        self.kafka.add(op)
        if len(self.kafka.violations) > before:
            self.checker.fail(self.kafka.violations[before].message)

    def leader_isr(self, host: str, partition: int) -> tuple[int, ...]:
        """The ISR the leader ``host`` holds for the partition now (what an acknowledgement
        from it promised)."""
        node = self.nodes.get(host)
        replicas = node.replicas if node is not None else None
        state = replicas._partitions.get((TOPIC, partition)) if replicas is not None else None
        return tuple(state.maximal_isr) if state is not None else ()

    # ---- producers -------------------------------------------------------------------------
    async def producer(self, runtime: Runtime, lane: int) -> None:
        rng = runtime.rng
        generation = 0
        while True:
            process = f"p{lane}.{generation}"
            routing = Routing(self, process)
            producer_id = (-1, -1)
            sequences: dict[int, int] = {}
            while rng.random() >= CRASH_CHANCE:
                await asyncio.sleep(rng.uniform(0.005, 0.05))
                if self.idempotent and producer_id[0] < 0:
                    producer_id = await self._init_producer_id(routing, rng)
                    sequences = {}
                    if producer_id[0] < 0:
                        continue
                partition = rng.randrange(self.partitions)
                value, self.next_value = self.next_value, self.next_value + 1
                sequence = sequences.get(partition, 0)
                status, error = await self.send(
                    routing, rng, process, partition, value, producer_id, sequence
                )
                if status == "ok":
                    sequences[partition] = sequence + 1
                elif status == "info" or error == "OUT_OF_ORDER_SEQUENCE_NUMBER":
                    # The sequence's fate is unknown: start over, as Kafka's producer does.
                    producer_id = (-1, -1)
            await routing.close()
            generation += 1

    async def _init_producer_id(self, routing: Routing, rng: random.Random) -> tuple[int, int]:
        host = rng.choice(self.brokers)
        try:
            conn = await routing.conn(host)
            error, pid, epoch = await kafka_client.init_producer_id(conn, REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError):
            await routing.drop(host)
            return (-1, -1)
        return (pid, epoch) if error == "NONE" else (-1, -1)

    async def send(
        self,
        routing: Routing,
        rng: random.Random,
        process: str,
        partition: int,
        value: int,
        producer_id: tuple[int, int],
        sequence: int,
    ) -> tuple[str, str]:
        """One send operation: its status (ok, fail, info) and error."""
        loop = self.world.loop
        key = key_of(partition)
        self.invoke(process, "send", key, value)
        self.sends += 1
        idempotent = producer_id[0] >= 0
        batch = kafka_client.record_batch(
            key,
            value,
            # A client's wall clock, as SimClock gives nodes: brokers' retention and timestamp
            # checks read these, and 1970 stamps would be deleted as old on the first pass.
            EPOCH_MS + int(loop.time() * 1000),
            producer_id=producer_id[0],
            producer_epoch=producer_id[1],
            sequence=sequence if idempotent else -1,
        )
        deadline = loop.time() + SEND_TIMEOUT_S
        error = "NONE"
        uncertain = False  # an attempt may have appended: no later answer makes it definite
        while True:
            where = await routing.leader(partition, rng)
            if where is None:
                error = "LEADER_NOT_AVAILABLE"
            else:
                host, _epoch = where
                try:
                    conn = await routing.conn(host)
                    error, offset = await kafka_client.produce(
                        conn, TOPIC, partition, batch, self.acks, REQUEST_TIMEOUT_S
                    )
                except (OSError, TimeoutError, ConnectionError) as failure:
                    error = type(failure).__name__
                    uncertain = True
                    await routing.drop(host)
                else:
                    if error == "NONE":
                        isr = self.leader_isr(host, partition) if self.acks == -1 else ()
                        self.complete(
                            KafkaOp(
                                process,
                                "send",
                                key,
                                "ok",
                                value,
                                offset,
                                complete_us=self.world.trace.now_us(),
                                isr=isr,
                            )
                        )
                        return "ok", error
                    routing.leaders.pop(partition, None)
                    uncertain = uncertain or error not in NOT_APPENDED
            if not idempotent or loop.time() + 0.1 >= deadline or error in NOT_APPENDED:
                break
            await asyncio.sleep(0.1)
        definite = error in NOT_APPENDED or error == "LEADER_NOT_AVAILABLE"
        status = "fail" if definite and not uncertain else "info"
        self.world.trace.event(
            "op", process=process, type=status, f="send", key=key, value=value, error=error
        )
        return status, error

    # ---- consumers -------------------------------------------------------------------------
    async def consumer(self, runtime: Runtime, lane: int) -> None:
        rng = runtime.rng
        generation = 0
        while True:
            process = f"c{lane}.{generation}"
            routing = Routing(self, process)
            positions = dict.fromkeys(range(self.partitions), 0)
            turn = 0
            while rng.random() >= CRASH_CHANCE:
                await asyncio.sleep(rng.uniform(0.005, 0.05))
                partition = turn % self.partitions
                turn += 1
                result = await self.poll(routing, rng, process, partition, positions[partition])
                if result.error == "OFFSET_OUT_OF_RANGE":
                    # The log lost what this consumer read (power cuts on every replica):
                    # it starts over, as a new process, from the start (auto.offset.reset).
                    break
                if result.records:
                    positions[partition] = result.records[-1][0] + 1
            await routing.close()
            generation += 1

    async def poll(
        self,
        routing: Routing,
        rng: random.Random,
        process: str,
        partition: int,
        position: int,
        *,
        wait_s: float = POLL_WAIT_S,
    ) -> kafka_client.FetchResult:
        """One poll operation of one partition from ``position`` (failed: its error)."""
        key = key_of(partition)
        self.invoke(process, "poll", key, position)
        self.polls += 1
        start = -1
        where = await routing.leader(partition, rng)
        if where is None:
            error = "LEADER_NOT_AVAILABLE"
        else:
            host, epoch = where
            try:
                conn = await routing.conn(host)
                result = await kafka_client.fetch(
                    conn, TOPIC, partition, position, epoch, wait_s, REQUEST_TIMEOUT_S + wait_s
                )
            except (OSError, TimeoutError, ConnectionError) as failure:
                error = type(failure).__name__
                await routing.drop(host)
            else:
                if result.error == "NONE":
                    self.complete(
                        KafkaOp(
                            process,
                            "poll",
                            key,
                            "ok",
                            position,
                            result.high_watermark,
                            result.records,
                            self.world.trace.now_us(),
                            self.leader_isr(host, partition),
                        )
                    )
                    return result
                error = result.error
                if error != "OFFSET_OUT_OF_RANGE":
                    routing.leaders.pop(partition, None)
                else:
                    start = result.log_start_offset
        self.world.trace.event(
            "op", process=process, type="fail", f="poll", key=key, value=position, error=error
        )
        return kafka_client.FetchResult(error, log_start_offset=start)

    # ---- partition state -------------------------------------------------------------------
    async def sample_partitions(self) -> None:
        """Watch every broker's partitions: a leader's high watermark, each log's end."""
        while True:
            await asyncio.sleep(SAMPLE_S)
            for name in self.brokers:
                process, node = self.world.processes[name], self.nodes.get(name)
                replicas = node.replicas if node is not None else None
                if replicas is None or not process.alive:
                    continue
                for (topic, index), state in sorted(replicas._partitions.items()):
                    if topic == TOPIC:
                        self._sample(name, process.incarnation, key_of(index), state)

    def _sample(self, name: str, incarnation: int, key: str, state: Partition) -> None:
        trace, now = self.world.trace, self.world.trace.now_us()
        found = None
        end, hw, epoch = state.log.log_end_offset, state.high_watermark, state.leader_epoch
        last_end = self._end_seen.get((name, incarnation, key))
        self._end_seen[(name, incarnation, key)] = end
        if last_end is not None and end < last_end:
            committed = self.states.committed(key)
            trace.event(
                "partition-truncate",
                node=name,
                log=key,
                from_offset=last_end,
                to_offset=end,
                committed_hw=committed,
            )
            found = self.states.on_truncate(name, key, end, now)
        slot = (name, incarnation, key, epoch)
        if state.leader == self.node_id(name) and self._hw_seen.get(slot) != hw:
            self._hw_seen[slot] = hw
            isr = tuple(state.isr)
            trace.event("partition-hw", node=name, log=key, epoch=epoch, hw=hw, isr=list(isr))
            found = found or self.states.on_hw(name, incarnation, key, epoch, hw, isr, now)
        if found is not None:
            self.checker.fail(found.message)

    def watch(self, event: dict[str, Any]) -> None:
        """A trace watcher: note each broker's power cut and each committed ISR."""
        if event["kind"] == "crash" and event["node"] in self.brokers:
            broker = broker_id(str(event["node"]))
            assert broker is not None
            self.cuts.cut(broker, int(event["t_us"]))
        elif event["kind"] == "partition-state" and event["topic"] == TOPIC:
            key = key_of(int(event["partition"]))
            self.cuts.isr_changed(key, tuple(int(r) for r in event["isr"]), int(event["t_us"]))

    # ---- setup, heal, final reads ----------------------------------------------------------
    async def setup(self, rng: random.Random) -> bool:
        """Create the topic, set its min.insync.replicas, and wait for its leaders."""
        loop = self.world.loop
        deadline = loop.time() + SETUP_BOUND_S
        rf = int(self.extra_props["default.replication.factor"])
        steps: list[Callable[[KafkaConnection], object]] = [
            lambda c: admin.create_topic(c, TOPIC, self.partitions, rf, REQUEST_TIMEOUT_S),
            lambda c: admin.alter_topic_config(
                c, TOPIC, "min.insync.replicas", str(min(2, rf)), REQUEST_TIMEOUT_S
            ),
        ]
        routing = Routing(self, "setup")
        try:
            while steps and loop.time() < deadline:
                await asyncio.sleep(0.2)
                host = rng.choice(self.brokers)
                try:
                    error = await steps[0](await routing.conn(host))  # type: ignore[misc]
                except (OSError, TimeoutError, ConnectionError):
                    await routing.drop(host)
                    continue
                if error in ("NONE", "TOPIC_ALREADY_EXISTS"):
                    steps.pop(0)
            while loop.time() < deadline:
                await routing.refresh(rng)
                if len(routing.leaders) == self.partitions and all(
                    info.leader != NO_LEADER for info in routing.leaders.values()
                ):
                    return True
                await asyncio.sleep(0.2)
            return False
        finally:
            await routing.close()

    async def heal_check(self, rng: random.Random) -> None:
        """Every partition gets a leader in its ISR that takes an acks=all produce."""
        loop = self.world.loop
        deadline = loop.time() + HEAL_BOUND_S
        routing = Routing(self, "heal")
        pending = list(range(self.partitions))
        acks, self.acks = self.acks, -1
        try:
            while pending and loop.time() < deadline and self.checker.violation is None:
                await asyncio.sleep(0.2)
                partition = pending[0]
                info = routing.leaders.get(partition)
                if info is None or info.leader not in info.isr:
                    await routing.refresh(rng)
                    continue
                value, self.next_value = self.next_value, self.next_value + 1
                status, _ = await self.send(routing, rng, "heal", partition, value, (-1, -1), 0)
                if status == "ok":
                    pending.pop(0)
        finally:
            self.acks = acks
            await routing.close()

    async def final_reads(self, rng: random.Random) -> None:
        """Read every partition from offset 0 until caught up with a settled high watermark
        (process ``final``): a leader elected after the heal (a preferred-leader election,
        say) learns the committed offset from its followers' next fetches, so one answer's
        high watermark may still trail what was acknowledged; the same high watermark,
        reached and reported again ``SETTLE_S`` later, is the end."""
        loop = self.world.loop
        deadline = loop.time() + HEAL_BOUND_S
        routing = Routing(self, "final")
        try:
            for partition in range(self.partitions):
                position, settled = 0, None
                while loop.time() < deadline:
                    result = await self.poll(routing, rng, "final", partition, position, wait_s=0)
                    if result.error == "OFFSET_OUT_OF_RANGE" and result.log_start_offset > position:
                        # Nothing deletes records here: check_liveness flags the gap.
                        position = result.log_start_offset
                        continue
                    if result.error != "NONE":
                        await asyncio.sleep(0.2)
                        continue
                    if result.records:
                        position = result.records[-1][0] + 1
                    hw = result.high_watermark
                    if position < hw:
                        settled = None
                        if not result.records:
                            position = max(position, result.log_start_offset)
                            await asyncio.sleep(0.05)
                        continue
                    if settled is not None and settled[0] == hw:
                        if loop.time() - settled[1] >= SETTLE_S:
                            break
                    else:
                        settled = (hw, loop.time())
                    await asyncio.sleep(0.25)
        finally:
            await routing.close()


def _replication_faults(cluster: KafkaCluster) -> dict[str, Callable[[Nemesis, float], None]]:
    """The nemesis's Kafka faults, aimed at a random partition's leader or follower."""

    def replicas(nemesis: Nemesis) -> tuple[str | None, list[str]]:
        active = cluster.active_controller()
        node = cluster.nodes.get(active) if active is not None else None
        topic = node.loader.image.topics.get(TOPIC) if node and node.loader else None
        if topic is None or not topic.partitions:
            return None, []
        state = topic.partitions[nemesis.rng.choice(sorted(topic.partitions))]
        leader = None if state.leader == NO_LEADER else f"n{state.leader}"
        return leader, [f"n{r}" for r in state.isr if r != state.leader]

    def isolate_leader(nemesis: Nemesis, hold_s: float) -> None:
        leader, _ = replicas(nemesis)
        if leader is not None:  # cut from the controllers, not from clients or brokers
            net = nemesis.world.network
            nemesis.world.loop.call_later(
                hold_s, net.restore, net.partition([leader], cluster.controllers)
            )

    def kill_leader(nemesis: Nemesis, hold_s: float) -> None:
        leader, _ = replicas(nemesis)
        if leader is not None and nemesis.world.processes[leader].alive:
            nemesis.crash_for(leader, hold_s)

    def pause_follower(nemesis: Nemesis, hold_s: float) -> None:
        _, followers = replicas(nemesis)
        processes = nemesis.world.processes
        running = [f for f in followers if processes[f].alive and not processes[f].paused]
        if running:
            lag_s = REPLICA_LAG_TIME_MAX_MS / 1000
            nemesis.pause_for(nemesis.rng.choice(running), nemesis.rng.uniform(1.5, 3) * lag_s)

    return {
        "isolate-partition-leader": isolate_leader,
        "kill-partition-leader": kill_leader,
        "pause-follower": pause_follower,
    }


def run_kafka(config: RunConfig) -> RunResult:
    """Run the kafka scenario once and judge it."""
    run = ScenarioRun(config, BUGS)
    world = run.world
    checker = Checker(world.trace)
    controllers = [f"n{i}" for i in range(1, config.controllers + 1)]
    brokers = [f"n{config.controllers + i}" for i in range(1, config.brokers + 1)]
    rf = min(config.rf, config.brokers)
    cluster = KafkaCluster(
        world,
        config,
        checker,
        controllers,
        brokers,
        extra_props={
            "default.replication.factor": str(rf),
            "num.partitions": str(config.partitions),
            "replica.lag.time.max.ms": str(REPLICA_LAG_TIME_MAX_MS),
            "unclean.leader.election.enable": "false",
        },
        partitions=config.partitions,
        acks=-1 if config.acks == "all" else 1,
        idempotent=config.idempotent,
    )
    cluster.kafka = KafkaChecker(acks_all=config.acks == "all", cuts=cluster.cuts)
    cluster.states = PartitionStateChecker(cuts=cluster.cuts)
    world.trace.watchers.append(cluster.watch)
    world.trace.event(
        "kafka-config",
        topic=TOPIC,
        acks=config.acks,
        rf=rf,
        partitions=config.partitions,
        idempotent=config.idempotent,
    )
    for name in controllers + brokers:
        process = world.add_process(name)
        process.start(lambda rt, p=process: cluster.main(rt, p))
    ready = asyncio.Event()
    stop_workload = asyncio.Event()
    healed = asyncio.Event()
    setup_ok: list[bool] = []

    async def client_main(runtime: Runtime) -> None:
        try:
            await workload(runtime)
        finally:  # a workload that raised is a crash-free violation, not a hang
            ready.set()
            healed.set()

    async def workload(runtime: Runtime) -> None:
        setup_ok.append(await cluster.setup(runtime.rng))
        ready.set()
        if not setup_ok[0]:
            return
        lanes = [
            *(asyncio.ensure_future(cluster.producer(runtime, i)) for i in range(PRODUCERS)),
            *(asyncio.ensure_future(cluster.consumer(runtime, i)) for i in range(CONSUMERS)),
        ]
        await stop_workload.wait()
        for task in lanes:  # what is still in flight stays of unknown outcome
            task.cancel()
        for outcome in await asyncio.gather(*lanes, return_exceptions=True):
            if not isinstance(outcome, asyncio.CancelledError | None):
                raise outcome  # a lane that raised: crash-free fails on it
        await cluster.heal_check(runtime.rng)
        await cluster.final_reads(runtime.rng)

    client = world.add_process("client")
    client.start(client_main)
    nemesis = Nemesis(
        world,
        controllers + brokers,
        config.faults,
        leader=cluster.active_controller,
        custom=_replication_faults(cluster),
    )

    async def drive() -> None:
        sampler = asyncio.ensure_future(cluster.sample_partitions())
        await ready.wait()
        if not setup_ok or not setup_ok[0]:
            checker.fail(f"liveness: the topic had no leaders {SETUP_BOUND_S:.0f}s after start")
            sampler.cancel()
            return
        await nemesis.run(world.loop.time() + config.duration_s)
        nemesis.heal_all()
        world.trace.event("heal-start")
        stop_workload.set()
        await healed.wait()
        sampler.cancel()
        for found in cluster.kafka.finish(world.trace.now_us()):
            checker.fail(found.message)
        for message in check_liveness(cluster.ops, cluster.partitions, TOPIC):
            checker.fail(message)

    return run.finish(
        drive(),
        lambda: checker.violation,
        checker.fail,
        lambda: {
            "ops": cluster.sends + cluster.polls,
            "sends": cluster.kafka.sends_ok,
            "polls": cluster.kafka.polls_ok,
            "excused": cluster.kafka.excused,
            "lost": cluster.kafka.lost,
            "faults": nemesis.injected,
        },
    )
