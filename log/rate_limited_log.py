"""Log lines per event, not per occurrence: a burst of one problem is one line per interval.

A node that runs out of file descriptors, or is sent oversized frames by a misconfigured
client, meets the same condition thousands of times a second; logging each would fill the
disk and bury everything else (issue 12 saw 1,073,262 accept errors in 3 minutes). Each
distinct event key logs at most once per interval, and the next line it logs says how many
were suppressed in between. Time is the event loop's (asyncio time), so the simulator's
virtual clock drives it too.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

# Keys are chosen by the code that logs (an event name, perhaps with a listener name), not by
# peers, but the table is bounded anyway: beyond this many keys it starts afresh.
MAX_KEYS = 1024


@dataclass(slots=True)
class RateLimitedLog:
    """``log(key, level, msg, *args)`` at most once per ``interval_s`` for each key."""

    logger: logging.Logger
    interval_s: float = 60.0
    _last_s: dict[str, float] = field(default_factory=dict)
    _suppressed: dict[str, int] = field(default_factory=dict)

    def log(self, key: str, level: int, msg: str, *args: object) -> bool:
        """Log unless ``key`` was logged within the interval; True if this call logged."""
        now_s = asyncio.get_running_loop().time()
        last = self._last_s.get(key)
        if last is not None and now_s - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        if len(self._last_s) >= MAX_KEYS and key not in self._last_s:
            self._last_s.clear()
            self._suppressed.clear()
        self._last_s[key] = now_s
        suppressed = self._suppressed.pop(key, 0)
        if suppressed:
            msg += " (and %d more times since the last such line)"
            args = (*args, suppressed)
        self.logger.log(level, msg, *args)
        return True


class ClipLongArguments(logging.Filter):
    """Cut every string argument of a log record longer than ``max_chars`` to its head and
    its length, so a client-chosen id (a group or member id may be 32,767 bytes) costs a
    log line its head only: per-event lines that name such ids stay short, however many
    events a client causes. Attach it to a logger with ``logger.addFilter``."""

    def __init__(self, max_chars: int = 200) -> None:
        super().__init__()
        self.max_chars = max_chars

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(
            isinstance(arg, str) and len(arg) > self.max_chars for arg in args
        ):
            record.args = tuple(
                f"{arg[: self.max_chars]}...({len(arg)} chars)"
                if isinstance(arg, str) and len(arg) > self.max_chars
                else arg
                for arg in args
            )
        return True
