"""The wire fuzzer: random and mutated frames of every API a real node answers, on each of
its listeners (a SASL_PLAINTEXT one among them, whose login exchange is fuzzed), and after
each batch the node must still be whole.

One kraft-server process (a combined broker+controller, its working directory an empty
dir of its own) serves the whole module. For each listener the fuzzer asks ApiVersions what
it answers, builds a valid request of every advertised (api key, version) with kio (every
array holding one element, every field its zero), and hypothesis then sends batches of
frames derived from them: sent as built, truncated, bytes flipped, int32 fields (array and
string lengths among them) overwritten with extremes, a compact length made huge, bytes
inserted or deleted, the header's
version or api key replaced, the length prefix lying, or plain garbage. After each batch:

- the process is alive;
- a normal produce (acks=-1) and a read back of what it wrote still work;
- its resident memory (VmRSS in /proc/PID/status) stays under RSS_BOUND_BYTES;
- nothing exists on disk outside log.dirs (its working dir stays empty, and the test root
  holds only what the test put there).

The CI slice runs FUZZ_EXAMPLES (200) batches per listener (10-30 s in all); a longer run is
``KRAFT_FUZZ_EXAMPLES=5000 pytest tests/fuzz -q`` (docs/operations.md, "Limits and bad
input"). A failing batch is shrunk by hypothesis and printed, frames as bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import struct
import types
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, get_args, get_origin

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from log.batch import encode_batch
from log.records import Record
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.kraft.procs import Processes, free_port, port_open, wait_until
from tests.kraft.wire_client import connect, create_topic, produce, read_all, wait_for_leader

FUZZ_EXAMPLES = int(os.environ.get("KRAFT_FUZZ_EXAMPLES", "200"))
RSS_BOUND_BYTES = 512 * 1024 * 1024
ANSWER_WAIT_S = 0.5  # how long a batch's answers are read before its connection is dropped
CANARY = "fuzz-canary"  # only the checks write here
TARGET = "fuzz-target"  # what the data-plane templates name: the fuzzer writes here
HUGE_VARINTS = (b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\xff\xff\x03")
INT32_EXTREMES = (-1, 0x7FFFFFFF, -0x80000000, 0x10000000, 0x7FFF, 1 << 20)
MUTATIONS = (
    "valid", "truncate", "flip", "int32", "varint", "insert", "delete", "version", "api_key",
    "length", "garbage",
)  # fmt: skip


# ---- the node -------------------------------------------------------------------------------


@dataclasses.dataclass
class Node:
    procs: Processes
    root: Path
    cwd: Path
    log_dirs: Path
    listeners: dict[str, int]  # name -> port
    # Taken once the node serves: kio imports hypothesis when it is installed (a test
    # dependency here, absent from a production install), and hypothesis then writes
    # .hypothesis/ into the working dir at start-up; the fuzzing must add nothing.
    files_at_start: set[str] = dataclasses.field(default_factory=set)

    @property
    def pid(self) -> int:
        return self.procs.procs[1].pid


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    root = tmp_path_factory.mktemp("fuzz")
    broker_port, controller_port, sasl_port = free_port(), free_port(), free_port()
    log_dirs = root / "data1"
    procs = Processes(
        root,
        {
            1: {
                "process.roles": "broker,controller",
                "node.id": "1",
                "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
                "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},"
                f"CONTROLLER://127.0.0.1:{controller_port},"
                f"SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(log_dirs),
                # A SASL listener: everything before the login is fuzzed there.
                "listener.security.protocol.map": (
                    "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"
                ),
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'user_fuzz="fuzz-secret";'
                ),
            }
        },
    )
    cwd = root / "cwd"
    cwd.mkdir()
    procs.start(1, cwd=cwd)
    try:
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener opens")
        node = Node(
            procs,
            root,
            cwd,
            log_dirs,
            {"client": broker_port, "controller": controller_port, "sasl": sasl_port},
        )

        async def canary_topic() -> None:
            connection = await connect("127.0.0.1", broker_port)
            for topic in (CANARY, TARGET):
                assert await create_topic(connection, topic) == ErrorCode.none
                await wait_for_leader(connection, topic)
            await connection.close()

        asyncio.run(canary_topic())
        node.files_at_start = outside_log_dirs(node)
        yield node
    finally:
        procs.cleanup()


def check_whole(node: Node, probe: int) -> None:
    """The node is alive, serves a produce and a read, is within its memory bound, and
    has written nothing outside log.dirs."""
    proc = node.procs.procs[1]
    assert proc.poll() is None, (
        f"the node died (exit {proc.returncode}):\n{node.procs.log(1)[-3000:]}"
    )

    async def produce_and_read() -> None:
        connection = await connect("127.0.0.1", node.listeners["client"], deadline_s=5)
        value = f"probe-{probe}".encode()
        code, _ = await produce(connection, CANARY, [value])
        assert code == ErrorCode.none, code
        assert value in await read_all(connection, CANARY)
        await connection.close()

    asyncio.run(produce_and_read())
    status = Path(f"/proc/{node.pid}/status").read_text()
    (rss_kb,) = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")]
    assert rss_kb * 1024 < RSS_BOUND_BYTES, f"RSS {rss_kb} kB"
    assert outside_log_dirs(node) == node.files_at_start, "the node wrote outside log.dirs"


def outside_log_dirs(node: Node) -> set[str]:
    """Every path under the test's root (the node's working dir included) that is not in
    log.dirs or the node's own output."""
    return {
        str(path.relative_to(node.root))
        for path in node.root.rglob("*")
        if not path.is_relative_to(node.log_dirs) and path.name != "node1.log"
    }


