"""No single request holds a node's event loop long enough to miss a broker heartbeat.

A combined broker+controller runs in this process on the real runtime, beside a probe task
that records what the loop did between its wake-ups: the stretch during which nothing else
could run (a heartbeat, a Raft fetch, another client). The sweep over every API (issue 22)
measures it in work, not time: its probe yields at every turn of the loop and counts the
profiler events of each turn (``busiest_step``), the same on any machine, and the decoding
of each request is watched step by step (``DecodeSteps``); the other tests count the same
events. Only the 200k-item requests' CPU (``worst_hold``) is printed, never asserted: a
slower host must not fail a test (bench/bench_loop_hold.py has the figures).
Requests go over a real socket as bytes encoded before the probe starts, and their answers
are read as bytes, so the probe measures the node, not this test's client. On main, a
Metadata request naming 100,000 missing topics with auto-creation on held the loop for
12 s (the node fenced itself) and logged 95,000 warnings; a CreateTopics of 7,000
partitions failed with RecordTooLargeError and the client waited out its 30 s timeout.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator
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
from protocol.incremental import SLICE_UNITS
from tests.kraft.big_requests import big_request
from tests.kraft.inprocess import CLUSTER_ID, format_node
from tests.kraft.wire_client import connect, create_topic, wait_for_leader

# The most profiler events (calls and returns, see busiest_step) one turn may do and stay
# well under a heartbeat interval (broker.heartbeat.interval.ms, 2 s): with the profiler
# on, a slow host does 2 million a second (this 2-core one about 4 million), so 4 million
# is under 2 s even there. On main before issue 22, the 100k-topic Metadata was one 12 s
# turn (tens of millions); now 1.2 million; the 7,000-partition CreateTopics, one topic
# and so one controller slice, about 3 million (issue 22's remaining work: a topic's
# partitions in slices).
HEARTBEAT_EVENTS_BOUND = 4_000_000
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


@dataclass(frozen=True, slots=True)
class Steps:
    """What the loop did between two consecutive runs of a probe that yields at every turn
    of the loop (``await asyncio.sleep(0)``): the most profiler events (Python and C
    function calls and returns, counted by sys.setprofile) in any one turn, a count of
    work that does not depend on the machine, unlike its CPU or wall time (the figure a
    2-core CI host failed on); and, for the record only, the longest turn's CPU time."""

    turns: int
    most_events: int
    longest_cpu_s: float

    def __str__(self) -> str:
        return (
            f"{self.turns} turns, at most {self.most_events} profiler events in one "
            f"({self.longest_cpu_s * 1000:.0f} ms of CPU at most, not asserted)"
        )


async def busiest_step(work: Callable[[], Awaitable[Any]]) -> tuple[Steps, Any]:
    """(the loop's turns while ``work`` ran, its result). The profiler counts every call
    and return in this thread, the node's and the probe's; its own cost makes the node
    about 3x slower, the same on every machine."""
    loop = asyncio.get_running_loop()
    events = [0]
    most, longest, turns = 0, 0.0, 0

    def count(_frame: object, _event: str, _arg: object) -> None:
        events[0] += 1

    async def probe() -> None:
        nonlocal most, longest, turns
        last, last_cpu = events[0], time.thread_time()
        while True:
            await asyncio.sleep(0)
            now, now_cpu = events[0], time.thread_time()
            turns += 1
            most, longest = max(most, now - last), max(longest, now_cpu - last_cpu)
            last, last_cpu = now, now_cpu

    task = loop.create_task(probe())
    await asyncio.sleep(0)
    sys.setprofile(count)
    try:
        result = await work()
    finally:
        sys.setprofile(None)
        task.cancel()
    return Steps(turns, most, longest), result


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

    async def scenario() -> tuple[Steps, Any, bool]:
        async with running_node(path) as node:
            send = await exchange(port, METADATA, 12, request)
            hold, answer = await busiest_step(send)
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
    assert hold.most_events < HEARTBEAT_EVENTS_BOUND
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

    async def scenario() -> tuple[Steps, bytes, int]:
        async with running_node(path) as node:
            await register_remote_broker(node, 2)
            send = await exchange(port, CREATE_TOPICS, 7, request)
            hold, answer = await busiest_step(send)
            assert node.loader is not None
            wide = node.loader.image.topics.get("wide")
            return hold, answer, len(wide.partitions) if wide else 0

    hold, answer, partitions = asyncio.run(scenario())
    print(f"CreateTopics of 7000 partitions: worst loop hold {hold}")
    _cid, response = wire.decode_response(CREATE_TOPICS, 7, answer)
    (result,) = response.topics
    assert result.error_code == ErrorCode.none, result.error_message
    assert partitions == 7000
    assert hold.most_events < HEARTBEAT_EVENTS_BOUND


