"""The echo scenario's planted bugs change what the node does, and the checker catches them
from the node's own acknowledgements."""

from __future__ import annotations

import asyncio

import pytest

from sim.scenarios.echo import SYNC_EVERY, Shared, _node
from sim.world import World


def _cluster(bug: str | None, crash_at_s: float | None) -> tuple[Shared, int]:
    """Two echo nodes for 3 virtual seconds; n1 loses power at ``crash_at_s`` and reboots.
    Returns the checker's memory and how many fsyncs n1's disk performed."""
    with World(seed=11) as world:
        shared = Shared(bug=bug)
        names = ["n1", "n2"]
        for name in names:
            process = world.add_process(name)
            peers = [other for other in names if other != name]
            process.start(
                lambda rt, p=process, peers=peers: _node(rt, p, peers, shared, world.trace)
            )

        async def drive() -> None:
            if crash_at_s is None:
                await asyncio.sleep(3.0)
                return
            await asyncio.sleep(crash_at_s)
            world.processes["n1"].crash()
            world.processes["n1"].restart()
            await asyncio.sleep(0.5)

        world.run(drive())
        return shared, world.processes["n1"].disk.fsyncs


def test_ack_before_fsync_changes_the_nodes_io_not_the_checkers_expectation() -> None:
    honest, honest_fsyncs = _cluster(None, None)
    buggy, buggy_fsyncs = _cluster("ack-before-fsync", None)
    # The node acknowledges at the same sync points, so the checker's promise is the same
    # kind of number; what changed is that the fsyncs behind it did not happen.
    assert buggy.synced["n1"] % SYNC_EVERY == 0 and honest.synced["n1"] % SYNC_EVERY == 0
    boot_fsyncs = 3  # the recovered log, its directory and the root
    assert honest_fsyncs == boot_fsyncs + honest.synced["n1"] // SYNC_EVERY
    assert buggy_fsyncs < boot_fsyncs + buggy.synced["n1"] // SYNC_EVERY
    assert honest.violation is None and buggy.violation is None


@pytest.mark.parametrize(("bug", "lost"), [(None, False), ("ack-before-fsync", True)])
def test_a_power_cut_after_acknowledging_loses_records_only_with_the_bug(
    bug: str | None, lost: bool
) -> None:
    shared, _ = _cluster(bug, crash_at_s=2.5)
    assert (shared.violation or "").startswith("durability") == lost, shared.violation
