"""The metadata record codec: every record round-trips, and anything else fails loudly with
the offset it was read at."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata import records
from metadata.records import (
    RECORD_TYPES,
    FeatureRange,
    Listener,
    MetadataRecordError,
    NoOp,
    Partition,
    PartitionChange,
    RegisterBroker,
    decode_record,
    encode_record,
)
from tests.metadata.histories import any_record

TOPIC_ID = uuid.UUID(int=7)


@settings(max_examples=300, deadline=None)
@given(any_record, st.integers(0, 2**40))
def test_every_record_round_trips(record: object, offset: int) -> None:
    assert decode_record(encode_record(record), offset) == record  # type: ignore[arg-type]


def _reference_value(value: object) -> object:
    """Every value walked in Python, as the codec did before it let msgpack walk tuples."""
    if isinstance(value, uuid.UUID):
        return value.bytes
    if isinstance(value, tuple):
        return [_reference_value(item) for item in value]
    if isinstance(value, Listener | FeatureRange):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return value


@settings(max_examples=300, deadline=None)
@given(any_record)
def test_the_bytes_of_every_record_are_those_of_the_layout_already_on_disk(record: Any) -> None:
    """Logs and snapshots written before hold the old encoder's bytes: the same records must
    encode to the same bytes (a metadata log replayed or compared across versions)."""
    fields = {
        f.name: _reference_value(getattr(record, f.name))
        for f in dataclasses.fields(record)
        if f.name not in ("log_dirs", "directories") or getattr(record, f.name) != f.default
    }
    expected = msgpack.packb({"type": record.TYPE, "version": record.VERSION, **fields})
    assert encode_record(record) == expected


def test_every_record_type_is_covered_by_the_round_trip_strategy() -> None:
    seen = set()

    @settings(max_examples=400, deadline=None)
    @given(any_record)
    def collect(record: object) -> None:
        seen.add(type(record).TYPE)  # type: ignore[attr-defined]

    collect()
    assert seen == set(RECORD_TYPES)


def test_a_partition_written_before_elr_existed_decodes_with_empty_elr() -> None:
    """KIP-966's fields are optional on the wire: a log written before them replays."""
    raw = msgpack.unpackb(encode_record(Partition(TOPIC_ID, 0, (1, 2), (1,), 1)))
    del raw["eligible_leader_replicas"], raw["last_known_elr"]
    record = decode_record(msgpack.packb(raw), 0)
    assert isinstance(record, Partition)
    assert (record.eligible_leader_replicas, record.last_known_elr) == ((), ())


def test_wire_layout_is_a_flat_map_with_raw_uuid_bytes_and_lists() -> None:
    record = Partition(TOPIC_ID, 3, (1, 2), (1,), 1, leader_epoch=4)
    assert msgpack.unpackb(encode_record(record)) == {
        "type": "Partition",
        "version": 0,
        "topic_id": TOPIC_ID.bytes,
        "partition_id": 3,
        "replicas": [1, 2],
        "isr": [1],
        "leader": 1,
        "leader_epoch": 4,
        "partition_epoch": 0,
        "removing_replicas": [],
        "adding_replicas": [],
        "eligible_leader_replicas": [],
        "last_known_elr": [],
    }
    broker = RegisterBroker(1, TOPIC_ID, 9, (Listener("PLAINTEXT", "h", 9092),), (), None)
    assert msgpack.unpackb(encode_record(broker))["listeners"] == [
        {"name": "PLAINTEXT", "host": "h", "port": 9092, "security_protocol": 0}
    ]


def test_fields_with_defaults_may_be_absent_on_the_wire() -> None:
    value = msgpack.packb(
        {"type": "PartitionChange", "version": 0, "topic_id": TOPIC_ID.bytes, "partition_id": 0}
    )
    assert decode_record(value, 0) == PartitionChange(TOPIC_ID, 0)


def _topic(**changes: object) -> bytes:
    fields = {"type": "Topic", "version": 0, "name": "t", "topic_id": TOPIC_ID.bytes}
    fields.update(changes)
    return msgpack.packb({k: v for k, v in fields.items() if v is not _DROP})


