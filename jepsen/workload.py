"""The kafka scenario's workload with real clients: confluent-kafka (librdkafka) and aiokafka
producers and consumers, in the harness's (root) namespace, reaching the brokers over the
bridge.

The operations are the simulator's (sim/scenarios/kafka.py), so sim/analysis/kafka.py
checks them unchanged: ``send`` of a unique integer value to one partition with acks=all
(its ``ok`` carries the acknowledged offset), and ``poll`` of one partition from a position
(its ``ok`` carries the (offset, value) pairs read and the high watermark the broker last
reported). Producers are idempotent: an idempotent resend is deduplicated by the broker,
so a value read twice is the broker's fault (the checks' ``duplicate``). A consumer polls
every partition at once, as one process per partition (each has at most one open
operation). A lane sometimes starts over as a new client and process (Jepsen's rule), a
consumer from 0.
After the nemesis stops: process ``heal`` sends one acks=all value to every partition, and
process ``final`` reads every partition from 0 up to its settled high watermark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import BrokerResponseError
from aiokafka.errors import KafkaError as KafkaErrorAio
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from jepsen.history import Recorder
from sim.scenarios.kafka import (
    CRASH_CHANCE,
    HEAL_BOUND_S,
    NOT_APPENDED,
    POLL_WAIT_S,
    REQUEST_TIMEOUT_S,
    SEND_TIMEOUT_S,
    SETTLE_S,
    TOPIC,
    key_of,
)

POLL_MAX_RECORDS = 200
# librdkafka reports a delivery within message.timeout.ms; past this margin it is lost.
REPORT_MARGIN_S = 5.0
# librdkafka logs every refused connect to stderr; during faults that is most of them.
LOG_LEVEL = 2


def failure_name(failure: KafkaException | BufferError) -> str:
    """The Kafka error a librdkafka call raised, else the exception's type."""
    error = failure.args[0] if failure.args else None
    return str(error.name()) if isinstance(error, KafkaError) else type(failure).__name__


@dataclass(frozen=True, slots=True)
class Delivery:
    """What became of one produced value: ``status`` as the history records it (ok, fail:
    surely not appended, info: unknown), the error's name, the offset when ok, and whether
    the error left the producer unusable (a fenced producer id, a sequence gap)."""

    status: str
    error: str | None = None
    offset: int | None = None
    fatal: bool = False

    def fields(self) -> dict[str, object]:
        """The completion's history fields: the offset only when there is one."""
        return {"error": self.error} | ({} if self.offset is None else {"offset": self.offset})


def deliver(producer: Producer, topic: str, partition: int, value: int) -> Delivery:
    """Produce ``value`` to ``partition`` and wait for its delivery report, up to the send
    timeout and the report margin (``info``, ``no-delivery-report``, when none came)."""
    reports: list[tuple[KafkaError | None, Message]] = []
    try:
        producer.produce(
            topic,
            str(value).encode(),
            partition=partition,
            on_delivery=lambda error, message: reports.append((error, message)),
        )
    except (BufferError, KafkaException) as failure:
        return Delivery("fail", failure_name(failure))
    deadline = time.monotonic() + SEND_TIMEOUT_S + REPORT_MARGIN_S
    while not reports and time.monotonic() < deadline:
        producer.poll(0.05)
    if not reports:
        return Delivery("info", "no-delivery-report")
    error, message = reports[0]
    if error is None:
        return Delivery("ok", offset=message.offset())
    name = str(error.name())
    return Delivery("fail" if name in NOT_APPENDED else "info", name, fatal=error.fatal())


def per_partition(process: str, positions: dict[int, int]) -> dict[int, str]:
    """A consumer's history processes: one per partition, each with one open operation."""
    return {partition: f"{process}/{partition}" for partition in positions}


