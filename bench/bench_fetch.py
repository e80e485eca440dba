"""Consumer fetch throughput and the broker's CPU per MB served, for large and small batches.

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/bench_fetch.py [--megabytes N]
[--baseline-tree PATH]``.

For each source tree (``--baseline-tree``, e.g. a checkout of main, then this one), in the
same run: start a combined node from that tree, produce ``--megabytes`` MB with
confluent-kafka into topic ``large`` (librdkafka batches of about 1 MiB) and a quarter of
that into ``small`` (batches of about 1 KiB), then read each topic back ``--passes`` times
with Fetch v12 requests of up to 8 MiB over one connection (``broker.client``), checking
that every pass returns the same bytes. Printed per tree and topic: MB/s, and the node's
CPU time (user + system, from /proc) per MB fetched; then the ratios of this tree against
the baseline. The node's CPU is the figure the fetch path decides: the client's decoding is
the same for both trees.

Why a second tree and not a switch: the copying path this change replaced is gone, so the
fair "before" is the code before it, run against the same data on the same machine.

``--send-sizes`` measures instead what sets ``protocol.server.SENDFILE_MIN_BYTES``: this
process's CPU per MB to send one region of each size over loopback (to a reader in another
process) the two ways the network layer can: read and write (``pread``, join with a
header, ``write``) and ``loop.sendfile`` of a dup of the descriptor.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import signal
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.bench_data import DEADLINE_S, start_node
from broker.client import KafkaConnection
from log.batch import iter_batches
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module

FETCH_MAX_BYTES = 8 << 20
TICKS_PER_S = os.sysconf("SC_CLK_TCK")
TOPICS = {  # name: (batch.size, linger.ms, record bytes, share of --megabytes)
    "large": (1 << 20, 100, 64 << 10, 1.0),
    "small": (1 << 10, 0, 900, 1 / 4),
}


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def produce(bootstrap: str, topic: str, megabytes: float) -> None:
    batch_size, linger_ms, record, share = TOPICS[topic]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": linger_ms,
            "batch.size": batch_size,
            "message.max.bytes": 2 << 20,
        }
    )
    value = os.urandom(record)
    failed: list[object] = []
    for _ in range(int(megabytes * share * 1e6 / record)):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda e, _m: e and failed.append(e))
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(DEADLINE_S * 5) != 0 or failed:
        raise RuntimeError(f"undelivered records: {failed[:3]}")


def fetch_request(topic: str, offset: int) -> Any:
    module = request_module(ApiKey.FETCH, 12)
    wanted = make(
        module.FetchPartition,
        {"partition": 0, "fetch_offset": offset, "partition_max_bytes": FETCH_MAX_BYTES},
    )
    return make(
        module.FetchRequest,
        {
            "replica_id": -1,
            "max_wait": timedelta(0),
            "min_bytes": 0,
            "max_bytes": FETCH_MAX_BYTES,
            "topics": (make(module.FetchTopic, {"topic": topic, "partitions": (wanted,)}),),
        },
    )


async def read_all(port: int, topic: str) -> tuple[int, int]:
    """(bytes, a digest of them) of one pass over ``topic`` from offset 0 to the HW."""
    connection = KafkaConnection("bench-fetch")
    await connection.connect("127.0.0.1", port, timeout_s=DEADLINE_S)
    offset, size, digest = 0, 0, 0
    try:
        while True:  # bounded: each answer moves the offset forward, or ends the pass
            response: Any = await connection.request(fetch_request(topic, offset), DEADLINE_S)
            (partition,) = response.responses[0].partitions
            records = partition.records or b""
            if partition.error_code or not records:
                break
            for _, header in iter_batches(records):
                offset = header.next_offset
            size += len(records)
            digest = hash((digest, records))
            if offset >= partition.high_watermark:
                break
    finally:
        await connection.close()
    return size, digest


def measure(tree: Path, megabytes: float, passes: int) -> dict[str, tuple[float, float]]:
    """topic -> (MB/s, node CPU ms per MB) of the best of ``passes`` reads, tree's node."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-fetch-") as tmp:
        proc, bootstrap = start_node(Path(tmp), env)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).values():
                future.result(DEADLINE_S)
            del admin
            port = int(bootstrap.rsplit(":", 1)[1])
            for topic in TOPICS:
                produce(bootstrap, topic, megabytes)
                best = None
                digests = set()
                for _ in range(passes):
                    cpu, start = cpu_s(proc.pid), time.perf_counter()
                    size, digest = asyncio.run(read_all(port, topic))
                    elapsed, used = time.perf_counter() - start, cpu_s(proc.pid) - cpu
                    digests.add(digest)
                    mb = size / 1e6
                    figure = (mb / elapsed, used * 1000 / mb)
                    best = figure if best is None or figure[0] > best[0] else best
                assert len(digests) == 1, "passes read different bytes"
                assert best is not None
                results[topic] = best
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=DEADLINE_S)
    return results