# ---- what to send ------------------------------------------------------------------------------


def advertised(port: int) -> dict[int, tuple[int, int]]:
    """api key -> (min, max) version, as the listener's ApiVersions answers."""

    async def ask() -> dict[int, tuple[int, int]]:
        connection = KafkaConnection("fuzz")
        await connection.connect("127.0.0.1", port, 5)
        module: Any = request_module(ApiKey.API_VERSIONS, 3)
        request = make(
            module.ApiVersionsRequest,
            {"client_software_name": "fuzz", "client_software_version": "1"},
        )
        response: Any = await connection.request(request, 5)
        await connection.close()
        return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    return asyncio.run(ask())


def _array_element(annotation: Any) -> Any:
    """The element type of an array field (nullable or not), None for any other field."""
    if get_origin(annotation) is types.UnionType:
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    return get_args(annotation)[0] if get_origin(annotation) is tuple else None


def _one_of_each(entity_type: Any) -> Any:
    """A valid entity whose every array of entities holds one (recursively built) element."""
    values: dict[str, object] = {}
    for field in dataclasses.fields(entity_type):
        element = _array_element(field.type)
        if element is not None and dataclasses.is_dataclass(element):
            values[field.name] = (_one_of_each(element),)
    return make(entity_type, values)


def _request_class(api_key: int, version: int) -> Any:
    module: types.ModuleType = request_module(api_key, version)
    return next(
        getattr(module, name)
        for name in dir(module)
        if name.endswith("Request")
        and getattr(getattr(module, name), "__api_key__", None) == api_key
    )


def templates(apis: dict[int, tuple[int, int]]) -> list[bytes]:
    """A valid request frame (length prefix included) of every advertised api and version,
    in two shapes: every field zero (empty arrays), and one element in every array."""
    frames = []
    for api_key, (low, high) in sorted(apis.items()):
        for version in range(low, high + 1):
            cls = _request_class(api_key, version)
            header = wire.RequestHeader(api_key, version, 1, "fuzz")
            frames.append(wire.encode_request(header, make(cls, {})))
            frames.append(wire.encode_request(header, _one_of_each(cls)))
    for api_key, version, values in _meaningful():
        if apis.get(api_key, (0, -1))[0] <= version <= apis.get(api_key, (0, -1))[1]:
            header = wire.RequestHeader(api_key, version, 1, "fuzz")
            frames.append(wire.encode_request(header, _build(api_key, version, values)))
    return frames


def _build(api_key: int, version: int, values: dict[str, Any]) -> Any:
    """A request of (api, version) from nested dicts: a dict value (or a tuple of them)
    becomes the entity its field's annotation names."""
    return _entity(_request_class(api_key, version), values)


def _entity(entity_type: Any, values: dict[str, Any]) -> Any:
    built = dict(values)
    for field in dataclasses.fields(entity_type):
        value = values.get(field.name)
        if isinstance(value, tuple) and value and isinstance(value[0], dict):
            element = _array_element(field.type)
            built[field.name] = tuple(_entity(element, item) for item in value)
    return make(entity_type, built)