@dataclass(slots=True)
class Workload:
    """The client lanes of one run and the values they send."""

    recorder: Recorder
    bootstrap: str
    partitions: int
    stop: threading.Event = field(default_factory=threading.Event)
    _values: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_value(self) -> int:
        with self._lock:
            value, self._values = self._values, self._values + 1
            return value

    def producer_config(self, process: str) -> dict[str, object]:
        """librdkafka settings of every lane's producer, plain or transactional."""
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": process,
            "log_level": LOG_LEVEL,
            "acks": "all",
            # With retries=0 a value still showed up twice once (its leader paused
            # mid-request, then replaced): only an idempotent producer's resend is
            # deduplicated by the broker, so only then is a copy surely the broker's.
            "enable.idempotence": True,
            "linger.ms": 0,
            "request.timeout.ms": int(REQUEST_TIMEOUT_S * 1000),
            "message.timeout.ms": int(SEND_TIMEOUT_S * 1000),
            "topic.metadata.refresh.interval.ms": 1000,
        }

    def consumer_config(self, process: str) -> dict[str, object]:
        """librdkafka settings of every lane's assign()ing consumer."""
        return {
            "bootstrap.servers": self.bootstrap,
            "client.id": process,
            "log_level": LOG_LEVEL,
            "group.id": f"jepsen-{process}",  # assign() only: never joins or commits
            "enable.auto.commit": False,
            "auto.offset.reset": "error",  # a position past the log end is an error
            "enable.partition.eof": False,
            "fetch.wait.max.ms": int(POLL_WAIT_S * 1000),
            "topic.metadata.refresh.interval.ms": 1000,
        }

    def producer(self, process: str) -> Producer:
        return Producer(
            {**self.producer_config(process), "max.in.flight.requests.per.connection": 1}
        )

    def consumer(self, process: str) -> Consumer:
        return Consumer(self.consumer_config(process))

    # ---- operations -------------------------------------------------------------------------
    def send(self, producer: Producer, process: str, partition: int) -> str | None:
        """One send: its status, None when librdkafka never reported on it or the error left
        the producer unusable (a fenced producer id, a sequence gap): the lane starts over."""
        key, value = key_of(partition), self.next_value()
        self.recorder.op(process, "invoke", "send", key, value)
        done = deliver(producer, TOPIC, partition, value)
        self.recorder.op(process, done.status, "send", key, value, **done.fields())
        return None if done.error == "no-delivery-report" or done.fatal else done.status

    def poll(
        self, consumer: Consumer, processes: dict[int, str], positions: dict[int, int]
    ) -> bool:
        """One poll of every partition in ``positions`` (one operation each, by the process
        ``processes`` names); False when a partition's position became invalid (the consumer
        must start over)."""
        self.invoke_polls(processes, positions)
        read: dict[int, list[int]] = {p: [] for p in positions}
        errors: dict[int, str] = {}
        for message in consumer.consume(POLL_MAX_RECORDS, POLL_WAIT_S):
            partition, error = message.partition(), message.error()
            if error is not None:
                # Client-level errors (a broker down) carry no partition: librdkafka retries.
                if partition in positions:
                    errors[partition] = str(error.name())
                continue
            read[partition] += [message.offset(), int(message.value())]

        def high_watermark(partition: int) -> int | None:
            high = consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), cached=True)
            return high[1] if high is not None and high[1] >= 0 else None

        return self.complete_polls(processes, positions, read, errors, high_watermark)

    def invoke_polls(self, processes: dict[int, str], positions: dict[int, int]) -> None:
        for partition, position in positions.items():
            self.recorder.op(processes[partition], "invoke", "poll", key_of(partition), position)

    def complete_polls(
        self,
        processes: dict[int, str],
        positions: dict[int, int],
        read: dict[int, list[int]],
        errors: dict[int, str],
        high_watermark: Callable[[int], int | None],
    ) -> bool:
        """Complete one poll per partition: the (offset, value) pairs read (flattened) and
        the high watermark the client last heard, or the partition's error."""
        for partition, position in positions.items():
            key, name = key_of(partition), processes[partition]
            if partition in errors:
                self.recorder.op(name, "fail", "poll", key, position, error=errors[partition])
                continue
            values = read[partition]
            hw = high_watermark(partition)
            self.recorder.op(
                name, "ok", "poll", key, position, values=values, offset=hw, error=None
            )
            if values:
                positions[partition] = values[-2] + 1
        return not errors

    async def _aio_poll(
        self, consumer: AIOKafkaConsumer, process: str, positions: dict[int, int]
    ) -> bool:
        """``poll`` with aiokafka: one getmany over every partition."""
        processes = per_partition(process, positions)
        self.invoke_polls(processes, positions)
        read: dict[int, list[int]] = {p: [] for p in positions}
        errors: dict[int, str] = {}
        try:
            batches = await consumer.getmany(
                timeout_ms=int(POLL_WAIT_S * 1000), max_records=POLL_MAX_RECORDS
            )
        except KafkaErrorAio as error:
            errors = dict.fromkeys(positions, type(error).__name__)
            batches = {}
        for tp, records in batches.items():
            for record in records:
                read[tp.partition] += [record.offset, int(record.value)]

        def high_watermark(partition: int) -> int | None:
            high = consumer.highwater(AioTopicPartition(TOPIC, partition))
            return high if high is not None and high >= 0 else None

        return self.complete_polls(processes, positions, read, errors, high_watermark)

    async def _aio_send(
        self, producer: AIOKafkaProducer, process: str, partition: int
    ) -> str | None:
        """``send`` with aiokafka: its status, None when the client is suspect (no answer
        in time, or an answer of unknown outcome: the lane starts over)."""
        key, value = key_of(partition), self.next_value()
        self.recorder.op(process, "invoke", "send", key, value)
        sending = producer.send_and_wait(TOPIC, str(value).encode(), partition=partition)
        try:
            sent = await asyncio.wait_for(sending, SEND_TIMEOUT_S + REPORT_MARGIN_S)
        except TimeoutError:
            self.recorder.op(process, "info", "send", key, value, error="no-delivery-report")
            return None
        except KafkaErrorAio as error:
            # aiokafka retries what is retriable until the batch expires (its request
            # timeout, here SEND_TIMEOUT_S): an error it gives up with is final.
            name = error.message if isinstance(error, BrokerResponseError) else type(error).__name__
            status = "fail" if name in NOT_APPENDED else "info"
            self.recorder.op(process, status, "send", key, value, error=name)
            return status if status == "fail" else None
        self.recorder.op(process, "ok", "send", key, value, offset=sent.offset, error=None)
        return "ok"

    # ---- lanes ------------------------------------------------------------------------------
    def producer_lane(self, lane: int, seed: int) -> None:
        """Sends to partition ``lane % partitions``: a partition that takes no writes (its
        ISR below min.insync.replicas, its leader cut off) holds its own lanes for up to
        ``SEND_TIMEOUT_S`` per send, not all of them."""
        rng = random.Random(seed)
        generation = 0
        while not self.stop.is_set():
            process = f"p{lane}.{generation}"
            producer = self.producer(process)
            while not self.stop.wait(rng.uniform(0.005, 0.05)):
                status = self.send(producer, process, lane % self.partitions)
                if status is None or rng.random() < CRASH_CHANCE:
                    break
            producer.purge()
            generation += 1

    def aiokafka_producer_lane(self, lane: int, seed: int) -> None:
        """``producer_lane`` with an idempotent aiokafka producer (its own loop here)."""

        def producer(process: str) -> AIOKafkaProducer:
            return AIOKafkaProducer(
                bootstrap_servers=self.bootstrap,
                client_id=process,
                acks="all",
                enable_idempotence=True,
                linger_ms=0,
                # Also how long a batch may wait for its acknowledgement (retries included):
                # librdkafka's message.timeout.ms.
                request_timeout_ms=int(SEND_TIMEOUT_S * 1000),
                metadata_max_age_ms=1000,
            )

        def begin(client: AIOKafkaProducer, process: str) -> Callable[[], Awaitable[object]]:
            return lambda: self._aio_send(client, process, lane % self.partitions)

        self._aiokafka_lane("ap", lane, seed, producer, begin)

    def aiokafka_consumer_lane(self, lane: int, seed: int) -> None:
        """A consumer lane driven by aiokafka (asyncio, its own loop in this thread)."""

        def consumer(process: str) -> AIOKafkaConsumer:
            return AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                client_id=process,
                enable_auto_commit=False,
                auto_offset_reset="none",  # a position past the log end is an error
                fetch_max_wait_ms=int(POLL_WAIT_S * 1000),
                request_timeout_ms=int(REQUEST_TIMEOUT_S * 1000) + 1000,
                metadata_max_age_ms=1000,
            )

        def begin(client: AIOKafkaConsumer, process: str) -> Callable[[], Awaitable[object]]:
            positions = dict.fromkeys(range(self.partitions), 0)
            partitions = [AioTopicPartition(TOPIC, p) for p in positions]
            client.assign(partitions)
            for tp in partitions:
                client.seek(tp, 0)
            return lambda: self._aio_poll(client, process, positions)

        self._aiokafka_lane("a", lane, seed, consumer, begin)

    def _aiokafka_lane(
        self,
        prefix: str,
        lane: int,
        seed: int,
        client_for: Callable[[str], Any],
        begin: Callable[[Any, str], Callable[[], Awaitable[object]]],
    ) -> None:
        """An aiokafka lane in its own event loop: a client (process ``<prefix><lane>.<n>``)
        takes steps until one returns something false (the client is suspect) or it
        crashes by chance, then the lane starts over with a new one (Jepsen's rule)."""
        # aiokafka logs every refused connect and failed fetch as an error: under faults
        # that is noise (the history records what the client saw).
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

        async def lanes() -> None:
            rng = random.Random(seed)
            generation = 0
            while not self.stop.is_set():
                process = f"{prefix}{lane}.{generation}"
                client = client_for(process)
                try:
                    await client.start()
                    step = begin(client, process)
                    while not self.stop.is_set():
                        await asyncio.sleep(rng.uniform(0.005, 0.05))
                        if not await step() or rng.random() < CRASH_CHANCE:
                            break
                except KafkaErrorAio:
                    await asyncio.sleep(0.5)  # no broker answered start(): a new client, later
                finally:
                    # stop() re-raises what a background task died of (a cancelled retry
                    # sleep): the client is dropped either way.
                    with contextlib.suppress(asyncio.CancelledError, KafkaErrorAio):
                        await client.stop()
                generation += 1

        asyncio.run(lanes())

    def consumer_lane(self, lane: int, seed: int) -> None:
        rng = random.Random(seed)
        generation = 0
        while not self.stop.is_set():
            process = f"c{lane}.{generation}"
            consumer = self.consumer(process)
            positions = dict.fromkeys(range(self.partitions), 0)
            consumer.assign([TopicPartition(TOPIC, p, 0) for p in positions])
            while not self.stop.wait(rng.uniform(0.005, 0.05)):
                polled = self.poll(consumer, per_partition(process, positions), positions)
                if not polled or rng.random() < CRASH_CHANCE:
                    break
            consumer.close()
            generation += 1

    # ---- after the heal ---------------------------------------------------------------------
    def heal_sends(self) -> None:
        """Process ``heal``: one acknowledged acks=all send per partition, within the bound."""
        deadline = time.monotonic() + HEAL_BOUND_S
        producer = self.producer("heal")
        for partition in range(self.partitions):
            while time.monotonic() < deadline:
                if self.send(producer, "heal", partition) == "ok":
                    break
                time.sleep(0.2)
        producer.purge()

    def final_reads(self) -> None:
        """Process ``final``: every partition from offset 0 to a high watermark that stays
        the same for ``SETTLE_S`` (a new leader learns the committed offset late)."""
        deadline = time.monotonic() + HEAL_BOUND_S
        for partition in range(self.partitions):
            consumer = self.consumer(f"final-{partition}")
            consumer.assign([TopicPartition(TOPIC, partition, 0)])
            positions, settled = {partition: 0}, None
            try:
                while time.monotonic() < deadline:
                    high = self._high_watermark(consumer, partition)
                    if high is not None and positions[partition] >= high:
                        if settled == high:
                            break
                        settled = high
                        time.sleep(SETTLE_S)
                        continue
                    self.poll(consumer, {partition: "final"}, positions)
            finally:
                consumer.close()

    def _high_watermark(self, consumer: Consumer, partition: int) -> int | None:
        try:
            _low, high = consumer.get_watermark_offsets(
                TopicPartition(TOPIC, partition), timeout=REQUEST_TIMEOUT_S
            )
        except KafkaException:
            return None
        return high if high >= 0 else None
