"""The kafka scenario's transactional lanes (``--transactions``).

Beside the plain workload (sim/scenarios/kafka.py), on a topic of their own (``jepsen-txn``,
the same partition count, replication factor and min ISR):

- transactional producer lanes (``tp<lane>``, transactional id ``txn-<lane>``): find the
  transaction coordinator, InitProducerId, then one transaction after another over 1-3
  random partitions: AddPartitionsToTxn, one unique value per partition (acks=all), EndTxn,
  committing 70% of the time and aborting otherwise; a send that fails aborts the
  transaction, and any error of the protocol makes the lane initialise again (which fences
  its previous epoch and aborts what it left open, as Kafka's producer does on an abortable
  error). A lane crashes (a new process, the same transactional id) as the plain lanes do;
- read_committed consumer lanes (``rc<lane>``) poll every partition in turn, dropping the
  records of aborted transactions as Kafka's consumer does (sim/kafka_txn_client.py);
- after the heal the final read_committed reads (process ``txn-final``) read every
  partition up to its settled last stable offset (an open transaction of a crashed lane
  holds it until the coordinator aborts it at its timeout).

Every operation is traced (``txn-send``, ``txn-end``, ``rc-poll``) and judged online by
sim/analysis/txn.py, the code kraft-analyze replays.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any

from broker.client import KafkaConnection
from broker.group.records import partition_for
from broker.txn.config import TXN_TOPIC as STATE_TOPIC
from log.runtime import Runtime
from metadata.records import NO_LEADER
from sim import admin, kafka_client, kafka_txn_client
from sim.analysis.txn import RC_POLL, TXN_END, TXN_SEND, TxnChecker, TxnOp
from sim.nemesis import Nemesis
from sim.process import EPOCH_MS
from sim.scenarios.kafka import (
    CRASH_CHANCE,
    HEAL_BOUND_S,
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
ADD_PARTITIONS_BACKOFF_S = 0.02  # retry.backoff.ms for it (Kafka: 20 ms)
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


def txn_key(partition: int) -> str:
    return f"{TXN_TOPIC}-{partition}"


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

    async def refresh(self, rng: random.Random) -> None:
        host = rng.choice(self.cluster.brokers)
        try:
            conn = await self.conn(host)
            error, found, _ = await kafka_client.partitions(conn, TXN_TOPIC, REQUEST_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError):
            await self.drop(host)
            return
        if error == "NONE":
            self.leaders = found


@dataclass(slots=True)
class Producer:
    """A transactional producer's session: its coordinator, id and epoch, sequences."""

    routing: TxnRouting
    transactional_id: str
    coordinator: str | None = None
    producer: tuple[int, int] = (-1, -1)
    previous: tuple[int, int] = (-1, -1)  # what to bump at the next InitProducerId
    sequences: dict[int, int] = field(default_factory=dict)

    def reset(self) -> None:
        """An error: initialise again, bumping the epoch (KIP-360), from a fresh lookup."""
        if self.producer[0] >= 0:
            self.previous = self.producer
        self.producer = (-1, -1)
        self.coordinator = None


