"""No single request holds a node's event loop long enough to miss a broker heartbeat.

A combined broker+controller runs in this process on the real runtime, beside a probe task
that sleeps 5 ms at a time and records the longest gap between its wake-ups: the longest
stretch during which nothing else could run (a heartbeat, a Raft fetch, another client),
in this thread's CPU time (what the node did) and in wall time (what a loaded host adds).
Requests go over a real socket as bytes encoded before the probe starts, and their answers
are read as bytes, so the probe measures the node, not this test's client. On main, a
Metadata request naming 100,000 missing topics with auto-creation on held the loop for
12 s (the node fenced itself) and logged 95,000 warnings; a CreateTopics of 7,000
partitions failed with RecordTooLargeError and the client waited out its 30 s timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.auto_topic_creation import AUTO_CREATE_BURST_TOPICS
from kraft.config import load_config
from kraft.node import KraftNode
from kraft.storage import check_and_lock
from log.runtime import real_runtime
from protocol import wire
from protocol.entities import make, request_module
from tests.kraft.inprocess import CLUSTER_ID, format_node

HEARTBEAT_INTERVAL_S = 2.0  # broker.heartbeat.interval.ms default
METADATA, CREATE_TOPICS = 3, 19


@asynccontextmanager
async def running_node(path: Path) -> AsyncIterator[KraftNode]:
    """The node of ``path`` started in this process, its client listener open."""
    config = load_config(str(path))
    runtime = real_runtime()
    node = KraftNode(runtime, config, check_and_lock(runtime.fs, config))
    try:
        await node.start()
        deadline = asyncio.get_running_loop().time() + 30
        while "PLAINTEXT" not in node.apis:
            assert asyncio.get_running_loop().time() < deadline, "the listener never opened"
            await asyncio.sleep(0.01)
        yield node
    finally:
        await node.close()


@dataclass(frozen=True, slots=True)
class Hold:
    """The longest stretch the loop went without running the probe: wall time, and the CPU
    time this thread spent in it (the work itself, whatever else loads the machine: the
    assertion uses it, so a busy CI host cannot fail the test)."""

    wall_s: float
    cpu_s: float

    def __str__(self) -> str:
        return f"{self.cpu_s * 1000:.0f} ms CPU, {self.wall_s * 1000:.0f} ms wall"


async def worst_hold(work: Callable[[], Awaitable[Any]]) -> tuple[Hold, Any]:
    """(the longest hold while ``work`` ran, its result)."""
    loop = asyncio.get_running_loop()
    holds: list[Hold] = []

    async def probe() -> None:
        last, last_cpu = loop.time(), time.thread_time()
        while True:
            await asyncio.sleep(0.005)
            now, now_cpu = loop.time(), time.thread_time()
            holds.append(Hold(now - last, now_cpu - last_cpu))
            last, last_cpu = now, now_cpu

    task = loop.create_task(probe())
    await asyncio.sleep(0.02)
    try:
        result = await work()
    finally:
        task.cancel()
    return Hold(max(h.wall_s for h in holds), max(h.cpu_s for h in holds)), result


async def exchange(port: int, api_key: int, version: int, request: object) -> Callable:
    """A coroutine function sending pre-encoded ``request`` and returning the answer's bytes."""
    frame = wire.encode_request(wire.RequestHeader(api_key, version, 7, "hold"), request)

    async def run() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(frame)
            return await asyncio.wait_for(wire.read_frame(reader), 60)
        finally:
            writer.close()

    return run


