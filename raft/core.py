"""The KRaft consensus core: a pure state machine, in the style of etcd's raft.

Inputs: ``step(Inbound)`` for a request or response from a peer, ``tick(now_ms)`` for time,
``propose(records)`` on the leader, ``flushed(offset)`` when the driver has synced the log.
Output: ``ready()`` hands over the work to do, in this order: persist the quorum state, send
messages, flush the log. The core never blocks and never does I/O of its own, except
appending to / reading from / truncating its log object, whose durability the driver owns.

Roles (KIP-595 and KIP-996): unattached, follower, prospective (pre-vote), candidate, leader,
resigned; an observer (a node that is not a voter) is unattached or follower and never votes
or stands for election. Their legal transitions, and the state only one role holds, are in
raft/roles.py. The state diagram and the invariants are in docs/raft.md.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from log.batch import iter_batches
from log.clock import WallClock
from log.records import Record
from raft.control import leader_change_record
from raft.messages import (
    MAX_EPOCH,
    NO_LEADER,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    Errors,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Inbound,
    Outbound,
    Request,
    RequestFailed,
    Response,
    VoteRequest,
    VoteResponse,
)
from raft.progress import ReplicaProgress, majority, quorum_offset
from raft.quorum_state import QuorumState
from raft.replicated_log import ReplicatedLog
from raft.roles import ElectionState, LeaderState, ParkedFetch, Role, check_transition
from raft.snapshot import SnapshotId
from raft.validation import EpochRaiseBudget, raised_epoch, request_error
from raft.voters import (
    KRAFT_VERSION_DYNAMIC,
    KRAFT_VERSION_STATIC,
    QuorumControl,
    Voter,
    VoterHistory,
    VoterSet,
    VoterSetError,
    kraft_version_record,
    scan_control,
    voters_record,
)


def _next_offset(data: bytes) -> int:
    """The offset after the last whole batch in ``data``."""
    end = -1
    for _position, header in iter_batches(data):
        end = header.next_offset
    return end


# Planted bugs the core understands (off unless a simulation asks for them).
CORE_BUGS = {
    "vote-without-log-check": "a voter grants its vote without checking the candidate's log",
    "hw-from-previous-epoch": "a new leader exposes its whole log as committed on election, "
    "before an entry of its own epoch (the LeaderChange record) is replicated",
    "no-check-quorum": "a leader that no longer hears from a majority never resigns",
    "no-truncate-on-divergence": "a follower told its log diverges (divergingEpoch) does not "
    "truncate and simply fetches again",
    "ack-before-fsync": "the metadata log is flushed lazily like a data log (every second), "
    "while followers acknowledge (fetch on) and the leader counts its own entries at once",
    "truncate-to-high-watermark": "a follower told its log diverges truncates to its own high "
    "watermark instead of the epoch end offset the leader gave (KIP-101's bug in Raft form)",
    "leader-counts-unflushed": "the leader counts its own log end toward the high watermark "
    "before its flush returned",
    "fetch-before-flush": "a follower fetches on (acknowledging what it appended) before its "
    "flush returned",
    "check-quorum-needs-fetch": "check quorum is satisfied only by followers' fetches, so a sole "
    "voter, which has none, resigns every fetch timeout (KAFKA-16144)",
    "snapshot-hw-not-adopted": "a node loading a snapshot (at start-up or after downloading it) "
    "does not take its end offset as its high watermark",
}
# Planted bugs of an observer's fetching, which is a broker's metadata replay: the metadata
# scenario plants them (its brokers are the observers that serve clients). They are not in
# the raft scenario's set: its liveness check sees a stalled observer, but its trace analysis
# has no liveness check to re-derive that from.
OBSERVER_BUGS = {
    "observer-stops-on-fetch-error": "an observer (a broker) whose Fetch to the leader it "
    "follows fails stops fetching: its metadata replay stalls until it restarts",
}

# Planted bugs of membership change (KIP-853), caught by the raft scenario's opt-in
# ``membership`` fault (they need a dynamic quorum to matter).
MEMBER_BUGS = {
    "voter-set-applied-at-commit": "a voter change takes effect only once it is committed: "
    "until then the leader counts the old voter set's majority for its high watermark",
    "removed-voter-keeps-leading": "a leader whose removal from the voter set committed goes "
    "on leading instead of resigning",
}

RETRY_BACKOFF_MS = 100
SNAPSHOT_NOT_FOUND = 98
SNAPSHOT_CHUNK_BYTES = 1024 * 1024
BEGIN_QUORUM_RETRY_MS = 500
MAX_PROPOSAL_RECORDS = 10_000
HIGH_WATERMARK_LINGER_MS = 2
# Kafka's LeaderState forgets an observer that has not fetched for 5 minutes; the cap bounds
# the table against fetches under ever new replica ids in between (the least recently seen
# observer makes room).
OBSERVER_SESSION_TIMEOUT_MS = 300_000
MAX_OBSERVERS = 10_000
_REQUEST_TYPES = (
    VoteRequest,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
)


class NotLeaderError(Exception):
    """A proposal reached a node that is not the leader; says who is, if known."""

    def __init__(self, leader_id: int, epoch: int) -> None:
        super().__init__(f"not the leader (leader {leader_id}, epoch {epoch})")
        self.leader_id = leader_id
        self.epoch = epoch


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Timeouts in ms; the defaults are Kafka's."""

    election_timeout_ms: int = 1000
    fetch_timeout_ms: int = 2000
    election_backoff_max_ms: int = 1000
    request_timeout_ms: int = 2000
    fetch_max_wait_ms: int = 500
    fetch_max_bytes: int = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    epoch: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class HighWatermarkAdvanced:
    high_watermark: int


@dataclass(frozen=True, slots=True)
class Truncated:
    from_offset: int
    to_offset: int


@dataclass(frozen=True, slots=True)
class EpochRaiseLimited:
    """A message from ``src`` would have raised the epoch from ``epoch`` to ``wanted``,
    further or faster than raft/validation.py's EpochRaiseBudget allows."""

    epoch: int
    wanted: int
    src: int


Event = RoleChanged | HighWatermarkAdvanced | Truncated | EpochRaiseLimited


@dataclass(slots=True)
class Ready:
    """Work for the driver, in this order: persist ``state``; send ``messages``; truncate the
    log (then call ``truncated``); write downloaded snapshot chunks and install a complete
    snapshot (then call ``snapshot_installed``); flush the log (then call ``flushed``)."""

    state: QuorumState | None = None
    messages: list[Outbound] = field(default_factory=list)
    truncate_to: int | None = None
    snapshot_chunks: list[tuple[SnapshotId, int, bytes]] = field(default_factory=list)
    install_snapshot: SnapshotId | None = None
    flush: bool = False
    events: list[Event] = field(default_factory=list)

    def empty(self) -> bool:
        return (
            self.state is None
            and not self.messages
            and self.truncate_to is None
            and not self.snapshot_chunks
            and self.install_snapshot is None
            and not self.flush
            and not self.events
        )


