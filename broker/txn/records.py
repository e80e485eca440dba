"""The records of ``__transaction_state`` in Kafka's own formats, so Kafka's tools read them.

A key is a TransactionLogKey: int16 version 0, then the transactional id. A value is a
TransactionLogValue: version 0 (what Kafka writes for transaction version 1 clients) is
written; version 1 (flexible, KIP-915, with the tagged PreviousProducerId, NextProducerId and
ClientTransactionVersion) is read too. A null value is a tombstone: the transactional id
expired. The status byte is Kafka's TransactionState id.

Which partition holds a transactional id is Kafka's rule (as for groups): Java's
String.hashCode, made non-negative, modulo the partition count.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.group.records import Reader
from log.errors import CorruptRecordError

TXN_LOG_KEY_VERSION = 0
TXN_LOG_VALUE_VERSION = 0
EMPTY_STATUS = 0  # TransactionState.EMPTY's id

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """One TransactionLogValue, field for field (``partitions`` sorted)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    last_update_ms: int
    start_ms: int
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    data = transactional_id.encode()
    return _I16.pack(TXN_LOG_KEY_VERSION) + _I16.pack(len(data)) + data


def decode_key(data: bytes) -> str | None:
    """The transactional id of a key; None for a key version this does not know."""
    reader = Reader(data)
    if reader.i16() != TXN_LOG_KEY_VERSION:
        return None
    return reader.string()


def encode_value(value: TxnLogValue) -> bytes:
    out = bytearray(_I16.pack(TXN_LOG_VALUE_VERSION))
    out += _I64.pack(value.producer_id)
    out += _I16.pack(value.producer_epoch)
    out += _I32.pack(value.timeout_ms)
    out += _I8.pack(value.status)
    # Kafka writes an Empty transaction's partitions as null.
    out += _I32.pack(-1 if value.status == EMPTY_STATUS else len(value.partitions))
    for topic, partitions in value.partitions:
        data = topic.encode()
        out += _I16.pack(len(data)) + data
        out += _I32.pack(len(partitions))
        for partition in partitions:
            out += _I32.pack(partition)
    out += _I64.pack(value.last_update_ms)
    out += _I64.pack(value.start_ms)
    return bytes(out)


def decode_value(data: bytes) -> TxnLogValue:
    """A TransactionLogValue of version 0 or 1; CorruptRecordError if it cannot be read."""
    version = _I16.unpack(data[:2])[0] if len(data) >= 2 else -1
    if version not in (0, 1):
        raise CorruptRecordError(f"unknown TransactionLogValue version {version}")
    flexible = version >= 1
    reader = Reader(data, flexible=flexible)
    reader.pos = 2
    producer_id = reader.i64()
    epoch = reader.i16()
    timeout_ms = reader.i32()
    status = _I8.unpack(reader.take(1))[0]
    count = reader.uvarint() - 1 if flexible else reader.i32()
    if count > len(data):
        raise CorruptRecordError("TransactionLogValue partitions count is invalid")
    partitions = []
    for _ in range(max(count, 0)):  # -1: null (an Empty transaction)
        topic = reader.string()
        size = reader.array_length()
        partitions.append((topic, tuple(sorted(reader.i32() for _ in range(size)))))
        reader.skip_tags()
    last_update = reader.i64()
    start = reader.i64()
    previous = following = -1
    client_version = 0
    if flexible:
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            field = reader.take(size)
            if tag == 0 and size == 8:
                previous = _I64.unpack(field)[0]
            elif tag == 1 and size == 8:
                following = _I64.unpack(field)[0]
            elif tag == 2 and size == 2:
                client_version = _I16.unpack(field)[0]
    return TxnLogValue(
        producer_id,
        epoch,
        timeout_ms,
        status,
        tuple(sorted(partitions)),
        last_update,
        start,
        previous,
        following,
        client_version,
    )