def test_metadata_naming_100k_missing_topics_holds_the_loop_below_a_heartbeat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    module: Any = request_module(METADATA, 12)
    names = [f"missing-{i}" for i in range(100_000)]
    request = make(
        module.MetadataRequest,
        {
            "topics": tuple(
                make(module.MetadataRequestTopic, {"name": n, "topic_id": None}) for n in names
            ),
            "allow_auto_topic_creation": True,
        },
    )

    path, port = format_node(tmp_path, auto_create_topics_enable="true")

    async def scenario() -> tuple[Hold, Any, bool]:
        async with running_node(path) as node:
            send = await exchange(port, METADATA, 12, request)
            hold, answer = await worst_hold(send)
            assert node.lifecycle is not None
            await node.apis["PLAINTEXT"]._auto_creation.wait_idle()  # type: ignore[union-attr]
            assert node.loader is not None
            broker = node.loader.image.cluster.brokers[1]
            created = sum(name in node.loader.image.topics.by_name for name in names)
            assert created == AUTO_CREATE_BURST_TOPICS  # the budget, no more
            return hold, answer, broker.fenced

    with caplog.at_level(logging.WARNING):
        hold, answer, fenced = asyncio.run(scenario())
    print(f"100k-topic Metadata: worst loop hold {hold}")
    assert hold.cpu_s < HEARTBEAT_INTERVAL_S
    assert not fenced
    _cid, response = wire.decode_response(METADATA, 12, answer)
    codes = [topic.error_code for topic in response.topics]
    assert len(codes) == len(names)
    assert codes.count(ErrorCode.leader_not_available) == AUTO_CREATE_BURST_TOPICS
    assert (
        codes.count(ErrorCode.unknown_topic_or_partition) == len(names) - AUTO_CREATE_BURST_TOPICS
    )
    auto_lines = [r for r in caplog.records if r.name.startswith("broker.")]
    assert len(auto_lines) == 1, [r.getMessage() for r in auto_lines]  # one summary line
    assert "Deferred auto-creating 99000 topic(s)" in auto_lines[0].getMessage()


async def register_remote_broker(node: KraftNode, broker_id: int) -> None:
    """Register and unfence a broker that is not this process, straight through the
    controller: the partitions placed on it cost this node metadata, not 21,000 file
    descriptors (three per empty partition log, over this machine's hard limit of 20,000)."""
    controller, loader = node.controller, node.loader
    assert controller is not None and loader is not None
    module: Any = request_module(62, 4)
    listener = make(
        module.Listener,
        {"name": "PLAINTEXT", "host": "127.0.0.1", "port": 1, "security_protocol": 0},
    )
    registration = make(
        module.BrokerRegistrationRequest,
        {
            "broker_id": broker_id,
            "cluster_id": CLUSTER_ID,
            "incarnation_id": uuid.UUID(int=broker_id),
            "listeners": (listener,),
        },
    )
    registered: Any = await controller.handle(62, 4, registration)
    heartbeat_module: Any = request_module(63, 2)
    heartbeat = make(
        heartbeat_module.BrokerHeartbeatRequest,
        {
            "broker_id": broker_id,
            "broker_epoch": registered.broker_epoch,
            "current_metadata_offset": loader.image.offset,
        },
    )
    answer: Any = await controller.handle(63, 2, heartbeat)
    assert not answer.is_fenced


def test_create_topics_of_7000_partitions_succeeds_and_holds_the_loop_below_a_heartbeat(
    tmp_path: Path,
) -> None:
    module: Any = request_module(CREATE_TOPICS, 7)
    assignments = tuple(
        make(module.CreatableReplicaAssignment, {"partition_index": i, "broker_ids": (2,)})
        for i in range(7000)
    )
    topic = make(
        module.CreatableTopic,
        {
            "name": "wide",
            "num_partitions": -1,
            "replication_factor": -1,
            "assignments": assignments,
        },
    )
    request = make(
        module.CreateTopicsRequest, {"topics": (topic,), "timeout": timedelta(seconds=60)}
    )

    path, port = format_node(tmp_path, auto_create_topics_enable="true")

    async def scenario() -> tuple[Hold, bytes, int]:
        async with running_node(path) as node:
            await register_remote_broker(node, 2)
            send = await exchange(port, CREATE_TOPICS, 7, request)
            hold, answer = await worst_hold(send)
            assert node.loader is not None
            wide = node.loader.image.topics.get("wide")
            return hold, answer, len(wide.partitions) if wide else 0

    hold, answer, partitions = asyncio.run(scenario())
    print(f"CreateTopics of 7000 partitions: worst loop hold {hold}")
    _cid, response = wire.decode_response(CREATE_TOPICS, 7, answer)
    (result,) = response.topics
    assert result.error_code == ErrorCode.none, result.error_message
    assert partitions == 7000
    assert hold.cpu_s < HEARTBEAT_INTERVAL_S
