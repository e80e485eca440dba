"""The broker's CPU per produced batch with kraft_native and with the Python validator, in
one run: the same node set-up as bench_data.py, started once per validator (KRAFT_NATIVE=1
and 0), in alternating rounds so both see the same machine load.

Per round: confluent-kafka produces ``--records`` records of ``--size`` bytes (acks=1, no
compression, 64 KiB batches) to a one-partition topic; the broker process's user+system CPU
over the produce (from /proc) gives CPU-seconds per GB and CPU microseconds per batch.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_produce_cpu.py [--records N] [--size B]``
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
from pathlib import Path

from bench_data import DEADLINE_S, batch_sizes, produce, start_node
from confluent_kafka.admin import AdminClient, NewTopic

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def one_round(native: bool, records: int, value: bytes) -> tuple[float, float, int]:
    """(produce seconds, broker CPU seconds during it, batches stored)."""
    env = {**os.environ, "KRAFT_NATIVE": "1" if native else "0"}
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        root = Path(tmp)
        proc, bootstrap = start_node(root, env)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic("bench", 1, 1)]).values():
                future.result(DEADLINE_S)
            del admin
            before = cpu_seconds(proc.pid)
            seconds = produce(bootstrap, records, value)
            cpu = cpu_seconds(proc.pid) - before
            batches = len(batch_sizes(root / "data"))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=DEADLINE_S)
    return seconds, cpu, batches


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    value = os.urandom(args.size)
    gb = args.records * args.size / 1e9
    results: dict[bool, list[tuple[float, float, int]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for native in (True, False):
            results[native].append(one_round(native, args.records, value))
    print(f"{args.records} records of {args.size} B, acks=1, {os.cpu_count()} CPUs (best round)")
    for native in (True, False):
        seconds, cpu, batches = min(results[native], key=lambda result: result[1])
        print(
            f"  {'kraft_native' if native else 'python':<13} {args.records / seconds:>10,.0f}"
            f" records/s   broker CPU {cpu / gb:7.2f} s/GB   {cpu / batches * 1e6:7.0f} us/batch"
            f" ({batches} batches)"
        )


if __name__ == "__main__":
    main()
