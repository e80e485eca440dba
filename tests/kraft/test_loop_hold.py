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
from log.batch import encode_batch
from log.compression import Compression
from log.records import Record
from log.runtime import real_runtime
from protocol import wire
from protocol.entities import make, request_module
from tests.kraft.big_requests import big_request
from tests.kraft.inprocess import CLUSTER_ID, format_node
from tests.kraft.wire_client import connect, create_topic, wait_for_leader

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


# ---- every API, with big requests (issue 22) ------------------------------------------------

# Entities per request in the sweep over every API: frames of 0.2-1 MB. The issue's own
# cases (200,000 partitions or topics, 5-15 MB) are the tests after it.
SWEEP_ITEMS = 20_000
# The bound on the longest loop step, in the node thread's CPU time. Handlers work in
# slices of ~50 ms of CPU at most on this loaded 2-core host; what remains one step is
# decoding a request's bytes (kio, ~1.5 us an entity: ~0.3 s for 200,000) and encoding
# a request the broker forwards to its controller. Far below broker.heartbeat.interval.ms
# (2 s) and the broker session (9 s).
SWEEP_STEP_CPU_BOUND_S = 0.5
BIG_STEP_CPU_BOUND_S = 2.0  # broker.heartbeat.interval.ms: the decoding of 2-7 MB