# ---- every API, with big requests (issue 22) ------------------------------------------------

# Entities per request in the sweep over every API (wide and deep): frames of 40-250 KB.
# The slow run sends requests of 50,000 (0.5-3 MB); the issue's own cases (200,000
# partitions or topics, 5-15 MB) are the tests after it.
SWEEP_ITEMS = 4_000
SLOW_SWEEP_ITEMS = 50_000
# The most work one turn of the loop may do, in profiler events (a call or a return, Python
# or C): decoding does SLICE_UNITS array elements a turn, at most ~45 events each (the
# walk, then kio's reading: 48,700 events in the busiest decode turn measured), and every
# handler stays within the same (SLICE_PARTITIONS, SLICE_ENTITIES, TOPICS_PER_SLICE and
# ENCODE_SLICE_ENTITIES: at most 52,000 events in a turn measured, at either size). A
# request of SWEEP_ITEMS entities decoded in one turn is 80,000-140,000 events; of
# SLOW_SWEEP_ITEMS, a million or more. Issue 22 began with 64 (listener, api, shape)
# requests whose handling did work proportional to the request in one turn (up to 109
# events an entity: 3.3 million for an OffsetFetch of 50,000 groups); every request is now
# held to the one bound, at 4,000 entities and at 50,000.
STEP_EVENTS_BOUND = 60 * SLICE_UNITS


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


async def _send_then_api_versions(port: int, frame: bytes) -> bool:
    """``frame``, then an ApiVersions on the same connection, whose answer comes after the
    first's: whether the first was answered (False: the connection was closed first)."""
    module: Any = request_module(18, 3)
    versions = make(
        module.ApiVersionsRequest, {"client_software_name": "h", "client_software_version": "1"}
    )
    tail = wire.encode_request(wire.RequestHeader(18, 3, 99, "hold"), versions)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answered = False
    try:
        writer.write(frame + tail)
        while True:
            answer = await asyncio.wait_for(wire.read_frame(reader), 60)
            correlation_id = int.from_bytes(answer[:4], "big", signed=True)
            answered = answered or correlation_id == 7
            if correlation_id == 99:
                return answered
    except (asyncio.IncompleteReadError, ConnectionError):
        return answered
    finally:
        writer.close()


