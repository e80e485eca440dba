"""Replica placement: which brokers hold the replicas of new partitions.

Kafka's rack-aware assignment (AdminUtils.assignReplicasToBrokersRackAware): brokers are
listed alternating between racks; partition p's first replica (its preferred leader) is the
(start + p)-th broker of that list, so leaders stripe evenly over brokers; the other replicas
follow at a shift that grows every time the partitions wrap around the list, and skip a
broker whose rack already holds a replica until every rack holds one. Start and shift come
from the injected Random, so placement is reproducible from a seed. Brokers without a rack
count as one rack of their own, which makes an all-rackless cluster plain striping.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from metadata.image import BrokerRegistration


class PlacementError(ValueError):
    """The replication factor cannot be met (Kafka's InvalidReplicationFactorException)."""


def place_replicas(
    brokers: Sequence[BrokerRegistration],
    num_partitions: int,
    replication_factor: int,
    rng: random.Random,
    start_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists for partitions ``start_partition ..`` on ``brokers`` (the usable ones:
    unfenced and not shutting down), first replica = preferred leader."""
    if replication_factor <= 0:
        raise PlacementError("Replication factor must be larger than 0.")
    if not brokers:
        raise PlacementError("All brokers are currently fenced.")
    if replication_factor > len(brokers):
        raise PlacementError(
            f"The target replication factor of {replication_factor} cannot be reached because "
            f"only {len(brokers)} broker(s) are registered."
        )
    rack_of = {b.broker_id: b.rack or "" for b in brokers}
    arranged = _rack_alternated(rack_of)
    count, racks = len(arranged), len(set(rack_of.values()))
    start_index = rng.randrange(count)
    replica_shift = rng.randrange(count)
    placements = []
    for partition in range(start_partition, start_partition + num_partitions):
        if partition > 0 and partition % count == 0:
            replica_shift += 1
        first = (partition + start_index) % count
        leader = arranged[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        k = 0
        while len(replicas) < replication_factor:
            shift = 1 + (replica_shift * racks + k) % (count - 1)
            broker = arranged[(first + shift) % count]
            k += 1
            assert k <= 2 * count, "two passes over the brokers cover every rack and broker"
            if broker in replicas:
                continue
            if rack_of[broker] in racks_used and len(racks_used) < racks:
                continue
            replicas.append(broker)
            racks_used.add(rack_of[broker])
        placements.append(tuple(replicas))
    return placements


def _rack_alternated(rack_of: dict[int, str]) -> list[int]:
    """Broker ids taking one broker from each rack in turn (racks and ids sorted)."""
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in sorted(rack_of.items()):
        by_rack.setdefault(rack, []).append(broker_id)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    arranged: list[int] = []
    depth = 0
    while len(arranged) < len(rack_of):
        arranged.extend(queue[depth] for queue in queues if depth < len(queue))
        depth += 1
    return arranged
