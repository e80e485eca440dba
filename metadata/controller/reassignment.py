"""AlterPartitionReassignments (key 45) and ListPartitionReassignments (key 46): KIP-455.

A reassignment moves a partition from its replicas R to a target T in three steps, as Kafka's
KRaft controller does (ReplicationControlManager, PartitionChangeBuilder):

1. One PartitionChange sets replicas = T + (R - T) (target first, so the preferred leader is
   T's first), adding = T - R and removing = R - T. Nothing leaves the ISR or leadership here.
2. The leader tracks the adding replicas as followers; each joins the ISR once caught up to the
   high watermark, through AlterPartition (the ordinary ISR expansion).
3. When the ISR minus the removing replicas holds every replica of T, a second PartitionChange
   (proposed with the AlterPartition that made it so) sets replicas = T, ISR = ISR - removing,
   clears adding and removing, and elects a new leader if the old one was removed. Removing a
   replica also bumps the leader epoch, so the removed replica's fetches are fenced.

Why no committed write is lost: completion needs every target replica in the ISR, and an ISR
member holds every write up to the high watermark, so the target ISR alone holds all committed
data; until then the ISR (and the acks=all / min.insync.replicas check) is the old set plus
whatever caught up. Cancelling (a null target) reverts to R - adding, the ISR minus the adding
replicas; if that ISR would be empty the revert is an unclean election and allowed only where
unclean.leader.election.enable is.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller import elr
from metadata.controller.context import (
    MAX_RECORDS_PER_USER_OP,
    ApiError,
    ControllerContext,
    ControllerResult,
    EntityRun,
)
from metadata.controller.election import LEADER_OUTSIDE_ISR, choose_leader
from metadata.controller.topics import TOO_MANY_RECORDS, validate_replica_list
from metadata.image import PartitionRegistration, TopicImage
from metadata.records import NO_LEADER, MetadataRecord, PartitionChange
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import SLICE_ENTITIES


def error_response(request: Any, code: ErrorCode, message: str | None) -> Any:
    """The response failing all of ``request`` (either API, its version) with ``code``: at
    the top level and for every partition it names, as Kafka's getErrorResponse spells it."""
    api_key = int(request.__api_key__)
    module: Any = response_module(api_key, int(request.__version__))
    error = {"error_code": code, "error_message": message}
    if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
        responses = tuple(
            make(
                module.ReassignableTopicResponse,
                {
                    "name": t.name,
                    "partitions": tuple(
                        make(
                            module.ReassignablePartitionResponse,
                            error | {"partition_index": p.partition_index},
                        )
                        for p in t.partitions
                    ),
                },
            )
            for t in request.topics
        )
        return make(module.AlterPartitionReassignmentsResponse, error | {"responses": responses})
    assert api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS, api_key
    topics = tuple(
        make(
            module.OngoingTopicReassignment,
            {
                "name": t.name,
                "partitions": tuple(
                    make(module.OngoingPartitionReassignment, {"partition_index": index})
                    for index in t.partition_indexes
                ),
            },
        )
        for t in request.topics or ()
    )
    return make(module.ListPartitionReassignmentsResponse, error | {"topics": topics})


def reassigning(partition: PartitionRegistration) -> bool:
    """Whether a reassignment of ``partition`` is in progress."""
    return bool(partition.adding_replicas or partition.removing_replicas)


# ---- AlterPartitionReassignments ---------------------------------------------------------------


def alter_partition_reassignments(
    ctx: ControllerContext, request: Any, api_version: int
) -> ControllerResult:
    """Start, change or cancel (null replicas) the reassignment of each named partition.
    A partition named twice is changed from the state its first change left. (In one pass:
    the controller runs a ReassignmentsRun a slice of partitions at a time.)"""
    run = ReassignmentsRun.start(request, api_version)
    records: list[MetadataRecord] = []
    for items in run.slices():
        records.extend(run.step(ctx, items))
    return ControllerResult(tuple(records), run.response())


