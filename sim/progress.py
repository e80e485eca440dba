"""Progress of a long command's timed phase (a kraft-jepsen run's fault window): a bar with
the rate and the time left on a terminal, a plain line every ``PLAIN_EVERY_S`` otherwise (a
CI log, a file), so a long run is never silent and never floods its log.

``kraft-sim sweep`` has its own bar over seeds; ``kraft-analyze`` shows Spark's stage
progress on a terminal (``sim.analysis.load.spark_session``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

PLAIN_EVERY_S = 10.0
TICK_S = 0.5


def wait_showing_progress(
    seconds: float,
    what: str,
    count: Callable[[], int],
    *,
    out: TextIO | None = None,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Wait ``seconds`` while showing how far the phase ``what`` is and the rate at which
    ``count`` (operations recorded so far) grows."""
    out = out if out is not None else sys.stderr
    start, first = now(), count()
    end = start + seconds
    if out.isatty():
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[ops]} ops ({task.fields[rate]}/s)"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        with Progress(*columns, console=Console(file=out), transient=True) as progress:
            bar = progress.add_task(what, total=seconds, ops=0, rate="0")
            while (left := end - now()) > 0:  # bounded: ends at `end`
                sleep(min(TICK_S, left))
                ops, rate = _rate(count() - first, now() - start)
                progress.update(bar, completed=min(seconds, now() - start), ops=ops, rate=rate)
        return
    next_line = start + PLAIN_EVERY_S
    while (left := end - now()) > 0:  # bounded: ends at `end`
        sleep(min(left, max(0.0, next_line - now())))
        at = now()
        if at >= next_line and at < end:
            ops, rate = _rate(count() - first, at - start)
            print(
                f"{what}: {at - start:.0f}/{seconds:.0f} s, {ops} ops ({rate}/s), "
                f"{end - at:.0f} s left",
                file=out,
                flush=True,
            )
            next_line += PLAIN_EVERY_S


def _rate(ops: int, elapsed_s: float) -> tuple[int, str]:
    return ops, f"{ops / elapsed_s:.0f}" if elapsed_s > 0 else "0"
