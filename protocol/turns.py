"""Work on a request's entities a slice at a time, the event loop served in between.

Issue 22's rule: no request, however large within ``socket.request.max.bytes``, holds the
loop for more than a bounded slice before yielding. A handler walking a request's topics,
partitions, groups, configs or ACL filters counts the entities it has worked on with
``Turns`` (or iterates them through ``sliced``) and gives the loop a turn
(``asyncio.sleep(0)``) every ``every`` of them. The budget is counted in entities, never in
wall time, so a request is cut into the same slices on every machine and the simulator
runs it unchanged (its digests only see the extra turns).

The slice sizes: a unit of handler work (an entity looked up in the image or a
coordinator, and its answer built with ``make``) costs 20-120 profiler events (calls and
returns, tests/kraft/test_loop_hold.py); SLICE_ENTITIES of the dearest stay under that
test's bound of 60,000 events a turn, the same as decoding's SLICE_UNITS array elements
(protocol/incremental.py). ENCODE_SLICE_ENTITIES is the same budget for kio's encoding of
a big answer (or a forwarded request): its dearest entities (a Fetch partition, a
CreateTopics topic with its nested assignment and config) cost 165-200 events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import TypeVar

# Entities a handler works on between two turns of the loop.
SLICE_ENTITIES = 400
# Entities of a big answer (or forwarded request) encoded between two turns of the loop.
ENCODE_SLICE_ENTITIES = 250

T = TypeVar("T")


class Turns:
    """Counts the units of work a handler has done and gives the loop a turn every
    ``every`` of them (asyncio.sleep(0): deterministic, the simulator runs it unchanged).
    ``tick(units)`` counts an entity whose work is a multiple of the usual one (a topic and
    its partitions, a group and its offsets)."""

    __slots__ = ("_count", "_every")

    def __init__(self, every: int = SLICE_ENTITIES) -> None:
        assert every > 0
        self._count = 0
        self._every = every

    async def tick(self, units: int = 1) -> None:
        self._count += units
        if self._count >= self._every:
            self._count = 0
            await asyncio.sleep(0)


async def sliced(items: Iterable[T], every: int = SLICE_ENTITIES) -> AsyncIterator[T]:
    """``items`` one at a time, the loop given a turn after every ``every`` of them (the
    work the caller does on each between two items is what the turn bounds)."""
    turns = Turns(every)
    for item in items:
        yield item
        await turns.tick()


def weighted_slices(
    items: Sequence[T], weight: Callable[[T], int], budget: int = SLICE_ENTITIES
) -> Iterator[Sequence[T]]:
    """``items`` cut, in order, into runs whose weights add up to at most ``budget`` (an
    item heavier than the budget alone): the slices of a request whose entities carry
    work of their own (a resource and its configs, a topic and its partitions)."""
    begin, total = 0, 0
    for end, item in enumerate(items):
        units = max(1, weight(item))
        if total and total + units > budget:
            yield items[begin:end]
            begin, total = end, 0
        total += units
    if begin < len(items):
        yield items[begin:]
