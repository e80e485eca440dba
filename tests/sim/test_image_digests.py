"""The metadata scenario's image digests, built part by part from shared objects, must
agree with the images' contents: equal for equal images built from different objects (two
nodes' replays), different whenever the images' records differ."""

from __future__ import annotations

from hypothesis import given, settings

from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.snapshot import image_from_records, image_records
from sim.scenarios.metadata_checks import ImageDigests
from tests.metadata.histories import legal_history


def replay(history: list[list[object]]) -> list[MetadataImage]:
    """Every image of one node's replay, each sharing unchanged parts with the one before."""
    images, delta = [], MetadataDelta(EMPTY)
    for offset, batch in enumerate(history, start=1):
        for record in batch:
            delta.replay(record)
        images.append(delta.apply(offset, 1))
    return images


@settings(max_examples=60, deadline=None)
@given(legal_history())
def test_digests_follow_content_not_object_identity(history: list[list[object]]) -> None:
    images = replay(history)
    one_node, other_node = ImageDigests(), ImageDigests()
    digests = [one_node.digest(image) for image in images]
    for image, digest in zip(images, digests, strict=True):
        rebuilt = image_from_records(image_records(image), image.offset, image.epoch)
        assert other_node.digest(rebuilt) == digest  # another node, other objects
    for before, after, digest_before, digest_after in zip(
        images, images[1:], digests, digests[1:], strict=False
    ):
        renumbered = image_from_records(image_records(after), before.offset, before.epoch)
        same_records = image_records(before) == image_records(after)
        assert (ImageDigests().digest(renumbered) == digest_before) == same_records
        assert digest_after != digest_before  # the offset is part of every digest
