"""__consumer_offsets records in Kafka's formats, and Kafka's group-to-partition rule."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.group.records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for,
)
from log.errors import CorruptRecordError

names = st.text(max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("hello", 99162322),
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # hashed as two UTF-16 code units
        ("polygenelubricants", -(2**31)),
    ],
)
def test_group_ids_hash_as_java_strings_do(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def test_a_group_maps_to_kafkas_partition_even_at_the_most_negative_hash() -> None:
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("polygenelubricants", 50) == 0  # Kafka's Utils.abs(MIN_VALUE) is 0
    assert partition_for("\U0001f600", 7) == (0xD83D * 31 + 0xDE00) % 7


@given(names, names, int32, int64, int32, names, int64)
def test_offset_records_round_trip(
    group: str, topic: str, partition: int, offset: int, epoch: int, meta: str, ts: int
) -> None:
    key = OffsetKey(group, topic, partition)
    assert decode_key(encode_offset_key(key)) == key
    value = OffsetValue(offset, epoch, meta, ts)
    assert decode_offset_value(encode_offset_value(value)) == value


members = st.builds(
    MemberValue,
    names,
    st.none() | names,
    names,
    names,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.binary(max_size=30),
    st.binary(max_size=30),
)


@given(
    names, names, int32, st.none() | names, st.none() | names, int64, st.lists(members, max_size=4)
)
def test_group_records_round_trip(
    group: str,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    ts: int,
    member_list: list[MemberValue],
) -> None:
    assert decode_key(encode_group_key(GroupKey(group))) == GroupKey(group)
    value = GroupValue(protocol_type, generation, protocol, leader, ts, tuple(member_list))
    assert decode_group_value(encode_group_value(value)) == value


def test_older_offset_value_versions_are_read() -> None:
    # v1 carries an expire timestamp and no leader epoch
    v1 = struct.pack(">hq", 1, 42) + struct.pack(">h", 2) + b"md" + struct.pack(">qq", 7, 9)
    assert decode_offset_value(v1) == OffsetValue(42, -1, "md", 7, 9)
    # v4 is flexible: compact string and tagged fields
    v4 = struct.pack(">hqi", 4, 42, 3) + bytes([3]) + b"md" + struct.pack(">q", 7) + bytes([0])
    assert decode_offset_value(v4) == OffsetValue(42, 3, "md", 7)


@given(st.binary(max_size=40))
def test_garbage_never_decodes_to_anything_but_a_value_or_a_corrupt_record_error(
    data: bytes,
) -> None:
    for decode in (decode_key, decode_offset_value, decode_group_value):
        with contextlib.suppress(CorruptRecordError):
            decode(data)
