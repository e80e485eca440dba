"""Transactional produce beside non-transactional, on kraft-py and (when given) Apache
Kafka, in one run (issue #24's bench).

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_txn.py [--kafka-lib "$(scripts/kafka-dist.sh
lib)"] [--records N] [--rounds R]``.

Each server is a single combined broker+controller node started fresh per round (the set-up
of bench_vs_kafka.py: ``native`` is kraft-py with kraft_native, ``kafka`` Apache Kafka from
``--kafka-lib``), in alternating rounds so all see the same machine load. Per round, one
librdkafka (confluent-kafka) producer per mode sends 100 B records to a one-partition topic:

- ``plain``: idempotent, acks=all, no transactions (the baseline);
- ``txn-1000``: transactions of 1,000 records, each committed before the next begins;
- ``txn-10``: transactions of 10 records (the per-transaction cost dominates: InitProducerId
  once, then per transaction AddPartitionsToTxn or its KIP-890 equivalent, EndTxn, the
  coordinator's two ``__transaction_state`` writes and the commit marker).

Printed per server and mode, best of the rounds: records/s, transactions/s and the broker's
CPU (user+system from /proc) per 1,000 records; then each transactional mode as a multiple of
``plain`` on the same server, and, with ``--kafka-lib``, kraft-py's figures as multiples of
Kafka's (for rates above 1 is better, for CPU below 1).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench_vs_kafka import DEADLINE_S, cpu_seconds, create_topics, start
from confluent_kafka import KafkaException, Producer

from jepsen.servers import KAFKA_JVM_OPTS, ApacheKafka

MODES = (("plain", 0), ("txn-1000", 1000), ("txn-10", 10))
VALUE = b"v" * 100


@dataclass(frozen=True, slots=True)
class Figure:
    records_per_s: float
    txns_per_s: float
    cpu_ms_per_1000: float


def produce(bootstrap: str, topic: str, records: int, txn_size: int) -> tuple[float, int]:
    """Send ``records`` records (in transactions of ``txn_size``, or none if 0), every one
    acknowledged; (seconds, transactions committed)."""
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 65536,
    }
    if txn_size:
        config["transactional.id"] = f"bench-{uuid.uuid4()}"
    producer = Producer(config)
    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    # Set-up is not timed: the topic's metadata (leader, connection) and, for a
    # transactional producer, its InitProducerId.
    producer.list_topics(topic, DEADLINE_S)
    if txn_size:
        producer.init_transactions(DEADLINE_S)
    started = time.perf_counter()
    txns = 0
    if txn_size:
        for first in range(0, records, txn_size):
            producer.begin_transaction()
            for _ in range(min(txn_size, records - first)):
                producer.produce(topic, VALUE, on_delivery=delivered)
                producer.poll(0)
            producer.commit_transaction(DEADLINE_S)
            txns += 1
    else:
        for _ in range(records):
            while True:  # bounded: each pass either queues the record or serves the queue
                try:
                    producer.produce(topic, VALUE, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        if producer.flush(DEADLINE_S) != 0:
            raise RuntimeError("records left unacknowledged")
    seconds = time.perf_counter() - started
    if failures:
        raise KafkaException(failures[0])
    return seconds, txns


def one_round(server: str, records: int, kafka: ApacheKafka | None) -> dict[str, Figure]:
    figures = {}
    with tempfile.TemporaryDirectory(prefix=f"bench-txn-{server}-") as tmp:
        proc, bootstrap = start(server, Path(tmp), kafka)
        try:
            create_topics(bootstrap, (*(f"txn-{mode}" for mode, _ in MODES), "warm-up"))
            produce(bootstrap, "warm-up", min(records, 20_000), 1000)  # the JVM's JIT, caches
            for mode, txn_size in MODES:
                count = records if txn_size != 10 else max(10, records // 10)
                before = cpu_seconds(proc.pid)
                seconds, txns = produce(bootstrap, f"txn-{mode}", count, txn_size)
                cpu = cpu_seconds(proc.pid) - before
                figures[mode] = Figure(count / seconds, txns / seconds, cpu / count * 1e6)
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
    parser.add_argument("--records", type=int, default=100_000, help="per mode (txn-10: /10)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    kafka = ApacheKafka(args.kafka_lib, jvm_opts=KAFKA_JVM_OPTS) if args.kafka_lib else None
    servers = ("native", "kafka") if kafka else ("native",)
    rounds: dict[str, list[dict[str, Figure]]] = {server: [] for server in servers}
    for number in range(args.rounds):
        for server in servers if number % 2 == 0 else reversed(servers):
            rounds[server].append(one_round(server, args.records, kafka))
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, one node each; 100 B records, "
        f"{args.records} per mode ({max(10, args.records // 10)} for txn-10); best of "
        f"{args.rounds} alternating rounds"
    )
    best: dict[str, dict[str, Figure]] = {}
    for server, results in rounds.items():
        best[server] = {
            mode: Figure(
                max(r[mode].records_per_s for r in results),
                max(r[mode].txns_per_s for r in results),
                min(r[mode].cpu_ms_per_1000 for r in results),
            )
            for mode, _ in MODES
        }
        plain = best[server]["plain"]
        for mode, _ in MODES:
            figure = best[server][mode]
            print(
                f"  {server:<7} {mode:<9} {figure.records_per_s:>10,.0f} records/s"
                f" {figure.txns_per_s:>8,.1f} txn/s   broker CPU {figure.cpu_ms_per_1000:6.1f}"
                f" ms/1000 records   rate {figure.records_per_s / plain.records_per_s:.2f}x plain"
            )
    if "kafka" in best:
        for mode, _ in MODES:
            ours, theirs = best["native"][mode], best["kafka"][mode]
            print(
                f"  {mode:<9} kraft-py/Kafka: rate"
                f" {ours.records_per_s / theirs.records_per_s:.2f}x, broker CPU per record"
                f" {ours.cpu_ms_per_1000 / theirs.cpu_ms_per_1000:.2f}x"
            )


if __name__ == "__main__":
    main()
