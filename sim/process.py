"""A simulated process: the unit that starts, crashes, restarts, pauses and has a clock skew.

Each process owns a SimDisk that outlives its incarnations, a skewable wall clock, and the
tasks of its current incarnation. ``start`` runs the node's ``main(runtime)`` in a fresh
context tagged with (process, incarnation), so every task and callback it creates is gated by
the loop (see sim/loop.py) and torn down by ``crash``.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from log.runtime import Runtime
from sim.disk import SimDisk
from sim.loop import CURRENT, Parked, SimLoop

if TYPE_CHECKING:
    from sim.world import World

# 2026-01-01T00:00:00Z: virtual time 0 on every simulated wall clock.
EPOCH_MS = 1_767_225_600_000
# A datacenter SSD's fdatasync: 0.2 to 4 ms.
FSYNC_LATENCY_S = (0.0002, 0.004)

Main = Callable[[Runtime], Coroutine[Any, Any, Any]]


class SimClock:
    """A process's wall clock: virtual time plus the process's skew."""

    __slots__ = ("_loop", "_process")

    def __init__(self, loop: SimLoop, process: SimProcess) -> None:
        self._loop = loop
        self._process = process

    def now_ms(self) -> int:
        return EPOCH_MS + int(self._loop.time() * 1000) + self._process.skew_ms


class SimProcess:
    """One node (or client) of the simulated cluster; its name is also its network host."""

    def __init__(self, world: World, name: str) -> None:
        self.world = world
        self.name = name
        self.incarnation = 0
        self.alive = False
        self.paused = False
        self.skew_ms = 0
        self.parked: list[Parked] = []
        self.disk = SimDisk(
            random.Random(f"disk/{world.seed}/{name}"), fsync_latency_s=FSYNC_LATENCY_S
        )
        self.clock = SimClock(world.loop, self)
        self.main_task: asyncio.Task | None = None
        self._main: Main | None = None
        # task -> incarnation; a dict, not a set, so teardown order never depends on id().
        self._tasks: dict[asyncio.Task, int] = {}

    def __repr__(self) -> str:
        return f"SimProcess({self.name}#{self.incarnation})"

    def adopt(self, task: asyncio.Task, incarnation: int) -> None:
        """Record a task created by this process so a crash can cancel it."""
        self._tasks[task] = incarnation
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task) -> None:
        self._tasks.pop(task, None)

    def runtime(self) -> Runtime:
        """The seams for the current incarnation: its disk view, clock and Random."""
        rng = random.Random(f"proc/{self.world.seed}/{self.name}/{self.incarnation}")
        return Runtime(fs=self.disk.fs(), clock=self.clock, rng=rng)

    def start(self, main: Main | None = None) -> asyncio.Task:
        """Boot a new incarnation running ``main`` (default: the one it ran before)."""
        assert not self.alive, f"{self.name} is already running"
        main = main or self._main
        assert main is not None, f"{self.name} has no main to run"
        self._main = main
        self.incarnation += 1
        self.alive = True
        context = contextvars.Context()
        context.run(CURRENT.set, (self, self.incarnation))
        runtime = self.runtime()
        self.main_task = self.world.loop.create_task(main(runtime), context=context)
        self.main_task.add_done_callback(self._main_done)
        self.world.trace.event("start", node=self.name, incarnation=self.incarnation)
        return self.main_task

    def _main_done(self, task: asyncio.Task) -> None:
        if task.cancelled() or task is not self.main_task or not self.alive:
            return
        error = task.exception()
        if isinstance(error, OSError):
            # A node that halts on an I/O error (Kafka does, on a failed log flush) is doing
            # its job: the process exits, and the heal phase restarts it.
            self._stop("exit", error)
        elif error is not None:
            self.world.process_failed(self, error)

    def crash(self) -> None:
        """Power cut: tasks cancelled, sockets reset, unsynced disk state lost or torn."""
        assert self.alive, f"{self.name} is not running"
        self._stop("crash", None)

    def _stop(self, kind: str, error: BaseException | None) -> None:
        self.alive = False
        self.paused = False
        parked, self.parked = self.parked, []
        if kind == "crash":
            self.disk.crash()
        else:
            self.disk.process_exited()
        self.world.network.process_crashed(self)
        fields = {} if error is None else {"error": repr(error)}
        self.world.trace.event(kind, node=self.name, incarnation=self.incarnation, **fields)
        for task, incarnation in list(self._tasks.items()):
            if incarnation == self.incarnation:
                task.cancel()
        self.world.loop.unpark(parked)

    def terminate(
        self, stop: Callable[[], Coroutine[Any, Any, Any]], on_exit: Callable[[], None]
    ) -> None:
        """SIGTERM: run the incarnation's own ``stop()`` (its graceful shutdown) as one of
        its tasks; when that returns the process exits (a clean exit: what it wrote stays
        in the page cache) and ``on_exit`` runs. A crash or pause meanwhile acts as on any
        task of the incarnation."""
        assert self.alive, f"{self.name} is not running"
        incarnation = self.incarnation
        self.world.trace.event("terminate", node=self.name, incarnation=incarnation)
        context = contextvars.Context()
        context.run(CURRENT.set, (self, incarnation))

        def done(task: asyncio.Task) -> None:
            if not self.alive or self.incarnation != incarnation:
                return  # crashed meanwhile: that ended the incarnation
            error = None if task.cancelled() else task.exception()
            if error is not None and not isinstance(error, OSError):
                self.world.process_failed(self, error)
                return
            self._stop("exit", error)
            on_exit()

        self.world.loop.create_task(stop(), context=context).add_done_callback(done)

    def restart(self) -> asyncio.Task:
        """Boot again from what survived on disk."""
        return self.start()

    def pause(self) -> None:
        """Stop running (SIGSTOP): timers and deliveries wait until ``resume``."""
        assert self.alive and not self.paused
        self.paused = True
        self.world.trace.event("pause", node=self.name)

    def resume(self) -> None:
        """Continue (SIGCONT): everything that came due while paused runs, in order."""
        assert self.alive and self.paused
        self.paused = False
        parked, self.parked = self.parked, []
        self.world.trace.event("resume", node=self.name, parked=len(parked))
        self.world.loop.unpark(parked)

    def skew_clock(self, skew_ms: int) -> None:
        """Set this process's wall-clock offset from virtual time."""
        self.skew_ms = skew_ms
        self.world.trace.event("clock-skew", node=self.name, skew_ms=skew_ms)
