"""Beyond one core: produce records/s with 1 and with 2 broker processes on this host.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_per_core.py [--records N] [--size B]
[--rounds R] [--producers P] [--batch-size B]``.

A Python broker runs its request path on one core (one asyncio loop, the GIL), so a host
uses its cores the way Kafka deployments scale out: one broker process per core, every one
naming the host as its ``broker.rack`` (config/per-core/ is the shipped layout). Per round,
for brokers = 1 and then 2, this starts one controller and that many brokers (real
kraft-server processes, the per-core layout on free loopback ports), creates a topic with
one partition per broker (replication factor 1, so placement stripes one leader onto each
process) and ``--producers`` confluent-kafka processes produce ``--records`` records of
``--size`` bytes in all (acks=1, linger 5 ms, ``--batch-size`` batches) round-robin over the
partitions. The figure is records/s until the last acknowledgement; the best of
``--rounds`` alternating rounds is printed, with the brokers' CPU-seconds per second of the
run (cores), which shows how much of the second core the second process got.

The default batch.size is small (2 KiB, about 20 records of 100 B), so the brokers' fixed
cost per request, not the clients, bounds the rate: with 64 KiB batches a broker needs a
fraction of a core for what the Python producers on this 2-core machine can send, and the
figure would measure the producers. The load generator shares the machine either way, so
the 2-process gain here is a lower bound.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

BIN = Path(sys.executable).parent
DEADLINE_S = 90.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


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


def start(root: Path, brokers: int) -> tuple[list[subprocess.Popen], str]:
    """Controller 1 and brokers 2..brokers+1, every broker in rack ``host-1``."""
    controller = free_port()
    ports = {node: free_port() for node in range(2, brokers + 2)}
    cluster_id = subprocess.run(
        [BIN / "kraft-server", "random-uuid"], capture_output=True, text=True, check=True
    ).stdout.strip()
    procs: list[subprocess.Popen] = []
    for node in (1, *ports):
        if node == 1:
            roles = f"process.roles=controller\nlisteners=CONTROLLER://127.0.0.1:{controller}\n"
        else:
            roles = (
                f"process.roles=broker\nlisteners=PLAINTEXT://127.0.0.1:{ports[node]}\n"
                "broker.rack=host-1\n"
            )
        config = root / f"node{node}.properties"
        config.write_text(
            f"{roles}node.id={node}\ncontroller.quorum.voters=1@127.0.0.1:{controller}\n"
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


def create_topic(bootstrap: str, partitions: int) -> None:
    """One partition per broker; returns once every partition has a leader, one each."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("bench", partitions, 1)]).values():
        future.result(DEADLINE_S)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        topic = admin.list_topics(timeout=5).topics.get("bench")
        leaders = [] if topic is None else [p.leader for p in topic.partitions.values()]
        if len(leaders) == partitions and all(leader >= 0 for leader in leaders):
            if len(set(leaders)) != partitions:
                raise RuntimeError(f"two partitions share a leader: {leaders}")
            return
        time.sleep(0.2)
    raise RuntimeError("the partitions got no leaders")


def produce(bootstrap: str, count: int, value: bytes, partitions: int, batch: int) -> None:
    """Send ``count`` records round-robin over the partitions, acks=1, and wait for every
    acknowledgement (one producer process's share of the load)."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": batch,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failed: list[object] = []
    for i in range(count):
        while True:
            try:
                producer.produce(
                    "bench",
                    value,
                    partition=i % partitions,
                    on_delivery=lambda e, _m: e is not None and failed.append(e),
                )
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(DEADLINE_S) != 0 or failed:
        raise RuntimeError(f"undelivered records: {failed[:3]}")


def load(bootstrap: str, args: argparse.Namespace, value: bytes, partitions: int) -> float:
    """Seconds for ``args.producers`` producer processes to send ``args.records`` in all."""
    share = args.records // args.producers
    call = (bootstrap, share, value, partitions, args.batch_size)
    with multiprocessing.get_context("fork").Pool(args.producers) as pool:
        pool.apply(produce, (bootstrap, 2000, value, partitions, args.batch_size))  # warm
        start_at = time.perf_counter()
        pool.starmap(produce, [call] * args.producers)
        return time.perf_counter() - start_at


def one_round(brokers: int, args: argparse.Namespace, value: bytes) -> tuple[float, float]:
    """(records/s, the brokers' CPU-seconds per wall second during the produce)."""
    with tempfile.TemporaryDirectory(prefix="bench-per-core-") as tmp:
        procs, bootstrap = start(Path(tmp), brokers)
        try:
            create_topic(bootstrap, brokers)
            before = sum(cpu_seconds(p.pid) for p in procs[1:])
            seconds = load(bootstrap, args, value, brokers)
            cpu = (sum(cpu_seconds(p.pid) for p in procs[1:]) - before) / seconds
        finally:
            for proc in reversed(procs):  # brokers before their controller
                proc.send_signal(signal.SIGTERM)
            for proc in procs:
                try:
                    proc.wait(timeout=DEADLINE_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return args.records // args.producers * args.producers / seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--producers", type=int, default=2, help="producer processes")
    parser.add_argument("--batch-size", type=int, default=2048, help="librdkafka batch.size")
    args = parser.parse_args()
    value = os.urandom(args.size)
    results: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for _ in range(args.rounds):
        for brokers in results:
            results[brokers].append(one_round(brokers, args, value))
    print(
        f"{args.records} records of {args.size} B, acks=1, batch.size {args.batch_size}, "
        f"{args.producers} producer processes, one partition per broker, "
        f"{os.cpu_count()} CPUs (best of {args.rounds} rounds)"
    )
    best = {brokers: max(rounds) for brokers, rounds in results.items()}
    for brokers, (rate, cpu) in best.items():
        print(
            f"  {brokers} broker process{'es' if brokers > 1 else '  '} {rate:>10,.0f} records/s"
            f"   brokers' CPU {cpu:5.2f} cores"
        )
    print(f"  2 / 1 processes: {best[2][0] / best[1][0]:.2f}x")


if __name__ == "__main__":
    main()
