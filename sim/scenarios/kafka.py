"""The kafka scenario: controllers, brokers replicating a topic, producers and consumers.

The cluster is the metadata scenario's (every node the real KraftNode, its image checks
on) with one topic, ``jepsen``, of ``--partitions`` partitions and replication factor
``--rf``, min.insync.replicas 2 (1 when rf is 1). Once the topic has leaders, the nemesis
starts, and with it the workload (sim/kafka_client.py, the Kafka wire protocol):

- producer lanes send unique integer values, one record per request, to a random partition's
  leader with ``--acks``; an ``--idempotent`` producer numbers its batches and resends a
  batch whose outcome it does not know, with the same sequence, until acknowledged or 10 s
  passed (it then starts over with a new producer id, as Kafka's does), and after the heal
  resends its last acknowledged batches, which every leader must answer as duplicates
  naming the offset where each batch is (``duplicate-offset``);
- consumer lanes assign every partition and poll them in turn from their positions;
- group consumer lanes join one classic group (FindCoordinator, JoinGroup, SyncGroup,
  Heartbeat), fetch the committed offsets of the partitions they are assigned, poll them
  and commit each new position; a rebalance, a coordinator move or a restart fetches the
  committed offsets again and resumes from them (a new process each time: a seek back to
  the committed offset is not a non-monotonic poll);
- a lane sometimes crashes (its connections dropped, its state forgotten) and restarts as a
  new process (Jepsen's rule), a consumer from offset 0, a group consumer from its group's
  committed offsets.

Checked online as operations complete and at the end (sim/analysis/kafka.py, the same code
kraft-analyze runs): inconsistent offsets, duplicates, non-monotonic sends and polls, poll
skips, lost and unseen writes, lost commits and committed offsets going backwards (the
final offset fetches after the heal included); on the brokers' partition state, sampled
every few virtual milliseconds: a leader's high watermark never moves back within its
epoch, and no replica truncates below an offset a leader committed (``partition-hw``,
``partition-truncate`` events). After the heal, within 30 s every partition has a leader in
its ISR and takes an acks=all produce (liveness); then the final reads fetch every
partition up to its high watermark, and the group's committed offsets are fetched.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, astuple, dataclass, field
from typing import Any

from broker.bugs import BROKER_BUGS
from broker.client import KafkaConnection
from broker.group.coordinator import OFFSETS_TOPIC
from broker.group.records import partition_for
from broker.replica_manager import Partition
from log.batch import BatchHeader, iter_batches
from log.compression import Compression
from log.errors import CorruptRecordError
from log.log import KafkaStorageError, Log, OffsetOutOfRangeError
from log.runtime import Runtime
from metadata.image import MetadataImage
from metadata.records import NO_LEADER
from sim import admin, kafka_client
from sim.analysis.kafka import (
    COMMIT,
    COMMIT_EPOCH_UNKNOWN,
    OFFSET_FETCH,
    TXN_STATE_TOPIC,
    BatchIdentity,
    KafkaChecker,
    KafkaOp,
    PartitionStateChecker,
    PowerCuts,
    broker_id,
    check_committed_on_isr,
    check_duplicate_answer,
    check_liveness,
    check_replica_caught_up,
)
from sim.foreign import foreign
from sim.harness import ScenarioRun
from sim.nemesis import Nemesis
from sim.process import EPOCH_MS, SimProcess
from sim.run import RunConfig, RunResult
from sim.scenarios.metadata import BROKER_PORT, LIFECYCLE_FAULTS, Checker, Cluster, lifecycle_faults
from sim.scenarios.metadata import BUGS as METADATA_BUGS

# The broker's replication bugs, plus the controller's and Raft's (``leader-outside-isr``
# is the unclean election with the flag off: a leader from outside the ISR).
BUGS = {**BROKER_BUGS, **METADATA_BUGS}
TOPIC = "jepsen"
PRODUCERS = 4
CONSUMERS = 2
REQUEST_TIMEOUT_S = 3.0
SEND_TIMEOUT_S = 10.0  # an idempotent producer's delivery.timeout.ms
# After the heal an idempotent producer resends its last acknowledged batches per partition:
# as many as a producer may have in flight (max.in.flight.requests.per.connection), which
# is why Kafka's producer state keeps that many per producer (broker/producer_state.py).
RESENT_BATCHES = 5
RESEND_ATTEMPTS = 3
POLL_WAIT_S = 0.5
# --compression: each batch's codec, drawn per batch (Kafka's four).
CODECS = (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)
CRASH_CHANCE = 0.01  # per operation, a client lane crashes and restarts as a new process
SETUP_BOUND_S = 60.0
REASSIGN_INTERVAL_S = (1.0, 3.0)  # --reassign: the pause between two reassignments
HEAL_BOUND_S = 30.0
SETTLE_S = 1.0  # the final reads' end: a high watermark unchanged this long
SAMPLE_S = 0.02
# After the final reads, every replica holds its leader's log up to the high watermark
# within this bound (virtual time): a follower fetches every few hundred ms when idle.
CATCH_UP_BOUND_S = 10.0
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
GROUP = "jepsen-group"
GROUP_CONSUMERS = 2
GROUP_CRASH_CHANCE = 0.003  # lower: a crashed member stalls its group's next rebalance
OFFSETS_PARTITIONS = 3  # offsets.topic.num.partitions (Kafka's 50 would only slow the run)
SESSION_TIMEOUT_S = 6.0  # group.min.session.timeout.ms
REBALANCE_TIMEOUT_S = 5.0
HEARTBEAT_S = 1.0
# How long each group lane waits for a commit's answer: the first longer than the
# coordinator's offsets.commit.timeout.ms (5 s), as Kafka's default request.timeout.ms (30 s)
# is, the other shorter: when a coordinator is cut off, one member moves on to the new
# coordinator and commits there while the other still waits on the old one.
COMMIT_TIMEOUTS_S = (8.0, REQUEST_TIMEOUT_S)
# Commit errors a coordinator answers before writing anything: the commit did not happen.
COMMIT_REFUSED = {
    "ILLEGAL_GENERATION",
    "UNKNOWN_MEMBER_ID",
    "REBALANCE_IN_PROGRESS",
    "FENCED_INSTANCE_ID",
    "COORDINATOR_LOAD_IN_PROGRESS",
    "UNKNOWN_TOPIC_OR_PARTITION",
    "STALE_MEMBER_EPOCH",  # KIP-848 members' commits (OffsetCommit v9)
    "FENCED_MEMBER_EPOCH",
}
REJOIN = {"ILLEGAL_GENERATION", "UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS"}
# Kafka's own replication faults, on top of the nemesis's (``--faults all`` includes them).
FAULTS = ("isolate-partition-leader", "kill-partition-leader", "pause-follower")
# The metadata scenario's lifecycle faults (graceful shutdowns, the brown-out) run here only
# when named (``--faults all,shutdown-broker,shutdown-controller,stall-crash``), with the
# supervised restarts that come with them: in ``all`` they changed the outcome of pinned
# seeds (no-epoch-bump at 36, coordinator-hw-over-truncated at 7) that take sweeps longer
# than this change had to find again.


# Faults aimed at the data plane's narrow windows (issue 28), opt-in like the lifecycle
# faults and on the nemesis's separate stream, so ``all`` and its pinned seeds stay as they
# were: a partition leader cut off right after its ISR grew (within a fetch round trip of
# the change: KAFKA-7128's window), a leader change while in-sync followers are paused (one
# catches up from a new leader, maybe holding a tail that leader never had), a leader
# power-cut as a follower that left the ISR catches up, and leaders in a row each isolated
# with a minority of one while clients still write to it (the divergent tails a follower
# must truncate correctly: KAFKA-6361's).
DATA_PLANE_FAULTS = {
    "cut-leader-after-isr-change": 2,
    "leader-change-during-catch-up": 2,
    "successive-minority-leaders": 1,
    "kill-leader-during-catch-up": 2,
}
ISR_CUT_DELAY_S = (0.0, 0.02)  # after the expanded ISR is published: one fetch round trip
# leader-change-during-catch-up: the second follower's pause begins this long after the
# leader's power cut, just before broker.session.timeout.ms (3 s) fences it and another leads.
CATCH_UP_PAUSE_AFTER_S = (1.6, 2.2)
MINORITY_LEADERS = 3
MINORITY_STEP_S = (3.5, 5.0)  # longer than broker.session.timeout.ms: the leader is fenced


# --compact: the topic is compacted and its segments roll every second, so every broker's
# cleaner (every 0.5 s) keeps merging them, swapping files under the power cuts; the keys
# are unique, so the checks above hold unchanged: the cleaner may lose nothing.
COMPACT_TOPIC_CONFIGS = {
    "cleanup.policy": "compact,delete",
    "segment.ms": "1000",
    "min.cleanable.dirty.ratio": "0.01",
}
COMPACT_BROKER_PROPS = {"log.cleaner.backoff.ms": "500", "log.initial.task.delay.ms": "1000"}
# --authorizer: every request of every node goes through broker/authorization.py; with no
# ACLs and allow.everyone.if.no.acl.found every check allows, so the history must be as clean
# as without it.
AUTHORIZER_PROPS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found": "true",
}


def key_of(partition: int) -> str:
    return f"{TOPIC}-{partition}"


def group_key_of(partition: int, group: str = GROUP) -> str:
    return f"{group}/{TOPIC}-{partition}"


OFFSETS_PARTITION = partition_for(GROUP, OFFSETS_PARTITIONS)
OFFSETS_LOG = f"{OFFSETS_TOPIC}-{OFFSETS_PARTITION}"


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
class GroupMember:
    """One group consumer's session: its coordinator, membership and positions. A KIP-848
    member (sim/scenarios/kafka_consumer.py) keeps its member epoch in ``generation`` and
    commits with OffsetCommit v9."""

    routing: Routing
    lane: str
    commit_timeout_s: float = REQUEST_TIMEOUT_S
    group: str = GROUP
    commit_version: int = 8
    coordinator: str | None = None
    member_id: str = ""
    generation: int = -1
    assigned: list[int] = field(default_factory=list)
    positions: dict[int, int] | None = None  # None: fetch the committed offsets first
    loads: int = 0  # positions loaded so far: each load starts a new process
    next_heartbeat: float = 0.0
    turn: int = 0

    @property
    def process(self) -> str:
        return f"{self.lane}.{self.loads}"

    def lost_coordinator(self) -> None:
        """Find the coordinator again, and then resume from its committed offsets."""
        self.coordinator = None
        self.positions = None

    def rejoin(self, error: str) -> None:
        self.generation = -1
        self.positions = None
        if error == "UNKNOWN_MEMBER_ID":
            self.member_id = ""


@dataclass(slots=True)
class KafkaCluster(Cluster):
    """The metadata scenario's cluster plus the Kafka workload and its checks."""

    partitions: int = 3
    acks: int = -1
    idempotent: bool = False
    compact: bool = False
    compression: bool = False
    extra_topics: tuple[str, ...] = ()  # --transactions: whose ISRs PowerCuts follows too
    cuts: PowerCuts = field(default_factory=PowerCuts)
    kafka: KafkaChecker = field(default_factory=KafkaChecker)
    states: PartitionStateChecker = field(default_factory=PartitionStateChecker)
    ops: list[KafkaOp] = field(default_factory=list)
    next_value: int = 0
    sends: int = 0
    polls: int = 0
    group_ops: int = 0
    open_commits: dict[str, KafkaOp] = field(default_factory=dict)  # by process
    # What the sampler last saw: (node, incarnation, key[, epoch]) -> high watermark, log end.
    _hw_seen: dict[tuple[str, int, str, int], int] = field(default_factory=dict)
    _end_seen: dict[tuple[str, int, str], int] = field(default_factory=dict)
    # cut-leader-after-isr-change: armed until this virtual time, crashing for that hold.
    isr_cut_armed: tuple[Nemesis, float, float] | None = None
    _isr_seen: dict[str, tuple[int, ...]] = field(default_factory=dict)
    # --idempotent: (producer id, epoch, partition) -> its last acknowledged batches.
    acked_batches: dict[tuple[int, int, int], deque[bytes]] = field(default_factory=dict)
    resends: int = 0

    # ---- history ---------------------------------------------------------------------------
    def invoke(self, process: str, f: str, key: str, value: int | None) -> None:
        self.world.trace.event("op", process=process, type="invoke", f=f, key=key, value=value)

    def complete(self, op: KafkaOp, error: str | None = None) -> None:
        trace = self.world.trace
        fields: dict[str, object] = {"error": error}
        if op.offset is not None:
            fields["offset"] = op.offset
        if op.f == "poll" and op.status == "ok":
            fields["values"] = [n for pair in op.records for n in pair]
        if op.isr:
            fields["isr"] = list(op.isr)
        if op.f in (COMMIT, OFFSET_FETCH) and op.status == "ok":
            fields["epoch"] = op.epoch
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
            f"{key}-{value}" if self.compact else key,  # unique: compaction removes nothing
            value,
            # A client's wall clock, as SimClock gives nodes: brokers' retention and timestamp
            # checks read these, and 1970 stamps would be deleted as old on the first pass.
            EPOCH_MS + int(loop.time() * 1000),
            producer_id=producer_id[0],
            producer_epoch=producer_id[1],
            sequence=sequence if idempotent else -1,
            compression=rng.choice(CODECS) if self.compression else Compression.NONE,
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
                        if idempotent:
                            self.acked_batches.setdefault(
                                (producer_id[0], producer_id[1], partition),
                                deque(maxlen=RESENT_BATCHES),
                            ).append(batch)
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

    async def resend_acknowledged(self, rng: random.Random) -> None:
        """After the heal and the final reads (--idempotent): every producer resends its
        last acknowledged batches to each partition's leader, as a producer whose answers
        were lost does. The leader must answer each as a duplicate of the batch where it
        is, and the duplicate check judges every such answer as it leaves the leader
        (``on_duplicate``): a leader whose producer state outlived a truncation of its log
        names the offset the batch had before the cut. Nothing reads the log afterwards (a
        batch a power cut lost is appended again, as Kafka would)."""
        routing = Routing(self, "resend")
        try:
            for (_, _, partition), batches in self.acked_batches.items():
                for batch in batches:
                    for _attempt in range(RESEND_ATTEMPTS):
                        where = await routing.leader(partition, rng)
                        if where is None:
                            break
                        host = where[0]
                        try:
                            conn = await routing.conn(host)
                            error, _offset = await kafka_client.produce(
                                conn, TOPIC, partition, batch, self.acks, REQUEST_TIMEOUT_S
                            )
                        except (OSError, TimeoutError, ConnectionError):
                            await routing.drop(host)
                            continue
                        self.resends += 1
                        if error != "NOT_LEADER_OR_FOLLOWER":
                            break
                        routing.leaders.pop(partition, None)
        finally:
            await routing.close()

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

    # ---- group consumers -------------------------------------------------------------------
    async def group_consumer(self, runtime: Runtime, lane: int) -> None:
        rng = runtime.rng
        generation = 0
        while True:
            name = f"g{lane}.{generation}"
            timeout_s = COMMIT_TIMEOUTS_S[lane % len(COMMIT_TIMEOUTS_S)]
            member = GroupMember(Routing(self, name), name, timeout_s)
            while rng.random() >= GROUP_CRASH_CHANCE:
                await asyncio.sleep(rng.uniform(0.005, 0.05))
                await self.group_step(member, rng)
            await member.routing.close()
            generation += 1

    async def group_step(self, member: GroupMember, rng: random.Random) -> None:
        """One step of a group consumer: find its coordinator, (re)join, load its positions
        from the committed offsets, heartbeat when due, or poll one assigned partition and
        commit the new position."""
        loop = self.world.loop
        if member.coordinator is None:
            member.coordinator = await self.find_coordinator(member.routing, rng)
            member.positions = None
            return
        if member.generation < 0:
            await self._join(member)
            return
        if await self.load_positions(member):
            return
        if loop.time() >= member.next_heartbeat:
            member.next_heartbeat = loop.time() + HEARTBEAT_S
            error = await self.group_call(
                member,
                lambda c: kafka_client.heartbeat(
                    c, GROUP, member.generation, member.member_id, REQUEST_TIMEOUT_S
                ),
            )
            if error in REJOIN:
                member.rejoin(error)
            return
        await self.poll_assigned(member, rng)

    async def load_positions(self, member: GroupMember) -> bool:
        """Whether the member had no positions: then it fetched its partitions' committed
        offsets (as a new process), and starts from them if it got every one."""
        if member.positions is not None:
            return False
        member.loads += 1
        positions = {}
        for partition in member.assigned:
            committed = await self.fetch_offset(member, member.process, partition)
            if committed is None:
                return True
            positions[partition] = max(committed, 0)
        member.positions = positions
        return True

    async def poll_assigned(self, member: GroupMember, rng: random.Random) -> None:
        """Poll the member's next assigned partition, and commit the position after what
        it read."""
        if not member.assigned or member.positions is None:
            return
        partition = member.assigned[member.turn % len(member.assigned)]
        member.turn += 1
        position = member.positions[partition]
        result = await self.poll(member.routing, rng, member.process, partition, position)
        if result.error == "OFFSET_OUT_OF_RANGE":
            # auto.offset.reset=earliest, as a new process (a seek back is no poll of ours).
            member.loads += 1
            member.positions[partition] = 0
        elif result.records:
            member.positions[partition] = result.records[-1][0] + 1
            await self.commit(member, partition, member.positions[partition])

    async def find_coordinator(
        self, routing: Routing, rng: random.Random, group: str = GROUP
    ) -> str | None:
        host = rng.choice(self.brokers)
        self.group_ops += 1
        try:
            conn = await routing.conn(host)
            error, node = await kafka_client.find_coordinator(conn, group, REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError):
            await routing.drop(host)
            return None
        if error != "NONE":
            await asyncio.sleep(0.2)
            return None
        return f"n{node}"

    async def group_call(self, member: GroupMember, call: Callable[[KafkaConnection], Any]) -> str:
        """One request to the member's coordinator: its error (a connection failure's type
        name). Errors that mean the coordinator moved make the member find it again."""
        host = member.coordinator
        assert host is not None
        self.group_ops += 1
        try:
            error = await call(await member.routing.conn(host))
        except (OSError, TimeoutError, ConnectionError) as failure:
            await member.routing.drop(host)
            member.lost_coordinator()
            return type(failure).__name__
        if error in ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"):
            member.lost_coordinator()
        return str(error)

    async def _join(self, member: GroupMember) -> None:
        """JoinGroup (again with the member id MEMBER_ID_REQUIRED names), then SyncGroup; the
        leader assigns the partitions round-robin over the sorted member ids."""
        joined: list[kafka_client.JoinResult] = []

        async def join(conn: KafkaConnection) -> str:
            result = await kafka_client.join_group(
                conn, GROUP, member.member_id, TOPIC, SESSION_TIMEOUT_S, REBALANCE_TIMEOUT_S
            )
            joined.append(result)
            return result.error

        error = await self.group_call(member, join)
        if joined and joined[0].member_id:
            member.member_id = joined[0].member_id
        if error != "NONE":
            if error == "UNKNOWN_MEMBER_ID":
                member.member_id = ""
            return
        result = joined[0]
        assignments: dict[str, bytes] = {}
        if result.leader == member.member_id:
            members = sorted(result.members)
            for index, member_id in enumerate(members):
                mine = list(range(index, self.partitions, len(members)))
                assignments[member_id] = kafka_client.assignment(TOPIC, mine)
        synced: list[bytes] = []

        async def sync(conn: KafkaConnection) -> str:
            error, data = await kafka_client.sync_group(
                conn,
                GROUP,
                result.generation,
                member.member_id,
                assignments,
                REBALANCE_TIMEOUT_S + REQUEST_TIMEOUT_S,
            )
            synced.append(data)
            return error

        error = await self.group_call(member, sync)
        if error == "NONE":
            member.generation = result.generation
            member.assigned = kafka_client.assigned_partitions(synced[0], TOPIC)
            member.positions = None
            member.next_heartbeat = self.world.loop.time() + HEARTBEAT_S
        elif error == "UNKNOWN_MEMBER_ID":
            member.member_id = ""

    def coordinator_state(self, host: str, *, leading: bool) -> tuple[int, tuple[int, ...]]:
        """(leader epoch, ISR) of the group's ``__consumer_offsets`` partition on ``host``
        now (what its answer was given under); epoch -1 if it is not there, or (with
        ``leading``) not its leader."""
        node = self.nodes.get(host)
        replicas = node.replicas if node is not None else None
        state = replicas._partitions.get((OFFSETS_TOPIC, OFFSETS_PARTITION)) if replicas else None
        if state is None or (leading and not state.is_leader):
            return -1, ()
        return state.leader_epoch, tuple(state.maximal_isr)

    def commit_begun(self, process: str, key: str, offset: int) -> int:
        """A commit operation's invocation (its time): it stays pending, judged at the end
        as one that may land any time, unless ``commit_ended`` follows (a lane cancelled
        mid-commit never gets there)."""
        invoked = self.world.trace.now_us()
        self.invoke(process, COMMIT, key, offset)
        self.open_commits[process] = KafkaOp(
            process, COMMIT, key, "pending", offset, invoke_us=invoked
        )
        return invoked

    def commit_ended(
        self,
        process: str,
        key: str,
        offset: int,
        invoked: int,
        status: str,
        epoch: int,
        isr: tuple[int, ...],
        error: str | None,
    ) -> None:
        """A commit operation's completion, under the coordinator's leader epoch (-1 if
        unknown) and ISR when it answered."""
        del self.open_commits[process]
        op = KafkaOp(
            process,
            COMMIT,
            key,
            status,
            offset,
            complete_us=self.world.trace.now_us(),
            isr=isr,
            invoke_us=invoked,
            epoch=epoch if epoch >= 0 else COMMIT_EPOCH_UNKNOWN,
        )
        self.complete(op, None if status == "ok" else error)

    async def commit(self, member: GroupMember, partition: int, offset: int) -> None:
        """One commit operation: a refused commit is ``fail``, any other error ``info``."""
        key, process = group_key_of(partition, member.group), member.process
        invoked = self.commit_begun(process, key, offset)
        host = member.coordinator
        error = await self.group_call(
            member,
            lambda c: kafka_client.offset_commit(
                c,
                member.group,
                member.generation,
                member.member_id,
                TOPIC,
                partition,
                offset,
                member.commit_timeout_s,
                version=member.commit_version,
            ),
        )
        if error == "NONE" and host is not None:
            epoch, isr = self.coordinator_state(host, leading=False)
            status = "ok"
        else:
            epoch, isr = -1, ()
            status = "fail" if error in COMMIT_REFUSED else "info"
        self.commit_ended(process, key, offset, invoked, status, epoch, isr, error)
        if error in REJOIN:
            member.rejoin(error)

    async def fetch_offset(self, member: GroupMember, process: str, partition: int) -> int | None:
        """One offset-fetch operation: the committed offset (-1 for none), None on an error."""
        key = group_key_of(partition, member.group)
        invoked = self.world.trace.now_us()
        self.invoke(process, OFFSET_FETCH, key, None)
        host = member.coordinator
        answer: list[int] = []

        async def fetch(conn: KafkaConnection) -> str:
            error, committed = await kafka_client.offset_fetch(
                conn, member.group, TOPIC, partition, REQUEST_TIMEOUT_S
            )
            answer.append(committed)
            return error

        error = await self.group_call(member, fetch)
        if error != "NONE" or host is None:
            self.world.trace.event(
                "op", process=process, type="fail", f=OFFSET_FETCH, key=key, error=error
            )
            return None
        epoch, isr = self.coordinator_state(host, leading=True)
        op = KafkaOp(
            process,
            OFFSET_FETCH,
            key,
            "ok",
            None,
            answer[0],
            complete_us=self.world.trace.now_us(),
            isr=isr,
            invoke_us=invoked,
            epoch=epoch,
        )
        self.complete(op)
        return answer[0]

    async def final_offsets(self, rng: random.Random, group: str = GROUP) -> None:
        """Fetch the group's committed offset of every partition from the healed cluster's
        coordinator (process ``final``): the last word on lost commits."""
        loop = self.world.loop
        deadline = loop.time() + HEAL_BOUND_S
        member = GroupMember(Routing(self, "final"), "final", group=group)
        try:
            for partition in range(self.partitions):
                while loop.time() < deadline:
                    if member.coordinator is None:
                        member.coordinator = await self.find_coordinator(member.routing, rng, group)
                    elif await self.fetch_offset(member, "final", partition) is not None:
                        break
                    await asyncio.sleep(0.2)
        finally:
            await member.routing.close()

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
        elif event["kind"] == "partition-state" and event["topic"] in (
            TOPIC,
            OFFSETS_TOPIC,
            TXN_STATE_TOPIC,
            *self.extra_topics,
        ):
            key = f"{event['topic']}-{event['partition']}"
            isr = tuple(int(r) for r in event["isr"])
            self.cuts.isr_changed(key, isr, int(event["t_us"]))
            before = self._isr_seen.get(key, ())
            self._isr_seen[key] = isr
            if event["topic"] == TOPIC and set(isr) > set(before):
                self._isr_grew(int(event["leader_id"]))

    def _isr_grew(self, leader: int) -> None:
        """cut-leader-after-isr-change, when armed: within a fetch round trip of a partition's
        ISR taking a follower in, cut its leader from every other node (clients still reach
        it) until the controller fences it and elects from the new ISR: a follower admitted
        before it held every committed record may then be the only one to elect. A cut, not
        a power cut, so a loss is not excused as the ISR losing power."""
        armed = self.isr_cut_armed
        if armed is None or leader == NO_LEADER:
            return
        nemesis, until, hold_s = armed
        loop = self.world.loop
        if loop.time() > until:
            self.isr_cut_armed = None
            return
        name = f"n{leader}"
        if not self.world.processes[name].alive:
            return
        self.isr_cut_armed = None
        net = self.world.network
        others = [n for n in self.controllers + self.brokers if n != name]

        def cut() -> None:
            if not nemesis.healed:
                loop.call_later(hold_s, net.restore, net.partition([name], others))

        loop.call_later(nemesis.separate_rng.uniform(*ISR_CUT_DELAY_S), cut)

    # ---- the data plane, judged at its events ----------------------------------------------
    def node_options(self, process: SimProcess) -> dict[str, Any]:
        return {
            "high_watermark_listener": lambda p, hw: self.on_high_watermark(process, p, hw),
            "duplicate_listener": lambda p, b, o: self.on_duplicate(process, p, b, o),
        }

    def on_duplicate(
        self, process: SimProcess, leader: Partition, header: BatchHeader, offset: int
    ) -> None:
        """As a leader acknowledges a produce as a duplicate: its log must hold that very
        batch at the offset it names (``duplicate-answer`` event, judged by
        ``check_duplicate_answer``)."""
        batch = identity(header)
        held = batch_holding(leader.log, offset)
        found = None if held is None else identity(held)
        found_base = -1 if held is None else held.base_offset
        key = f"{leader.topic}-{leader.index}"
        trace = self.world.trace
        trace.event(
            "duplicate-answer",
            node=process.name,
            log=key,
            epoch=leader.leader_epoch,
            offset=offset,
            batch=list(astuple(batch)),
            found_base=found_base,
            found=None if found is None else list(astuple(found)),
        )
        now = trace.now_us()
        violation = check_duplicate_answer(
            process.name,
            key,
            leader.leader_epoch,
            offset,
            batch,
            found_base,
            found,
            now,
            self.cuts,
        )
        if violation is not None:
            self.checker.fail(violation.message)

    def partition_on(self, name: str, key: tuple[str, int]) -> Partition | None:
        """``name``'s replica of ``key`` while its process runs, else None."""
        node, process = self.nodes.get(name), self.world.processes[name]
        replicas = node.replicas if node is not None else None
        if replicas is None or not process.alive:
            return None
        return replicas._partitions.get(key)

    def on_high_watermark(self, process: SimProcess, leader: Partition, previous: int) -> None:
        """At the moment a leader's high watermark moves: every follower it counted (its
        ISR, and any follower whose fetches it took to have reached the new high
        watermark) that follows it in this epoch must hold the newly committed batches,
        byte for byte (``hw-advance`` event, judged by ``check_committed_on_isr``)."""
        if leader.topic != TOPIC or leader.high_watermark <= previous:
            return
        hw, key = leader.high_watermark, key_of(leader.index)
        batches = batch_crcs(leader.log, previous, hw)
        checked, diverged = [], {}
        isr = leader.maximal_isr
        for replica, progress in sorted(leader.remote.items()):
            if replica not in isr and progress.log_end_offset < hw:
                continue  # neither in the ISR nor counted as holding the new offsets
            member = f"n{replica}"
            state = self.partition_on(member, leader.key)
            if state is None or (state.leader, state.leader_epoch) != (
                leader.node_id,
                leader.leader_epoch,
            ):
                continue  # down, or in another epoch: not this leader's follower now
            checked.append(member)
            at = first_divergence(batches, state.log, previous, hw)
            if at is not None:
                diverged[member] = at
        trace = self.world.trace
        trace.event(
            "hw-advance",
            node=process.name,
            log=key,
            epoch=leader.leader_epoch,
            from_hw=previous,
            hw=hw,
            checked=checked,
            diverged=diverged,
        )
        found = check_committed_on_isr(
            process.name, key, leader.leader_epoch, previous, hw, diverged, trace.now_us()
        )
        if found is not None:
            self.checker.fail(found.message)

    def _replica_states(self) -> list[tuple[str, str, str, int, int, int]]:
        """(replica, key, leader, leader's high watermark, replica's log end, first offset
        it holds differently or -1) of every follower of every partition's current leader
        (the running replica leading in the highest epoch)."""
        found = []
        for index in range(self.partitions):
            key = (TOPIC, index)
            leaders = [
                (state.leader_epoch, name, state)
                for name in self.brokers
                if (state := self.partition_on(name, key)) is not None and state.is_leader
            ]
            if not leaders:
                continue  # check_liveness judges a partition without a leader
            _, name, leader = max(leaders, key=lambda item: (item[0], item[1]))
            hw = leader.high_watermark
            batches = batch_crcs(leader.log, 0, hw)
            for replica in leader.replicas:
                if replica == leader.node_id:
                    continue
                state = self.partition_on(f"n{replica}", key)
                end = state.log.log_end_offset if state is not None else -1
                at = None if state is None else first_divergence(batches, state.log, 0, hw)
                found.append(
                    (f"n{replica}", key_of(index), name, hw, end, -1 if at is None else at)
                )
        return found

    async def replicas_caught_up(self) -> None:
        """After the final reads: within ``CATCH_UP_BOUND_S`` every follower holds its
        leader's log up to the high watermark, byte for byte (``replica-caught-up``
        events, judged by ``check_replica_caught_up``): a follower left diverged or stuck
        by a truncation gone wrong serves nothing and fails no client, until it leads."""
        loop = self.world.loop
        deadline = loop.time() + CATCH_UP_BOUND_S
        while True:
            states = self._replica_states()
            done = all(end >= hw and at < 0 for _, _, _, hw, end, at in states)
            if done or loop.time() >= deadline:
                break
            await asyncio.sleep(0.25)
        trace = self.world.trace
        for node, key, leader, hw, end, at in states:
            trace.event(
                "replica-caught-up",
                node=node,
                log=key,
                leader=leader,
                hw=hw,
                end=end,
                diverged_at=at,
                bound_s=CATCH_UP_BOUND_S,
            )
            found = check_replica_caught_up(
                node, key, leader, hw, end, at, CATCH_UP_BOUND_S, trace.now_us()
            )
            if found is not None:
                self.checker.fail(found.message)

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
        if self.compact:
            steps += [
                lambda c, k=k, v=v: admin.alter_topic_config(c, TOPIC, k, v, REQUEST_TIMEOUT_S)
                for k, v in COMPACT_TOPIC_CONFIGS.items()
            ]
        routing = Routing(self, "setup")
        try:
            await self.admin_steps(routing, rng, steps, deadline)
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

    async def set_up(
        self,
        label: str,
        rng: random.Random,
        steps: list[Callable[[KafkaConnection], Any]],
        applied: Callable[[MetadataImage], bool],
    ) -> bool:
        """A lane's setup: ``steps`` (``admin_steps``, through a routing of its own), then
        wait until every broker's image shows them ``applied``, all within SETUP_BOUND_S:
        whether it all happened."""
        loop = self.world.loop
        deadline = loop.time() + SETUP_BOUND_S
        routing = Routing(self, label)
        try:
            done = await self.admin_steps(routing, rng, steps, deadline)
        finally:
            await routing.close()
        while done and loop.time() < deadline:
            if all(self._image_shows(broker, applied) for broker in self.brokers):
                return True
            await asyncio.sleep(0.2)
        return False

    def _image_shows(self, broker: str, applied: Callable[[MetadataImage], bool]) -> bool:
        node = self.nodes.get(broker)
        image = node.loader.image if node is not None and node.loader is not None else None
        return image is not None and applied(image)

    async def admin_steps(
        self,
        routing: Routing,
        rng: random.Random,
        steps: list[Callable[[KafkaConnection], Any]],
        deadline: float,
    ) -> bool:
        """Each admin request in turn, each through a random broker and again until it
        succeeds (or finds its topic created already) or the deadline passes: whether all
        succeeded."""
        loop = self.world.loop
        pending = list(steps)
        while pending and loop.time() < deadline:
            await asyncio.sleep(0.2)
            host = rng.choice(self.brokers)
            try:
                error = await pending[0](await routing.conn(host))
            except (OSError, TimeoutError, ConnectionError):
                await routing.drop(host)
                continue
            if error in ("NONE", "TOPIC_ALREADY_EXISTS"):
                pending.pop(0)
        return not pending

    async def reassigner(self, rng: random.Random) -> None:
        """--reassign: every few seconds, move a random partition to a random set of rf
        brokers through a random broker, as an admin client does; each attempt traced."""
        rf = int(self.extra_props["default.replication.factor"])
        broker_ids = sorted(int(name[1:]) for name in self.brokers)
        routing = Routing(self, "reassigner")
        try:
            while True:
                await asyncio.sleep(rng.uniform(*REASSIGN_INTERVAL_S))
                partition = rng.randrange(self.partitions)
                target = rng.sample(broker_ids, rf)
                host = rng.choice(self.brokers)
                try:
                    conn = await routing.conn(host)
                    error = await admin.reassign_partition(
                        conn, TOPIC, partition, target, REQUEST_TIMEOUT_S
                    )
                except (OSError, TimeoutError, ConnectionError):
                    await routing.drop(host)
                    continue
                self.world.trace.event(
                    "reassign", key=f"{TOPIC}-{partition}", replicas=target, error=error
                )
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

    def partition_state(index: int) -> tuple[str | None, list[str]]:
        """(leader, other ISR members) of partition ``index``, as the active controller's
        image has it (no leader, none: no image yet)."""
        active = cluster.active_controller()
        node = cluster.nodes.get(active) if active is not None else None
        topic = node.loader.image.topics.get(TOPIC) if node and node.loader else None
        if topic is None or index not in topic.partitions:
            return None, []
        state = topic.partitions[index]
        leader = None if state.leader == NO_LEADER else f"n{state.leader}"
        return leader, [f"n{r}" for r in state.isr if r != state.leader]

    def replica_order(index: int) -> Callable[[str], int]:
        """Sort key: a broker's place in partition ``index``'s assignment."""
        active = cluster.active_controller()
        node = cluster.nodes.get(active) if active is not None else None
        topic = node.loader.image.topics.get(TOPIC) if node and node.loader else None
        state = topic.partitions.get(index) if topic is not None else None
        order = [f"n{r}" for r in state.replicas] if state is not None else []
        return lambda name: order.index(name) if name in order else len(order)

    def replicas(nemesis: Nemesis) -> tuple[str | None, list[str]]:
        active = cluster.active_controller()
        node = cluster.nodes.get(active) if active is not None else None
        topic = node.loader.image.topics.get(TOPIC) if node and node.loader else None
        if topic is None or not topic.partitions:
            return None, []
        return partition_state(nemesis.rng.choice(sorted(topic.partitions)))

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

    def kill_after_isr_change(nemesis: Nemesis, hold_s: float) -> None:
        # Armed for the hold: the next ISR expansion of the topic's partitions cuts their
        # leader off (watch -> KafkaCluster._isr_grew) for 4-6 s, past its fencing.
        until = nemesis.world.loop.time() + max(hold_s, 1.0)
        cluster.isr_cut_armed = (nemesis, until, nemesis.separate_rng.uniform(4.0, 6.0))

    def leader_change_during_catch_up(nemesis: Nemesis, hold_s: float) -> None:
        # Two in-sync followers end up at different offsets: one is paused (for less than
        # the lag time, so it stays in the ISR) while the other fetches on, and the leader
        # is power-cut meanwhile. Just before the controller fences it and elects one of
        # them, the other is paused: it resumes behind a new leader that has taken writes,
        # holding a tail from the old one that the new leader may never have had, and
        # catches up from there (a follower ahead of its new leader must truncate first).
        rng = nemesis.separate_rng
        processes = nemesis.world.processes
        for index in rng.sample(range(cluster.partitions), cluster.partitions):
            leader, followers = partition_state(index)
            running = [f for f in followers if processes[f].alive and not processes[f].paused]
            if leader is not None and len(running) >= 2 and processes[leader].alive:
                break
        else:
            return  # no partition has a full ISR now
        # The controller elects the first ISR member in assignment order: pausing it first
        # leaves the new leader behind the other follower.
        first, second = sorted(rng.sample(running, 2), key=replica_order(index))
        lag_s = REPLICA_LAG_TIME_MAX_MS / 1000
        nemesis.pause_for(first, rng.uniform(0.4, 0.9) * lag_s)
        loop = nemesis.world.loop

        def pause_second() -> None:
            process = processes[second]
            if process.alive and not process.paused and not nemesis.healed:
                nemesis.pause_for(second, rng.uniform(0.8, 1.2) * lag_s)

        def kill() -> None:
            if processes[leader].alive and not nemesis.healed:
                nemesis.crash_for(leader, max(hold_s, 4.0))  # down past its fencing
                loop.call_later(rng.uniform(*CATCH_UP_PAUSE_AFTER_S), pause_second)

        loop.call_later(rng.uniform(0.2, 0.6), kill)

    def kill_leader_during_catch_up(nemesis: Nemesis, hold_s: float) -> None:
        # Pause an in-sync follower past the lag time (it leaves the ISR); as it resumes and
        # catches up, power-cut the leader: the follower is left out of the ISR a fetch
        # short of the committed offset, and asks the next leader, whose high watermark
        # trails (a new leader learns it from its followers), to take it back in.
        rng = nemesis.separate_rng
        processes = nemesis.world.processes
        index = rng.randrange(cluster.partitions)
        leader, followers = partition_state(index)
        running = [f for f in followers if processes[f].alive and not processes[f].paused]
        if leader is None or not running:
            return
        pause_s = rng.uniform(1.5, 3) * REPLICA_LAG_TIME_MAX_MS / 1000
        nemesis.pause_for(rng.choice(running), pause_s)

        def kill() -> None:
            if processes[leader].alive and not nemesis.healed:
                nemesis.crash_for(leader, max(hold_s, 4.0))  # down past its fencing

        nemesis.world.loop.call_later(pause_s + rng.uniform(0.0, 0.05), kill)

    def successive_minority_leaders(nemesis: Nemesis, hold_s: float) -> None:
        # Each step cuts the partition's current leader from every other node but the
        # client, which goes on writing to it: its appends stay a minority of one, until
        # the controller fences it and elects another, which the next step cuts the same
        # way. All the cuts end together, after the last step and the hold.
        rng = nemesis.separate_rng
        index = rng.randrange(cluster.partitions)
        net, loop = nemesis.world.network, nemesis.world.loop
        cuts: list[tuple[str, str]] = []
        nodes = cluster.controllers + cluster.brokers

        def step(left: int) -> None:
            if nemesis.healed:
                return
            leader, _ = partition_state(index)
            if left and leader is not None:
                cuts.extend(net.partition([leader], [n for n in nodes if n != leader]))
            if left > 1:
                loop.call_later(rng.uniform(*MINORITY_STEP_S), step, left - 1)
            else:
                loop.call_later(rng.uniform(*MINORITY_STEP_S) + hold_s, net.restore, cuts)

        step(MINORITY_LEADERS)

    return {
        "isolate-partition-leader": isolate_leader,
        "kill-partition-leader": kill_leader,
        "pause-follower": pause_follower,
        **lifecycle_faults(cluster),
        "cut-leader-after-isr-change": kill_after_isr_change,
        "leader-change-during-catch-up": leader_change_during_catch_up,
        "successive-minority-leaders": successive_minority_leaders,
        "kill-leader-during-catch-up": kill_leader_during_catch_up,
    }


