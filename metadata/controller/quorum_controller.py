"""The QuorumController: the active controller of the metadata quorum.

It is active while this node is the Raft leader of epoch E *and* the committed image has
reached epoch E, i.e. the LeaderChange record of E has been applied, so every record of earlier
epochs is in the image (Kafka's claim rule). While active it keeps a working image: the
committed image plus its own proposed-but-uncommitted records. Each request is validated
against the working image, and its records are replayed into it and proposed in one
synchronous step, so the next request already sees them; the response goes out only once they
commit. Losing leadership fails every pending request with NOT_CONTROLLER (the outcome is
unknown to the client, which retries with the next controller) and drops the working image:
the next active controller rebuilds its state from the log alone.

Broker sessions (last heartbeat times) are the one thing kept outside the log, and only while
active; an activation gives every registered broker a fresh session.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from log.records import Record
from log.runtime import Runtime
from metadata.controller.acls import (
    create_acls,
    create_acls_run,
    delete_acls,
    delete_acls_run,
    security_disabled,
)
from metadata.controller.client_quotas import alter_client_quotas, client_quotas_run
from metadata.controller.cluster import (
    SHUTDOWN_KEEPS_LEADERS,
    UNFENCE_BEFORE_CAUGHT_UP,
    assign_replicas_to_dirs,
    broker_heartbeat,
    broker_registration,
    fence_broker,
    unregister_broker,
)
from metadata.controller.configs import AlterConfigsRun, alter_configs, incremental_alter_configs
from metadata.controller.context import (
    ControllerConfig,
    ControllerContext,
    ControllerResult,
    ControllerRun,
)
from metadata.controller.election import LEADER_OUTSIDE_ISR, preferred_leader_changes
from metadata.controller.features import UpdateFeaturesRun, update_features
from metadata.controller.internal_topics import is_internal_creator
from metadata.controller.partitions import ElectLeadersRun, alter_partition, elect_leaders
from metadata.controller.producer_ids import allocate_producer_ids
from metadata.controller.reassignment import (
    ReassignmentsRun,
    alter_partition_reassignments,
    list_partition_reassignments,
    list_reassignments_run,
)
from metadata.controller.refusals import refusal
from metadata.controller.scram import alter_user_scram_credentials, scram_run
from metadata.controller.topics import (
    CreateTopicsRun,
    DeleteTopicsRun,
    create_partitions,
    create_partitions_run,
    create_topics,
    delete_topics,
)
from metadata.delta import MetadataDelta
from metadata.image import MetadataImage
from metadata.loader import MetadataLoader
from metadata.records import METADATA_VERSION_FEATURE, MetadataRecord, NoOp, encode_record
from protocol.api_keys import ApiKey
from protocol.api_table import (
    ALTER_CONFIGS_AUTHORIZATION,
    CLUSTER_ACTION,
    CLUSTER_ALTER,
    CLUSTER_ALTER_CONFIGS,
    CLUSTER_DESCRIBE,
    CONTROLLER,
    CREATE_TOPICS_AUTHORIZATION,
    TOPIC_ALTER,
    TOPIC_DELETE,
    TOPIC_DESCRIBE,
    Api,
    ApiHandler,
    ApiRequest,
    ServedApis,
)
from protocol.wire import RequestHeader
from raft.batch_accumulator import split_proposal
from raft.core import MAX_PROPOSAL_RECORDS, Event, NotLeaderError, Role, RoleChanged
from raft.driver import MAX_BATCH_BYTES, CommittedBatch, RaftNode
from raft.snapshot import SnapshotId

__all__ = ["CONTROLLER_BUGS", "ControllerConfig", "QuorumController"]

logger = logging.getLogger("metadata.controller")

ANSWER_BEFORE_COMMIT = "answer-before-commit"
CONFIG_ANSWER_BEFORE_COMMIT = "config-answer-before-commit"
MAX_ELECTIONS_PER_IMBALANCE = 1000  # Kafka's QuorumController.MAX_ELECTIONS_PER_IMBALANCE
CONTROLLER_BUGS = {
    ANSWER_BEFORE_COMMIT: "the controller answers a request once its records are proposed, "
    "before they commit",
    CONFIG_ANSWER_BEFORE_COMMIT: "the controller answers a config change (AlterConfigs, "
    "IncrementalAlterConfigs) once its records are proposed, before they commit",
    UNFENCE_BEFORE_CAUGHT_UP: "a broker is unfenced on its first heartbeat, whatever its "
    "metadata offset",
    LEADER_OUTSIDE_ISR: "elections pick the first live replica, ignoring the ISR",
    SHUTDOWN_KEEPS_LEADERS: "a broker's controlled shutdown (a heartbeat with wantShutDown) "
    "does not move its leaderships away, so the controller never lets it go",
}

Handler = Callable[[ControllerContext, Any, int], ControllerResult]


class _NotController(Exception):
    """A pending request's records may not commit: leadership moved."""


