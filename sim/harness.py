"""The scaffolding every scenario shares: a World wired to the requested traces, and the
turning of a finished run into its RunResult (crash check, verdict event, digest)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import IO, Any

from sim.run import CRASHED, RunConfig, RunResult
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
        unknown: Callable[[], str | None] = lambda: None,
    ) -> RunResult:
        """Run ``drive`` to the end and judge. A node that dies of an unexpected exception
        is a ``crashed`` violation at that moment: the run stops there, its traceback kept."""
        world = self.world
        tracebacks: list[str] = []
        main = world.loop.create_task(drive)

        def crashed(where: str, error: BaseException, text: str) -> None:
            tracebacks.append(text)
            fail(f"{CRASHED}: {where} raised {error!r}")
            main.cancel()

        async def until_crash() -> None:
            try:
                await main
            except asyncio.CancelledError:
                if not tracebacks:
                    raise

        world.on_failure = crashed
        try:
            world.run(until_crash())
            virtual_s = world.loop.time()
            undecided = unknown() if violation() is None else None
            extra = {"unknown": undecided} if undecided is not None else {}
            world.trace.event("verdict", ok=violation() is None, violation=violation(), **extra)
            digest = world.trace.digest()
        finally:
            world.on_failure = None
            world.close()
            if self._out is not None:
                self._out.close()
        found = violation()
        result = RunResult(
            seed=self.config.seed,
            violation=found,
            digest=digest,
            virtual_s=virtual_s,
            wall_s=time.perf_counter() - self._started,
            stats=stats(),
            unknown=undecided,
            detail=tracebacks[0] if tracebacks and found and found.startswith(CRASHED) else None,
        )
        if self._writer is not None:
            self._writer.commit(result)
        return result
