"""Produce and consume throughput over SASL_SSL (TLS + SCRAM-SHA-512) beside PLAINTEXT, in the
same run against the same node.

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/bench_security.py [--megabytes N]``.

One combined node serves a PLAINTEXT and a SASL_SSL listener (certificates from
scripts/make-certs.sh, the user from ``format --add-scram``). For each listener, in turn:
confluent-kafka produces ``--megabytes`` MB of 1 KiB records (acks=all) into a topic of its
own, then a consumer reads them all back. Printed per listener and direction: MB/s and the
node's CPU time (user + system, from /proc) per MB. On TLS connections the broker copies
record bytes (no sendfile), so consuming is where the two should differ most.
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
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[1]
KRAFT_SERVER = str(Path(sys.executable).parent / "kraft-server")
HOST = "127.0.0.1"
RECORD = b"r" * 1024
DEADLINE_S = 120.0
USER, PASSWORD = "bench", "bench-secret"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_node(directory: Path) -> tuple[subprocess.Popen[bytes], dict[str, dict]]:
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
        "listener.security.protocol.map": (
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT"
        ),
        "log.dirs": str(directory / "data"),
        "offsets.topic.replication.factor": "1",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(directory / "secrets" / "controller-1.p12"),
        "ssl.keystore.password": "changeit",
    }
    config = directory / "server.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    cluster = subprocess.run(
        [KRAFT_SERVER, "random-uuid"], check=True, capture_output=True, text=True
    ).stdout.strip()
    subprocess.run(
        [KRAFT_SERVER, "format", "-t", cluster, "-c", str(config),
         "--add-scram", f"SCRAM-SHA-512=[name={USER},password={PASSWORD}]"],
        check=True, capture_output=True,
    )  # fmt: skip
    log = open(directory / "node.log", "wb")  # noqa: SIM115 - the child holds it
    proc = subprocess.Popen([KRAFT_SERVER, "start", str(config)], stdout=log, stderr=log)
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
    while True:
        try:
            with socket.create_connection((HOST, secure), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(
                    f"the node did not start; see {directory / 'node.log'}"
                ) from None
            time.sleep(0.2)
    return proc, clients


def produce(conf: dict, topic: str, count: int) -> None:
    producer = Producer({**conf, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20})
    for _ in range(count):
        while True:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=50.0)
    args = parser.parse_args()
    count = int(args.megabytes * 1e6 / len(RECORD))
    with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp:
        proc, clients = start_node(Path(tmp))
        try:
            for listener, conf in clients.items():
                topic = f"bench-{listener.lower()}"
                admin = AdminClient(conf)
                admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(DEADLINE_S)
                for direction, run in (("produce", produce), ("consume", consume)):
                    cpu, start = cpu_s(proc.pid), time.perf_counter()
                    run(conf, topic, count)
                    elapsed, used = time.perf_counter() - start, cpu_s(proc.pid) - cpu
                    mb = count * len(RECORD) / 1e6
                    print(
                        f"{listener:10} {direction:8} {mb / elapsed:7.1f} MB/s  "
                        f"node CPU {used * 1000 / mb:6.1f} ms/MB"
                    )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=DEADLINE_S)


if __name__ == "__main__":
    main()
