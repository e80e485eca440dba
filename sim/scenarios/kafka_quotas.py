"""``--quotas``: a client held to a byte-rate quota, and a lane that ignores its throttles.

Before the first fault the setup creates a topic ``jepsen-quota`` and, through
AlterClientQuotas (forwarded to the controller), a ``producer_byte_rate`` of ``RATE`` bytes a
second for the client id ``q0``, and waits until every broker's image holds it. The brokers
measure rates over ``quota.window.num`` = 4 samples of one second (``broker_props``).

Lane ``q0`` then produces batches of ``VALUE_BYTES`` to that topic's leader as fast as each
answer comes back, under every fault, ignoring the throttle time every answer over the quota
carries, as a client that does not honour it would. KIP-219 holds such a client back all the
same: the broker mutes the connection for the throttle time after answering, so its next
request is not read until then. Each answer is a ``quota-answer`` event, judged by
``QuotaChecker`` (sim/analysis/kafka.py; kraft-analyze replays the events):
``quota-exceeded`` if one connection ever had more bytes accepted than the quota lets
through since its first request.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from broker.client import KafkaConnection
from log.batch import encode_batch
from log.records import Record
from log.runtime import Runtime
from metadata.records import NO_LEADER
from sim import admin, kafka_client
from sim.analysis.kafka import QUOTA_ANSWER, QuotaChecker
from sim.process import EPOCH_MS
from sim.scenarios.kafka import (
    REQUEST_TIMEOUT_S,
    KafkaCluster,
    Routing,
)

QUOTA_TOPIC = "jepsen-quota"
CLIENT_ID = "q0"
RATE = 16_384.0  # producer_byte_rate, bytes a second
VALUE_BYTES = 4_096  # each batch holds one record this big
WINDOW_NUM, WINDOW_SIZE_S = 4, 1


def broker_props() -> dict[str, str]:
    return {"quota.window.num": str(WINDOW_NUM), "quota.window.size.seconds": str(WINDOW_SIZE_S)}


def checker() -> QuotaChecker:
    """The check with this lane's quota (its parameters go in the ``kafka-config`` event)."""
    return QuotaChecker(RATE, WINDOW_NUM * WINDOW_SIZE_S)


@dataclass(slots=True)
class QuotaLanes:
    cluster: KafkaCluster
    check: QuotaChecker = field(default_factory=checker)
    figures: dict[str, int] = field(
        default_factory=lambda: {"quota_bytes": 0, "quota_throttled": 0}
    )

    async def setup(self, rng: random.Random) -> bool:
        """Create the topic and the quota, then wait until every broker applied it."""
        rf = int(self.cluster.extra_props["default.replication.factor"])
        steps = [
            lambda c: admin.create_topic(c, QUOTA_TOPIC, 1, rf, REQUEST_TIMEOUT_S),
            lambda c: admin.set_client_quota(
                c, CLIENT_ID, "producer_byte_rate", RATE, REQUEST_TIMEOUT_S
            ),
        ]
        return await self.cluster.set_up(
            "quota-setup", rng, steps, lambda image: bool(image.client_quotas)
        )

    def lanes(self, runtime: Runtime) -> list[asyncio.Future[None]]:
        return [asyncio.ensure_future(self.lane(runtime.rng))]

    async def lane(self, rng: random.Random) -> None:
        routing = Routing(self.cluster, CLIENT_ID)
        value = b"q" * VALUE_BYTES
        serial = 0  # one per connection the lane opened: the check's unit
        try:
            while True:
                host = await self._leader(routing, rng)
                if host is None:
                    await asyncio.sleep(rng.uniform(0.05, 0.2))
                    continue
                serial += 1
                await self._produce_until_dropped(routing, host, f"{host}/{serial}", value)
        finally:
            await routing.close()

    async def _produce_until_dropped(
        self, routing: Routing, host: str, connection: str, value: bytes
    ) -> None:
        """Produce on one connection, each batch as soon as the last is answered, until an
        answer says another broker leads or the connection fails."""
        trace = self.cluster.world.trace
        loop = self.cluster.world.loop
        while True:
            timestamp_ms = EPOCH_MS + int(loop.time() * 1000)
            batch = encode_batch([Record(None, value, timestamp_ms)])
            sent_us = trace.now_us()
            try:
                conn = await routing.conn(host)
                error, throttle_ms = await self._produce(conn, batch)
            except (OSError, TimeoutError, ConnectionError):
                await routing.drop(host)
                return
            trace.event(
                QUOTA_ANSWER,
                node=host,
                connection=connection,
                sent_us=sent_us,
                bytes=len(batch),
                error=error,
                throttle_ms=throttle_ms,
            )
            if error == "NONE":
                self.figures["quota_bytes"] += len(batch)
            if throttle_ms > 0:
                self.figures["quota_throttled"] += 1
            found = self.check.answered(
                host, connection, sent_us, len(batch), error, trace.now_us()
            )
            if found is not None:
                self.cluster.checker.fail(found.message)
            if error != "NONE":
                await routing.drop(host)  # a moved leader: find it again
                return

    @staticmethod
    async def _produce(conn: KafkaConnection, batch: bytes) -> tuple[str, int]:
        error, _offset, throttle_ms = await kafka_client.produce_answer(
            conn, QUOTA_TOPIC, 0, batch, 1, REQUEST_TIMEOUT_S
        )
        return error, throttle_ms

    async def _leader(self, routing: Routing, rng: random.Random) -> str | None:
        host = rng.choice(self.cluster.brokers)
        try:
            conn = await routing.conn(host)
            error, found, _hosts = await kafka_client.partitions(
                conn, QUOTA_TOPIC, REQUEST_TIMEOUT_S
            )
        except (OSError, TimeoutError, ConnectionError):
            await routing.drop(host)
            return None
        node = found[0].leader if error == "NONE" and 0 in found else NO_LEADER
        return None if node == NO_LEADER else f"n{node}"
