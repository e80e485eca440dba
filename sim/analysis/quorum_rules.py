"""Quorum invariants that both the online raft checker and ``kraft-analyze`` judge: one
definition each, fed live state by the simulator and trace events by the analysis.

Plain Python (no pandas, no raft imports), so the simulator can import it cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# A leader cut off from a majority of voters resigns within fetch.timeout (2 s) plus one
# check period (0.5 s) of its last follower fetch; one more second of slack. Without check
# quorum it leads for as long as the cut lasts (hold times run up to 6 s).
CUT_OFF_BOUND_S = 3.5


def snapshot_load_violation(
    node: str, end_offset: int, high_watermark: int, log_start: int
) -> str | None:
    """A snapshot holds only committed records and replaces the log below its end: a node
    that loaded one knows its end is committed (its high watermark is at least that), and
    its log starts exactly there (the records below are in the snapshot, and only there)."""
    if high_watermark < end_offset:
        return (
            f"snapshot-load: {node} loaded the snapshot ending at {end_offset} but its high "
            f"watermark is {high_watermark}"
        )
    if log_start != end_offset:
        return (
            f"snapshot-load: {node} loaded the snapshot ending at {end_offset} but its log "
            f"starts at {log_start}"
        )
    return None


def truncation_violation(
    node: str, to_offset: int, cut_epoch: int | None, committed_epoch: int | None
) -> str | None:
    """A truncation may cut only records the cluster has not committed. By log matching, if
    the first record it cut has the epoch committed at its offset, it *is* that record."""
    if committed_epoch is not None and cut_epoch == committed_epoch:
        return (
            f"committed-lost: {node} truncated to {to_offset}, cutting the record of epoch "
            f"{cut_epoch} the cluster committed there"
        )
    return None


def resign_violation(node: str, epoch: int, voters: int) -> str | None:
    """A leader resigns only when it has lost its quorum, which a sole voter never can: it is
    its own majority (KAFKA-16144: check quorum waited for fetches a sole voter never gets)."""
    if voters == 1:
        return (
            f"check-quorum: {node}, the sole voter, resigned epoch {epoch} though it is its own "
            "majority"
        )
    return None


def cut_off_violation(node: str, epoch: int, cut_off_s: float) -> str | None:
    """A leader cut off from a majority of the voters (down, paused or across a network
    cut, either way) for ``cut_off_s`` while it kept leading: check quorum bounds that."""
    if cut_off_s > CUT_OFF_BOUND_S:
        return (
            f"cut-off-leader: {node} led epoch {epoch} for {cut_off_s:.1f}s cut off from a "
            "majority of the voters"
        )
    return None


@dataclass(slots=True)
class CutOffWatch:
    """Fed periodically with the running leaders cut off from their majority; a cut-off
    spell ends when the leader is no longer cut off, or no longer a running leader. What
    check quorum buys, judged without waiting for the majority side to elect anyone."""

    since: dict[str, tuple[float, int]] = field(default_factory=dict)

    def observe(self, now_s: float, cut_off: dict[str, int]) -> str | None:
        """``cut_off``: node -> epoch of every running leader cut off now. Judges every
        spell, the ones that just ended included, at ``now_s``; the first violation."""
        for name, epoch in cut_off.items():
            self.since.setdefault(name, (now_s, epoch))
        found = None
        for name, (since, epoch) in sorted(self.since.items()):
            found = found or cut_off_violation(name, epoch, now_s - since)
            if name not in cut_off:
                del self.since[name]
        return found