def _controller_port(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("listeners="):
            controller = next(p for p in line.split("=", 1)[1].split(",") if "CONTROLLER" in p)
            return int(controller.rsplit(":", 1)[1])
    raise AssertionError("no controller listener")


def _frames(apis: dict[int, tuple[int, int]], items: int) -> list[tuple[str, bytes]]:
    """(what, frame) of a big request of every api at its highest version, wide and deep."""
    frames = []
    for api_key, (_low, high) in sorted(apis.items()):
        seen: set[int] = set()
        for shape in ("wide", "deep"):
            request = big_request(api_key, high, items, shape)
            if request is None:
                continue
            frame = wire.encode_request(wire.RequestHeader(api_key, high, 7, "hold"), request)
            if len(frame) in seen:
                continue  # deep is wide for this api: no nested array
            seen.add(len(frame))
            frames.append((f"api {api_key} v{high} {shape} ({len(frame)} bytes)", frame))
    return frames


async def _send_then_api_versions(port: int, frame: bytes) -> None:
    """``frame``, then an ApiVersions on the same connection, whose answer comes after the
    first's (or the first got none: a closed connection also ends the exchange)."""
    module: Any = request_module(18, 3)
    versions = make(
        module.ApiVersionsRequest, {"client_software_name": "h", "client_software_version": "1"}
    )
    tail = wire.encode_request(wire.RequestHeader(18, 3, 99, "hold"), versions)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(frame + tail)
        while True:
            answer = await asyncio.wait_for(wire.read_frame(reader), 60)
            if int.from_bytes(answer[:4], "big", signed=True) == 99:
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        return
    finally:
        writer.close()


def test_no_request_of_any_api_holds_the_loop_past_a_slice(tmp_path: Path) -> None:
    """Issue 22: a big request of every API both listeners serve, wide (20,000 top-level
    entities) and deep (one entity holding 20,000): the longest loop step stays under
    SWEEP_STEP_CPU_BOUND_S of CPU, and the broker is never fenced."""
    path, port = format_node(tmp_path)
    controller_port = _controller_port(path)

    async def scenario() -> tuple[list[tuple[str, Hold]], bool]:
        async with running_node(path) as node:
            broker_apis = dict(node.apis["PLAINTEXT"].supported_apis)
            controller_apis = node._controller_apis()
            sends = [
                (f"client {what}", port, frame) for what, frame in _frames(broker_apis, SWEEP_ITEMS)
            ] + [
                (f"controller {what}", controller_port, frame)
                for what, frame in _frames(controller_apis, SWEEP_ITEMS)
            ]
            holds = []
            for what, target, frame in sends:

                async def send(target: int = target, frame: bytes = frame) -> None:
                    await _send_then_api_versions(target, frame)

                hold, _ = await worst_hold(send)
                holds.append((what, hold))
            assert node.loader is not None
            return holds, node.loader.image.cluster.brokers[1].fenced

    holds, fenced = asyncio.run(scenario())
    worst = max(holds, key=lambda item: item[1].cpu_s)
    print(f"{len(holds)} big requests; worst loop hold: {worst[0]}: {worst[1]}")
    assert len(holds) > 60
    assert not fenced
    over = [(what, str(hold)) for what, hold in holds if hold.cpu_s >= SWEEP_STEP_CPU_BOUND_S]
    assert not over, over


@pytest.mark.parametrize(
    ("api_key", "version", "shape"),
    [(1, 12, "deep"), (0, 9, "deep"), (19, 7, "flat"), (20, 6, "flat")],
    ids=["fetch-200k-partitions", "produce-200k-partitions", "create-200k-topics", "delete-200k"],
)
def test_the_issues_200k_item_requests_hold_the_loop_below_a_bound(
    tmp_path: Path, api_key: int, version: int, shape: str
) -> None:
    """The issue's cases: on main a Fetch naming 200,000 partitions held the loop 10 s, a
    Produce 7-12.7 s, a CreateTopics with validate_only of 200,000 names 44 s of CPU (the
    controller failed over), a DeleteTopics 27 s. What remains one step is decoding the
    request (and the controller's answer, forwarded): ~1.5 us an entity."""
    request = big_request(api_key, version, 200_000, shape)
    frame = wire.encode_request(wire.RequestHeader(api_key, version, 7, "hold"), request)
    path, port = format_node(tmp_path)

    async def scenario() -> tuple[Hold, bool]:
        async with running_node(path) as node:

            async def send() -> None:
                await _send_then_api_versions(port, frame)

            hold, _ = await worst_hold(send)
            assert node.loader is not None
            return hold, node.loader.image.cluster.brokers[1].fenced

    hold, fenced = asyncio.run(scenario())
    print(f"api {api_key} v{version} {shape} of 200,000 ({len(frame)} bytes): worst hold {hold}")
    assert not fenced
    assert hold.cpu_s < BIG_STEP_CPU_BOUND_S


def test_storing_and_searching_a_batch_of_a_million_records_holds_the_loop_below_a_slice(
    tmp_path: Path,
) -> None:
    """Issue 22: storing the worst legal batch (1 MiB of zstd inflating to 16 MiB, 1.78M
    records) held the loop 7.9 s, and 64 concurrent ListOffsets by timestamp into it kept
    ApiVersions waiting 5 s. A batch of a million records is now walked in slices, to
    validate it (log/validator.py) and to find a timestamp in it (log/log.py)."""
    base_ms = 1_767_225_600_000
    records = [Record(None, b"", base_ms + i // 1000) for i in range(1_000_000)]
    batch = encode_batch(records, compression=Compression.ZSTD)
    path, port = format_node(tmp_path)
    produce_module: Any = request_module(0, 9)
    data = make(produce_module.PartitionProduceData, {"index": 0, "records": batch})
    topic = make(produce_module.TopicProduceData, {"name": "worst", "partition_data": (data,)})
    produce = make(
        produce_module.ProduceRequest,
        {"acks": 1, "timeout": timedelta(seconds=30), "topic_data": (topic,)},
    )
    list_module: Any = request_module(2, 7)
    wanted = make(
        list_module.ListOffsetsPartition, {"partition_index": 0, "timestamp": base_ms + 999}
    )
    lookup = make(
        list_module.ListOffsetsRequest,
        {
            "replica_id": -1,
            "topics": (
                make(list_module.ListOffsetsTopic, {"name": "worst", "partitions": (wanted,)}),
            ),
        },
    )

    async def scenario() -> tuple[Hold, Hold, int, list[int], bool]:
        async with running_node(path) as node:
            connection = await connect("127.0.0.1", port)
            assert await create_topic(connection, "worst") == ErrorCode.none
            await wait_for_leader(connection, "worst")
            await connection.close()
            send = await exchange(port, 0, 9, produce)
            stored, answer = await worst_hold(send)
            _cid, response = wire.decode_response(0, 9, answer)
            code = response.responses[0].partition_responses[0].error_code
            lookups = [await exchange(port, 2, 7, lookup) for _ in range(8)]

            async def search() -> list[bytes]:
                return await asyncio.gather(*(one() for one in lookups))

            searched, answers = await worst_hold(search)
            offsets = []
            for frame in answers:
                _cid, found = wire.decode_response(2, 7, frame)
                offsets.append(found.topics[0].partitions[0].offset)
            assert node.loader is not None
            fenced = node.loader.image.cluster.brokers[1].fenced
            return stored, searched, code, offsets, fenced

    stored, searched, code, offsets, fenced = asyncio.run(scenario())
    print(
        f"1M-record batch ({len(batch)} bytes): stored with a worst hold of {stored}; "
        f"8 concurrent lookups by timestamp: {searched}"
    )
    assert code == ErrorCode.none
    assert offsets == [999_000] * 8  # the first record of the last millisecond
    assert not fenced
    assert stored.cpu_s < SWEEP_STEP_CPU_BOUND_S
    assert searched.cpu_s < SWEEP_STEP_CPU_BOUND_S
