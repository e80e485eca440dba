"""The kafka scenario's transactional lanes with librdkafka (confluent-kafka), on the
simulator's transactional topic ``jepsen-txn`` (sim/scenarios/kafka_txn.py).

The history is the simulator's transactional one, so sim/analysis/txn.py judges it
unchanged (kraft-analyze replays it through sim/analysis/checks.py): ``txn-send`` (one
unique value to one partition, in a named transaction; its ``ok`` carries the offset),
``txn-end`` (value 1 to commit, 0 to abort; invoked before the client is asked, ``ok``
when it said the coordinator acknowledged that outcome) and ``rc-poll`` (a read_committed
poll of one partition from a position: the (offset, value) pairs the client returned, and
``reached``, the client's position after the poll: it saw every stable record below it).

- A transactional producer lane (processes ``tp<lane>.<generation>``, transactional id
  ``jepsen-txn-<lane>``) runs one transaction after another over 1-3 random partitions, one
  send at a time (each acknowledged before the next is invoked, so the checks know their
  order), then commits 70 % of the time and aborts otherwise; a send that fails aborts the
  transaction. Any error of the transaction itself (init, commit, abort) makes the lane
  start over as a new producer with the same transactional id: its ``init_transactions``
  fences the old epoch and ends what it left open, as an application restarting does.
- A read_committed consumer lane (processes ``rc<lane>.<generation>/<partition>``) assigns
  every partition from offset 0 and polls them all at once, as the plain consumers do.
- After the heal, process ``txn-final`` reads every partition read_committed from 0 to its
  last stable offset, once that has settled (a transaction a killed lane left open holds it
  until the coordinator aborts it at ``transaction.timeout.ms``).

The last stable offset of each answer is not recorded: neither librdkafka nor the Java
client tells the application which answer a record came from, so ``beyond-lso`` has nothing
to compare; a broker that serves records past it serves records of open or aborted
transactions, which ``intermediate-read`` and ``aborted-read`` flag.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from jepsen.workload import (
    POLL_MAX_RECORDS,
    Workload,
    deliver,
    failure_name,
    per_partition,
)
from sim.analysis.txn import RC_POLL, TXN_END, TXN_SEND
from sim.scenarios.kafka import (
    CRASH_CHANCE,
    HEAL_BOUND_S,
    POLL_WAIT_S,
    REQUEST_TIMEOUT_S,
    SEND_TIMEOUT_S,
    SETTLE_S,
)
from sim.scenarios.kafka_txn import COMMIT_CHANCE, MAX_TXN_PARTITIONS, RC_CONSUMERS, TXN_TOPIC

# A transaction's timeout: what holds read_committed readers behind a killed lane's open
# transaction. librdkafka refuses a message.timeout.ms above it, so it is the send timeout.
TXN_TIMEOUT_S = SEND_TIMEOUT_S
# init_transactions, commit and abort each wait this long for the coordinator: a fault's
# hold (up to 12 s) plus the coordinator's move to another broker.
END_TIMEOUT_S = 20.0


def txn_key(partition: int) -> str:
    """A partition of the transactional topic as the checks name it."""
    return f"{TXN_TOPIC}-{partition}"


def transactional_id(lane: int) -> str:
    return f"jepsen-txn-{lane}"


@dataclass(slots=True)
class TxnWorkload:
    """The transactional lanes of one run; values come from the plain workload's counter,
    so no value is ever sent twice in a run."""

    workload: Workload

    # ---- clients ------------------------------------------------------------------------------
    def producer(self, lane: int, process: str) -> Producer:
        return Producer(
            {
                **self.workload.producer_config(process),
                "transactional.id": transactional_id(lane),
                "transaction.timeout.ms": int(TXN_TIMEOUT_S * 1000),
            }
        )

    def consumer(self, process: str) -> Consumer:
        return Consumer(
            {**self.workload.consumer_config(process), "isolation.level": "read_committed"}
        )

    # ---- the transactional producer -----------------------------------------------------------
    def producer_lane(self, lane: int, seed: int) -> None:
        """Transactions until the workload stops, as ``tp<lane>.<generation>``."""
        rng = random.Random(seed)
        stop = self.workload.stop
        generation = 0
        while not stop.is_set():
            process = f"tp{lane}.{generation}"
            producer = self.producer(lane, process)
            try:
                producer.init_transactions(END_TIMEOUT_S)
            except KafkaException:
                stop.wait(0.5)  # no coordinator yet: a new producer, later
            else:
                count = 0
                while not stop.wait(rng.uniform(0.005, 0.05)):
                    if not self.transaction(producer, rng, process, f"{process}-{count}"):
                        break
                    count += 1
                    if rng.random() < CRASH_CHANCE:
                        break
            producer.purge()
            generation += 1

    def transaction(self, producer: Producer, rng: random.Random, process: str, name: str) -> bool:
        """One transaction: whether the lane may go on with this producer."""
        recorder = self.workload.recorder
        partitions = self.workload.partitions
        try:
            producer.begin_transaction()
        except KafkaException:
            return False
        chosen = rng.sample(range(partitions), rng.randint(1, min(MAX_TXN_PARTITIONS, partitions)))
        sent = all(self.send(producer, process, name, partition) for partition in chosen)
        commit = sent and rng.random() < COMMIT_CHANCE
        recorder.op(process, "invoke", TXN_END, name, int(commit))
        try:
            if commit:
                producer.commit_transaction(END_TIMEOUT_S)
            else:
                producer.abort_transaction(END_TIMEOUT_S)
        except KafkaException as failure:
            # A timeout or a retriable error leaves the outcome unknown; the next producer's
            # init_transactions settles it (commits a commit in progress, aborts the rest).
            recorder.op(process, "info", TXN_END, name, int(commit), error=failure_name(failure))
            return False
        recorder.op(process, "ok", TXN_END, name, int(commit), error=None)
        return True

    def send(self, producer: Producer, process: str, name: str, partition: int) -> bool:
        """One value to ``partition`` in transaction ``name``: whether it was acknowledged."""
        recorder = self.workload.recorder
        key, value = txn_key(partition), self.workload.next_value()
        recorder.op(process, "invoke", TXN_SEND, key, value, txn=name)
        done = deliver(producer, TXN_TOPIC, partition, value)
        recorder.op(process, done.status, TXN_SEND, key, value, txn=name, **done.fields())
        return done.status == "ok"

    # ---- the read_committed consumer ----------------------------------------------------------
    def consumer_lane(self, lane: int, seed: int) -> None:
        rng = random.Random(seed)
        stop = self.workload.stop
        generation = 0
        while not stop.is_set():
            process = f"rc{lane}.{generation}"
            consumer = self.consumer(process)
            positions = dict.fromkeys(range(self.workload.partitions), 0)
            consumer.assign([TopicPartition(TXN_TOPIC, p, 0) for p in positions])
            while not stop.wait(rng.uniform(0.005, 0.05)):
                polled = self.poll(consumer, per_partition(process, positions), positions)
                if not polled or rng.random() < CRASH_CHANCE:
                    break
            consumer.close()
            generation += 1

    def poll(
        self, consumer: Consumer, processes: dict[int, str], positions: dict[int, int]
    ) -> bool:
        """One read_committed poll of every partition in ``positions`` (one ``rc-poll`` each);
        False when one failed (the consumer starts over)."""
        self.invoke_polls(processes, positions)
        read: dict[int, list[int]] = {p: [] for p in positions}
        errors: dict[int, str] = {}
        for message in consumer.consume(POLL_MAX_RECORDS, POLL_WAIT_S):
            partition, error = message.partition(), message.error()
            if error is not None:
                if partition in positions:  # client-level errors carry none: librdkafka retries
                    errors[partition] = str(error.name())
                continue
            read[partition] += [message.offset(), int(message.value())]
        reached = {
            tp.partition: tp.offset
            for tp in consumer.position([TopicPartition(TXN_TOPIC, p) for p in positions])
        }
        return self.complete_polls(processes, positions, read, errors, reached)

    def invoke_polls(self, processes: dict[int, str], positions: dict[int, int]) -> None:
        for partition, position in positions.items():
            self.workload.recorder.op(
                processes[partition], "invoke", RC_POLL, txn_key(partition), position
            )

    def complete_polls(
        self,
        processes: dict[int, str],
        positions: dict[int, int],
        read: dict[int, list[int]],
        errors: dict[int, str],
        reached: dict[int, int],
    ) -> bool:
        """Complete one ``rc-poll`` per partition: the (offset, value) pairs read (flattened)
        and the client's position after them (``reached``: past the aborted records and
        markers it skipped too), or the partition's error; False when one failed."""
        for partition, position in positions.items():
            key, process = txn_key(partition), processes[partition]
            if partition in errors:
                self.workload.recorder.op(
                    process, "fail", RC_POLL, key, position, error=errors[partition]
                )
                continue
            values = read[partition]
            after = max(reached.get(partition, -1), values[-2] + 1 if values else position)
            self.workload.recorder.op(
                process, "ok", RC_POLL, key, position, values=values, reached=after, error=None
            )
            positions[partition] = after
        return not errors

    def final_reads(self) -> None:
        """Process ``txn-final``: every partition from 0 to a last stable offset that stays
        the same for ``SETTLE_S`` (read_committed ListOffsets answers the LSO as the end)."""
        deadline = time.monotonic() + HEAL_BOUND_S
        for partition in range(self.workload.partitions):
            consumer = self.consumer(f"txn-final-{partition}")
            consumer.assign([TopicPartition(TXN_TOPIC, partition, 0)])
            positions, settled = {partition: 0}, None
            try:
                while time.monotonic() < deadline:
                    try:
                        _low, end = consumer.get_watermark_offsets(
                            TopicPartition(TXN_TOPIC, partition), timeout=REQUEST_TIMEOUT_S
                        )
                    except KafkaException:
                        end = -1
                    if end >= 0 and positions[partition] >= end:
                        if settled == end:
                            break
                        settled = end
                        time.sleep(SETTLE_S)
                        continue
                    self.poll(consumer, {partition: "txn-final"}, positions)
            finally:
                consumer.close()


def consumer_lanes(txn_lanes: int) -> int:
    """read_committed consumer lanes beside ``txn_lanes`` transactional producers: the
    simulator's count."""
    return RC_CONSUMERS if txn_lanes else 0
