"""Leader changes as clients see them: the partitions' leaders from Metadata, the metadata
quorum's leader from DescribeQuorum, polled from the harness and written as the
simulator's ``became-leader`` events (``log`` the topic-partition or
``__cluster_metadata-0``, ``epoch`` the leader epoch), so kraft-analyze's election-safety
check (one leader per log and epoch) and its election statistics read them. The nemesis
targets the leaders last seen here."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from broker.client import KafkaConnection
from jepsen.cluster import node_name
from jepsen.history import Recorder
from kraft.quorum_tool import describe_quorum
from metadata.records import NO_LEADER
from protocol.wire import FrameError
from raft.codec import METADATA_TOPIC
from sim import kafka_client
from sim.scenarios.kafka import REQUEST_TIMEOUT_S, TOPIC, key_of

WATCH_INTERVAL_S = 0.25
# What asking a node that is gone, restarting, or not the node we meant can raise: the
# watch skips that node this turn (a dead watch would leave the nemesis blind).
UNANSWERED = (OSError, TimeoutError, ConnectionError, FrameError)
METADATA_LOG = f"{METADATA_TOPIC}-0"


@dataclass(slots=True)
class LeaderWatch:
    """Polls until ``stop``; ``leaders`` maps a log to its (leader id, epoch) last seen."""

    recorder: Recorder
    brokers: list[tuple[str, int]]
    controllers: list[tuple[str, int]]
    stop: threading.Event = field(default_factory=threading.Event)
    leaders: dict[str, tuple[int, int]] = field(default_factory=dict)

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        turn = 0
        while not self.stop.is_set():
            host, port = self.brokers[turn % len(self.brokers)]
            await self._partitions(host, port)
            for host, port in self.controllers:
                if await self._quorum(host, port):
                    break
            turn += 1
            await asyncio.sleep(WATCH_INTERVAL_S)

    def _saw(self, log: str, leader: int, epoch: int, **fields: object) -> None:
        last = self.leaders.get(log, (NO_LEADER, -1))
        if leader == NO_LEADER or epoch < last[1] or (leader, epoch) == last:
            return  # a stale broker's view, or nothing new
        self.leaders[log] = (leader, epoch)
        self.recorder.event("became-leader", node_name(leader), log=log, epoch=epoch, **fields)

    async def _partitions(self, host: str, port: int) -> None:
        conn = KafkaConnection("jepsen-watch")
        try:
            await conn.connect(host, port, REQUEST_TIMEOUT_S)
            error, found, _hosts = await kafka_client.partitions(conn, TOPIC, REQUEST_TIMEOUT_S)
        except UNANSWERED:
            return
        finally:
            await conn.close()
        if error != "NONE":
            return
        for partition, info in sorted(found.items()):
            self._saw(key_of(partition), info.leader, info.leader_epoch, isr=list(info.isr))

    async def _quorum(self, host: str, port: int) -> bool:
        try:
            status = await describe_quorum(host, port, REQUEST_TIMEOUT_S)
        except UNANSWERED:
            return False
        if status.error_code != 0:
            return False
        self._saw(METADATA_LOG, status.leader_id, status.leader_epoch)
        return True