def run_kafka(config: RunConfig) -> RunResult:
    """Run the kafka scenario once and judge it."""
    from sim.scenarios import (  # they build on this module
        kafka_acls,
        kafka_aiokafka,
        kafka_consumer,
        kafka_quotas,
        kafka_txn,
    )

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
            "min.insync.replicas": str(min(2, rf)),  # __consumer_offsets' too: commits acks=all
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "offsets.topic.replication.factor": str(rf),
            "group.initial.rebalance.delay.ms": "0",
            **(COMPACT_BROKER_PROPS if config.compact else {}),
            **(AUTHORIZER_PROPS if config.authorizer else {}),
            **(kafka_txn.broker_props(rf) if config.transactions else {}),
            **(kafka_consumer.broker_props() if config.consumer_protocol else {}),
            **(kafka_quotas.broker_props() if config.quotas else {}),
        },
        partitions=config.partitions,
        acks=-1 if config.acks == "all" else 1,
        idempotent=config.idempotent,
        compact=config.compact,
        compression=config.compression,
    )
    cluster.kafka = KafkaChecker(
        acks_all=config.acks == "all", cuts=cluster.cuts, offsets_log=OFFSETS_LOG
    )
    cluster.states = PartitionStateChecker(cuts=cluster.cuts)
    txn = kafka_txn.attach(cluster) if config.transactions else None
    aio = kafka_aiokafka.AiokafkaLanes(cluster) if config.aiokafka else None
    kip848 = kafka_consumer.ConsumerLanes(cluster) if config.consumer_protocol else None
    acls = kafka_acls.AclLanes(cluster) if config.acls else None
    quotas = kafka_quotas.QuotaLanes(cluster) if config.quotas else None
    world.trace.watchers.append(cluster.watch)
    world.trace.event(
        "kafka-config",
        topic=TOPIC,
        acks=config.acks,
        rf=rf,
        partitions=config.partitions,
        idempotent=config.idempotent,
        group=GROUP,
        offsets_log=OFFSETS_LOG,
        **({"compact": True} if config.compact else {}),
        **({"compression": True} if config.compression else {}),
        **({"aiokafka": kafka_aiokafka.GROUP} if aio is not None else {}),
        **(
            {
                "consumer_group": kafka_consumer.GROUP,
                "fence_after_us": kafka_consumer.fence_after_us(),
            }
            if kip848 is not None
            else {}
        ),
        **(
            {"quota_rate": quotas.check.rate, "quota_window_s": quotas.check.window_s}
            if quotas is not None
            else {}
        ),
        **(
            {
                "txn_topics": [kafka_txn.TXN_TOPIC, kafka_txn.CTP_TOPIC],
                "ctp": asdict(kafka_txn.CTP_KEYS),
            }
            if txn is not None
            else {}
        ),
    )
    for name in controllers + brokers:
        process = world.add_process(name)
        if config.descriptor_limit is not None and name in brokers:
            process.disk.descriptor_limit = config.descriptor_limit
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
        if setup_ok[0] and txn is not None:
            setup_ok[0] = await txn.setup(runtime.rng)
        if setup_ok[0] and acls is not None:
            setup_ok[0] = await acls.setup(runtime.rng)
        if setup_ok[0] and quotas is not None:
            setup_ok[0] = await quotas.setup(runtime.rng)
        ready.set()
        if not setup_ok[0]:
            return
        lanes = [
            *(txn.lanes(runtime) if txn is not None else ()),
            *(aio.lanes(runtime) if aio is not None else ()),
            *(kip848.lanes(runtime) if kip848 is not None else ()),
            *(acls.lanes(runtime) if acls is not None else ()),
            *(quotas.lanes(runtime) if quotas is not None else ()),
            *(asyncio.ensure_future(cluster.producer(runtime, i)) for i in range(PRODUCERS)),
            *(asyncio.ensure_future(cluster.consumer(runtime, i)) for i in range(CONSUMERS)),
            *(
                asyncio.ensure_future(cluster.group_consumer(runtime, i))
                for i in range(GROUP_CONSUMERS)
            ),
            *([asyncio.ensure_future(cluster.reassigner(runtime.rng))] if config.reassign else []),
        ]
        await stop_workload.wait()
        for task in lanes:  # what is still in flight stays of unknown outcome
            task.cancel()
        for outcome in await asyncio.gather(*lanes, return_exceptions=True):
            if not isinstance(outcome, asyncio.CancelledError | None):
                raise outcome  # a lane that raised: crash-free fails on it
        for pending in cluster.open_commits.values():  # cancelled mid-commit: may land later
            cluster.kafka.add(pending)
        await cluster.heal_check(runtime.rng)
        await cluster.final_reads(runtime.rng)
        await cluster.final_offsets(runtime.rng)
        if kip848 is not None:
            await cluster.final_offsets(runtime.rng, kafka_consumer.GROUP)
        await cluster.replicas_caught_up()
        if txn is not None:
            await txn.final_reads(runtime.rng)
        if config.idempotent:
            await cluster.resend_acknowledged(runtime.rng)

    client = world.add_process("client")
    client.start(client_main)
    nemesis = Nemesis(
        world,
        controllers + brokers,
        config.faults,
        leader=cluster.active_controller,
        custom={**_replication_faults(cluster), **kafka_txn.txn_faults(cluster)},
        supervise=any(fault in LIFECYCLE_FAULTS for fault in config.faults),
        separate={**LIFECYCLE_FAULTS, **DATA_PLANE_FAULTS},
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
        await cluster.shutdowns_judged()
        sampler.cancel()
        for found in cluster.kafka.finish(world.trace.now_us()):
            checker.fail(found.message)
        for found in txn.checker.finish(world.trace.now_us()) if txn is not None else ():
            checker.fail(found.message)
        for message in check_liveness(cluster.ops, cluster.partitions, TOPIC):
            checker.fail(message)

    # aiokafka's modules read virtual time and the seed while the run lasts (sim/foreign.py).
    clock = (
        foreign("aiokafka", world.loop, world.random("aiokafka"))
        if aio is not None
        else contextlib.nullcontext()
    )
    with clock:
        return run.finish(
            drive(),
            lambda: checker.violation,
            checker.fail,
            lambda: {
                "ops": cluster.sends + cluster.polls + cluster.group_ops + (txn.ops if txn else 0),
                "sends": cluster.kafka.sends_ok,
                "polls": cluster.kafka.polls_ok,
                "commits": cluster.kafka.commits_ok,
                "excused": cluster.kafka.excused,
                "lost": cluster.kafka.lost,
                "faults": nemesis.injected,
                **(_cleaned(cluster) if config.compact else {}),
                **(txn.figures() if txn is not None else {}),
                **(aio.figures if aio is not None else {}),
                **(kip848.figures if kip848 is not None else {}),
                **(acls.figures if acls is not None else {}),
                **(quotas.figures if quotas is not None else {}),
                **({"resends": cluster.resends} if config.idempotent else {}),
                **(_files_closed(cluster) if config.descriptor_limit is not None else {}),
            },
        )


def batch_crcs(log: Log, start: int, end: int) -> dict[int, tuple[int, int]]:
    """Base offset -> (last offset, CRC) of each batch of ``log`` holding an offset in
    ``[start, end)`` (from the batch holding ``start``). The simulator's view of a node's
    log; reading it changes nothing the node sees (a storage error reads as nothing)."""
    found: dict[int, tuple[int, int]] = {}
    offset, end = max(start, log.log_start_offset), min(end, log.log_end_offset)
    try:
        while offset < end:  # each pass moves past at least one batch
            moved = offset
            for _position, header in iter_batches(bytes(log.read(offset, 1 << 16).records)):
                if header.base_offset >= end:
                    return found
                found[header.base_offset] = (header.last_offset, header.crc)
                moved = max(moved, header.last_offset + 1)
            if moved == offset:
                break
            offset = moved
    except (OSError, KafkaStorageError, OffsetOutOfRangeError, CorruptRecordError):
        pass
    return found


def batch_holding(log: Log, offset: int) -> BatchHeader | None:
    """The header of the batch of ``log`` holding ``offset``, None if none does (outside
    the log, or a gap). Read as ``batch_crcs`` reads: the node sees nothing of it."""
    if not log.log_start_offset <= offset < log.log_end_offset:
        return None
    try:
        for _position, header in iter_batches(bytes(log.read(offset, 1 << 16).records)):
            if header.last_offset >= offset:
                return header if header.base_offset <= offset else None
    except (OSError, KafkaStorageError, OffsetOutOfRangeError, CorruptRecordError):
        pass
    return None


def identity(header: BatchHeader) -> BatchIdentity:
    """What the duplicate check compares of a batch."""
    return BatchIdentity(
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        header.last_offset_delta,
        header.crc,
    )


def first_divergence(
    leader: dict[int, tuple[int, int]], log: Log, start: int, end: int
) -> int | None:
    """The base offset of the first of the leader's batches (``batch_crcs``) that ``log``
    holds differently, within what ``log`` has of ``[start, end)``; None if it agrees."""
    mine = batch_crcs(log, start, end)
    log_end = log.log_end_offset
    for base in sorted(leader):
        if base >= log_end:
            break
        if mine.get(base) != leader[base]:
            return base
    return None


def _files_closed(cluster: KafkaCluster) -> dict[str, int]:
    """--descriptor-limit's figure: idle segment files the brokers' current incarnations
    closed to stay under the limit (reopened on use)."""
    nodes = cluster.nodes.values()
    return {"files_closed": sum(n.logs.files.evictions for n in nodes if n.logs)}


def _cleaned(cluster: KafkaCluster) -> dict[str, int]:
    """--compact's figure: segments the brokers' current incarnations cleaned (a crash
    forgets its own count)."""
    nodes = cluster.nodes.values()
    return {"segments_cleaned": sum(n.logs.cleaner.segments_cleaned for n in nodes if n.logs)}
