"""The node layer: where each node of a fault run lives, and how its network is cut.

A backend gives every node its own host (an address the others and the clients reach), runs
a node's command there, and cuts or slows that host's traffic. ``NetnsBackend``
(jepsen/netns.py) does it with Linux network namespaces on one machine; a Docker or SSH
backend implements the same protocol (a container or a machine per node).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Backend(Protocol):
    """What the harness needs of the machines its nodes run on."""

    def up(self, nodes: Sequence[int]) -> None:
        """Create one host per node id, each with its address, reachable from here."""

    def address(self, node: int) -> str:
        """The address of a node's host (it listens there; clients connect there)."""

    def wrap(self, node: int, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` on a node's host, exec'ing it in place so
        the process the harness starts is the node (signals reach it)."""

    def drop_from(self, node: int, peers: Sequence[int]) -> None:
        """Drop every packet ``node`` receives from ``peers`` (one direction of a cut)."""

    def slow(self, node: int, delay_ms: int, jitter_ms: int, loss_pct: int) -> dict[str, object]:
        """Delay (with jitter) and lose ``loss_pct`` % of ``node``'s traffic, or the nearest
        the host allows; what was applied, for the nemesis log (``method`` names how)."""

    def heal(self) -> None:
        """Remove every cut and every slow link."""

    def down(self) -> None:
        """Remove every host, address and rule ``up`` made; idempotent, also after a crash
        (the processes still running on the hosts are killed)."""
