"""The kafka scenario's transactional lanes (``--transactions``).

Beside the plain workload (sim/scenarios/kafka.py), on a topic of their own (``jepsen-txn``,
the same partition count, replication factor and min ISR):

- transactional producer lanes (``tp<lane>``, transactional id ``txn-<lane>``): find the
  transaction coordinator, InitProducerId, then one transaction after another over 1-3
  random partitions: AddPartitionsToTxn, one unique value per partition (acks=all), EndTxn,
  committing 70% of the time and aborting otherwise; a send that fails aborts the
  transaction, and any error of the protocol makes the lane initialise again (which fences
  its previous epoch and aborts what it left open, as Kafka's producer does on an abortable
  error). A fence (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH: another instance of the
  transactional id, or the coordinator's epoch bump when it aborted the lane's timed-out
  transaction, took over) is fatal to a Kafka producer, so the lane does what an
  application does: it ends nothing more with that instance, closes it and starts a new one
  (a new process, the same transactional id, whose InitProducerId without a producer id
  aborts what the old one left open). A lane crashes (a new process, the same
  transactional id) as the plain lanes do;
- read_committed consumer lanes (``rc<lane>``) poll every partition in turn, dropping the
  records of aborted transactions as Kafka's consumer does (sim/kafka_txn_client.py);
- a consume-transform-produce worker (``ctp<n>``, transactional id ``txn-ctp``, group
  ``jepsen-ctp-group``) reads partition 0 of ``jepsen-txn`` read_committed, writes one
  record to ``jepsen-ctp`` (one partition) for each input record it takes, and commits its
  input offset with AddOffsetsToTxn and TxnOffsetCommit in the same transaction. After an
  abort, an error (its coordinator's or leader's broker gone; after a fence without
  ending the transaction) or a crash it starts again as a new process: InitProducerId,
  then the group's committed offset (OffsetFetch with require_stable, KIP-447), and reads
  on from there;
- after the heal the worker's committed offset is read (process ``ctp-final``), then the
  final read_committed reads (process ``txn-final``) read every partition of both topics,
  the output first, up to its settled last stable offset (an open transaction of a crashed
  lane holds it until the coordinator aborts it at its timeout).

Every operation is traced (``txn-send``, ``txn-end``, ``rc-poll``, ``ctp-offsets``,
``ctp-position``) and judged online by sim/analysis/txn.py, the code kraft-analyze replays.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from broker.client import KafkaConnection
from broker.group.coordinator import OFFSETS_TOPIC
from broker.group.records import partition_for
from broker.txn.config import TXN_TOPIC as STATE_TOPIC
from log.runtime import Runtime
from metadata.records import NO_LEADER
from sim import admin, kafka_client, kafka_txn_client
from sim.analysis.txn import (
    CTP_OFFSETS,
    CTP_POSITION,
    FINAL_POSITION,
    LSO_STUCK,
    RC_POLL,
    TXN_END,
    TXN_SEND,
    CtpKeys,
    TxnChecker,
    TxnOp,
)
from sim.nemesis import Nemesis
from sim.process import EPOCH_MS
from sim.scenarios.kafka import (
    CRASH_CHANCE,
    HEAL_BOUND_S,
    OFFSETS_PARTITIONS,
    POLL_WAIT_S,
    REQUEST_TIMEOUT_S,
    SETTLE_S,
    SETUP_BOUND_S,
    KafkaCluster,
    Routing,
)

TXN_TOPIC = "jepsen-txn"
TXN_PRODUCERS = 2
RC_CONSUMERS = 2
TXN_TIMEOUT_S = 5.0  # the producers' transaction.timeout.ms: a crashed lane's open one aborts
COMMIT_CHANCE = 0.7
MAX_TXN_PARTITIONS = 3
ADD_PARTITIONS_ATTEMPTS = 50  # CONCURRENT_TRANSACTIONS retries, as Kafka's producer's
# Which lanes speak transaction version 2 (KIP-890 part 2: no AddPartitionsToTxn or
# AddOffsetsToTxn, Produce v12 and TxnOffsetCommit v5 add on the server, an epoch bump per
# EndTxn v5), as Kafka's 4.x Java producer does on a TV2 cluster; the others speak TV1, as
# librdkafka, aiokafka and kafka-python do on the same cluster. The worker speaks TV2.
TV2_LANES = frozenset({0})
ADD_PARTITIONS_BACKOFF_S = 0.02  # retry.backoff.ms for it (Kafka: 20 ms)
# The errors a Kafka producer raises as ProducerFencedException (fatal): the application
# must close the producer and start a new instance.
FENCING_ERRORS = frozenset({"PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})
# How long answered final reads may find a partition's last stable offset unchanged below
# its high watermark before it is judged stuck (lso-stuck): the lanes have stopped, so the
# coordinator aborts any transaction it knows within the producers' timeout and one abort
# interval (BROKER_PROPS); twice that is the bound.
HANG_BOUND_S = 2 * (TXN_TIMEOUT_S + 1.0)
# The brokers' transaction settings under --transactions: a small __transaction_state, and
# timed-out transactions aborted within a second (Kafka checks every 10 s), so the final
# reads are not held at the LSO by a crashed lane's transaction for long.
BROKER_PROPS = {
    "transaction.state.log.num.partitions": "3",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


# --faults all,delay-txn (opt-in, so every other run keeps its schedule): Jepsen's schedule
# against Bufstream. The coordinator of a transactional id gets 0.2-1.5 s of extra latency,
# with as much jitter again, on its links to the other brokers (WriteTxnMarkers) and to and
# from the clients (EndTxn and its answer) for the fault's hold. A connection still
# delivers in order, but the links' delays differ, so markers, EndTxn answers and the next
# transaction's requests reorder across connections: a marker can reach its partition
# after the producer was told the outcome and had begun its next transaction there.
TXN_FAULTS = ("delay-txn",)
STATE_PARTITIONS = int(BROKER_PROPS["transaction.state.log.num.partitions"])

# The consume-transform-produce worker: its input (a partition the producer lanes write),
# its output topic (one partition: the output's order is the order it committed in), and
# the group whose offsets its transactions commit.
CTP_TOPIC = "jepsen-ctp"
CTP_GROUP = "jepsen-ctp-group"
CTP_TXN_ID = "txn-ctp"
CTP_INPUT = 0
CTP_MAX_RECORDS = 3  # input records per transaction, at most
CTP_COMMIT_CHANCE = 0.8
CTP_KEYS = CtpKeys(
    f"{TXN_TOPIC}-{CTP_INPUT}",
    f"{CTP_TOPIC}-0",
    f"{OFFSETS_TOPIC}-{partition_for(CTP_GROUP, OFFSETS_PARTITIONS)}",
)


def broker_props(rf: int) -> dict[str, str]:
    """The brokers' extra properties for --transactions (``rf`` the topic's)."""
    return {
        **BROKER_PROPS,
        "transaction.state.log.replication.factor": str(rf),
        "transaction.state.log.min.isr": str(min(2, rf)),
    }


@dataclass(slots=True)
class TxnRouting(Routing):
    """A client's view of where the transactional topic's partitions lead."""

    topic: ClassVar[str] = TXN_TOPIC

    async def refresh(self, rng: random.Random) -> None:
        host = rng.choice(self.cluster.brokers)
        try:
            conn = await self.conn(host)
            error, found, _ = await kafka_client.partitions(conn, self.topic, REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError):
            await self.drop(host)
            return
        if error == "NONE":
            self.leaders = found


@dataclass(slots=True)
class OutputRouting(TxnRouting):
    """A client's view of where the worker's output topic leads."""

    topic: ClassVar[str] = CTP_TOPIC


@dataclass(slots=True)
class Producer:
    """A transactional producer's session: its coordinator, id and epoch, sequences."""

    routing: TxnRouting
    transactional_id: str
    coordinator: str | None = None
    producer: tuple[int, int] = (-1, -1)
    previous: tuple[int, int] = (-1, -1)  # what to bump at the next InitProducerId
    sequences: dict[int, int] = field(default_factory=dict)
    fenced: str | None = None  # the answer that fenced it (another instance took over)
    tv2: bool = False  # transaction version 2 (TV2_LANES)

    def note(self, error: str) -> str:
        """``error`` (passed through), remembering whether it fenced this instance: no
        epoch bump of its own gets it back (InitProducerId with its id and epoch answers
        PRODUCER_FENCED again, for good), only a new producer."""
        if error in FENCING_ERRORS and self.fenced is None:
            self.fenced = error
        return error

    def reset(self) -> None:
        """An error: initialise again, bumping the epoch (KIP-360), from a fresh lookup."""
        if self.producer[0] >= 0:
            self.previous = self.producer
        self.producer = (-1, -1)
        self.coordinator = None


