"""The voter set of a dynamic quorum (KIP-853) and the control records that carry it.

A static quorum (``controller.quorum.voters``, kraft.version 0) has a voter set fixed by
configuration and nothing about it in the log. A dynamic quorum (kraft.version 1) keeps its
voter set in the log itself: a KRaftVersionRecord and a VotersRecord (Kafka's schemas, via
kio) in control batches, the first pair in the bootstrap snapshot that ``kraft-server
format --standalone | --initial-controllers`` writes, and one VotersRecord per change after.

Every replica uses the *latest* voter set in its log, committed or not, as KIP-853 (and
Raft's single-server change) says: a change takes effect the moment it is appended, so the
old and new majorities always overlap when only one voter changes at a time. A change that
is truncated away reverts to the set before it, which is why the history keeps every entry
at or after the log start, and not just the newest.

A voter is a (replica id, directory id) pair: a re-formatted disk gets a fresh directory id,
so it is a different replica and can never vote with the promises its predecessor made.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.types import BrokerId
from kio.schema.voters_record.v0.data import Endpoint as KioEndpoint
from kio.schema.voters_record.v0.data import KRaftVersionFeature, VotersRecord
from kio.schema.voters_record.v0.data import Voter as KioVoter
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, u16

from log.batch import decode_batch, iter_batches
from log.records import ControlRecordType, Record, decode_control_key, encode_control_key

# kraft.version: 0 = static voters from configuration, 1 = voters in the log (KIP-853).
KRAFT_VERSION_STATIC = 0
KRAFT_VERSION_DYNAMIC = 1
KRAFT_VERSION_FEATURE = "kraft.version"  # its name in UpdateFeatures and ApiVersions
CONTROLLER_LISTENER = "CONTROLLER"
# Bounds on what a (possibly forged) record or request may make us hold.
MAX_VOTERS = 64
MAX_ENDPOINTS = 16


class VoterSetError(ValueError):
    """A voters record, or a change to a voter set, that breaks the rules."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One listener a voter can be reached on (VotersRecord's Endpoint)."""

    name: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class Voter:
    """One member of the voter set. ``directory_id`` is None for a static voter (its disk is
    not known: kraft.version 0)."""

    voter_id: int
    directory_id: uuid.UUID | None = None
    endpoints: tuple[Endpoint, ...] = ()
    min_kraft_version: int = KRAFT_VERSION_STATIC
    max_kraft_version: int = KRAFT_VERSION_DYNAMIC

    def matches(self, voter_id: int, directory_id: uuid.UUID | None) -> bool:
        """True if the replica (voter_id, directory_id) is this voter: same id, and the
        same directory unless either side does not know it (a static quorum)."""
        if voter_id != self.voter_id:
            return False
        return (
            self.directory_id is None or directory_id is None or directory_id == self.directory_id
        )

    def address(self, listener: str | None = None) -> tuple[str, int] | None:
        """(host, port) of the named listener, else of the first one; None without any."""
        for endpoint in self.endpoints:
            if listener is None or endpoint.name == listener:
                return endpoint.host, endpoint.port
        if listener is not None and self.endpoints:
            return self.endpoints[0].host, self.endpoints[0].port
        return None


