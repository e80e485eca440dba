"""CreateTopics, DeleteTopics and CreatePartitions: validation, placement, records.

Validation follows Kafka's ReplicationControlManager in order and in wording: topic name,
existence, configs, then partitions / replication factor / manual assignments. Each topic of a
request succeeds or fails on its own; the records of the topics that succeed are written in
order, in as many batches as their size needs (Kafka's non-atomic create: a reader may see a
big topic with part of its partitions first), at most MAX_RECORDS_PER_USER_OP records per
request (POLICY_VIOLATION beyond), and ``validate_only`` answers as if they had been written
without writing anything.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.config_defs import check_config, topic_config_values
from metadata.controller.context import (
    MAX_RECORDS_PER_USER_OP,
    ApiError,
    ControllerContext,
    ControllerResult,
    EntityRun,
)
from metadata.controller.internal_topics import check_internal_configs, refuse_internal_change
from metadata.controller.placement import PlacementError, place_replicas
from metadata.image import TopicImage, collision_key
from metadata.records import TOPIC_RESOURCE, Config, MetadataRecord, Partition, RemoveTopic, Topic
from metadata.topic_names import CLUSTER_METADATA_TOPIC, INTERNAL_TOPICS, topic_name_error
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module

DUPLICATE_TOPIC = "Duplicate topic name."
TOO_MANY_RECORDS = "Unable to perform excessively large batch operation."
MIN_RECORDS_PER_TOPIC = 2  # a TopicRecord and at least one PartitionRecord


def validate_topic_name(name: str) -> None:
    """ApiError(INVALID_TOPIC_EXCEPTION) unless ``name`` is legal (Kafka's Topic.validate)."""
    problem = topic_name_error(name)
    if problem is not None:
        raise ApiError(ErrorCode.invalid_topic_exception, problem)


def _refuse_reserved(name: str, internal: bool) -> None:
    """Kafka's answers to a client creating a reserved topic: the metadata log's name is
    INVALID_REQUEST (ControllerApis.createTopics); the broker's internal topics are its own
    to create (``internal``: its internal-topics channel, see internal_topics.py), and
    kraft-py grants no client that right (TOPIC_AUTHORIZATION_FAILED)."""
    if name == CLUSTER_METADATA_TOPIC:
        raise ApiError(
            ErrorCode.invalid_request,
            f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.",
        )
    if name in INTERNAL_TOPICS and not internal:
        raise ApiError(ErrorCode.topic_authorization_failed, "Authorization failed.")


# An internal topic's name is taken before the topic exists: a client's "__consumer.offsets"
# created first would collide with it, and the broker could never create its own.
_INTERNAL_COLLISIONS = {collision_key(name): name for name in INTERNAL_TOPICS}


# ---- CreateTopics ------------------------------------------------------------------------------


# Topics of one CreateTopics or DeleteTopics the controller works on between turns of its
# loop (QuorumController.handle): a created topic costs ~0.2 ms of CPU (placement, configs,
# its answer), a refused one ~10 us; a request naming 200,000 topics (3.7 MB) made the
# controller quorum fail over in one 44 s step.
TOPICS_PER_SLICE = 250


@dataclass(slots=True)
class CreateTopicsRun:
    """One CreateTopics worked on TOPICS_PER_SLICE topics at a time, each slice against the
    controller's working image of then (``step``): what spans the request (duplicate names,
    names that collide with an earlier name of the request, the MAX_RECORDS_PER_USER_OP budget)
    is kept here (the image keeps the collision keys of existing topics), so the answer is
    the one a single pass would give, and the records of each slice may be proposed before
    the next is worked on (Kafka's non-atomic create: a reader may see some of a request's
    topics first)."""

    request: Any
    module: Any
    internal: bool
    counts: Counter[str]
    collisions: dict[str, str]  # collision_key -> name, of this request's created topics
    records_total: int = 0
    results: list[object] = field(default_factory=list)

    @classmethod
    def start(
        cls, ctx: ControllerContext, request: Any, api_version: int, internal: bool
    ) -> CreateTopicsRun:
        return cls(
            request,
            response_module(ApiKey.CREATE_TOPICS, api_version),
            internal,
            Counter(map(attrgetter("name"), request.topics)),  # C code: no step per name
            {},
        )

    def slices(self) -> Iterator[Sequence[Any]]:
        topics = self.request.topics
        for begin in range(0, len(topics), TOPICS_PER_SLICE):
            yield topics[begin : begin + TOPICS_PER_SLICE]

    def step(self, ctx: ControllerContext, topics: Sequence[Any]) -> list[MetadataRecord]:
        """The records creating ``topics`` (none with validate_only); their answers kept."""
        records: list[MetadataRecord] = []
        for topic in topics:
            try:
                _refuse_reserved(topic.name, self.internal)
                if self.counts[topic.name] > 1:
                    raise ApiError(ErrorCode.invalid_request, DUPLICATE_TOPIC)
                if self.records_total + MIN_RECORDS_PER_TOPIC > MAX_RECORDS_PER_USER_OP:
                    # Refused before any placement or config work: a request naming 100,000
                    # topics costs the controller a result per name, not a creation attempt.
                    raise ApiError(ErrorCode.policy_violation, TOO_MANY_RECORDS)
                created, values = _create_topic(ctx, topic, self.collisions, self.module)
                if self.records_total + len(created) > MAX_RECORDS_PER_USER_OP:
                    raise ApiError(ErrorCode.policy_violation, TOO_MANY_RECORDS)
            except ApiError as error:
                values = {
                    "name": topic.name,
                    "error_code": error.code,
                    "error_message": error.message,
                }
            else:
                records.extend(created)
                self.records_total += len(created)
                self.collisions[collision_key(topic.name)] = topic.name
            self.results.append(make(self.module.CreatableTopicResult, values))
        return [] if self.request.validate_only else records

    def response(self) -> object:
        return make(self.module.CreateTopicsResponse, {"topics": tuple(self.results)})


def create_topics(
    ctx: ControllerContext, request: Any, api_version: int, *, internal: bool = False
) -> ControllerResult:
    """Create the requested topics (or, with validate_only, check that they could be);
    ``internal``: a broker creating its own internal topics. In one pass: the controller
    itself runs a CreateTopicsRun a slice at a time."""
    run = CreateTopicsRun.start(ctx, request, api_version, internal)
    records = run.step(ctx, request.topics)
    return ControllerResult(tuple(records), run.response())


def _create_topic(
    ctx: ControllerContext, topic: Any, collisions: Mapping[str, str], module: Any
) -> tuple[list[MetadataRecord], dict[str, object]]:
    """(records, result values) for one topic of a CreateTopics request; ApiError if refused."""
    validate_topic_name(topic.name)
    if topic.name in ctx.image.topics.by_name:
        raise ApiError(ErrorCode.topic_already_exists, f"Topic '{topic.name}' already exists.")
    configs = _topic_configs(topic.configs)
    check_internal_configs(topic.name, configs)
    colliding = collisions.get(collision_key(topic.name)) or ctx.image.topics.colliding(topic.name)
    if colliding is not None and topic.name not in INTERNAL_TOPICS:
        # (An internal topic is created even beside a client's colliding topic made before
        # internal names were reserved: its coordinator could not work otherwise.)
        raise ApiError(
            ErrorCode.invalid_topic_exception,
            f"Topic '{topic.name}' collides with existing topic: {colliding}",
        )
    internal = _INTERNAL_COLLISIONS.get(collision_key(topic.name), topic.name)
    if internal != topic.name:
        raise ApiError(
            ErrorCode.invalid_topic_exception,
            f"Topic '{topic.name}' collides with internal topic: {internal}",
        )
    if topic.assignments:
        replica_lists = _manual_assignment(ctx, topic)
    else:
        replica_lists = _automatic_assignment(ctx, topic.num_partitions, topic.replication_factor)
    topic_id = ctx.new_uuid()
    records: list[MetadataRecord] = [Topic(topic.name, topic_id)]
    records.extend(Config(TOPIC_RESOURCE, topic.name, k, v) for k, v in configs.items())
    records.extend(
        _new_partition(ctx, topic_id, index, replicas)
        for index, replicas in enumerate(replica_lists)
    )
    values: dict[str, object] = {
        "name": topic.name,
        "topic_id": topic_id,
        "error_code": ErrorCode.none,
        "error_message": None,
        "num_partitions": len(replica_lists),
        "replication_factor": len(replica_lists[0]),
    }
    if hasattr(module, "CreatableTopicConfigs"):  # v5+: the topic's effective configs
        all_configs = {**ctx.image.configs, (TOPIC_RESOURCE, topic.name): configs}
        values["configs"] = tuple(
            make(
                module.CreatableTopicConfigs,
                {
                    "name": c.definition.name,
                    "value": c.value,
                    "read_only": False,
                    "config_source": int(c.source),
                    "is_sensitive": False,
                },
            )
            for c in topic_config_values(all_configs, topic.name)
        )
    return records, values


def _topic_configs(configs: Iterable[Any]) -> dict[str, str]:
    result: dict[str, str] = {}
    for config in configs:
        if config.value is None:
            raise ApiError(
                ErrorCode.invalid_config,
                f"Null value not supported for topic configs: {config.name}",
            )
        problem = check_config(TOPIC_RESOURCE, config.name, config.value)
        if problem is not None:
            raise ApiError(ErrorCode.invalid_config, problem)
        result[config.name] = config.value
    return result


def _automatic_assignment(
    ctx: ControllerContext, num_partitions: int, replication_factor: int
) -> list[tuple[int, ...]]:
    if replication_factor < -1 or replication_factor == 0:
        raise ApiError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if num_partitions < -1 or num_partitions == 0:
        raise ApiError(
            ErrorCode.invalid_partitions,
            "Number of partitions was set to an invalid non-positive value.",
        )
    if replication_factor == -1:
        replication_factor = ctx.config.default_replication_factor
    if num_partitions == -1:
        num_partitions = ctx.config.num_partitions
    if num_partitions >= MAX_RECORDS_PER_USER_OP:
        raise ApiError(ErrorCode.policy_violation, TOO_MANY_RECORDS)
    return _place(ctx, num_partitions, replication_factor, 0)


def _place(
    ctx: ControllerContext, num_partitions: int, replication_factor: int, start_partition: int
) -> list[tuple[int, ...]]:
    usable = [b for b in ctx.image.cluster.unfenced() if not b.in_controlled_shutdown]
    try:
        return place_replicas(usable, num_partitions, replication_factor, ctx.rng, start_partition)
    except PlacementError as error:
        raise ApiError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): {error}",
        ) from None


