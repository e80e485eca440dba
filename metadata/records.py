"""Metadata record values: msgpack maps ``{type, version, ...fields}`` (ARCHITECTURE).

Only the NoOp record exists so far: the active controller appends one every
``metadata.max.idle.interval.ms`` (KIP-835) so the high watermark, and with it every
observer's view of the quorum's liveness, keeps moving when nothing else happens.
The full record set arrives with the QuorumController (issue #6).
"""

from __future__ import annotations

from typing import Any

import msgpack


class MetadataRecordError(ValueError):
    """A record value that is not a known {type, version} map."""


NO_OP = "NoOp"
KNOWN_VERSIONS = {NO_OP: 0}


def encode_record(record_type: str, version: int, **fields: Any) -> bytes:
    """The msgpack value of one metadata record."""
    if KNOWN_VERSIONS.get(record_type) != version:
        raise MetadataRecordError(f"unknown record {record_type} v{version}")
    return msgpack.packb({"type": record_type, "version": version, **fields})


def decode_record(value: bytes, offset: int) -> dict[str, Any]:
    """Parse a record value; unknown types or versions fail loudly with the offset."""
    try:
        record = msgpack.unpackb(value)
    except (ValueError, msgpack.UnpackException) as error:
        raise MetadataRecordError(f"offset {offset}: undecodable record ({error})") from None
    if not isinstance(record, dict) or KNOWN_VERSIONS.get(record.get("type")) != record.get(
        "version"
    ):
        raise MetadataRecordError(f"offset {offset}: unknown record {record!r:.80}")
    return record
