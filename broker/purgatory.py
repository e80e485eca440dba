"""Requests parked until a partition changes (Kafka's DelayedOperationPurgatory).

An acks=-1 produce waits for its partition's high watermark, a fetch for new data or a new
high watermark on any partition it reads. Each waiter watches the partitions it cares about;
``notify(key)`` wakes exactly the waiters of that partition, which then re-check their own
condition (Kafka's tryComplete) and park again if it does not hold yet. Waiters are kept in
insertion order (dicts keyed by a counter), so wake-ups run in the same order on every run.

Bound: one waiter per request parked, and requests are bounded per connection
(protocol/server.py); a waiter removes itself from every key when it wakes or times out.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)  # what a waiter watches: a partition's key here


class DelayedOperations(Generic[K]):
    """Futures keyed by partition, woken by ``notify``."""

    __slots__ = ("_counter", "_watchers")

    def __init__(self) -> None:
        # key -> {waiter's token: (its future, the keys notified for it so far)}
        self._watchers: dict[K, dict[int, tuple[asyncio.Future[None], list[K]]]] = {}
        self._counter = itertools.count()

    def __len__(self) -> int:
        """Waiters parked, counted once per key they watch."""
        return sum(len(waiters) for waiters in self._watchers.values())

    async def wait(self, keys: Iterable[K], timeout_s: float) -> list[K]:
        """Until one of ``keys`` is notified or ``timeout_s`` passes: the keys notified
        (every one notified before this waiter ran), empty on a timeout."""
        if timeout_s <= 0:
            return []
        token = next(self._counter)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        fired: list[K] = []
        watched = list(dict.fromkeys(keys))
        for key in watched:
            self._watchers.setdefault(key, {})[token] = (future, fired)
        try:
            async with asyncio.timeout(timeout_s):
                await future
            return fired
        except TimeoutError:
            return fired
        finally:
            for key in watched:
                waiters = self._watchers.get(key)
                if waiters is not None:
                    waiters.pop(token, None)
                    if not waiters:
                        del self._watchers[key]

    def notify(self, key: K) -> int:
        """Wake every waiter watching ``key``; how many were woken."""
        waiters = self._watchers.pop(key, None)
        if not waiters:
            return 0
        for future, fired in waiters.values():
            fired.append(key)
            if not future.done():
                future.set_result(None)
        return len(waiters)

    def notify_all(self) -> None:
        """Wake everyone (the broker is closing, or every partition changed)."""
        for key in list(self._watchers):
            self.notify(key)