@dataclass(frozen=True, slots=True)
class _Refused:
    """A request refused while its records were proposed: answer this."""

    response: object


@dataclass(frozen=True, slots=True)
class _Pending:
    last_offset: int
    done: asyncio.Future[None]


class QuorumController:
    """Serves the controller APIs on the active controller; NOT_CONTROLLER elsewhere."""

    def __init__(
        self,
        runtime: Runtime,
        raft: RaftNode,
        loader: MetadataLoader,
        config: ControllerConfig,
        bugs: frozenset[str] = frozenset(),
    ) -> None:
        unknown = bugs - CONTROLLER_BUGS.keys()
        assert not unknown, f"unknown planted bugs {sorted(unknown)}"
        self.runtime = runtime
        self.raft = raft
        self.loader = loader
        self.config = config
        self.bugs = bugs
        self.served = ServedApis(CONTROLLER, self.apis())
        self._active = False
        self._closed = False
        self._epoch = -1
        self._working: MetadataImage | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._sessions: dict[int, float] = {}  # broker id -> loop time of its last heartbeat
        self._last_write_s = 0.0
        self._timer: asyncio.Task[None] | None = None
        raft.add_listener(self)
        loader.add_publisher(self)

    @property
    def active(self) -> bool:
        return self._active

    # ---- requests ----------------------------------------------------------------------------
    def apis(self) -> list[Api]:
        """The controller APIs' entries in the controller listener's table."""
        run = self._entry
        return [
            Api(
                ApiKey.CREATE_TOPICS,
                (2, 7),
                run(create_topics),
                CONTROLLER,
                CREATE_TOPICS_AUTHORIZATION,
            ),
            Api(
                ApiKey.DELETE_TOPICS,
                (1, 6),
                run(delete_topics),
                CONTROLLER,
                (TOPIC_DELETE, TOPIC_DESCRIBE),
            ),
            Api(
                ApiKey.ALTER_CONFIGS,
                (0, 2),
                run(alter_configs),
                CONTROLLER,
                ALTER_CONFIGS_AUTHORIZATION,
            ),
            Api(
                ApiKey.CREATE_PARTITIONS, (0, 3), run(create_partitions), CONTROLLER, (TOPIC_ALTER,)
            ),
            Api(ApiKey.ELECT_LEADERS, (0, 2), run(elect_leaders), CONTROLLER, (CLUSTER_ALTER,)),
            Api(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                (0, 1),
                run(incremental_alter_configs),
                CONTROLLER,
                ALTER_CONFIGS_AUTHORIZATION,
            ),
            Api(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                (0, 1),
                run(alter_partition_reassignments),
                CONTROLLER,
                (CLUSTER_ALTER,),
            ),
            Api(
                ApiKey.LIST_PARTITION_REASSIGNMENTS,
                (0, 0),
                run(list_partition_reassignments),
                CONTROLLER,
                (CLUSTER_DESCRIBE,),
            ),
            Api(
                ApiKey.ALTER_PARTITION, (2, 3), run(alter_partition), CONTROLLER, (CLUSTER_ACTION,)
            ),
            Api(
                ApiKey.BROKER_REGISTRATION,
                (0, 4),
                run(self._register),
                CONTROLLER,
                (CLUSTER_ACTION,),
            ),
            Api(
                ApiKey.BROKER_HEARTBEAT, (0, 2), run(self._heartbeat), CONTROLLER, (CLUSTER_ACTION,)
            ),
            Api(
                ApiKey.ASSIGN_REPLICAS_TO_DIRS,
                (0, 0),
                run(assign_replicas_to_dirs),
                CONTROLLER,
                (CLUSTER_ACTION,),
            ),
            Api(
                ApiKey.UNREGISTER_BROKER,
                (0, 0),
                run(self._unregister),
                CONTROLLER,
                (CLUSTER_ALTER,),
            ),
            Api(
                ApiKey.ALLOCATE_PRODUCER_IDS,
                (0, 0),
                run(allocate_producer_ids),
                CONTROLLER,
                (CLUSTER_ACTION,),
            ),
            Api(ApiKey.UPDATE_FEATURES, (0, 1), run(update_features), CONTROLLER, (CLUSTER_ALTER,)),
            Api(ApiKey.CREATE_ACLS, (1, 3), self._acls(create_acls), CONTROLLER, (CLUSTER_ALTER,)),
            Api(ApiKey.DELETE_ACLS, (1, 3), self._acls(delete_acls), CONTROLLER, (CLUSTER_ALTER,)),
            Api(
                ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                (0, 0),
                run(alter_user_scram_credentials),
                CONTROLLER,
                (CLUSTER_ALTER,),
            ),
            Api(
                ApiKey.ALTER_CLIENT_QUOTAS,
                (0, 1),
                run(alter_client_quotas),
                CONTROLLER,
                (CLUSTER_ALTER_CONFIGS,),
            ),
        ]

    def _acls(self, handler: Handler) -> ApiHandler:
        """CreateAcls or DeleteAcls: SECURITY_DISABLED without an authorizer."""
        entry = self._entry(handler)

        async def answer(request: ApiRequest) -> object:
            if not self.config.acls_enabled:
                key = request.header.api_key
                return security_disabled(key, request.api_version, request.body)
            return await entry(request)

        return answer

    def _entry(self, handler: Handler) -> ApiHandler:
        """A table entry's handler: ``handler``'s records proposed, its answer given once
        they commit (see ``_answer``)."""

        async def answer(request: ApiRequest) -> object:
            return await self._answer(
                handler,
                request.header.api_key,
                request.api_version,
                request.body,
                request.client_id,
            )

        return answer

    async def handle(
        self, api_key: int, api_version: int, request: object, *, client_id: str | None = None
    ) -> object:
        """The kio response to one controller request, as the controller listener's table
        answers it (a version it does not serve is a ValueError)."""
        api = self.served[api_key]
        low, high = api.versions
        if not low <= api_version <= high:
            raise ValueError(f"api {api_key} v{api_version} is outside [{low}, {high}]")
        header = RequestHeader(api_key, api_version, 0, client_id)
        response = await api.handler(ApiRequest(header, request, self.served))
        assert response is not None
        return response

    async def _answer(
        self, handler: Handler, api_key: int, api_version: int, request: object, client_id: str
    ) -> object:
        """The kio response to one controller request, sent once its records commit."""
        if not self._active:
            return refusal(api_key, api_version, request, ErrorCode.not_controller)
        run = self._start_run(api_key, api_version, request, client_id)
        if run is not None:
            return await self._handle_in_slices(api_key, api_version, request, run)
        result = handler(self._context(), request, api_version)
        proposed = self._propose_result(api_key, api_version, request, result.records)
        if isinstance(proposed, _Refused):
            return proposed.response
        return await self._answer_once_committed(
            api_key, api_version, request, proposed, result.response
        )

    def _start_run(
        self, api_key: int, api_version: int, request: Any, client_id: str | None
    ) -> ControllerRun | None:
        """The run working on a request a slice at a time, for the APIs whose entities
        (topics, config resources) succeed or fail independently; None for the others."""
        if api_key == ApiKey.CREATE_TOPICS:
            assert self._working is not None
            internal = is_internal_creator(client_id, self._working)
            return CreateTopicsRun.start(self._context(), request, api_version, internal)
        if api_key == ApiKey.DELETE_TOPICS:
            return DeleteTopicsRun.start(request, api_version)
        if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
            incremental = api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
            return AlterConfigsRun.start(request, api_version, incremental=incremental)
        if api_key == ApiKey.CREATE_PARTITIONS:
            return create_partitions_run(request, api_version)
        if api_key == ApiKey.ALTER_CLIENT_QUOTAS:
            return client_quotas_run(request, api_version)
        if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            return scram_run(request, api_version)
        if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
            return ReassignmentsRun.start(request, api_version)
        if api_key == ApiKey.UPDATE_FEATURES:
            return UpdateFeaturesRun.start(request, api_version)
        if api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
            return list_reassignments_run(self._context(), request, api_version)
        if api_key == ApiKey.ELECT_LEADERS:
            return ElectLeadersRun.start(self._context(), request, api_version)
        if api_key == ApiKey.CREATE_ACLS:
            return create_acls_run(self._context(), request, api_version)
        if api_key == ApiKey.DELETE_ACLS:
            return delete_acls_run(self._context(), request, api_version)
        return None

    async def _handle_in_slices(
        self, api_key: int, api_version: int, request: Any, run: ControllerRun
    ) -> object:
        """A request a slice of its entities per turn of the loop (CreateTopics and
        DeleteTopics TOPICS_PER_SLICE topics; AlterConfigs and IncrementalAlterConfigs
        SLICE_ENTITIES configs; CreatePartitions, AlterClientQuotas and
        AlterUserScramCredentials SLICE_ENTITIES topics, entries or changes;
        AlterPartitionReassignments SLICE_ENTITIES partitions; UpdateFeatures decided
        whole, answered SLICE_ENTITIES features a turn; ListPartitionReassignments
        SLICE_ENTITIES partitions; CreateAcls SLICE_ENTITIES creations, DeleteAcls as
        many filters as make SLICE_ENTITIES matches against the ACLs; ElectLeaders
        SLICE_ENTITIES partitions, then its answer as many): each slice
        is worked on against the working image of then and its records proposed before
        the next, as Kafka's non-atomic create writes a big request in several batches;
        the answer waits for the last of them. Losing leadership in between is
        NOT_CONTROLLER for the request (the client retries: what was created already
        exists, as after a failover in Kafka)."""
        last_offset: int | None = None
        for index, items in enumerate(run.slices()):
            if index:  # the first slice is proposed at once, as any other request
                await asyncio.sleep(0)
                if not self._active:
                    return refusal(api_key, api_version, request, ErrorCode.not_controller)
            records = run.step(self._context(), items)
            proposed = self._propose_result(api_key, api_version, request, records)
            if isinstance(proposed, _Refused):
                return proposed.response
            last_offset = proposed if proposed is not None else last_offset
        return await self._answer_once_committed(
            api_key, api_version, request, last_offset, run.response()
        )

    def _propose_result(
        self, api_key: int, api_version: int, request: Any, records: Sequence[MetadataRecord]
    ) -> int | _Refused | None:
        """Propose ``records``: the offset of the last, None if there are none, or the
        refusal to answer if this controller is no longer the leader."""
        if not records:
            return None
        try:
            return self._propose(records)
        except NotLeaderError:
            self._deactivate()
            return _Refused(refusal(api_key, api_version, request, ErrorCode.not_controller))

    async def _answer_once_committed(
        self,
        api_key: int,
        api_version: int,
        request: Any,
        last_offset: int | None,
        response: object,
    ) -> object:
        """``response`` once what it rests on is committed: the records proposed for it
        (up to ``last_offset``), or, with none, everything proposed so far."""
        if last_offset is not None:
            if ANSWER_BEFORE_COMMIT in self.bugs or (
                CONFIG_ANSWER_BEFORE_COMMIT in self.bugs
                and api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS)
            ):
                return response
        else:
            # An answer read from the working image (TOPIC_ALREADY_EXISTS, a heartbeat that
            # changes nothing) may rest on records not yet committed: like Kafka, wait for
            # everything proposed so far, or a lost create could have been reported as
            # existing. (That includes a control record the quorum appended for it: an
            # upgraded kraft.version.)
            self._skip_raft_offsets()
            assert self._working is not None
            last_offset = self._working.offset - 1
            if last_offset < self.loader.image.offset or ANSWER_BEFORE_COMMIT in self.bugs:
                return response
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(last_offset, done))
        try:
            await done
        except _NotController:
            return refusal(api_key, api_version, request, ErrorCode.not_controller)
        return response

    def _context(self) -> ControllerContext:
        assert self._working is not None
        self._skip_raft_offsets()
        assert self._working is not None
        return ControllerContext(
            self._working, self.config, self.runtime.rng, self.bugs, raft=self.raft
        )

    def _skip_raft_offsets(self) -> None:
        """Move the working image's next offset past the control records the quorum
        appended itself (AddRaftVoter, RemoveRaftVoter, a kraft.version upgrade): they take
        offsets of the metadata log too, and the next proposal's offsets (a broker epoch is
        one) must be the ones it really gets, as Kafka's OffsetControlManager tracks them."""
        working = self._working
        if working is None or self.raft.core is None or self.raft.role is not Role.LEADER:
            return
        next_offset = self.raft.next_offset()
        if next_offset > working.offset:
            self._working = dataclasses.replace(working, offset=next_offset)

    def _register(self, ctx: ControllerContext, request: Any, version: int) -> ControllerResult:
        # The broker epoch is the offset its RegisterBroker record lands at: the working
        # image's offset, since everything this controller proposed is in that image (the
        # raft log's own end may still lag: proposals of one loop turn are appended together).
        result = broker_registration(ctx, request, version, ctx.image.offset)
        if result.records:
            self._sessions[request.broker_id] = asyncio.get_running_loop().time()
        return result

    def _heartbeat(self, ctx: ControllerContext, request: Any, version: int) -> ControllerResult:
        broker = ctx.image.cluster.brokers.get(request.broker_id)
        if broker is not None and broker.epoch == request.broker_epoch:
            self._sessions[broker.broker_id] = asyncio.get_running_loop().time()
        return broker_heartbeat(ctx, self.loader.image, request, version)

    def _unregister(self, ctx: ControllerContext, request: Any, version: int) -> ControllerResult:
        self._sessions.pop(request.broker_id, None)
        return unregister_broker(ctx, request, version)

    def _propose(self, records: Sequence[MetadataRecord]) -> int:
        """Replay ``records`` into the working image and append them (NotLeaderError if no
        longer leader); the offset of the last. Records beyond one batch's limits (count or
        bytes) go in several batches, in order, as Kafka's non-atomic controller results do:
        every prefix replays to a legal image (a big topic may be seen with some of its
        partitions first), and the answer waits for the last batch to commit."""
        self._skip_raft_offsets()
        assert self._working is not None
        next_offset = self._working.offset
        delta = MetadataDelta(self._working)
        for record in records:
            delta.replay(record)  # a record illegal here is a controller bug: fail loudly
        now_ms = self.runtime.clock.now_ms()
        values = [Record(None, encode_record(record), now_ms) for record in records]
        last_offset = next_offset - 1
        for proposal in split_proposal(values, MAX_PROPOSAL_RECORDS, MAX_BATCH_BYTES):
            last_offset = self.raft.propose(proposal)
        assert last_offset == next_offset + len(records) - 1, (
            f"records proposed at {next_offset} ended at {last_offset}: something else wrote "
            "to the metadata log"
        )
        self._working = delta.apply(last_offset + 1, self._epoch)
        self._last_write_s = asyncio.get_running_loop().time()
        return last_offset

    # ---- RaftListener --------------------------------------------------------------------------
    def handle_commit(self, batch: CommittedBatch) -> None:
        """Committed records reach the controller through the loader's images instead."""

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        """Snapshots reach the controller through the loader's images instead."""

    def handle_event(self, event: Event) -> None:
        if isinstance(event, RoleChanged):
            if event.role is not Role.LEADER or event.epoch != self._epoch:
                self._deactivate()
            self._maybe_activate()

    # ---- MetadataPublisher ---------------------------------------------------------------------
    def on_image(self, before: MetadataImage, after: MetadataImage, from_snapshot: bool) -> None:
        if self._active:
            if from_snapshot or after.epoch != self._epoch:
                self._deactivate()  # another leader's records: ours will not commit
            else:
                self._committed(after)
        self._maybe_activate()

    def _committed(self, image: MetadataImage) -> None:
        assert self._working is not None
        while self._pending and self._pending[0].last_offset < image.offset:
            pending = self._pending.popleft()
            if not pending.done.done():
                pending.done.set_result(None)
        if image.offset >= self._working.offset:
            self._working = image  # the same state, now committed

    # ---- activation ----------------------------------------------------------------------------
    def _maybe_activate(self) -> None:
        raft = self.raft
        if self._active or self._closed or raft.core is None or raft.role is not Role.LEADER:
            return
        image = self.loader.image
        if image.epoch != raft.epoch:
            return  # our LeaderChange has not been applied yet
        loop = asyncio.get_running_loop()
        now = loop.time()
        self._active = True
        self._epoch = raft.epoch
        self._working = image
        self._sessions = {broker_id: now for broker_id in image.cluster.brokers}
        self._last_write_s = now
        logger.info(
            "[QuorumController id=%d] Becoming the active controller at epoch %d (offset %d)",
            self.config.node_id,
            self._epoch,
            image.offset,
        )
        if METADATA_VERSION_FEATURE not in image.features and self.config.bootstrap_records:
            try:
                self._propose(self.config.bootstrap_records)
            except NotLeaderError:
                self._deactivate()
                return
        self._timer = loop.create_task(self._run_timer())
        self._timer.add_done_callback(self._timer_done)

    def _deactivate(self) -> None:
        if not self._active:
            return
        logger.info(
            "[QuorumController id=%d] No longer the active controller (epoch %d)",
            self.config.node_id,
            self._epoch,
        )
        self._active = False
        self._working = None
        self._sessions = {}
        pending, self._pending = self._pending, collections.deque()
        for item in pending:
            if not item.done.done():
                item.done.set_exception(_NotController())
        timer, self._timer = self._timer, None
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()

    # ---- timers --------------------------------------------------------------------------------
    async def _run_timer(self) -> None:
        """Fence brokers whose session expired; write a NoOp when idle (KIP-835); give
        partitions back to their preferred leaders now and then (auto.leader.rebalance)."""
        loop = asyncio.get_running_loop()
        session_s = self.config.session_timeout_ms / 1000
        idle_s = self.config.max_idle_interval_ms / 1000
        balance_s = self.config.leader_imbalance_check_interval_ms / 1000
        next_balance_s = loop.time() + balance_s
        while self._active:
            now = loop.time()
            try:
                self._fence_expired(now, session_s)
                if self.config.auto_leader_rebalance_enable and now >= next_balance_s:
                    next_balance_s = now + balance_s
                    changes = preferred_leader_changes(self._context(), MAX_ELECTIONS_PER_IMBALANCE)
                    if changes:
                        logger.info(
                            "[QuorumController id=%d] Electing preferred leaders of %d partitions",
                            self.config.node_id,
                            len(changes),
                        )
                        self._propose(changes)
                if idle_s > 0 and now - self._last_write_s >= idle_s:
                    self._propose([NoOp()])
            except NotLeaderError:
                self._deactivate()
                return
            # A session that starts while we sleep expires no earlier than now + session_s.
            deadlines = [now + session_s]
            if self.config.auto_leader_rebalance_enable:
                deadlines.append(next_balance_s)
            deadlines.extend(seen + session_s for seen in self._expirable_sessions())
            if idle_s > 0:
                deadlines.append(self._last_write_s + idle_s)
            await asyncio.sleep(max(min(deadlines) - loop.time(), 0.001))

    def _timer_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "[QuorumController id=%d] The controller timer failed",
                self.config.node_id,
                exc_info=task.exception(),
            )

    def _expirable_sessions(self) -> list[float]:
        assert self._working is not None
        brokers = self._working.cluster.brokers
        return [
            seen
            for broker_id, seen in self._sessions.items()
            if broker_id in brokers and not brokers[broker_id].fenced
        ]

    def _fence_expired(self, now: float, session_s: float) -> None:
        """Fence every unfenced broker not heard from within the session timeout, one
        proposal each (each sees the leaderships the previous one moved)."""
        while True:
            assert self._working is not None
            brokers = self._working.cluster.brokers
            expired = [
                broker_id
                for broker_id, broker in sorted(brokers.items())
                if not broker.fenced
                and now - self._sessions.setdefault(broker_id, now) >= session_s
            ]
            if not expired:
                return
            logger.info(
                "[QuorumController id=%d] Fencing broker %d: no heartbeat for %d ms",
                self.config.node_id,
                expired[0],
                int((now - self._sessions[expired[0]]) * 1000),
            )
            self._propose(fence_broker(self._context(), expired[0]))

    async def close(self) -> None:
        """Stop: pending requests fail with NOT_CONTROLLER."""
        self._closed = True
        timer = self._timer
        self._deactivate()
        if timer is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await timer
