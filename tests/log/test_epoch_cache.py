"""LeaderEpochFileCache: Kafka's assign rules, OffsetForLeaderEpoch answers, truncation from
either end, and persistence that survives a crash only once flushed."""

from __future__ import annotations

import asyncio
import random

from log.checkpoint import EpochEntry
from log.epoch_cache import LeaderEpochFileCache
from sim.disk import SimDisk

PATH = "/p/leader-epoch-checkpoint"


def _cache(entries: list[tuple[int, int]] = ()) -> tuple[SimDisk, LeaderEpochFileCache]:
    disk = SimDisk(random.Random(0))
    fs = disk.fs()
    fs.mkdir("/p")
    cache = LeaderEpochFileCache(fs, PATH)
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return disk, cache


def _pairs(cache: LeaderEpochFileCache) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in cache.entries()]


def test_assign_keeps_only_the_first_offset_of_each_epoch() -> None:
    _, cache = _cache()
    assert cache.assign(2, 10)
    assert not cache.assign(2, 15)  # same epoch, later offset: nothing to record
    assert not cache.assign(-1, 20)  # no epoch (old format): ignored
    assert cache.assign(4, 20)
    assert _pairs(cache) == [(2, 10), (4, 20)]
    assert cache.latest_epoch == 4


def test_assign_of_a_stale_epoch_truncates_entries_that_conflict() -> None:
    _, cache = _cache([(1, 0), (3, 10), (5, 20)])
    assert cache.assign(4, 15)  # removes (5, 20): its epoch is >= 4
    assert _pairs(cache) == [(1, 0), (3, 10), (4, 15)]
    assert cache.assign(4, 12)  # same epoch starting earlier replaces the entry
    assert _pairs(cache) == [(1, 0), (3, 10), (4, 12)]


def test_end_offset_for_follows_offset_for_leader_epoch() -> None:
    _, cache = _cache([(2, 10), (4, 20), (7, 35)])
    log_end = 50
    assert cache.end_offset_for(-1, log_end) == (-1, -1)  # undefined epoch
    assert cache.end_offset_for(7, log_end) == (7, 50)  # latest epoch: the LEO
    assert cache.end_offset_for(8, log_end) == (-1, -1)  # above the latest
    assert cache.end_offset_for(2, log_end) == (2, 20)  # next epoch's start
    assert cache.end_offset_for(3, log_end) == (2, 20)  # largest epoch <= 3 is 2
    assert cache.end_offset_for(6, log_end) == (4, 35)
    # Below every known epoch Kafka answers the requested epoch and the first start offset.
    assert cache.end_offset_for(1, log_end) == (1, 10)
    _, empty = _cache()
    assert empty.end_offset_for(3, log_end) == (-1, -1)


def test_truncate_from_end_drops_epochs_starting_at_or_after_the_offset() -> None:
    _, cache = _cache([(2, 10), (4, 20), (7, 35)])
    cache.truncate_from_end(36)
    assert _pairs(cache) == [(2, 10), (4, 20), (7, 35)]
    cache.truncate_from_end(20)
    assert _pairs(cache) == [(2, 10)]


def test_truncate_from_start_moves_the_covering_epoch_to_the_new_start() -> None:
    _, cache = _cache([(2, 10), (4, 20), (7, 35)])
    cache.truncate_from_start(25)
    assert _pairs(cache) == [(4, 25), (7, 35)]
    cache.truncate_from_start(5)  # below every entry: unchanged
    assert _pairs(cache) == [(4, 25), (7, 35)]
    assert cache.epoch_for_offset(30) == 4
    assert cache.epoch_for_offset(40) == 7
    assert cache.epoch_for_offset(1) is None


def test_flushed_cache_survives_a_crash_and_unflushed_changes_do_not() -> None:
    disk, cache = _cache([(1, 0), (2, 5)])
    asyncio.run(cache.flush())
    assert not cache.dirty
    cache.assign(3, 9)
    disk.crash()
    reloaded = LeaderEpochFileCache(disk.fs(), PATH)
    assert reloaded.entries() == [EpochEntry(1, 0), EpochEntry(2, 5)]


def test_failed_flush_leaves_the_cache_dirty() -> None:
    disk, cache = _cache([(1, 0)])
    disk.fail_fsyncs(1)
    try:
        asyncio.run(cache.flush())
    except OSError:
        pass
    else:
        raise AssertionError("fsync failure was swallowed")
    assert cache.dirty
    asyncio.run(cache.flush())
    assert not cache.dirty
