"""Raft control records in the log, in Kafka's control-batch convention.

A LeaderChange record opens every epoch: key = (version 0, type LEADER_CHANGE), value = the
LeaderChangeMessage schema (kio), so Kafka's own tools can read our metadata log.
"""

from __future__ import annotations

import io

from kio.schema.leader_change_message.v0.data import LeaderChangeMessage, Voter
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from log.records import ControlRecordType, Record, encode_control_key

_write = entity_writer(LeaderChangeMessage)
_read = entity_reader(LeaderChangeMessage)


def leader_change_record(
    leader_id: int, voters: tuple[int, ...], granting: tuple[int, ...], timestamp_ms: int
) -> Record:
    """The LeaderChange control record a new leader appends first."""
    message = LeaderChangeMessage(
        version=i16(0),
        leader_id=BrokerId(i32(leader_id)),
        voters=tuple(Voter(voter_id=BrokerId(i32(v))) for v in voters),
        granting_voters=tuple(Voter(voter_id=BrokerId(i32(v))) for v in granting),
    )
    buffer = io.BytesIO()
    _write(buffer, message)
    return Record(
        key=encode_control_key(ControlRecordType.LEADER_CHANGE),
        value=buffer.getvalue(),
        timestamp=timestamp_ms,
    )


def decode_leader_change(value: bytes) -> LeaderChangeMessage:
    """Parse a LeaderChange control record's value."""
    message, _size = _read(value, 0)
    return message
