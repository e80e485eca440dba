"""kraft-py beside Apache Kafka on one node, in one run: broker CPU per GB, produce rate,
end-to-end latency, consume rate (issue #25's "Must show").

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_vs_kafka.py --kafka-lib "$(scripts/kafka-dist.sh
lib)" [--records N] [--kib-records M] [--latency-records L] [--rounds R]``.

Three servers, each a single combined broker+controller node started fresh per round, in
alternating rounds so all see the same machine load:

- ``native``: kraft-py with kraft_native validating every produced record (KRAFT_NATIVE=1);
- ``python``: the same build with the pure-Python validator (KRAFT_NATIVE=0);
- ``kafka``: Apache Kafka (``java -cp LIB/* kafka.Kafka``, kafka-server-start.sh's JVM
  options), from ``--kafka-lib`` (scripts/kafka-dist.sh assembles 4.1.0 from Maven Central).

The load is Kafka's own tools (scripts/kafka-tools.sh installs them), one JVM per step
with the options Kafka's scripts give it, the same against every server:

1. warm-up: ProducerPerformance sends ``--records`` 100 B records, untimed (a cold JVM
   broker runs interpreted code; without it Kafka's figures would measure its JIT);
2. ProducerPerformance, ``--records`` x 100 B, then ``--kib-records`` x 1 KiB, to two
   one-partition topics, acks=1, linger.ms=5, batch.size=64 KiB, no compression (full
   validation on: every server parses every record). The broker process's user+system CPU
   over each run (from /proc) gives CPU-seconds per GB produced; the tool's own figure
   gives records/s at 100 B;
3. EndToEndLatency: ``--latency-records`` x 100 B, acks=1, each produced once the previous
   one was consumed: p50, in the whole milliseconds the tool measures; then the same round
   trip by librdkafka (confluent-kafka), timed in microseconds;
4. ConsumerPerformance: the 100 B and the 1 KiB topic read from the start by a group
   consumer: records/s (the tool's nMsg.sec, which includes joining the group).

Per server the best of the rounds is printed (least CPU, highest rates, lowest latency),
then kraft-py's figures as multiples of Kafka's: for CPU and latency below 1 is better, for
rates above 1. The machine is shared: read ratios, not absolute figures.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from jepsen.servers import KAFKA_JVM_OPTS, ApacheKafka

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEADLINE_S = 180.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SERVERS = ("native", "python", "kafka")
# The same topic and group defaults for every server: a single node holds every replica.
SINGLE_NODE = (
    "offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
    "transaction.state.log.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n"
)
PRODUCER_PROPS = ("acks=1", "linger.ms=5", "batch.size=65536", "compression.type=none")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far (a JVM's every thread included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def start(server: str, root: Path, kafka: ApacheKafka) -> tuple[subprocess.Popen, str]:
    """One combined node of ``server`` with its data in ``root``; (process, bootstrap)."""
    broker, controller = free_port(), free_port()
    config = root / "server.properties"
    config.write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
        "controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n"
        f"log.dirs={root / 'data'}\n{SINGLE_NODE}"
    )
    if server == "kafka":
        cluster_id = kafka.random_uuid()
        format_argv, start_argv = kafka.format_argv(cluster_id, config), kafka.start_argv(config)
        env = dict(os.environ)
    else:
        cluster_id = subprocess.run(
            [BIN / "kraft-server", "random-uuid"], capture_output=True, text=True, check=True
        ).stdout.strip()
        format_argv = [str(BIN / "kraft-server"), "format", "-t", cluster_id, "-c", str(config)]
        start_argv = [str(BIN / "kraft-server"), "start", str(config)]
        env = {**os.environ, "KRAFT_NATIVE": "1" if server == "native" else "0"}
    subprocess.run(format_argv, check=True, capture_output=True, env=env)
    with open(root / "server.log", "w") as out:
        proc = subprocess.Popen(start_argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + DEADLINE_S
    while True:  # bounded by the deadline
        try:
            socket.create_connection(("127.0.0.1", broker), timeout=0.5).close()
            return proc, f"127.0.0.1:{broker}"
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(f"{server} did not open its listener") from None
            time.sleep(0.1)


def create_topics(bootstrap: str, names: tuple[str, ...]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        future.result(DEADLINE_S)


def tools_lib() -> Path:
    """The lib dir of Kafka's tools, installed by scripts/kafka-tools.sh if missing."""
    subprocess.run([str(ROOT / "scripts" / "kafka-tools.sh"), "install"], check=True)
    cache = Path(os.environ.get("KAFKA_TOOLS_CACHE", ROOT / ".cache" / "kafka-tools"))
    return cache / f"lib-{os.environ.get('KAFKA_TOOLS_VERSION', '4.1.0')}"


