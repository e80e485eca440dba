"""Bounded staleness after the heal: every node replays the metadata log at least up to what
was committed when the faults stopped, within a bound.

A broker whose replay stalls keeps serving (it heartbeats, forwards admin requests, answers
Metadata) from a stale image forever, and nothing a client does through it need fail; only
its replayed offset shows it. The metadata scenario samples every node's applied offset after
the heal (``metadata-applied`` events) against the highest offset any node had published when
the heal began (the ``heal-start`` event's ``offset_end``: committed, since only committed
records are published). The simulator checks online and ``kraft-analyze`` from the trace,
with this one class.
"""

from __future__ import annotations

from dataclasses import dataclass, field

CHECK = "stale-metadata"


@dataclass(slots=True)
class CatchUp:
    """Each of ``nodes`` must apply offset ``target`` within ``bound_us`` of ``start_us``."""

    target: int
    start_us: int
    bound_us: int
    nodes: tuple[str, ...]
    last: dict[str, int] = field(default_factory=dict)  # node -> latest applied offset seen
    reached: dict[str, int] = field(default_factory=dict)  # node -> when it reached target

    def observe(self, node: str, offset: int, t_us: int) -> None:
        """``node`` had applied ``offset`` at ``t_us``."""
        self.last[node] = offset
        if offset >= self.target and node not in self.reached:
            self.reached[node] = t_us

    def lagging(self) -> list[str]:
        """The nodes not yet at the target, in ``nodes`` order."""
        return [node for node in self.nodes if node not in self.reached]

    def violations(self) -> list[str]:
        """One message per node that did not reach the target within the bound."""
        found = []
        for node in self.nodes:
            at = self.reached.get(node)
            if at is not None and at - self.start_us <= self.bound_us:
                continue
            seen = self.last.get(node)
            if at is not None:
                late = f"reached only {(at - self.start_us) / 1e6:.1f}s after it"
            else:
                late = "nothing" if seen is None else f"offset {seen}"
                late = f"had applied {late} {self.bound_us / 1e6:.0f}s after it"
            found.append(
                f"{CHECK}: {node} must replay the metadata log to offset {self.target}, "
                f"committed before the heal, but {late}"
            )
        return found
