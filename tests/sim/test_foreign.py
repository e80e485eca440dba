"""sim/foreign.py: a foreign client package reads the simulator's clock and seed while a run
lasts, and the real ones before and after."""

from __future__ import annotations

import asyncio
import random
import sys
import textwrap
import time
from pathlib import Path

import aiokafka.client
import aiokafka.conn
import aiokafka.consumer.fetcher
import pytest

from sim.foreign import VirtualTime, foreign
from sim.loop import CLOCK_RESOLUTION_S
from sim.process import EPOCH_MS
from sim.world import World


def test_aiokafka_reads_virtual_time_and_the_seeded_random_only_inside(world: World) -> None:
    rng = random.Random("aiokafka/1")

    async def inside() -> tuple[float, float, object, object]:
        await asyncio.sleep(12.5)
        with foreign("aiokafka", world.loop, rng):
            return (
                aiokafka.conn.time.monotonic(),
                aiokafka.consumer.fetcher.time.time(),
                aiokafka.client.random,
                aiokafka.consumer.fetcher.random,
            )

    monotonic, wall, client_random, fetcher_random = world.run(inside())
    assert monotonic == 12.5
    assert wall == pytest.approx(EPOCH_MS / 1000 + 12.5)
    assert client_random is rng and fetcher_random is rng
    # Restored: the interpreter's modules again, for every module that was rebound.
    assert aiokafka.conn.time is time and aiokafka.client.random is random
    assert aiokafka.consumer.fetcher.time is time


def test_readings_at_one_instant_move_on_by_the_clock_resolution(world: World) -> None:
    clock = VirtualTime(world.loop)

    async def readings() -> tuple[list[float], float]:
        await asyncio.sleep(3.0)
        same = [clock.monotonic() for _ in range(4)]
        await asyncio.sleep(1.0)
        return same, clock.monotonic()

    same, later = world.run(readings())
    assert same == pytest.approx([3.0 + n * CLOCK_RESOLUTION_S for n in range(4)], abs=1e-15)
    assert same == sorted(set(same))  # strictly increasing
    assert later == 4.0  # the lead is gone once the loop's clock moves


def test_a_wait_for_a_float_residue_ends_as_it_does_on_a_real_host(world: World) -> None:
    """aiokafka's fetcher waited ``backoff - lifetime`` = 3.6e-16 s again and again at one
    virtual instant: the loop runs a timer due within its resolution at once, without
    moving its clock. With the loop's own clock such a wait never ends (bounded here);
    with the foreign clock it ends at once."""

    def turns(read: object) -> int:
        async def wait() -> int:
            start = read()  # type: ignore[operator]
            deadline = start + 1e-12
            for turn in range(1, 100):
                remaining = deadline - read()  # type: ignore[operator]
                if remaining <= 0:
                    return turn
                await asyncio.wait([asyncio.ensure_future(asyncio.sleep(10))], timeout=remaining)
            return 100

        return world.run(wait())

    assert turns(world.loop.time) == 100
    assert turns(VirtualTime(world.loop).monotonic) == 1  # its next reading is past it


def test_a_package_binding_the_clock_by_name_is_refused_and_left_untouched(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "byname"
    package.mkdir()
    (package / "__init__.py").write_text("import time\nfrom . import clock\n")
    (package / "clock.py").write_text(
        textwrap.dedent(
            """
            import random
            from time import monotonic
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with (
            pytest.raises(RuntimeError, match=r"byname\.clock\.monotonic binds"),
            foreign("byname", world.loop, random.Random(1)),
        ):
            pass
        assert sys.modules["byname"].time is time
        assert sys.modules["byname.clock"].random is random
    finally:
        for name in ("byname", "byname.clock"):
            sys.modules.pop(name, None)


def test_the_packages_own_loop_errors_are_not_failures_and_others_still_are(
    world: World,
) -> None:
    """aiokafka reports an internal task's unretrieved exception and an unclosed connection
    through the loop's exception handler, from finalizers: its business, as on a real
    host. Any other loop error is still a failure of the run."""
    from aiokafka.errors import NotCoordinatorForGroupError
    from aiokafka.structs import TopicPartition

    handler = world.loop.get_exception_handler()

    async def errors() -> None:
        with foreign("aiokafka", world.loop, random.Random(1)):
            world.loop.call_exception_handler(
                {
                    "message": "Task exception was never retrieved",
                    "exception": NotCoordinatorForGroupError(),
                }
            )
            world.loop.call_exception_handler(
                {"message": "Unclosed AIOKafkaConnection", "conn": TopicPartition("t", 0)}
            )
            assert world.failures == []
            world.loop.call_exception_handler({"message": "boom", "exception": ValueError("x")})

    world.run(errors())
    assert [type(error) for _, error in world.failures] == [ValueError]
    assert world.loop.get_exception_handler() == handler
