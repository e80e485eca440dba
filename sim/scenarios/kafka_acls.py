"""``--acls``: ACLs that refuse, and a lane that keeps asking what they deny.

With ``--authorizer`` every node runs Kafka's StandardAuthorizer with
``allow.everyone.if.no.acl.found=true`` and no ACLs, so every check passes. ``--acls`` adds
what a secured cluster has: before the first fault the setup creates a topic
``jepsen-acl`` and, through CreateAcls (forwarded to the controller), ACLs for the
scenario's principal (``User:ANONYMOUS``, as every PLAINTEXT client is) that allow every
operation on that topic and on the group ``jepsen-acl-group`` but deny READ and WRITE on the
topic and READ on the group (DENY wins over ALLOW, as in Kafka). It waits until every
broker's image holds them, so from the first fault on every broker that serves has applied
them (a restarted broker reads them back from its metadata log or snapshot, or fetches them
before it serves).

Lane ``x0`` then produces to, fetches from and commits offsets of that topic and group, in
turn, under every fault. Each answer is an ``acl-answer`` event, judged by
``check_acl_answer`` (sim/analysis/kafka.py; kraft-analyze replays the events):
``acl-bypassed`` if any broker ever answers NONE. Refusals (TOPIC_AUTHORIZATION_FAILED,
GROUP_AUTHORIZATION_FAILED) and the errors of a cluster under faults (a moved leader, a
timeout) are fine.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field

from broker.client import KafkaConnection
from log.runtime import Runtime
from metadata.records import NO_LEADER
from sim import admin, kafka_client
from sim.analysis.kafka import ACL_ANSWER, check_acl_answer
from sim.process import EPOCH_MS
from sim.scenarios.kafka import (
    REQUEST_TIMEOUT_S,
    KafkaCluster,
    Routing,
)

ACL_TOPIC = "jepsen-acl"
ACL_GROUP = "jepsen-acl-group"
PRINCIPAL = "User:ANONYMOUS"
ALL, READ, WRITE = 2, 3, 4  # AclOperation
DENY, ALLOW = 2, 3  # AclPermissionType
BINDINGS = (
    (admin.TOPIC_RESOURCE, ACL_TOPIC, PRINCIPAL, ALL, ALLOW),
    (admin.TOPIC_RESOURCE, ACL_TOPIC, PRINCIPAL, READ, DENY),
    (admin.TOPIC_RESOURCE, ACL_TOPIC, PRINCIPAL, WRITE, DENY),
    (admin.GROUP_RESOURCE, ACL_GROUP, PRINCIPAL, ALL, ALLOW),
    (admin.GROUP_RESOURCE, ACL_GROUP, PRINCIPAL, READ, DENY),
)
PAUSE_S = (0.05, 0.3)  # between two attempts
APIS = ("produce", "fetch", "offset-commit")


@dataclass(slots=True)
class AclLanes:
    """The ACLs of one run, the lane that tries what they deny, and what it saw."""

    cluster: KafkaCluster
    figures: dict[str, int] = field(default_factory=lambda: {"acl_refusals": 0})

    async def setup(self, rng: random.Random) -> bool:
        """Create the topic and the ACLs, then wait until every broker applied them."""
        rf = int(self.cluster.extra_props["default.replication.factor"])
        steps = [
            lambda c: admin.create_topic(c, ACL_TOPIC, 1, rf, REQUEST_TIMEOUT_S),
            lambda c: admin.create_acls(c, BINDINGS, REQUEST_TIMEOUT_S),
        ]
        return await self.cluster.set_up(
            "acl-setup", rng, steps, lambda image: len(image.acls) >= len(BINDINGS)
        )

    def lanes(self, runtime: Runtime) -> list[asyncio.Future[None]]:
        return [asyncio.ensure_future(self.lane(runtime))]

    async def lane(self, runtime: Runtime) -> None:
        rng = runtime.rng
        routing = Routing(self.cluster, "x0")
        turn = 0
        try:
            while True:
                await asyncio.sleep(rng.uniform(*PAUSE_S))
                await self.attempt(routing, rng, APIS[turn % len(APIS)], turn)
                turn += 1
        finally:
            await routing.close()

    async def attempt(self, routing: Routing, rng: random.Random, api: str, turn: int) -> None:
        """One denied request to a broker that could serve it (the partition's leader, the
        group's coordinator), and its answer judged."""
        host = await self._target(routing, rng, api)
        if host is None:
            return
        try:
            conn = await routing.conn(host)
            error = await self._ask(conn, api, turn)
        except (OSError, TimeoutError, ConnectionError):
            await routing.drop(host)
            return
        resource = ACL_GROUP if api == "offset-commit" else f"{ACL_TOPIC}-0"
        trace = self.cluster.world.trace
        trace.event(ACL_ANSWER, node=host, api=api, resource=resource, error=error)
        if error.endswith("_AUTHORIZATION_FAILED"):
            self.figures["acl_refusals"] += 1
        found = check_acl_answer(host, api, resource, error, trace.now_us())
        if found is not None:
            self.cluster.checker.fail(found.message)

    async def _target(self, routing: Routing, rng: random.Random, api: str) -> str | None:
        host = rng.choice(self.cluster.brokers)
        try:
            conn = await routing.conn(host)
            if api == "offset-commit":
                error, node = await kafka_client.find_coordinator(
                    conn, ACL_GROUP, REQUEST_TIMEOUT_S
                )
            else:
                error, found, _hosts = await kafka_client.partitions(
                    conn, ACL_TOPIC, REQUEST_TIMEOUT_S
                )
                node = found[0].leader if 0 in found else NO_LEADER
        except (OSError, TimeoutError, ConnectionError):
            await routing.drop(host)
            return None
        return f"n{node}" if error == "NONE" and node != NO_LEADER else None

    async def _ask(self, conn: KafkaConnection, api: str, turn: int) -> str:
        if api == "produce":
            batch = kafka_client.record_batch(
                ACL_TOPIC, turn, EPOCH_MS + int(self.cluster.world.loop.time() * 1000)
            )
            error, _offset = await kafka_client.produce(
                conn, ACL_TOPIC, 0, batch, -1, REQUEST_TIMEOUT_S
            )
            return error
        if api == "fetch":
            result = await kafka_client.fetch(conn, ACL_TOPIC, 0, 0, -1, 0.0, REQUEST_TIMEOUT_S)
            return result.error
        return await kafka_client.offset_commit(
            conn, ACL_GROUP, -1, "", ACL_TOPIC, 0, turn, REQUEST_TIMEOUT_S
        )
