"""Leader election and ISR maintenance: the partition changes when brokers come and go.

A leader is the first replica, in replica order, that is in the ISR and usable (unfenced, not
in controlled shutdown). Only if none is, and unclean election is enabled for the topic, may
any usable replica lead, and the ISR restarts as just that replica (it may lack committed
data: that is what "unclean" means). A broker that leaves is removed from every ISR but never
the last member (Kafka without ELR): a partition whose leader was its last ISR member goes
offline (NO_LEADER) and keeps it in the ISR, so it comes back when that broker does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from metadata.controller.context import ControllerContext
from metadata.image import MetadataImage, PartitionRegistration, TopicImage
from metadata.records import NO_LEADER, PartitionChange

LEADER_OUTSIDE_ISR = "leader-outside-isr"


def choose_leader(
    partition: PartitionRegistration,
    isr: tuple[int, ...],
    usable: Callable[[int], bool],
    *,
    unclean: bool,
    ignore_isr: bool = False,
) -> tuple[int, tuple[int, ...]]:
    """(leader, ISR) for ``partition`` whose ISR is to be ``isr``: the first usable ISR member
    in replica order; else, if ``unclean``, the first usable replica with an ISR of itself;
    else NO_LEADER and ``isr`` unchanged. ``ignore_isr`` is the planted bug: the first usable
    replica leads whether or not it is in the ISR."""
    if ignore_isr:
        for replica in partition.replicas:
            if usable(replica):
                return replica, isr if replica in isr else (replica,)
    for replica in partition.replicas:
        if replica in isr and usable(replica):
            return replica, isr
    if unclean:
        for replica in partition.replicas:
            if usable(replica):
                return replica, (replica,)
    return NO_LEADER, isr


def partition_change(
    topic: TopicImage,
    partition_id: int,
    current: PartitionRegistration,
    leader: int,
    isr: tuple[int, ...],
) -> PartitionChange | None:
    """The record moving ``current`` to (leader, isr); None when that changes nothing."""
    if leader == current.leader and isr == current.isr:
        return None
    return PartitionChange(
        topic.topic_id,
        partition_id,
        isr=None if isr == current.isr else isr,
        leader=None if leader == current.leader else leader,
    )


def partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    """Every partition, in topic-name then partition order (records come out the same on
    every run, whatever order the image's dicts were built in)."""
    topics = image.topics
    for name in sorted(topics.by_name):
        topic = topics.by_id[topics.by_name[name]]
        for partition_id in sorted(topic.partitions):
            yield topic, partition_id, topic.partitions[partition_id]


def broker_leaving(ctx: ControllerContext, broker_id: int) -> list[PartitionChange]:
    """Changes that take ``broker_id`` out of every ISR (bar last members) and move its
    leaderships elsewhere; ``ctx.image`` may still show the broker as usable."""

    def usable(replica: int) -> bool:
        return replica != broker_id and ctx.is_usable(replica)

    changes = []
    for topic, partition_id, partition in partitions(ctx.image):
        if broker_id not in partition.isr and partition.leader != broker_id:
            continue
        isr = tuple(r for r in partition.isr if r != broker_id) or partition.isr
        leader = partition.leader
        if leader in (broker_id, NO_LEADER):
            leader, isr = choose_leader(
                partition,
                isr,
                usable,
                unclean=ctx.unclean_enabled(topic.name),
                ignore_isr=LEADER_OUTSIDE_ISR in ctx.bugs,
            )
        change = partition_change(topic, partition_id, partition, leader, isr)
        if change is not None:
            changes.append(change)
    return changes


def broker_returning(ctx: ControllerContext, broker_id: int) -> list[PartitionChange]:
    """Leaders for offline partitions now that ``broker_id`` is usable again (``ctx.image``
    may still show it fenced)."""

    def usable(replica: int) -> bool:
        return replica == broker_id or ctx.is_usable(replica)

    changes = []
    for topic, partition_id, partition in partitions(ctx.image):
        if partition.leader != NO_LEADER or broker_id not in partition.replicas:
            continue
        leader, isr = choose_leader(
            partition,
            partition.isr,
            usable,
            unclean=ctx.unclean_enabled(topic.name),
            ignore_isr=LEADER_OUTSIDE_ISR in ctx.bugs,
        )
        change = partition_change(topic, partition_id, partition, leader, isr)
        if change is not None:
            changes.append(change)
    return changes


def preferred_leader_changes(ctx: ControllerContext, limit: int) -> list[PartitionChange]:
    """Up to ``limit`` changes giving partitions back to their preferred leader (the first
    replica) where it is usable and in the ISR, and leads elsewhere (Kafka's
    auto.leader.rebalance.enable, as KRaft's maybeBalancePartitionLeaders does it: every
    imbalanced partition, no per-broker percentage)."""
    changes = []
    for topic, partition_id, partition in partitions(ctx.image):
        preferred = partition.replicas[0]
        if (
            partition.leader == preferred
            or preferred not in partition.isr
            or not ctx.is_usable(preferred)
        ):
            continue
        change = partition_change(topic, partition_id, partition, preferred, partition.isr)
        if change is not None:
            changes.append(change)
            if len(changes) >= limit:
                break
    return changes


def leads_anything(image: MetadataImage, broker_id: int) -> bool:
    return any(p.leader == broker_id for _, _, p in partitions(image))
