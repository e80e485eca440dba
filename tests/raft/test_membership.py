"""Dynamic voter sets (KIP-853) in the Raft core: add, remove, one change at a time, the
latest voter set in the log in force, truncation reverting it, directory ids."""

from __future__ import annotations

import base64
import random
import uuid
from types import SimpleNamespace

import pytest

from log.records import Record
from raft.core import RaftCore, Role
from raft.messages import (
    BeginQuorumEpochRequest,
    Errors,
    Inbound,
    VoteRequest,
    VoteResponse,
)
from raft.quorum_state import QuorumState, QuorumStateError
from raft.replicated_log import MemoryLog
from raft.snapshot import decode_snapshot, decode_snapshot_control, encode_snapshot
from raft.voters import (
    Endpoint,
    QuorumControl,
    Voter,
    VoterHistory,
    VoterSet,
    VoterSetError,
    decode_kraft_version,
    decode_voters,
    kraft_version_record,
    scan_control,
    voters_record,
)
from tests.raft.harness import CoreCluster, FixedClock, log_entries


def elect(cluster: CoreCluster, rng: random.Random, steps: int = 200) -> int:
    for _ in range(steps):
        cluster.run(1, rng)
        leader = cluster.leader()
        if leader is not None:
            return leader
    raise AssertionError("no leader elected")


def settle(cluster: CoreCluster, rng: random.Random) -> int:
    """Run until one leader has committed an entry of its own epoch; that leader."""
    for _ in range(200):
        cluster.run(1, rng)
        leader = cluster.leader()
        if leader is not None:
            core = cluster.cores[leader]
            if core.high_watermark > 0 and core.history.latest_offset() < core.high_watermark:
                return leader
    raise AssertionError("no settled leader")


def change(cluster: CoreCluster, rng: random.Random, kind: str, voter: Voter) -> int:
    """Make a voter change on the leader, retrying while it is refused with
    REQUEST_TIMED_OUT (the new voter is still catching up), as an operator would, and run
    until it is committed; its offset."""
    for _ in range(100):
        leader = settle(cluster, rng)
        code, offset = cluster.cores[leader].change_voters(kind, voter)
        if code != Errors.REQUEST_TIMED_OUT:
            break
    assert code == Errors.NONE, code
    cluster._drain(leader)
    for _ in range(200):
        cluster.run(1, rng)
        leader_now = cluster.leader()
        if leader_now is not None and cluster.cores[leader_now].high_watermark > offset:
            return offset
    raise AssertionError(f"{kind} {voter.voter_id} never committed")


# ---- the records -------------------------------------------------------------------------
def test_voters_record_round_trips_ids_directories_and_endpoints() -> None:
    voters = VoterSet(
        (
            Voter(3, uuid.uuid4(), (Endpoint("CONTROLLER", "c3", 9093),), 0, 1),
            Voter(1, uuid.uuid4(), (Endpoint("CONTROLLER", "c1", 9093), Endpoint("X", "h", 1))),
        )
    )
    record = voters_record(voters, 7)
    assert decode_voters(record.value) == voters
    assert voters.ids() == (1, 3)  # kept sorted by id
    assert decode_kraft_version(kraft_version_record(1, 7).value) == 1


def test_a_corrupt_or_impossible_voters_record_is_refused() -> None:
    good = voters_record(VoterSet((Voter(1, uuid.uuid4()),)), 0).value
    assert good is not None
    with pytest.raises(VoterSetError):
        decode_voters(good[:-3])
    with pytest.raises(VoterSetError):
        VoterSet((Voter(1), Voter(1)))  # one voter per id
    with pytest.raises(VoterSetError):
        decode_kraft_version(kraft_version_record(7, 0).value)


def test_history_uses_the_latest_set_and_reverts_when_truncated() -> None:
    one = VoterSet((Voter(1, uuid.uuid4()),))
    two = one.added(Voter(2, uuid.uuid4()))
    three = two.added(Voter(3, uuid.uuid4()))
    history = VoterHistory(one, 1)
    assert history.add(QuorumControl(5, voters=two))
    assert history.add(QuorumControl(9, voters=three))
    assert history.latest() == three and history.latest_offset() == 9
    assert history.at(9) == (1, two) and history.at(10) == (1, three)
    assert history.truncate(9)  # the record at 9 is cut away: back to the set before it
    assert history.latest() == two
    assert not history.truncate(9)
    assert history.truncate(0)
    assert history.latest() == one and history.latest_offset() == -1