_TopicEnd = None  # the work item closing a topic: its answer is made


@dataclasses.dataclass(slots=True)
class ReassignmentsRun:
    """One AlterPartitionReassignments worked on SLICE_ENTITIES partitions a turn (issue
    22), each slice against the working image of then, its records proposed before the
    next (Kafka's controller writes them as one non-atomic result too). The partition
    changes made so far and the MAX_RECORDS_PER_USER_OP budget span the request; a topic's
    answer is made once its last partition is worked on."""

    request: Any
    module: Any
    allow_rf_change: bool
    changed: dict[tuple[str, int], PartitionRegistration] = dataclasses.field(default_factory=dict)
    records_total: int = 0
    partitions: list[object] = dataclasses.field(default_factory=list)
    responses: list[object] = dataclasses.field(default_factory=list)

    @classmethod
    def start(cls, request: Any, api_version: int) -> ReassignmentsRun:
        module = response_module(ApiKey.ALTER_PARTITION_REASSIGNMENTS, api_version)
        allow_rf_change = getattr(request, "allow_replication_factor_change", True)
        return cls(request, module, allow_rf_change)

    def slices(self) -> Iterator[Sequence[tuple[Any, Any]]]:
        batch: list[tuple[Any, Any]] = []
        for topic_request in self.request.topics:
            for target in (*topic_request.partitions, _TopicEnd):
                batch.append((topic_request, target))
                if len(batch) >= SLICE_ENTITIES:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def step(
        self, ctx: ControllerContext, items: Sequence[tuple[Any, Any]]
    ) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for topic_request, target in items:
            if target is _TopicEnd:
                self.responses.append(
                    make(
                        self.module.ReassignableTopicResponse,
                        {"name": topic_request.name, "partitions": tuple(self.partitions)},
                    )
                )
                self.partitions = []
                continue
            values: dict[str, object] = {
                "partition_index": target.partition_index,
                "error_code": ErrorCode.none,
                "error_message": None,
            }
            key = (topic_request.name, target.partition_index)
            try:
                if self.records_total >= MAX_RECORDS_PER_USER_OP:
                    # One record per partition: a bound on the controller's work per request.
                    raise ApiError(ErrorCode.policy_violation, TOO_MANY_RECORDS)
                topic, current = _find(ctx, *key)
                current = self.changed.get(key, current)
                if target.replicas is None:
                    change, state = _cancel(ctx, topic, target.partition_index, current)
                else:
                    _validate_target(ctx, current, target.replicas, self.allow_rf_change)
                    change, state = _start(
                        ctx, topic, target.partition_index, current, tuple(target.replicas)
                    )
            except ApiError as error:
                values |= {"error_code": error.code, "error_message": error.message}
            else:
                if change is not None:
                    records.append(change)
                    self.records_total += 1
                    self.changed[key] = state
            self.partitions.append(make(self.module.ReassignablePartitionResponse, values))
        return records

    def response(self) -> object:
        return make(
            self.module.AlterPartitionReassignmentsResponse,
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "allow_replication_factor_change": self.allow_rf_change,
                "responses": tuple(self.responses),
            },
        )


def _find(
    ctx: ControllerContext, topic_name: str, partition_id: int
) -> tuple[TopicImage, PartitionRegistration]:
    topic = ctx.image.topics.get(topic_name)
    if topic is None:
        raise ApiError(
            ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic_name}."
        )
    partition = topic.partitions.get(partition_id)
    if partition is None:
        raise ApiError(
            ErrorCode.unknown_topic_or_partition,
            f"Unable to find partition {topic_name}:{partition_id}.",
        )
    return topic, partition