def _manual_assignment(ctx: ControllerContext, topic: Any) -> list[tuple[int, ...]]:
    if topic.replication_factor != -1:
        raise ApiError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but replication factor was not "
            "set to -1.",
        )
    if topic.num_partitions != -1:
        raise ApiError(
            ErrorCode.invalid_request,
            "A manual partition assignment was specified, but numPartitions was not set to -1.",
        )
    if len(topic.assignments) >= MAX_RECORDS_PER_USER_OP:
        raise ApiError(ErrorCode.policy_violation, TOO_MANY_RECORDS)
    by_index: dict[int, tuple[int, ...]] = {}
    replication_factor: int | None = None
    for assignment in topic.assignments:
        index = assignment.partition_index
        if index in by_index:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"Found multiple manual partition assignments for partition {index}",
            )
        replicas = tuple(assignment.broker_ids)
        _validate_replicas(ctx, index, replicas, replication_factor)
        replication_factor = len(replicas)
        by_index[index] = replicas
    if sorted(by_index) != list(range(len(by_index))):
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            "partitions should be a consecutive 0-based integer sequence",
        )
    return [by_index[index] for index in range(len(by_index))]


def _validate_replicas(
    ctx: ControllerContext, index: int, replicas: tuple[int, ...], replication_factor: int | None
) -> None:
    """Kafka's validateManualPartitionAssignment, plus: some replica must be usable."""
    validate_replica_list(ctx, replicas)
    if replication_factor is not None and len(replicas) != replication_factor:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            f"The manual partition assignment includes a partition with {len(replicas)} "
            "replica(s), but this is not consistent with previous partitions, which have "
            f"{replication_factor} replica(s).",
        )
    if not any(ctx.is_usable(broker_id) for broker_id in replicas):
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            f"All brokers specified in the manual partition assignment for partition {index} "
            "are fenced or in controlled shutdown.",
        )


