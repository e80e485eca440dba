"""Planted bugs in a real process, for fault runs that must see a broken build caught.

The simulator plants a bug with ``kraft-sim run --bug NAME``; a real ``kraft-server`` reads
``KRAFT_PLANTED_BUGS`` (comma-separated names from broker/bugs.py, the controller's and
Raft's tables) once, at start-up, so ``kraft-jepsen run --bug NAME`` can start a cluster whose
every node carries it. Never set it outside a test: each name breaks a safety guarantee.
"""

from __future__ import annotations

from collections.abc import Mapping

from broker.bugs import BROKER_BUGS
from kraft.config import ConfigError
from metadata.controller.quorum_controller import CONTROLLER_BUGS
from raft.driver import NODE_BUGS as RAFT_BUGS

PLANTED_BUGS_ENV = "KRAFT_PLANTED_BUGS"
PLANTED_BUGS: dict[str, str] = {**RAFT_BUGS, **CONTROLLER_BUGS, **BROKER_BUGS}


def planted_bugs(environ: Mapping[str, str]) -> frozenset[str]:
    """The bugs ``environ`` plants (none when the variable is unset or empty); a
    ConfigError naming an unknown one."""
    names = [name.strip() for name in environ.get(PLANTED_BUGS_ENV, "").split(",")]
    bugs = frozenset(name for name in names if name)
    unknown = sorted(bugs - PLANTED_BUGS.keys())
    if unknown:
        raise ConfigError(
            f"{PLANTED_BUGS_ENV}: unknown planted bug {unknown[0]!r} "
            f"(known: {', '.join(sorted(PLANTED_BUGS))})"
        )
    return bugs
