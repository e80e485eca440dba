"""What metrics cost the produce path: one node with ``metrics.listener`` (scraped every
second while it works, as Prometheus would) against one without, in the same run.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_metrics.py [--records N] [--rounds R]``.

Two single combined nodes start side by side, one with metrics and one without (no
counting at all: KraftNode gets no NodeMetrics), twice: the metrics node started first,
then second (which node starts first was measured to matter more than metrics do). Each
round produces to each node in turn with confluent-kafka (acks=1), the order alternating
between rounds, each measured run after an unmeasured warm-up, so the machine's other load
and first-run effects fall on both alike. The figures are medians over all rounds: records/s
and, steadier on a shared machine, the node's CPU time per record (from /proc), whose ratio
is the throughput ratio a CPU-bound node would see. Two producer shapes: large batches
(librdkafka's 64 KiB, linger 5 ms: the throughput shape) and one record per request
(linger 0, max.in.flight 1: the per-request shape, where per-request counting weighs most).
Then, in this process, what the counting itself costs per produced partition and per
request, in ns.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import timedelta
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from broker.metrics import BrokerTopicMetrics, RequestMetrics
from log.batch import encode_batch
from log.records import Record
from protocol import wire
from protocol.entities import make, response_module

BIN = Path(sys.executable).parent
DEADLINE_S = 120.0
WARM_UP_RECORDS = 1000  # before each measured run: a node idle for a while starts slower
SHAPES = {
    "batches": {"linger.ms": 5, "batch.size": 65536},
    "one record per request": {"linger.ms": 0, "max.in.flight": 1, "batch.num.messages": 1},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_node(root: Path, metrics_port: int | None) -> tuple[subprocess.Popen, str]:
    """A combined node in ``root``, with metrics on ``metrics_port`` (None: no metrics)."""
    root.mkdir(parents=True)
    broker, controller = free_port(), free_port()
    config = root / "server.properties"
    lines = (
        "process.roles=broker,controller\nnode.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={root / 'data'}\n"
    )
    if metrics_port is not None:
        lines += f"metrics.listener=http://127.0.0.1:{metrics_port}\n"
    config.write_text(lines)
    cluster_id = subprocess.run(
        [BIN / "kraft-server", "random-uuid"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(
        [BIN / "kraft-server", "format", "-t", cluster_id, "-c", config],
        check=True,
        capture_output=True,
    )
    with open(root / "server.log", "w") as out:
        proc = subprocess.Popen(
            [BIN / "kraft-server", "start", config], stdout=out, stderr=subprocess.STDOUT
        )
    deadline = time.monotonic() + DEADLINE_S
    while True:  # bounded by the deadline
        try:
            socket.create_connection(("127.0.0.1", broker), timeout=0.5).close()
            return proc, f"127.0.0.1:{broker}"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("the node did not open its listener") from None
            time.sleep(0.1)


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, count: int, value: bytes, shape: dict[str, object]) -> float:
    """Seconds to produce ``count`` records of ``value`` and get every delivery report."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
            **shape,
        }
    )
    failed: list[object] = []
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(
                    "bench", value, on_delivery=lambda e, _m: e is not None and failed.append(e)
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(DEADLINE_S) != 0 or failed:
        raise RuntimeError(f"undelivered records: {failed[:3]}")
    return time.perf_counter() - start


class Scraper(threading.Thread):
    """GET /metrics every second until stopped, as Prometheus would (the bench's thread,
    not the node's); counts the scrapes, so the report shows the endpoint was exercised."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/metrics"
        self.stop = threading.Event()
        self.scrapes = 0

    def run(self) -> None:
        while not self.stop.wait(1.0):
            with urllib.request.urlopen(self.url, timeout=5) as answer:
                answer.read()
            self.scrapes += 1


def counting_cost_ns(repeat: int) -> tuple[float, float]:
    """(ns to count one produced partition, ns for the request wrapper around a handler
    that answers at once), in this process."""
    topics = BrokerTopicMetrics()
    records = encode_batch([Record(None, b"x" * 100, 0)] * 10)
    start = time.perf_counter_ns()
    for _ in range(repeat):
        topics.produced("bench", records, 0)
    produced_ns = (time.perf_counter_ns() - start) / repeat

    header = wire.RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id="b")

    module = response_module(0, 9)
    partition = {"index": 0, "error_code": 0, "base_offset": 0, "record_errors": ()}
    topic = {
        "name": "bench",
        "partition_responses": (make(module.PartitionProduceResponse, partition),),
    }
    response = make(
        module.ProduceResponse,
        {"responses": (make(module.TopicProduceResponse, topic),), "throttle_time": timedelta(0)},
    )

    async def handle(_header: wire.RequestHeader, _request: object) -> object:
        return response

    async def run(handler: object) -> float:
        begin = time.perf_counter_ns()
        for _ in range(repeat):
            await handler(header, None)  # type: ignore[operator]
        return (time.perf_counter_ns() - begin) / repeat

    requests = RequestMetrics(lambda: asyncio.get_running_loop().time())
    bare = asyncio.run(run(handle))
    wrapped = asyncio.run(run(requests.instrument(handle)))
    return produced_ns, wrapped - bare


def session(
    root: Path,
    on_first: bool,
    args: argparse.Namespace,
    value: bytes,
    times: dict[tuple[str, str], list[float]],
    cpu: dict[tuple[str, str], list[float]],
) -> int:
    """Two fresh nodes, the metrics one started first or second; ``args.rounds`` rounds of
    every shape on both, into ``times`` (records/s) and ``cpu`` (CPU s per record). The
    number of scrapes the metrics node answered."""
    metrics_port = free_port()
    ports = {"on": metrics_port, "off": None}
    names = ["on", "off"] if on_first else ["off", "on"]
    nodes = {name: start_node(root / name, ports[name]) for name in names}
    scraper = Scraper(metrics_port)
    try:
        for _, bootstrap in nodes.values():
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic("bench", 1, 1)]).values():
                future.result(DEADLINE_S)
            del admin  # its connection closes before the node stops, not after
        scraper.start()
        for round_number in range(args.rounds):
            order = names if round_number % 2 == 0 else names[::-1]
            for shape, config in SHAPES.items():
                count = args.records if shape == "batches" else args.single_records
                for name in order:
                    proc, bootstrap = nodes[name]
                    produce(bootstrap, WARM_UP_RECORDS, value, config)  # not measured
                    before_s = cpu_s(proc.pid)
                    seconds = produce(bootstrap, count, value, config)
                    used_s = cpu_s(proc.pid) - before_s
                    times.setdefault((shape, name), []).append(count / seconds)
                    cpu.setdefault((shape, name), []).append(used_s / count)
    finally:
        scraper.stop.set()
        for proc, _ in nodes.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in nodes.values():
            proc.wait(timeout=DEADLINE_S)
    return scraper.scrapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4, help="per session (two sessions)")
    parser.add_argument("--single-records", type=int, default=6000)
    args = parser.parse_args()
    value = os.urandom(args.size)
    times: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        scrapes = session(Path(tmp) / "a", True, args, value, times, cpu)
        scrapes += session(Path(tmp) / "b", False, args, value, times, cpu)
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; records of {args.size} bytes, "
        f"acks=1, 2 sessions x {args.rounds} rounds, medians; {scrapes} scrapes of the "
        "metrics nodes"
    )
    for shape in SHAPES:
        on_rate = statistics.median(times[(shape, "on")])
        off_rate = statistics.median(times[(shape, "off")])
        on_us = statistics.median(cpu[(shape, "on")]) * 1e6
        off_us = statistics.median(cpu[(shape, "off")]) * 1e6
        print(
            f"{shape:24} records/s: on {on_rate:9.0f}  off {off_rate:9.0f}  on/off "
            f"{on_rate / off_rate:.3f}x | node CPU per record: on {on_us:.2f} us  off "
            f"{off_us:.2f} us  throughput on/off {off_us / on_us:.3f}x"
        )
    produced_ns, wrapper_ns = counting_cost_ns(200_000)
    print(f"counting one produced partition: {produced_ns:.0f} ns")
    print(f"request wrapper, one-partition Produce answer: {wrapper_ns:.0f} ns")


if __name__ == "__main__":
    main()
