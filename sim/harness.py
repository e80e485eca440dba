"""The scaffolding every scenario shares: a World wired to the requested traces, and the
turning of a finished run into its RunResult (crash-free check, verdict event, digest)."""

from __future__ import annotations

import time
from collections.abc import Callable, Coroutine
from typing import IO, Any

from sim.run import RunConfig, RunResult
from sim.world import World


class ScenarioRun:
    """One run of a scenario: build the cluster on ``world``, then ``finish``."""

    def __init__(self, config: RunConfig, bugs: dict[str, str]) -> None:
        if config.bug is not None and config.bug not in bugs:
            raise ValueError(f"unknown bug {config.bug!r} for scenario {config.scenario}")
        self.config = config
        self._writer = None
        if config.trace_dir is not None:
            from sim.tracefmt import ParquetTraceWriter  # pyarrow only when asked for

            self._writer = ParquetTraceWriter(config.trace_dir, config)
        self._started = time.perf_counter()
        self._out: IO[str] | None = (
            open(config.trace_path, "w") if config.trace_path else None  # noqa: SIM115
        )
        self.world = World(config.seed, trace_out=self._out)
        if self._writer is not None:
            self._writer.attach(self.world.trace)

    def finish(
        self,
        drive: Coroutine[Any, Any, None],
        violation: Callable[[], str | None],
        fail: Callable[[str], None],
        stats: Callable[[], dict[str, int]],
    ) -> RunResult:
        """Run ``drive`` to the end and judge: a node that raised is a violation too."""
        world = self.world
        try:
            world.run(drive)
            if world.failures and violation() is None:
                where, error = world.failures[0]
                fail(f"crash-free: {where} raised {error!r}")
            virtual_s = world.loop.time()
            world.trace.event("verdict", ok=violation() is None, violation=violation())
            digest = world.trace.digest()
        finally:
            world.close()
            if self._out is not None:
                self._out.close()
        result = RunResult(
            seed=self.config.seed,
            violation=violation(),
            digest=digest,
            virtual_s=virtual_s,
            wall_s=time.perf_counter() - self._started,
            stats=stats(),
        )
        if self._writer is not None:
            self._writer.commit(result)
        return result