def validate_replica_list(ctx: ControllerContext, replicas: tuple[int, ...]) -> None:
    """A manual replica list: not empty, every broker registered, none twice
    (INVALID_REPLICA_ASSIGNMENT with Kafka's messages)."""
    if not replicas:
        raise ApiError(
            ErrorCode.invalid_replica_assignment,
            "The manual partition assignment includes an empty replica list.",
        )
    seen: set[int] = set()
    for broker_id in replicas:
        if broker_id not in ctx.image.cluster.brokers:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes broker {broker_id}, but no broker "
                "with that ID was found.",
            )
        if broker_id in seen:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"The manual partition assignment includes the broker {broker_id} more than once.",
            )
        seen.add(broker_id)


def _new_partition(
    ctx: ControllerContext, topic_id: uuid.UUID, index: int, replicas: tuple[int, ...]
) -> Partition:
    """A new partition: its usable replicas form the ISR, the first of them leads."""
    isr = tuple(r for r in replicas if ctx.is_usable(r))
    assert isr, "placement and manual validation only produce partitions with a usable replica"
    return Partition(topic_id, index, replicas, isr, isr[0])


# ---- DeleteTopics ------------------------------------------------------------------------------


@dataclass(slots=True)
class DeleteTopicsRun:
    """One DeleteTopics worked on TOPICS_PER_SLICE names or ids at a time (as
    CreateTopicsRun): duplicates are counted over the whole request, and a topic named
    twice (by name and by id) that an earlier slice removed is answered as removed again."""

    module: Any
    wanted: list[tuple[str | None, uuid.UUID | None]]
    names: Counter[str]
    ids: Counter[uuid.UUID]
    removed: dict[uuid.UUID, str] = field(default_factory=dict)
    removed_names: dict[str, uuid.UUID] = field(default_factory=dict)
    results: list[object] = field(default_factory=list)

    @classmethod
    def start(cls, request: Any, api_version: int) -> DeleteTopicsRun:
        wanted: list[tuple[str | None, uuid.UUID | None]]
        if hasattr(request, "topic_names"):
            wanted = [(name, None) for name in request.topic_names]
        else:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        return cls(
            response_module(ApiKey.DELETE_TOPICS, api_version),
            wanted,
            Counter(name for name, _ in wanted if name is not None),
            Counter(topic_id for _, topic_id in wanted if topic_id is not None),
        )

    def slices(self) -> Iterator[Sequence[tuple[str | None, uuid.UUID | None]]]:
        for begin in range(0, len(self.wanted), TOPICS_PER_SLICE):
            yield self.wanted[begin : begin + TOPICS_PER_SLICE]

    def step(
        self, ctx: ControllerContext, wanted: Sequence[tuple[str | None, uuid.UUID | None]]
    ) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for name, topic_id in wanted:
            values: dict[str, object] = {"name": name, "topic_id": topic_id}
            try:
                refuse_internal_change(name or "")  # before existence, as authorization is
                topic = _topic_to_delete(ctx, name, topic_id, self.names, self.ids)
                refuse_internal_change(topic.name)  # named by id
                found_name, found_id = topic.name, topic.topic_id
            except ApiError as error:
                earlier = self._removed_earlier(name, topic_id)
                if earlier is None:
                    values |= {"error_code": error.code, "error_message": error.message}
                    self.results.append(make(self.module.DeletableTopicResult, values))
                    continue
                found_name, found_id = earlier
            if found_id not in self.removed:  # named twice, by name and by id: remove once
                self.removed[found_id] = found_name
                self.removed_names[found_name] = found_id
                records.append(RemoveTopic(found_id))
            values = {"name": found_name, "topic_id": found_id, "error_code": ErrorCode.none}
            self.results.append(make(self.module.DeletableTopicResult, values))
        return records

    def _removed_earlier(
        self, name: str | None, topic_id: uuid.UUID | None
    ) -> tuple[str, uuid.UUID] | None:
        """(name, id) of the topic an earlier slice of this request removed, if ``name`` or
        ``topic_id`` (not both, not a duplicate) names it."""
        if topic_id is not None and topic_id != uuid.UUID(int=0):
            if name is None and self.ids[topic_id] == 1 and topic_id in self.removed:
                return self.removed[topic_id], topic_id
            return None
        if name is not None and self.names[name] == 1 and name in self.removed_names:
            return name, self.removed_names[name]
        return None

    def response(self) -> object:
        return make(self.module.DeleteTopicsResponse, {"responses": tuple(self.results)})


