"""Broker lifecycle on the controller: registration, heartbeats, fencing, controlled shutdown.

A broker registers (RegisterBroker; it starts fenced), then heartbeats. The controller unfences
it once it is caught up to its own registration record, fences it when its session expires or
it asks to be fenced, and walks it through controlled shutdown: first its leaderships move
away and it leaves the ISRs, then, once it leads nothing, it is fenced and told to shut down.
The states and their legal transitions are metadata.delta.BrokerState; Kafka's names for the
same machine (BrokerHeartbeatManager) are FENCED, UNFENCED, CONTROLLED_SHUTDOWN, SHUTDOWN_NOW.

The broker epoch is the offset of the broker's RegisterBroker record, so a request carrying an
epoch is tied to exactly one registration: anything from an older incarnation is stale.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.context import ControllerContext, ControllerResult
from metadata.controller.election import (
    broker_leaving,
    broker_returning,
    dirs_failing,
    elect,
    leads_anything,
)
from metadata.delta import BrokerState, MetadataDelta
from metadata.directories import MIGRATING, RESERVED_IDS, is_online
from metadata.image import BrokerRegistration, MetadataImage
from metadata.records import (
    METADATA_VERSION_FEATURE,
    BrokerRegistrationChange,
    FeatureRange,
    FenceBroker,
    Listener,
    MetadataRecord,
    PartitionChange,
    RegisterBroker,
    UnfenceBroker,
    UnregisterBroker,
)
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module

logger = logging.getLogger(__name__)

UNFENCE_BEFORE_CAUGHT_UP = "unfence-before-caught-up"
SHUTDOWN_KEEPS_LEADERS = "shutdown-keeps-leaders"


# ---- BrokerRegistration ------------------------------------------------------------------------


def broker_registration(
    ctx: ControllerContext, request: Any, api_version: int, next_offset: int
) -> ControllerResult:
    """Register a broker incarnation; ``next_offset`` is where the RegisterBroker record will
    land, which becomes the broker epoch."""
    module = response_module(ApiKey.BROKER_REGISTRATION, api_version)

    def answer(code: ErrorCode, epoch: int = -1) -> Any:
        return make(module.BrokerRegistrationResponse, {"error_code": code, "broker_epoch": epoch})

    if request.cluster_id != ctx.config.cluster_id:
        return ControllerResult((), answer(ErrorCode.inconsistent_cluster_id))
    features = tuple(
        FeatureRange(f.name, f.min_supported_version, f.max_supported_version)
        for f in request.features
    )
    if not _supports_metadata_version(ctx.image, features):
        return ControllerResult((), answer(ErrorCode.unsupported_version))
    log_dirs = tuple(d for d in getattr(request, "log_dirs", ()) if d is not None)
    refusal = _log_dirs_refusal(ctx.image, request.broker_id, log_dirs)
    if refusal is not None:
        logger.warning("Refusing the registration of broker %d: %s", request.broker_id, refusal)
        return ControllerResult((), answer(ErrorCode.invalid_registration))
    existing = ctx.image.cluster.brokers.get(request.broker_id)
    if existing is not None and existing.incarnation_id == request.incarnation_id:
        return ControllerResult((), answer(ErrorCode.none, existing.epoch))  # a retry
    record = RegisterBroker(
        broker_id=request.broker_id,
        incarnation_id=request.incarnation_id,
        broker_epoch=next_offset,
        listeners=tuple(
            Listener(item.name, item.host, item.port, item.security_protocol)
            for item in request.listeners
        ),
        features=features,
        rack=request.rack,
        fenced=True,
        # v2+ (KIP-858): its online log dirs; a heartbeat later names those that failed.
        log_dirs=log_dirs,
    )
    records: list[MetadataRecord] = [record]
    if existing is not None:
        # A new incarnation: its leaderships and ISR places go. Unless it names the epoch it
        # shut down cleanly in, its log may lack acknowledged records (Kafka's
        # handleBrokerUncleanShutdown), so it leaves the ELRs too (KIP-966).
        unclean = getattr(request, "previous_broker_epoch", -1) != existing.epoch
        records.extend(broker_leaving(ctx, request.broker_id, unclean_shutdown=unclean))
    return ControllerResult(tuple(records), answer(ErrorCode.none, next_offset))


def _log_dirs_refusal(
    image: MetadataImage, broker_id: int, log_dirs: tuple[uuid.UUID, ...]
) -> str | None:
    """Why Kafka's registerBroker would refuse these dir ids (INVALID_REGISTRATION), or
    None: a reserved id, one listed twice, or one another broker registered (a copied disk
    would otherwise make the controller move the wrong broker's leaderships). No dirs at all
    is accepted, unlike Kafka: a broker whose dirs have no ``directory.id`` (the simulator's)
    registers none, and its dirs then count as online (metadata/directories.py)."""
    if any(d.int < RESERVED_IDS for d in log_dirs):
        return "Reserved directory ID in request"
    if len(set(log_dirs)) != len(log_dirs):
        return "Duplicate directory ID in request"
    for other in image.cluster.brokers.values():
        shared = set(other.log_dirs) & set(log_dirs)
        if other.broker_id != broker_id and shared:
            return f"Broker {other.broker_id} is already registered with directory {min(shared)}"
    return None


def _supports_metadata_version(image: MetadataImage, features: tuple[FeatureRange, ...]) -> bool:
    level = image.features.get(METADATA_VERSION_FEATURE)
    supported = next((f for f in features if f.name == METADATA_VERSION_FEATURE), None)
    if level is None or supported is None:
        return True  # nothing finalized yet, or a broker that does not say
    return supported.min_version <= level <= supported.max_version


# ---- BrokerHeartbeat ---------------------------------------------------------------------------


def broker_heartbeat(
    ctx: ControllerContext, committed: MetadataImage, request: Any, api_version: int
) -> ControllerResult:
    """Move the broker along its state machine as the heartbeat asks; ``committed`` is the
    committed image, which must also show it leading nothing before it may shut down."""
    module = response_module(ApiKey.BROKER_HEARTBEAT, api_version)
    broker = ctx.image.cluster.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        response = make(
            module.BrokerHeartbeatResponse,
            {"error_code": ErrorCode.stale_broker_epoch, "is_fenced": True},
        )
        return ControllerResult((), response)
    caught_up = request.current_metadata_offset >= broker.epoch
    records = _dirs_offline(ctx, broker, getattr(request, "offline_log_dirs", ()))
    if records:
        # The state change below (an unfence's elections, a fence's) must already see those
        # dirs offline: an unfenced broker must not be handed a leadership in a failed dir.
        delta = MetadataDelta(ctx.image)
        for record in records:
            delta.replay(record)
        ctx = ctx.with_image(delta.apply(ctx.image.offset + len(records), ctx.image.epoch))
        broker = ctx.image.cluster.brokers[broker.broker_id]
    records += _heartbeat_records(ctx, committed, broker, request, caught_up)
    fenced, shutting_down = _state_after(broker, records)
    response = make(
        module.BrokerHeartbeatResponse,
        {
            "error_code": ErrorCode.none,
            "is_caught_up": caught_up,
            "is_fenced": fenced,
            "should_shut_down": fenced and shutting_down,
        },
    )
    return ControllerResult(tuple(records), response)


def _heartbeat_records(
    ctx: ControllerContext,
    committed: MetadataImage,
    broker: BrokerRegistration,
    request: Any,
    caught_up: bool,
) -> list[MetadataRecord]:
    broker_id, epoch = broker.broker_id, broker.epoch
    state = BrokerState.of(broker)
    leads_nothing = not leads_anything(ctx.image, broker_id) and not leads_anything(
        committed, broker_id
    )
    if state is BrokerState.FENCED:
        if request.want_shut_down:
            return [BrokerRegistrationChange(broker_id, epoch, in_controlled_shutdown=True)]
        # The planted bug trusts the first heartbeat: no want_fence or offset check.
        if UNFENCE_BEFORE_CAUGHT_UP in ctx.bugs or (not request.want_fence and caught_up):
            return [UnfenceBroker(broker_id, epoch), *broker_returning(ctx, broker_id)]
    elif state is BrokerState.ACTIVE:
        if request.want_fence:
            return [FenceBroker(broker_id, epoch), *broker_leaving(ctx, broker_id)]
        if request.want_shut_down:
            # The planted bug marks the broker as shutting down but leaves its leaderships
            # where they are, so it can never be let go (it stops on its own timeout).
            leaving = [] if SHUTDOWN_KEEPS_LEADERS in ctx.bugs else broker_leaving(ctx, broker_id)
            records: list[MetadataRecord] = [
                BrokerRegistrationChange(broker_id, epoch, in_controlled_shutdown=True),
                *leaving,
            ]
            if leads_nothing:
                records.append(FenceBroker(broker_id, epoch))  # nothing to move: stop now
            return records
    elif state is BrokerState.CONTROLLED_SHUTDOWN and (request.want_fence or leads_nothing):
        return [FenceBroker(broker_id, epoch), *broker_leaving(ctx, broker_id)]
    return []


def _dirs_offline(
    ctx: ControllerContext, broker: BrokerRegistration, offline: Sequence[uuid.UUID | None]
) -> list[MetadataRecord]:
    """KIP-858 (Kafka's handleDirectoriesOffline): the heartbeat's v1+ OfflineLogDirs that
    the registration still lists as online go offline. The broker's replicas in them leave
    ISRs and leaderships (as a fenced broker's would) and its registration keeps only its
    healthy dirs; the broker itself stays unfenced and serves the rest. A dir already
    offline changes nothing, so every later heartbeat naming it is a no-op."""
    failed = frozenset(d for d in offline if d in broker.log_dirs)
    if not failed:
        return []
    changes = dirs_failing(ctx, broker.broker_id, failed)
    online = tuple(d for d in broker.log_dirs if d not in failed)
    logger.warning(
        "Directories %s in broker %d marked offline, remaining directories: %s",
        sorted(map(str, failed)),
        broker.broker_id,
        [str(d) for d in online],
    )
    return [*changes, BrokerRegistrationChange(broker.broker_id, broker.epoch, log_dirs=online)]


def _state_after(broker: BrokerRegistration, records: list[MetadataRecord]) -> tuple[bool, bool]:
    """(fenced, in controlled shutdown) once ``records`` are applied."""
    fenced, shutting_down = broker.fenced, broker.in_controlled_shutdown
    for record in records:
        if isinstance(record, FenceBroker):
            fenced = True
        elif isinstance(record, UnfenceBroker):
            fenced = False
        elif isinstance(record, BrokerRegistrationChange):
            fenced = fenced if record.fenced is None else record.fenced
            if record.in_controlled_shutdown is not None:
                shutting_down = record.in_controlled_shutdown
    return fenced, shutting_down


# ---- AssignReplicasToDirs -----------------------------------------------------------------------


def assign_replicas_to_dirs(
    ctx: ControllerContext, request: Any, api_version: int
) -> ControllerResult:
    """KIP-858: a broker says which of its log dirs holds each of its replicas; each
    assignment that changes a partition's ``directories`` is a PartitionChange. A replica
    placed in a dir the registration no longer lists (it failed meanwhile) also leaves its
    ISR and leadership, as Kafka's handleAssignReplicasToDirs does."""
    module = response_module(ApiKey.ASSIGN_REPLICAS_TO_DIRS, api_version)
    broker = ctx.image.cluster.brokers.get(request.broker_id)
    if broker is None or broker.epoch != request.broker_epoch:
        code = (
            ErrorCode.broker_id_not_registered if broker is None else ErrorCode.stale_broker_epoch
        )
        response = make(
            module.AssignReplicasToDirsResponse,
            {"error_code": code, "directories": ()},
        )
        return ControllerResult((), response)
    records: list[MetadataRecord] = []
    directories = []
    for directory in request.directories:
        dir_id = directory.id_
        topics = []
        for topic_data in directory.topics:
            results = [
                make(
                    module.PartitionData,
                    {
                        "partition_index": item.partition_index,
                        "error_code": _assign(
                            ctx, broker, dir_id, topic_data.topic_id, item, records
                        ),
                    },
                )
                for item in topic_data.partitions
            ]
            topics.append(
                make(
                    module.TopicData,
                    {"topic_id": topic_data.topic_id, "partitions": tuple(results)},
                )
            )
        directories.append(make(module.DirectoryData, {"id_": dir_id, "topics": tuple(topics)}))
    response = make(
        module.AssignReplicasToDirsResponse,
        {"error_code": ErrorCode.none, "directories": tuple(directories)},
    )
    return ControllerResult(tuple(records), response)


def _assign(
    ctx: ControllerContext,
    broker: BrokerRegistration,
    dir_id: uuid.UUID | None,
    topic_id: uuid.UUID | None,
    item: Any,
    records: list[MetadataRecord],
) -> ErrorCode:
    """One replica's assignment, its record (if any) appended to ``records``."""
    topic = None if topic_id is None else ctx.image.topics.by_id.get(topic_id)
    if topic is None:
        return ErrorCode.unknown_topic_id
    partition = topic.partitions.get(item.partition_index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    broker_id = broker.broker_id
    if broker_id not in partition.replicas or dir_id is None:
        return ErrorCode.not_leader_or_follower
    if any(  # an earlier assignment in this request moved it already: keep the first
        isinstance(r, PartitionChange)
        and (r.topic_id, r.partition_id) == (topic.topic_id, item.partition_index)
        for r in records
    ):
        return ErrorCode.none
    current = partition.directories or (MIGRATING,) * len(partition.replicas)
    index = partition.replicas.index(broker_id)
    if current[index] == dir_id:
        return ErrorCode.none
    placed = (*current[:index], dir_id, *current[index + 1 :])
    change = PartitionChange(topic.topic_id, item.partition_index, directories=placed)
    if not is_online(dir_id, broker) and broker_id in (*partition.isr, partition.leader):
        elected = elect(
            ctx,
            topic,
            item.partition_index,
            dataclasses.replace(partition, directories=placed),
            tuple(r for r in partition.isr if r != broker_id),
            lambda replica: replica != broker_id and ctx.is_usable(replica),
            unclean=ctx.unclean_enabled(topic.name),
        )
        if elected is not None:
            change = dataclasses.replace(elected, directories=placed)
    records.append(change)
    return ErrorCode.none


# ---- fencing and unregistration -----------------------------------------------------------------


def fence_broker(ctx: ControllerContext, broker_id: int) -> list[MetadataRecord]:
    """Fence a broker whose session expired, moving its leaderships and ISR places away."""
    broker = ctx.image.cluster.brokers[broker_id]
    assert not broker.fenced, f"broker {broker_id} is already fenced"
    return [FenceBroker(broker_id, broker.epoch), *broker_leaving(ctx, broker_id)]


def unregister_broker(ctx: ControllerContext, request: Any, api_version: int) -> ControllerResult:
    """Forget a broker (kafka-cluster.sh unregister): it leaves every ISR and leadership."""
    module = response_module(ApiKey.UNREGISTER_BROKER, api_version)
    broker = ctx.image.cluster.brokers.get(request.broker_id)
    if broker is None:
        response = make(
            module.UnregisterBrokerResponse,
            {
                "error_code": ErrorCode.broker_id_not_registered,
                "error_message": f"Broker ID {request.broker_id} is not currently registered",
            },
        )
        return ControllerResult((), response)
    records: list[MetadataRecord] = [
        *broker_leaving(ctx, broker.broker_id),
        UnregisterBroker(broker.broker_id, broker.epoch),
    ]
    response = make(module.UnregisterBrokerResponse, {"error_code": ErrorCode.none})
    return ControllerResult(tuple(records), response)
