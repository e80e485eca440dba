"""ElectLeaders (key 43) and AlterPartition (key 56): leadership and ISR changes on request.

AlterPartition is how a partition leader shrinks or grows its ISR. The controller accepts it
only from the current leader, at the current leader epoch and partition epoch, so a change
computed from a stale view is refused instead of overwriting a newer one (Kafka's checks and
error codes, KIP-497 and KIP-903).
"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller import elr
from metadata.controller.context import ApiError, ControllerContext, ControllerResult
from metadata.controller.election import (
    LEADER_OUTSIDE_ISR,
    elect,
    partition_change,
    partitions,
)
from metadata.controller.reassignment import isr_change, reassigning
from metadata.image import PartitionRegistration, TopicImage
from metadata.records import NO_LEADER, MetadataRecord, PartitionChange
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import SLICE_ENTITIES

PREFERRED = 0
UNCLEAN = 1


# ---- ElectLeaders ------------------------------------------------------------------------------


def elect_leaders(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """Elect preferred (v0+) or unclean (v1+) leaders for the named partitions, or for all
    partitions when none are named (then partitions that need nothing are not listed). (In
    one pass: the controller runs an ElectLeadersRun a slice at a time.)"""
    run = ElectLeadersRun.start(ctx, request, api_version)
    records: list[MetadataRecord] = []
    for items in run.slices():
        records.extend(run.step(ctx, items))
    return ControllerResult(tuple(records), run.response())


@dataclass(slots=True)
class ElectLeadersRun:
    """One ElectLeaders worked on SLICE_ENTITIES partitions a turn (issue 22), each slice
    against the working image of then and its records proposed before the next (Kafka's
    controller writes them as a non-atomic result too); then its answer, grouped by topic
    as a single pass groups it, made SLICE_ENTITIES partitions a turn. A partition named
    twice is elected once, whichever slice names it again."""

    request: Any
    module: Any
    election_type: int
    targets: list[tuple[str, int]]
    outcomes: dict[str, dict[int, tuple[ErrorCode, str | None]]] = field(default_factory=dict)
    partitions: list[object] = field(default_factory=list)  # of the topic being answered
    results: list[object] = field(default_factory=list)

    @classmethod
    def start(cls, ctx: ControllerContext, request: Any, api_version: int) -> ElectLeadersRun:
        module = response_module(ApiKey.ELECT_LEADERS, api_version)
        election_type = getattr(request, "election_type", PREFERRED)
        targets: list[tuple[str, int]] = []
        if election_type not in (PREFERRED, UNCLEAN):
            pass  # answered INVALID_REQUEST, nothing elected
        elif request.topic_partitions is None:
            targets = [(t.name, p) for t, p, _ in partitions(ctx.image)]
        else:
            targets = [(t.topic, p) for t in request.topic_partitions for p in t.partitions]
        return cls(request, module, election_type, targets)

    def slices(self) -> Iterator[Sequence[Any]]:
        for begin in range(0, len(self.targets), SLICE_ENTITIES):
            yield [("elect", target) for target in self.targets[begin : begin + SLICE_ENTITIES]]
        batch: list[tuple[str, Any]] = []  # the answer: each partition's, then its topic's
        for topic_name, by_partition in self.outcomes.items():
            answer = (("partition", outcome) for outcome in by_partition.items())
            for item in itertools.chain(answer, [("topic", topic_name)]):
                batch.append(item)
                if len(batch) >= SLICE_ENTITIES:
                    yield batch
                    batch = []
        if batch:
            yield batch

    def step(self, ctx: ControllerContext, items: Sequence[Any]) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for kind, item in items:
            if kind == "partition":
                partition_id, (code, message) = item
                self.partitions.append(
                    make(
                        self.module.PartitionResult,
                        {
                            "partition_id": partition_id,
                            "error_code": code,
                            "error_message": message,
                        },
                    )
                )
                continue
            if kind == "topic":
                self.results.append(
                    make(
                        self.module.ReplicaElectionResult,
                        {"topic": item, "partition_result": tuple(self.partitions)},
                    )
                )
                self.partitions = []
                continue
            topic_name, partition_id = item
            if partition_id in self.outcomes.get(topic_name, {}):
                continue  # named twice: elect once
            try:
                records.append(_elect(ctx, topic_name, partition_id, self.election_type))
                outcome: tuple[ErrorCode, str | None] = (ErrorCode.none, None)
            except ApiError as error:
                outcome = (error.code, error.message)
                if (
                    self.request.topic_partitions is None
                    and error.code == ErrorCode.election_not_needed
                ):
                    continue
            self.outcomes.setdefault(topic_name, {})[partition_id] = outcome
        return records

    def response(self) -> object:
        if self.election_type not in (PREFERRED, UNCLEAN):
            return make(
                self.module.ElectLeadersResponse,
                {"error_code": ErrorCode.invalid_request, "replica_election_results": ()},
            )
        return make(
            self.module.ElectLeadersResponse,
            {"error_code": ErrorCode.none, "replica_election_results": tuple(self.results)},
        )


def _elect(
    ctx: ControllerContext, topic_name: str, partition_id: int, election_type: int
) -> PartitionChange:
    topic = ctx.image.topics.get(topic_name)
    partition = None if topic is None else topic.partitions.get(partition_id)
    if topic is None or partition is None:
        raise ApiError(ErrorCode.unknown_topic_or_partition)
    ignore_isr = LEADER_OUTSIDE_ISR in ctx.bugs
    if election_type == PREFERRED:
        preferred = partition.replicas[0]
        if partition.leader == preferred:
            raise ApiError(ErrorCode.election_not_needed)
        if not ctx.may_lead(partition, preferred) or (
            preferred not in partition.isr and not ignore_isr
        ):
            raise ApiError(ErrorCode.preferred_leader_not_available)
        leader, isr = preferred, partition.isr if preferred in partition.isr else (preferred,)
    else:
        if partition.leader != NO_LEADER:
            raise ApiError(ErrorCode.election_not_needed)
        elected = elect(
            ctx, topic, partition_id, partition, partition.isr, ctx.is_usable, unclean=True
        )
        if elected is None or elected.leader in (None, NO_LEADER):
            raise ApiError(ErrorCode.eligible_leaders_not_available)
        return elected
    change = partition_change(topic, partition_id, partition, leader, isr)
    assert change is not None, "a new leader is a change"
    return change


# ---- AlterPartition ----------------------------------------------------------------------------


def alter_partition(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """Apply ISR changes proposed by partition leaders; answer each partition's new state."""
    module = response_module(ApiKey.ALTER_PARTITION, api_version)
    sender = ctx.image.cluster.brokers.get(request.broker_id)
    if sender is None or sender.epoch != request.broker_epoch:
        response = make(
            module.AlterPartitionResponse,
            {"error_code": ErrorCode.stale_broker_epoch, "topics": ()},
        )
        return ControllerResult((), response)
    records: list[MetadataRecord] = []
    topics = []
    seen: set[tuple[uuid.UUID | None, int]] = set()
    for topic_data in request.topics:
        topic = ctx.image.topics.by_id.get(topic_data.topic_id)
        results = []
        for data in topic_data.partitions:
            values: dict[str, object] = {"partition_index": data.partition_index}
            key = (topic_data.topic_id, data.partition_index)
            try:
                if key in seen:
                    raise ApiError(ErrorCode.invalid_request)  # one change per partition
                seen.add(key)
                change, state = _alter_one(ctx, request.broker_id, topic, data)
            except ApiError as error:
                values["error_code"] = error.code
                state = None
            else:
                if change is not None:
                    records.append(change)
            if state is not None and state.leader != request.broker_id:
                # The change completed a reassignment that moved leadership away: the record
                # stands and the sender learns it no longer leads (Kafka answers so).
                values["error_code"] = ErrorCode.new_leader_elected
            elif state is not None:
                values |= {
                    "error_code": ErrorCode.none,
                    "leader_id": state.leader,
                    "leader_epoch": state.leader_epoch,
                    "isr": state.isr,
                    "partition_epoch": state.partition_epoch,
                }
            results.append(make(module.PartitionData, values))
        topics.append(
            make(module.TopicData, {"topic_id": topic_data.topic_id, "partitions": tuple(results)})
        )
    response = make(
        module.AlterPartitionResponse, {"error_code": ErrorCode.none, "topics": tuple(topics)}
    )
    return ControllerResult(tuple(records), response)


