"""``--consumer-protocol``: KIP-848 group members as lanes of the kafka scenario.

The scenario's own group lanes speak the classic protocol (JoinGroup, SyncGroup, Heartbeat);
these speak the consumer protocol a Kafka 4 consumer uses with ``group.protocol=consumer``:
one ConsumerGroupHeartbeat carries the member's subscription, its epoch and the partitions it
owns, and the coordinator's assignor (``uniform`` or ``range``, each member picks one at
random) answers each member's next partitions. They drive what no other lane reaches: the
coordinator's consumer-group state machine (broker/group/consumer_group.py) and its records
in ``__consumer_offsets`` (joins, epochs, target assignments, revocations, members fenced by
their session timeout or leaving), across coordinator failovers under every fault.

Each lane ``k<lane>.<generation>`` is one consumer process, as Kafka's is:

- It makes its own member id (v1), joins at epoch 0 and beats every heartbeat interval the
  coordinator answers. When an answer carries a new assignment that only adds partitions it
  adopts it at once and says so in its next heartbeat, sent straight away, as Kafka's
  consumer acknowledges a reconciliation. One that takes partitions away is adopted after a
  revocation of 0-2 s (a rebalance listener's ``onPartitionsRevoked``: Kafka's consumer
  finishes with and commits the partitions it loses before it says it gave them up), during
  which it still polls and commits them and its heartbeats still name them. After a
  heartbeat that failed (its answer may be lost) the next one sends every field, so the
  coordinator answers the whole assignment again.
- UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH (its session expired, or the coordinator moved
  and knows it by another epoch) makes it give up every partition and join again at epoch 0
  with the same member id.
- Its positions, polls and commits are the classic lanes' (``KafkaCluster.load_positions``,
  ``poll_assigned``): the committed offsets at each new assignment (a new process,
  ``k<lane>.<generation>.<loads>``), a poll from the position it expects, and a commit of
  the position after what it read, with OffsetCommit v9 and its member epoch. Their
  operations go into the same history and the same checks (``lost-commit``,
  ``offset-backwards``, the poll checks) under the group ``jepsen-consumer``.
- Now and then the process ends: half the time it leaves (epoch -1), half the time it just
  stops, and the coordinator fences it when its session times out.

After each heartbeat answer a lane records the partitions its member holds (a
``member-assignment`` event; empty once it is fenced, leaves or stops), and
``AssignmentChecker`` (sim/analysis/kafka.py, which kraft-analyze replays from the same
events) judges KIP-848's promise: a partition is never held by two members at once
(``exclusive-assignment``).

The group hashes to the same ``__consumer_offsets`` partition as the scenario's own group,
so the checker's power-cut excuses for commits (``offsets_log``) hold for both.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.client import KafkaConnection
from broker.group.coordinator import OFFSETS_TOPIC
from broker.group.records import partition_for
from log.runtime import Runtime
from sim import kafka_client
from sim.analysis.kafka import MEMBER_ASSIGNMENT, AssignmentChecker
from sim.scenarios.kafka import (
    GROUP_CRASH_CHANCE,
    HEARTBEAT_S,
    OFFSETS_LOG,
    OFFSETS_PARTITION,
    OFFSETS_PARTITIONS,
    REBALANCE_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    SESSION_TIMEOUT_S,
    TOPIC,
    GroupMember,
    KafkaCluster,
    Routing,
)

GROUP = "jepsen-consumer"
# Same offsets partition as the scenario's own group: one offsets_log for the checker.
assert partition_for(GROUP, OFFSETS_PARTITIONS) == OFFSETS_PARTITION
LANES = 2
ASSIGNORS = ("uniform", "range")  # group.consumer.assignors' two, Kafka's defaults
RETRY_S = 0.1  # after a heartbeat that failed, the next one (Kafka's retry.backoff.ms)
REVOKE_S = 2.0  # at most this long to give partitions up (within the rebalance timeout)
# The members' answers that mean the coordinator no longer knows them at their epoch.
FENCED = {"UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH"}
# Answers a correct member never gets: the lane or the coordinator is wrong.
NEVER = {"INVALID_REQUEST", "UNSUPPORTED_VERSION", "UNSUPPORTED_ASSIGNOR", "UNKNOWN_SERVER_ERROR"}


def broker_props() -> dict[str, str]:
    """The coordinator's KIP-848 timings at the scenario's scale: a session as long as the
    classic members' (Kafka's 45 s would outlast the run), a heartbeat a second."""
    return {
        "group.consumer.session.timeout.ms": str(int(SESSION_TIMEOUT_S * 1000)),
        "group.consumer.heartbeat.interval.ms": str(int(HEARTBEAT_S * 1000)),
    }


@dataclass(slots=True)
class ConsumerMember(GroupMember):
    """A KIP-848 member: ``generation`` is its member epoch (0 while it joins)."""

    assignor: str = ASSIGNORS[0]
    topic_id: uuid.UUID | None = None
    ack_due: bool = False  # its next heartbeat names the partitions it owns now
    full_due: bool = False  # its next heartbeat sends every field (the last one failed)
    # An assignment that takes partitions away, adopted at ``revoke_at`` (once revoked).
    pending: list[int] | None = None
    revoke_at: float = 0.0

    def rejoin(self, error: str) -> None:
        """Fenced: give up every partition and join again, with the same member id."""
        del error
        self.generation = 0
        self.assigned = []
        self.positions = None
        self.ack_due = False
        self.full_due = False
        self.pending = None
        self.next_heartbeat = 0.0


@dataclass(slots=True)
class ConsumerLanes:
    """The KIP-848 lanes of one run, what they did, and the ``exclusive-assignment`` check."""

    cluster: KafkaCluster
    checker: AssignmentChecker = field(init=False)
    figures: dict[str, int] = field(
        default_factory=lambda: {
            "kip848_heartbeats": 0,
            "kip848_assignments": 0,
            "kip848_fenced": 0,
        }
    )

    def __post_init__(self) -> None:
        self.checker = AssignmentChecker(
            fence_after_us(), self.cluster.cuts, offsets_log=OFFSETS_LOG
        )

    def lanes(self, runtime: Runtime) -> list[asyncio.Future[None]]:
        return [asyncio.ensure_future(self.lane(runtime, i)) for i in range(LANES)]

    async def lane(self, runtime: Runtime, lane: int) -> None:
        rng = runtime.rng
        generation = 0
        while True:
            name = f"k{lane}.{generation}"
            member = ConsumerMember(
                Routing(self.cluster, name),
                name,
                group=GROUP,
                commit_version=9,
                member_id=str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                generation=0,
                assignor=rng.choice(ASSIGNORS),
            )
            released = False
            try:
                while rng.random() >= GROUP_CRASH_CHANCE:
                    await asyncio.sleep(rng.uniform(0.005, 0.05))
                    await self.step(member, rng)
                self.holds(member, ())  # it stops consuming before it leaves
                released = True
                if member.coordinator is not None and rng.random() < 0.5:
                    await self.heartbeat(member, leaving=True)
            finally:
                if not released:  # the run ended it mid-step
                    self.holds(member, ())
                await member.routing.close()
            generation += 1

    async def step(self, member: ConsumerMember, rng: random.Random) -> None:
        """One step: find the coordinator, heartbeat when due (joining, acknowledging an
        assignment, or on the interval), else load positions or poll and commit."""
        cluster = self.cluster
        now = cluster.world.loop.time()
        if member.pending is not None and now >= member.revoke_at:
            self.adopt(member, member.pending)
            self.holds(member, member.assigned)  # gave the revoked partitions up
        if member.coordinator is None:
            member.coordinator = await cluster.find_coordinator(member.routing, rng, GROUP)
            return
        if now >= member.next_heartbeat:
            await self.heartbeat(member, rng)
            return
        if member.generation <= 0:
            return
        if await cluster.load_positions(member):
            return
        await cluster.poll_assigned(member, rng)

    async def heartbeat(
        self, member: ConsumerMember, rng: random.Random | None = None, *, leaving: bool = False
    ) -> None:
        """One ConsumerGroupHeartbeat, and what its answer means for the member."""
        loop = self.cluster.world.loop
        answers: list[kafka_client.ConsumerHeartbeat] = []
        full = member.full_due
        owned = (member.topic_id, tuple(member.assigned)) if member.ack_due or full else None

        async def beat(conn: KafkaConnection) -> str:
            answer = await kafka_client.consumer_heartbeat(
                conn,
                GROUP,
                member.member_id,
                -1 if leaving else member.generation,
                REQUEST_TIMEOUT_S,
                topic=TOPIC,
                rebalance_s=REBALANCE_TIMEOUT_S,
                assignor=member.assignor,
                owned=owned,
                full=full,
            )
            answers.append(answer)
            return answer.error

        self.figures["kip848_heartbeats"] += 1
        sent_us = self.cluster.world.trace.now_us()
        host = member.coordinator
        error = await self.cluster.group_call(member, beat)
        if leaving:
            return
        if error in NEVER:
            raise AssertionError(f"{member.lane}: ConsumerGroupHeartbeat answered {error}")
        if error != "NONE":
            member.next_heartbeat = loop.time() + RETRY_S
            member.full_due = True
            if error in FENCED:
                self.figures["kip848_fenced"] += 1
                member.rejoin(error)
                self.holds(member, ())
            return
        answer = answers[0]
        member.generation = answer.member_epoch
        member.next_heartbeat = loop.time() + (answer.interval_s or HEARTBEAT_S)
        member.full_due = False
        if owned is not None:
            member.ack_due = False
        if answer.assigned is not None:
            self.figures["kip848_assignments"] += 1
            member.topic_id = answer.topic_id or member.topic_id
            target = list(answer.assigned)
            if set(member.assigned) - set(target):
                if member.pending is None:
                    assert rng is not None
                    member.revoke_at = loop.time() + rng.uniform(0, REVOKE_S)
                member.pending = target
            else:
                self.adopt(member, target)
        assert host is not None
        self.holds(member, member.assigned, self.authoritative(host), sent_us, host)

    def adopt(self, member: ConsumerMember, target: list[int]) -> None:
        """The member holds ``target`` now, and says so in a heartbeat straight away."""
        if target != member.assigned:
            member.assigned = target
            member.positions = None  # a new process, from the committed offsets
        member.pending = None
        member.ack_due = True
        member.next_heartbeat = self.cluster.world.loop.time()

    def authoritative(self, host: str) -> bool:
        """Whether ``host`` leads the offsets partition in the epoch the active controller
        last committed for it (a deposed coordinator may answer a heartbeat that writes
        nothing from state its successor has moved past)."""
        cluster = self.cluster
        epoch, _isr = cluster.coordinator_state(host, leading=True)
        active = cluster.active_controller()
        node = cluster.nodes.get(active) if active is not None else None
        topic = node.loader.image.topics.get(OFFSETS_TOPIC) if node and node.loader else None
        state = topic.partitions.get(OFFSETS_PARTITION) if topic is not None else None
        return (
            state is not None
            and epoch >= 0
            and f"n{state.leader}" == host
            and state.leader_epoch == epoch
        )

    def holds(
        self,
        member: ConsumerMember,
        partitions: Iterable[int],
        authoritative: bool = False,
        sent_us: int = -1,
        host: str | None = None,
    ) -> None:
        """The partitions ``member`` holds from now on: a ``member-assignment`` event, judged
        at once by the ``exclusive-assignment`` check."""
        held = sorted(partitions)
        isr = self.cluster.coordinator_state(host, leading=False)[1] if host else ()
        trace = self.cluster.world.trace
        trace.event(
            MEMBER_ASSIGNMENT,
            process=member.lane,
            group=GROUP,
            partitions=held,
            authoritative=authoritative,
            sent_us=sent_us,
            isr=list(isr),
        )
        violation = self.checker.assigned(
            GROUP,
            member.lane,
            held,
            authoritative=authoritative,
            sent_us=sent_us,
            isr=isr,
            time_us=trace.now_us(),
        )
        if violation is not None:
            self.cluster.checker.fail(violation.message)


def fence_after_us() -> int:
    """The least time a coordinator waits before fencing a member it has just heard from:
    its session timeout, or the rebalance timeout the member joined with (for revoking)."""
    return int(min(SESSION_TIMEOUT_S, REBALANCE_TIMEOUT_S) * 1_000_000)
