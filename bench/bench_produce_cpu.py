"""The broker's CPU per produced batch with kraft_native and with the Python validator, in
one run: the same node set-up as bench_data.py, started once per validator (KRAFT_NATIVE=1
and 0), in alternating rounds so both see the same machine load. With ``--baseline-tree``
(a checkout of an earlier main, e.g. the commit before the parse-once produce path) the
same rounds also run that tree's node, and the ratio of this tree's CPU per batch to the
baseline's is printed for each validator.

Per round: confluent-kafka produces ``--records`` records of ``--size`` bytes (acks=1, no
compression, 64 KiB batches) to a one-partition topic; the broker process's user+system CPU
over the produce (from /proc) gives CPU-seconds per GB and CPU microseconds per batch.

Run: ``PYTHONPATH=. .venv/bin/python bench/bench_produce_cpu.py [--records N] [--size B]
[--baseline-tree PATH]``
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


def one_round(tree: Path, native: bool, records: int, value: bytes) -> tuple[float, float, int]:
    """(produce seconds, broker CPU seconds during it, batches stored) of ``tree``'s node."""
    env = {**os.environ, "KRAFT_NATIVE": "1" if native else "0", "PYTHONPATH": str(tree)}
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
    parser.add_argument("--baseline-tree", type=Path, default=None)
    args = parser.parse_args()
    value = os.urandom(args.size)
    gb = args.records * args.size / 1e9
    here = Path(__file__).resolve().parent.parent
    trees = ([("baseline", args.baseline_tree.resolve())] if args.baseline_tree else []) + [
        ("this", here)
    ]
    results: dict[tuple[str, bool], list[tuple[float, float, int]]] = {}
    for _ in range(args.rounds):
        for name, tree in trees:
            for native in (True, False):
                result = one_round(tree, native, args.records, value)
                results.setdefault((name, native), []).append(result)
    print(f"{args.records} records of {args.size} B, acks=1, {os.cpu_count()} CPUs (best round)")
    per_batch: dict[tuple[str, bool], float] = {}
    for (name, native), rounds in results.items():
        seconds, cpu, batches = min(rounds, key=lambda result: result[1])
        per_batch[(name, native)] = cpu / batches
        print(
            f"  {name:<8} {'kraft_native' if native else 'python':<13}"
            f" {args.records / seconds:>10,.0f} records/s   broker CPU {cpu / gb:7.2f} s/GB"
            f"   {cpu / batches * 1e6:7.0f} us/batch ({batches} batches)"
        )
    if args.baseline_tree:
        for native in (True, False):
            ratio = per_batch[("this", native)] / per_batch[("baseline", native)]
            label = "kraft_native" if native else "python"
            print(f"  {label}: CPU per batch this/baseline {ratio:.2f}x")


if __name__ == "__main__":
    main()
