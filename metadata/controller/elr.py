"""Eligible leader replicas (KIP-966, as Kafka 4.x's PartitionChangeBuilder keeps them).

With ``eligible.leader.replicas.version`` at 1 or more, a broker's high watermark stands still
while a partition's ISR is smaller than min.insync.replicas (the "strict min ISR" rule,
broker/partition.py). A replica that leaves an ISR already below that size therefore holds
every committed record, and may lead again cleanly: the controller keeps such replicas in the
partition's ELR, and the ISR may shrink to nothing. The rules, applied to every partition
change the controller makes:

- the ISR at or above the (effective) min ISR clears the ELR; below it, the ELR becomes the
  old ISR plus the old ELR, minus the new ISR and minus a broker back from an unclean
  shutdown (its unflushed tail may be gone, so it may have lost committed records);
- a leader is elected, in this order, from the ISR; from the ELR when the ISR is empty (it
  leads with an ISR of itself, and leaves the ELR); the last known leader, when ISR and ELR
  are both empty (Kafka 4.1's "balanced recovery": it led last, so it is where the data most
  likely is; this is an unclean election, ISR of itself); then, only with
  unclean.leader.election.enable, any usable replica. Unclean elections clear the ELR;
- ``last_known_elr`` records the leader a partition had when its ISR became empty, and is
  cleared once the partition has a leader again.

A min.insync.replicas change clears the ELR of the partitions it governs (Kafka's
ClearElrRecord; here one PartitionChange per partition that holds any), since replicas kept
under the old rule need not hold what the new one commits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping

from kio.schema.errors import ErrorCode

from metadata.config_defs import CLUSTER_DEFAULT, dynamic_value
from metadata.controller.context import ApiError, ControllerContext
from metadata.image import MetadataImage, PartitionRegistration, TopicImage
from metadata.records import (
    BROKER_RESOURCE,
    ELR_FEATURE,
    NO_LEADER,
    TOPIC_RESOURCE,
    PartitionChange,
)

MIN_INSYNC_REPLICAS = "min.insync.replicas"


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """A partition's leader, ISR, ELR and last known ELR after a change."""

    leader: int
    isr: tuple[int, ...]
    elr: tuple[int, ...]
    last_known_elr: tuple[int, ...]
    unclean: bool = False  # the leader comes from outside the ISR and the ELR


def enabled(image: MetadataImage) -> bool:
    """Whether the cluster's ``eligible.leader.replicas.version`` feature is on."""
    return image.features.get(ELR_FEATURE, 0) >= 1


def min_isr(ctx: ControllerContext, topic: TopicImage, partition: PartitionRegistration) -> int:
    """Kafka's getTopicEffectiveMinIsr: the topic's min.insync.replicas (its own, the
    cluster default, or the static one) capped at the replication factor."""
    value = dynamic_value(ctx.image.configs, MIN_INSYNC_REPLICAS, topic=topic.name)
    configured = ctx.config.min_insync_replicas if value is None else int(value)
    return min(configured, len(partition.replicas))


def elr_after(
    partition: PartitionRegistration,
    isr: tuple[int, ...],
    min_isr: int,
    unclean_shutdown: int = NO_LEADER,
) -> tuple[int, ...]:
    """The ELR once the ISR is ``isr`` (in replica order, so records are deterministic)."""
    if len(isr) >= min_isr:
        return ()
    candidates = set(partition.elr) | set(partition.isr)
    return tuple(
        r for r in partition.replicas if r in candidates and r not in isr and r != unclean_shutdown
    )


def next_state(
    partition: PartitionRegistration,
    isr: tuple[int, ...],
    usable: Callable[[int], bool],
    *,
    min_isr: int,
    unclean: bool,
    unclean_shutdown: int = NO_LEADER,
) -> Target:
    """The state of ``partition`` whose ISR is to be ``isr``, electing a leader if its
    current one may not stay (Kafka's PartitionChangeBuilder.build, ONLINE or UNCLEAN
    election)."""
    elr = elr_after(partition, isr, min_isr, unclean_shutdown)

    def valid(replica: int) -> bool:
        return (replica in isr or (not isr and replica in elr)) and usable(replica)

    leader, elected_unclean = partition.leader, False
    if not valid(leader):
        leader = next((r for r in partition.replicas if valid(r)), NO_LEADER)
    last_known = partition.last_known_elr
    recoverable = not isr and not elr and len(last_known) == 1 and usable(last_known[0])
    if leader == NO_LEADER and recoverable:
        leader, elected_unclean = last_known[0], True
    if leader == NO_LEADER and unclean:
        leader = next((r for r in partition.replicas if usable(r)), NO_LEADER)
        elected_unclean = leader != NO_LEADER
    if leader != partition.leader and leader != NO_LEADER:
        if elected_unclean:
            isr, elr = (leader,), ()
        elif leader in elr:
            isr, elr = (leader,), tuple(r for r in elr if r != leader)
    if not isr and partition.isr and partition.leader != NO_LEADER:
        last_known = (partition.leader,)  # the partition just lost its last ISR member
    elif leader != NO_LEADER:
        last_known = ()
    return Target(leader, isr, elr, last_known, elected_unclean)


def config_change_records(
    ctx: ControllerContext,
    resource_type: int,
    resource_name: str,
    changes: Mapping[str, str | None],
) -> list[PartitionChange]:
    """The ELR clearing a min.insync.replicas change brings (nothing while ELR is off).
    With ELR on, brokers must agree on every partition's min ISR, so a per-broker override
    is refused with INVALID_CONFIG, as in Kafka 4.x."""
    if MIN_INSYNC_REPLICAS not in changes or not enabled(ctx.image):
        return []
    if resource_type == BROKER_RESOURCE and resource_name != CLUSTER_DEFAULT:
        raise ApiError(
            ErrorCode.invalid_config,
            f"Broker-level {MIN_INSYNC_REPLICAS} cannot be set while "
            f"{ELR_FEATURE} is enabled; set the cluster default or the topic's.",
        )
    topics = ctx.image.topics
    if resource_type == TOPIC_RESOURCE:
        topic = topics.get(resource_name)
        chosen = [] if topic is None else [topic]
    else:
        chosen = [topics.by_id[topics.by_name[name]] for name in sorted(topics.by_name)]
    return [
        PartitionChange(topic.topic_id, index, eligible_leader_replicas=(), last_known_elr=())
        for topic, index, partition in _partitions(chosen)
        if partition.elr or partition.last_known_elr
    ]


def _partitions(
    topics: list[TopicImage],
) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    for topic in topics:
        for index in sorted(topic.partitions):
            yield topic, index, topic.partitions[index]