@dataclass(frozen=True, slots=True)
class VoterSet:
    """The voters, by replica id (one voter per id, as Kafka requires)."""

    voters: tuple[Voter, ...] = ()

    def __post_init__(self) -> None:
        ids = [v.voter_id for v in self.voters]
        if len(set(ids)) != len(ids):
            raise VoterSetError(f"voter ids repeat: {ids}")
        if len(ids) > MAX_VOTERS:
            raise VoterSetError(f"{len(ids)} voters is more than {MAX_VOTERS}")
        if any(v.voter_id < 0 for v in self.voters):
            raise VoterSetError(f"negative voter id in {ids}")
        if ids != sorted(ids):
            object.__setattr__(self, "voters", tuple(sorted(self.voters, key=lambda v: v.voter_id)))

    @staticmethod
    def static(
        addresses: dict[int, tuple[str, int]] | list[int] | tuple[int, ...],
        listener: str = CONTROLLER_LISTENER,
    ) -> VoterSet:
        """The voter set of ``controller.quorum.voters``: ids and addresses (on the
        controller listener, ``controller.listener.names[0]``), no directories."""
        if isinstance(addresses, dict):
            return VoterSet(
                tuple(
                    Voter(i, None, (Endpoint(listener, host, port),))
                    for i, (host, port) in addresses.items()
                )
            )
        return VoterSet(tuple(Voter(i) for i in addresses))

    def ids(self) -> tuple[int, ...]:
        return tuple(v.voter_id for v in self.voters)

    def get(self, voter_id: int) -> Voter | None:
        for voter in self.voters:
            if voter.voter_id == voter_id:
                return voter
        return None

    def is_voter(self, voter_id: int, directory_id: uuid.UUID | None) -> bool:
        voter = self.get(voter_id)
        return voter is not None and voter.matches(voter_id, directory_id)

    def added(self, voter: Voter) -> VoterSet:
        """This set with ``voter``; VoterSetError if its id already votes (DUPLICATE_VOTER)."""
        if self.get(voter.voter_id) is not None:
            raise VoterSetError(f"voter {voter.voter_id} is already in the voter set")
        return VoterSet((*self.voters, voter))

    def removed(self, voter_id: int, directory_id: uuid.UUID | None) -> VoterSet:
        """This set without the voter (voter_id, directory_id); VoterSetError if it is not
        one, or if it is the last."""
        if not self.is_voter(voter_id, directory_id):
            raise VoterSetError(f"replica {voter_id} ({directory_id}) is not a voter")
        if len(self.voters) == 1:
            raise VoterSetError("the last voter cannot be removed")
        return VoterSet(tuple(v for v in self.voters if v.voter_id != voter_id))

    def updated(self, voter: Voter) -> VoterSet:
        """This set with the endpoints and supported versions of ``voter`` replaced."""
        if not self.is_voter(voter.voter_id, voter.directory_id):
            raise VoterSetError(f"replica {voter.voter_id} ({voter.directory_id}) is not a voter")
        return VoterSet(tuple(voter if v.voter_id == voter.voter_id else v for v in self.voters))


# ---- the control records ------------------------------------------------------------------
_write_voters = entity_writer(VotersRecord)
_read_voters = entity_reader(VotersRecord)
_write_version = entity_writer(KRaftVersionRecord)
_read_version = entity_reader(KRaftVersionRecord)


def voters_record(voters: VoterSet, timestamp_ms: int) -> Record:
    """The KRAFT_VOTERS control record holding ``voters``."""
    message = VotersRecord(
        version=i16(0),
        voters=tuple(
            KioVoter(
                voter_id=BrokerId(i32(v.voter_id)),
                voter_directory_id=v.directory_id or uuid.UUID(int=0),
                endpoints=tuple(
                    KioEndpoint(name=e.name, host=e.host, port=u16(e.port)) for e in v.endpoints
                ),
                k_raft_version_feature=KRaftVersionFeature(
                    min_supported_version=i16(v.min_kraft_version),
                    max_supported_version=i16(v.max_kraft_version),
                ),
            )
            for v in voters.voters
        ),
    )
    buffer = io.BytesIO()
    _write_voters(buffer, message)
    return Record(
        encode_control_key(ControlRecordType.KRAFT_VOTERS), buffer.getvalue(), timestamp_ms
    )


def decode_voters(value: bytes | None) -> VoterSet:
    """The voter set in a KRAFT_VOTERS record's value; VoterSetError if it is malformed."""
    try:
        message, _size = _read_voters(value or b"", 0)
        voters = []
        for v in message.voters:
            if len(v.endpoints) > MAX_ENDPOINTS:
                raise VoterSetError(f"voter {v.voter_id} has {len(v.endpoints)} endpoints")
            directory = v.voter_directory_id
            voters.append(
                Voter(
                    int(v.voter_id),
                    None if directory is None or directory.int == 0 else directory,
                    tuple(Endpoint(e.name, e.host, int(e.port)) for e in v.endpoints),
                    int(v.k_raft_version_feature.min_supported_version),
                    int(v.k_raft_version_feature.max_supported_version),
                )
            )
        return VoterSet(tuple(voters))
    except VoterSetError:
        raise
    except Exception as error:  # kio raises several kinds on truncated or bad input
        raise VoterSetError(f"corrupt VotersRecord ({error})") from None


def kraft_version_record(version: int, timestamp_ms: int) -> Record:
    """The KRAFT_VERSION control record: the kraft.version feature level from here on."""
    buffer = io.BytesIO()
    _write_version(buffer, KRaftVersionRecord(version=i16(0), k_raft_version=i16(version)))
    return Record(
        encode_control_key(ControlRecordType.KRAFT_VERSION), buffer.getvalue(), timestamp_ms
    )


