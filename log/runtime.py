"""What a node gets from the world besides asyncio: a filesystem, a wall clock, randomness,
and a clock of the time the node's own thread spends working.

Node code never calls ``time.time()``, the ``random`` module's global functions or ``os``
file APIs directly; it takes a Runtime. The simulator builds one per node from its simulated
disk, a skewable clock and a Random derived from the run's seed, which is what makes a run
reproducible from its seed. Randomness sits here, in the lowest layer, because the log needs
it too (segment roll jitter, as Kafka's ``segment.jitter.ms``).

``busy_clock`` measures what a request costs the event loop's thread (the
``request_percentage`` quota, broker/quotas.py): a real process reads the thread's CPU time;
the simulator's steps take no time, so its clock stands still and no request costs anything.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from log.clock import SystemClock, WallClock
from log.fs import FileSystem, RealFileSystem


@dataclass(frozen=True, slots=True)
class Runtime:
    """The seams one node runs on."""

    fs: FileSystem
    clock: WallClock
    rng: random.Random
    # Seconds of work done by this thread, read before and after each step of a request.
    busy_clock: Callable[[], float] = lambda: 0.0  # a simulated step takes no time


def real_runtime(seed: int | None = None) -> Runtime:
    """The runtime of a real process: the OS filesystem and clock, a Random seeded from the OS
    (or from ``seed``, for reproducing a run's random choices)."""
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "big")
    return Runtime(
        fs=RealFileSystem(),
        clock=SystemClock(),
        rng=random.Random(seed),
        busy_clock=time.thread_time,
    )