@dataclass(slots=True)
class TxnLanes:
    """The transactional lanes of one run and their checker."""

    cluster: KafkaCluster
    checker: TxnChecker
    txns: int = 0
    ops: int = 0

    def lanes(self, runtime: Runtime) -> list[asyncio.Future[None]]:
        """The transactional producer and read_committed consumer lanes, started."""
        return [
            *(asyncio.ensure_future(self.producer(runtime, i)) for i in range(TXN_PRODUCERS)),
            *(asyncio.ensure_future(self.consumer(runtime, i)) for i in range(RC_CONSUMERS)),
        ]

    def figures(self) -> dict[str, int]:
        """The summary line's additions: acknowledged commits and aborts, read_committed
        polls, and losses a power cut excused."""
        checker = self.checker
        return {
            "txn_commits": checker.commits_ok,
            "txn_aborts": checker.aborts_ok,
            "rc_polls": checker.rc_polls_ok,
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

    def leader_isr(self, host: str, partition: int) -> tuple[int, ...]:
        node = self.cluster.nodes.get(host)
        replicas = node.replicas if node is not None else None
        state = replicas._partitions.get((TXN_TOPIC, partition)) if replicas is not None else None
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
        ]
        try:
            while steps and loop.time() < deadline:
                await asyncio.sleep(0.2)
                host = rng.choice(cluster.brokers)
                try:
                    error = await steps[0](await routing.conn(host))
                except (OSError, TimeoutError, ConnectionError):
                    await routing.drop(host)
                    continue
                if error in ("NONE", "TOPIC_ALREADY_EXISTS"):
                    steps.pop(0)
            while loop.time() < deadline:
                await routing.refresh(rng)
                if len(routing.leaders) == cluster.partitions and all(
                    info.leader != NO_LEADER for info in routing.leaders.values()
                ):
                    return True
                await asyncio.sleep(0.2)
            return False
        finally:
            await routing.close()

    # ---- transactional producers -----------------------------------------------------------
    async def producer(self, runtime: Runtime, lane: int) -> None:
        rng = runtime.rng
        generation = 0
        while True:
            process = f"tp{lane}.{generation}"
            session = Producer(TxnRouting(self.cluster, process), f"txn-{lane}")
            while rng.random() >= CRASH_CHANCE:
                await asyncio.sleep(rng.uniform(0.005, 0.05))
                if session.producer[0] < 0:
                    if not await self._init(session, rng):
                        await asyncio.sleep(0.1)
                    continue
                await self.transaction(session, rng, process)
            await session.routing.close()
            generation += 1

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
        return result

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
        """One transaction: add 1-3 partitions, send one value to each, commit or abort."""
        cluster = self.cluster
        tid, producer = session.transactional_id, session.producer
        name = f"{process}/{self.txns}"
        self.txns += 1
        partitions = sorted(
            rng.sample(
                range(cluster.partitions),
                rng.randint(1, min(MAX_TXN_PARTITIONS, cluster.partitions)),
            )
        )
        for _attempt in range(ADD_PARTITIONS_ATTEMPTS):
            self.ops += 1
            error = await self._coordinator_call(
                session,
                lambda c: kafka_txn_client.add_partitions(
                    c, tid, producer, TXN_TOPIC, partitions, REQUEST_TIMEOUT_S
                ),
            )
            if error != "CONCURRENT_TRANSACTIONS":
                break
            # The last transaction's markers are still being written: Kafka's producer
            # retries after a short backoff, with the same epoch (TV1).
            await asyncio.sleep(ADD_PARTITIONS_BACKOFF_S)
        if error != "NONE":
            session.reset()  # what was added, if anything, the next InitProducerId aborts
            return
        sent_all = True
        for partition in partitions:
            if not await self.send(session, rng, process, name, partition):
                sent_all = False
                break
        commit = sent_all and rng.random() < COMMIT_CHANCE
        await self.end(session, process, name, commit)
        if not sent_all:
            session.reset()  # a send of unknown outcome leaves its sequence unknown

    async def send(
        self, session: Producer, rng: random.Random, process: str, name: str, partition: int
    ) -> bool:
        """One transactional send of a fresh value: whether it was acknowledged."""
        cluster = self.cluster
        key = txn_key(partition)
        value, cluster.next_value = cluster.next_value, cluster.next_value + 1
        self._trace(process, "invoke", TXN_SEND, key, value, txn=name)
        self.ops += 1
        sequence = session.sequences.get(partition, 0)
        where = await session.routing.leader(partition, rng)
        status, error, offset = "fail", "LEADER_NOT_AVAILABLE", None
        if where is not None:
            host = where[0]
            stamp = EPOCH_MS + int(cluster.world.loop.time() * 1000)
            try:
                conn = await session.routing.conn(host)
                error, at = await kafka_txn_client.produce_txn(
                    conn,
                    session.transactional_id,
                    TXN_TOPIC,
                    partition,
                    (key, value, stamp),
                    session.producer,
                    sequence,
                    REQUEST_TIMEOUT_S,
                )
            except (OSError, TimeoutError, ConnectionError) as failure:
                error, status = type(failure).__name__, "info"
                await session.routing.drop(host)
            else:
                if error == "NONE":
                    session.sequences[partition] = sequence + 1
                    status, offset = "ok", at
                else:
                    status = "info"
                    session.routing.leaders.pop(partition, None)
        isr = self.leader_isr(where[0], partition) if status == "ok" and where else ()
        op = TxnOp(
            process, TXN_SEND, key, status, value, offset, txn=name, time_us=self.now_us(), isr=isr
        )
        self.complete(op, None if status == "ok" else error)
        return status == "ok"

    async def end(self, session: Producer, process: str, name: str, commit: bool) -> None:
        """EndTxn: traced at its invocation (a read before a commit was asked for is an
        intermediate read) and its completion; any error makes the lane initialise again."""
        self.ops += 1
        self._trace(process, "invoke", TXN_END, name, int(commit))
        self.feed(TxnOp(process, TXN_END, name, "invoke", int(commit), time_us=self.now_us()))
        tid, producer = session.transactional_id, session.producer
        error = await self._coordinator_call(
            session,
            lambda c: kafka_txn_client.end_txn(c, tid, producer, commit, REQUEST_TIMEOUT_S),
        )
        status = "ok" if error == "NONE" else "info"
        self.complete(
            TxnOp(process, TXN_END, name, status, int(commit), time_us=self.now_us()),
            None if status == "ok" else error,
        )
        if status != "ok":
            session.reset()

    def now_us(self) -> int:
        return self.cluster.world.trace.now_us()

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
        """One read_committed poll of one partition from ``position``."""
        key = txn_key(partition)
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
                    conn, TXN_TOPIC, partition, position, epoch, wait_s, REQUEST_TIMEOUT_S + wait_s
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
            invoked_us=invoked,
        )
        self.complete(op)
        return result

    async def final_reads(self, rng: random.Random) -> None:
        """Read every partition read_committed from offset 0 up to its last stable offset,
        once that has settled (unchanged for ``SETTLE_S`` with nothing left below it)."""
        loop = self.cluster.world.loop
        deadline = loop.time() + HEAL_BOUND_S
        routing = TxnRouting(self.cluster, "txn-final")
        try:
            for partition in range(self.cluster.partitions):
                position, settled = 0, None
                while loop.time() < deadline:
                    result = await self.poll(
                        routing, rng, "txn-final", partition, position, wait_s=0
                    )
                    if result.error == "OFFSET_OUT_OF_RANGE" and result.log_start_offset > position:
                        position = result.log_start_offset
                        continue
                    if result.error != "NONE":
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
                        await asyncio.sleep(0.25)
                        continue
                    if settled is not None and settled[0] == lso:
                        if loop.time() - settled[1] >= SETTLE_S:
                            break
                    else:
                        settled = (lso, loop.time())
                    await asyncio.sleep(0.25)
        finally:
            await routing.close()


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
    cluster.extra_topics = (TXN_TOPIC,)
    return TxnLanes(cluster, TxnChecker(cuts=cluster.cuts))
