"""Delayed operations keyed by partition: a change wakes exactly the waiters of its
partition, in the order they parked, and a waiter that times out leaves nothing behind."""

from __future__ import annotations

import asyncio

from broker.purgatory import DelayedOperations


def test_a_notify_wakes_only_the_waiters_of_that_partition() -> None:
    async def main() -> list[str]:
        delayed = DelayedOperations()
        woke: list[str] = []

        async def wait(name: str, keys: list[tuple[str, int]]) -> None:
            if await delayed.wait(keys, 5.0):
                woke.append(name)

        tasks = [
            asyncio.ensure_future(wait("a0", [("a", 0)])),
            asyncio.ensure_future(wait("b0", [("b", 0)])),
            asyncio.ensure_future(wait("a0-b0", [("b", 0), ("a", 0)])),
            asyncio.ensure_future(wait("a0-again", [("a", 0)])),
        ]
        await asyncio.sleep(0)
        assert delayed.notify(("a", 0)) == 3
        await asyncio.sleep(0)
        assert woke == ["a0", "a0-b0", "a0-again"]  # b0 still waits, the rest in order
        assert len(delayed) == 1
        delayed.notify_all()
        await asyncio.gather(*tasks)
        return woke

    assert asyncio.run(main())[-1] == "b0"


def test_a_waiter_that_times_out_unregisters_from_every_key() -> None:
    async def main() -> tuple[list[object], int, list[object]]:
        delayed = DelayedOperations()
        timed_out = await delayed.wait([("a", 0), ("b", 1)], 0.01)
        return timed_out, len(delayed), await delayed.wait([("a", 0)], 0)

    assert asyncio.run(main()) == ([], 0, [])


def test_a_waiter_learns_every_partition_notified_before_it_ran() -> None:
    """A fetch re-reads only these (broker/data_plane.py)."""

    async def main() -> list[object]:
        delayed = DelayedOperations()
        waiter = asyncio.ensure_future(delayed.wait([("a", 0), ("b", 0), ("c", 0)], 5.0))
        await asyncio.sleep(0)
        delayed.notify(("c", 0))
        delayed.notify(("a", 0))
        delayed.notify(("z", 9))  # not watched
        return await waiter

    assert asyncio.run(main()) == [("c", 0), ("a", 0)]
