"""The simulator's event loop: asyncio on virtual time, with per-process gating.

Virtual time: the loop's selector never blocks. When nothing is runnable it jumps the clock to
the next timer, so ``asyncio.sleep``, ``wait_for``, timeouts and ``loop.time()`` run unchanged
at thousands of virtual seconds per wall second. If nothing is runnable and no timer is
pending the simulation can never progress again, and ``SimulationStalled`` says so instead
of hanging.

Gating: every callback a simulated process schedules (task steps, timers, future callbacks,
network deliveries to it) is tagged with the process incarnation found in its context
(``CURRENT``). While a process is paused its callbacks are parked and replayed in order on
resume, which is what SIGSTOP/SIGCONT do to a real process. After a crash the old
incarnation's tasks are cancelled and allowed to unwind, but every resource they could touch
(disk handles, sockets, listeners) belongs to the dead incarnation and refuses them.

Sockets: ``create_connection`` and ``create_server`` (and so ``asyncio.open_connection`` and
``asyncio.start_server``) are served by the simulated network; nothing here opens a real
socket except asyncio's internal self-pipe, which is never selected.
"""

from __future__ import annotations

import asyncio
import contextvars
import selectors
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.net import SimNetwork
    from sim.process import SimProcess

# The (process, incarnation) that owns the running code; None for the simulator itself.
CURRENT: contextvars.ContextVar[tuple[SimProcess, int] | None] = contextvars.ContextVar(
    "kraft_sim_current_process", default=None
)


@dataclass(frozen=True, slots=True)
class Parked:
    """A callback that came due while its process was paused, with the handle its owner
    may still cancel."""

    handle: asyncio.Handle
    callback: Callable[..., Any]
    args: tuple
    context: contextvars.Context


# Timers closer than this are treated as due together; virtual time is exact, so this only
# absorbs float rounding in ``when - now``.
CLOCK_RESOLUTION_S = 1e-9


class SimulationStalled(RuntimeError):
    """Nothing is runnable and no timer is pending: the run can never make progress."""


class _VirtualSelector(selectors.BaseSelector):
    """A selector that reports no I/O and turns every wait into a jump of virtual time."""

    def __init__(self) -> None:
        self.loop: SimLoop | None = None
        self._map: dict[int, selectors.SelectorKey] = {}

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        key = selectors.SelectorKey(fileobj, fd, events, data)
        self._map[fd] = key
        return key

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        return self._map.pop(fd)

    def select(self, timeout: float | None = None) -> list:
        assert self.loop is not None
        if timeout is None:
            raise SimulationStalled("no runnable callback and no pending timer")
        if timeout > 0:
            self.loop._advance(timeout)
        return []

    def get_map(self) -> dict[int, selectors.SelectorKey]:
        return self._map

    def close(self) -> None:
        self._map.clear()


class SimLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose clock is virtual and whose sockets are simulated."""

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._virtual_time = 0.0
        self._clock_resolution = CLOCK_RESOLUTION_S
        self.network: SimNetwork | None = None
        self.callbacks_run = 0

    # ---- virtual time --------------------------------------------------------------------
    def time(self) -> float:
        return self._virtual_time

    def _advance(self, timeout: float) -> None:
        target = self._virtual_time + timeout
        if self._scheduled and self._scheduled[0]._when <= target:
            target = max(self._virtual_time, self._scheduled[0]._when)
        self._virtual_time = target

    # ---- gating --------------------------------------------------------------------------
    def _owner(self, context: contextvars.Context | None) -> tuple[SimProcess, int] | None:
        return CURRENT.get() if context is None else context.get(CURRENT)

    def _gate(
        self,
        owner: tuple[SimProcess, int],
        handle: list[asyncio.Handle],
        callback: Callable[..., Any],
        args: tuple,
        context: contextvars.Context | None,
    ) -> None:
        process, incarnation = owner
        if process.paused and process.incarnation == incarnation:
            # The handle goes along: code that cancels it while the process is paused (an
            # ``asyncio.timeout`` exited by a task step parked ahead of its timer) must still
            # see it not run, as asyncio promises.
            parked = context if context is not None else contextvars.copy_context()
            process.parked.append(Parked(handle[0], callback, args, parked))
            return
        self.callbacks_run += 1
        callback(*args)

    def call_soon(
        self, callback: Callable[..., Any], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        owner = self._owner(context)
        if owner is None:
            return super().call_soon(callback, *args, context=context)
        cell: list[asyncio.Handle] = []
        handle = super().call_soon(
            self._gate, owner, cell, callback, args, context, context=context
        )
        cell.append(handle)
        return handle

    def call_at(
        self,
        when: float,
        callback: Callable[..., Any],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        owner = self._owner(context)
        if owner is None:
            return super().call_at(when, callback, *args, context=context)
        cell: list[asyncio.Handle] = []
        handle = super().call_at(
            when, self._gate, owner, cell, callback, args, context, context=context
        )
        cell.append(handle)
        return handle

    def unpark(self, parked: list[Parked]) -> None:
        """Reschedule callbacks a paused process could not run, in their original order."""
        for entry in parked:
            super().call_soon(self._run_parked, entry, context=entry.context)

    @staticmethod
    def _run_parked(entry: Parked) -> None:
        # Checked when it runs, not when it is rescheduled: a crash cancels the tasks and
        # unparks in one step, and a cancelled task's unwinding (leaving its timeouts) runs
        # ahead of the parked timers.
        if not entry.handle.cancelled():
            entry.callback(*entry.args)

    # ---- tasks belong to the process that creates them ------------------------------------
    def create_task(
        self,
        coro: Coroutine[Any, Any, Any],
        *,
        name: str | None = None,
        context: contextvars.Context | None = None,
    ) -> asyncio.Task:
        task = super().create_task(coro, name=name, context=context)
        owner = self._owner(context)
        if owner is not None:
            owner[0].adopt(task, owner[1])
        return task

    # ---- sockets go to the simulated network ----------------------------------------------
    async def create_connection(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str | None = None,
        port: int | None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        _reject_unsupported(kwargs, ("ssl", "sock"))
        assert self.network is not None, "SimLoop has no network attached"
        return await self.network.connect(protocol_factory, host, port)

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: int | None = None,
        **kwargs: Any,
    ) -> asyncio.AbstractServer:
        _reject_unsupported(kwargs, ("ssl", "sock"))
        assert self.network is not None, "SimLoop has no network attached"
        return self.network.listen(
            protocol_factory, host, port or 0, start_serving=kwargs.get("start_serving", True)
        )

    def run_in_executor(self, executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        raise RuntimeError(
            "run_in_executor inside the simulator: threads break determinism; "
            "use the runtime seams (simulated disk) instead"
        )

    async def getaddrinfo(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("name resolution inside the simulator: connect by simulated host name")


def _reject_unsupported(kwargs: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        if kwargs.get(name) is not None:
            raise ValueError(f"the simulated network does not support {name}=")
