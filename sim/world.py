"""A simulated world: one loop, one network, the processes, the trace, all from one seed.

Every source of nondeterminism is derived from the seed by name (``random.Random`` seeded with
a string hashes it with SHA-512, independent of PYTHONHASHSEED), so adding a process or a
fault stream does not perturb the others' random choices.
"""

from __future__ import annotations

import asyncio
import random
import traceback
from collections.abc import Callable, Coroutine
from typing import IO, Any

from sim.loop import SimLoop
from sim.net import SimNetwork
from sim.process import SimProcess
from sim.trace import Trace

CLOSE_TIMEOUT_S = 60.0


class World:
    """Owns the loop and everything simulated on it."""

    def __init__(
        self, seed: int, *, trace_out: IO[str] | None = None, keep_events: bool = False
    ) -> None:
        self.seed = seed
        self.loop = SimLoop()
        self.trace = Trace(self.loop, trace_out, keep=keep_events)
        self.network = SimNetwork(self.loop, self.random("network"), self.trace)
        self.loop.network = self.network
        self.processes: dict[str, SimProcess] = {}
        self.failures: list[tuple[str, BaseException]] = []
        # Told at once of every failure: (where, the error, its traceback).
        self.on_failure: Callable[[str, BaseException, str], None] | None = None
        self.loop.set_exception_handler(self._loop_error)

    def random(self, stream: str) -> random.Random:
        """An independent Random for one named purpose (workload, nemesis, ...)."""
        return random.Random(f"{stream}/{self.seed}")

    def add_process(self, name: str) -> SimProcess:
        """Create a process (not yet started) whose network host is ``name``."""
        assert name not in self.processes, f"duplicate process {name}"
        process = SimProcess(self, name)
        self.processes[name] = process
        self.network.add_host(name)
        return process

    def process_failed(self, process: SimProcess, error: BaseException) -> None:
        self.trace.event("process-failed", node=process.name, error=repr(error))
        self._failed(process.name, error)

    def _failed(self, where: str, error: BaseException) -> None:
        self.failures.append((where, error))
        if self.on_failure is not None:
            self.on_failure(where, error, "".join(traceback.format_exception(error)))

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, asyncio.CancelledError):
            # asyncio 3.11's start_server callback calls task.exception() on a handler task
            # that was cancelled (by a crash); that is teardown, not a bug in node code.
            return
        self.trace.event("loop-error", message=str(context.get("message")), error=repr(error))
        self._failed("loop", error or RuntimeError(context.get("message")))

    def run(self, main: Coroutine[Any, Any, Any]) -> Any:
        """Run ``main`` (simulator-level code: workload driver, nemesis) to completion."""
        asyncio.set_event_loop(self.loop)
        try:
            return self.loop.run_until_complete(main)
        finally:
            asyncio.set_event_loop(None)

    def close(self) -> None:
        """Cancel whatever is still running and close the loop."""
        loop = self.loop
        loop.set_exception_handler(lambda loop, context: None)
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        pending.sort(key=lambda t: t.get_name())
        for task in pending:
            task.cancel()
        for process in self.processes.values():
            process.paused = False
            loop.unpark(process.parked)
            process.parked = []
        if pending:
            # Bounded in virtual time: a task that ignores its cancellation must not hang
            # the simulator (it shows up as a "Task was destroyed but it is pending" warning).
            loop.run_until_complete(asyncio.wait(pending, timeout=CLOSE_TIMEOUT_S))
        loop.close()

    def __enter__(self) -> World:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
