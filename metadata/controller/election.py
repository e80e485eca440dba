"""Leader election and ISR maintenance: the partition changes when brokers come and go.

A leader is the first replica, in replica order, that is in the ISR and usable (unfenced, not
in controlled shutdown). Only if none is, and unclean election is enabled for the topic, may
any usable replica lead, and the ISR restarts as just that replica (it may lack committed
data: that is what "unclean" means). A broker that leaves is removed from every ISR but never
the last member (Kafka without ELR): a partition whose leader was its last ISR member goes
offline (NO_LEADER) and keeps it in the ISR, so it comes back when that broker does. With
``eligible.leader.replicas.version`` on, metadata/controller/elr.py decides instead (KIP-966:
the ISR may empty, and replicas below min ISR are kept as eligible leaders).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

from metadata.controller import elr
from metadata.controller.context import ControllerContext
from metadata.directories import directory_of
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
    *,
    eligible: tuple[int, ...] | None = None,
    last_known_elr: tuple[int, ...] | None = None,
) -> PartitionChange | None:
    """The record moving ``current`` to (leader, isr) and, when given, to that ELR and last
    known ELR; None when that changes nothing."""
    eligible = current.elr if eligible is None else eligible
    last_known_elr = current.last_known_elr if last_known_elr is None else last_known_elr
    if (leader, isr, eligible, last_known_elr) == (
        current.leader,
        current.isr,
        current.elr,
        current.last_known_elr,
    ):
        return None
    return PartitionChange(
        topic.topic_id,
        partition_id,
        isr=None if isr == current.isr else isr,
        leader=None if leader == current.leader else leader,
        eligible_leader_replicas=None if eligible == current.elr else eligible,
        last_known_elr=None if last_known_elr == current.last_known_elr else last_known_elr,
    )


def elect(
    ctx: ControllerContext,
    topic: TopicImage,
    partition_id: int,
    partition: PartitionRegistration,
    isr: tuple[int, ...],
    usable: Callable[[int], bool],
    *,
    unclean: bool,
    unclean_shutdown: int = NO_LEADER,
) -> PartitionChange | None:
    """The change giving ``partition`` the ISR ``isr`` and a leader it may have: by KIP-966's
    rules when the cluster has ELR on, else by ``choose_leader`` (where an ISR never
    empties: the last member stays)."""
    ignore_isr = LEADER_OUTSIDE_ISR in ctx.bugs

    def acceptable(replica: int) -> bool:  # KIP-858: never a replica whose dir has failed
        return usable(replica) and ctx.dir_online(partition, replica)

    if elr.enabled(ctx.image) and not ignore_isr:
        target = elr.next_state(
            partition,
            isr,
            acceptable,
            min_isr=elr.min_isr(ctx, topic, partition),
            unclean=unclean,
            unclean_shutdown=unclean_shutdown,
        )
        return partition_change(
            topic,
            partition_id,
            partition,
            target.leader,
            target.isr,
            eligible=target.elr,
            last_known_elr=target.last_known_elr,
        )
    isr = isr or partition.isr
    leader = partition.leader
    if leader == NO_LEADER or not acceptable(leader):
        leader, isr = choose_leader(
            partition, isr, acceptable, unclean=unclean, ignore_isr=ignore_isr
        )
    return partition_change(
        topic, partition_id, partition, leader, isr, eligible=(), last_known_elr=()
    )


def partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionRegistration]]:
    """Every partition, in topic-name then partition order (records come out the same on
    every run, whatever order the image's dicts were built in)."""
    topics = image.topics
    for name in sorted(topics.by_name):
        topic = topics.by_id[topics.by_name[name]]
        for partition_id in sorted(topic.partitions):
            yield topic, partition_id, topic.partitions[partition_id]


def broker_leaving(
    ctx: ControllerContext, broker_id: int, *, unclean_shutdown: bool = False
) -> list[PartitionChange]:
    """Changes that take ``broker_id`` out of every ISR (bar last members while ELR is off)
    and move its leaderships elsewhere; ``ctx.image`` may still show the broker as usable.
    After an ``unclean_shutdown`` it leaves every ELR too (Kafka's
    handleBrokerUncleanShutdown: its log may lack what it had acknowledged)."""
    return _replicas_leaving(ctx, broker_id, None, unclean_shutdown=unclean_shutdown)


def dirs_failing(
    ctx: ControllerContext, broker_id: int, dirs: frozenset[uuid.UUID]
) -> list[PartitionChange]:
    """KIP-858 (Kafka's handleDirectoriesOffline): ``broker_id``'s replicas in the failed
    log ``dirs`` leave their ISRs and leaderships exactly as a fenced broker's do, while its
    replicas in other dirs stay where they are."""
    return _replicas_leaving(ctx, broker_id, dirs, unclean_shutdown=False)


def _replicas_leaving(
    ctx: ControllerContext,
    broker_id: int,
    dirs: frozenset[uuid.UUID] | None,
    *,
    unclean_shutdown: bool,
) -> list[PartitionChange]:
    """broker_leaving for every replica of ``broker_id`` (``dirs`` None) or only for those
    in ``dirs``."""

    def usable(replica: int) -> bool:
        return replica != broker_id and ctx.is_usable(replica)

    if broker_id not in ctx.image.topics.counts.members:
        return []  # in no ISR or ELR, leading nothing: no walk of every partition
    changes = []
    for topic, partition_id, partition in partitions(ctx.image):
        if dirs is not None and directory_of(partition, broker_id) not in dirs:
            continue
        in_elr = unclean_shutdown and broker_id in partition.elr
        if broker_id not in partition.isr and partition.leader != broker_id and not in_elr:
            continue
        change = elect(
            ctx,
            topic,
            partition_id,
            partition,
            tuple(r for r in partition.isr if r != broker_id),
            usable,
            unclean=ctx.unclean_enabled(topic.name),
            unclean_shutdown=broker_id if unclean_shutdown else NO_LEADER,
        )
        if change is not None:
            changes.append(change)
    return changes


def broker_returning(ctx: ControllerContext, broker_id: int) -> list[PartitionChange]:
    """Leaders for offline partitions now that ``broker_id`` is usable again (``ctx.image``
    may still show it fenced)."""

    def usable(replica: int) -> bool:
        return replica == broker_id or ctx.is_usable(replica)

    if not ctx.image.topics.counts.leaderless:
        return []
    changes = []
    for topic, partition_id, partition in partitions(ctx.image):
        if partition.leader != NO_LEADER or broker_id not in partition.replicas:
            continue
        change = elect(
            ctx,
            topic,
            partition_id,
            partition,
            partition.isr,
            usable,
            unclean=ctx.unclean_enabled(topic.name),
        )
        if change is not None:
            changes.append(change)
    return changes


def preferred_leader_changes(ctx: ControllerContext, limit: int) -> list[PartitionChange]:
    """Up to ``limit`` changes giving partitions back to their preferred leader (the first
    replica) where it is usable and in the ISR, and leads elsewhere (Kafka's
    auto.leader.rebalance.enable, as KRaft's maybeBalancePartitionLeaders does it: every
    imbalanced partition, no per-broker percentage)."""
    if not ctx.image.topics.counts.imbalanced:
        return []
    changes = []
    for topic, partition_id, partition in partitions(ctx.image):
        preferred = partition.replicas[0]
        if (
            partition.leader == preferred
            or preferred not in partition.isr
            or not ctx.may_lead(partition, preferred)
        ):
            continue
        change = partition_change(topic, partition_id, partition, preferred, partition.isr)
        if change is not None:
            changes.append(change)
            if len(changes) >= limit:
                break
    return changes


def leads_anything(image: MetadataImage, broker_id: int) -> bool:
    return broker_id in image.topics.counts.leaders
