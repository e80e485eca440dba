"""Where a follower truncates when its leader reports a diverging epoch (KIP-320/KIP-101):
never to the high watermark, always to the end of the last epoch both logs agree on."""

from __future__ import annotations

from broker.fetcher import truncation_offset
from log.epoch_cache import UNDEFINED_EPOCH


def ends(entries: dict[int, int], log_end: int) -> object:
    """A follower's OffsetForLeaderEpoch over epoch -> start offset ``entries``."""
    epochs = sorted(entries)

    def end_for(epoch: int) -> tuple[int, int]:
        known = [e for e in epochs if e <= epoch]
        if not known:
            return UNDEFINED_EPOCH, -1
        found = known[-1]
        later = [entries[e] for e in epochs if e > found]
        return found, later[0] if later else log_end

    return end_for


def test_same_epoch_truncates_to_the_smaller_end() -> None:
    # Follower: epoch 1 from 0, epoch 2 from 10, log end 20. Leader: epoch 2 ended at 15.
    assert truncation_offset(2, 15, ends({1: 0, 2: 10}, 20), 20) == 15  # type: ignore[arg-type]


def test_an_epoch_the_follower_lacks_truncates_to_its_own_older_epoch_end() -> None:
    # Follower has epochs 1 (0..10) and 3 (10..); the leader says epoch 2 ends at 12.
    # The follower never saw epoch 2: it cuts to where its epoch 1 ends and asks again.
    assert truncation_offset(2, 12, ends({1: 0, 3: 10}, 18), 18) == 10  # type: ignore[arg-type]


def test_the_planted_bug_truncates_to_the_leader_end_of_an_epoch_the_follower_lacks() -> None:
    # follower-truncate-to-leader-end (KAFKA-6361): the same question, cut at the leader's
    # 12, keeps the follower's epoch-3 records at 10 and 11 where the leader has epoch 2's.
    end_for = ends({1: 0, 3: 10}, 18)
    assert truncation_offset(2, 12, end_for, 18, lacking_epoch_to_leader_end=True) == 12  # type: ignore[arg-type]
    # An epoch the follower has is cut as without the bug.
    assert truncation_offset(3, 15, end_for, 18, lacking_epoch_to_leader_end=True) == 15  # type: ignore[arg-type]


def test_no_common_epoch_truncates_to_the_leader_end() -> None:
    assert truncation_offset(0, 3, ends({4: 0}, 9), 9) == 3  # type: ignore[arg-type]
    assert truncation_offset(UNDEFINED_EPOCH, 2, ends({}, 9), 9) == 2  # type: ignore[arg-type]


def test_never_past_the_log_end() -> None:
    assert truncation_offset(2, 40, ends({2: 0}, 30), 30) == 30  # type: ignore[arg-type]