def decode_kraft_version(value: bytes | None) -> int:
    """The kraft.version in a KRAFT_VERSION record's value."""
    try:
        message, _size = _read_version(value or b"", 0)
    except Exception as error:
        raise VoterSetError(f"corrupt KRaftVersionRecord ({error})") from None
    version = int(message.k_raft_version)
    if version not in (KRAFT_VERSION_STATIC, KRAFT_VERSION_DYNAMIC):
        raise VoterSetError(f"unknown kraft.version {version}")
    return version


@dataclass(frozen=True, slots=True)
class QuorumControl:
    """A kraft.version or voter set found in the log at ``offset``."""

    offset: int
    kraft_version: int | None = None
    voters: VoterSet | None = None


def scan_control(data: bytes) -> Iterator[QuorumControl]:
    """The KRaftVersion and Voters records in ``data`` (whole v2 batches), in order. Only
    control batches are decoded: the header says which they are."""
    for position, header in iter_batches(data):
        if not header.is_control:
            continue
        header, records = decode_batch(data, position)
        for index, record in enumerate(records):
            kind = decode_control_key(record.key)
            offset = header.base_offset + index
            if kind is ControlRecordType.KRAFT_VOTERS:
                yield QuorumControl(offset, voters=decode_voters(record.value))
            elif kind is ControlRecordType.KRAFT_VERSION:
                yield QuorumControl(offset, kraft_version=decode_kraft_version(record.value))


def control_in_records(records: list[Record]) -> QuorumControl:
    """The last kraft.version and voter set among a snapshot's control records (offset -1:
    they hold for the whole prefix the snapshot stands for)."""
    version: int | None = None
    voters: VoterSet | None = None
    for record in records:
        kind = decode_control_key(record.key)
        if kind is ControlRecordType.KRAFT_VOTERS:
            voters = decode_voters(record.value)
        elif kind is ControlRecordType.KRAFT_VERSION:
            version = decode_kraft_version(record.value)
    return QuorumControl(-1, version, voters)


@dataclass(frozen=True, slots=True)
class _Entry:
    offset: int
    kraft_version: int
    voters: VoterSet


class VoterHistory:
    """The voter sets of the log, by offset: a base (from configuration or the snapshot the
    log starts at) and one entry per KRaftVersion or Voters record still in the log."""

    def __init__(self, base: VoterSet, kraft_version: int = KRAFT_VERSION_STATIC) -> None:
        self._base = _Entry(-1, kraft_version, base)
        self._entries: list[_Entry] = []

    def _last(self) -> _Entry:
        return self._entries[-1] if self._entries else self._base

    def latest(self) -> VoterSet:
        """The voter set in force: the latest in the log, committed or not."""
        return self._last().voters

    def latest_offset(self) -> int:
        """Offset of the record that made the latest set (-1: the base)."""
        return self._last().offset

    def kraft_version(self) -> int:
        return self._last().kraft_version

    def at(self, end_offset: int) -> tuple[int, VoterSet]:
        """(kraft.version, voters) in force for the log prefix below ``end_offset``."""
        entry = self._base
        for candidate in self._entries:
            if candidate.offset >= end_offset:
                break
            entry = candidate
        return entry.kraft_version, entry.voters

    def add(self, control: QuorumControl) -> bool:
        """Record a control record appended at ``control.offset``; True if the voter set or
        kraft.version changed."""
        last = self._last()
        assert control.offset > last.offset, (control.offset, last.offset)
        version = last.kraft_version if control.kraft_version is None else control.kraft_version
        voters = last.voters if control.voters is None else control.voters
        self._entries.append(_Entry(control.offset, version, voters))
        return (version, voters) != (last.kraft_version, last.voters)

    def truncate(self, end_offset: int) -> bool:
        """Forget entries at or after ``end_offset`` (the log was cut there); True if the
        voter set in force reverted."""
        before = self._last()
        self._entries = [e for e in self._entries if e.offset < end_offset]
        return self._last() is not before

    def reset(self, control: QuorumControl) -> None:
        """The log now starts at a snapshot: its records (if any) become the base."""
        version = (
            self._base.kraft_version if control.kraft_version is None else control.kraft_version
        )
        voters = self._base.voters if control.voters is None else control.voters
        self._base = _Entry(-1, version, voters)
        self._entries = []
