"""The run's event trace and its digest.

Every event (process starts and crashes, faults, workload operations, checker verdicts) is one
canonical JSON line: keys sorted, times in integer virtual microseconds. The digest hashes
those lines plus a compact record of every network delivery (``mix``), so two runs with the
same digest took the same path, byte for byte. The Parquet trace schema of the analysis tools
is derived from these events (docs/simulation.md).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.loop import SimLoop


class Trace:
    """Collects events, hashes them, and optionally writes them as JSON lines."""

    def __init__(self, loop: SimLoop, out: IO[str] | None = None, *, keep: bool = False) -> None:
        self._loop = loop
        self._out = out
        self._hash = hashlib.blake2b(digest_size=16)
        self.events: list[dict[str, Any]] | None = [] if keep else None
        # A subscriber (the Parquet trace writer) sees every event after it is hashed; what
        # it adds to its own copy, such as wall-clock time, never reaches the digest.
        self.sink: Callable[[dict[str, Any]], None] | None = None
        # A scenario's checkers that react to events (a broker's crash, say), after the sink.
        self.watchers: list[Callable[[dict[str, Any]], None]] = []
        self.count = 0

    def now_us(self) -> int:
        return round(self._loop.time() * 1_000_000)

    def event(self, kind: str, node: str | None = None, **fields: Any) -> None:
        """Record one event at the current virtual time."""
        record = {"t_us": self.now_us(), "kind": kind, "node": node, **fields}
        line = json.dumps(record, sort_keys=True, separators=(",", ":"))
        self._hash.update(line.encode())
        self._hash.update(b"\n")
        self.count += 1
        if self._out is not None:
            self._out.write(line + "\n")
        if self.events is not None:
            self.events.append(record)
        if self.sink is not None:
            self.sink(record)
        for watcher in self.watchers:
            watcher(record)

    def mix(self, *values: int | str) -> None:
        """Fold low-level facts (a delivery) into the digest without writing an event."""
        self._hash.update(repr((self.now_us(), values)).encode())

    def digest(self) -> str:
        return self._hash.hexdigest()
