"""``--aiokafka``: an unmodified aiokafka producer and group consumers as lanes of the kafka
scenario.

The scenario's own client (sim/kafka_client.py) sends the requests the workload chooses; these
lanes run a real client's own logic instead: its metadata refreshes, retries and backoffs,
batching, idempotent sequences, its group membership (join, sync, heartbeats, the
round-robin assignor), fetch positions and commits. It connects over the simulated network
(SimLoop serves ``create_connection``), and ``sim/foreign.py`` gives it virtual time and a
seeded ``random`` for the run, so the same seed gives the same digest.

Operations go into the same history as the other lanes' and are judged by the same checks
(sim/analysis/kafka.py):

- ``ap<lane>.<generation>`` sends one unique value at a time to a random partition and
  records the acknowledged offset; any error is ``info`` (aiokafka retried what it could, so
  the write may have landed). It is idempotent with acks=all, Kafka's producer default:
  without idempotence its own retries write duplicates, which the ``duplicate`` check
  rightly flags (seed 1 did), so ``--aiokafka`` needs ``--acks all``.
- ``ag<lane>.<generation>.<loads>`` consumes through the group ``jepsen-aiokafka``
  (auto-commit off): after each assignment it fetches the committed offset of each of its
  partitions (``offset-fetch``), each batch ``getmany`` returns is a ``poll`` from the
  position it expected, and it commits the position after the batch (``commit``). A new
  assignment, or a position aiokafka reset itself (``auto_offset_reset``), starts a new
  process, as the scenario's own group lanes do.

The group hashes to the same ``__consumer_offsets`` partition as the scenario's own group,
so the checker's power-cut excuses for commits (``offsets_log``) hold for both. The
ISR an answer was given under is the ISR of the partition's current leader when the answer
arrives (aiokafka does not say which broker answered).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker.group.records import partition_for
from log.runtime import Runtime
from sim.analysis.kafka import OFFSET_FETCH, KafkaOp
from sim.process import EPOCH_MS
from sim.scenarios.kafka import (
    BROKER_PORT,
    CRASH_CHANCE,
    GROUP_CRASH_CHANCE,
    HEARTBEAT_S,
    OFFSETS_PARTITION,
    OFFSETS_PARTITIONS,
    POLL_WAIT_S,
    REBALANCE_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    SESSION_TIMEOUT_S,
    TOPIC,
    KafkaCluster,
    key_of,
)

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

GROUP = "jepsen-aiokafka"
# Same offsets partition as the scenario's own group: one offsets_log for the checker.
assert partition_for(GROUP, OFFSETS_PARTITIONS) == OFFSETS_PARTITION
PRODUCERS = 1
GROUP_CONSUMERS = 2
STOP_BOUND_S = 10.0  # a lane's close may wait on an unreachable broker: no longer than this
RESTART_PAUSE_S = 0.5  # a client that could not start tries again after this


def group_key_of(partition: int) -> str:
    return f"{GROUP}/{TOPIC}-{partition}"


@dataclass(slots=True)
class _Member:
    """One aiokafka group consumer's process names and the positions it expects."""

    lane: str
    loads: int = 0
    expected: dict[int, int] = field(default_factory=dict)
    assigned: bool = False  # a new assignment arrived: fetch committed offsets first

    @property
    def process(self) -> str:
        return f"{self.lane}.{self.loads}"

    def reassigned(self) -> None:
        self.loads += 1
        self.expected.clear()
        self.assigned = True


