"""Snapshots: the records an image writes rebuild exactly that image on an empty one."""

from __future__ import annotations

from hypothesis import given, settings

from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.records import MetadataRecord, decode_record
from metadata.snapshot import image_from_records, image_log_records, image_records
from tests.metadata.histories import legal_history


def replay(history: list[list[MetadataRecord]]) -> MetadataImage:
    delta = MetadataDelta(EMPTY)
    offset = 0
    for batch in history:
        for record in batch:
            delta.replay(record)
        offset += len(batch)
        delta.apply(offset, 3)
    return delta.image


@settings(max_examples=150, deadline=None)
@given(legal_history())
def test_image_records_rebuild_the_image(history: list[list[MetadataRecord]]) -> None:
    image = replay(history)
    rebuilt = image_from_records(image_records(image), image.offset, image.epoch)
    assert rebuilt == image


@settings(max_examples=50, deadline=None)
@given(legal_history())
def test_snapshot_log_records_decode_to_the_image_records(
    history: list[list[MetadataRecord]],
) -> None:
    image = replay(history)
    log_records = image_log_records(image, 1234)
    assert all(r.key is None and r.timestamp == 1234 for r in log_records)
    decoded = [decode_record(r.value or b"", i) for i, r in enumerate(log_records)]
    assert decoded == image_records(image)


def test_empty_image_writes_no_records() -> None:
    assert image_records(EMPTY) == []
    assert image_from_records([], 0, 0) == EMPTY