@dataclass(slots=True)
class GroupSession:
    """A client of the worker's group coordinator (OffsetFetch, TxnOffsetCommit)."""

    routing: TxnRouting
    coordinator: str | None = None


@dataclass(slots=True)
class TxnLanes:
    """The transactional lanes of one run and their checker."""

    cluster: KafkaCluster
    checker: TxnChecker
    txns: int = 0
    ops: int = 0
    ctp_commits: int = 0  # the worker's acknowledged commits
    ctp_restarts: int = 0
    fenced: int = 0  # producer instances (lanes' and the worker's) closed after a fence

    def lanes(self, runtime: Runtime) -> list[asyncio.Future[None]]:
        """The transactional producer, read_committed consumer and worker lanes, started."""
        return [
            *(asyncio.ensure_future(self.producer(runtime, i)) for i in range(TXN_PRODUCERS)),
            *(asyncio.ensure_future(self.consumer(runtime, i)) for i in range(RC_CONSUMERS)),
            asyncio.ensure_future(self.worker()),
        ]

    def figures(self) -> dict[str, int]:
        """The summary line's additions: acknowledged commits and aborts, read_committed
        polls, and losses a power cut excused."""
        checker = self.checker
        return {
            "txn_commits": checker.commits_ok,
            "txn_aborts": checker.aborts_ok,
            "rc_polls": checker.rc_polls_ok,
            "ctp_commits": self.ctp_commits,
            "ctp_restarts": self.ctp_restarts,
            "txn_fenced": self.fenced,
            "txn_excused": checker.excused,
        }

    # ---- history ---------------------------------------------------------------------------
    def _trace(
        self, process: str, kind: str, f: str, key: str, value: int | None, **extra: Any
    ) -> None:
        self.cluster.world.trace.event(
            "op", process=process, type=kind, f=f, key=key, value=value, **extra
        )

    def complete(self, op: TxnOp, error: str | None = None) -> None:
        fields: dict[str, object] = {"error": error}
        if op.offset is not None:
            fields["offset"] = op.offset
        if op.f == RC_POLL and op.status == "ok":
            fields["values"] = [n for pair in op.records for n in pair]
            fields["reached"] = op.reached
        if op.txn:
            fields["txn"] = op.txn
        if op.source is not None:
            fields["source"] = list(op.source)
        if op.isr:
            fields["isr"] = list(op.isr)
        self._trace(op.process, op.status, op.f, op.key, op.value, **fields)
        self.feed(op)

    def feed(self, op: TxnOp) -> None:
        checker = self.cluster.checker
        before = len(self.checker.violations)
        self.checker.add(op)
        if len(self.checker.violations) > before:
            checker.fail(self.checker.violations[before].message)

    def leader_isr(self, host: str, partition: int, topic: str = TXN_TOPIC) -> tuple[int, ...]:
        node = self.cluster.nodes.get(host)
        replicas = node.replicas if node is not None else None
        state = replicas._partitions.get((topic, partition)) if replicas is not None else None
        return tuple(state.maximal_isr) if state is not None else ()

    # ---- setup -----------------------------------------------------------------------------
    async def setup(self, rng: random.Random) -> bool:
        """Create the transactional topic with its min ISR, and wait for its leaders."""
        cluster = self.cluster
        loop = cluster.world.loop
        deadline = loop.time() + SETUP_BOUND_S
        rf = int(cluster.extra_props["default.replication.factor"])
        routing = TxnRouting(cluster, "txn-setup")
        steps = [
            lambda c: admin.create_topic(c, TXN_TOPIC, cluster.partitions, rf, REQUEST_TIMEOUT_S),
            lambda c: admin.alter_topic_config(
                c, TXN_TOPIC, "min.insync.replicas", str(min(2, rf)), REQUEST_TIMEOUT_S
            ),
            lambda c: admin.create_topic(c, CTP_TOPIC, 1, rf, REQUEST_TIMEOUT_S),
            lambda c: admin.alter_topic_config(
                c, CTP_TOPIC, "min.insync.replicas", str(min(2, rf)), REQUEST_TIMEOUT_S
            ),
        ]
        output = OutputRouting(cluster, "txn-setup")
        try:
            await cluster.admin_steps(routing, rng, steps, deadline)
            while loop.time() < deadline:
                await routing.refresh(rng)
                await output.refresh(rng)
                if (
                    len(routing.leaders) == cluster.partitions
                    and all(info.leader != NO_LEADER for info in routing.leaders.values())
                    and output.leaders.get(0, None) is not None
                    and output.leaders[0].leader != NO_LEADER
                ):
                    return True
                await asyncio.sleep(0.2)
            return False
        finally:
            await routing.close()
            await output.close()

    # ---- transactional producers -----------------------------------------------------------
    async def producer(self, runtime: Runtime, lane: int) -> None:
        rng = runtime.rng
        generation = 0
        while True:
            process = f"tp{lane}.{generation}"
            session = Producer(
                TxnRouting(self.cluster, process), f"txn-{lane}", tv2=lane in TV2_LANES
            )
            while session.fenced is None and rng.random() >= CRASH_CHANCE:
                await asyncio.sleep(rng.uniform(0.005, 0.05))
                if session.producer[0] < 0:
                    if not await self._init(session, rng) and session.fenced is None:
                        await asyncio.sleep(0.1)
                    continue
                await self.transaction(session, rng, process)
            self.closed_fenced(session, process)
            await session.routing.close()
            generation += 1

    def closed_fenced(self, session: Producer, process: str) -> None:
        """A producer instance closed: if a fence was why, count and trace it (its lane
        goes on as the next process, a new instance of the same transactional id)."""
        if session.fenced is not None:
            self.fenced += 1
            self.cluster.world.trace.event("txn-fenced", process=process, error=session.fenced)

    async def _coordinator_call(self, session: Producer, call: Any) -> str:
        """One request to the transaction coordinator: its error, or the failure's name."""
        host = session.coordinator
        if host is None:
            return "COORDINATOR_NOT_AVAILABLE"
        try:
            result: str = await call(await session.routing.conn(host))
        except (OSError, TimeoutError, ConnectionError) as failure:
            await session.routing.drop(host)
            return type(failure).__name__
        return session.note(result)

    async def _init(self, session: Producer, rng: random.Random) -> bool:
        """Find the coordinator and take a producer id and epoch (fencing the last one)."""
        self.ops += 1
        routing, tid = session.routing, session.transactional_id
        if session.coordinator is None:
            host = rng.choice(self.cluster.brokers)
            try:
                conn = await routing.conn(host)
                error, node = await kafka_txn_client.find_txn_coordinator(
                    conn, tid, REQUEST_TIMEOUT_S
                )
            except (OSError, TimeoutError, ConnectionError):
                await routing.drop(host)
                return False
            if error != "NONE":
                return False
            session.coordinator = f"n{node}"
        answer: list[tuple[int, int]] = []

        async def init(conn: KafkaConnection) -> str:
            error, pid, epoch = await kafka_txn_client.init_txn_producer_id(
                conn, tid, TXN_TIMEOUT_S, session.previous, REQUEST_TIMEOUT_S
            )
            answer.append((pid, epoch))
            return error

        error = await self._coordinator_call(session, init)
        if error != "NONE":
            if error != "CONCURRENT_TRANSACTIONS":
                session.coordinator = None
            return False
        session.producer = session.previous = answer[0]
        session.sequences = {}
        return True

    async def transaction(self, session: Producer, rng: random.Random, process: str) -> None:
        """One transaction: add 1-3 partitions (TV2: by sending), send one value to each,
        commit or abort."""
        cluster = self.cluster
        name = f"{process}/{self.txns}"
        self.txns += 1
        partitions = sorted(
            rng.sample(
                range(cluster.partitions),
                rng.randint(1, min(MAX_TXN_PARTITIONS, cluster.partitions)),
            )
        )
        if not session.tv2 and await self._add_partitions(session, TXN_TOPIC, partitions) != "NONE":
            session.reset()  # what was added, if anything, the next InitProducerId aborts
            return
        sent_all = True
        for partition in partitions:
            if not await self.send(session, rng, process, name, partition):
                sent_all = False
                break
        if session.fenced is not None:
            return  # a fenced producer ends nothing: the new instance's init aborts it
        commit = sent_all and rng.random() < COMMIT_CHANCE
        await self.end(session, process, name, commit)
        if not sent_all:
            session.reset()  # a send of unknown outcome leaves its sequence unknown

    async def _add_partitions(self, session: Producer, topic: str, partitions: list[int]) -> str:
        """AddPartitionsToTxn, retried while the last transaction's markers are written."""
        tid, producer = session.transactional_id, session.producer
        error = "NONE"
        for _attempt in range(ADD_PARTITIONS_ATTEMPTS):
            self.ops += 1
            error = await self._coordinator_call(
                session,
                lambda c: kafka_txn_client.add_partitions(
                    c, tid, producer, topic, partitions, REQUEST_TIMEOUT_S
                ),
            )
            if error != "CONCURRENT_TRANSACTIONS":
                break
            # The last transaction's markers are still being written: Kafka's producer
            # retries after a short backoff, with the same epoch (TV1).
            await asyncio.sleep(ADD_PARTITIONS_BACKOFF_S)
        return error

    async def send(
        self,
        session: Producer,
        rng: random.Random,
        process: str,
        name: str,
        partition: int,
        *,
        topic: str = TXN_TOPIC,
        source: tuple[int, int] | None = None,
    ) -> bool:
        """One transactional send of a fresh value (a worker's names the input record
        ``source`` it was made from): whether it was acknowledged."""
        cluster = self.cluster
        key = f"{topic}-{partition}"
        value, cluster.next_value = cluster.next_value, cluster.next_value + 1
        self._trace(process, "invoke", TXN_SEND, key, value, txn=name)
        invoked = self.now_us()
        self.ops += 1
        sequence = session.sequences.get(partition, 0)
        where = await session.routing.leader(partition, rng)
        status, error, offset = "fail", "LEADER_NOT_AVAILABLE", None
        if where is not None:
            host = where[0]
            stamp = EPOCH_MS + int(cluster.world.loop.time() * 1000)
            try:
                conn = await session.routing.conn(host)
                for _attempt in range(ADD_PARTITIONS_ATTEMPTS if session.tv2 else 1):
                    error, at = await kafka_txn_client.produce_txn(
                        conn,
                        session.transactional_id,
                        topic,
                        partition,
                        (key, value, stamp),
                        session.producer,
                        sequence,
                        REQUEST_TIMEOUT_S,
                        tv2=session.tv2,
                    )
                    if error != "NOT_ENOUGH_REPLICAS":
                        break
                    # TV2: the leader's add was refused as retriable (the last transaction's
                    # markers are still being written, CONCURRENT_TRANSACTIONS at the
                    # coordinator, which Produce answers NOT_ENOUGH_REPLICAS, unwritten):
                    # the Java producer retries the batch, same sequence.
                    self.ops += 1
                    await asyncio.sleep(ADD_PARTITIONS_BACKOFF_S)
            except (OSError, TimeoutError, ConnectionError) as failure:
                error, status = type(failure).__name__, "info"
                await session.routing.drop(host)
            else:
                if error == "NONE":
                    session.sequences[partition] = sequence + 1
                    status, offset = "ok", at
                else:
                    status = "info"
                    session.note(error)
                    session.routing.leaders.pop(partition, None)
        isr = self.leader_isr(where[0], partition, topic) if status == "ok" and where else ()
        op = TxnOp(
            process,
            TXN_SEND,
            key,
            status,
            value,
            offset,
            txn=name,
            time_us=self.now_us(),
            isr=isr,
            invoke_us=invoked,
            source=source,
        )
        self.complete(op, None if status == "ok" else error)
        return status == "ok"

    async def end(self, session: Producer, process: str, name: str, commit: bool) -> bool:
        """EndTxn: traced at its invocation (a read before a commit was asked for is an
        intermediate read) and its completion; any error makes the lane initialise again.
        Whether the coordinator acknowledged it."""
        self.ops += 1
        self._trace(process, "invoke", TXN_END, name, int(commit))
        self.feed(TxnOp(process, TXN_END, name, "invoke", int(commit), time_us=self.now_us()))
        tid, producer = session.transactional_id, session.producer
        after: list[tuple[int, int]] = []

        async def end(conn: KafkaConnection) -> str:
            error, next_producer = await kafka_txn_client.end_txn(
                conn, tid, producer, commit, REQUEST_TIMEOUT_S, tv2=session.tv2
            )
            after.append(next_producer)
            return error

        error = await self._coordinator_call(session, end)
        status = "ok" if error == "NONE" else "info"
        if status == "ok" and after[0] != producer:
            # TV2: EndTxn bumped the epoch (or, at the last one, moved to a new producer id);
            # the next transaction's batches start again at sequence 0.
            session.producer = session.previous = after[0]
            session.sequences = {}
        self.complete(
            TxnOp(process, TXN_END, name, status, int(commit), time_us=self.now_us()),
            None if status == "ok" else error,
        )
        if status != "ok":
            session.reset()
        return status == "ok"

    def now_us(self) -> int:
        return self.cluster.world.trace.now_us()

    # ---- the consume-transform-produce worker ----------------------------------------------
    async def worker(self) -> None:
        """The worker: one process after another (a new one after an abort, an error or a
        crash), each starting from the group's committed offset. Its own Random, drawn
        from the seed, leaves the other lanes' draws as they were."""
        rng = random.Random(f"ctp-{self.cluster.config.seed}")
        generation = 0
        while True:
            process = f"ctp{generation}"
            session = Producer(OutputRouting(self.cluster, process), CTP_TXN_ID, tv2=True)
            group = GroupSession(TxnRouting(self.cluster, process))
            position: int | None = None  # where the next fetch reads from
            buffered: list[tuple[int, int]] = []  # fetched, not yet in a transaction
            try:
                while rng.random() >= CRASH_CHANCE:
                    await asyncio.sleep(rng.uniform(0.005, 0.05))
                    if session.producer[0] < 0:
                        if not await self._init(session, rng):
                            await asyncio.sleep(0.1)
                        continue
                    if position is None:
                        position = await self.committed_position(group, rng, process)
                        if position is None:
                            await asyncio.sleep(0.1)
                        continue
                    position = await self.ctp_transaction(
                        session, group, rng, process, position, buffered
                    )
                    if position is None:
                        break  # aborted or failed: start again from the committed offset
            finally:
                await session.routing.close()
                await group.routing.close()
            self.closed_fenced(session, process)
            generation += 1
            self.ctp_restarts += 1

    async def _group_call(self, group: GroupSession, rng: random.Random, call: Any) -> str:
        """One request to the worker group's coordinator (found first if unknown)."""
        routing = group.routing
        if group.coordinator is None:
            host = rng.choice(self.cluster.brokers)
            try:
                error, node = await kafka_client.find_coordinator(
                    await routing.conn(host), CTP_GROUP, REQUEST_TIMEOUT_S
                )
            except (OSError, TimeoutError, ConnectionError) as failure:
                await routing.drop(host)
                return type(failure).__name__
            if error != "NONE":
                return error
            group.coordinator = f"n{node}"
        host = group.coordinator
        try:
            result: str = await call(await routing.conn(host))
        except (OSError, TimeoutError, ConnectionError) as failure:
            await routing.drop(host)
            group.coordinator = None
            return type(failure).__name__
        if result in ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"):
            group.coordinator = None
        return result

    async def committed_position(
        self, group: GroupSession, rng: random.Random, process: str
    ) -> int | None:
        """The group's committed offset of the input partition, once no transaction holds
        it (OffsetFetch with require_stable): 0 if none; None on an error."""
        key = CTP_KEYS.input
        self._trace(process, "invoke", CTP_POSITION, key, None)
        invoked = self.now_us()
        self.ops += 1
        found: list[int] = []

        async def fetch(conn: KafkaConnection) -> str:
            error, offset = await kafka_client.offset_fetch(
                conn, CTP_GROUP, TXN_TOPIC, CTP_INPUT, REQUEST_TIMEOUT_S, require_stable=True
            )
            found.append(offset)
            return error

        error = await self._group_call(group, rng, fetch)
        if error != "NONE":
            self._trace(process, "fail", CTP_POSITION, key, None, error=error)
            return None
        offset = max(found[0], 0)
        now = self.now_us()
        op = TxnOp(process, CTP_POSITION, key, "ok", offset=offset, time_us=now, invoke_us=invoked)
        self.complete(op)
        return offset

    async def ctp_transaction(
        self,
        session: Producer,
        group: GroupSession,
        rng: random.Random,
        process: str,
        position: int,
        buffered: list[tuple[int, int]],
    ) -> int | None:
        """With nothing ``buffered``, one poll of the input from ``position`` (its records
        buffered, as a consumer's fetch buffer holds them); else one transaction over the
        first 1-3 buffered records: an output record each, the input offset past the last
        one committed with TxnOffsetCommit, then EndTxn. The position to fetch from next,
        or None when the transaction did not commit (the worker starts again)."""
        if not buffered:
            result = await self.poll(group.routing, rng, process, CTP_INPUT, position)
            if result.error != "NONE":
                return None if result.error == "OFFSET_OUT_OF_RANGE" else position
            buffered.extend(result.records)
            return max(position, result.next_offset)
        taken = buffered[: rng.randint(1, CTP_MAX_RECORDS)]
        name = f"{process}/{self.txns}"
        self.txns += 1
        if not session.tv2 and await self._add_partitions(session, CTP_TOPIC, [0]) != "NONE":
            session.reset()
            return None
        committed = taken[-1][0] + 1
        ok = True
        for source in taken:
            if not await self.send(session, rng, process, name, 0, topic=CTP_TOPIC, source=source):
                ok = False
                break
        if ok:
            ok = await self.commit_offsets(session, group, rng, process, name, committed)
        if session.fenced is not None:
            return None  # ends nothing: the next process's init aborts it
        commit = ok and rng.random() < CTP_COMMIT_CHANCE
        if not await self.end(session, process, name, commit) or not commit:
            return None
        self.ctp_commits += 1
        del buffered[: len(taken)]
        return position

    async def commit_offsets(
        self,
        session: Producer,
        group: GroupSession,
        rng: random.Random,
        process: str,
        name: str,
        offset: int,
    ) -> bool:
        """AddOffsetsToTxn (not under TV2, where TxnOffsetCommit v5 adds), then
        TxnOffsetCommit of ``offset`` (traced): whether both were acknowledged."""
        tid, producer = session.transactional_id, session.producer
        if not session.tv2:
            self.ops += 1
            error = await self._coordinator_call(
                session,
                lambda c: kafka_txn_client.add_offsets(
                    c, tid, producer, CTP_GROUP, REQUEST_TIMEOUT_S
                ),
            )
            if error != "NONE":
                return False
        key = CTP_KEYS.offsets
        self._trace(process, "invoke", CTP_OFFSETS, key, offset, txn=name)
        self.ops += 1
        error = await self._group_call(
            group,
            rng,
            lambda c: kafka_txn_client.txn_offset_commit(
                c,
                tid,
                producer,
                CTP_GROUP,
                TXN_TOPIC,
                {CTP_INPUT: offset},
                REQUEST_TIMEOUT_S,
                tv2=session.tv2,
            ),
        )
        status = "ok" if session.note(error) == "NONE" else "info"
        op = TxnOp(process, CTP_OFFSETS, key, status, offset, txn=name, time_us=self.now_us())
        self.complete(op, None if status == "ok" else error)
        return status == "ok"

    # ---- read_committed consumers ----------------------------------------------------------
    async def consumer(self, runtime: Runtime, lane: int) -> None:
        rng = runtime.rng
        generation = 0
        while True:
            process = f"rc{lane}.{generation}"
            routing = TxnRouting(self.cluster, process)
            positions = dict.fromkeys(range(self.cluster.partitions), 0)
            turn = 0
            while rng.random() >= CRASH_CHANCE:
                await asyncio.sleep(rng.uniform(0.005, 0.05))
                partition = turn % self.cluster.partitions
                turn += 1
                result = await self.poll(routing, rng, process, partition, positions[partition])
                if result.error == "OFFSET_OUT_OF_RANGE":
                    break  # the log lost what this consumer read: start over, a new process
                if result.error == "NONE":
                    positions[partition] = result.next_offset
            await routing.close()
            generation += 1

    async def poll(
        self,
        routing: TxnRouting,
        rng: random.Random,
        process: str,
        partition: int,
        position: int,
        *,
        wait_s: float = POLL_WAIT_S,
    ) -> kafka_txn_client.CommittedFetch:
        """One read_committed poll of one partition (of the routing's topic) from
        ``position``."""
        key = f"{routing.topic}-{partition}"
        self._trace(process, "invoke", RC_POLL, key, position)
        invoked = self.now_us()
        self.ops += 1
        where = await routing.leader(partition, rng)
        if where is None:
            result = kafka_txn_client.CommittedFetch("LEADER_NOT_AVAILABLE")
        else:
            host, epoch = where
            try:
                conn = await routing.conn(host)
                result = await kafka_txn_client.fetch_committed(
                    conn,
                    routing.topic,
                    partition,
                    position,
                    epoch,
                    wait_s,
                    REQUEST_TIMEOUT_S + wait_s,
                )
            except (OSError, TimeoutError, ConnectionError) as failure:
                result = kafka_txn_client.CommittedFetch(type(failure).__name__)
                await routing.drop(host)
            if result.error not in ("NONE", "OFFSET_OUT_OF_RANGE"):
                routing.leaders.pop(partition, None)
        if result.error != "NONE":
            self._trace(process, "fail", RC_POLL, key, position, error=result.error)
            return result
        op = TxnOp(
            process,
            RC_POLL,
            key,
            "ok",
            position,
            result.last_stable_offset,
            result.records,
            time_us=self.now_us(),
            reached=result.next_offset,
            invoke_us=invoked,
        )
        self.complete(op)
        return result

    async def final_reads(self, rng: random.Random) -> None:
        """The worker's committed offset (once stable), then the worker's output and every
        partition of ``jepsen-txn`` read read_committed from offset 0 up to its last stable
        offset, once that has settled (unchanged for ``SETTLE_S`` with nothing left below
        it)."""
        loop = self.cluster.world.loop
        deadline = loop.time() + HEAL_BOUND_S
        group = GroupSession(TxnRouting(self.cluster, FINAL_POSITION))
        try:
            while loop.time() < deadline:
                if await self.committed_position(group, rng, FINAL_POSITION) is not None:
                    break
                await asyncio.sleep(0.2)
        finally:
            await group.routing.close()
        routing = TxnRouting(self.cluster, "txn-final")
        output = OutputRouting(self.cluster, "txn-final")
        try:
            # The worker's output first: a transaction left hanging on a partition of the
            # input topic (its marker lost with a whole ISR's power) would hold these reads
            # there until the deadline, and the worker's checks need the output whole.
            for where, partition in [
                (output, 0),
                *((routing, p) for p in range(self.cluster.partitions)),
            ]:
                await self._read_to_lso(where, rng, partition, deadline)
        finally:
            await routing.close()
            await output.close()

    async def _read_to_lso(
        self, routing: TxnRouting, rng: random.Random, partition: int, deadline: float
    ) -> None:
        """One partition read from 0 to its settled last stable offset. A last stable offset
        that answered reads find unchanged below the high watermark for ``HANG_BOUND_S`` is
        traced (``lso-stuck``, judged by the checker) and the reads go on to the next
        partition."""
        loop = self.cluster.world.loop
        position, settled = 0, None
        stuck: tuple[int, float] | None = None  # (lso, since) while it holds below the hw
        while loop.time() < deadline:
            result = await self.poll(routing, rng, "txn-final", partition, position, wait_s=0)
            if result.error == "OFFSET_OUT_OF_RANGE" and result.log_start_offset > position:
                position = result.log_start_offset
                continue
            if result.error != "NONE":
                stuck = None  # only answered reads count towards the bound
                await asyncio.sleep(0.2)
                continue
            moved = result.next_offset > position
            position = result.next_offset
            lso = result.last_stable_offset
            if position < lso:
                settled = None
                if not moved:
                    await asyncio.sleep(0.05)
                continue
            if lso < result.high_watermark:  # an open transaction holds the LSO
                settled = None
                if stuck is None or stuck[0] != lso:
                    stuck = (lso, loop.time())
                elif loop.time() - stuck[1] >= HANG_BOUND_S:
                    key = f"{routing.topic}-{partition}"
                    hw = result.high_watermark
                    self._trace("txn-final", "invoke", LSO_STUCK, key, hw)
                    now = self.now_us()
                    self.complete(TxnOp("txn-final", LSO_STUCK, key, "ok", hw, lso, time_us=now))
                    return
                await asyncio.sleep(0.25)
                continue
            stuck = None
            if settled is not None and settled[0] == lso:
                if loop.time() - settled[1] >= SETTLE_S:
                    break
            else:
                settled = (lso, loop.time())
            await asyncio.sleep(0.25)