def _alter_one(
    ctx: ControllerContext, sender: int, topic: TopicImage | None, data: Any
) -> tuple[PartitionChange | None, PartitionRegistration]:
    """(the change, the partition's state after it) for one partition; ApiError if refused."""
    if topic is None:
        raise ApiError(ErrorCode.unknown_topic_id)
    partition = topic.partitions.get(data.partition_index)
    if partition is None:
        raise ApiError(ErrorCode.unknown_topic_or_partition)
    if data.leader_epoch < partition.leader_epoch:
        raise ApiError(ErrorCode.fenced_leader_epoch)
    if data.leader_epoch > partition.leader_epoch:
        raise ApiError(ErrorCode.not_controller)  # the leader knows a newer state than we do
    if sender != partition.leader:
        raise ApiError(ErrorCode.invalid_request)
    if data.partition_epoch != partition.partition_epoch:
        raise ApiError(ErrorCode.invalid_update_version)
    if hasattr(data, "new_isr_with_epochs"):
        members = [(m.broker_id, m.broker_epoch) for m in data.new_isr_with_epochs]
    else:
        members = [(broker_id, -1) for broker_id in data.new_isr]
    isr = tuple(broker_id for broker_id, _ in members)
    if (
        len(set(isr)) != len(isr)
        or not set(isr) <= set(partition.replicas)
        or partition.leader not in isr
    ):
        raise ApiError(ErrorCode.invalid_request)
    for broker_id, broker_epoch in members:
        broker = ctx.image.cluster.brokers.get(broker_id)
        stale = broker is not None and broker_epoch not in (-1, broker.epoch)
        if not ctx.is_usable(broker_id) or stale:
            raise ApiError(ErrorCode.ineligible_replica)
    if reassigning(partition):
        return isr_change(ctx, topic, data.partition_index, partition, isr)
    eligible = last_known_elr = None
    if elr.enabled(ctx.image):  # KIP-966: members leaving an ISR below min ISR stay eligible
        eligible = elr.elr_after(partition, isr, elr.min_isr(ctx, topic, partition))
        last_known_elr = ()
    change = partition_change(
        topic,
        data.partition_index,
        partition,
        partition.leader,
        isr,
        eligible=eligible,
        last_known_elr=last_known_elr,
    )
    if change is None:
        return None, partition
    return change, dataclasses.replace(
        partition, isr=isr, partition_epoch=partition.partition_epoch + 1
    )