def _validate_target(
    ctx: ControllerContext,
    current: PartitionRegistration,
    replicas: tuple[int, ...],
    allow_rf_change: bool,
) -> None:
    """Kafka's validateManualPartitionAssignment, plus KIP-860's replication factor check."""
    validate_replica_list(ctx, replicas)
    replication_factor = len(current.replicas) - len(current.removing_replicas)
    if not allow_rf_change and len(replicas) != replication_factor:
        raise ApiError(
            ErrorCode.invalid_replication_factor,
            f"The replication factor is changed from {replication_factor} to {len(replicas)}",
        )


def _start(
    ctx: ControllerContext,
    topic: TopicImage,
    partition_id: int,
    current: PartitionRegistration,
    wanted: tuple[int, ...],
) -> tuple[PartitionChange | None, PartitionRegistration]:
    """Step 1 (and step 3 at once when the ISR already allows it)."""
    removing = tuple(sorted(set(current.replicas) - set(wanted)))
    adding = tuple(sorted(set(wanted) - set(current.replicas)))
    return build_change(
        ctx, topic, partition_id, current, wanted + removing, current.isr, adding, removing
    )


def _cancel(
    ctx: ControllerContext, topic: TopicImage, partition_id: int, current: PartitionRegistration
) -> tuple[PartitionChange | None, PartitionRegistration]:
    """Back to the replicas before the reassignment (Kafka's PartitionReassignmentRevert)."""
    if not reassigning(current):
        raise ApiError(
            ErrorCode.no_reassignment_in_progress,
            "No partition reassignment is in progress for this topic-partition.",
        )
    adding = set(current.adding_replicas)
    replicas = tuple(r for r in current.replicas if r not in adding)
    isr = tuple(r for r in current.isr if r not in adding)
    unclean = ctx.unclean_enabled(topic.name)
    if not isr:
        if not unclean:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"Unable to revert partition assignment for {topic.name}:{partition_id} "
                "because it would require an unclean leader election.",
            )
        isr = replicas[:1]
    return build_change(ctx, topic, partition_id, current, replicas, isr, (), (), unclean=unclean)


# ---- the change builder ------------------------------------------------------------------------


def build_change(
    ctx: ControllerContext,
    topic: TopicImage,
    partition_id: int,
    current: PartitionRegistration,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    adding: tuple[int, ...],
    removing: tuple[int, ...],
    *,
    unclean: bool = False,
) -> tuple[PartitionChange | None, PartitionRegistration]:
    """The record taking ``current`` to the target (replicas, ISR, adding, removing), the
    reassignment completed if that target's ISR allows (step 3), and a leader elected if the
    current one may no longer lead; (None, current) when nothing changes."""
    if adding or removing:
        kept_isr = tuple(r for r in isr if r not in removing)
        kept_replicas = tuple(r for r in replicas if r not in removing)
        if kept_isr and kept_replicas and set(kept_replicas) <= set(kept_isr):
            replicas, isr, adding, removing = kept_replicas, kept_isr, (), ()
    leader = current.leader
    if leader not in isr or not ctx.may_lead(current, leader):
        leader, isr = choose_leader(
            dataclasses.replace(current, replicas=replicas),
            isr,
            functools.partial(ctx.may_lead, current),
            unclean=unclean,
            ignore_isr=LEADER_OUTSIDE_ISR in ctx.bugs,
        )
    eligible, last_known = current.elr, current.last_known_elr
    if elr.enabled(ctx.image):
        # KIP-966 as an AlterPartition outside a reassignment keeps them: an ELR never
        # overlaps the ISR (replay refuses that) nor names a replica no longer in the set.
        moved = dataclasses.replace(current, replicas=replicas)
        eligible = elr.elr_after(moved, isr, elr.min_isr(ctx, topic, moved))
        if leader != NO_LEADER:
            last_known = ()
    # From ``current``, so fields this change does not touch carry over as replay keeps them.
    state = dataclasses.replace(
        current,
        replicas=replicas,
        isr=isr,
        leader=leader,
        removing_replicas=removing,
        adding_replicas=adding,
        elr=eligible,
        last_known_elr=last_known,
    )
    if state == current:
        return None, current
    state = dataclasses.replace(state, partition_epoch=current.partition_epoch + 1)
    # A replica dropped from the set must stop acting on the old epoch: bump it even when the
    # leader stays (Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded).
    dropped = not set(current.replicas) <= set(replicas)
    new_epoch = leader != current.leader or dropped
    if new_epoch:
        state = dataclasses.replace(state, leader_epoch=current.leader_epoch + 1)
    change = PartitionChange(
        topic.topic_id,
        partition_id,
        isr=None if isr == current.isr else isr,
        leader=None if leader == current.leader else leader,
        replicas=None if replicas == current.replicas else replicas,
        removing_replicas=None if removing == current.removing_replicas else removing,
        adding_replicas=None if adding == current.adding_replicas else adding,
        eligible_leader_replicas=None if eligible == current.elr else eligible,
        last_known_elr=None if last_known == current.last_known_elr else last_known,
        bump_leader_epoch=dropped and leader == current.leader,
    )
    return change, state


