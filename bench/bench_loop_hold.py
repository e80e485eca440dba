"""How long one turn of the event loop lasts while a node serves a huge request (issue 22).

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/bench_loop_hold.py [--items N] [--sweep]``.

Part 1, decoding alone, for the issue's requests of ``--items`` (default 200,000) entities
(a Fetch and a Produce naming that many partitions of one topic, a CreateTopics and a
DeleteTopics of that many topics, a Metadata of that many names): the baseline is the
one-shot decode (the walk and kio's native reader, one step: what a request over 64 KiB
cost the loop before protocol/incremental.py), measured on the same bytes in the same run
as the sliced decode; printed: the one-shot CPU time, the sliced decode's total CPU, its
number of steps, its longest step and its longest step without a full (generation 2)
garbage collection in it, and the ratios of the longest step and of the total against the
one-shot decode.

Part 2, a real node (this process, real runtime) serving a big request of every API both
listeners serve (``--sweep``; ``--sweep-items`` entities, wide and deep, as the loop-hold
test sends them): a probe task yields at every turn of the loop and records the longest
turn's CPU time while the request is served; the baseline per request is the one-shot
decode of its bytes, measured just before. The pass/fail test
(tests/kraft/test_loop_hold.py) counts profiler events per turn instead: CPU time depends
on the machine, and a slow CI host failed on it.

CPython's full collections (generation 2) are the other long steps: one runs every so many
allocations and walks the whole heap (about 0.1 s with a 200,000-entity request in it),
whoever allocates; the column without them shows what slicing bounds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from protocol import wire
from tests.kraft.big_requests import big_request

ISSUE_REQUESTS = [  # (what, api key, version, shape)
    ("Fetch, one topic of N partitions", 1, 12, "deep"),
    ("Produce, one topic of N partitions", 0, 9, "deep"),
    ("CreateTopics of N topics", 19, 7, "flat"),
    ("DeleteTopics of N topics", 20, 6, "flat"),
    ("Metadata naming N topics", 3, 12, "wide"),
]


class FullCollections:
    """Counts generation-2 collections (gc.callbacks), to tell their steps apart."""

    def __init__(self) -> None:
        self.count = 0
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            self.count += 1


def one_shot_cpu_s(frame: bytes) -> float:
    start = time.thread_time()
    wire.decode_request(frame)
    return time.thread_time() - start


def sliced(frame: bytes, collections: FullCollections) -> tuple[int, float, float, float]:
    """(steps, total CPU, longest step, longest step without a full collection)."""
    steps = wire.decode_request_steps(frame)
    count, total, longest, longest_clean = 0, 0.0, 0.0, 0.0
    while True:
        before, start = collections.count, time.thread_time()
        try:
            next(steps)
            finished = False
        except StopIteration:
            finished = True
        spent = time.thread_time() - start
        count, total, longest = count + 1, total + spent, max(longest, spent)
        if collections.count == before:
            longest_clean = max(longest_clean, spent)
        if finished:
            return count, total, longest, longest_clean


def decoding(items: int) -> None:
    collections = FullCollections()
    print(f"Decoding, {items} entities; baseline: the one-shot decode of the same bytes")
    print(
        f"{'request':38} {'bytes':>9} {'one-shot':>9} {'sliced':>8} {'steps':>6} "
        f"{'longest':>8} {'no-GC':>7} {'longest/one-shot':>17} {'total/one-shot':>15}"
    )
    for what, api_key, version, shape in ISSUE_REQUESTS:
        request = big_request(api_key, version, items, shape)
        frame = wire.encode_request(wire.RequestHeader(api_key, version, 7, "bench"), request)[4:]
        gc.collect()
        whole = one_shot_cpu_s(frame)
        gc.collect()
        count, total, longest, clean = sliced(frame, collections)
        print(
            f"{what.replace('N', str(items)):38} {len(frame):>9} {whole * 1000:>7.0f}ms "
            f"{total * 1000:>6.0f}ms {count:>6} {longest * 1000:>6.1f}ms {clean * 1000:>5.1f}ms "
            f"{longest / whole:>17.3f} {total / whole:>15.2f}"
        )


async def longest_turn_cpu_s(work: Callable[[], Awaitable[Any]]) -> float:
    """The longest turn of the loop, in this thread's CPU time, while ``work`` ran."""
    longest = 0.0

    async def probe() -> None:
        nonlocal longest
        last = time.thread_time()
        while True:
            await asyncio.sleep(0)
            now = time.thread_time()
            longest, last = max(longest, now - last), now

    task = asyncio.get_running_loop().create_task(probe())
    await asyncio.sleep(0)
    try:
        await work()
    finally:
        task.cancel()
    return longest


def node_sweep(items: int) -> None:
    from tests.kraft.inprocess import format_node
    from tests.kraft.test_loop_hold import (
        _controller_port,
        _frames,
        _send_then_api_versions,
        running_node,
    )

    print(f"\nA node serving a request of every API, {items} entities wide and deep")
    print(f"{'request':60} {'longest turn':>12} {'one-shot decode':>16} {'ratio':>6}")

    async def scenario(path: Path, port: int) -> list[tuple[str, float, float]]:
        rows = []
        async with running_node(path) as node:
            controller_port = _controller_port(path)
            assert node._controller_served is not None
            sends = [
                (f"client {what}", port, frame)
                for what, frame in _frames(dict(node.served["PLAINTEXT"].versions), items)
            ] + [
                (f"controller {what}", controller_port, frame)
                for what, frame in _frames(dict(node._controller_served.versions), items)
            ]
            for what, target, frame in sends:
                baseline = one_shot_cpu_s(frame[4:])

                async def send(target: int = target, frame: bytes = frame) -> None:
                    await _send_then_api_versions(target, frame)

                longest = await longest_turn_cpu_s(send)
                rows.append((what, longest, baseline))
                print(
                    f"{what:60} {longest * 1000:>10.1f}ms {baseline * 1000:>14.1f}ms "
                    f"{longest / baseline:>6.2f}",
                    flush=True,
                )
        return rows

    with tempfile.TemporaryDirectory() as directory:
        path, port = format_node(Path(directory))
        rows = asyncio.run(scenario(path, port))
    worst = max(rows, key=lambda row: row[1])
    print(f"worst: {worst[0]}: {worst[1] * 1000:.1f} ms ({worst[1] / worst[2]:.2f}x its decode)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--sweep", action="store_true", help="also the node sweep (minutes)")
    parser.add_argument("--sweep-items", type=int, default=20_000)
    args = parser.parse_args()
    decoding(args.items)
    if args.sweep:
        node_sweep(args.sweep_items)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
