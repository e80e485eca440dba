"""Raft benchmark: a three-voter kraft-py quorum on loopback with real fsync, against PySyncObj.

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/bench_raft.py [--duration S] [--in-flight N]
[--latency N] [--baseline-tree PATH]``.

kraft-py: node 1 runs in the benchmark's process (proposals need the leader's ``RaftNode``;
there is no client propose RPC) on 127.0.0.1, nodes 2 and 3 are follower processes running the same
RaftNode as a ``kraft-server`` controller (without the metadata layers, which would refuse
the benchmark's values) on 127.0.0.2 and 127.0.0.3, given a 5 s election timeout so node 1
wins the first election. Every node serves the quorum's RPCs as a controller listener does:
production's connection loop (protocol/server.py) over the node's API table. Every node
fsyncs (fdatasync, group commit) its metadata log before the offsets count towards the high
watermark. One run prints
1. throughput: committed 100-byte records/s with ``--in-flight`` concurrent
   ``propose_and_wait`` calls refilled as they complete, for ``--duration`` seconds, one
   record per proposal; then, as a second figure, batched: 100 records per proposal with
   ``--in-flight``/100 proposals in flight (the same records in flight);
2. latency: p50/p99 commit latency of ``--latency`` proposals of one record, one at a time
   (fewer if they take more than 10 s; the table gives the count).

PySyncObj (PyPI): three ``SyncObj`` processes on 127.0.0.1 with its file journal, the only
durability it offers (an mmap written per entry, never msync'ed or fsynced: survives a process
crash, not a power cut); log compaction is pushed past the run so it does not interfere. The
proposing node gets the short election timeout and runs the same two measurements, with
``callback=`` calls kept in flight by a semaphore and ``sync=True`` calls one at a time. It
runs twice, with ``appendEntriesUseBatch`` on (its default, tuned for throughput) and off
(tuned for single-request latency); its best figure of each kind is the baseline.

With ``--baseline-tree`` (a checkout of an earlier main), the kraft-py measurements run once
per tree in the same run, the baseline's first, each in a process of its own with that tree
on PYTHONPATH, and the table shows both; a tree from before the quorum was served through
protocol/server.py is served the way it served itself (``RaftNode.serve``).

The run ends with the ratios against issue #5's targets (throughput >= 5x PySyncObj's best,
p50 commit latency <= 2 ms) and the disk's own fdatasync latency, the floor under any commit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as EventType
from pathlib import Path

from pysyncobj import SyncObj, SyncObjConf, replicated

from kraft.storage import random_uuid
from log.records import Record
from log.runtime import real_runtime
from raft.core import RaftConfig, Role
from raft.disk_log import DiskLog
from raft.driver import RaftNode, RaftNodeConfig

BIN = Path(sys.executable).parent
VALUE = b"x" * 100
BATCH_RECORDS = 100
NODES = (1, 2, 3)
FOLLOWER_ELECTION_TIMEOUT_MS = 5000
DEADLINE_S = 30.0  # bound on every wait: leader election, draining, process exits
LATENCY_BUDGET_S = 10.0  # the sequential run stops early past this (PySyncObj batching: ~100 ms)
TARGET_THROUGHPUT_RATIO = 5.0
TARGET_P50_MS = 2.0


@dataclass(frozen=True, slots=True)
class Config:
    """The command line: seconds per throughput run, proposals in flight, proposals timed."""

    duration: float
    in_flight: int
    latency: int


@dataclass(frozen=True, slots=True)
class Figures:
    """One system's measurements; ``batched`` is committed records/s at 100 per proposal."""

    name: str
    throughput: float
    latencies_ms: list[float]
    batched: float | None = None


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def batched_in_flight(args: Config) -> int:
    """Batched proposals in flight: as many records in flight as in the one-record run."""
    return max(1, args.in_flight // BATCH_RECORDS)


def free_port(hosts: list[str]) -> int:
    """A port that is free on every one of ``hosts`` (the voters share one port number)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind((hosts[0], 0))
            port = sock.getsockname()[1]
        try:
            for host in hosts[1:]:
                with socket.socket() as sock:
                    sock.bind((host, port))
        except OSError:
            continue
        return port
    raise RuntimeError(f"no port free on all of {hosts}")


def free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct free ports on ``host`` (bound together, so none repeats)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in socks]


def fdatasync_ms(directory: str, count: int = 200) -> list[float]:
    """Latencies of a 100-byte append + fdatasync on the benchmark's disk: the commit floor."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        latencies = []
        for _ in range(count):
            os.write(fd, VALUE)
            start = time.perf_counter()
            os.fdatasync(fd)
            latencies.append((time.perf_counter() - start) * 1000)
        return latencies
    finally:
        os.close(fd)
        os.remove(path)


# ---- kraft-py -------------------------------------------------------------------------------
class QuorumListener:
    """A node's quorum RPCs served on (host, port) as a controller listener serves them:
    production's connection loop over the node's API table (``RaftNode.apis``), or, for a
    baseline tree from before that, the node's own ``RaftNode.serve``. ``close`` also ends
    the connections it accepted, so a handler parked in a long-polled Fetch does not
    outlive the node."""

    def __init__(self, node: RaftNode) -> None:
        self._node = node
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        if hasattr(node, "serve"):  # a baseline tree: the loop it had
            self._serve = node.serve
            return
        from protocol.api_table import API_VERSIONS, CONTROLLER, ApiTable
        from protocol.server import serve_connection

        served = ApiTable([API_VERSIONS, *node.apis()]).served(CONTROLLER)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve_connection(reader, writer, served.handle, served.versions)

        self._serve = serve

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        try:
            await self._serve(reader, writer)
        finally:
            self._connections.pop(task, None)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._connections.values():
            writer.transport.abort()
        if self._connections:
            await asyncio.wait(list(self._connections), timeout=DEADLINE_S)


def start_kraft_followers(
    root: Path, port: int, cluster_id: str, procs: list[subprocess.Popen]
) -> None:
    """Start nodes 2 and 3 as follower processes (added to ``procs`` as they start, so the
    caller can stop whatever did). Each runs the RaftNode that kraft-server's controller
    runs, on its own DiskLog, without the metadata layers above it: the benchmark's
    100-byte values are not metadata records, and the figure is the quorum's."""
    for i in NODES[1:]:
        with open(root / f"node{i}.log", "w") as out:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--follower",
                        str(i),
                        "--port",
                        str(port),
                        "--cluster-id",
                        cluster_id,
                        "--dir",
                        str(root / f"data{i}"),
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )


