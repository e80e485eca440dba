"""Proposals made in one event-loop turn share a record batch, and each keeps its own offsets.

The accumulator alone (hypothesis over proposal shapes), then a single-voter RaftNode on a
real disk: a burst of proposals becomes one batch, every ``propose_and_wait`` resolves with
its own last offset, the log holds each proposal's records at the offsets it was given, and
proposals accepted just before leadership is lost fail with LeadershipLost.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from log.batch import decode_batch, iter_batches
from log.records import Record
from log.runtime import real_runtime
from raft.batch_accumulator import BatchAccumulator, estimated_size, split_proposal
from raft.core import NotLeaderError, Role
from raft.disk_log import DiskLog
from raft.driver import LeadershipLost, RaftNode, RaftNodeConfig


def record(value: bytes) -> Record:
    return Record(None, value, 1_767_225_600_000)


@given(
    sizes=st.lists(st.tuples(st.integers(1, 40), st.integers(0, 300)), min_size=1, max_size=40),
    max_records=st.integers(40, 120),
    max_bytes=st.integers(14_000, 40_000),  # a whole proposal always fits
)
def test_accumulator_packs_whole_proposals_at_consecutive_offsets(
    sizes: list[tuple[int, int]], max_records: int, max_bytes: int
) -> None:
    accumulator = BatchAccumulator(max_batch_records=max_records, max_batch_bytes=max_bytes)
    base = 17
    proposals = [[record(bytes(size)) for _ in range(count)] for count, size in sizes]
    offsets = [accumulator.add(p, 3, lambda: base) for p in proposals]
    batches = accumulator.take()

    assert accumulator.empty()
    expected_last = base - 1
    for proposal, offset in zip(proposals, offsets, strict=True):
        expected_last += len(proposal)
        assert offset == expected_last
    # The batches are the proposals in order, each proposal whole inside one batch.
    flat = [r for batch in batches for r in batch]
    assert flat == [r for p in proposals for r in p]
    boundaries = set()
    position = 0
    for batch in batches:
        position += len(batch)
        boundaries.add(position)
        assert len(batch) <= max_records
    position = 0
    ends = set()
    for proposal in proposals:
        position += len(proposal)
        ends.add(position)
    assert boundaries <= ends


def test_accumulator_leaves_proposals_it_cannot_share_to_the_caller() -> None:
    accumulator = BatchAccumulator(max_batch_records=100, max_batch_bytes=1000)
    assert accumulator.add([record(bytes(2000))], 1, lambda: 0) is None
    explicit = Record(None, b"v", 0, offset_delta=0)
    assert accumulator.add([explicit], 1, lambda: 0) is None
    assert accumulator.empty()


@given(
    sizes=st.lists(st.integers(0, 3000), max_size=60),
    max_records=st.integers(1, 20),
    max_bytes=st.integers(100, 5000),
)
def test_a_split_proposal_keeps_order_and_fits_each_piece_in_one_batch(
    sizes: list[int], max_records: int, max_bytes: int
) -> None:
    records = [record(bytes(size)) for size in sizes]
    pieces = split_proposal(records, max_records, max_bytes)
    assert [r for piece in pieces for r in piece] == records
    for piece in pieces:
        assert 0 < len(piece) <= max_records
        size = estimated_size(piece)
        assert size is not None
        assert size <= max_bytes or len(piece) == 1  # only a lone oversized record exceeds


async def single_voter(tmp_path: Path) -> tuple[RaftNode, DiskLog]:
    runtime = real_runtime(seed=7)
    directory = str(tmp_path / "__cluster_metadata-0")
    runtime.fs.mkdir(directory)
    log = await DiskLog.open(runtime, directory)
    node = RaftNode(
        runtime,
        RaftNodeConfig(
            node_id=1, voters={1: ("127.0.0.1", 1)}, cluster_id="c", metadata_dir=directory
        ),
        log,
    )
    await node.start()
    for _ in range(1000):
        if node.role is Role.LEADER and node.high_watermark > 0:
            break
        await asyncio.sleep(0.01)
    assert node.role is Role.LEADER
    return node, log


def test_a_burst_of_proposals_is_one_batch_and_each_resolves_to_its_offset(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        node, log = await single_voter(tmp_path)
        try:
            start = log.end_offset()
            proposals = [[record(f"{i}.{j}".encode()) for j in range(1 + i % 3)] for i in range(50)]
            waits = [asyncio.ensure_future(node.propose_and_wait(p)) for p in proposals]
            offsets = await asyncio.wait_for(asyncio.gather(*waits), 10)
            last = start - 1
            for proposal, offset in zip(proposals, offsets, strict=True):
                last += len(proposal)
                assert offset == last
            data = log.read(start, 1 << 20)
            batches = [decode_batch(data, position) for position, _ in iter_batches(data)]
            assert len(batches) == 1  # every proposal of the turn went into one batch
            header, records = batches[0]
            assert header.base_offset == start
            assert header.partition_leader_epoch == node.epoch
            assert [r.value for r in records] == [r.value for p in proposals for r in p]
            # A proposal in a later turn is a batch of its own, after the first.
            assert node.propose([record(b"later")]) == last + 1
            assert await asyncio.wait_for(node.propose_and_wait([record(b"x")]), 10) == last + 2
        finally:
            await node.close()
            await log.close()

    asyncio.run(run())


def test_proposals_accepted_before_leadership_is_lost_fail_with_leadership_lost(
    tmp_path: Path,
) -> None:
    async def run() -> None:
        node, log = await single_voter(tmp_path)
        try:
            end = log.end_offset()
            waits = [asyncio.ensure_future(node.propose_and_wait([record(b"v")])) for _ in range(3)]
            await asyncio.sleep(0)  # the proposals are accepted, not yet appended
            assert node.core is not None
            node.core.resign()  # leadership goes before the turn ends
            for wait in waits:
                with pytest.raises(LeadershipLost):
                    await asyncio.wait_for(wait, 10)
            assert log.end_offset() == end  # nothing of theirs reached the log
            with pytest.raises(NotLeaderError):
                node.propose([record(b"w")])
        finally:
            await node.close()
            await log.close()

    asyncio.run(run())


def test_after_a_failed_append_no_proposal_is_given_the_lost_records_offsets(
    tmp_path: Path,
) -> None:
    """A disk error fails the turn's append and the node stops; a proposal made before it
    has stopped used to be given the offsets of the records the failed append lost (counted
    again from the log's end), and the controller, which had counted them, failed an
    assertion ("records proposed at 9 ended at 8"). It is refused NotLeaderError."""

    async def run() -> None:
        node, log = await single_voter(tmp_path)
        try:
            end = log.end_offset()

            def failing_append(*args: object, **kwargs: object) -> int:
                raise OSError(5, "simulated append failure")

            log.append_as_leader = failing_append  # type: ignore[method-assign]
            assert node.propose([record(b"lost")]) == end
            await asyncio.sleep(0)  # the turn ends: the append fails, the node is failing
            assert node._failure is not None and node.role is Role.LEADER
            with pytest.raises(NotLeaderError):
                node.propose([record(b"next")])
        finally:
            await node.close()
            await log.close()

    asyncio.run(run())