# ---- the core ----------------------------------------------------------------------------
def test_a_standalone_voter_grows_to_three_and_survives_losing_its_first_voter() -> None:
    rng = random.Random(3)
    cluster = CoreCluster(voters=1, observers=2, dynamic=True)
    assert settle(cluster, rng) == 1
    for _ in range(3):
        assert cluster.propose() is not None
    change(cluster, rng, "add", cluster.voter(100))
    change(cluster, rng, "add", cluster.voter(101))
    for node in cluster.node_ids:
        assert cluster.cores[node].voters == (1, 100, 101)
        assert cluster.cores[node].is_voter
    # Majority is now two of three: the first voter can crash-stop and the others elect.
    cluster.isolated.add(1)
    cluster.run(120, rng)
    leaders = [n for n in (100, 101) if cluster.cores[n].role is Role.LEADER]
    assert len(leaders) == 1
    assert cluster.propose() is not None
    cluster.run(20, rng)
    assert cluster.acked  # the proposals made after the change committed too
    assert log_entries(cluster.logs[100]) == log_entries(cluster.logs[101])


def test_a_restarted_node_learns_its_voter_set_from_its_log() -> None:
    rng = random.Random(4)
    cluster = CoreCluster(voters=1, observers=1, dynamic=True)
    change(cluster, rng, "add", cluster.voter(100))
    cluster.crash(100)  # a fresh core, on the same log: the base set is still {1}
    assert cluster.cores[100].voters == (1, 100)
    assert cluster.cores[100].is_voter


def test_truncating_a_voter_change_reverts_to_the_previous_set() -> None:
    base = VoterSet((Voter(1, uuid.UUID(int=1)), Voter(2, uuid.UUID(int=2))))
    log = MemoryLog()
    log.append_as_leader([Record(None, b"x", 0)], 1)
    log.append_as_leader(
        [voters_record(base.added(Voter(3, uuid.UUID(int=3))), 0)], 1, control=True
    )
    core = RaftCore(
        2,
        base,
        log,
        QuorumState(1, 1, -1),
        rng=random.Random(0),
        clock=FixedClock(None),  # type: ignore[arg-type]
        now_ms=0,
        kraft_version=1,
        directory_id=uuid.UUID(int=2),
    )
    assert core.voters == (1, 2, 3)
    log.truncate_now(1)
    core.truncated(1)
    assert core.voters == (1, 2)


def test_one_change_at_a_time_and_kafkas_errors() -> None:
    rng = random.Random(5)
    cluster = CoreCluster(voters=3, observers=2, dynamic=True)
    leader = settle(cluster, rng)
    follower = next(n for n in cluster.voter_ids if n != leader)
    code, _ = cluster.cores[follower].change_voters("add", cluster.voter(100))
    assert code == Errors.NOT_LEADER_OR_FOLLOWER
    core = cluster.cores[leader]
    assert core.change_voters("add", cluster.voter(follower))[0] == Errors.DUPLICATE_VOTER
    assert core.change_voters("remove", Voter(42, uuid.uuid4()))[0] == Errors.VOTER_NOT_FOUND
    # The right id on the wrong disk is not the voter either.
    wrong_disk = Voter(follower, uuid.uuid4())
    assert core.change_voters("remove", wrong_disk)[0] == Errors.VOTER_NOT_FOUND
    cluster.run(20, rng)  # the observers fetch up to the high watermark
    assert cluster.leader() == leader
    code, offset = core.change_voters("add", cluster.voter(100))
    assert code == Errors.NONE
    assert core.voters == (1, 2, 3, 100)  # in force at once, committed or not
    # A second change while the first is uncommitted: Kafka's REQUEST_TIMED_OUT.
    assert core.change_voters("add", cluster.voter(101))[0] == Errors.REQUEST_TIMED_OUT
    cluster._drain(leader)
    cluster.run(20, rng)
    assert cluster.cores[leader].high_watermark > offset
    assert cluster.cores[leader].change_voters("add", cluster.voter(101))[0] == Errors.NONE


def test_an_observer_that_has_not_caught_up_is_not_added() -> None:
    rng = random.Random(6)
    cluster = CoreCluster(voters=3, observers=1, dynamic=True)
    cluster.isolated.add(100)  # it never fetches
    leader = settle(cluster, rng)
    code, _ = cluster.cores[leader].change_voters("add", cluster.voter(100))
    assert code == Errors.REQUEST_TIMED_OUT
    assert cluster.cores[leader].voters == (1, 2, 3)