_DROP = object()


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"\xc1", "undecodable"),
        (msgpack.packb([1, 2]), "not a map"),
        (msgpack.packb({"version": 0}), "unknown record type"),
        (_topic(type="Nope"), "unknown record type"),
        (_topic(version=1), "unknown version"),
        (_topic(version=True), "unknown version"),
        (_topic(name=_DROP), "missing field name"),
        (_topic(extra=1), "unknown fields"),
        (_topic(name=5), "expected str"),
        (_topic(topic_id=b"short"), "uuid"),
        (_topic(topic_id="not bytes"), "uuid"),
        (msgpack.packb(encode_record(NoOp())) + b"", "not a map"),
        (encode_record(NoOp()) + b"\x00", "undecodable"),
    ],
)
def test_malformed_values_fail_with_the_offset(value: bytes, reason: str) -> None:
    with pytest.raises(MetadataRecordError, match=f"^offset 42: .*{reason}"):
        decode_record(value, 42)


def test_field_types_are_strict_about_bools_ints_and_nested_maps() -> None:
    change = {"type": "PartitionChange", "version": 0, "topic_id": TOPIC_ID.bytes}
    for bad in (
        {**change, "partition_id": True},
        {**change, "partition_id": 0, "bump_leader_epoch": 1},
        {**change, "partition_id": 0, "isr": [1, "2"]},
        {**change, "partition_id": 0, "isr": 1},
    ):
        with pytest.raises(MetadataRecordError, match=r"^offset 1: PartitionChange"):
            decode_record(msgpack.packb(bad), 1)
    broker = msgpack.unpackb(
        encode_record(RegisterBroker(1, TOPIC_ID, 9, (Listener("L", "h", 1),), (), None))
    )
    broker["listeners"][0]["port"] = "1"
    with pytest.raises(MetadataRecordError, match=r"listeners\[0\]\.port"):
        decode_record(msgpack.packb(broker), 1)
    broker["listeners"] = [{"name": "L", "host": "h", "port": 1, "zone": "z"}]
    with pytest.raises(MetadataRecordError, match="unknown fields"):
        decode_record(msgpack.packb(broker), 1)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_fail_with_a_record_error(value: bytes) -> None:
    try:
        record = decode_record(value, 5)
    except MetadataRecordError as error:
        assert str(error).startswith("offset 5: ")
    else:
        assert type(record).TYPE in RECORD_TYPES


# ---- the fast decoder against the checked one ---------------------------------------------

_ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.text(max_size=4),
    st.binary(max_size=17),
    st.lists(st.integers(0, 3), max_size=3),
    st.lists(st.text(max_size=2), max_size=2),
    st.dictionaries(st.text(max_size=5), st.integers(0, 3), max_size=2),
    st.just([{"name": "L", "host": "h", "port": 1, "security_protocol": 0}]),
    st.just([{"name": "L", "host": "h", "port": True, "security_protocol": 0}]),
    st.just([{"name": "L", "host": "h", "port": 1, "security_protocol": 0, "type": "x"}]),
)


@st.composite
def _mutated_map(draw: st.DrawFn) -> object:
    """A record's decoded map with keys dropped, added or given values of another type."""
    raw = msgpack.unpackb(encode_record(draw(any_record)))
    for _ in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(("drop", "set", "add")))
        if action == "drop" and raw:
            del raw[draw(st.sampled_from(sorted(raw)))]
        elif action == "set" and raw:
            raw[draw(st.sampled_from(sorted(raw)))] = draw(_ODD_VALUES)
        else:
            raw[draw(st.sampled_from(("extra", "name", "type", "version", "isr")))] = draw(
                _ODD_VALUES
            )
    return raw


@settings(max_examples=600, deadline=None)
@given(st.one_of(_mutated_map(), _ODD_VALUES))
def test_the_fast_decoder_accepts_exactly_what_the_checked_one_accepts(raw: Any) -> None:
    """decode_record tries a fast path and, on any mismatch, the checked path that says
    where the mismatch is: for every map, valid or mutated, the fast path must give the
    checked path's record or give up, never accept what the checked path refuses."""
    try:
        expected = records._decode_record(raw)
    except records._FieldError:
        with pytest.raises(records._Mismatch):
            records._decode_fast(raw)
    else:
        try:
            assert records._decode_fast(raw) == expected
        except records._Mismatch:
            raise AssertionError(f"the fast path gave up on a valid map: {raw!r}") from None
