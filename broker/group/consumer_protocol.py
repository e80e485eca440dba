"""The ``consumer`` protocol's subscription, as far as the coordinator needs to read it.

Clients put a ConsumerProtocolSubscription (int16 version, then the versioned body kio has
schemas for) into JoinGroup; the coordinator is opaque to it except where Kafka is not:
OffsetDelete refuses to delete offsets of topics a live member still subscribes to.
"""

from __future__ import annotations

import struct
from typing import Any

from kio.schema.consumer_protocol_subscription.v0.data import (
    ConsumerProtocolSubscription as SubscriptionV0,
)
from kio.schema.consumer_protocol_subscription.v1.data import (
    ConsumerProtocolSubscription as SubscriptionV1,
)
from kio.schema.consumer_protocol_subscription.v2.data import (
    ConsumerProtocolSubscription as SubscriptionV2,
)
from kio.schema.consumer_protocol_subscription.v3.data import (
    ConsumerProtocolSubscription as SubscriptionV3,
)
from kio.serial import entity_reader
from kio.serial.errors import SerialError

_READERS: tuple[Any, ...] = tuple(
    entity_reader(schema)
    for schema in (SubscriptionV0, SubscriptionV1, SubscriptionV2, SubscriptionV3)
)


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics a member's subscription names, None if it cannot be read."""
    if len(metadata) < 2:
        return None
    (version,) = struct.unpack_from(">h", metadata)
    # Newer versions only add fields at the end: read them as the newest we know.
    reader = _READERS[min(max(version, 0), len(_READERS) - 1)]
    try:
        subscription, _ = reader(memoryview(metadata), 2)
    except (SerialError, ValueError, IndexError, struct.error):
        return None
    return frozenset(subscription.topics)