async def serve_follower(node_id: int, port: int, cluster_id: str, directory: str) -> None:
    """One follower voter until SIGTERM: the quorum member a controller process runs."""
    runtime = real_runtime()
    metadata_dir = os.path.join(directory, "__cluster_metadata-0")
    log = await DiskLog.open(runtime, metadata_dir)
    node = RaftNode(
        runtime,
        RaftNodeConfig(
            node_id=node_id,
            voters={i: (f"127.0.0.{i}", port) for i in NODES},
            cluster_id=cluster_id,
            metadata_dir=metadata_dir,
            raft=RaftConfig(election_timeout_ms=FOLLOWER_ELECTION_TIMEOUT_MS),
        ),
        log,
    )
    await node.start()
    listener = QuorumListener(node)
    await listener.start(f"127.0.0.{node_id}", port)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await listener.close()
    await node.close()
    await log.close()


def stop_processes(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_for_leadership(node: RaftNode) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while node.role is not Role.LEADER:
        if time.monotonic() > deadline:
            raise RuntimeError(f"node 1 not leader after {DEADLINE_S}s (leader {node.leader_id})")
        await asyncio.sleep(0.05)


async def kraft_throughput(
    node: RaftNode, records_per_proposal: int, in_flight: int, duration_s: float
) -> float:
    """Committed records/s with ``in_flight`` proposals outstanding for ``duration_s``
    (the ones still in flight at the end are waited for and counted, time included)."""
    records = [Record(None, VALUE, int(time.time() * 1000))] * records_per_proposal
    loop = asyncio.get_running_loop()
    committed = 0
    stop_at = loop.time() + duration_s

    async def proposer() -> None:
        nonlocal committed
        while loop.time() < stop_at:
            await node.propose_and_wait(records)
            committed += records_per_proposal

    start = loop.time()
    await asyncio.wait_for(
        asyncio.gather(*(proposer() for _ in range(in_flight))), duration_s + DEADLINE_S
    )
    return committed / (loop.time() - start)


async def kraft_latencies(node: RaftNode, count: int) -> list[float]:
    record = [Record(None, VALUE, int(time.time() * 1000))]
    latencies: list[float] = []
    stop_at = time.perf_counter() + LATENCY_BUDGET_S
    while len(latencies) < count and time.perf_counter() < stop_at:
        start = time.perf_counter()
        await asyncio.wait_for(node.propose_and_wait(record), DEADLINE_S)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


async def run_kraft_node(
    root: Path, port: int, cluster_id: str, followers: list[subprocess.Popen], args: Config
) -> Figures:
    runtime = real_runtime()
    metadata_dir = str(root / "data1" / "__cluster_metadata-0")
    log = await DiskLog.open(runtime, metadata_dir)
    node = RaftNode(
        runtime,
        RaftNodeConfig(
            node_id=1,
            voters={i: (f"127.0.0.{i}", port) for i in NODES},
            cluster_id=cluster_id,
            metadata_dir=metadata_dir,
            raft=RaftConfig(),
        ),
        log,
    )
    await node.start()
    listener = QuorumListener(node)
    await listener.start("127.0.0.1", port)
    try:
        await wait_for_leadership(node)
        single = await kraft_throughput(node, 1, args.in_flight, args.duration)
        batched = await kraft_throughput(
            node, BATCH_RECORDS, batched_in_flight(args), args.duration
        )
        latencies = await kraft_latencies(node, args.latency)
    finally:
        # Followers first, then a pause for their parked Fetch requests to expire (a
        # baseline tree's close() waits for inbound handlers, and one parked in a long poll
        # would wait forever). (resign() would release them too, but its EndQuorumEpoch
        # then sets the peer connections reconnecting to the stopped followers while
        # close() cancels them.)
        await asyncio.to_thread(stop_processes, followers)
        await asyncio.sleep(node.config.raft.fetch_max_wait_ms / 1000 + 0.2)
        await listener.close()
        await node.close()
        await log.close()
    return Figures("kraft-py", single, latencies, batched)


def bench_kraft(root: Path, args: Config) -> Figures:
    port = free_port([f"127.0.0.{i}" for i in NODES])
    cluster_id = random_uuid()
    procs: list[subprocess.Popen] = []
    try:
        start_kraft_followers(root, port, cluster_id, procs)
        return asyncio.run(run_kraft_node(root, port, cluster_id, procs, args))
    finally:
        stop_processes(procs)


def bench_kraft_tree(root: Path, tree: Path, name: str, args: Config) -> Figures:
    """bench_kraft run by a process of its own with ``tree`` on PYTHONPATH (its followers
    inherit it): the figures of that tree's kraft-py, measured by this benchmark."""
    directory = root / name.replace(" ", "-").replace("(", "").replace(")", "")
    directory.mkdir()
    command = [sys.executable, __file__, "--kraft-only", str(directory)]
    command += ["--duration", str(args.duration), "--in-flight", str(args.in_flight)]
    command += ["--latency", str(args.latency)]
    budget = 4 * DEADLINE_S + 2 * args.duration + LATENCY_BUDGET_S
    done = subprocess.run(
        command,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        timeout=budget,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the kraft-py run of {tree} failed:\n{done.stderr[-4000:]}")
    values = json.loads(done.stdout.strip().splitlines()[-1])
    return Figures(name, values["throughput"], values["latencies_ms"], values["batched"])


# ---- PySyncObj ------------------------------------------------------------------------------
class Sink(SyncObj):
    """The replicated state machine: counts the records applied."""

    def __init__(self, self_address: str, others: list[str], conf: SyncObjConf) -> None:
        super().__init__(self_address, others, conf)
        self._records = 0

    @replicated
    def append(self, value: bytes) -> int:
        self._records += 1
        return self._records


def pysyncobj_throughput(sink: Sink, in_flight: int, duration_s: float) -> float:
    """Committed records/s with ``in_flight`` callback calls outstanding for ``duration_s``."""
    slots = threading.Semaphore(in_flight)
    outcome = {"ok": 0, "failed": 0}

    def on_result(_result: object, error: int) -> None:  # runs on SyncObj's tick thread
        outcome["ok" if error == 0 else "failed"] += 1
        slots.release()

    start = time.perf_counter()
    stop_at = start + duration_s
    while time.perf_counter() < stop_at:
        if slots.acquire(timeout=1.0):
            sink.append(VALUE, callback=on_result)
    drain_until = time.perf_counter() + DEADLINE_S
    for _ in range(in_flight):
        if not slots.acquire(timeout=max(0.0, drain_until - time.perf_counter())):
            raise RuntimeError("PySyncObj calls still in flight after the drain deadline")
    if outcome["failed"]:
        raise RuntimeError(f"{outcome['failed']} PySyncObj calls failed")
    return outcome["ok"] / (time.perf_counter() - start)


def pysyncobj_node(
    index: int,
    ports: list[int],
    journal_dir: str,
    use_batch: bool,
    args: Config,
    results: multiprocessing.Queue,
    stop: EventType,
) -> None:
    """One PySyncObj node (a process); node 0 proposes and puts its figures on ``results``."""
    addresses = [f"127.0.0.1:{port}" for port in ports]
    proposer = index == 0
    conf = SyncObjConf(
        journalFile=os.path.join(journal_dir, f"node{index}.journal"),
        appendEntriesUseBatch=use_batch,
        logCompactionMinEntries=10**9,
        logCompactionMinTime=10**6,
        raftMinTimeout=0.4 if proposer else FOLLOWER_ELECTION_TIMEOUT_MS / 1000,
        raftMaxTimeout=1.4 if proposer else FOLLOWER_ELECTION_TIMEOUT_MS / 1000 + 1,
        connectionTimeout=FOLLOWER_ELECTION_TIMEOUT_MS / 1000 + 2,
    )
    sink = Sink(addresses[index], addresses[:index] + addresses[index + 1 :], conf)
    try:
        if not proposer:
            stop.wait(timeout=10 * DEADLINE_S)
            return
        deadline = time.monotonic() + DEADLINE_S
        while not (sink._isLeader() and sink.isReady()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"not leader after {DEADLINE_S}s: {sink._getLeader()}")
            time.sleep(0.05)
        throughput = pysyncobj_throughput(sink, args.in_flight, args.duration)
        latencies: list[float] = []
        stop_at = time.perf_counter() + LATENCY_BUDGET_S
        while len(latencies) < args.latency and time.perf_counter() < stop_at:
            start = time.perf_counter()
            sink.append(VALUE, sync=True, timeout=DEADLINE_S)
            latencies.append((time.perf_counter() - start) * 1000)
        results.put((throughput, latencies))  # plain values: this module is __mp_main__ here
    finally:
        sink.destroy_synchronous()


def bench_pysyncobj(root: Path, use_batch: bool, args: Config) -> Figures:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    stop = context.Event()
    ports = free_ports("127.0.0.1", len(NODES))
    journal_dir = root / f"pysyncobj-batch-{use_batch}"
    journal_dir.mkdir()
    procs = [
        context.Process(
            target=pysyncobj_node,
            args=(index, ports, str(journal_dir), use_batch, args, results, stop),
        )
        for index in range(len(NODES))
    ]
    try:
        for proc in procs:
            proc.start()
        budget = 3 * DEADLINE_S + args.duration + LATENCY_BUDGET_S
        deadline = time.monotonic() + budget
        while True:
            try:
                throughput, latencies = results.get(timeout=1.0)
                break
            except queue.Empty:
                failed = [proc.exitcode for proc in procs if proc.exitcode not in (None, 0)]
                if failed:  # its traceback is on stderr
                    raise RuntimeError(f"a PySyncObj node failed (exit code {failed[0]})") from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"PySyncObj gave no result in {budget:.0f}s") from None
        return Figures(f"PySyncObj (batch {'on' if use_batch else 'off'})", throughput, latencies)
    finally:
        stop.set()
        for proc in procs:
            proc.join(timeout=DEADLINE_S)
            if proc.is_alive():
                proc.kill()
                proc.join()


# ---- report ---------------------------------------------------------------------------------
def report(
    kraft: Figures, before: Figures | None, baselines: list[Figures], fsync_ms: list[float]
) -> None:
    print(
        f"{'':24} {'records/s':>10} {'batched rec/s':>14} {'p50 ms':>8} {'p99 ms':>8} {'timed':>6}"
    )
    for figures in [kraft, *([before] if before else []), *baselines]:
        batched = "-" if figures.batched is None else f"{figures.batched:.0f}"
        print(
            f"{figures.name:24} {figures.throughput:10.0f} {batched:>14} "
            f"{percentile(figures.latencies_ms, 0.5):8.2f} "
            f"{percentile(figures.latencies_ms, 0.99):8.2f} {len(figures.latencies_ms):6}"
        )
    print(
        f"disk floor, 100-byte append + fdatasync here: p50 {percentile(fsync_ms, 0.5):.2f} ms, "
        f"p99 {percentile(fsync_ms, 0.99):.2f} ms"
    )
    if before is not None:
        assert kraft.batched is not None and before.batched is not None
        p50, p50_before = (percentile(f.latencies_ms, 0.5) for f in (kraft, before))
        print(
            f"kraft-py / {before.name}: records/s {kraft.throughput / before.throughput:.2f}x, "
            f"batched {kraft.batched / before.batched:.2f}x, p50 latency {p50 / p50_before:.2f}x"
        )
    best = max(baselines, key=lambda f: f.throughput)
    ratio = kraft.throughput / best.throughput
    verdict = "met" if ratio >= TARGET_THROUGHPUT_RATIO else "MISSED"
    print(
        f"throughput kraft-py / {best.name}, one record per proposal: {ratio:.2f}x "
        f"(target >= {TARGET_THROUGHPUT_RATIO:g}x: {verdict})"
    )
    assert kraft.batched is not None
    print(
        f"  (kraft-py at {BATCH_RECORDS} records per proposal / the same PySyncObj figure, "
        f"not like for like: {kraft.batched / best.throughput:.2f}x)"
    )
    fastest = min(baselines, key=lambda f: percentile(f.latencies_ms, 0.5))
    p50 = percentile(kraft.latencies_ms, 0.5)
    baseline_p50 = percentile(fastest.latencies_ms, 0.5)
    verdict = "met" if p50 <= TARGET_P50_MS else "MISSED"
    print(
        f"p50 commit latency kraft-py {p50:.2f} ms / {fastest.name} {baseline_p50:.2f} ms: "
        f"{p50 / baseline_p50:.2f}x (target <= {TARGET_P50_MS:g} ms: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per throughput run")
    parser.add_argument("--in-flight", type=int, default=2000, help="concurrent proposals")
    parser.add_argument("--latency", type=int, default=500, help="sequential proposals timed")
    parser.add_argument(
        "--baseline-tree", type=Path, help="another checkout, measured beside this one"
    )
    parser.add_argument("--kraft-only", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--follower", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cluster-id", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.follower is not None:
        asyncio.run(serve_follower(parsed.follower, parsed.port, parsed.cluster_id, parsed.dir))
        return
    args = Config(parsed.duration, parsed.in_flight, parsed.latency)
    if parsed.kraft_only is not None:  # one tree's run, for bench_kraft_tree
        figures = bench_kraft(parsed.kraft_only, args)
        print(
            json.dumps({k: getattr(figures, k) for k in ("throughput", "latencies_ms", "batched")})
        )
        return
    here = Path(__file__).resolve().parent.parent
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, 3 voters on loopback, "
        f"{len(VALUE)}-byte records; throughput: {args.in_flight} proposals in flight for "
        f"{args.duration:g} s, batched: {batched_in_flight(args)} of {BATCH_RECORDS} records; "
        f"latency: {args.latency} proposals one at a time"
    )
    print(
        "durability: kraft-py fdatasyncs its log on every voter before an offset counts "
        "(group commit); PySyncObj file journal (mmap, never msync/fsync: it has no such option)"
    )
    with tempfile.TemporaryDirectory(prefix="bench-raft-") as tmp:
        root = Path(tmp)
        fsync_ms = fdatasync_ms(tmp)
        before = None
        if parsed.baseline_tree is not None:
            name = f"kraft-py ({parsed.baseline_tree.name})"
            before = bench_kraft_tree(root, parsed.baseline_tree.resolve(), name, args)
        kraft = bench_kraft_tree(root, here, "kraft-py", args)
        baselines = [bench_pysyncobj(root, use_batch, args) for use_batch in (True, False)]
    report(kraft, before, baselines, fsync_ms)


if __name__ == "__main__":
    main()