def tool(lib: Path, main_class: str, *args: str) -> str:
    """Run one of Kafka's tools to the end; its stdout. The JVM gets the options Kafka's own
    scripts give it (kafka-producer-perf-test.sh: 512 MiB heap, kafka-run-class.sh's G1
    options), not kafka-tools.sh's small interpreter-leaning ones: the load must not be
    what limits a rate."""
    start_at = time.monotonic()
    argv = ["java", "-Xmx512M", *KAFKA_JVM_OPTS[2:], "-cp", f"{lib.resolve()}/*", main_class]
    done = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=DEADLINE_S)
    print(f"  {main_class.rsplit('.', 1)[1]}: {time.monotonic() - start_at:.1f} s", file=sys.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"{main_class} failed: {done.stderr[-2000:]}")
    return done.stdout


def producer_performance(lib: Path, bootstrap: str, topic: str, records: int, size: int) -> float:
    """ProducerPerformance's records/sec for ``records`` records of ``size`` bytes."""
    out = tool(
        lib,
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(size),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        *PRODUCER_PROPS,
    )
    summary = re.search(rf"{records} records sent, ([\d.]+) records/sec", out)
    if summary is None:
        raise RuntimeError(f"no ProducerPerformance summary in: {out[-500:]}")
    return float(summary.group(1))


def end_to_end_p50(lib: Path, bootstrap: str, topic: str, records: int) -> float:
    """EndToEndLatency's 50th percentile (ms, whole milliseconds: the tool rounds each
    sample down) over ``records`` 100 B records, acks=1."""
    out = tool(
        lib, "org.apache.kafka.tools.EndToEndLatency", bootstrap, topic, str(records), "1", "100"
    )
    found = re.search(r"Percentiles: 50th = ([\d.]+)", out)
    if found is None:
        raise RuntimeError(f"no EndToEndLatency percentiles in: {out[-500:]}")
    return float(found.group(1))


def librdkafka_p50(bootstrap: str, topic: str, records: int) -> float:
    """The same round trip as EndToEndLatency, timed in microseconds: librdkafka produces
    one 100 B record (acks=1, no linger), an assigned consumer long-polls the partition,
    and the next record is sent once this one was consumed. p50 in ms."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0})
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "e2e", "fetch.wait.max.ms": 500}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])  # the topic starts empty
    value = os.urandom(100)
    samples = []
    try:
        for number in range(records + 20):  # the first 20: connections, the fetch position
            start_at = time.perf_counter()
            producer.produce(topic, value)
            producer.flush(DEADLINE_S)
            message = consumer.poll(DEADLINE_S)
            if message is None or message.error() is not None:
                raise RuntimeError(f"record {number} not consumed: {message}")
            if number >= 20:
                samples.append(time.perf_counter() - start_at)
    finally:
        consumer.close()
    return statistics.median(samples) * 1000


def consumer_performance(lib: Path, bootstrap: str, topic: str, records: int) -> float:
    """ConsumerPerformance's nMsg.sec reading ``records`` records of ``topic``."""
    out = tool(
        lib,
        "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--messages",
        str(records),
        "--group",
        f"perf-{topic}",
        "--timeout",
        str(int(DEADLINE_S * 1000)),
        "--hide-header",
    )
    line = out.strip().splitlines()[-1].split(",")
    return float(line[5])  # start, end, MB, MB.sec, nMsg, nMsg.sec, ...


@dataclass(frozen=True, slots=True)
class Figures:
    cpu_per_gb_100: float
    cpu_per_gb_1k: float
    produce_100: float  # records/s
    p50_ms: float  # EndToEndLatency
    rd_p50_ms: float  # librdkafka, the same round trip
    consume_100: float  # records/s
    consume_1k: float