def delete_topics(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """Remove topics named by name (v1-v5) or by name or id (v6), in one pass (the
    controller runs a DeleteTopicsRun a slice at a time)."""
    run = DeleteTopicsRun.start(request, api_version)
    records = run.step(ctx, run.wanted)
    return ControllerResult(tuple(records), run.response())


def _topic_to_delete(
    ctx: ControllerContext,
    name: str | None,
    topic_id: uuid.UUID | None,
    names: Counter[str],
    ids: Counter[uuid.UUID],
) -> TopicImage:
    topics = ctx.image.topics
    if topic_id == uuid.UUID(int=0):
        topic_id = None
    if name is not None and topic_id is not None:
        raise ApiError(
            ErrorCode.invalid_request, "You may not specify both topic name and topic id."
        )
    if topic_id is not None:
        if ids[topic_id] > 1:
            raise ApiError(ErrorCode.invalid_request, "Duplicate topic id.")
        found = topics.by_id.get(topic_id)
        if found is None:
            raise ApiError(ErrorCode.unknown_topic_id)
        return found
    if name is None:
        raise ApiError(ErrorCode.invalid_request, "Neither topic name nor id were specified.")
    if names[name] > 1:
        raise ApiError(ErrorCode.invalid_request, DUPLICATE_TOPIC)
    found_by_name = topics.get(name)
    if found_by_name is None:
        raise ApiError(ErrorCode.unknown_topic_or_partition)
    return found_by_name


# ---- CreatePartitions --------------------------------------------------------------------------


def create_partitions(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """Grow topics to the requested partition counts (in one pass: the controller runs
    ``create_partitions_run`` a slice of topics at a time)."""
    return create_partitions_run(request, api_version).whole(ctx)


def create_partitions_run(request: Any, api_version: int) -> EntityRun:
    """CreatePartitions a slice of topics a turn (issue 22), a topic weighing its explicit
    assignments: topics succeed or fail independently; duplicates and the
    MAX_RECORDS_PER_USER_OP budget are counted over the whole request."""
    module = response_module(ApiKey.CREATE_PARTITIONS, api_version)
    counts = Counter(map(attrgetter("name"), request.topics))  # C code, no step per name
    budget = [0]  # records of the request so far

    def one(ctx: ControllerContext, topic: Any) -> tuple[list[MetadataRecord], object]:
        created: list[MetadataRecord] = []
        try:
            if counts[topic.name] > 1:
                raise ApiError(ErrorCode.invalid_request, DUPLICATE_TOPIC)
            created = _grow_topic(ctx, topic)
            if budget[0] + len(created) > MAX_RECORDS_PER_USER_OP:
                raise ApiError(ErrorCode.policy_violation, TOO_MANY_RECORDS)
        except ApiError as error:
            created = []
            values = {"name": topic.name, "error_code": error.code, "error_message": error.message}
        else:
            budget[0] += len(created)
            values = {"name": topic.name, "error_code": ErrorCode.none}
        return created, make(module.CreatePartitionsTopicResult, values)

    def finish(results: tuple[object, ...]) -> object:
        return make(module.CreatePartitionsResponse, {"results": results})

    return EntityRun(
        request.topics,
        one,
        finish,
        validate_only=request.validate_only,
        weight=lambda topic: 1 + len(topic.assignments or ()),
    )


def _grow_topic(ctx: ControllerContext, request: Any) -> list[MetadataRecord]:
    refuse_internal_change(request.name)
    topic = ctx.image.topics.get(request.name)
    if topic is None:
        raise ApiError(ErrorCode.unknown_topic_or_partition)
    current = len(topic.partitions)
    if request.count == current:
        raise ApiError(ErrorCode.invalid_partitions, f"Topic already has {current} partition(s).")
    if request.count < current:
        raise ApiError(
            ErrorCode.invalid_partitions,
            f"The topic {topic.name} currently has {current} partition(s); {request.count} "
            "would not be an increase.",
        )
    added = request.count - current
    if added >= MAX_RECORDS_PER_USER_OP:
        raise ApiError(ErrorCode.policy_violation, TOO_MANY_RECORDS)
    replication_factor = len(topic.partitions[0].replicas)
    if request.assignments is None:
        replica_lists = _place(ctx, added, replication_factor, current)
    else:
        if len(request.assignments) != added:
            raise ApiError(
                ErrorCode.invalid_replica_assignment,
                f"Attempted to add {added} additional partition(s), but only "
                f"{len(request.assignments)} assignment(s) were specified.",
            )
        replica_lists = []
        for offset, assignment in enumerate(request.assignments):
            replicas = tuple(assignment.broker_ids)
            _validate_replicas(ctx, current + offset, replicas, replication_factor)
            replica_lists.append(replicas)
    return [
        _new_partition(ctx, topic.topic_id, current + offset, replicas)
        for offset, replicas in enumerate(replica_lists)
    ]