def test_a_static_quorum_refuses_voter_changes() -> None:
    rng = random.Random(7)
    cluster = CoreCluster(voters=3, observers=1)
    leader = settle(cluster, rng)
    code, _ = cluster.cores[leader].change_voters("add", Voter(100, uuid.uuid4()))
    assert code == Errors.UNSUPPORTED_VERSION


def test_a_removed_leader_steps_down_once_the_removal_commits() -> None:
    rng = random.Random(8)
    cluster = CoreCluster(voters=3, dynamic=True)
    leader = settle(cluster, rng)
    core = cluster.cores[leader]
    code, offset = core.change_voters("remove", cluster.voter(leader))
    assert code == Errors.NONE
    assert core.role is Role.LEADER  # it leads (without counting itself) until committed
    cluster._drain(leader)
    for _ in range(200):
        cluster.run(1, rng)
        if core.role is not Role.LEADER:
            break
    assert core.role is not Role.LEADER and core.high_watermark > offset
    assert not core.is_voter
    new_leader = elect(cluster, rng)
    assert new_leader != leader
    assert cluster.cores[new_leader].voters == tuple(v for v in (1, 2, 3) if v != leader)
    assert cluster.propose() is not None
    cluster.run(30, rng)
    # The removed replica goes on as an observer: it follows and replicates.
    assert core.role is Role.FOLLOWER and core.leader_id == new_leader
    assert log_entries(cluster.logs[leader]) == log_entries(cluster.logs[new_leader])


def test_a_wiped_disk_is_a_different_replica_that_cannot_vote() -> None:
    rng = random.Random(9)
    cluster = CoreCluster(voters=3, dynamic=True)
    settle(cluster, rng)
    cluster.wipe(3)
    core = cluster.cores[3]
    assert core.voters == (1, 2, 3) and not core.is_voter  # same id, new directory id
    request = VoteRequest(
        candidate_epoch=99, candidate_id=1, last_offset_epoch=0, last_offset=0, pre_vote=False
    )
    core.step(Inbound(1, request, reply_to="r"))
    answer = core.ready().messages[-1].body
    assert isinstance(answer, VoteResponse)
    assert (answer.error_code, answer.vote_granted) == (Errors.INCONSISTENT_VOTER_SET, False)
    assert core.epoch < 99  # the forged epoch left no trace
    # Replacing it: remove the old disk's replica, then add the new one once caught up.
    change(cluster, rng, "remove", Voter(3, uuid.UUID(int=3 << 32 | 1)))
    cluster.run(20, rng)
    change(cluster, rng, "add", cluster.voter(3))
    assert cluster.cores[3].is_voter


def test_voter_records_in_fetched_batches_take_effect_on_followers() -> None:
    data = MemoryLog()
    data.append_as_leader([Record(None, b"a", 0)], 1)
    voters = VoterSet((Voter(1, uuid.UUID(int=1)), Voter(5, uuid.UUID(int=5))))
    data.append_as_leader([voters_record(voters, 0)], 1, control=True)
    found = list(scan_control(data.read(0, 1 << 20)))
    assert found == [QuorumControl(1, voters=voters)]


def test_a_snapshot_carries_the_voter_set_beside_the_state_records() -> None:
    voters = VoterSet((Voter(1, uuid.UUID(int=1), (Endpoint("CONTROLLER", "h", 1),)),))
    state = [Record(None, b"state", 0)]
    data = encode_snapshot(state, 0, [kraft_version_record(1, 0), voters_record(voters, 0)])
    # The state machine never sees them.
    assert [r.value for r in decode_snapshot(data)] == [b"state"]
    control = decode_snapshot_control(data)
    assert (control.kraft_version, control.voters) == (1, voters)
    plain = decode_snapshot_control(encode_snapshot(state, 0))
    assert (plain.kraft_version, plain.voters) == (None, None)


