"""The wall-clock seam: milliseconds since the epoch, for record timestamps and time-based
retention and roll. Durations and timeouts use the event loop's clock instead (loop.time()),
which the simulator virtualises; only values that must mean "calendar time" come from here.
"""

from __future__ import annotations

import time
from typing import Protocol


class WallClock(Protocol):
    """A source of calendar time; the simulator's can be skewed per node."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""


class SystemClock:
    """The machine's real-time clock."""

    __slots__ = ()

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
