"""What a node gets from the world besides asyncio: a filesystem, a wall clock, randomness.

Node code never calls ``time.time()``, the ``random`` module's global functions or ``os``
file APIs directly; it takes a Runtime. The simulator builds one per node from its simulated
disk, a skewable clock and a Random derived from the run's seed, which is what makes a run
reproducible from its seed. Randomness sits here, in the lowest layer, because the log needs
it too (segment roll jitter, as Kafka's ``segment.jitter.ms``).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from log.clock import SystemClock, WallClock
from log.fs import FileSystem, RealFileSystem


@dataclass(frozen=True, slots=True)
class Runtime:
    """The seams one node runs on."""

    fs: FileSystem
    clock: WallClock
    rng: random.Random


def real_runtime(seed: int | None = None) -> Runtime:
    """The runtime of a real process: the OS filesystem and clock, a Random seeded from the OS
    (or from ``seed``, for reproducing a run's random choices)."""
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "big")
    return Runtime(fs=RealFileSystem(), clock=SystemClock(), rng=random.Random(seed))
