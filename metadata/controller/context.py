"""What every request handler works from: the controller's configuration, its working image,
its randomness, and the two shapes handlers return (a result, or an error for one resource)."""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from metadata.config_defs import dynamic_value
from metadata.directories import directory_of, is_online
from metadata.image import MetadataImage, PartitionRegistration
from metadata.records import MetadataRecord
from protocol.turns import weighted_slices
from raft.core import MAX_PROPOSAL_RECORDS
from raft.driver import RaftNode

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: the records one admin operation may
# generate (POLICY_VIOLATION beyond), so one request bounds the controller's memory and work.
MAX_RECORDS_PER_USER_OP = MAX_PROPOSAL_RECORDS
UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's static settings (server.properties); defaults are Kafka's."""

    node_id: int
    cluster_id: str
    num_partitions: int = 1
    default_replication_factor: int = 1
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    max_idle_interval_ms: int = 500  # metadata.max.idle.interval.ms
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1  # the static min.insync.replicas (KIP-966's ELR uses it)
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds
    controller_listener: str = "CONTROLLER"
    # authorizer.class.name is set: CreateAcls and DeleteAcls are served (else, as in
    # Kafka's ControllerApis, they answer SECURITY_DISABLED).
    acls_enabled: bool = False
    # Written by the first controller to become active on an empty metadata log.
    bootstrap_records: tuple[MetadataRecord, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerContext:
    """The state one request is handled against."""

    image: MetadataImage
    config: ControllerConfig
    rng: random.Random
    bugs: frozenset[str] = frozenset()
    # The quorum this controller leads: kraft.version lives in its log (control records),
    # not in the metadata image, so UpdateFeatures hands that feature to it. None in tests
    # that drive handlers without a quorum.
    raft: RaftNode | None = None

    def is_usable(self, broker_id: int) -> bool:
        """Whether the broker may lead or join an ISR: registered, unfenced, and not in
        controlled shutdown (Kafka's ClusterControlManager.isActive)."""
        broker = self.image.cluster.brokers.get(broker_id)
        return broker is not None and not broker.fenced and not broker.in_controlled_shutdown

    def dir_online(self, partition: PartitionRegistration, broker_id: int) -> bool:
        """Whether ``broker_id``'s replica of ``partition`` sits in a log dir its broker
        still serves (Kafka's LeaderAcceptor: a replica in a failed dir may not lead)."""
        broker = self.image.cluster.brokers.get(broker_id)
        return broker is not None and is_online(directory_of(partition, broker_id), broker)

    def may_lead(self, partition: PartitionRegistration, broker_id: int) -> bool:
        """``is_usable`` and ``dir_online``: what any election asks of a new leader."""
        return self.is_usable(broker_id) and self.dir_online(partition, broker_id)

    def unclean_enabled(self, topic: str) -> bool:
        """unclean.leader.election.enable for ``topic``: its own config, the cluster-wide
        dynamic default, or the static one."""
        value = dynamic_value(self.image.configs, UNCLEAN_LEADER_ELECTION, topic=topic)
        if value is not None:
            return value.strip().lower() == "true"
        return self.config.unclean_leader_election_enable

    def new_uuid(self) -> uuid.UUID:
        """A random (version 4) uuid from the injected Random, so runs replay exactly."""
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)

    def with_image(self, image: MetadataImage) -> ControllerContext:
        return dataclasses.replace(self, image=image)


@dataclasses.dataclass(frozen=True, slots=True)
class ControllerResult:
    """A handled request: the records to commit (as one batch) and the response to send
    once they have."""

    records: tuple[MetadataRecord, ...]
    response: object


class ApiError(Exception):
    """A request (or one resource of it) refused with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message


class ControllerRun(Protocol):
    """A request the controller works on a slice of its entities at a time
    (QuorumController._handle_in_slices): each slice's records are proposed before the next
    slice is worked on, against the working image those records made; the answer is given
    once the last of them commits."""

    def slices(self) -> Iterator[Sequence[Any]]: ...

    def step(self, ctx: ControllerContext, items: Sequence[Any]) -> Sequence[MetadataRecord]: ...

    def response(self) -> object: ...


@dataclasses.dataclass(slots=True)
class EntityRun:
    """A ControllerRun for a request whose entities (entries, users, topics) succeed or fail
    independently: ``one`` gives an entity's records and its result against the working
    image of its slice (raising nothing: a refusal is a result), ``finish`` the response
    from every result in order. ``slices`` may be given to read the request into entities
    a turn at a time (an empty slice: a turn of that reading); by default the entities are
    ``items``, SLICE_ENTITIES of them (by ``weight``) a slice."""

    items: Sequence[Any]
    one: Callable[[ControllerContext, Any], tuple[Sequence[MetadataRecord], object]]
    finish: Callable[[tuple[object, ...]], object]
    validate_only: bool = False
    weight: Callable[[Any], int] = lambda _item: 1
    reading: Callable[[], Iterator[Sequence[Any]]] | None = None
    results: list[object] = dataclasses.field(default_factory=list)

    def slices(self) -> Iterator[Sequence[Any]]:
        if self.reading is not None:
            return self.reading()
        return weighted_slices(self.items, self.weight)

    def step(self, ctx: ControllerContext, items: Sequence[Any]) -> list[MetadataRecord]:
        records: list[MetadataRecord] = []
        for item in items:
            item_records, result = self.one(ctx, item)
            records.extend(item_records)
            if result is not None:  # None: the entity has no place in the answer
                self.results.append(result)
        return [] if self.validate_only else records

    def response(self) -> object:
        return self.finish(tuple(self.results))

    def whole(self, ctx: ControllerContext) -> ControllerResult:
        """The request in one pass, against ``ctx`` (what the handler tests call)."""
        records: list[MetadataRecord] = []
        for items in self.slices():
            records.extend(self.step(ctx, items))
        return ControllerResult(tuple(records), self.response())