# The reader of --send-sizes: drains the socket in another process, so its CPU is not ours.
_SINK = (
    "import socket, sys\n"
    "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
    "b = bytearray(1 << 20)\n"
    "while s.recv_into(b): pass\n"
)
SEND_SIZES = (16 << 10, 64 << 10, 128 << 10, 256 << 10, 1 << 20)


async def send_sizes(directory: Path) -> None:
    """Per region size: CPU ms per MB sent by read-and-write, and by sendfile."""
    path = directory / "segment.log"
    path.write_bytes(os.urandom(8 << 20))
    fd = os.open(path, os.O_RDONLY)
    loop = asyncio.get_running_loop()
    accepted: asyncio.Future[asyncio.StreamWriter] = loop.create_future()
    server = await asyncio.start_server(lambda _r, w: accepted.set_result(w), "127.0.0.1", 0)
    port = str(server.sockets[0].getsockname()[1])
    sink = await asyncio.create_subprocess_exec(sys.executable, "-c", _SINK, port)
    writer = await accepted
    header = b"h" * 30  # what precedes a records field in a fetch answer
    try:
        for size in SEND_SIZES:
            count = max(20, (32 << 20) // size)
            figures = {}
            for mode in ("read", "sendfile", "read", "sendfile"):  # each twice, best kept
                cpu = time.process_time()
                for i in range(count):
                    position = i * size % ((8 << 20) - size + 1)
                    if mode == "read":
                        writer.write(b"".join([header, os.pread(fd, size, position)]))
                    else:
                        writer.write(header)
                        dup = os.dup(fd)
                        file = io.FileIO(dup, "rb", closefd=False)
                        await loop.sendfile(writer.transport, file, position, size)
                        os.close(dup)
                    await writer.drain()
                ms_per_mb = (time.process_time() - cpu) * 1000 / (count * size / 1e6)
                figures[mode] = min(figures.get(mode, ms_per_mb), ms_per_mb)
            read, sendfile = figures["read"], figures["sendfile"]
            print(
                f"{size >> 10:5} KiB  read+write {read:5.2f} ms/MB  sendfile {sendfile:5.2f} "
                f"ms/MB  sendfile/read {sendfile / read:.2f}x"
            )
    finally:
        writer.close()
        await writer.wait_closed()
        server.close()
        os.close(fd)
        await asyncio.wait_for(sink.wait(), DEADLINE_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, default=128)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--baseline-tree", type=Path, default=None)
    parser.add_argument("--send-sizes", action="store_true")
    args = parser.parse_args()
    if args.send_sizes:
        with tempfile.TemporaryDirectory(prefix="bench-send-") as tmp:
            asyncio.run(send_sizes(Path(tmp)))
        return
    here = Path(__file__).resolve().parent.parent
    trees = ([("baseline", args.baseline_tree)] if args.baseline_tree else []) + [("this", here)]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; fetches of up to 8 MiB")
    figures = {}
    for name, tree in trees:
        figures[name] = measure(tree, args.megabytes, args.passes)
        for topic, (rate, cpu_ms) in figures[name].items():
            print(f"{name:8} {topic:5} {rate:8.1f} MB/s  node CPU {cpu_ms:6.2f} ms/MB  ({tree})")
    if "baseline" in figures:
        for topic in TOPICS:
            (rate0, cpu0), (rate1, cpu1) = figures["baseline"][topic], figures["this"][topic]
            cpu = cpu1 / cpu0 if cpu0 else float("nan")  # /proc counts whole ticks
            print(f"{topic:5}: throughput {rate1 / rate0:.2f}x, node CPU per MB {cpu:.2f}x")


if __name__ == "__main__":
    main()
