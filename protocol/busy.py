"""Timing the steps of a coroutine on a clock: what a request costs the loop's thread.

``Timed(awaitable, clock)`` awaits ``awaitable`` and adds up ``clock``'s time across each of
its steps, from when the loop resumes it to when it yields: the work it did, not the time it
waited. The broker charges a client's ``request_percentage`` quota with it (broker/quotas.py:
the handler's steps; protocol/server.py: decoding the request and encoding and writing the
answer, Kafka's network thread time). The clock is Runtime.busy_clock: a real process's
thread CPU time; the simulator's stands still.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class Timed(Generic[T]):
    """Awaits a coroutine, adding up the ``clock`` time of each of its steps: what it cost
    the loop's thread, not the time it waited (for the log's flush, a replica, the
    controller), as Kafka counts a request handler thread's time."""

    __slots__ = ("_clock", "_steps", "busy_s")

    def __init__(self, awaitable: Awaitable[T], clock: Callable[[], float]) -> None:
        self._steps = awaitable.__await__()
        self._clock = clock
        self.busy_s = 0.0

    def __await__(self) -> Generator[Any, Any, T]:
        steps, clock = self._steps, self._clock
        value: Any = None
        error: BaseException | None = None
        while True:
            start = clock()
            try:
                yielded = steps.send(value) if error is None else steps.throw(error)
            except StopIteration as stop:
                self.busy_s += clock() - start
                return stop.value
            except BaseException:
                self.busy_s += clock() - start
                raise
            self.busy_s += clock() - start
            try:
                value, error = (yield yielded), None
            except BaseException as thrown:  # a cancellation: handed to the coroutine
                value, error = None, thrown
