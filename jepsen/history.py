"""A real run's trace: the simulator's event vocabulary at real time, filed into the same
Parquet tables (sim/tracefmt.py) so kraft-analyze checks it like a simulated run.

``time_virtual_us`` is microseconds of the monotonic clock since the run started (the
harness's clock, which the nemesis never fakes); ``time_wall_ns`` the harness's wall clock.
Events come from many threads (client lanes, the nemesis, the metadata watcher): one lock
orders them, and that order is the trace's ``seq``.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from sim.run import RunConfig, RunResult
from sim.tracefmt import ParquetTraceWriter


class Recorder:
    """Appends events to one run's trace; ``commit`` publishes it."""

    def __init__(self, trace_dir: str | Path, config: RunConfig, run_id: str) -> None:
        self.writer = ParquetTraceWriter(trace_dir, config, run_id)
        self._lock = threading.Lock()
        self._hash = hashlib.blake2b(digest_size=16)
        self._started = time.monotonic()
        self.count = 0

    @property
    def run_id(self) -> str:
        return self.writer.run_id

    def now_us(self) -> int:
        return round((time.monotonic() - self._started) * 1_000_000)

    def event(self, kind: str, node: str | None = None, **fields: Any) -> None:
        """Record one event now (an ``op`` is a history row, anything else a node event)."""
        with self._lock:
            record = {"t_us": self.now_us(), "kind": kind, "node": node, **fields}
            line = json.dumps(record, sort_keys=True, separators=(",", ":"))
            self._hash.update(line.encode() + b"\n")
            self.count += 1
            self.writer.add(record)

    def op(self, process: str, type_: str, f: str, key: str, value: Any, **fields: Any) -> None:
        """One history row of ``process`` (invoke, ok, fail or info)."""
        self.event("op", process=process, type=type_, f=f, key=key, value=value, **fields)

    def commit(self, seed: int) -> Path:
        """Publish the run's directory. The harness judges nothing online: the run row's
        outcome is ``unknown`` and kraft-analyze gives the verdict."""
        elapsed = time.monotonic() - self._started
        with self._lock:
            result = RunResult(
                seed=seed,
                violation=None,
                digest=self._hash.hexdigest(),
                virtual_s=elapsed,
                wall_s=elapsed,
                unknown="a real run: kraft-analyze gives the verdict",
            )
            return self.writer.commit(result)
