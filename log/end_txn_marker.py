"""Commit and abort markers: the control batches that end a transaction on a partition.

Exactly Kafka's EndTransactionMarker as MemoryRecords.withEndTransactionMarker writes it: a
v2 batch, uncompressed, CreateTime, with the control (bit 5) and transactional (bit 4)
attributes, the producer's id and epoch, base sequence -1, and one record at offset delta
0 whose

- key is the control record key: version int16 (0), type int16 (0 abort, 1 commit);
- value is EndTxnMarker v0: version int16 (0), coordinatorEpoch int32.

The leader writes one when the transaction coordinator sends WriteTxnMarkers; every
replica's producer state reads it back (``decode``) to close the producer's transaction.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from log.batch import BATCH_HEADER_SIZE, BatchHeader, encode_batch
from log.compression import Compression
from log.errors import CorruptRecordError, InvalidRecordError
from log.records import (
    ControlRecordType,
    Record,
    decode_control_key,
    decode_records,
    encode_control_key,
)

END_TXN_MARKER_VALUE_VERSION = 0
_VALUE = struct.Struct(">hi")


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A commit (``commit``) or abort marker of the coordinator at ``coordinator_epoch``."""

    commit: bool
    coordinator_epoch: int

    @property
    def control_type(self) -> ControlRecordType:
        return ControlRecordType.COMMIT if self.commit else ControlRecordType.ABORT


def encode_marker_batch(
    producer_id: int, producer_epoch: int, marker: EndTransactionMarker, timestamp_ms: int
) -> bytes:
    """The control batch holding ``marker`` (offset and leader epoch are the log's to set)."""
    record = Record(
        encode_control_key(marker.control_type),
        _VALUE.pack(END_TXN_MARKER_VALUE_VERSION, marker.coordinator_epoch),
        timestamp_ms,
    )
    return encode_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def decode_marker(
    data: bytes | bytearray | memoryview, position: int, header: BatchHeader
) -> EndTransactionMarker | None:
    """The marker in the control batch at ``position`` (already CRC-checked), or None when
    it is another kind of control batch. CorruptRecordError if it cannot be a marker."""
    if not header.is_control:
        return None
    if header.compression is not Compression.NONE or header.records_count != 1:
        raise CorruptRecordError(f"control batch at offset {header.base_offset} is malformed")
    with memoryview(data) as view:
        payload = bytes(view[position + BATCH_HEADER_SIZE : position + header.size])
    (record,) = decode_records(payload, 1, header.base_offset, header.base_timestamp)
    try:
        control_type = decode_control_key(record.key)
    except InvalidRecordError:
        return None
    if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
        return None
    value = record.value
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(f"marker at offset {header.base_offset} has no value")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"marker at offset {header.base_offset}: version {version}")
    return EndTransactionMarker(control_type == ControlRecordType.COMMIT, coordinator_epoch)