def _meaningful() -> list[tuple[int, int, dict[str, Any]]]:
    """Requests a client really sends, naming a real topic, so mutations reach the
    handlers' deeper paths: Produce of a real batch, Fetch, ListOffsets, Metadata,
    CreateTopics and CreatePartitions."""
    batch = bytes(encode_batch([Record(b"k", b"v" * 20, 1_767_225_600_000)] * 2))
    produce = {
        "acks": 1,
        "timeout": timedelta(seconds=1),
        "topic_data": ({"name": TARGET, "partition_data": ({"index": 0, "records": batch},)},),
    }
    fetch = {
        "replica_id": -1,
        "max_wait": timedelta(milliseconds=10),
        "max_bytes": 1 << 20,
        "topics": (
            {"topic": TARGET, "partitions": ({"fetch_offset": 0, "partition_max_bytes": 4096},)},
        ),
    }
    list_offsets = {
        "replica_id": -1,
        "topics": ({"name": TARGET, "partitions": ({"partition_index": 0, "timestamp": -1},)},),
    }
    metadata = {"topics": ({"name": TARGET}, {"name": "fuzz-auto"})}
    create = {
        "topics": ({"name": "fuzz-new", "num_partitions": 2, "replication_factor": 1},),
        "timeout": timedelta(seconds=1),
    }
    grow = {"topics": ({"name": TARGET, "count": 2},), "timeout": timedelta(seconds=1)}
    # The SASL exchange: handshakes naming each mechanism, PLAIN tokens wrong and right, and
    # a SCRAM client-first (on the SASL listener only; elsewhere they close the connection).
    plain = {"mechanism": "PLAIN"}
    scram = {"mechanism": "SCRAM-SHA-512"}
    wrong = {"auth_bytes": b"\x00fuzz\x00guess"}
    right = {"auth_bytes": b"\x00fuzz\x00fuzz-secret"}
    first = {"auth_bytes": b"n,,n=fuzz,r=fyko+d2lbbFgONRv9qkxdawL"}
    return [
        (0, 9, produce), (0, 3, produce), (1, 12, fetch), (1, 4, fetch), (2, 7, list_offsets),
        (3, 12, metadata), (3, 1, metadata), (19, 7, create), (19, 2, create), (37, 3, grow),
        (17, 1, plain), (17, 1, scram), (36, 2, wrong), (36, 2, right), (36, 0, right),
        (36, 2, first),
    ]  # fmt: skip


def _reframe(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@st.composite
def mutated(draw: st.DrawFn, frames: list[bytes]) -> bytes:
    """One frame: a template sent as built or mutated, or garbage."""
    frame = draw(st.sampled_from(frames))
    body = bytearray(frame[4:])
    kind = draw(st.sampled_from(MUTATIONS))
    if kind == "truncate":
        return _reframe(bytes(body[: draw(st.integers(0, max(0, len(body) - 1)))]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            position = draw(st.integers(0, len(body) - 1))
            body[position] ^= draw(st.integers(1, 255))
    elif kind == "int32" and len(body) >= 4:
        position = draw(st.integers(0, len(body) - 4))
        body[position : position + 4] = struct.pack(">i", draw(st.sampled_from(INT32_EXTREMES)))
    elif kind == "varint":  # a compact (flexible) length claiming billions of items or bytes
        position = draw(st.integers(0, len(body) - 1))
        body[position : position + 1] = draw(st.sampled_from(HUGE_VARINTS))
    elif kind == "insert":
        position = draw(st.integers(0, len(body)))
        body[position:position] = draw(st.binary(min_size=1, max_size=16))
    elif kind == "delete" and len(body) > 1:
        position = draw(st.integers(0, len(body) - 1))
        del body[position : position + draw(st.integers(1, 8))]
    elif kind == "version":
        body[2:4] = struct.pack(">h", draw(st.integers(-0x8000, 0x7FFF)))
    elif kind == "api_key":
        body[0:2] = struct.pack(">h", draw(st.integers(-0x8000, 0x7FFF)))
    elif kind == "length":
        declared = draw(st.sampled_from((0, 1, len(body) - 1, len(body) + 7, -1, 0x7FFFFFFF)))
        return struct.pack(">i", declared) + bytes(body)
    elif kind == "garbage":
        return _reframe(draw(st.binary(max_size=64)))
    return _reframe(bytes(body))


async def _send(port: int, frames: list[bytes]) -> None:
    """Send ``frames`` on one connection, read what comes back for a moment, hang up."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return  # checked by check_whole: a node that stopped accepting is caught there
    try:
        writer.write(b"".join(frames))
        writer.write_eof()
        async with asyncio.timeout(ANSWER_WAIT_S):
            while await reader.read(65536):
                pass
    except (OSError, TimeoutError):
        pass
    finally:
        writer.transport.abort()


FUZZ_SETTINGS = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("listener", ["client", "controller", "sasl"])
def test_no_frame_takes_the_node_down(node: Node, listener: str) -> None:
    port = node.listeners[listener]
    frames = templates(advertised(port))
    probes = iter(range(1_000_000))

    @FUZZ_SETTINGS
    @given(batch=st.lists(mutated(frames), min_size=1, max_size=8))
    def fuzz(batch: list[bytes]) -> None:
        asyncio.run(_send(port, batch))
        check_whole(node, next(probes))

    fuzz()