class DecodeSteps:
    """The units of work of each step of every request a listener decodes in this process
    (wire.decode_request_steps, which protocol/server.py drives, watched): what a request
    decoded whole would show as no steps at all."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.units: list[int] = []
        real = wire.decode_request_steps

        def watched(*args: Any, **kwargs: Any) -> Generator[int, None, Any]:
            steps = real(*args, **kwargs)
            while True:
                try:
                    self.units.append(next(steps))
                except StopIteration as done:
                    return done.value
                yield self.units[-1]

        monkeypatch.setattr(wire, "decode_request_steps", watched)

    def take(self) -> list[int]:
        units, self.units = self.units, []
        return units


@pytest.mark.parametrize(
    "items", [SWEEP_ITEMS, pytest.param(SLOW_SWEEP_ITEMS, marks=pytest.mark.slow)]
)
def test_no_request_of_any_api_holds_the_loop_past_a_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, items: int
) -> None:
    """Issue 22: a big request of every API both listeners serve, wide (``items`` top-level
    entities) and deep (one entity holding ``items``): each is decoded in steps of at most
    SLICE_UNITS elements; no turn of the loop does more than STEP_EVENTS_BOUND profiler
    events of work, whatever the request's size; every request is answered before the
    ApiVersions sent behind it; the broker is never fenced."""
    decoding = DecodeSteps(monkeypatch)
    path, port = format_node(tmp_path)
    controller_port = _controller_port(path)

    async def scenario() -> tuple[
        list[tuple[str, tuple[str, int, str], Steps, bool, list[int]]], bool
    ]:
        async with running_node(path) as node:
            broker_apis = dict(node.served["PLAINTEXT"].versions)
            assert node._controller_served is not None
            controller_apis = dict(node._controller_served.versions)
            sends = [
                ("client", what, port, frame) for what, frame in _frames(broker_apis, items)
            ] + [
                ("controller", what, controller_port, frame)
                for what, frame in _frames(controller_apis, items)
            ]
            measured = []
            for listener, what, target, frame in sends:

                async def send(target: int = target, frame: bytes = frame) -> bool:
                    return await _send_then_api_versions(target, frame)

                decoding.take()
                steps, answered = await busiest_step(send)
                api_key, shape = int.from_bytes(frame[4:6], "big"), what.split()[3]
                key = (listener, api_key, shape)
                measured.append((f"{listener} {what}", key, steps, answered, decoding.take()))
            assert node.loader is not None
            return measured, node.loader.image.cluster.brokers[1].fenced

    measured, fenced = asyncio.run(scenario())
    for what, _key, steps, answered, decoded in sorted(measured, key=lambda m: -m[2].most_events):
        print(f"{what}: {steps}, {len(decoded)} decoding steps{'' if answered else ', closed'}")
    assert len(measured) > 60
    assert not fenced
    unanswered = [what for what, _key, _steps, answered, _decoded in measured if not answered]
    assert not unanswered, unanswered
    # Decoding: every request of more than a slice of elements in steps of at most a slice.
    whole = [what for what, _key, _steps, _answered, decoded in measured if not decoded]
    assert not whole, whole
    too_big = [what for what, *_rest, decoded in measured if max(decoded) > SLICE_UNITS + 1]
    assert not too_big, too_big
    # Every turn of the loop: a slice of work, whatever the request's size.
    over = [
        (what, str(steps))
        for what, _key, steps, _answered, _decoded in measured
        if steps.most_events > STEP_EVENTS_BOUND
    ]
    assert not over, over


@pytest.mark.parametrize(
    ("api_key", "version", "shape"),
    [(1, 12, "deep"), (0, 9, "deep"), (19, 7, "flat"), (20, 6, "flat")],
    ids=["fetch-200k-partitions", "produce-200k-partitions", "create-200k-topics", "delete-200k"],
)
def test_the_issues_200k_item_requests_are_decoded_in_slices_and_answered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api_key: int, version: int, shape: str
) -> None:
    """The issue's cases: on main a Fetch naming 200,000 partitions held the loop 10 s, a
    Produce 7-12.7 s, a CreateTopics with validate_only of 200,000 names 44 s of CPU (the
    controller failed over), a DeleteTopics 27 s. Each is now decoded in at least 400
    steps of at most SLICE_UNITS elements (one step of 0.25-0.5 s of CPU before) and
    answered, and the broker is never fenced. (Not profiled: at this size the profiler's
    cost would make the test minutes long; the sweep above profiles every API.)"""
    decoding = DecodeSteps(monkeypatch)
    request = big_request(api_key, version, 200_000, shape)
    frame = wire.encode_request(wire.RequestHeader(api_key, version, 7, "hold"), request)
    path, port = format_node(tmp_path)

    async def scenario() -> tuple[Hold, bool, bool]:
        async with running_node(path) as node:

            async def send() -> bool:
                return await _send_then_api_versions(port, frame)

            hold, answered = await worst_hold(send)
            assert node.loader is not None
            return hold, answered, node.loader.image.cluster.brokers[1].fenced

    hold, answered, fenced = asyncio.run(scenario())
    units = decoding.take()
    print(
        f"api {api_key} v{version} {shape} of 200,000 ({len(frame)} bytes): {len(units)} "
        f"decoding steps; longest turn {hold} (not asserted)"
    )
    assert answered
    assert not fenced
    assert len(units) >= 2 * 200_000 // (SLICE_UNITS + 1)  # walked, then read
    assert max(units) <= SLICE_UNITS + 1


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

    async def scenario() -> tuple[Steps, Steps, int, list[int], bool]:
        async with running_node(path) as node:
            connection = await connect("127.0.0.1", port)
            assert await create_topic(connection, "worst") == ErrorCode.none
            await wait_for_leader(connection, "worst")
            # Metadata names the leader from the image before the replica manager has
            # opened the partition (Kafka's order too): a client retries the produce's
            # retriable error; this one, sending pre-encoded bytes, waits for the partition.
            latest = make(
                list_module.ListOffsetsRequest,
                {
                    "replica_id": -1,
                    "topics": (
                        make(
                            list_module.ListOffsetsTopic,
                            {
                                "name": "worst",
                                "partitions": (
                                    make(
                                        list_module.ListOffsetsPartition,
                                        {"partition_index": 0, "timestamp": -1},
                                    ),
                                ),
                            },
                        ),
                    ),
                },
            )
            deadline = asyncio.get_running_loop().time() + 30
            while True:
                ready: Any = await connection.request(latest, 30)
                if ready.topics[0].partitions[0].error_code == ErrorCode.none:
                    break
                assert asyncio.get_running_loop().time() < deadline, "the partition never opened"
                await asyncio.sleep(0.05)
            await connection.close()
            send = await exchange(port, 0, 9, produce)
            stored, answer = await busiest_step(send)
            _cid, response = wire.decode_response(0, 9, answer)
            code = response.responses[0].partition_responses[0].error_code
            lookups = [await exchange(port, 2, 7, lookup) for _ in range(8)]

            async def search() -> list[bytes]:
                return await asyncio.gather(*(one() for one in lookups))

            searched, answers = await busiest_step(search)
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
    assert stored.most_events < STEP_EVENTS_BOUND
    assert searched.most_events < STEP_EVENTS_BOUND