def one_round(server: str, args: argparse.Namespace, kafka: ApacheKafka, lib: Path) -> Figures:
    with tempfile.TemporaryDirectory(prefix=f"bench-vs-kafka-{server}-") as tmp:
        proc, bootstrap = start(server, Path(tmp), kafka)
        try:
            create_topics(bootstrap, ("warm", "b100", "b1k", "e2e", "rd-e2e"))
            producer_performance(lib, bootstrap, "warm", args.records, 100)
            before = cpu_seconds(proc.pid)
            produce_100 = producer_performance(lib, bootstrap, "b100", args.records, 100)
            middle = cpu_seconds(proc.pid)
            producer_performance(lib, bootstrap, "b1k", args.kib_records, 1024)
            after = cpu_seconds(proc.pid)
            p50 = end_to_end_p50(lib, bootstrap, "e2e", args.latency_records)
            rd_p50 = librdkafka_p50(bootstrap, "rd-e2e", args.latency_records)
            consume_100 = consumer_performance(lib, bootstrap, "b100", args.records)
            consume_1k = consumer_performance(lib, bootstrap, "b1k", args.kib_records)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
    return Figures(
        cpu_per_gb_100=(middle - before) / (args.records * 100 / 1e9),
        cpu_per_gb_1k=(after - middle) / (args.kib_records * 1024 / 1e9),
        produce_100=produce_100,
        p50_ms=p50,
        rd_p50_ms=rd_p50,
        consume_100=consume_100,
        consume_1k=consume_1k,
    )


def best(rounds: list[Figures]) -> Figures:
    return Figures(
        cpu_per_gb_100=min(f.cpu_per_gb_100 for f in rounds),
        cpu_per_gb_1k=min(f.cpu_per_gb_1k for f in rounds),
        produce_100=max(f.produce_100 for f in rounds),
        p50_ms=min(f.p50_ms for f in rounds),
        rd_p50_ms=min(f.rd_p50_ms for f in rounds),
        consume_100=max(f.consume_100 for f in rounds),
        consume_1k=max(f.consume_1k for f in rounds),
    )


def report(figures: dict[str, Figures]) -> list[str]:
    rows = [
        ("broker CPU-s per GB, 100 B", "cpu_per_gb_100", "{:8.2f}"),
        ("broker CPU-s per GB, 1 KiB", "cpu_per_gb_1k", "{:8.2f}"),
        ("produce 100 B records/s", "produce_100", "{:8.0f}"),
        ("end-to-end p50 ms (tool)", "p50_ms", "{:8.0f}"),
        ("end-to-end p50 ms (rdkafka)", "rd_p50_ms", "{:8.2f}"),
        ("consume 100 B records/s", "consume_100", "{:8.0f}"),
        ("consume 1 KiB records/s", "consume_1k", "{:8.0f}"),
    ]
    lines = [f"{'':28}{'native':>10}{'python':>10}{'kafka':>10}   native/kafka  python/kafka"]
    for title, field, fmt in rows:
        values = {s: getattr(figures[s], field) for s in SERVERS}
        cells = "".join(f"{fmt.format(values[s]):>10}" for s in SERVERS)
        lines.append(
            f"{title:28}{cells}   {values['native'] / values['kafka']:11.2f}x"
            f" {values['python'] / values['kafka']:12.2f}x"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-lib", type=Path, required=True, help="kafka-dist.sh lib")
    parser.add_argument("--records", type=int, default=1_000_000, help="100 B records")
    parser.add_argument("--kib-records", type=int, default=200_000, help="1 KiB records")
    parser.add_argument("--latency-records", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    kafka = ApacheKafka(args.kafka_lib, jvm_opts=KAFKA_JVM_OPTS)
    lib = tools_lib()
    results: dict[str, list[Figures]] = {server: [] for server in SERVERS}
    for round_number in range(args.rounds):
        for server in SERVERS if round_number % 2 == 0 else reversed(SERVERS):
            results[server].append(one_round(server, args, kafka, lib))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, one node each; "
        f"{args.records} x 100 B, {args.kib_records} x 1 KiB, {args.latency_records} e2e; "
        f"best of {args.rounds} alternating rounds"
    )
    print("\n".join(report({server: best(rounds) for server, rounds in results.items()})))


if __name__ == "__main__":
    main()
