"""Produce and consume throughput over SASL_SSL (TLS + SCRAM-SHA-512) beside PLAINTEXT, in the
same run against the same node; beside Apache Kafka's when given (issue #29's bench).

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/bench_security.py [--kafka-lib
"$(scripts/kafka-dist.sh lib)"] [--megabytes N] [--rounds R]``.

Each server is one combined broker+controller node started fresh per round, serving a
PLAINTEXT and a SASL_SSL listener from the same server.properties (certificates from
scripts/make-certs.sh, a PKCS12 keystore; the SCRAM-SHA-512 user from ``format --add-scram``,
Kafka's ``kafka-storage format --add-scram``): ``kraft-py``, and ``kafka``, Apache Kafka
4.1.0 from ``--kafka-lib`` (``java -cp LIB/* kafka.Kafka`` with kafka-server-start.sh's JVM
options), in alternating rounds (3 by default) so both see the same machine load. Per
round and listener, after an untimed warm-up (a few MB each way: a cold JVM broker runs
interpreted code), confluent-kafka produces ``--megabytes`` MB of 1 KiB records (acks=all)
into a topic of its own, then a consumer reads them all back.

Printed per server, listener and direction, best of the rounds: MB/s and the node's CPU time
(user + system, from /proc, every JVM thread included) per MB; then SASL_SSL as a multiple
of PLAINTEXT on the same server and, with ``--kafka-lib``, kraft-py's figures as multiples of
Kafka's (for rates above 1 is better, for CPU below 1). On TLS connections a broker copies
record bytes (no sendfile), so consuming is where the listeners should differ most. The
client runs on the same machine: read ratios, not absolute figures.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
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
KRAFT_SERVER = str(Path(sys.executable).parent / "kraft-server")
HOST = "127.0.0.1"
RECORD = b"r" * 1024
DEADLINE_S = 180.0
WARM_UP_MB = 5.0
USER, PASSWORD = "bench", "bench-secret"
LISTENERS = ("PLAINTEXT", "SASL_SSL")
DIRECTIONS = ("produce", "consume")


@dataclass(frozen=True, slots=True)
class Figure:
    mb_per_s: float
    cpu_ms_per_mb: float


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_node(
    server: str, directory: Path, kafka: ApacheKafka | None
) -> tuple[subprocess.Popen[bytes], dict[str, dict]]:
    """One node of ``server`` with both listeners; (process, client config per listener).
    Both servers read the same server.properties: only the launcher differs."""
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "make-certs.sh"), str(directory / "secrets")],
        check=True,
        capture_output=True,
    )
    plain, secure, controller = free_port(), free_port(), free_port()
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{USER}" password="{PASSWORD}";'
    )
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{HOST}:{controller}",
        "listeners": (
            f"PLAINTEXT://{HOST}:{plain},SASL_SSL://{HOST}:{secure},CONTROLLER://{HOST}:{controller}"
        ),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
        ),
        "log.dirs": str(directory / "data"),
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(directory / "secrets" / "controller-1.p12"),
        "ssl.keystore.password": "changeit",
    }
    config = directory / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    scram = ["--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"]
    if kafka is not None and server == "kafka":
        format_argv = [*kafka.format_argv(kafka.random_uuid(), config), *scram]
        start_argv = kafka.start_argv(config)
    else:
        cluster = subprocess.run(
            [KRAFT_SERVER, "random-uuid"], check=True, capture_output=True, text=True
        ).stdout.strip()
        format_argv = [KRAFT_SERVER, "format", "-t", cluster, "-c", str(config), *scram]
        start_argv = [KRAFT_SERVER, "start", str(config)]
    subprocess.run(format_argv, check=True, capture_output=True)
    with open(directory / "node.log", "wb") as log:
        proc = subprocess.Popen(start_argv, stdout=log, stderr=subprocess.STDOUT)
    clients = {
        "PLAINTEXT": {"bootstrap.servers": f"{HOST}:{plain}"},
        "SASL_SSL": {
            "bootstrap.servers": f"{HOST}:{secure}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": USER,
            "sasl.password": PASSWORD,
            "ssl.ca.location": str(directory / "secrets" / "ca.pem"),
        },
    }
    deadline = time.monotonic() + DEADLINE_S
    while True:  # bounded by the deadline
        try:
            for port in (plain, secure):
                socket.create_connection((HOST, port), timeout=0.5).close()
            return proc, clients
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError(
                    f"{server} did not start; see {directory / 'node.log'}"
                ) from None
            time.sleep(0.2)


def produce(conf: dict, topic: str, count: int) -> None:
    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20})
    for _ in range(count):
        while True:  # bounded: each pass either queues the record or serves the queue
            try:
                producer.produce(topic, RECORD)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(DEADLINE_S) == 0


def consume(conf: dict, topic: str, count: int) -> None:
    consumer = Consumer(
        {**conf, "group.id": f"bench-{topic}", "auto.offset.reset": "earliest",
         "enable.auto.commit": False, "fetch.max.bytes": 8 << 20}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])  # no group join in the timing
    seen = 0
    deadline = time.monotonic() + DEADLINE_S
    while seen < count and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            if message.error() is None:
                seen += 1
    consumer.close()
    assert seen == count, f"read {seen} of {count}"


def one_round(server: str, count: int, kafka: ApacheKafka | None) -> dict[tuple[str, str], Figure]:
    figures = {}
    with tempfile.TemporaryDirectory(prefix=f"bench-security-{server}-") as tmp:
        proc, clients = start_node(server, Path(tmp), kafka)
        try:
            for listener, conf in clients.items():
                topic, warm_up = f"bench-{listener.lower()}", f"warm-up-{listener.lower()}"
                admin = AdminClient(conf)
                for future in admin.create_topics(
                    [NewTopic(topic, 1, 1), NewTopic(warm_up, 1, 1)]
                ).values():
                    future.result(DEADLINE_S)
                warm = int(WARM_UP_MB * 1e6 / len(RECORD))
                produce(conf, warm_up, warm)
                consume(conf, warm_up, warm)
                for direction, run in (("produce", produce), ("consume", consume)):
                    cpu, start = cpu_s(proc.pid), time.perf_counter()
                    run(conf, topic, count)
                    elapsed, used = time.perf_counter() - start, cpu_s(proc.pid) - cpu
                    mb = count * len(RECORD) / 1e6
                    figures[listener, direction] = Figure(mb / elapsed, used * 1000 / mb)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kafka-lib", type=Path, default=None, help="kafka-dist.sh lib")
    parser.add_argument("--megabytes", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    count = int(args.megabytes * 1e6 / len(RECORD))
    kafka = ApacheKafka(args.kafka_lib, jvm_opts=KAFKA_JVM_OPTS) if args.kafka_lib else None
    servers = ("kraft-py", "kafka") if kafka else ("kraft-py",)
    rounds: dict[str, list[dict[tuple[str, str], Figure]]] = {s: [] for s in servers}
    for number in range(args.rounds):
        for server in servers if number % 2 == 0 else reversed(servers):
            rounds[server].append(one_round(server, count, kafka))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f}; {args.megabytes:g} MB of 1 KiB records per listener and "
        f"direction, acks=all; best of {args.rounds} round(s)"
    )
    best = {
        server: {
            key: Figure(
                max(r[key].mb_per_s for r in results), min(r[key].cpu_ms_per_mb for r in results)
            )
            for key in results[0]
        }
        for server, results in rounds.items()
    }
    for server, figures in best.items():
        for (listener, direction), figure in figures.items():
            print(
                f"  {server:<8} {listener:<10} {direction:<8} {figure.mb_per_s:7.1f} MB/s  "
                f"node CPU {figure.cpu_ms_per_mb:6.1f} ms/MB"
            )
        for direction in DIRECTIONS:
            plain, secure = figures["PLAINTEXT", direction], figures["SASL_SSL", direction]
            print(
                f"  {server:<8} SASL_SSL/PLAINTEXT {direction:<8} rate "
                f"{secure.mb_per_s / plain.mb_per_s:.2f}x, CPU per MB "
                f"{secure.cpu_ms_per_mb / plain.cpu_ms_per_mb:.2f}x"
            )
    if "kafka" in best:
        for listener in LISTENERS:
            for direction in DIRECTIONS:
                ours, theirs = (
                    best["kraft-py"][listener, direction],
                    best["kafka"][listener, direction],
                )
                print(
                    f"  {listener:<10} {direction:<8} kraft-py/Kafka: rate "
                    f"{ours.mb_per_s / theirs.mb_per_s:.2f}x, node CPU per MB "
                    f"{ours.cpu_ms_per_mb / theirs.cpu_ms_per_mb:.2f}x"
                )


if __name__ == "__main__":
    main()
