"""Stand-ins for what the scenario checkers read of the simulation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Process:
    """A simulated process as a checker sees it (sim.scenarios.raft_checks.ProcessView)."""

    name: str
    alive: bool = True
    paused: bool = False
    incarnation: int = 1