def test_update_moves_a_voter_to_new_endpoints_everywhere() -> None:
    rng = random.Random(10)
    cluster = CoreCluster(voters=3, dynamic=True)
    moved = Voter(2, cluster.directory_id(2), (Endpoint("CONTROLLER", "new-host", 19093),))
    change(cluster, rng, "update", moved)
    cluster.run(10, rng)
    for node in cluster.node_ids:
        assert cluster.cores[node].voter_set().get(2) == moved
        assert cluster.cores[node].voters == (1, 2, 3)
    stranger = Voter(2, uuid.uuid4(), moved.endpoints)  # the id, but another disk
    leader = settle(cluster, rng)
    assert cluster.cores[leader].change_voters("update", stranger)[0] == Errors.VOTER_NOT_FOUND


# ---- kraft.version 0 -> 1 (UpdateFeatures) -----------------------------------------------
def test_upgrading_kraft_version_makes_a_static_quorum_dynamic() -> None:
    rng = random.Random(11)
    cluster = CoreCluster(voters=3, observers=1, directories=True)
    leader = settle(cluster, rng)
    core = cluster.cores[leader]
    assert core.change_voters("add", cluster.voter(100))[0] == Errors.UNSUPPORTED_VERSION
    assert core.upgrade_kraft_version(0) == (Errors.NONE, None, -1)  # already there
    assert core.upgrade_kraft_version(1, validate_only=True) == (Errors.NONE, None, -1)
    assert core.history.kraft_version() == 0
    end = cluster.logs[leader].end_offset()
    code, message, offset = core.upgrade_kraft_version(1)
    assert (code, message) == (Errors.NONE, None) and offset == end + 1  # one batch, 2 records
    # In force at once: the same voters, now known by (id, directory id).
    assert core.history.kraft_version() == 1
    assert core.voter_set() == VoterSet(
        tuple(Voter(n, cluster.directory_id(n)) for n in cluster.voter_ids)
    )
    assert core.upgrade_kraft_version(1) == (Errors.NONE, None, -1)  # pending counts
    code, message, _ = core.upgrade_kraft_version(0)
    assert code == Errors.INVALID_UPDATE_VERSION and "not supported" in (message or "")
    assert core.upgrade_kraft_version(2)[0] == Errors.INVALID_UPDATE_VERSION
    cluster._drain(leader)
    for _ in range(200):
        cluster.run(1, rng)
        now = cluster.leader()
        if now is not None and cluster.cores[now].high_watermark > offset:
            break
    assert cluster.cores[cluster.leader() or leader].high_watermark > offset
    cluster.run(20, rng)
    for node in cluster.node_ids:  # followers and the observer read it from the log
        assert cluster.cores[node].history.kraft_version() == 1, node
        assert cluster.cores[node].voter_set() == core.voter_set(), node
    # Voter changes are served now, and a restarted node finds kraft.version 1 in its log.
    change(cluster, rng, "add", cluster.voter(100))
    assert cluster.cores[cluster.leader() or leader].voters == (1, 2, 3, 100)
    follower = next(n for n in cluster.voter_ids if n != cluster.leader())
    cluster.crash(follower)
    assert cluster.cores[follower].history.kraft_version() == 1
    assert cluster.cores[follower].voters == (1, 2, 3, 100)


def test_the_kraft_version_upgrade_needs_every_voters_directory_id() -> None:
    rng = random.Random(12)
    cluster = CoreCluster(voters=3)  # no directory ids known: nothing to name the voters by
    leader = settle(cluster, rng)
    code, message, offset = cluster.cores[leader].upgrade_kraft_version(1)
    assert code == Errors.INVALID_UPDATE_VERSION and offset == -1
    assert "doesn't have a directory id" in (message or "")
    assert cluster.cores[leader].history.kraft_version() == 0
    follower = next(n for n in cluster.voter_ids if n != leader)
    assert cluster.cores[follower].upgrade_kraft_version(1)[0] == Errors.NOT_LEADER_OR_FOLLOWER


# ---- votedDirectoryId ----------------------------------------------------------------------
def test_quorum_state_keeps_the_voted_directory_id_in_kafkas_format() -> None:
    directory = uuid.UUID("0f0e0d0c-0b0a-4908-8706-050403020100")
    state = QuorumState(5, -1, 3, directory)
    assert QuorumState.decode(state.encode()) == state
    # As Kafka writes it (Uuid.toString: URL-safe base64, unpadded); the zero UUID and a
    # missing key both mean "unknown".
    kafka = b'{"clusterId":"","leaderId":-1,"leaderEpoch":5,"votedId":3,'
    encoded = base64.urlsafe_b64encode(directory.bytes).rstrip(b"=")
    assert QuorumState.decode(kafka + b'"votedDirectoryId":"' + encoded + b'","data_version":1}')
    assert QuorumState.decode(
        kafka + b'"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}'
    ) == QuorumState(5, -1, 3, None)
    assert b"votedDirectoryId" not in QuorumState(5, -1, 3).encode()
    with pytest.raises(QuorumStateError):
        QuorumState.decode(kafka + b'"votedDirectoryId":"not-a-uuid","data_version":1}')


