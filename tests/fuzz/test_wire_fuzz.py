"""The wire fuzzer: random and mutated frames of every API a real node answers, on each of
its listeners (a SASL_PLAINTEXT one among them, whose login exchange is fuzzed), and after
each batch the node must still be whole; on its SSL and SASL_SSL listeners the frames go
inside TLS. TLS records themselves are fuzzed on those two and sent to the plaintext ones
(the tests at the end of the file).

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

A second test sends the hostile shapes of issue 22 (``hostile_frames``): requests of huge
arrays (20,000 entities, wide and deep, built by tests/kraft/big_requests.py), strings past
Kafka's 32,767-byte bounds, KIP-848 heartbeats subscribing to regexes whose RE2 program is
huge, and JoinGroups of 1 MiB metadata that park in a rebalance. Meanwhile a probe
connection sends ApiVersions every PROBE_INTERVAL_S and times the answers: the longest wait
is the longest the node's loop was held (plus the network and the host's load), reported
at the end of the run; the canary partition's leader epoch, unmoved across the run, shows
no step outlasted the broker session (a fenced broker loses its leadership).

The CI slice runs FUZZ_EXAMPLES (200) batches per listener (10-30 s in all) and a tenth of
that of hostile shapes; a longer run is ``KRAFT_FUZZ_EXAMPLES=5000 pytest tests/fuzz -q -s``
(docs/operations.md, "Limits and bad input"). A failing batch is shrunk by hypothesis and
printed, frames as bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import ssl
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

from broker.acceptor import TLS_HANDSHAKE_S
from broker.client import KafkaConnection
from log.batch import encode_batch
from log.records import Record
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.kraft.big_requests import big_request
from tests.kraft.procs import Processes, free_port, port_open, wait_until
from tests.kraft.secured import make_ca
from tests.kraft.wire_client import (
    connect,
    create_topic,
    leader_epochs,
    produce,
    read_all,
    wait_for_leader,
)

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
    ca: Path  # the CA the TLS listeners' certificate is signed by
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
    ssl_port, sasl_ssl_port = free_port(), free_port()
    log_dirs = root / "data1"
    certs = make_ca(root / "certs")
    identity = certs.identity("node-1", ips=("127.0.0.1",))
    procs = Processes(
        root,
        {
            1: {
                "process.roles": "broker,controller",
                "node.id": "1",
                "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
                "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},"
                f"CONTROLLER://127.0.0.1:{controller_port},"
                f"SASL_PLAINTEXT://127.0.0.1:{sasl_port},"
                f"SSL://127.0.0.1:{ssl_port},"
                f"SASL_SSL://127.0.0.1:{sasl_ssl_port}",
                "controller.listener.names": "CONTROLLER",
                "log.dirs": str(log_dirs),
                # A SASL listener: everything before the login is fuzzed there; TLS
                # listeners: TLS records are fuzzed there (with and without SASL behind).
                "listener.security.protocol.map": (
                    "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                    "SSL:SSL,SASL_SSL:SASL_SSL"
                ),
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'user_fuzz="fuzz-secret";'
                ),
                "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'user_fuzz="fuzz-secret";'
                ),
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(identity.keystore_pem),
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
            {
                "client": broker_port,
                "controller": controller_port,
                "sasl": sasl_port,
                "ssl": ssl_port,
                "sasl_ssl": sasl_ssl_port,
            },
            certs.ca,
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


async def _send(port: int, frames: list[bytes], ca: Path | None = None) -> None:
    """Send ``frames`` on one connection (inside TLS, trusting ``ca``, when given), read what
    comes back for a moment, hang up."""
    try:
        if ca is None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        else:
            context = ssl.create_default_context(cafile=str(ca))
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
            )
    except OSError:
        return  # checked by check_whole: a node that stopped accepting is caught there
    try:
        writer.write(b"".join(frames))
        if writer.can_write_eof():  # TLS cannot half-close: the answers are read a moment
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


@pytest.mark.parametrize("listener", ["client", "controller", "sasl", "ssl", "sasl_ssl"])
def test_no_frame_takes_the_node_down(node: Node, listener: str) -> None:
    """On the TLS listeners the frames go inside TLS: on SASL_SSL, the SASL exchange (and
    everything sent before it) is fuzzed behind TLS."""
    port = node.listeners[listener]
    ca = node.ca if listener in ("ssl", "sasl_ssl") else None
    if ca is None:
        apis = advertised(port)
    else:
        response = asyncio.run(_api_versions_over_tls(port, ca))
        apis = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    frames = templates(apis)
    probes = iter(range(1_000_000))

    @FUZZ_SETTINGS
    @given(batch=st.lists(mutated(frames), min_size=1, max_size=8))
    def fuzz(batch: list[bytes]) -> None:
        asyncio.run(_send(port, batch, ca))
        check_whole(node, next(probes))

    fuzz()


# ---- hostile shapes and the longest loop step (issue 22) -------------------------------------

HUGE_ITEMS = 20_000
PROBE_INTERVAL_S = 0.02
HOSTILE_REGEXES = ("d{0,1000}" * 100, "(d{0,1000})" * 90, "(a+)+" * 100, "[" * 10)
# The apis whose huge-array requests the fuzzer sends (those a client reaches with arrays
# of topics, partitions, groups or members), where the listener serves them.
HUGE_APIS = (0, 1, 2, 3, 8, 9, 11, 14, 15, 16, 19, 20, 23, 32, 37, 42, 44, 47, 68, 69, 75)


def _frame(api_key: int, version: int, values: dict[str, Any]) -> bytes:
    header = wire.RequestHeader(api_key, version, 1, "fuzz")
    return wire.encode_request(header, _build(api_key, version, values))


def hostile_frames(apis: dict[int, tuple[int, int]]) -> list[bytes]:
    """The shapes above, of the apis the listener serves."""
    frames = []
    for api_key in HUGE_APIS:
        if api_key not in apis:
            continue
        high = apis[api_key][1]
        for shape in ("wide", "deep"):
            request = big_request(api_key, high, HUGE_ITEMS, shape)
            if request is not None:
                frames.append(
                    wire.encode_request(wire.RequestHeader(api_key, high, 1, "f"), request)
                )
    long = "x" * 40_000  # past every string bound Kafka has (32,767)
    if 11 in apis:
        join = {
            "group_id": "fuzz-parked",
            "session_timeout": timedelta(seconds=30),
            "rebalance_timeout": timedelta(minutes=5),
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": ({"name": "range", "metadata": b"m" * (1 << 20)},),
        }
        high = apis[11][1]  # flexible (v6+): compact strings carry 40,000 bytes
        frames.append(_frame(11, high, join))  # parks: the group waits for its rebalance
        frames.append(_frame(11, high, {**join, "group_id": long}))
    if 8 in apis:
        commit = {"group_id": long, "generation_id_or_member_epoch": -1, "member_id": long}
        frames.append(_frame(8, 8, commit))
    if 68 in apis:
        high = apis[68][1]
        heartbeat = {
            "group_id": "fuzz-regex",
            "member_id": "fuzz-member",
            "member_epoch": 0,
            "rebalance_timeout": timedelta(seconds=30),
            "topic_partitions": (),
        }
        for regex in HOSTILE_REGEXES if high >= 1 else ():
            frames.append(_frame(68, high, {**heartbeat, "subscribed_topic_regex": regex}))
        names = tuple(f"topic-{i:05d}" for i in range(3900))
        frames.append(_frame(68, high, {**heartbeat, "subscribed_topic_names": names}))
        frames.append(_frame(68, high, {**heartbeat, "member_id": long}))
    if 3 in apis:
        frames.append(_frame(3, 12, {"topics": ({"name": long},)}))
    return frames


async def _send_probed(port: int, frames: list[bytes], probe_port: int) -> float:
    """``_send`` while a probe connection asks ApiVersions every PROBE_INTERVAL_S: the
    longest an answer took (a connection the node refused counts as the whole wait)."""
    module: Any = request_module(ApiKey.API_VERSIONS, 3)
    request = make(
        module.ApiVersionsRequest, {"client_software_name": "p", "client_software_version": "1"}
    )
    loop = asyncio.get_running_loop()
    longest = 0.0
    stop = asyncio.Event()

    async def probe() -> None:
        nonlocal longest
        connection = KafkaConnection("fuzz-probe")
        await connection.connect("127.0.0.1", probe_port, 5)
        try:
            while not stop.is_set():
                started = loop.time()
                await connection.request(request, 30)
                longest = max(longest, loop.time() - started)
                await asyncio.sleep(PROBE_INTERVAL_S)
        finally:
            await connection.close()

    task = loop.create_task(probe())
    try:
        await _send(port, frames)
        await asyncio.sleep(PROBE_INTERVAL_S * 2)
    finally:
        stop.set()
        await task
    return longest


async def canary_epochs(node: Node) -> tuple[int, ...]:
    connection = await connect("127.0.0.1", node.listeners["client"], deadline_s=5)
    try:
        return await leader_epochs(connection, CANARY)
    finally:
        await connection.close()


@pytest.mark.parametrize("listener", ["client", "controller"])
def test_hostile_shapes_keep_the_loop_turning(node: Node, listener: str) -> None:
    port = node.listeners[listener]
    frames = hostile_frames(advertised(port))
    probes = iter(range(1_000_000, 2_000_000))
    steps: list[float] = []

    @settings(FUZZ_SETTINGS, max_examples=max(10, FUZZ_EXAMPLES // 10))
    @given(batch=st.lists(st.sampled_from(frames), min_size=1, max_size=4))
    def fuzz(batch: list[bytes]) -> None:
        steps.append(asyncio.run(_send_probed(port, batch, node.listeners["client"])))
        check_whole(node, next(probes))

    before = asyncio.run(canary_epochs(node))
    fuzz()
    # No loop step outlasted the broker session (9 s): a fenced broker loses and regains
    # the canary's leadership, which moves its leader epoch. (The wait itself is wall time,
    # printed, not asserted: a loaded host adds to it; tests/kraft/test_loop_hold.py bounds
    # the work of a step.)
    assert asyncio.run(canary_epochs(node)) == before, "the broker was fenced"
    print(f"{listener}: {len(steps)} hostile batches, longest loop step seen {max(steps):.3f} s")


# ---- TLS records on every listener -----------------------------------------------------------

TLS_LISTENERS = ("ssl", "sasl_ssl")
PLAINTEXT_LISTENERS = ("client", "controller", "sasl")
CLOSE_WAIT_S = 3.0  # a connection the client half-closed is closed by the node within this
MAX_TLS_RECORD = (1 << 14) + 2048  # TLSCiphertext.length may not exceed 2^14 + 2048
TLS_MUTATIONS = (
    "hello", "hello+garbage", "hello flipped", "hello truncated", "record", "oversized",
    "plaintext kafka", "garbage",
)  # fmt: skip


def client_hello() -> bytes:
    """The first flight of a real TLS client (Python's ssl, OpenSSL): a ClientHello record."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


@st.composite
def tls_input(draw: st.DrawFn, hello: bytes, kafka_frame: bytes) -> bytes:
    """Bytes a TLS listener may receive first: a real ClientHello (whole, cut, flipped,
    followed by garbage), TLS records of any content type, version and declared length
    (lying both ways, past TLS's maximum), plaintext Kafka, or garbage."""
    kind = draw(st.sampled_from(TLS_MUTATIONS))
    if kind == "hello":
        return hello
    if kind == "hello+garbage":
        return hello + draw(st.binary(min_size=1, max_size=512))
    if kind == "hello flipped":
        body = bytearray(hello)
        for _ in range(draw(st.integers(1, 8))):
            body[draw(st.integers(0, len(body) - 1))] = draw(st.integers(0, 255))
        return bytes(body)
    if kind == "hello truncated":
        return hello[: draw(st.integers(0, len(hello) - 1))]
    if kind in ("record", "oversized"):
        content_type = draw(st.sampled_from([20, 21, 22, 23, 24, 0, 0x80, 255]))
        version = draw(st.sampled_from([0x0300, 0x0301, 0x0303, 0x0304, 0x0002, 0xFFFF]))
        if kind == "oversized":
            length = draw(st.sampled_from([MAX_TLS_RECORD + 1, 0x8000, 0xFFFF]))
            body = draw(st.binary(min_size=0, max_size=64)) * (length // 64 + 1)
            body = body[:length]
        else:
            length = draw(st.sampled_from([0, 1, 5, 0x4000, MAX_TLS_RECORD, 0xFFFF]))
            body = draw(st.binary(max_size=300))
        return struct.pack(">BHH", content_type, version, length) + body
    if kind == "plaintext kafka":
        return kafka_frame
    return draw(st.binary(min_size=1, max_size=256))


def tls_records_only(data: bytes) -> bool:
    """Whether ``data`` is nothing but TLS records (a TLS alert, a server's handshake
    flight), the last one possibly cut short by our hang-up: never a Kafka answer."""
    at = 0
    while at + 5 <= len(data):
        content_type, major, _minor, length = struct.unpack_from(">BBBH", data, at)
        if content_type not in (20, 21, 22, 23) or major != 3 or length > MAX_TLS_RECORD:
            return False
        at += 5 + length
    return at >= len(data) or len(data) - at < 5


async def _probe(port: int, data: bytes) -> tuple[bytes, bool]:
    """Send ``data`` and half-close; what came back and whether the node closed the
    connection within CLOSE_WAIT_S."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    received = bytearray()
    closed = False
    try:
        writer.write(data)
        writer.write_eof()
        async with asyncio.timeout(CLOSE_WAIT_S):
            while chunk := await reader.read(65536):
                received += chunk
            closed = True
    except ConnectionError:
        closed = True  # reset by the node: closed too
    except TimeoutError:
        pass
    finally:
        writer.transport.abort()
    return bytes(received), closed


async def _api_versions_over_tls(port: int, ca: Path) -> Any:
    """A good TLS client: ApiVersions over a verified TLS connection."""
    context = ssl.create_default_context(cafile=str(ca))
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
    )
    try:
        header = wire.RequestHeader(ApiKey.API_VERSIONS, 3, 7, "fuzz-tls")
        module: Any = request_module(ApiKey.API_VERSIONS, 3)
        request = make(
            module.ApiVersionsRequest,
            {"client_software_name": "fuzz", "client_software_version": "1"},
        )
        writer.write(wire.encode_request(header, request))
        async with asyncio.timeout(5):
            frame = await wire.read_frame(reader)
        correlation_id, response = wire.decode_response(ApiKey.API_VERSIONS, 3, frame)
        assert correlation_id == 7
        return response
    finally:
        writer.transport.abort()


def _kafka_frame() -> bytes:
    module: Any = request_module(ApiKey.API_VERSIONS, 3)
    request = make(
        module.ApiVersionsRequest, {"client_software_name": "fuzz", "client_software_version": "1"}
    )
    return wire.encode_request(wire.RequestHeader(ApiKey.API_VERSIONS, 3, 1, "fuzz"), request)


@pytest.mark.parametrize("listener", TLS_LISTENERS)
def test_tls_records_get_no_answer_but_tls_and_a_close(node: Node, listener: str) -> None:
    """Whatever a stranger sends a TLS listener first, the node answers with TLS at most (a
    handshake flight, an alert), never a Kafka response, closes the connection once the
    stranger stops, and goes on serving: a good TLS client still gets its ApiVersions
    answered, and the plaintext produce-and-read check passes."""
    port = node.listeners[listener]
    hello, kafka_frame = client_hello(), _kafka_frame()
    probes = iter(range(3_000_000, 4_000_000))

    @FUZZ_SETTINGS
    @given(data=tls_input(hello, kafka_frame))
    def fuzz(data: bytes) -> None:
        received, closed = asyncio.run(_probe(port, data))
        assert tls_records_only(received), received[:64]
        assert closed, "the node kept a half-closed connection open"
        response = asyncio.run(_api_versions_over_tls(port, node.ca))
        assert response.error_code == ErrorCode.none
        check_whole(node, next(probes))

    fuzz()


@pytest.mark.parametrize("listener", PLAINTEXT_LISTENERS)
def test_tls_on_a_plaintext_port_gets_nothing_and_a_close(node: Node, listener: str) -> None:
    """A TLS ClientHello (or any TLS record) on a plaintext listener: its first four bytes
    read as a frame length far beyond socket.request.max.bytes (0x16030100 is 369 MB), so
    the connection is closed unanswered; the node goes on."""
    port = node.listeners[listener]
    hello = client_hello()
    probes = iter(range(4_000_000, 5_000_000))

    @settings(FUZZ_SETTINGS, max_examples=max(10, FUZZ_EXAMPLES // 10))
    @given(data=tls_input(hello, hello))
    def fuzz(data: bytes) -> None:
        if not data or data[0] not in (20, 21, 22, 23):
            return  # not TLS: the plaintext fuzzer's business
        received, closed = asyncio.run(_probe(port, data))
        assert received == b"" and closed
        check_whole(node, next(probes))

    fuzz()


def test_a_tls_handshake_that_never_completes_is_closed_after_a_bound(node: Node) -> None:
    """A client that opens TCP to a TLS listener and sends nothing, or half a ClientHello,
    and never hangs up is closed after TLS_HANDSHAKE_S (10 s); meanwhile the listener
    serves good clients."""
    port = node.listeners["ssl"]
    hello = client_hello()

    async def stalled(first: bytes) -> float:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        opened = loop.time()
        try:
            writer.write(first)
            async with asyncio.timeout(TLS_HANDSHAKE_S + 5):
                while await reader.read(65536):
                    pass
        except ConnectionError:
            pass
        finally:
            writer.transport.abort()
        return loop.time() - opened

    async def run() -> tuple[list[float], Any]:
        waits = asyncio.gather(stalled(b""), stalled(hello[: len(hello) // 2]))
        await asyncio.sleep(1)
        served = await _api_versions_over_tls(port, node.ca)
        return list(await waits), served

    waits, served = asyncio.run(run())
    print(f"stalled TLS handshakes closed after {[round(w, 2) for w in waits]} s")
    assert served.error_code == ErrorCode.none
    assert all(TLS_HANDSHAKE_S - 0.5 <= wait <= TLS_HANDSHAKE_S + 3 for wait in waits), waits
    check_whole(node, 5_000_000)