def isr_change(
    ctx: ControllerContext,
    topic: TopicImage,
    partition_id: int,
    current: PartitionRegistration,
    isr: tuple[int, ...],
) -> tuple[PartitionChange | None, PartitionRegistration]:
    """An ISR change a leader asked for by AlterPartition, completing the partition's
    reassignment (step 3) when the new ISR holds every target replica."""
    return build_change(
        ctx,
        topic,
        partition_id,
        current,
        current.replicas,
        isr,
        current.adding_replicas,
        current.removing_replicas,
    )


# ---- ListPartitionReassignments ----------------------------------------------------------------


def list_partition_reassignments(
    ctx: ControllerContext, request: Any, api_version: int
) -> ControllerResult:
    """The reassignments in progress: of every topic (null topics), or of the named
    partitions (unknown topics and partitions, or ones not reassigning, are left out). (In
    one pass: the controller runs ``list_reassignments_run`` a slice of topics a turn.)"""
    return list_reassignments_run(ctx, request, api_version).whole(ctx)


def list_reassignments_run(ctx: ControllerContext, request: Any, api_version: int) -> EntityRun:
    """ListPartitionReassignments a slice of topics a turn, a topic weighing the
    partitions it names (issue 22); ``ctx``: the image whose topics a null list means."""
    module = response_module(ApiKey.LIST_PARTITION_REASSIGNMENTS, api_version)
    if request.topics is None:
        wanted: Sequence[tuple[str, Any]] = [
            (name, None) for name in sorted(ctx.image.topics.by_name)
        ]
    else:
        wanted = request.topics

    def one(ctx: ControllerContext, item: Any) -> tuple[list[MetadataRecord], object]:
        name, indexes = item if isinstance(item, tuple) else (item.name, item.partition_indexes)
        topic = ctx.image.topics.get(name)
        if topic is None:
            return [], None
        ongoing = []
        for index in sorted(topic.partitions) if indexes is None else indexes:
            partition = topic.partitions.get(index)
            if partition is None or not reassigning(partition):
                continue
            ongoing.append(
                make(
                    module.OngoingPartitionReassignment,
                    {
                        "partition_index": index,
                        "replicas": partition.replicas,
                        "adding_replicas": partition.adding_replicas,
                        "removing_replicas": partition.removing_replicas,
                    },
                )
            )
        if not ongoing:
            return [], None
        return [], make(
            module.OngoingTopicReassignment, {"name": name, "partitions": tuple(ongoing)}
        )

    def finish(results: tuple[object, ...]) -> object:
        return make(
            module.ListPartitionReassignmentsResponse,
            {"error_code": ErrorCode.none, "error_message": None, "topics": results},
        )

    def weight(item: Any) -> int:
        return 1 if isinstance(item, tuple) else 1 + len(item.partition_indexes)

    return EntityRun(wanted, one, finish, weight=weight)
