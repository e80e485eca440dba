"""Produce and consume throughput of a real single node, against its own storage engine.

Run: ``.venv/bin/python bench/bench_data.py [--records N] [--size BYTES]``.

Starts the README's default layout (one combined broker+controller) in a temporary dir, then:
1. produce: confluent-kafka (librdkafka) sends ``--records`` records of ``--size`` bytes to a
   one-partition topic with acks=1, no compression, 64 KiB batches, and waits for every
   delivery report; records/s and MB/s;
2. consume: a librdkafka consumer assigned to the partition reads them all back;
3. baseline: the same number of records, in batches of the size librdkafka produced
   (measured from the log), appended in this process to a ``log.Log`` on the same disk: the
   storage engine's own rate, the ceiling for the broker's produce path.
The ratios say what the network, the protocol and the broker cost on top of the log.
"""

from __future__ import annotations

import argparse
import asyncio
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

from log.batch import encode_batch, iter_batches
from log.config import LogConfig
from log.log import Log
from log.records import Record
from log.runtime import real_runtime

BIN = Path(sys.executable).parent
DEADLINE_S = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_node(root: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """A combined node in ``root``, run with ``env`` (default: ours); (process, bootstrap)."""
    broker, controller = free_port(), free_port()
    config = root / "server.properties"
    config.write_text(
        "process.roles=broker,controller\nnode.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{controller}\n"
        f"listeners=PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}\n"
        f"controller.listener.names=CONTROLLER\nlog.dirs={root / 'data'}\n"
    )
    cluster_id = subprocess.run(
        [BIN / "kraft-server", "random-uuid"], capture_output=True, text=True, check=True
    ).stdout.strip()
    subprocess.run(
        [BIN / "kraft-server", "format", "-t", cluster_id, "-c", config],
        check=True,
        capture_output=True,
        env=env,
    )
    with open(root / "server.log", "w") as out:
        proc = subprocess.Popen(
            [BIN / "kraft-server", "start", config], stdout=out, stderr=subprocess.STDOUT, env=env
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


def produce(bootstrap: str, count: int, value: bytes) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 65536,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    failed = []
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


def consume(bootstrap: str, count: int) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "fetch.max.bytes": 8 << 20}
    )
    consumer.assign([TopicPartition("bench", 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = start + DEADLINE_S
    while got < count and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if got < count:
        raise RuntimeError(f"consumed {got} of {count}")
    return elapsed


def batch_sizes(data_dir: Path) -> list[int]:
    """Records per batch librdkafka produced, read back from the partition's segment."""
    data = (data_dir / "bench-0" / "00000000000000000000.log").read_bytes()
    return [header.records_count for _, header in iter_batches(data)]


async def append_baseline(directory: str, sizes: list[int], value: bytes) -> float:
    log = await Log.open(real_runtime(), directory, LogConfig())
    batches = [
        encode_batch([Record(None, value, 0)] * size, partition_leader_epoch=1) for size in sizes
    ]
    start = time.perf_counter()
    for data in batches:
        log.append_as_leader(bytearray(data), 1)
    await log.flush()  # what a produce never waits for; counted so the baseline is no lower
    elapsed = time.perf_counter() - start
    await log.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    value = os.urandom(args.size)
    with tempfile.TemporaryDirectory(prefix="bench-data-") as tmp:
        root = Path(tmp)
        proc, bootstrap = start_node(root)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic("bench", 1, 1)]).values():
                future.result(DEADLINE_S)
            produced_s = produce(bootstrap, args.records, value)
            consumed_s = consume(bootstrap, args.records)
            sizes = batch_sizes(root / "data")
            del admin  # its connection closes before the node stops, not after
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=DEADLINE_S)
        baseline_s = asyncio.run(append_baseline(str(root / "baseline-0"), sizes, value))
    mb = args.records * args.size / 1e6
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.records} records of "
        f"{args.size} bytes, one partition, librdkafka batches of "
        f"{sum(sizes) / len(sizes):.0f} records on average"
    )
    for name, seconds in (
        ("produce (acks=1, over loopback)", produced_s),
        ("consume (over loopback)", consumed_s),
        ("baseline: log.append_as_leader in-process", baseline_s),
    ):
        print(f"{name:44} {args.records / seconds:10.0f} records/s {mb / seconds:8.1f} MB/s")
    print(f"produce / baseline: {baseline_s / produced_s:.2f}x")
    print(f"consume / baseline: {baseline_s / consumed_s:.2f}x")


if __name__ == "__main__":
    main()
