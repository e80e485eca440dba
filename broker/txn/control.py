"""Transaction markers: the control records ending a producer's transaction in a partition.

Kafka's format: the record key is an int16 version (0) and an int16 type (0 ABORT,
1 COMMIT); the value an EndTransactionMarker, int16 version (0) and the int32 epoch of the
coordinator that wrote it. A marker is the only record of a control batch, which carries the
producer id and epoch and the transactional flag.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from log.batch import encode_batch
from log.records import Record

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def encode_marker_batch(
    producer_id: int, producer_epoch: int, committed: bool, coordinator_epoch: int, now_ms: int
) -> bytes:
    """A control batch holding one COMMIT or ABORT marker of the producer."""
    record = Record(
        _KEY.pack(0, COMMIT if committed else ABORT), _VALUE.pack(0, coordinator_epoch), now_ms
    )
    return encode_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def control_type(records: Sequence[Record]) -> bool | None:
    """Of a control batch's records: True for a COMMIT marker, False for ABORT, None for
    another kind of control record (or one this cannot read), which ends no transaction."""
    if not records or records[0].key is None or len(records[0].key) < _KEY.size:
        return None
    version, kind = _KEY.unpack_from(records[0].key)
    if version != 0 or kind not in (ABORT, COMMIT):
        return None
    return kind == COMMIT
