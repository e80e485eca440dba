"""Virtual time, process gating (pause/resume) and crash teardown with real asyncio code."""

from __future__ import annotations

import asyncio

import pytest

from log.runtime import Runtime
from sim.loop import SimulationStalled
from sim.world import World


def test_ten_virtual_minutes_of_timers_do_not_wait_in_real_time(world: World) -> None:
    ticks: list[float] = []

    async def heartbeat(rt: Runtime) -> None:
        loop = asyncio.get_running_loop()
        while loop.time() < 600:
            await asyncio.sleep(0.5)
            ticks.append(loop.time())

    for i in range(6):
        world.add_process(f"n{i}").start(heartbeat)

    async def until_done() -> None:
        await asyncio.sleep(601)

    # Virtual time, not real time: every wait of the loop (its selector's select, the only
    # call an asyncio loop blocks in) is a jump of loop.time() to the next timer, made at
    # once. (How fast that runs is measured by bench/bench_sim.py, not asserted here.)
    selector = world.loop._selector  # type: ignore[attr-defined]
    select = selector.select
    jumps: list[float] = []

    def jumping(timeout: float | None = None) -> list:
        before = world.loop.time()
        events = select(timeout)
        if timeout:
            jumps.append(world.loop.time() - before)
        return events

    selector.select = jumping
    world.run(until_done())
    # One wait per instant a timer is due (the six processes' ticks fall due together).
    assert jumps == pytest.approx([0.5] * 1200 + [1.0])
    assert len(ticks) == 6 * 1200
    assert ticks[:6] == [0.5] * 6
    assert world.loop.time() == pytest.approx(601)


def test_wait_for_times_out_on_virtual_time(world: World) -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), timeout=2.5)
        return loop.time()

    assert world.run(main()) == pytest.approx(2.5)


def test_a_run_with_nothing_left_to_do_reports_a_stall(world: World) -> None:
    async def wait_forever() -> None:
        await asyncio.get_running_loop().create_future()

    with pytest.raises(SimulationStalled):
        world.run(wait_forever())


def test_pause_holds_timers_until_resume(world: World) -> None:
    fired: list[float] = []

    async def ticker(rt: Runtime) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(5):
            await asyncio.sleep(1)
            fired.append(round(loop.time(), 6))

    process = world.add_process("n1")
    process.start(ticker)

    async def driver() -> None:
        await asyncio.sleep(1.5)
        process.pause()
        await asyncio.sleep(3)
        assert fired == [1.0]
        process.resume()
        await asyncio.sleep(10)

    world.run(driver())
    # The tick due at 2.0 runs on resume at 4.5; later ticks follow from there.
    assert fired == [1.0, 4.5, 5.5, 6.5, 7.5]


@pytest.mark.parametrize("then", ["crash", "resume"])
def test_a_timer_cancelled_while_parked_never_runs(world: World, then: str) -> None:
    """A process paused inside ``asyncio.timeout`` whose timer comes due: if the task leaves
    the timeout first (its crash-time cancellation, or a wake-up parked ahead of the timer),
    the timer is cancelled and must not run. Seed 66 of the kafka scenario died of this
    (``assert self._state is _State.ENTERED`` in asyncio's timeouts)."""
    left: list[str] = []
    wake: list[asyncio.Future[None]] = []

    async def node(rt: Runtime) -> None:
        wake.append(asyncio.get_running_loop().create_future())
        try:
            async with asyncio.timeout(1.0):
                await wake[0]
                left.append("woken")
        except TimeoutError:
            left.append("timed out")
        except asyncio.CancelledError:
            left.append("cancelled")
            raise

    process = world.add_process("n1")
    process.start(node)

    async def driver() -> None:
        await asyncio.sleep(0.5)
        process.pause()
        await asyncio.sleep(0.4)
        if then == "resume":
            wake[0].set_result(None)  # its task step parks at 0.9, ahead of the timer at 1.0
        await asyncio.sleep(0.6)
        getattr(process, then)()
        await asyncio.sleep(5)

    world.run(driver())
    assert world.failures == []
    assert left == ["cancelled" if then == "crash" else "woken"]


def test_crash_cancels_every_task_and_restart_runs_a_new_incarnation(world: World) -> None:
    progress: list[tuple[int, str]] = []
    workers: list[asyncio.Task] = []

    async def node(rt: Runtime) -> None:
        loop = asyncio.get_running_loop()
        incarnation = process.incarnation

        async def worker() -> None:
            try:
                await asyncio.sleep(1000)
            except asyncio.CancelledError:
                progress.append((incarnation, "worker cancelled"))
                raise

        workers.append(loop.create_task(worker()))
        await asyncio.sleep(100)
        progress.append((incarnation, "main finished"))

    process = world.add_process("n1")
    process.start(node)

    async def driver() -> None:
        await asyncio.sleep(1)
        process.crash()
        await asyncio.sleep(1)
        process.restart()
        await asyncio.sleep(200)

    world.run(driver())
    assert progress == [(1, "worker cancelled"), (2, "main finished")]
    assert [e["kind"] for e in world.trace.events or []] == ["start", "crash", "start"]


def test_a_raising_main_is_reported_as_a_failure(world: World) -> None:
    async def buggy(rt: Runtime) -> None:
        await asyncio.sleep(1)
        raise ValueError("bug in node code")

    world.add_process("n1").start(buggy)
    world.run(asyncio.sleep(2))
    assert [(name, repr(error)) for name, error in world.failures] == [
        ("n1", "ValueError('bug in node code')")
    ]


def test_wall_clock_follows_virtual_time_and_skew(world: World) -> None:
    process = world.add_process("n1")
    seen: list[int] = []

    async def node(rt: Runtime) -> None:
        seen.append(rt.clock.now_ms())
        await asyncio.sleep(2)
        seen.append(rt.clock.now_ms())

    process.start(node)

    async def driver() -> None:
        await asyncio.sleep(1)
        process.skew_clock(-5000)
        await asyncio.sleep(2)

    world.run(driver())
    assert seen[1] - seen[0] == 2000 - 5000
