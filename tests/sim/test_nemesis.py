"""The nemesis copes with any cluster size, and default sweeps vary the cluster's shape."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from log.runtime import Runtime
from sim.cli import _config, _parser
from sim.nemesis import FAULTS, Nemesis
from sim.world import World


async def _idle(runtime: Runtime) -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_fault_handles_a_small_cluster(size: int) -> None:
    with World(seed=5) as world:
        names = [f"n{i}" for i in range(1, size + 1)]
        for name in names:
            world.add_process(name).start(_idle)
        nemesis = Nemesis(world, names, FAULTS, interval_s=(0.05, 0.1), leader=lambda: names[0])
        world.run(nemesis.run(60.0))
        nemesis.heal_all()
        # Each of the 15 faults was drawn many times; only those between nodes may do nothing.
        assert nemesis.injected > 100
        assert all(world.processes[n].alive for n in names)


def test_default_raft_sweep_mixes_observers_and_a_run_replays_its_seed() -> None:
    sweep = _parser().parse_args(["sweep", "--scenario", "raft", "--seeds", "1-6"])
    mix = [_config(sweep, seed).observers for seed in range(1, 7)]
    assert sorted(set(mix)) == [0, 1, 2]
    run = _parser().parse_args(["run", "--scenario", "raft", "--seed", "4"])
    assert _config(run, 4).observers == mix[3]
    pinned = _parser().parse_args(["run", "--scenario", "raft", "--seed", "4", "--observers", "0"])
    assert _config(pinned, 4).observers == 0


def test_a_one_voter_sweep_with_every_fault_runs_to_its_verdicts() -> None:
    """`--voters 1 --faults all` used to crash the nemesis itself and abort the sweep."""
    kraft_sim = str(Path(sys.executable).parent / "kraft-sim")
    args = ["--scenario", "raft", "--voters", "1", "--observers", "0", "--seeds", "1-3"]
    result = subprocess.run(
        [kraft_sim, "sweep", "--jobs", "1", "--quiet", *args, "--duration", "10"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("seeds=3 ok=3 violation=0 ")


def test_stall_crash_stalls_a_majority_with_the_leader_then_cuts_every_node() -> None:
    with World(seed=3) as world:
        names = ["n1", "n2", "n3", "n100"]
        for name in names:
            world.add_process(name).start(_idle)
        nemesis = Nemesis(world, names, ("stall-crash",), leader=lambda: "n2")
        voters = names[:3]

        async def brown_out() -> tuple[list[str], list[int]]:
            nemesis.stall_crash(voters, 1.0, nemesis.rng)
            disks = {n: world.processes[n].disk for n in names}
            stalled = [n for n in names if disks[n]._stalled_until_s > 0]
            await asyncio.sleep(1.5)  # the power cut came at 1 s; the stalled are back
            back = [world.processes[n].incarnation for n in names]
            await asyncio.sleep(6.0)
            return stalled, back + [world.processes[n].incarnation for n in names]

        stalled, incarnations = world.run(brown_out())
        assert "n2" in stalled and len(stalled) == 2 and "n100" not in stalled
        after_cut, after_all = incarnations[:4], incarnations[4:]
        assert [after_cut[names.index(n)] for n in stalled] == [2, 2]
        assert sorted(after_cut) == [1, 1, 2, 2]  # the others are still down
        assert after_all == [2, 2, 2, 2]


def test_a_supervised_nemesis_restarts_a_node_that_exited_on_its_own() -> None:
    async def halts(runtime: Runtime) -> None:
        raise OSError(5, "disk failed")

    for supervise, expected in ((False, False), (True, True)):
        with World(seed=2) as world:
            world.add_process("n1").start(halts)
            nemesis = Nemesis(world, ["n1"], ("skew",), supervise=supervise)
            world.run(nemesis.run(5.0))
            assert (world.processes["n1"].incarnation > 1) is expected


def test_default_raft_sweep_runs_a_sole_voter_every_seventh_seed() -> None:
    sweep = _parser().parse_args(["sweep", "--scenario", "raft", "--seeds", "1-14"])
    voters = {seed: _config(sweep, seed).voters for seed in range(1, 15)}
    assert [seed for seed, count in voters.items() if count == 1] == [7, 14]
    assert {count for seed, count in voters.items() if seed % 7} == {3}
    pinned = _parser().parse_args(["run", "--scenario", "raft", "--seed", "7", "--voters", "3"])
    assert _config(pinned, 7).voters == 3


def test_a_terminated_process_runs_its_shutdown_exits_and_comes_back_after_the_hold() -> None:
    stopped: list[float] = []

    async def shutdown() -> None:
        await asyncio.sleep(0.5)  # a controlled shutdown takes a while
        stopped.append(asyncio.get_running_loop().time())

    with World(seed=4, keep_events=True) as world:
        process = world.add_process("n1")
        process.start(_idle)
        nemesis = Nemesis(world, ["n1"], ("skew",), supervise=True)
        exits: list[int] = []

        async def scenario() -> list[tuple[bool, int]]:
            seen = []
            process.terminate(shutdown, lambda: (exits.append(1), nemesis.down_for("n1", 2.0)))
            await asyncio.sleep(0.25)
            seen.append((process.alive, process.incarnation))  # still shutting down
            await asyncio.sleep(0.5)
            seen.append((process.alive, process.incarnation))  # exited, held down
            await asyncio.sleep(2.0)
            seen.append((process.alive, process.incarnation))  # restarted after the hold
            return seen

        assert world.run(scenario()) == [(True, 1), (False, 1), (True, 2)]
        assert stopped == [0.5] and exits == [1]
        kinds = [e["kind"] for e in world.trace.events or [] if e.get("node") == "n1"]
        assert kinds[:4] == ["start", "terminate", "exit", "start"]


def test_a_crash_during_a_graceful_shutdown_ends_it_without_an_exit() -> None:
    async def shutdown() -> None:
        await asyncio.sleep(1.0)

    with World(seed=4) as world:
        process = world.add_process("n1")
        process.start(_idle)
        exits: list[int] = []

        async def scenario() -> None:
            process.terminate(shutdown, lambda: exits.append(1))
            await asyncio.sleep(0.2)
            process.crash()
            await asyncio.sleep(2.0)

        world.run(scenario())
        assert exits == [] and not process.alive


def test_all_in_a_fault_list_stands_for_every_fault_of_all_and_opt_in_ones_need_naming() -> None:
    from sim.nemesis import parse_faults

    assert parse_faults("all", ("own",), ("later",)) == (*FAULTS, "own")
    assert parse_faults("all,later", ("own",), ("later",)) == (*FAULTS, "own", "later")
    assert parse_faults("crash,later,crash", (), ("later",)) == ("crash", "later")
    with pytest.raises(ValueError, match="unknown fault 'later'"):
        parse_faults("all,later")
