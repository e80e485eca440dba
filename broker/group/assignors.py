"""KIP-848's server-side assignors: ``uniform`` (Kafka's default) and ``range``.

An assignor maps every partition of the topics members subscribe to onto one subscribed
member. It sees each member's subscription and its previous target (so ``uniform`` can be
sticky) and the subscribed topics' partition counts; it never sees who owns what now: the
coordinator's reconciliation moves partitions toward the target safely (revoke first).
Both are deterministic: ties go to the smaller member id.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker.group.consumer_records import Partitions, TopicIdPartition

UNIFORM = "uniform"
RANGE = "range"
# Kafka names them by class; both spellings are accepted in group.consumer.assignors.
CLASS_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": UNIFORM,
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": RANGE,
}


@dataclass(frozen=True, slots=True)
class MemberSpec:
    subscribed: frozenset[uuid.UUID]  # topic ids that exist
    previous: Partitions  # the member's last target assignment


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[uuid.UUID, int]], dict[str, Partitions]]


def _eligible(members: Mapping[str, MemberSpec], topic_id: uuid.UUID) -> list[str]:
    return sorted(m for m, spec in members.items() if topic_id in spec.subscribed)


def uniform(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]
) -> dict[str, Partitions]:
    """Balanced and sticky: members keep their previous partitions that are still valid
    (up to an even share), new or orphaned partitions go to the least loaded subscriber,
    then partitions move from a member to a subscriber holding at least two fewer until
    none can (each move lowers the sum of squared loads, so the loop ends)."""
    owned: dict[str, set[TopicIdPartition]] = {m: set() for m in members}
    taken: set[TopicIdPartition] = set()
    # No member keeps more than an even share: the balancing below then moves few.
    cap = -(-sum(topics.values()) // max(len(members), 1))
    for member in sorted(members):
        for where in sorted(members[member].previous):
            topic_id, index = where
            if (
                len(owned[member]) < cap
                and topic_id in members[member].subscribed
                and index < topics.get(topic_id, 0)
                and where not in taken
            ):
                owned[member].add(where)
                taken.add(where)
    eligible = {t: _eligible(members, t) for t in topics}
    for topic_id in sorted(topics, key=lambda t: (len(eligible[t]), t)):
        # The least loaded subscriber first; only this topic changes loads meanwhile.
        lightest = [(len(owned[m]), m) for m in eligible[topic_id]]
        heapq.heapify(lightest)
        for index in range(topics[topic_id]):
            if (topic_id, index) not in taken and lightest:
                load, target = lightest[0]
                owned[target].add((topic_id, index))
                heapq.heapreplace(lightest, (load + 1, target))
    moved = bool(owned)
    while moved:
        moved = False
        lightest_load = min(len(p) for p in owned.values())
        for giver in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            if len(owned[giver]) <= lightest_load + 1:
                break  # the rest are lighter still: nobody can give
            for where in sorted(owned[giver]):
                receivers = [m for m in eligible[where[0]] if len(owned[m]) + 1 < len(owned[giver])]
                if receivers:
                    receiver = min(receivers, key=lambda m: (len(owned[m]), m))
                    owned[giver].remove(where)
                    owned[receiver].add(where)
                    moved = True
                    break
            if moved:
                break
    return {m: frozenset(p) for m, p in owned.items()}


def range_(
    members: Mapping[str, MemberSpec], topics: Mapping[uuid.UUID, int]
) -> dict[str, Partitions]:
    """Per topic, contiguous ranges over its subscribers sorted by member id, the first
    ``partitions % subscribers`` getting one more (co-partitioned topics line up)."""
    owned: dict[str, set[TopicIdPartition]] = {m: set() for m in members}
    for topic_id, count in sorted(topics.items()):
        eligible = _eligible(members, topic_id)
        if not eligible:
            continue
        share, extra = divmod(count, len(eligible))
        start = 0
        for position, member in enumerate(eligible):
            size = share + (1 if position < extra else 0)
            owned[member].update((topic_id, i) for i in range(start, start + size))
            start += size
    return {m: frozenset(p) for m, p in owned.items()}


ASSIGNORS: dict[str, Assignor] = {UNIFORM: uniform, RANGE: range_}


def assignor_name(name: str) -> str | None:
    """The short name of an assignor given by short or class name; None if unknown."""
    name = CLASS_NAMES.get(name, name)
    return name if name in ASSIGNORS else None