class RaftCore:
    """One node's consensus state machine."""

    def __init__(
        self,
        node_id: int,
        voters: Sequence[int] | VoterSet,
        log: ReplicatedLog,
        state: QuorumState,
        *,
        rng: random.Random,
        clock: WallClock,
        now_ms: int,
        config: RaftConfig | None = None,
        bugs: frozenset[str] = frozenset(),
        kraft_version: int = 0,
        directory_id: uuid.UUID | None = None,
        bootstrap: Sequence[int] = (),
    ) -> None:
        """``voters`` is the voter set the log starts with: controller.quorum.voters for a
        static quorum, else the one in the snapshot the log starts at (the bootstrap
        snapshot of ``kraft-server format``); the log's own Voters records follow it.
        ``bootstrap`` names (negative) ids of controller.quorum.bootstrap.servers, asked
        who leads when no voter is known."""
        unknown = bugs - CORE_BUGS.keys() - OBSERVER_BUGS.keys() - MEMBER_BUGS.keys()
        assert not unknown, f"unknown planted bugs {sorted(unknown)}"
        self.node_id = node_id
        self.directory_id = directory_id
        base = voters if isinstance(voters, VoterSet) else VoterSet.static(tuple(voters))
        self.history = VoterHistory(base, kraft_version)
        self.bootstrap = tuple(bootstrap)
        self.log = log
        self._scan_log(log.start_offset())
        self.rng = rng
        self.clock = clock
        self.config = config or RaftConfig()
        self.bugs = bugs
        self.now_ms = now_ms
        self.epoch = state.leader_epoch
        self.leader_id = state.leader_id
        self._voted_id = state.voted_id
        self.voted_directory_id = state.voted_directory_id
        if log.last_fetched_epoch() > self.epoch:
            # quorum-state is behind the log (lost, or an observer's never written): start
            # unattached in the log's epoch, as Kafka's QuorumState.initialize does, so the
            # fetches we send never name an epoch older than our own log's.
            self.epoch, self.leader_id, self.voted_id = (
                log.last_fetched_epoch(),
                NO_LEADER,
                NO_LEADER,
            )
        self.role = Role.UNATTACHED
        # False until the first role is taken (which any of INITIAL_ROLES may be).
        self._started = False
        snapshot = log.latest_snapshot()
        # A snapshot holds only committed records: its end is a high watermark we know.
        adopt = "snapshot-hw-not-adopted" not in bugs
        self.high_watermark = snapshot.end_offset if snapshot is not None and adopt else 0
        # What the driver has synced: at start-up the driver flushes before building the core.
        self.flushed_offset = log.end_offset()
        self._ready = Ready()
        self._correlation = 0
        self._inflight: dict[int, tuple[int, Request, int]] = {}
        self._election_deadline_ms = 0
        self._fetch_deadline_ms = 0
        # Last time the leader showed it is alive (a fetch answered, BeginQuorumEpoch): what
        # a pre-vote is judged by, not merely being in the follower role.
        self._leader_contact_ms = -(10**12)
        self._epoch_raises = EpochRaiseBudget(now_ms)
        self._fetch_correlation: int | None = None
        self._fetch_backoff_until_ms = 0
        self._fetch_stopped = False  # only the observer-stops-on-fetch-error bug sets it
        self._bootstrap_index = 0
        # The state only an election (Prospective, Candidate) or only a Leader holds.
        self._election: ElectionState | None = None
        self._leader: LeaderState | None = None
        self._observers_checked_ms = 0
        self._truncating = False
        # A snapshot download in progress: (id, next position), and whether it is installing.
        self._download: tuple[SnapshotId, int] | None = None
        self._installing = False
        if self.leader_id == node_id and self.electable:
            # A leader that restarts must not lead the same epoch again: it may have lost
            # entries it never flushed. Resign and let a new epoch start.
            self._become_resigned()
        elif self.leader_id not in (NO_LEADER, node_id):
            self._become_follower(self.epoch, self.leader_id, persist=False)
        else:
            self._become_unattached(self.epoch, self.voted_id, persist=False)
        self._started = True
        if (
            self.voters == (node_id,)
            and self.electable
            and self.role in (Role.UNATTACHED, Role.RESIGNED)
        ):
            # The sole voter has nobody to wait for: stand for election at the first tick,
            # as Kafka's does, instead of an election timeout into start-up.
            self._election_deadline_ms = now_ms

    # ---- the vote -------------------------------------------------------------------------
    @property
    def voted_id(self) -> int:
        return self._voted_id

    @voted_id.setter
    def voted_id(self, value: int) -> None:
        """A vote for another replica (or none) forgets the directory the last one went to;
        a vote for ourselves names our own. The vote handler sets a candidate's."""
        if value != self._voted_id:
            self.voted_directory_id = self.directory_id if value == self.node_id else None
        self._voted_id = value

    def _vote_is_for(self, request: VoteRequest) -> bool:
        """True if our vote in this epoch went to this very replica: its id, and its disk
        unless either side does not know it (a static quorum, an older version). A
        candidate re-formatted under the same id is another replica and gets no vote."""
        if self.voted_id != request.candidate_id:
            return False
        voted, asking = self.voted_directory_id, request.candidate_directory_id
        return voted is None or voted == asking

    # ---- the voter set (KIP-853) ----------------------------------------------------------
    @property
    def voters(self) -> tuple[int, ...]:
        """Ids of the voter set in force: the latest in the log, committed or not."""
        return self.history.latest().ids()

    @property
    def is_voter(self) -> bool:
        """True if this replica (id and directory) is one of the voters in force."""
        return self.history.latest().is_voter(self.node_id, self.directory_id)

    @property
    def electable(self) -> bool:
        """True if this replica takes part in elections: a voter in force, or (a dynamic
        quorum) a voter of the set before an uncommitted change that removes it. The
        latter matters when a leader removing itself loses its quorum before the removal
        commits: the others may lack the record, and only it (with the longest log) can win
        the votes of the new set, lead, commit the removal and then step down."""
        if self.is_voter:
            return True
        history = self.history
        pending = history.latest_offset()
        if history.kraft_version() < KRAFT_VERSION_DYNAMIC or pending < self.high_watermark:
            return False
        return history.at(pending)[1].is_voter(self.node_id, self.directory_id)

    def voter_set(self) -> VoterSet:
        return self.history.latest()

    def _scan_log(self, offset: int) -> None:
        """Learn the voter sets in the log from ``offset`` on (at start-up)."""
        end = self.log.end_offset()
        while offset < end:
            data = self.log.read(offset, 1024 * 1024)
            if not data:
                break
            for control in scan_control(data):
                self.history.add(control)
            offset = _next_offset(data)

    def _learn_voters(self, data: bytes) -> None:
        """Appended batches may hold a kraft.version or voter set: it takes effect now."""
        changed = False
        for control in scan_control(data):
            changed |= self.history.add(control)
        if changed:
            self._voters_changed()

    def _may_vote(self, candidate_id: int) -> bool:
        """Whether this replica may answer a vote at all. A static quorum: both are voters.
        A dynamic one: anyone may, except a replica whose id votes on another disk (a
        re-formatted disk must never vote in place of the replica that made promises)."""
        if self.history.kraft_version() < KRAFT_VERSION_DYNAMIC:
            return self.is_voter and candidate_id in self.voters
        own = self.history.latest().get(self.node_id)
        return own is None or own.matches(self.node_id, self.directory_id)

    def _maybe_step_down(self) -> None:
        """A leader whose removal is committed leads no more (KIP-853): it resigns, the
        remaining voters elect a leader among themselves, and it goes on as an observer.
        Looked at once the message or flush that advanced the high watermark is handled."""
        if "removed-voter-keeps-leading" in self.bugs:
            return
        if (
            self.role is Role.LEADER
            and not self.is_voter
            and self.history.latest_offset() < self.high_watermark
        ):
            self._become_resigned()

    def _voters_changed(self) -> None:
        """The voter set in force changed (appended, or reverted by a truncation)."""
        if self.role is Role.LEADER:
            progress = self._leading.progress
            for voter in self.voters:
                if voter not in progress:
                    progress[voter] = ReplicaProgress(voter, last_fetch_ms=self.now_ms)
            self._update_high_watermark()
        elif not self.electable and self.role in (Role.PROSPECTIVE, Role.CANDIDATE):
            self._become_unattached(self.epoch, self.voted_id)
        elif self.electable and self.role is Role.UNATTACHED:
            self._election_deadline_ms = self.now_ms + self._random_election_timeout()

    def change_voters(self, change: str, voter: Voter) -> tuple[int, int]:
        """Leader only: append a VotersRecord that ``add``s, ``remove``s or ``update``s
        ``voter``. Returns (error code, offset of the record): the change is done when the
        high watermark passes that offset. One change at a time: refused with
        REQUEST_TIMED_OUT (Kafka's answer) while the last one is uncommitted, or while this
        leader has not committed an entry of its own epoch yet (Raft's single-server change
        bug: a change made before that can lose an earlier leader's uncommitted change)."""
        if self.role is not Role.LEADER:
            return Errors.NOT_LEADER_OR_FOLLOWER, -1
        if self.history.kraft_version() < KRAFT_VERSION_DYNAMIC:
            return Errors.UNSUPPORTED_VERSION, -1
        if (
            self.history.latest_offset() >= self.high_watermark
            or self.high_watermark <= self._leading.epoch_start_offset
        ):
            return Errors.REQUEST_TIMED_OUT, -1
        current = self.history.latest()
        try:
            if change == "add":
                if current.get(voter.voter_id) is not None:
                    return Errors.DUPLICATE_VOTER, -1
                progress = self._leading.progress.get(voter.voter_id)
                caught_up = self.now_ms - self.config.fetch_timeout_ms
                if progress is None or progress.last_caught_up_ms < max(caught_up, 0):
                    # Not an observer that reached the high watermark within a fetch
                    # timeout (Kafka's isReplicaCaughtUp): adding it could stall commits
                    # until it catches up, so Kafka refuses it the same way.
                    return Errors.REQUEST_TIMED_OUT, -1
                updated = current.added(voter)
            elif change == "remove":
                updated = current.removed(voter.voter_id, voter.directory_id)
            else:
                updated = current.updated(voter)
        except VoterSetError:
            return Errors.VOTER_NOT_FOUND, -1
        record = voters_record(updated, self.clock.now_ms())
        _first, last = self.log.append_as_leader([record], self.epoch, control=True)
        self.history.add(QuorumControl(last, voters=updated))
        self._ready.flush = True
        self._voters_changed()
        self._answer_parked()
        return Errors.NONE, last

    def upgrade_kraft_version(
        self, version: int, *, validate_only: bool = False
    ) -> tuple[int, str | None, int]:
        """Leader only: raise kraft.version (UpdateFeatures ``kraft.version``, Kafka's
        ``upgradeKRaftVersion``). 0 -> 1 turns a static quorum into a dynamic one: one
        control batch holds a KRaftVersionRecord and a VotersRecord of the same voters with
        their directory ids (each learned from the voter's own fetches in this epoch) and
        their endpoints from controller.quorum.voters. The voter ids do not change, so the
        majority in force does not either. Returns (error code, message, offset of the
        batch's last record; -1 when nothing was appended). A downgrade is refused, as in
        Kafka 4.x; asking for the level in force (committed or not) changes nothing."""
        if self.role is not Role.LEADER:
            return Errors.NOT_LEADER_OR_FOLLOWER, None, -1
        current = self.history.kraft_version()
        if version < current:
            return (
                Errors.INVALID_UPDATE_VERSION,
                f"Invalid update version {version} for feature kraft.version. Downgrading "
                f"kraft.version is not supported (it is {current}).",
                -1,
            )
        if version > KRAFT_VERSION_DYNAMIC:
            return (
                Errors.INVALID_UPDATE_VERSION,
                f"Invalid update version {version} for feature kraft.version. Local "
                f"controller supports versions {KRAFT_VERSION_STATIC}-{KRAFT_VERSION_DYNAMIC}.",
                -1,
            )
        if version == current:
            return Errors.NONE, None, -1
        voters = []
        for voter in self.history.latest().voters:
            if voter.voter_id == self.node_id:
                directory = self.directory_id
            else:
                progress = self._leading.progress.get(voter.voter_id)
                directory = None if progress is None else progress.directory_id
            if directory is None:
                # Kafka's words: every voter must be known by (id, directory id) first.
                return (
                    Errors.INVALID_UPDATE_VERSION,
                    f"Invalid update version {version}. Voter {voter.voter_id} doesn't have "
                    f"a directory id",
                    -1,
                )
            if not voter.min_kraft_version <= version <= voter.max_kraft_version:
                return (
                    Errors.INVALID_UPDATE_VERSION,
                    f"Invalid update version {version}. Voter {voter.voter_id} does not "
                    f"support kraft.version {version}",
                    -1,
                )
            voters.append(
                Voter(
                    voter.voter_id,
                    directory,
                    voter.endpoints,
                    voter.min_kraft_version,
                    voter.max_kraft_version,
                )
            )
        if validate_only:
            return Errors.NONE, None, -1
        upgraded = VoterSet(tuple(voters))
        now_ms = self.clock.now_ms()
        records = [kraft_version_record(version, now_ms), voters_record(upgraded, now_ms)]
        first, last = self.log.append_as_leader(records, self.epoch, control=True)
        self.history.add(QuorumControl(first, kraft_version=version))
        self.history.add(QuorumControl(last, voters=upgraded))
        self._ready.flush = True
        self._voters_changed()
        self._answer_parked()
        return Errors.NONE, None, last

    # ---- driver interface ---------------------------------------------------------------
    def ready(self) -> Ready:
        """Take the accumulated work; the driver must do it in the documented order."""
        ready, self._ready = self._ready, Ready()
        return ready

    def has_ready(self) -> bool:
        """True if ``ready`` would hand over any work."""
        return not self._ready.empty()

    def has_ready_io(self) -> bool:
        """True if ``ready`` holds work the driver must await: the quorum state to persist,
        a truncation, snapshot chunks or an install. The rest (messages, a flush request,
        events) it can carry out on the spot."""
        ready = self._ready
        return (
            ready.state is not None
            or ready.truncate_to is not None
            or bool(ready.snapshot_chunks)
            or ready.install_snapshot is not None
        )

    def next_deadline_ms(self) -> int:
        """When ``tick`` next has something to do (the driver may tick earlier)."""
        role = self.role
        deadlines = [
            sent + self.config.request_timeout_ms for _, _, sent in self._inflight.values()
        ]
        if role is Role.LEADER:
            # Check quorum and BeginQuorumEpoch retries are looked at on this period.
            deadlines.append(self.now_ms + BEGIN_QUORUM_RETRY_MS)
            deadlines.extend(p.deadline_ms for p in self._leading.parked.values())
        elif role is Role.FOLLOWER:
            deadlines.append(self._fetch_deadline_ms)
        elif self.electable:
            deadlines.append(self._election_deadline_ms)
        if role is not Role.LEADER and self._fetch_correlation is None:
            fetching = role is Role.FOLLOWER or not self.electable
            if fetching and self._fetch_backoff_until_ms > self.now_ms:
                deadlines.append(self._fetch_backoff_until_ms)
        return max(min(deadlines, default=self.now_ms + BEGIN_QUORUM_RETRY_MS), self.now_ms + 1)

    def tick(self, now_ms: int) -> None:
        """Advance time: elections, fetch timeouts, check quorum, long-poll expiry."""
        self.now_ms = max(self.now_ms, now_ms)
        self._expire_requests()
        self._maybe_step_down()
        role = self.role
        if role is Role.LEADER:
            self._leader_tick()
        elif role is Role.FOLLOWER:
            if self.now_ms < self._fetch_deadline_ms:
                self._maybe_fetch()
            elif self.electable:
                self._start_prospective()
            else:
                self._become_unattached(self.epoch, NO_LEADER)
        elif not self.electable:
            self._maybe_fetch()
        elif self.now_ms >= self._election_deadline_ms:
            if role is Role.CANDIDATE:
                self._start_prospective()
            elif role is Role.PROSPECTIVE:
                self._end_prospective()
            else:
                self._start_prospective()

    def truncated(self, offset: int) -> None:
        """The driver cut the log back to ``offset`` as asked; a voter set appended past it
        is gone, and the one before it is in force again."""
        assert self.log.end_offset() == offset, (self.log.end_offset(), offset)
        self._truncating = False
        if self.history.truncate(offset):
            self._voters_changed()
        self._maybe_fetch()

    def snapshot_installed(
        self, snapshot: SnapshotId, control: QuorumControl | None = None
    ) -> None:
        """The driver published a downloaded snapshot and restarted the log at its end;
        ``control`` is the kraft.version and voter set the snapshot holds."""
        assert self.log.end_offset() == snapshot.end_offset
        before = self.history.latest()
        self.history.reset(control or QuorumControl(-1))
        if self.history.latest() != before:
            self._voters_changed()
        self._download = None
        self._installing = False
        self.flushed_offset = snapshot.end_offset
        adopt = "snapshot-hw-not-adopted" not in self.bugs
        if adopt and snapshot.end_offset > self.high_watermark:
            self.high_watermark = snapshot.end_offset
            self._event(HighWatermarkAdvanced(snapshot.end_offset))
        self._maybe_fetch()

    def flushed(self, offset: int) -> None:
        """The driver synced the log up to ``offset``."""
        self.flushed_offset = max(self.flushed_offset, min(offset, self.log.end_offset()))
        if self.role is Role.LEADER:
            self._update_high_watermark()
            self._maybe_step_down()
        else:
            self._maybe_fetch()

    def propose(self, records: Sequence[Record]) -> int:
        """Append records as leader; returns the offset of the last one."""
        if self.role is not Role.LEADER:
            raise NotLeaderError(self.leader_id, self.epoch)
        assert 0 < len(records) <= MAX_PROPOSAL_RECORDS
        _first, last = self.log.append_as_leader(records, self.epoch)
        self._ready.flush = True
        self._answer_parked()
        return last

    def step(self, message: Inbound) -> None:
        """Handle one request or response; a request that fails the checks of
        raft/validation.py is answered with its error and changes nothing."""
        body = message.body
        if isinstance(body, _REQUEST_TYPES):
            voters: tuple[int, ...] = self.voters
            if self.history.kraft_version() >= KRAFT_VERSION_DYNAMIC:
                # KIP-853 (and Raft's rule): a dynamic quorum answers Vote and
                # Begin/EndQuorumEpoch from replicas outside its own latest voter set, which
                # may be behind the sender's (a removal of itself it appended, an addition
                # it has not fetched yet); the sender counts only its own voters' answers.
                sender = getattr(body, "candidate_id", getattr(body, "leader_id", -1))
                voters = (self.node_id, sender)
            code = request_error(body, node_id=self.node_id, voters=voters)
            if code is not None:
                self._reply(message, self.refusal(body, code))
                return
        elif getattr(body, "leader_epoch", 0) > MAX_EPOCH:
            # A forged or corrupt answer: acting on it would poison our epoch.
            body = RequestFailed(Errors.INVALID_REQUEST)
        target = raised_epoch(body)
        solicited = isinstance(body, _REQUEST_TYPES) or (
            self._inflight.get(message.correlation_id, (None,))[0] == message.src
        )
        if target is not None and target > self.epoch and solicited:
            allowed = self._epoch_raises.allowance(self.now_ms)
            if target - self.epoch > allowed:
                # Further than one message may take us: go as far as allowed (unattached,
                # no vote: always safe) and answer as a node that does not know that epoch
                # yet. A peer that really is there moves us further with its next message.
                self._epoch_raises.spend(allowed)
                self._event(EpochRaiseLimited(self.epoch, target, message.src))
                if allowed:
                    self._become_unattached(self.epoch + allowed, NO_LEADER)
                if isinstance(body, _REQUEST_TYPES):
                    self._reply(message, self.refusal(body, Errors.UNKNOWN_LEADER_EPOCH))
                    return
                body = RequestFailed(Errors.UNKNOWN_LEADER_EPOCH)
            else:
                self._epoch_raises.spend(target - self.epoch)
        if isinstance(body, VoteRequest):
            self._on_vote_request(message, body)
        elif isinstance(body, FetchRequest):
            self._on_fetch_request(message, body)
            self._maybe_step_down()
        elif isinstance(body, BeginQuorumEpochRequest):
            self._on_begin_quorum_epoch(message, body)
        elif isinstance(body, EndQuorumEpochRequest):
            self._on_end_quorum_epoch(message, body)
        elif isinstance(body, FetchSnapshotRequest):
            self._on_fetch_snapshot_request(message, body)
        else:
            entry = self._inflight.get(message.correlation_id)
            if entry is None or entry[0] != message.src:
                # Late, duplicated or unsolicited (settled already), or from a peer the
                # request never went to: the request stays in flight for its real answer.
                return
            del self._inflight[message.correlation_id]
            request = entry[1]
            if isinstance(body, VoteResponse) and isinstance(request, VoteRequest):
                self._on_vote_response(message.src, request, body)
            elif isinstance(request, FetchRequest):
                self._on_fetch_response(message.correlation_id, request, body)
            elif isinstance(request, FetchSnapshotRequest):
                self._on_fetch_snapshot_response(message.correlation_id, request, body)
            elif isinstance(body, (BeginQuorumEpochResponse, EndQuorumEpochResponse)):
                self._maybe_higher_epoch(body.leader_epoch, body.leader_id)
            elif isinstance(body, RequestFailed):
                return

    def refusal(self, body: Request, code: int) -> Response:
        """The answer that refuses ``body`` with ``code``: our epoch and leader, nothing
        else; the core's state is not touched."""
        epoch, leader = self.epoch, self._leader_hint()
        if isinstance(body, VoteRequest):
            return VoteResponse(code, epoch, leader, False)
        if isinstance(body, BeginQuorumEpochRequest):
            return BeginQuorumEpochResponse(code, epoch, leader)
        if isinstance(body, EndQuorumEpochRequest):
            return EndQuorumEpochResponse(code, epoch, leader)
        if isinstance(body, FetchRequest):
            return FetchResponse(code, epoch, leader)
        return FetchSnapshotResponse(code, epoch, leader)

    def resign(self) -> None:
        """Graceful shutdown of a leader: hand over leadership (EndQuorumEpoch)."""
        if self.role is Role.LEADER:
            self._become_resigned()

    def describe(self) -> dict[int, ReplicaProgress]:
        """The leader's view of every replica (DescribeQuorum); empty on other nodes."""
        return dict(self._leading.progress) if self.role is Role.LEADER else {}

    # ---- plumbing -----------------------------------------------------------------------
    def _send(self, dst: int, body: Request) -> int:
        self._correlation += 1
        self._inflight[self._correlation] = (dst, body, self.now_ms)
        self._ready.messages.append(Outbound(dst, body, correlation_id=self._correlation))
        return self._correlation

    def _reply(self, message: Inbound, body: object) -> None:
        self._ready.messages.append(
            Outbound(message.src, body, reply_to=message.reply_to)  # type: ignore[arg-type]
        )

    def _persist(self) -> None:
        self._ready.state = QuorumState(
            self.epoch, self.leader_id, self.voted_id, self.voted_directory_id
        )

    def _event(self, event: Event) -> None:
        self._ready.events.append(event)

    def _expire_requests(self) -> None:
        limit = self.now_ms - self.config.request_timeout_ms
        for correlation, (_dst, _request, sent_ms) in list(self._inflight.items()):
            if sent_ms <= limit:
                del self._inflight[correlation]
                if correlation == self._fetch_correlation:
                    self._fetch_correlation = None
                    if not self._installing:
                        self._download = None  # a lost chunk: start again from a Fetch

    def _random_election_timeout(self) -> int:
        timeout = self.config.election_timeout_ms
        return timeout + self.rng.randint(0, timeout)

    def _up_to_date(self, last_epoch: int, last_offset: int) -> bool:
        if "vote-without-log-check" in self.bugs:
            return True
        return (last_epoch, last_offset) >= (self.log.last_fetched_epoch(), self.log.end_offset())

    def _durable_end(self) -> int:
        if "ack-before-fsync" in self.bugs:
            return self.log.end_offset()
        if self.role is Role.LEADER and "leader-counts-unflushed" in self.bugs:
            return self.log.end_offset()
        if self.role is not Role.LEADER and "fetch-before-flush" in self.bugs:
            return self.log.end_offset()
        return min(self.flushed_offset, self.log.end_offset())

    # ---- transitions ------------------------------------------------------------------
    @property
    def _leading(self) -> LeaderState:
        """The leader's own state; only ever asked for in the Leader role."""
        assert self._leader is not None, f"leader state asked for in role {self.role}"
        return self._leader

    @property
    def _votes(self) -> dict[int, bool]:
        """This election round's answers; only ever asked for while Prospective or Candidate."""
        assert self._election is not None, f"votes asked for in role {self.role}"
        return self._election.votes

    def _set_role(self, role: Role) -> None:
        """Enter ``role`` (checked against raft/roles.py's TRANSITIONS) with fresh state."""
        check_transition(self.role if self._started else None, role)
        if self.role is Role.LEADER and role is not Role.LEADER:
            self._release_parked(Errors.NOT_LEADER_OR_FOLLOWER)
        self._leader = None
        if role is Role.LEADER:
            self._leader = LeaderState(self.now_ms, self.log.end_offset())
        in_election = role in (Role.PROSPECTIVE, Role.CANDIDATE)
        self._election = ElectionState() if in_election else None
        self.role = role
        self._fetch_correlation = None
        if not self._installing:
            self._download = None
        self._event(RoleChanged(role, self.epoch, self.leader_id))

    def _become_unattached(
        self, epoch: int, voted_id: int, *, persist: bool = True, backoff: bool = False
    ) -> None:
        changed = (epoch, voted_id, NO_LEADER) != (self.epoch, self.voted_id, self.leader_id)
        self.epoch, self.voted_id, self.leader_id = epoch, voted_id, NO_LEADER
        self._set_role(Role.UNATTACHED)
        if backoff:
            delay = self.rng.randint(0, self.config.election_backoff_max_ms)
        else:
            delay = self._random_election_timeout()
        self._election_deadline_ms = self.now_ms + delay
        if persist and changed:
            self._persist()
        if not self.electable:
            self._maybe_fetch()

    def _become_follower(
        self, epoch: int, leader_id: int, *, persist: bool = True, fetch: bool = True
    ) -> None:
        if epoch != self.epoch:
            self.voted_id = NO_LEADER
        self.epoch, self.leader_id = epoch, leader_id
        self._set_role(Role.FOLLOWER)
        self._fetch_deadline_ms = self.now_ms + self.config.fetch_timeout_ms
        self._fetch_backoff_until_ms = 0
        if persist:
            self._persist()
        if fetch:
            self._maybe_fetch()

    def _maybe_higher_epoch(self, epoch: int, leader_id: int) -> bool:
        """Step down to a newer epoch seen in any message; True if it did."""
        if epoch <= self.epoch:
            return False
        if leader_id not in (NO_LEADER, self.node_id):
            self.voted_id = NO_LEADER
            self._become_follower(epoch, leader_id)
        else:
            self._become_unattached(epoch, NO_LEADER)
        return True

    def _start_prospective(self) -> None:
        """KIP-996 pre-vote: ask for votes for epoch+1 without changing any stored state."""
        if not self.electable:
            return
        if self.epoch >= MAX_EPOCH:
            # Epochs are exhausted (2^31 elections, or a forged epoch let in by an older
            # version): there is no next epoch to stand in. Wait, rather than overflow.
            self._become_unattached(self.epoch, self.voted_id, persist=False)
            return
        self._set_role(Role.PROSPECTIVE)
        self._election_deadline_ms = self.now_ms + self._random_election_timeout()
        self._votes[self.node_id] = True
        if self._tally():
            return
        self._request_votes(pre_vote=True)

    def _end_prospective(self) -> None:
        """A pre-vote that did not win: back to the leader we knew, or wait and retry."""
        if self.leader_id not in (NO_LEADER, self.node_id):
            self._become_follower(self.epoch, self.leader_id, persist=False)
        else:
            self._become_unattached(self.epoch, self.voted_id, backoff=True)

    def _become_candidate(self) -> None:
        self.epoch += 1
        assert self.epoch <= MAX_EPOCH, self.epoch
        self.voted_id = self.node_id
        self.leader_id = NO_LEADER
        self._set_role(Role.CANDIDATE)
        self._persist()
        self._election_deadline_ms = self.now_ms + self._random_election_timeout()
        self._votes[self.node_id] = True
        if self._tally():
            return
        self._request_votes(pre_vote=False)

    def _request_votes(self, *, pre_vote: bool) -> None:
        candidate_epoch = self.epoch + 1 if pre_vote else self.epoch
        request = VoteRequest(
            candidate_epoch=candidate_epoch,
            candidate_id=self.node_id,
            last_offset_epoch=self.log.last_fetched_epoch(),
            last_offset=self.log.end_offset(),
            pre_vote=pre_vote,
            candidate_directory_id=self.directory_id,
        )
        for voter in self.voters:
            if voter != self.node_id:
                self._send(voter, self._to_voter(request, voter))

    def _tally(self) -> bool:
        """Advance the election if this round has a majority; True if it did."""
        voters = self.voters
        granted = sum(1 for v, ok in self._votes.items() if ok and v in voters)
        if granted < majority(len(voters)):
            return False
        if self.role is Role.PROSPECTIVE:
            self._become_candidate()
        elif self.role is Role.CANDIDATE:
            self._become_leader()
        return True

    def _become_leader(self) -> None:
        granting = tuple(sorted(v for v, ok in self._votes.items() if ok))
        self.leader_id = self.node_id
        self._set_role(Role.LEADER)
        self._persist()
        leading = self._leading
        leading.progress = {
            voter: ReplicaProgress(voter, last_fetch_ms=self.now_ms) for voter in self.voters
        }
        now_ms = self.clock.now_ms()
        records = [leader_change_record(self.node_id, self.voters, granting, now_ms)]
        history = self.history
        copy_bootstrap = (
            history.kraft_version() >= KRAFT_VERSION_DYNAMIC
            and history.latest_offset() == -1
            and self.log.latest_snapshot() is None
        )
        if copy_bootstrap:
            # The voter set is only in the bootstrap checkpoint, which is not replicated:
            # put it into the log (as Kafka's first leader does), so that replicas fetching
            # from offset 0 learn it.
            records.append(kraft_version_record(history.kraft_version(), now_ms))
            records.append(voters_record(history.latest(), now_ms))
        first, _last = self.log.append_as_leader(records, self.epoch, control=True)
        if copy_bootstrap:
            history.add(QuorumControl(first + 1, kraft_version=history.kraft_version()))
            history.add(QuorumControl(first + 2, voters=history.latest()))
        self._ready.flush = True
        start = leading.epoch_start_offset
        if "hw-from-previous-epoch" in self.bugs and start > self.high_watermark:
            self.high_watermark = start
            self._event(HighWatermarkAdvanced(self.high_watermark))
        self._send_begin_quorum_epoch()

    def _become_resigned(self) -> None:
        self.leader_id = self.node_id
        self.voted_id = self.node_id if self.voted_id == NO_LEADER else self.voted_id
        # Empty when resigning at start-up (the stored state said we led): nobody is known.
        progress = self._leader.progress if self._leader is not None else {}
        preferred = tuple(
            replica
            for replica, _ in sorted(
                ((p.replica_id, p.end_offset) for p in progress.values()),
                key=lambda item: (-item[1], item[0]),
            )
            if replica != self.node_id
        )
        self._set_role(Role.RESIGNED)
        self._election_deadline_ms = self.now_ms + self._random_election_timeout()
        request = EndQuorumEpochRequest(self.epoch, self.node_id, preferred)
        for voter in self.voters:
            if voter != self.node_id:
                self._send(voter, request)

    def _to_voter(
        self, request: VoteRequest | BeginQuorumEpochRequest, voter_id: int
    ) -> VoteRequest | BeginQuorumEpochRequest:
        """``request`` addressed to the voter by its key (KIP-853): its directory id in our
        voter set, checked by whoever answers at its address. A re-formatted replica there
        (empty log, new directory id) then refuses instead of voting, or following, in
        place of the voter that held the log."""
        voter = self.history.latest().get(voter_id)
        if voter is None or voter.directory_id is None:
            return request
        return dataclasses.replace(request, voter_directory_id=voter.directory_id)

    # ---- leader --------------------------------------------------------------------------
    def _send_begin_quorum_epoch(self) -> None:
        leading = self._leading
        for voter in self.voters:
            progress = leading.progress.get(voter)
            if voter == self.node_id or (progress is not None and progress.end_offset >= 0):
                continue
            sent = leading.begin_epoch_sent_ms.get(voter)
            if sent is None or self.now_ms - sent >= BEGIN_QUORUM_RETRY_MS:
                leading.begin_epoch_sent_ms[voter] = self.now_ms
                request = BeginQuorumEpochRequest(self.epoch, self.node_id)
                self._send(voter, self._to_voter(request, voter))

    def _leader_tick(self) -> None:
        leading = self._leading
        if "no-check-quorum" not in self.bugs:
            window = self.config.fetch_timeout_ms
            heard = 0
            for voter in self.history.latest().voters:
                progress = self._voter_progress(voter)
                heard += voter.voter_id == self.node_id or (
                    progress is not None and self.now_ms - progress.last_fetch_ms < window
                )
            if "check-quorum-needs-fetch" in self.bugs and heard == 1:
                heard = 0  # only a follower's fetch counts, and a sole voter has none
            if heard < majority(len(self.voters)) and self.now_ms - leading.since_ms >= window:
                self._become_resigned()
                return
        self._send_begin_quorum_epoch()
        self._expire_observers()
        for src, parked in list(leading.parked.items()):
            if self.now_ms >= parked.deadline_ms:
                self._answer_fetch(parked, force=True)
                del leading.parked[src]

    def _voter_progress(self, voter: Voter) -> ReplicaProgress | None:
        """The leader's progress of ``voter``, or None if what it holds is not that voter's:
        not heard from, or heard from a replica of the same id on another directory (a
        wiped, re-formatted disk is a different replica, KIP-853). As in Kafka's
        LeaderState, such a replica is an observer: its fetches count neither toward the
        high watermark nor toward the check-quorum, in the voter's name."""
        progress = self._leading.progress.get(voter.voter_id)
        if progress is None:
            return None
        if voter.directory_id is not None and progress.directory_id != voter.directory_id:
            return None
        return progress

    def _update_high_watermark(self) -> None:
        voters = self.history.latest().voters
        if "voter-set-applied-at-commit" in self.bugs:
            voters = self.history.at(self.high_watermark)[1].voters
        ends = []
        for voter in voters:
            if voter.voter_id == self.node_id:
                own = voter.matches(self.node_id, self.directory_id)
                ends.append(self._durable_end() if own else -1)
            else:
                progress = self._voter_progress(voter)
                # A voter not heard from (in its own directory) holds nothing.
                ends.append(-1 if progress is None else progress.end_offset)
        candidate = quorum_offset(ends)
        if candidate <= self.high_watermark:
            return
        if candidate <= self._leading.epoch_start_offset:
            return  # nothing of this epoch is committed yet (Raft's figure-8 rule)
        self.high_watermark = candidate
        self._event(HighWatermarkAdvanced(candidate))
        self._answer_parked()

    def _on_fetch_request(self, message: Inbound, request: FetchRequest) -> None:
        def error(code: int) -> None:
            self._reply(message, FetchResponse(code, self.epoch, self._leader_hint()))

        if request.current_leader_epoch < self.epoch:
            error(Errors.FENCED_LEADER_EPOCH)
            return
        if request.current_leader_epoch > self.epoch:
            error(Errors.UNKNOWN_LEADER_EPOCH)
            return
        if self.role is not Role.LEADER:
            error(Errors.NOT_LEADER_OR_FOLLOWER)
            return
        snapshot = self.log.latest_snapshot()
        start = self.log.start_offset()
        at_snapshot = (
            snapshot is not None
            and request.fetch_offset == snapshot.end_offset == start
            and request.last_fetched_epoch == snapshot.epoch
        )
        if snapshot is not None and (
            request.fetch_offset < start
            or (request.fetch_offset == start and request.last_fetched_epoch != snapshot.epoch)
            or request.last_fetched_epoch < snapshot.epoch
        ):
            # Kafka's rule: below our log start, or from an epoch older than our snapshot,
            # the epoch cache cannot say where the fetcher diverges (those epochs were
            # deleted with the log), so the fetcher gets the snapshot instead.
            self._reply_snapshot_id(message, snapshot)
            return
        if not at_snapshot and (request.fetch_offset > 0 or request.last_fetched_epoch > 0):
            epoch, end = self.log.end_offset_for_epoch(request.last_fetched_epoch)
            if snapshot is not None and (epoch < 0 or end < start):
                self._reply_snapshot_id(message, snapshot)  # it diverges below our log
                return
            if epoch != request.last_fetched_epoch or request.fetch_offset > end:
                self._reply(
                    message,
                    FetchResponse(
                        Errors.NONE,
                        self.epoch,
                        self.node_id,
                        high_watermark=self.high_watermark,
                        diverging_epoch=epoch,
                        diverging_end_offset=max(end, 0),
                    ),
                )
                return
        if request.replica_id < 0:
            # Not a replica (as in Kafka, a consumer's fetch): answered at once, not tracked.
            parked = ParkedFetch(message.src, request, message.reply_to, self.now_ms)
            self._answer_fetch(parked, force=True)
            return
        leading = self._leading
        progress = leading.progress.get(message.src)
        if progress is None:
            self._make_room_for_observer()
            progress = leading.progress[message.src] = ReplicaProgress(message.src)
        if progress.directory_id != request.replica_directory_id:
            # Another replica of this id (a re-formatted disk, or the first fetch): what
            # the leader knew of the one before is not this one's (KIP-853's replica key).
            progress.last_caught_up_ms = -1
            progress.last_sent_high_watermark = -1
            progress.directory_id = request.replica_directory_id
        progress.end_offset = request.fetch_offset
        progress.last_fetch_ms = self.now_ms
        if request.fetch_offset >= self.high_watermark:
            progress.last_caught_up_ms = self.now_ms
        if message.src in self.voters:
            self._update_high_watermark()
        previous = leading.parked.pop(message.src, None)
        if previous is not None:
            self._answer_fetch(previous, force=True)
        parked = ParkedFetch(
            message.src,
            request,
            message.reply_to,
            self.now_ms + min(request.max_wait_ms, self.config.fetch_max_wait_ms),
        )
        if not self._answer_fetch(parked, force=request.max_wait_ms <= 0):
            leading.parked[message.src] = parked

    def _expire_observers(self) -> None:
        """Forget observers that stopped fetching (Kafka's observer session timeout); looked
        at once a retry period, not on every tick (the leader ticks on every request)."""
        if self.now_ms - self._observers_checked_ms < BEGIN_QUORUM_RETRY_MS:
            return
        self._observers_checked_ms = self.now_ms
        limit = self.now_ms - OBSERVER_SESSION_TIMEOUT_MS
        for replica, progress in list(self._leading.progress.items()):
            if replica not in self.voters and progress.last_fetch_ms <= limit:
                self._forget_observer(replica)

    def _make_room_for_observer(self) -> None:
        # A leader's progress holds every voter, so the rest are observers.
        progress = self._leading.progress
        if len(progress) - len(self.voters) < MAX_OBSERVERS:
            return
        observers = [p for r, p in progress.items() if r not in self.voters]
        oldest = min(observers, key=lambda p: (p.last_fetch_ms, p.replica_id))
        self._forget_observer(oldest.replica_id)

    def _forget_observer(self, replica: int) -> None:
        parked = self._leading.parked.pop(replica, None)
        if parked is not None:
            self._answer_fetch(parked, force=True)
        del self._leading.progress[replica]

    def _reply_snapshot_id(self, message: Inbound, snapshot: SnapshotId) -> None:
        self._reply(
            message,
            FetchResponse(
                Errors.NONE,
                self.epoch,
                self.node_id,
                high_watermark=self.high_watermark,
                log_start_offset=self.log.start_offset(),
                snapshot_end_offset=snapshot.end_offset,
                snapshot_epoch=snapshot.epoch,
            ),
        )

    def _on_fetch_snapshot_request(self, message: Inbound, request: FetchSnapshotRequest) -> None:
        def answer(code: int, **fields: object) -> None:
            self._reply(
                message,
                FetchSnapshotResponse(code, self.epoch, self._leader_hint(), **fields),  # type: ignore[arg-type]
            )

        if request.current_leader_epoch < self.epoch:
            answer(Errors.FENCED_LEADER_EPOCH)
            return
        if request.current_leader_epoch > self.epoch:
            answer(Errors.UNKNOWN_LEADER_EPOCH)
            return
        if self.role is not Role.LEADER:
            answer(Errors.NOT_LEADER_OR_FOLLOWER)
            return
        snapshot = SnapshotId(request.snapshot_end_offset, request.snapshot_epoch)
        try:
            size = self.log.snapshot_size(snapshot)
            chunk = self.log.read_snapshot_chunk(
                snapshot, request.position, min(request.max_bytes, SNAPSHOT_CHUNK_BYTES)
            )
        except OSError:
            answer(SNAPSHOT_NOT_FOUND)
            return
        progress = self._leading.progress.get(message.src)
        if progress is not None:
            progress.last_fetch_ms = self.now_ms
        answer(
            Errors.NONE,
            snapshot_end_offset=snapshot.end_offset,
            snapshot_epoch=snapshot.epoch,
            size=size,
            position=request.position,
            unaligned_records=chunk,
        )

    def _answer_fetch(self, parked: ParkedFetch, *, force: bool) -> bool:
        """Answer a fetch if there are records for it or ``force``; True if sent.

        A new high watermark alone is news too, but not urgent: the fetch is then held for
        HIGH_WATERMARK_LINGER_MS, so records proposed in reaction to the commit (the next
        proposal, usually within a millisecond) go out with it in one answer instead of
        waiting for the fetch this answer would prompt (a round trip per commit saved)."""
        request = parked.request
        progress = self._leading.progress.get(parked.src)
        max_bytes = min(request.max_bytes, self.config.fetch_max_bytes)
        records = self.log.read(request.fetch_offset, max_bytes)
        if not records and not force:
            assert progress is not None  # only tracked replicas' fetches are held
            if progress.last_sent_high_watermark != self.high_watermark:
                linger_until = self.now_ms + HIGH_WATERMARK_LINGER_MS
                parked.deadline_ms = min(parked.deadline_ms, linger_until)
            return False
        if progress is not None:
            progress.last_sent_high_watermark = self.high_watermark
        self._ready.messages.append(
            Outbound(
                parked.src,
                FetchResponse(
                    Errors.NONE,
                    self.epoch,
                    self.node_id,
                    high_watermark=self.high_watermark,
                    log_start_offset=self.log.start_offset(),
                    records=records,
                ),
                reply_to=parked.reply_to,
            )
        )
        return True

    def _answer_parked(self) -> None:
        parked_fetches = self._leading.parked
        for src, parked in list(parked_fetches.items()):
            if self._answer_fetch(parked, force=False):
                del parked_fetches[src]

    def _release_parked(self, code: int) -> None:
        for parked in self._leading.parked.values():
            self._ready.messages.append(
                Outbound(
                    parked.src,
                    FetchResponse(code, self.epoch, self._leader_hint()),
                    reply_to=parked.reply_to,
                )
            )
        self._leading.parked = {}

    def _leader_hint(self) -> int:
        return self.leader_id if self.role in (Role.LEADER, Role.FOLLOWER) else NO_LEADER

    # ---- follower and observer -----------------------------------------------------------
    def _fetch_target(self) -> int | None:
        if self.role is Role.FOLLOWER:
            return self.leader_id
        if self.electable:
            return None
        # An observer that knows no leader asks the voters in turn who leads; one that knows
        # no voter yet (a controller formatted to join later) asks the bootstrap servers.
        targets = self.voters or self.bootstrap
        if not targets:
            return None
        target = targets[self._bootstrap_index % len(targets)]
        self._bootstrap_index += 1
        return target

    def _maybe_fetch(self) -> None:
        if self._fetch_correlation is not None or self.now_ms < self._fetch_backoff_until_ms:
            return
        if self._fetch_stopped:
            return
        if self.role is not Role.FOLLOWER and self.electable:
            return
        if self._truncating or self._download is not None:
            return  # the driver is still cutting the log back, or a snapshot is coming
        if self._durable_end() < self.log.end_offset():
            return  # fetching on acknowledges what we have: only once it is flushed
        target = self._fetch_target()
        if target is None:
            return
        request = FetchRequest(
            replica_id=self.node_id,
            current_leader_epoch=self.epoch,
            fetch_offset=self.log.end_offset(),
            last_fetched_epoch=self.log.last_fetched_epoch(),
            max_wait_ms=self.config.fetch_max_wait_ms if self.role is Role.FOLLOWER else 0,
            max_bytes=self.config.fetch_max_bytes,
            replica_directory_id=self.directory_id,
        )
        self._fetch_correlation = self._send(target, request)

    def _on_fetch_response(self, correlation: int, request: FetchRequest, response: object) -> None:
        if correlation != self._fetch_correlation:
            return
        self._fetch_correlation = None
        if request.fetch_offset != self.log.end_offset():
            # The log moved since we asked (a truncation, or records from another answer):
            # this answer is about an offset we no longer fetch from.
            self._maybe_fetch()
            return
        if not isinstance(response, FetchResponse) or response.error_code != Errors.NONE:
            if isinstance(response, FetchResponse):
                if self._maybe_higher_epoch(response.leader_epoch, response.leader_id):
                    return
                if (
                    not self.electable
                    and response.leader_epoch == self.epoch
                    and response.leader_id not in (NO_LEADER, self.node_id)
                    and self.role is not Role.FOLLOWER
                ):
                    self._become_follower(response.leader_epoch, response.leader_id)
                    return
            self._fetch_backoff_until_ms = self.now_ms + RETRY_BACKOFF_MS
            if not self.electable and self.role is Role.FOLLOWER:
                if "observer-stops-on-fetch-error" in self.bugs:
                    self._fetch_stopped = True
                self._become_unattached(self.epoch, NO_LEADER)
            return
        if self._maybe_higher_epoch(response.leader_epoch, response.leader_id):
            return
        if self.role is not Role.FOLLOWER:
            if self.electable or response.leader_id == NO_LEADER:
                return
            # Process these records before the next fetch goes out.
            self._become_follower(response.leader_epoch, response.leader_id, fetch=False)
        self._fetch_deadline_ms = self.now_ms + self.config.fetch_timeout_ms
        self._leader_contact_ms = self.now_ms
        if response.snapshot_end_offset >= 0:
            # Our fetch offset is below the leader's log: download its snapshot instead.
            self._download = (
                SnapshotId(response.snapshot_end_offset, response.snapshot_epoch),
                0,
            )
            self._fetch_snapshot_chunk()
            return
        if response.diverging_epoch >= 0 or response.diverging_end_offset >= 0:
            if self._truncate_on_divergence(response):
                return
        elif response.records:
            self.log.append_as_follower(response.records)
            self._ready.flush = True
            self._learn_voters(response.records)
        high_watermark = min(response.high_watermark, self.log.end_offset())
        if high_watermark > self.high_watermark:
            self.high_watermark = high_watermark
            self._event(HighWatermarkAdvanced(high_watermark))
        self._maybe_fetch()

    def _fetch_snapshot_chunk(self) -> None:
        assert self._download is not None
        snapshot, position = self._download
        target = self.leader_id if self.role is Role.FOLLOWER else None
        if target is None or target == NO_LEADER:
            self._download = None
            return
        self._fetch_correlation = self._send(
            target,
            FetchSnapshotRequest(
                replica_id=self.node_id,
                current_leader_epoch=self.epoch,
                snapshot_end_offset=snapshot.end_offset,
                snapshot_epoch=snapshot.epoch,
                position=position,
                max_bytes=SNAPSHOT_CHUNK_BYTES,
            ),
        )

    def _on_fetch_snapshot_response(
        self, correlation: int, request: FetchSnapshotRequest, response: object
    ) -> None:
        if correlation != self._fetch_correlation or self._download is None:
            return
        self._fetch_correlation = None
        snapshot, position = self._download
        ok = (
            isinstance(response, FetchSnapshotResponse)
            and response.error_code == Errors.NONE
            and response.position == position == request.position
            and (response.snapshot_end_offset, response.snapshot_epoch)
            == (snapshot.end_offset, snapshot.epoch)
            and (bool(response.unaligned_records) or position >= response.size)
        )
        if not ok:
            # Start over from a fresh Fetch: the leader may have moved or made a newer one.
            self._download = None
            if isinstance(response, FetchSnapshotResponse) and self._maybe_higher_epoch(
                response.leader_epoch, response.leader_id
            ):
                return
            self._fetch_backoff_until_ms = self.now_ms + RETRY_BACKOFF_MS
            return
        assert isinstance(response, FetchSnapshotResponse)
        self._fetch_deadline_ms = self.now_ms + self.config.fetch_timeout_ms
        data = response.unaligned_records
        self._ready.snapshot_chunks.append((snapshot, position, data))
        position += len(data)
        if position >= response.size:
            self._ready.install_snapshot = snapshot
            self._installing = True
            self._download = (snapshot, position)
            return
        self._download = (snapshot, position)
        self._fetch_snapshot_chunk()

    def _truncate_on_divergence(self, response: FetchResponse) -> bool:
        """Ask the driver to cut the log where it stops matching the leader's; True if so."""
        end = self.log.end_offset()
        if "no-truncate-on-divergence" in self.bugs:
            return False
        local_epoch, local_end = self.log.end_offset_for_epoch(response.diverging_epoch)
        target = min(response.diverging_end_offset, local_end if local_epoch >= 0 else 0)
        if "truncate-to-high-watermark" in self.bugs:
            target = self.high_watermark
        target = min(target, end)
        target = max(target, self.log.start_offset())
        if target >= end:
            return False
        self._truncating = True
        self._ready.truncate_to = target
        self.flushed_offset = min(self.flushed_offset, target)
        self._event(Truncated(end, target))
        return True

    # ---- elections -----------------------------------------------------------------------
    def _on_vote_request(self, message: Inbound, request: VoteRequest) -> None:
        def answer(granted: bool, code: int = Errors.NONE) -> None:
            self._reply(message, VoteResponse(code, self.epoch, self._leader_hint(), granted))

        if not self._may_vote(request.candidate_id):
            answer(False, Errors.INCONSISTENT_VOTER_SET)
            return
        if request.candidate_epoch < self.epoch:
            answer(False, Errors.FENCED_LEADER_EPOCH)
            return
        up_to_date = self._up_to_date(request.last_offset_epoch, request.last_offset)
        if request.pre_vote:
            # Reject while we still hear from a live leader: a partitioned node rejoining must
            # not disrupt a working quorum (KIP-996).
            hearing_leader = (
                self.role is Role.FOLLOWER
                and self.now_ms - self._leader_contact_ms < self.config.fetch_timeout_ms
            ) or self.role is Role.LEADER
            answer(up_to_date and not hearing_leader)
            return
        if request.candidate_epoch > self.epoch:
            self._become_unattached(request.candidate_epoch, NO_LEADER)
        can_vote = self.leader_id == NO_LEADER and (
            self.voted_id == NO_LEADER or self._vote_is_for(request)
        )
        granted = can_vote and up_to_date
        if granted and self.voted_id == NO_LEADER:
            self.voted_id = request.candidate_id
            self.voted_directory_id = request.candidate_directory_id
            self._persist()
            if self.role is Role.PROSPECTIVE:
                self._set_role(Role.UNATTACHED)
            self._election_deadline_ms = self.now_ms + self._random_election_timeout()
        answer(granted)

    def _on_vote_response(self, src: int, request: VoteRequest, response: VoteResponse) -> None:
        if self._maybe_higher_epoch(response.leader_epoch, response.leader_id):
            return
        if (
            self.role in (Role.PROSPECTIVE, Role.UNATTACHED)
            and response.leader_epoch == self.epoch
            and response.leader_id not in (NO_LEADER, self.node_id, self.leader_id)
        ):
            # Someone follows a leader of our epoch we did not know: rejoin it (KIP-996).
            # A hint naming the leader we just timed out on proves nothing (the peer may be
            # about to time out too); rejoining it would have two followers of a dead leader
            # bounce each other back forever, one fetch timeout apart.
            self._become_follower(self.epoch, response.leader_id)
            return
        expected = Role.PROSPECTIVE if request.pre_vote else Role.CANDIDATE
        round_epoch = self.epoch + 1 if request.pre_vote else self.epoch
        if self.role is not expected or request.candidate_epoch != round_epoch:
            return
        self._votes[src] = response.vote_granted
        if response.vote_granted:
            self._tally()
            return
        rejected = sum(1 for v, ok in self._votes.items() if not ok and v in self.voters)
        if rejected >= majority(len(self.voters)) and self.role is Role.PROSPECTIVE:
            self._end_prospective()

    def _on_begin_quorum_epoch(self, message: Inbound, request: BeginQuorumEpochRequest) -> None:
        if request.leader_epoch < self.epoch:
            self._reply(
                message,
                BeginQuorumEpochResponse(
                    Errors.FENCED_LEADER_EPOCH, self.epoch, self._leader_hint()
                ),
            )
            return
        if request.leader_epoch == self.epoch and self.role is Role.LEADER:
            # Two leaders in one epoch cannot happen; refuse rather than follow.
            self._reply(
                message,
                BeginQuorumEpochResponse(Errors.INVALID_REQUEST, self.epoch, self.node_id),
            )
            return
        if not (
            self.role is Role.FOLLOWER
            and self.epoch == request.leader_epoch
            and self.leader_id == request.leader_id
        ):
            self._become_follower(request.leader_epoch, request.leader_id)
        self._leader_contact_ms = self.now_ms
        self._reply(message, BeginQuorumEpochResponse(Errors.NONE, self.epoch, self.leader_id))

    def _on_end_quorum_epoch(self, message: Inbound, request: EndQuorumEpochRequest) -> None:
        if request.leader_epoch < self.epoch:
            self._reply(
                message,
                EndQuorumEpochResponse(Errors.FENCED_LEADER_EPOCH, self.epoch, self._leader_hint()),
            )
            return
        follows_it = self.leader_id == request.leader_id or request.leader_epoch > self.epoch
        if self.electable and follows_it and self.role is not Role.LEADER:
            self._become_unattached(
                request.leader_epoch,
                self.voted_id if request.leader_epoch == self.epoch else NO_LEADER,
            )
            # The backoff shortcut: the preferred successor stands at once, the others wait
            # in proportion to how far down the list they are.
            successors = request.preferred_successors
            if self.node_id in successors:
                position = successors.index(self.node_id)
                step = self.config.election_backoff_max_ms // max(1, len(successors))
                self._election_deadline_ms = self.now_ms + position * step
        self._reply(message, EndQuorumEpochResponse(Errors.NONE, self.epoch, self._leader_hint()))