def txn_faults(cluster: KafkaCluster) -> dict[str, Any]:
    """The nemesis's transactional faults (``delay-txn``), for ``Nemesis(custom=...)``."""

    def coordinator(nemesis: Nemesis) -> str | None:
        """The broker leading a random transactional id's __transaction_state partition
        (as the active controller's image says), else a random broker."""
        active = cluster.active_controller()
        node = cluster.nodes.get(active) if active is not None else None
        topic = node.loader.image.topics.get(STATE_TOPIC) if node and node.loader else None
        lane = nemesis.rng.randrange(TXN_PRODUCERS)
        state = (
            topic.partitions.get(partition_for(f"txn-{lane}", STATE_PARTITIONS)) if topic else None
        )
        if state is None or state.leader == NO_LEADER:
            return nemesis.rng.choice(cluster.brokers)
        return f"n{state.leader}"

    def delay_txn(nemesis: Nemesis, hold_s: float) -> None:
        host = coordinator(nemesis)
        if host is None:
            return
        net = nemesis.world.network
        extra = nemesis.rng.uniform(0.2, 1.5)
        peers = [b for b in cluster.brokers if b != host] + ["client"]
        links = [(host, p) for p in peers] + [("client", host)]
        for src, dst in links:
            net.slow(src, dst, extra, extra)
        nemesis.world.trace.event("delay-txn", node=host, extra_us=int(extra * 1e6))

        def end() -> None:
            for src, dst in links:
                net.unslow(src, dst)

        nemesis.world.loop.call_later(hold_s, end)

    return {"delay-txn": delay_txn}


def attach(cluster: KafkaCluster) -> TxnLanes:
    """The transactional lanes for ``cluster``, whose power cuts excuse their losses too."""
    cluster.extra_topics = (TXN_TOPIC, CTP_TOPIC)
    return TxnLanes(cluster, TxnChecker(cuts=cluster.cuts, ctp=CTP_KEYS))
