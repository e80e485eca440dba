"""Bounded dual leadership, what check quorum buys: a running leader that has lost its
quorum resigns within fetch.timeout plus slack, so two running leaders of different epochs
never coexist for longer than that. Shared by every scenario that runs a quorum."""

from __future__ import annotations

from dataclasses import dataclass, field

# A cut-off leader resigns within fetch.timeout (2 s) plus one check period (0.5 s) of
# losing its quorum, while a successor needs fetch.timeout plus an election: honest overlap
# stays under a second. Without check quorum it lasts as long as the partition.
DUAL_LEADER_BOUND_S = 1.5


@dataclass(slots=True)
class DualLeaderWatch:
    """Fed periodically with the running leaders; says when a stale one outstays the bound."""

    bound_s: float = DUAL_LEADER_BOUND_S
    since: dict[str, float] = field(default_factory=dict)

    def observe(self, now_s: float, running: dict[str, int]) -> str | None:
        """``running``: node -> epoch of every leader that runs (neither down nor paused)."""
        newest = max(running.values(), default=None)
        found = None
        for name, epoch in running.items():
            if newest is not None and epoch < newest:
                since = self.since.setdefault(name, now_s)
                if now_s - since > self.bound_s and found is None:
                    found = (
                        f"check-quorum: {name} still leads epoch {epoch} {now_s - since:.1f}s "
                        f"after epoch {newest} elected another leader"
                    )
            else:
                self.since.pop(name, None)
        for name in list(self.since):
            if name not in running:
                del self.since[name]
        return found
