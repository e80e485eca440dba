"""What the leader knows about each replica, and the majority arithmetic over it.

The high watermark is the largest offset that a majority of voters have durably in their
logs: the leader's own flushed end offset counts as its vote, each follower's fetch offset
as theirs (a follower only fetches on after flushing what it fetched before).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass


def majority(voter_count: int) -> int:
    """How many voters make a quorum."""
    return voter_count // 2 + 1


@dataclass(slots=True)
class ReplicaProgress:
    """One replica as seen by the leader in the current epoch."""

    replica_id: int
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_sent_high_watermark: int = -1
    directory_id: uuid.UUID | None = None  # from its fetches (Fetch v17 ReplicaDirectoryId)


def quorum_offset(voter_end_offsets: list[int]) -> int:
    """The largest offset that a majority of the given voter end offsets reach."""
    ordered = sorted(voter_end_offsets, reverse=True)
    return ordered[majority(len(ordered)) - 1]
