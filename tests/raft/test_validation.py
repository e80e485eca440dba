"""Forged and malformed quorum RPCs are refused without touching the node's state.

Crafted core messages against RaftCore (the checks of raft/validation.py and the epoch
bound), the voter-key check of the driver against kio requests, and the quorum-state file's
bounds. Each case was reproduced on main: a Vote naming the node itself with epoch 2^31-1 was
granted and the next election overflowed the batch header; a BeginQuorumEpoch from non-voter
7 made the node follow 7.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from log.runtime import real_runtime
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import CONTROLLER, ServedApis
from raft import codec
from raft import core as core_module
from raft.core import OBSERVER_SESSION_TIMEOUT_MS, RaftCore, Role
from raft.disk_log import DiskLog
from raft.driver import RaftNode, RaftNodeConfig
from raft.messages import (
    MAX_EPOCH,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    Inbound,
    VoteRequest,
)
from raft.quorum_state import QuorumState, QuorumStateError
from raft.replicated_log import MemoryLog
from tests.raft.harness import CoreCluster
from tests.raft.test_core import elect

INT32_MAX = 2**31 - 1


def answer(core: RaftCore, src: int, body: object) -> object:
    """Step one request into ``core``; the answer it sends back on that connection."""
    core.step(Inbound(src, body, reply_to="conn"))  # type: ignore[arg-type]
    ready = core.ready()
    (reply,) = [m.body for m in ready.messages if m.reply_to == "conn"]
    assert ready.state is None, "a refused request must not persist anything"
    return reply


def follower_of_three() -> tuple[CoreCluster, RaftCore]:
    cluster = CoreCluster(voters=3)
    leader = elect(cluster, random.Random(11))
    return cluster, cluster.cores[next(n for n in cluster.voter_ids if n != leader)]


def vote(epoch: int, candidate: int, *, last_epoch: int = 0, pre_vote: bool = False) -> VoteRequest:
    return VoteRequest(epoch, candidate, last_epoch, 0, pre_vote)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        # The exploit: the node's own id and the largest int32 epoch.
        (lambda me: vote(INT32_MAX, me), Errors.INVALID_REQUEST),
        (lambda me: vote(INT32_MAX, 3 if me != 3 else 2), Errors.INVALID_REQUEST),
        (lambda me: vote(5, -1), Errors.INVALID_REQUEST),
        (lambda me: vote(5, 3 if me != 3 else 2, last_epoch=5), Errors.INVALID_REQUEST),
        (lambda me: vote(5, 7), Errors.INCONSISTENT_VOTER_SET),
        (lambda me: BeginQuorumEpochRequest(9, 7), Errors.INCONSISTENT_VOTER_SET),
        (lambda me: BeginQuorumEpochRequest(9, me), Errors.INVALID_REQUEST),
        (
            lambda me: BeginQuorumEpochRequest(INT32_MAX, 3 if me != 3 else 2),
            Errors.INVALID_REQUEST,
        ),
        (lambda me: EndQuorumEpochRequest(9, 7, (me,)), Errors.INCONSISTENT_VOTER_SET),
        (lambda me: EndQuorumEpochRequest(-3, 2, ()), Errors.INVALID_REQUEST),
    ],
)
def test_forged_election_requests_are_refused_and_change_nothing(body, code) -> None:  # type: ignore[no-untyped-def]
    _cluster, core = follower_of_three()
    before = (core.role, core.epoch, core.leader_id, core.voted_id)
    reply = answer(core, 7, body(core.node_id))
    assert reply.error_code == code  # type: ignore[attr-defined]
    assert getattr(reply, "vote_granted", False) is False
    assert (core.role, core.epoch, core.leader_id, core.voted_id) == before


def test_largest_acceptable_epoch_leaves_room_for_the_next_election() -> None:
    core = RaftCore(
        1,
        [1, 2, 3],
        MemoryLog(),
        QuorumState(leader_epoch=MAX_EPOCH - 1),
        rng=random.Random(1),
        clock=type("Clock", (), {"now_ms": staticmethod(lambda: 0)})(),
        now_ms=0,
    )
    core.step(Inbound(2, vote(MAX_EPOCH, 2), reply_to="conn"))
    ready = core.ready()
    (reply,) = [m.body for m in ready.messages if m.reply_to == "conn"]
    assert reply.error_code == Errors.NONE  # type: ignore[attr-defined]
    assert core.epoch == MAX_EPOCH
    assert ready.state is not None and ready.state.problem() is None  # storable and loadable
    assert MAX_EPOCH + 1 <= INT32_MAX  # a candidate at MAX_EPOCH + 1 would still fit


def test_a_sole_voter_whose_epochs_are_exhausted_waits_instead_of_overflowing() -> None:
    core = RaftCore(
        1,
        [1],
        MemoryLog(),
        QuorumState(leader_epoch=MAX_EPOCH),
        rng=random.Random(1),
        clock=type("Clock", (), {"now_ms": staticmethod(lambda: 0)})(),
        now_ms=0,
    )
    for now in range(0, 10_000, 100):
        core.tick(now)
        ready = core.ready()
        assert ready.state is None
    assert core.epoch == MAX_EPOCH and core.role is Role.UNATTACHED


def test_an_answer_carrying_an_impossible_epoch_is_ignored() -> None:
    _cluster, follower = follower_of_three()
    epoch = follower.epoch
    correlation = follower._fetch_correlation  # the follower's fetch in flight
    assert correlation is not None
    forged = FetchResponse(Errors.NONE, INT32_MAX, follower.leader_id, high_watermark=0)
    follower.step(Inbound(follower.leader_id, forged, correlation_id=correlation))
    assert follower.epoch == epoch and follower.role is Role.FOLLOWER
    assert follower.ready().state is None


def test_fetch_checks_follow_kafkas_and_unknown_replicas_are_observers_that_expire() -> None:
    cluster = CoreCluster(voters=1)
    elect(cluster, random.Random(4))
    leader = cluster.cores[1]
    epoch = leader.epoch

    def fetch(replica: int, *, last_epoch: int = 0, offset: int = 0) -> FetchRequest:
        return FetchRequest(replica, epoch, offset, last_epoch, 0, 1000)

    assert answer(leader, 1, fetch(1)).error_code == Errors.INVALID_REQUEST  # type: ignore[attr-defined]
    too_new = fetch(5, last_epoch=epoch + 1)
    assert answer(leader, 5, too_new).error_code == Errors.INVALID_REQUEST  # type: ignore[attr-defined]
    assert answer(leader, 5, fetch(5, offset=-1)).error_code == Errors.INVALID_REQUEST  # type: ignore[attr-defined]
    # A negative replica id is not a replica: served, never tracked (Kafka's rule).
    assert answer(leader, -1, fetch(-1)).error_code == Errors.NONE  # type: ignore[attr-defined]
    assert -1 not in leader.describe()
    assert answer(leader, 555, fetch(555)).error_code == Errors.NONE  # type: ignore[attr-defined]
    assert 555 in leader.describe()
    leader.tick(cluster.now_ms + OBSERVER_SESSION_TIMEOUT_MS + 1)
    leader.ready()
    assert 555 not in leader.describe()


def test_fetch_snapshot_with_negative_fields_is_refused() -> None:
    cluster = CoreCluster(voters=1)
    elect(cluster, random.Random(5))
    leader = cluster.cores[1]
    bad = FetchSnapshotRequest(2, leader.epoch, 10, 1, -5, 1000)
    assert answer(leader, 2, bad).error_code == Errors.INVALID_REQUEST  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        b'{"leaderEpoch": 2147483647, "leaderId": -1, "votedId": 1, "data_version": 1}',
        b'{"leaderEpoch": -4, "leaderId": -1, "votedId": -1, "data_version": 1}',
    ],
)
def test_quorum_state_with_an_impossible_epoch_is_refused_in_one_line(text: bytes) -> None:
    with pytest.raises(QuorumStateError) as error:
        QuorumState.decode(text, "quorum-state")
    assert "leaderEpoch" in str(error.value) and "\n" not in str(error.value)


def test_vote_addressed_to_another_voter_key_gets_invalid_voter_key(tmp_path: Path) -> None:
    own_directory = uuid.uuid4()

    async def run() -> list[int]:
        runtime = real_runtime(seed=3)
        directory = str(tmp_path / "__cluster_metadata-0")
        runtime.fs.mkdir(directory)
        log = await DiskLog.open(runtime, directory)
        voters = {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)}
        config = RaftNodeConfig(1, voters, "c", directory, directory_id=own_directory)
        node = RaftNode(runtime, config, log)
        await node.start()
        codes = []
        try:
            cases = [(2, None), (1, uuid.uuid4()), (1, own_directory), (1, None)]
            for dst, directory_id in cases:
                _key, version, entity = codec.encode_raft_request(
                    vote(1, 2), cluster_id="c", src_id=2, dst_id=dst
                )
                if directory_id is not None:
                    (topic,) = entity.topics  # type: ignore[attr-defined]
                    (partition,) = topic.partitions
                    partition = replace(partition, voter_directory_id=directory_id)
                    topics = (replace(topic, partitions=(partition,)),)
                    entity = replace(entity, topics=topics)  # type: ignore[type-var]
                header = wire.RequestHeader(ApiKey.VOTE, version, 1, "t")
                response = await ServedApis(CONTROLLER, node.apis()).handle(header, entity)
                codes.append(int(response.topics[0].partitions[0].error_code))  # type: ignore[attr-defined]
        finally:
            await node.close()
            await log.close()
        return codes

    assert asyncio.run(run()) == [
        Errors.INVALID_VOTER_KEY,
        Errors.INVALID_VOTER_KEY,
        Errors.NONE,
        Errors.NONE,  # the sender does not know our directory (a static quorum)
    ]


def test_fetches_under_ever_new_replica_ids_keep_at_most_max_observers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(core_module, "MAX_OBSERVERS", 3)
    cluster = CoreCluster(voters=1)
    elect(cluster, random.Random(6))
    leader = cluster.cores[1]
    for replica in range(500, 506):
        cluster.now_ms += 1
        leader.tick(cluster.now_ms)
        request = FetchRequest(replica, leader.epoch, 0, 0, 0, 1000)
        assert answer(leader, replica, request).error_code == Errors.NONE  # type: ignore[attr-defined]
    assert sorted(leader.describe()) == [1, 503, 504, 505]