@dataclass(slots=True)
class AiokafkaLanes:
    cluster: KafkaCluster
    figures: dict[str, int] = field(
        default_factory=lambda: {"aiokafka_sends": 0, "aiokafka_polls": 0, "aiokafka_commits": 0}
    )
    # Every client the lanes made, kept to the end of the run: a connection aiokafka leaves
    # open (a stop cut short by STOP_BOUND_S) is then closed by no finalizer, whose timing
    # would follow the garbage collector and so move the digest.
    clients: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.cluster.acks == -1, "the CLI refuses --aiokafka with --acks 1"

    @property
    def bootstrap(self) -> list[str]:
        return [f"{host}:{BROKER_PORT}" for host in self.cluster.brokers]

    def lanes(self, runtime: Runtime) -> list[asyncio.Future[None]]:
        return [
            *(asyncio.ensure_future(self.producer(runtime, i)) for i in range(PRODUCERS)),
            *(
                asyncio.ensure_future(self.group_consumer(runtime, i))
                for i in range(GROUP_CONSUMERS)
            ),
        ]

    def current_isr(self, topic: str, partition: int) -> tuple[int, ...]:
        """The ISR of the partition's leader with the highest leader epoch now."""
        best: tuple[int, tuple[int, ...]] = (-1, ())
        for host in self.cluster.brokers:
            node = self.cluster.nodes.get(host)
            replicas = node.replicas if node is not None else None
            state = replicas._partitions.get((topic, partition)) if replicas is not None else None
            if state is not None and state.is_leader and state.leader_epoch > best[0]:
                best = (state.leader_epoch, tuple(state.maximal_isr))
        return best[1]

    async def _stop(self, client: AIOKafkaProducer | AIOKafkaConsumer) -> None:
        """Stop a lane's client (its crash, or the workload's end: a cancellation that
        arrives here still ends the lane)."""
        try:
            await asyncio.wait_for(client.stop(), STOP_BOUND_S)
        except (TimeoutError, OSError):
            pass
        except Exception as failure:  # aiokafka's KafkaError while closing: nothing to judge
            if not _is_kafka_error(failure):
                raise

    # ---- the producer ----------------------------------------------------------------------
    async def producer(self, runtime: Runtime, lane: int) -> None:
        from aiokafka import AIOKafkaProducer

        rng = runtime.rng
        generation = 0
        while True:
            process = f"ap{lane}.{generation}"
            generation += 1
            producer = AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id=process,
                acks="all",
                enable_idempotence=True,  # Kafka's producer default: its retries dedup
                request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000),
                metadata_max_age_ms=5000,
            )
            self.clients.append(producer)
            try:
                await producer.start()
                while rng.random() >= CRASH_CHANCE:
                    await asyncio.sleep(rng.uniform(0.005, 0.05))
                    await self.send(producer, process, rng)
            except Exception as failure:
                if not _is_kafka_error(failure):
                    raise
                await asyncio.sleep(RESTART_PAUSE_S)
            finally:
                await self._stop(producer)

    async def send(self, producer: AIOKafkaProducer, process: str, rng: random.Random) -> None:
        cluster = self.cluster
        loop = cluster.world.loop
        partition = rng.randrange(cluster.partitions)
        key = key_of(partition)
        value, cluster.next_value = cluster.next_value, cluster.next_value + 1
        cluster.invoke(process, "send", key, value)
        cluster.sends += 1
        try:
            sent = await producer.send(
                TOPIC,
                value=str(value).encode(),
                key=(f"{key}-{value}" if cluster.compact else key).encode(),
                partition=partition,
                timestamp_ms=EPOCH_MS + int(loop.time() * 1000),
            )
            metadata = await sent
        except Exception as failure:
            if not _is_kafka_error(failure):
                raise
            cluster.world.trace.event(
                "op",
                process=process,
                type="info",
                f="send",
                key=key,
                value=value,
                error=type(failure).__name__,
            )
            return
        self.figures["aiokafka_sends"] += 1
        cluster.complete(
            KafkaOp(
                process,
                "send",
                key,
                "ok",
                value,
                metadata.offset,
                complete_us=cluster.world.trace.now_us(),
                isr=self.current_isr(TOPIC, partition),
            )
        )

    # ---- the group consumer ----------------------------------------------------------------
    async def group_consumer(self, runtime: Runtime, lane: int) -> None:
        from aiokafka import AIOKafkaConsumer

        rng = runtime.rng
        generation = 0
        while True:
            member = _Member(f"ag{lane}.{generation}")
            generation += 1

            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id=member.lane,
                group_id=GROUP,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                session_timeout_ms=int(SESSION_TIMEOUT_S * 1000),
                rebalance_timeout_ms=int(REBALANCE_TIMEOUT_S * 1000),
                heartbeat_interval_ms=int(HEARTBEAT_S * 1000),
                request_timeout_ms=int((REQUEST_TIMEOUT_S + SESSION_TIMEOUT_S) * 1000),
                fetch_max_wait_ms=int(POLL_WAIT_S * 1000),
                metadata_max_age_ms=5000,
            )
            self.clients.append(consumer)
            consumer.subscribe([TOPIC], listener=_listener(member))
            try:
                await consumer.start()
                while rng.random() >= GROUP_CRASH_CHANCE:
                    await asyncio.sleep(rng.uniform(0.005, 0.05))
                    await self.group_step(consumer, member)
            except Exception as failure:
                if not _is_kafka_error(failure):
                    raise
                await asyncio.sleep(RESTART_PAUSE_S)
            finally:
                await self._stop(consumer)

    async def group_step(self, consumer: AIOKafkaConsumer, member: _Member) -> None:
        from aiokafka import TopicPartition

        if member.assigned:
            member.assigned = False
            for tp in sorted(consumer.assignment()):
                committed = await self.fetch_offset(consumer, member.process, tp)
                member.expected.setdefault(tp.partition, max(committed, 0))
            return
        batches = await consumer.getmany(timeout_ms=int(POLL_WAIT_S * 1000))
        for tp, records in sorted(batches.items()):
            if not records:
                continue
            first = records[0].offset
            position = member.expected.get(tp.partition, first)  # unknown: a new assignment
            if first < position:
                member.loads += 1  # aiokafka reset the position itself: a new process
                position = first
            self.poll(member.process, tp.partition, position, records)
            member.expected[tp.partition] = records[-1].offset + 1
            await self.commit(consumer, member, TopicPartition(TOPIC, tp.partition))

    def poll(self, process: str, partition: int, position: int, records: list[Any]) -> None:
        cluster = self.cluster
        key = key_of(partition)
        cluster.invoke(process, "poll", key, position)
        cluster.polls += 1
        self.figures["aiokafka_polls"] += 1
        cluster.complete(
            KafkaOp(
                process,
                "poll",
                key,
                "ok",
                position,
                None,
                tuple((r.offset, int(r.value)) for r in records if r.value is not None),
                cluster.world.trace.now_us(),
                self.current_isr(TOPIC, partition),
            )
        )

    def _coordinator(self, consumer: AIOKafkaConsumer, *, leading: bool) -> tuple[int, tuple]:
        """(epoch, ISR) of the offsets partition on the coordinator aiokafka talks to."""
        node_id = getattr(consumer._coordinator, "coordinator_id", None)
        if node_id is None:
            return -1, ()
        return self.cluster.coordinator_state(f"n{node_id}", leading=leading)

    async def fetch_offset(self, consumer: AIOKafkaConsumer, process: str, tp: Any) -> int:
        """One offset-fetch operation through aiokafka: the committed offset, -1 for none."""
        cluster = self.cluster
        key = group_key_of(tp.partition)
        invoked = cluster.world.trace.now_us()
        cluster.invoke(process, OFFSET_FETCH, key, None)
        cluster.group_ops += 1
        committed = await consumer.committed(tp)
        epoch, isr = self._coordinator(consumer, leading=True)
        got = -1 if committed is None else committed
        cluster.complete(
            KafkaOp(
                process,
                OFFSET_FETCH,
                key,
                "ok",
                None,
                got,
                complete_us=cluster.world.trace.now_us(),
                isr=isr,
                invoke_us=invoked,
                epoch=epoch,
            )
        )
        return got

    async def commit(self, consumer: AIOKafkaConsumer, member: _Member, tp: Any) -> None:
        """One commit operation through aiokafka: a rebalance's refusal is ``fail``, any
        other error ``info``."""
        from aiokafka.errors import CommitFailedError

        cluster = self.cluster
        key, process = group_key_of(tp.partition), member.process
        offset = member.expected[tp.partition]
        invoked = cluster.commit_begun(process, key, offset)
        cluster.group_ops += 1
        error: str | None = None
        status = "ok"
        try:
            await consumer.commit({tp: offset})
        except CommitFailedError:
            status, error = "fail", "CommitFailedError"
        except Exception as failure:
            if not _is_kafka_error(failure):
                raise
            status, error = "info", type(failure).__name__
        epoch, isr = self._coordinator(consumer, leading=False) if status == "ok" else (-1, ())
        self.figures["aiokafka_commits"] += status == "ok"
        cluster.commit_ended(process, key, offset, invoked, status, epoch, isr, error)


def _listener(member: _Member) -> Any:
    """Tells ``member`` of each new assignment (aiokafka's rebalance callback)."""
    from aiokafka import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        async def on_partitions_revoked(self, revoked: Any) -> None:
            pass

        async def on_partitions_assigned(self, assigned: Any) -> None:
            member.reassigned()

    return Listener()


def _is_kafka_error(failure: BaseException) -> bool:
    """aiokafka's errors, and the connection errors it lets through."""
    from aiokafka.errors import KafkaError

    return isinstance(failure, KafkaError | OSError | TimeoutError | ConnectionError)
