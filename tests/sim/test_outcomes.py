"""How a run ends: a node dying of an unexpected exception is reported at once, with its
traceback, as ``crashed``; a check that cannot decide is ``unknown``; the sweep counts each
outcome on its own."""

from __future__ import annotations

import asyncio

from log.runtime import Runtime
from sim.cli import run_config, sweep_summary
from sim.harness import ScenarioRun
from sim.run import RunConfig, RunResult


class QuorumStateError(RuntimeError):
    pass


def _run_with_a_dying_node(unknown: str | None = None) -> RunResult:
    run = ScenarioRun(RunConfig("echo", 1), {})
    violations: list[str] = []

    async def doomed(runtime: Runtime) -> None:
        await asyncio.sleep(1.0)
        raise QuorumStateError("epoch went backwards")

    async def healthy(runtime: Runtime) -> None:
        await asyncio.Event().wait()

    run.world.add_process("n1").start(doomed)
    run.world.add_process("n2").start(healthy)

    async def drive() -> None:
        await asyncio.sleep(60.0)  # the workload and heal phase would go on this long

    return run.finish(
        drive(),
        lambda: violations[0] if violations else None,
        violations.append,
        dict,
        lambda: unknown,
    )


def test_a_node_dying_of_an_exception_is_a_crash_reported_at_once_with_its_traceback() -> None:
    result = _run_with_a_dying_node()
    assert result.outcome == "crashed" and not result.ok
    assert result.violation == "crashed: n1 raised QuorumStateError('epoch went backwards')"
    assert result.virtual_s < 1.1  # stopped at the death, not 60 s later as "liveness"
    assert result.detail is not None
    assert "Traceback" in result.detail and "in doomed" in result.detail


def test_a_crash_wins_over_an_unknown_check() -> None:
    result = _run_with_a_dying_node(unknown="linearizability: out of budget")
    assert result.outcome == "crashed"


def test_the_simulator_raising_is_a_crashed_run_not_the_end_of_a_sweep() -> None:
    result = run_config(RunConfig("echo", 3, duration_s=1.0, bug="no-such-bug"))
    assert result.outcome == "crashed"
    assert (result.violation or "").startswith("crashed: the simulator raised")
    assert "Traceback" in (result.detail or "")


def _result(seed: int, violation: str | None = None, unknown: str | None = None) -> RunResult:
    return RunResult(seed, violation, "0" * 32, 1.0, 1.0, unknown=unknown)


def test_the_sweep_line_counts_each_outcome_separately() -> None:
    results = [
        _result(1),
        _result(2, unknown="linearizability: topic t0 undecided after 2000000 steps"),
        _result(3, violation="acked-lost: ..."),
        _result(4, violation="crashed: n2 raised QuorumStateError()"),
        _result(5),
    ]
    line, failed = sweep_summary(results, allow_unknown=False)
    assert line == ("seeds=5 ok=2 violation=1 unknown=1 crashed=1 failed=3 first_failing=2")
    assert failed == 3
    line, failed = sweep_summary(results, allow_unknown=True)
    assert line.endswith("failed=2 first_failing=3") and failed == 2
