"""A foreign client library, unmodified, on the simulator's clock and seed.

A real client (aiokafka) reads ``time.monotonic()`` for its timeouts, backoffs and
heartbeats, ``time.time()`` for metadata ages and record stamps, and the ``random`` module
for the broker it asks and the order it fetches in. The simulator owns the interpreter, so
while a run lasts it rebinds those two names inside every module of the library's package
(never the interpreter-wide modules, which the simulator and pytest read for real time) to
stand-ins: virtual time from the simulated loop, and a ``random.Random`` derived from the
seed. The library's source is not touched, and the same seed gives the same bytes.

Only module-level ``import time`` / ``import random`` bindings are rebound; ``foreign``
refuses a package that binds ``time.time`` or ``time.monotonic`` (or a random function) by
name, since those could not be reached, and it imports the whole package first, so no
module arrives later with the real ones.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import pkgutil
import random
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sim.loop import CLOCK_RESOLUTION_S, SimLoop
from sim.process import EPOCH_MS

_log = logging.getLogger(__name__)

# Names whose direct binding (``from time import monotonic``) would escape the rebinding.
_BY_NAME = (
    time.time,
    time.monotonic,
    time.perf_counter,
    time.time_ns,
    random.random,
    random.choice,
    random.shuffle,
    random.randint,
)


class VirtualTime:
    """What ``time`` is inside the foreign package: the loop's clock, and EPOCH_MS as the
    wall clock's start (as SimClock gives nodes, without a node's skew).

    Each reading at an instant the loop's clock has not left is one clock resolution past
    the last, as reading a real clock takes time. The loop runs a timer due within that
    resolution at once, without moving its clock, so a client that waits ``deadline - now``
    and finds a float residue (aiokafka's fetcher backoff: 3.6e-16 s) would otherwise wait
    again at the same instant for ever; on a real host the loop's own CPU time moves the
    clock past the deadline. The lead is bounded by the readings made in one instant."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self._last = -1.0

    def monotonic(self) -> float:
        now = self._loop.time()
        self._last = now if now > self._last else self._last + CLOCK_RESOLUTION_S
        return self._last

    perf_counter = monotonic

    def time(self) -> float:
        return EPOCH_MS / 1000 + self.monotonic()

    def time_ns(self) -> int:
        return int(self.time() * 1e9)

    def sleep(self, seconds: float) -> None:
        raise RuntimeError("a simulated client may not block the loop in time.sleep")

    def __getattr__(self, name: str) -> Any:  # struct_time, strftime, ...: the real ones
        return getattr(time, name)


def _modules(package: str) -> list[types.ModuleType]:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, f"{package}."):
        if ".tests" in info.name or info.name.endswith("_test"):
            continue
        importlib.import_module(info.name)
    return [
        module
        for name, module in sorted(sys.modules.items())
        if (name == package or name.startswith(f"{package}.")) and module is not None
    ]


def _owned_by(package: str, root: str, context: dict[str, Any]) -> bool:
    """Whether a loop error is the foreign package's own: its exception, an object of its
    (aiokafka's ``Unclosed AIOKafkaConnection`` names the connection), or a task running
    one of its coroutines (an internal task whose exception nobody retrieved)."""
    for value in context.values():
        if type(value).__module__.split(".")[0] == package:
            return True
        coro = value.get_coro() if isinstance(value, asyncio.Task) else None
        code = getattr(coro, "cr_code", None)
        if code is not None and code.co_filename.startswith(root):
            return True
    return False


@contextmanager
def foreign(package: str, loop: SimLoop, rng: random.Random) -> Iterator[None]:
    """While the block runs, ``package`` reads virtual time and ``rng``, and the loop
    errors it causes are its own business, as on a real host, where it logs them: its
    unretrieved internal tasks and unclosed connections are reported from finalizers, whose
    timing follows the garbage collector, so they stay out of the verdict and the trace.
    Every other loop error still reaches the handler the loop had (a node's is a crash)."""
    clock = VirtualTime(loop)
    modules = _modules(package)
    root = os.path.dirname(modules[0].__file__ or "") + os.sep
    handler = loop.get_exception_handler()

    def handle(current: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if _owned_by(package, root, context):
            _log.debug("%s: %s", package, context.get("message"))
        elif handler is not None:
            handler(current, context)
        else:
            current.default_exception_handler(context)

    rebound: list[tuple[types.ModuleType, str, object]] = []
    for module in modules:
        for name, value in list(vars(module).items()):
            if value is time:
                rebound.append((module, name, value))
                setattr(module, name, clock)
            elif value is random:
                rebound.append((module, name, value))
                setattr(module, name, rng)
            elif any(value is function for function in _BY_NAME):
                for undo_module, undo_name, original in rebound:
                    setattr(undo_module, undo_name, original)
                raise RuntimeError(
                    f"{module.__name__}.{name} binds {value!r} by name: it cannot be simulated"
                )
    loop.set_exception_handler(handle)
    try:
        yield
    finally:
        loop.set_exception_handler(handler)
        for module, name, original in reversed(rebound):
            setattr(module, name, original)
