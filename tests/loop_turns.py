"""Work counted per turn of the event loop: what the slicing tests assert instead of CPU time.

A test that bounds the CPU one step of the loop takes fails on a slower or busier machine
(CI failed on four such bounds), so the tests count work units instead: names a controller
slice answers, records a scan walks, regex matches. The code under test adds to a Counter
through instrumentation the test installs (a wrapped slice function, a counting subclass);
``work_per_turn`` reads it once per turn of the loop. The CPU figures themselves are printed
by bench/bench_slices.py.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def work_per_turn(work: Awaitable[T], tally: Counter[str]) -> tuple[list[Counter[str]], T]:
    """(what ``tally`` gained in each turn of the loop while ``work`` ran, its result).

    A probe task wakes once per turn: asyncio.sleep(0) resumes it in the next turn, after
    every callback that was ready in this one, so what ``tally`` gained between two of its
    wakes is what one turn did (code that does not yield its turn shows up as one turn doing
    all of it)."""
    turns: list[Counter[str]] = []
    done = False

    async def probe() -> None:
        last = Counter(tally)
        while not done:
            await asyncio.sleep(0)
            now = Counter(tally)
            turns.append(now - last)
            last = now

    task = asyncio.get_running_loop().create_task(probe())
    await asyncio.sleep(0)  # the probe takes its first reading before the work starts
    try:
        result = await work
    finally:
        done = True
        await task
    return turns, result


def most(turns: list[Counter[str]], unit: str) -> int:
    """The most ``unit`` one turn did."""
    return max((turn[unit] for turn in turns), default=0)


def busy(turns: list[Counter[str]], unit: str) -> int:
    """How many turns did some ``unit``."""
    return sum(1 for turn in turns if turn[unit])


def counting(tally: Counter[str], unit: str, size: Callable[..., int], function: Any) -> Any:
    """``function`` adding ``size(*its arguments)`` to ``tally[unit]`` on each call."""

    def counted(*args: Any, **kwargs: Any) -> Any:
        tally[unit] += size(*args, **kwargs)
        return function(*args, **kwargs)

    return counted