def test_a_vote_goes_to_one_disk_and_a_reformatted_candidate_cannot_collect_it() -> None:
    """Voter 1 votes for candidate 3 in epoch 5. Candidate 3's disk is then wiped and
    re-formatted (a new directory id); standing again in epoch 5 it must not get the vote
    its predecessor got, or two replicas named 3 could both lead epoch 5. The vote, and
    the directory it went to, survive voter 1's restart."""
    old_disk, new_disk = uuid.UUID(int=3 << 32 | 1), uuid.UUID(int=3 << 32 | 2)
    voters = VoterSet(tuple(Voter(n, uuid.UUID(int=n << 32 | 1)) for n in (1, 2, 3)))

    def voter_one(state: QuorumState) -> RaftCore:
        return RaftCore(
            1,
            voters,
            MemoryLog(),
            state,
            rng=random.Random(0),
            clock=FixedClock(None),  # type: ignore[arg-type]
            now_ms=0,
            kraft_version=1,
            directory_id=uuid.UUID(int=1 << 32 | 1),
        )

    def ask(core: RaftCore, directory: uuid.UUID) -> tuple[bool, QuorumState | None]:
        request = VoteRequest(5, 3, 0, 0, pre_vote=False, candidate_directory_id=directory)
        core.step(Inbound(3, request, reply_to="r"))
        ready = core.ready()
        answer = ready.messages[-1].body
        assert isinstance(answer, VoteResponse)
        return answer.vote_granted, ready.state

    core = voter_one(QuorumState())
    assert ask(core, old_disk) == (True, QuorumState(5, -1, 3, old_disk))  # stored first
    assert ask(core, old_disk) == (True, None)  # the same candidate asking again
    assert ask(core, new_disk) == (False, None)
    restarted = voter_one(QuorumState(5, -1, 3, old_disk))
    assert ask(restarted, new_disk) == (False, None)
    assert ask(restarted, old_disk) == (True, None)
    # A vote stored without a directory (an older version's file) is kept by id alone.
    legacy = voter_one(QuorumState(5, -1, 3))
    assert ask(legacy, new_disk) == (True, None)


def test_a_candidates_vote_for_itself_names_its_own_directory() -> None:
    own = uuid.UUID(int=1 << 32 | 7)
    core = RaftCore(
        1,
        VoterSet((Voter(1, own),)),
        MemoryLog(),
        QuorumState(),
        rng=random.Random(0),
        clock=FixedClock(SimpleNamespace(now_ms=0)),  # type: ignore[arg-type]
        now_ms=0,
        kraft_version=1,
        directory_id=own,
    )
    core.tick(1)  # the sole voter stands at once and wins
    assert core.role is Role.LEADER
    assert core.ready().state == QuorumState(1, 1, 1, own)


def test_vote_and_begin_quorum_epoch_name_the_voters_directory() -> None:
    """A candidate (and a new leader) addresses each voter by its key in the voter set in
    force: whoever answers at that address on another disk (re-formatted, empty) refuses
    with INVALID_VOTER_KEY instead of voting in place of the voter that held the log."""

    class Recording(CoreCluster):
        def __init__(self) -> None:
            self.sent: list[tuple[int, object]] = []
            super().__init__(voters=3, dynamic=True)

        def _drain(self, node: int) -> None:
            before = len(self.pool)
            super()._drain(node)
            self.sent += [(m.dst, m.message.body) for m in self.pool[before:]]

    cluster = Recording()
    elect(cluster, random.Random(13))
    sent = cluster.sent
    votes = [(dst, body) for dst, body in sent if isinstance(body, VoteRequest)]
    begins = [(dst, body) for dst, body in sent if isinstance(body, BeginQuorumEpochRequest)]
    assert votes and begins
    for dst, body in votes + begins:
        assert body.voter_directory_id == cluster.directory_id(dst), (dst, body)
    for _dst, vote in votes:
        assert vote.candidate_directory_id == cluster.directory_id(vote.candidate_id)
