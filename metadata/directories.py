"""Which log dir holds each replica (KIP-858, JBOD in KRaft), as the controller and brokers
read it from the image.

A partition's ``directories`` name, in replica order, the log dir id of each replica; a
broker's registration lists its online dirs. The reserved ids are Kafka's (DirectoryId):
MIGRATING (what an absent list means: written before dirs were tracked), UNASSIGNED (not
placed yet) and LOST (placed in a dir that is gone). kraft-py writes new partitions with the
empty list (every replica MIGRATING) and a broker with more than one log dir tells the
controller where it put each replica (AssignReplicasToDirs); a broker with one dir never
needs to, since a failure of its only dir stops it (it is fenced like any dead broker).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from metadata.image import BrokerRegistration, PartitionRegistration

MIGRATING = uuid.UUID(int=0)
UNASSIGNED = uuid.UUID(int=1)
LOST = uuid.UUID(int=2)
# Kafka's DirectoryId.reserved: the first 100 ids are never a real dir's.
RESERVED_IDS = 100


def directory_of(partition: PartitionRegistration, broker_id: int) -> uuid.UUID:
    """The dir holding ``broker_id``'s replica of ``partition`` (MIGRATING when unknown)."""
    if not partition.directories or broker_id not in partition.replicas:
        return MIGRATING
    return partition.directories[partition.replicas.index(broker_id)]


def is_online(directory: uuid.UUID, broker: BrokerRegistration) -> bool:
    """Whether a replica in ``directory`` on ``broker`` is served (Kafka's
    DirectoryId.isOnline): an unknown dir counts as online (the broker stops when its
    last dir fails), LOST as offline, any other id only while the broker lists it. A
    broker that registered no dirs at all is trusted the same way."""
    if directory in (MIGRATING, UNASSIGNED):
        return True
    if directory == LOST:
        return False
    return not broker.log_dirs or directory in broker.log_dirs


def realigned(
    replicas: Sequence[int], directories: Sequence[uuid.UUID], new_replicas: Sequence[int]
) -> tuple[uuid.UUID, ...]:
    """``directories`` for ``new_replicas``: each remaining replica keeps its dir, a new one
    is UNASSIGNED; empty stays empty (every replica still MIGRATING)."""
    if not directories:
        return ()
    by_broker = dict(zip(replicas, directories, strict=True))
    return tuple(by_broker.get(replica, UNASSIGNED) for replica in new_replicas)
