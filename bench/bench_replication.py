"""Replicated produce: acks=all throughput and latency with replication factor 3 against 1.

Run: ``.venv/bin/python bench/bench_replication.py [--records N] [--size BYTES]
[--latency-records M] [--warmup-records W] [--kafka-lib DIR | --kafka-dir DIR]``.

Starts one controller and three brokers (real kraft-server processes) on loopback in a
temporary dir, creates two one-partition topics, ``rf1`` (replication factor 1) and ``rf3``
(replication factor 3, min.insync.replicas=2), and for each:
1. throughput: confluent-kafka (librdkafka) sends ``--records`` records of ``--size`` bytes
   with acks=all, 64 KiB batches, linger 5 ms, and waits for every delivery report, after
   ``--warmup-records`` sent the same way untimed (a cold JVM runs interpreted code:
   without it Kafka's figures measure its JIT, not its broker);
2. latency: ``--latency-records`` records sent one at a time (each waits for the previous
   one's acknowledgement): p50 and p99 of send-to-acknowledgement.
RF3 against RF1 in the same run is what replication costs (two follower fetch round trips
and the followers' appends before the high watermark moves). With ``--kafka-lib`` (a lib dir
of Apache Kafka's jars: ``scripts/kafka-dist.sh lib`` assembles Kafka 4.1.0's from Maven
Central and prints it) or ``--kafka-dir`` (an unpacked distribution, e.g.
kafka_2.13-4.1.0/, whose ``libs/`` is used) the same runs go against three Kafka nodes
(combined broker+controller, KRaft, ``java -cp LIB/* kafka.Kafka`` with
kafka-server-start.sh's JVM options) in the same run, and kraft-py's figures are printed as
ratios of Kafka's. For two cores, keep it short: ``--records 30000 --latency-records 300
--kafka-lib "$(scripts/kafka-dist.sh lib)"``.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jepsen.servers import KAFKA_JVM_OPTS, ApacheKafka

BIN = Path(sys.executable).parent
DEADLINE_S = 90.0
BROKERS = (2, 3, 4)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_port(port: int, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while True:  # bounded by the deadline
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"nothing listens on {port}") from None
            time.sleep(0.1)


def start_kraft_py(root: Path) -> tuple[list[subprocess.Popen], str]:
    """One controller (node 1) and three brokers (2, 3, 4); (processes, bootstrap)."""
    controller = free_port()
    ports = {node: free_port() for node in BROKERS}
    cluster_id = subprocess.run(
        [BIN / "kraft-server", "random-uuid"], capture_output=True, text=True, check=True
    ).stdout.strip()
    procs = []
    for node in (1, *BROKERS):
        listener = (
            f"CONTROLLER://127.0.0.1:{controller}"
            if node == 1
            else f"PLAINTEXT://127.0.0.1:{ports[node]}"
        )
        config = root / f"node{node}.properties"
        config.write_text(
            f"process.roles={'controller' if node == 1 else 'broker'}\nnode.id={node}\n"
            f"controller.quorum.voters=1@127.0.0.1:{controller}\nlisteners={listener}\n"
            f"controller.listener.names=CONTROLLER\nlog.dirs={root / f'data{node}'}\n"
        )
        subprocess.run(
            [BIN / "kraft-server", "format", "-t", cluster_id, "-c", config],
            check=True,
            capture_output=True,
        )
        with open(root / f"node{node}.log", "w") as out:
            procs.append(
                subprocess.Popen(
                    [BIN / "kraft-server", "start", config], stdout=out, stderr=subprocess.STDOUT
                )
            )
    for port in ports.values():
        wait_port(port, procs)
    return procs, ",".join(f"127.0.0.1:{p}" for p in ports.values())


def start_kafka(root: Path, kafka: ApacheKafka) -> tuple[list[subprocess.Popen], str]:
    """Three Apache Kafka nodes, each broker and controller (KRaft), from ``kafka``'s jars."""
    ports = {node: (free_port(), free_port()) for node in (1, 2, 3)}
    voters = ",".join(f"{n}@127.0.0.1:{c}" for n, (_, c) in ports.items())
    cluster_id = kafka.random_uuid()
    procs = []
    for node, (broker, controller) in ports.items():
        config = root / f"kafka{node}.properties"
        config.write_text(
            f"process.roles=broker,controller\nnode.id={node}\n"
            f"controller.quorum.voters={voters}\n"
            f"listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
            "controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n"
            f"log.dirs={root / f'kafka-data{node}'}\n"
        )
        subprocess.run(kafka.format_argv(cluster_id, config), check=True, capture_output=True)
        with open(root / f"kafka{node}.log", "w") as out:
            procs.append(
                subprocess.Popen(kafka.start_argv(config), stdout=out, stderr=subprocess.STDOUT)
            )
    for broker, _ in ports.values():
        wait_port(broker, procs)
    return procs, ",".join(f"127.0.0.1:{b}" for b, _ in ports.values())


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic("rf1", 1, 1), NewTopic("rf3", 1, 3, config={"min.insync.replicas": "2"})]
    for future in admin.create_topics(topics).values():
        future.result(DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:  # until every replica is in sync
        metadata = admin.list_topics(timeout=5).topics
        partitions = [metadata[t].partitions.get(0) for t in ("rf1", "rf3") if t in metadata]
        led = len(partitions) == 2 and all(p is not None and p.leader >= 0 for p in partitions)
        if led and len(partitions[1].isrs) == 3:
            return
        time.sleep(0.2)
    raise RuntimeError("the topics did not come up in sync")


def throughput(bootstrap: str, topic: str, count: int, value: bytes) -> float:
    """Seconds to send ``count`` records with acks=all and get every acknowledgement."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 65536,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failed: list[object] = []
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(
                    topic, value, on_delivery=lambda e, _m: e is not None and failed.append(e)
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(DEADLINE_S) != 0 or failed:
        raise RuntimeError(f"undelivered records: {failed[:3]}")
    return time.perf_counter() - start


def latencies(bootstrap: str, topic: str, count: int, value: bytes) -> list[float]:
    """Send-to-acknowledgement seconds of ``count`` records sent one at a time."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce(topic, value)  # connections and metadata before timing
    producer.flush(DEADLINE_S)
    out = []
    for _ in range(count):
        done: list[object] = []
        start = time.perf_counter()
        producer.produce(topic, value, on_delivery=lambda e, _m, done=done: done.append(e))
        while not done:  # bounded: the delivery times out by message.timeout.ms
            producer.poll(0.0005)
        if done[0] is not None:
            raise RuntimeError(f"undelivered: {done[0]}")
        out.append(time.perf_counter() - start)
    return out


Figures = dict[str, tuple[float, float, float]]  # topic -> (records/s, p50 ms, p99 ms)


def measure(
    label: str, bootstrap: str, args: argparse.Namespace, value: bytes
) -> tuple[list[str], Figures]:
    create_topics(bootstrap)
    lines = []
    figures = {}
    for topic in ("rf1", "rf3"):
        throughput(bootstrap, topic, args.warmup_records, value)  # JIT, caches, connections
        seconds = throughput(bootstrap, topic, args.records, value)
        lat = sorted(latencies(bootstrap, topic, args.latency_records, value))
        p50 = statistics.median(lat) * 1000
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000
        figures[topic] = (args.records / seconds, p50, p99)
        lines.append(
            f"{label:9} {topic.upper()} acks=all {figures[topic][0]:10.0f} records/s "
            f"{args.records * args.size / seconds / 1e6:7.1f} MB/s   "
            f"p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
        )
    ratio = figures["rf3"][0] / figures["rf1"][0]
    lines.append(f"{label:9} RF3 / RF1 throughput: {ratio:.2f}x")
    return lines, figures


def ratios(ours: Figures, kafka: Figures) -> list[str]:
    """kraft-py's figures as multiples of Kafka's (throughput >1: faster; latency >1: slower)."""
    return [
        f"kraft-py / kafka {topic.upper()}: throughput {ours[topic][0] / kafka[topic][0]:.2f}x, "
        f"p50 {ours[topic][1] / kafka[topic][1]:.2f}x, p99 {ours[topic][2] / kafka[topic][2]:.2f}x"
        for topic in ("rf1", "rf3")
    ]


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in reversed(procs):  # brokers before their controller
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--latency-records", type=int, default=1000)
    parser.add_argument(
        "--warmup-records",
        type=int,
        default=None,
        help="sent untimed to each topic first, so a JVM's JIT is warm (default --records)",
    )
    dist = parser.add_mutually_exclusive_group()
    dist.add_argument("--kafka-lib", type=Path, help="Apache Kafka's jars (kafka-dist.sh lib)")
    dist.add_argument("--kafka-dir", type=Path, help="an Apache Kafka distribution")
    args = parser.parse_args()
    if args.warmup_records is None:
        args.warmup_records = args.records
    value = os.urandom(args.size)
    lines = [
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.records} records of "
        f"{args.size} bytes for throughput, {args.latency_records} one at a time for latency"
    ]
    starts = [("kraft-py", start_kraft_py)]
    lib = args.kafka_dir / "libs" if args.kafka_dir is not None else args.kafka_lib
    if lib is not None:
        kafka = ApacheKafka(lib, jvm_opts=KAFKA_JVM_OPTS)
        starts.append(("kafka", lambda root: start_kafka(root, kafka)))
    figures = {}
    for label, start in starts:
        with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
            procs, bootstrap = start(Path(tmp))
            try:
                measured, figures[label] = measure(label, bootstrap, args, value)
                lines += measured
            finally:
                stop(procs)
    if "kafka" in figures:
        lines += ratios(figures["kraft-py"], figures["kafka"])
    print("\n".join(lines))


if __name__ == "__main__":
    main()
