"""One kraft-py node, assembled from its configuration: controller, broker, or both.

Every node replicates ``__cluster_metadata`` through a RaftNode (a voter when it is a
controller, an observer when it is only a broker) and replays it with a MetadataLoader into
published images. A controller also runs the QuorumController and serves the controller
listener (the quorum's RPCs plus the controller APIs); a broker registers and heartbeats with
the active controller and, once unfenced, opens its client listeners (Kafka opens them only
when the broker can serve: a client never sees a broker that has not caught up).

The same assembly runs under ``kraft-server start`` and inside the simulator: everything it
touches goes through the Runtime and asyncio, and hosts are whatever the listeners say.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import logging
import os
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker.authorization import RequestAuthorizer, guarded
from broker.bugs import BROKER_BUGS
from broker.cluster_metadata import describe_controllers_response
from broker.controller_channel import ControllerChannel
from broker.envelope import envelope_api
from broker.fetch_session import FetchSessionCache
from broker.group.apis import GroupApis
from broker.group.config import GroupCoordinatorConfig
from broker.group.coordinator import GroupCoordinator
from broker.kafka_apis import KafkaApis, loop_time, with_features
from broker.lifecycle import BrokerLifecycleManager, BrokerState
from broker.log_admin import log_admin_apis
from broker.log_dirs import LogDirReport
from broker.metrics import BrokerMetricsPublisher
from broker.producer_ids import ProducerIdManager
from broker.quotas import (
    QuotaConfig,
    QuotaManager,
    controller_quota_exempt,
    forwarding_client_id,
)
from broker.replica_manager import (
    DuplicateListener,
    HighWatermarkListener,
    ReplicaManager,
    ReplicationConfig,
)
from broker.security import Authenticated, authenticating, served_apis
from broker.txn.apis import TxnApis
from broker.txn.config import TransactionCoordinatorConfig
from broker.txn.coordinator import TransactionCoordinator
from kraft.bootstrap import read_bootstrap, read_bootstrap_quorum
from kraft.config import ServerConfig
from kraft.metrics import NodeMetrics
from kraft.storage import metadata_directory_id
from log.config import LogConfig, LogManagerConfig
from log.descriptors import DescriptorReserve, default_reserve
from log.manager import METADATA_PARTITION_DIR, LogManager
from log.rate_limited_log import RateLimitedLog
from log.records import Record
from log.runtime import Runtime
from metadata.controller.internal_topics import internal_creator_client_id
from metadata.controller.quorum_controller import (
    CONTROLLER_BUGS,
    ControllerConfig,
    QuorumController,
)
from metadata.loader import MetadataLoader, MetadataPublisher
from metadata.records import Listener
from protocol.api_keys import ApiKey
from protocol.api_table import (
    API_VERSIONS,
    BROKER,
    CLUSTER_DESCRIBE,
    CONTROLLER,
    Api,
    ApiRequest,
    ApiTable,
    ServedApis,
)
from protocol.connect import Connector
from protocol.sasl import ScramCredential
from protocol.security import ClientSecurity, SecurityProtocol
from protocol.server import Handler, NetworkLimits, RequestBytesBudget, serve_connection
from protocol.tls import server_context
from raft.core import Event, RaftConfig, Role, RoleChanged, Truncated
from raft.disk_log import DiskLog
from raft.driver import NODE_BUGS as RAFT_BUGS
from raft.driver import CommittedBatch, RaftListener, RaftNode, RaftNodeConfig
from raft.snapshot import SnapshotId

logger = logging.getLogger("kraft.node")
_limited = RateLimitedLog(logger)
CONTROLLED_SHUTDOWN_TIMEOUT_S = 30.0
# How a listener is opened: asyncio.start_server (also the simulator's), or the real
# process's broker.acceptor.start_acceptor with its out-of-descriptors backoff.
Listen = Callable[..., Awaitable[Any]]
CONNECTIONS_CLOSE_S = 1.0


class FatalStorageError(OSError):
    """The node cannot go on: its metadata log, or every log dir, failed (disk full, I/O
    error). Kafka halts the broker then; here the process stops with this one line. An
    OSError, as what it wraps: a node halting on a failed disk is doing its job (the
    simulator restarts it), not crashing."""


class _RoleLogger:
    """Logs the quorum's role changes the way operators read Kafka's."""

    def __init__(self, node_id: int) -> None:
        self._node_id = node_id

    def handle_commit(self, batch: CommittedBatch) -> None:
        return None

    def handle_load_snapshot(self, snapshot: SnapshotId, records: list[Record]) -> None:
        logger.info(
            "[RaftManager id=%d] Loaded snapshot %s (%d records)",
            self._node_id,
            snapshot.file_name,
            len(records),
        )

    def handle_event(self, event: Event) -> None:
        if isinstance(event, RoleChanged):
            logger.info(
                "[RaftManager id=%d] Completed transition to %s(epoch=%d, leaderId=%d)",
                self._node_id,
                event.role.value.capitalize(),
                event.epoch,
                event.leader_id,
            )
        elif isinstance(event, Truncated):
            logger.warning(
                "[RaftManager id=%d] Truncated the metadata log from %d to %d",
                self._node_id,
                event.from_offset,
                event.to_offset,
            )


class KraftNode:
    """A running node; ``start``, then ``wait`` or ``shutdown``."""

    def __init__(
        self,
        runtime: Runtime,
        config: ServerConfig,
        cluster_id: str,
        *,
        bugs: frozenset[str] = frozenset(),
        publishers: Sequence[MetadataPublisher] = (),
        listen: Listen = asyncio.start_server,
        raft_listeners: Sequence[RaftListener] = (),
        metrics: NodeMetrics | None = None,
        descriptor_baseline: int = 0,
        high_watermark_listener: HighWatermarkListener | None = None,
        duplicate_listener: DuplicateListener | None = None,
    ) -> None:
        """``descriptor_baseline``: descriptors the process held at start outside the
        filesystem seam (kraft/server.py measures it; log/descriptors.py).
        ``high_watermark_listener``: told of each leader high watermark move (the
        simulator's committed-on-ISR check; None in production).
        ``duplicate_listener``: told of each produce answered as a duplicate (the
        simulator's duplicate-offset check; None in production)."""
        self._high_watermark_listener = high_watermark_listener
        self._duplicate_listener = duplicate_listener
        self.runtime = runtime
        self.config = config
        self.cluster_id = cluster_id
        self.bugs = bugs
        self._publishers = tuple(publishers)
        self._listen = listen
        # queued.max.request.bytes, once for the client listeners and once for the controller
        # listener (Kafka's broker and controller SocketServers each have their pool), so
        # clients cannot starve the quorum of it.
        queued = config.queued_max_request_bytes
        self._budgets = {
            plane: RequestBytesBudget(queued) if queued > 0 else None
            for plane in ("broker", "controller")
        }
        self._raft_listeners = tuple(raft_listeners)  # after the loader, e.g. a checker
        # What Prometheus scrapes (kraft/metrics.py); None counts nothing at all.
        self.metrics = metrics
        if metrics is not None:
            metrics.attach(self)
            metrics.budgets = self._budgets
        reserve = LogManagerConfig.from_properties(dict(config.model_extra or {}))
        reserve_size = reserve.open_files_reserve
        if reserve_size < 0:
            reserve_size = default_reserve(runtime.fs.descriptor_limit())
        # New partitions and client connections stop short of it; checkpoints, the metadata
        # log and segment rolls draw on it.
        self.descriptors = DescriptorReserve(
            runtime.fs,
            reserve_size,
            baseline=descriptor_baseline,
            sources=[lambda: len(self._connections)],
        )
        # Each listener's TLS and SASL (kraft/security.py), and how this node connects to
        # the controllers and, as a follower, to the other brokers.
        self.security = config.security()
        self._controller_connector = _connector(self.security.controller_client)
        self._inter_broker_connector = _connector(self.security.inter_broker_client)
        self.metadata_dir = os.path.join(config.metadata_dir, METADATA_PARTITION_DIR)
        self.is_controller = "controller" in config.process_roles
        self.is_broker = "broker" in config.process_roles
        self.log: DiskLog | None = None
        self.raft: RaftNode | None = None
        self.loader: MetadataLoader | None = None
        self.controller: QuorumController | None = None
        self.lifecycle: BrokerLifecycleManager | None = None
        self.apis: dict[str, KafkaApis] = {}  # by listener name
        self.served: dict[str, ServedApis] = {}  # each client listener's table, by name
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.quotas: QuotaManager | None = None  # the broker's client quotas
        self._controller_quotas: QuotaManager | None = None  # the controller listener's
        self.groups: GroupCoordinator | None = None
        self._group_apis: GroupApis | None = None
        self._controller_served: ServedApis | None = None  # the controller listener's table
        self.transactions: TransactionCoordinator | None = None
        self._controller_handle: Handler | None = None  # its dispatch, measured with metrics
        self._channel: ControllerChannel | None = None
        self._internal_channel: ControllerChannel | None = None
        self._forwarding_channel: ControllerChannel | None = None
        self._servers: list[Any] = []  # asyncio.Server or broker.acceptor.Acceptor
        # Handlers of the connections our listeners accepted: a server's close() leaves
        # them open, and a handler still pending when the loop ends is cancelled, which
        # asyncio 3.11 reports as a traceback ("Exception in callback ... callback").
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._fatal: BaseException | None = None  # what stopped the node, if anything did
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        # When the broker opened its listeners: its broker epoch, its replayed metadata
        # offset, and the (want_fence, offset) of the heartbeat the controller unfenced.
        self.lifecycle_ready: asyncio.Future[tuple[int, int, tuple[bool, int] | None]] | None = None

    # ---- start -----------------------------------------------------------------------------
    async def start(self) -> None:
        runtime, config = self.runtime, self.config
        self.log = await DiskLog.open(runtime, self.metadata_dir, bugs=self.bugs)
        quorum = read_bootstrap_quorum(runtime.fs, config.metadata_dir)
        raft = RaftNode(
            runtime,
            RaftNodeConfig(
                node_id=config.node_id,
                voters=config.controller_quorum_voters,
                cluster_id=self.cluster_id,
                metadata_dir=self.metadata_dir,
                raft=RaftConfig(
                    election_timeout_ms=config.election_timeout_ms,
                    fetch_timeout_ms=config.fetch_timeout_ms,
                    election_backoff_max_ms=config.election_backoff_max_ms,
                    request_timeout_ms=config.request_timeout_ms,
                ),
                bugs=self.bugs & RAFT_BUGS.keys(),
                directory_id=metadata_directory_id(runtime.fs, config.metadata_dir),
                initial_voters=quorum.voters,
                initial_kraft_version=quorum.kraft_version or 0,
                bootstrap_servers=tuple(config.controller_quorum_bootstrap_servers),
                controller_listener=config.controller_listener_names[0],
                connector=self._controller_connector,
            ),
            self.log,
        )
        self.raft = raft
        self.loader = MetadataLoader(
            snapshotter=raft.snapshot,
            max_bytes_between_snapshots=config.snapshot_max_bytes,
            max_interval_ms=config.snapshot_max_interval_ms,
            now_ms=runtime.clock.now_ms,
        )
        for publisher in self._publishers:
            self.loader.add_publisher(publisher)
        raft.add_listener(self.loader)
        raft.add_listener(_RoleLogger(config.node_id))
        for listener in self._raft_listeners:
            raft.add_listener(listener)
        if self.metrics is not None and self.metrics.raft is not None:
            raft.add_listener(self.metrics.raft)
        if self.is_controller:
            self.controller = QuorumController(
                runtime,
                raft,
                self.loader,
                ControllerConfig(
                    node_id=config.node_id,
                    cluster_id=self.cluster_id,
                    num_partitions=config.num_partitions,
                    default_replication_factor=config.default_replication_factor,
                    session_timeout_ms=config.session_timeout_ms,
                    max_idle_interval_ms=config.max_idle_interval_ms,
                    unclean_leader_election_enable=config.unclean_leader_election_enable,
                    min_insync_replicas=int(
                        str((config.model_extra or {}).get("min.insync.replicas", 1))
                    ),
                    auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
                    leader_imbalance_check_interval_ms=(
                        config.leader_imbalance_check_interval_seconds * 1000
                    ),
                    bootstrap_records=tuple(read_bootstrap(runtime.fs, config.metadata_dir)),
                    acls_enabled=config.authorizer() is not None,
                ),
                bugs=self.bugs & CONTROLLER_BUGS.keys(),
            )
        await raft.start()
        if self.is_controller:
            # Kafka's controller enforces client quotas too, with quota managers of its own
            # (ControllerApis throttles every response but the quorum's RPCs and
            # AlterPartition, and charges CreateTopics, CreatePartitions and DeleteTopics to
            # controller_mutation_rate): a client that talks to a controller directly
            # (--bootstrap-controller) is held as on a broker, and so is a broker's client
            # whose request comes in an Envelope (broker/envelope.py), charged here as the
            # client, whichever broker it reached. The Envelopes themselves are exempt.
            loader = self.loader
            controller_quotas = QuotaManager(
                lambda: loader.image,
                QuotaConfig(config.quota_window_num, config.quota_window_size_seconds),
                runtime.busy_clock,
            )
            exempt = controller_quota_exempt(self._authorizer())
            self._controller_served = self._controller_table(
                controller_quotas.charging_mutations(
                    self._controller_entries(), exempt, config.num_partitions
                )
            )
            self._controller_handle = controller_quotas.enforcing(
                self._measured(self._controller_served.handle), exempt
            )
            self._controller_quotas = controller_quotas
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._run_quorum(raft)))
        if self.is_controller:
            endpoint = config.controller_endpoint()
            self._servers.append(
                await self._listen(
                    self._serve_controller,
                    endpoint.host or None,
                    endpoint.port,
                    **self._tls_of(endpoint.name),
                )
            )
            logger.info(
                "[ControllerServer id=%d] Serving %s://%s:%d (cluster %s, metadata log end %d)",
                config.node_id,
                self._describe(endpoint.name),
                endpoint.host,
                endpoint.port,
                self.cluster_id,
                self.log.end_offset(),
            )
        if self.is_broker:
            self.lifecycle_ready = loop.create_future()
            self._tasks.append(loop.create_task(self._run_broker()))

    async def _run_broker(self) -> None:
        """Register, wait to be unfenced, then open the client listeners."""
        runtime, config = self.runtime, self.config
        assert self.loader is not None
        incarnation = uuid.UUID(int=runtime.rng.getrandbits(128), version=4)
        self._channel = ControllerChannel(
            config.controller_addresses(),
            f"broker-{config.node_id}",
            runtime.rng,
            connector=self._controller_connector,
        )
        listeners = tuple(
            Listener(e.name, e.host, e.port, int(self.security.protocol_of(e.name)))
            for e in config.advertised_broker_endpoints()
        )
        loader = self.loader
        # The partition logs are recovered before the broker registers (Kafka's RECOVERY).
        properties = dict(config.model_extra or {})
        log_config = LogConfig.from_properties(properties)
        self.logs = LogManager(
            runtime,
            list(config.log_dirs),
            log_config,
            manager_config=LogManagerConfig.from_properties(properties),
            descriptors=self.descriptors,
        )
        await self.logs.startup()
        broker_epoch = lambda: self.lifecycle.broker_epoch if self.lifecycle else -1  # noqa: E731
        replication = ReplicationConfig.from_properties(
            properties, config.inter_broker_listener_name
        )
        replication = dataclasses.replace(
            replication,
            fetcher=dataclasses.replace(
                replication.fetcher, connector=self._inter_broker_connector
            ),
        )
        replicas = self.replicas = ReplicaManager(
            config.node_id,
            self.logs,
            log_config,
            runtime.rng,
            runtime.clock,
            producer_id_expiration_ms=config.producer_id_expiration_ms,
            config=replication,
            channel=self._channel,
            broker_epoch=broker_epoch,
            bugs=self.bugs & BROKER_BUGS.keys(),
            high_watermark_listener=self._high_watermark_listener,
            duplicate_listener=self._duplicate_listener,
        )
        # Retention never deletes past what is committed.
        self.logs.high_watermark_provider = replicas.high_watermark_of
        loader.add_publisher(replicas)
        if self.metrics is not None:
            replicas.topic_metrics = self.metrics.topics
            self.metrics.publisher = BrokerMetricsPublisher(config.node_id, self.metrics.topics)
            loader.add_publisher(self.metrics.publisher)
        self.lifecycle = BrokerLifecycleManager(
            runtime,
            config.node_id,
            self.cluster_id,
            incarnation,
            listeners,
            config.broker_rack,
            self._channel,
            metadata_offset=lambda: loader.image.offset,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            previous_broker_epoch=self.logs.previous_broker_epoch,
            log_dirs=LogDirReport(
                config.node_id, self.logs, self._log_dir_ids(config), lambda: loader.image
            ),
        )
        lifecycle_manager, logs = self.lifecycle, self.logs

        def dir_offline(_: str) -> None:
            if logs.live_log_dirs:  # with none left the node stops instead (_watch_log_dirs)
                lifecycle_manager.log_dir_failed()

        self.logs.on_dir_offline = dir_offline
        replicas.log_dir_mover.on_moved = lifecycle_manager.replica_moved
        await self.lifecycle.start()
        await self.lifecycle.wait_for_state(BrokerState.RUNNING)
        # Caught up with the metadata log: the partitions assigned here get their logs
        # before any client can ask for them.
        lifecycle = self.lifecycle
        producer_ids = ProducerIdManager(
            config.node_id, lambda: lifecycle.broker_epoch, self._channel
        )
        reconciling = replicas.start(loader.image)
        await replicas.wait_reconciled(loader.image.offset)
        groups = self.groups = GroupCoordinator(
            config.node_id,
            replicas,
            GroupCoordinatorConfig.from_properties(properties),
            runtime.rng,
            runtime.clock,
            bugs=self.bugs & BROKER_BUGS.keys(),
        )
        loader.add_publisher(groups)
        groups.start(loader.image)
        transactions = self.transactions = TransactionCoordinator(
            config.node_id,
            replicas,
            producer_ids,
            TransactionCoordinatorConfig.from_properties(properties),
            runtime.clock,
            connector=self._inter_broker_connector,
        )
        loader.add_publisher(transactions)
        transactions.start(loader.image)
        # The broker's own requests (creating __consumer_offsets) go under their own client
        # id, naming this broker and its incarnation id, which the controller lets create
        # internal topics (clients' forwarded ones not; metadata/controller/internal_topics.py).
        internal = self._internal_channel = ControllerChannel(
            config.controller_addresses(),
            internal_creator_client_id(config.node_id, incarnation),
            runtime.rng,
            connector=self._controller_connector,
        )
        group_apis = self._group_apis = GroupApis(
            groups,
            lambda: loader.image,
            lambda request: internal.send(request, CONTROLLED_SHUTDOWN_TIMEOUT_S),
            transactions,
        )
        verifier = replicas.txn_verifier

        async def add_to_transaction(
            txn_id: str, producer_id: int, epoch: int, topic: str, partition: int
        ) -> ErrorCode:
            return await verifier.verify(txn_id, producer_id, epoch, topic, partition, add=True)

        txn_apis = TxnApis(
            transactions, groups, lambda: loader.image, runtime.clock, add_to_transaction
        )
        assert self.lifecycle_ready is not None
        self.lifecycle_ready.set_result(
            (self.lifecycle.broker_epoch, loader.image.offset, self.lifecycle.unfenced_by)
        )
        # One quota manager per broker: a client's rate is the same on every listener.
        quotas = self.quotas = QuotaManager(
            lambda: loader.image,
            QuotaConfig(config.quota_window_num, config.quota_window_size_seconds),
            runtime.busy_clock,
            self.bugs,
        )
        fetch_sessions = FetchSessionCache(
            config.max_incremental_fetch_session_cache_slots, runtime.rng, loop_time
        )
        if self.metrics is not None:
            self.metrics.fetch_sessions = fetch_sessions
        # Clients' admin requests reach the controller over a connection of their own, as
        # Kafka's forwarding manager has its own channel: the controller answers one
        # request of a connection at a time, and a CreateTopics naming 200,000 topics must
        # not hold up this broker's heartbeats behind it (it would be fenced).
        forwarding = self._forwarding_channel = ControllerChannel(
            config.controller_addresses(),
            forwarding_client_id(config.node_id),
            runtime.rng,
            connector=self._controller_connector,
        )
        authorizer = self._authorizer()
        for endpoint in config.broker_endpoints():
            # Each listener answers Metadata with the brokers' endpoints of its own name,
            # as Kafka does: a client that came in on EXTERNAL is told EXTERNAL addresses.
            apis = KafkaApis(
                config.node_id,
                self.cluster_id,
                endpoint.name,
                lambda: loader.image,
                forwarding,
                runtime.rng,
                replicas=replicas,
                fetch_sessions=fetch_sessions,
                producer_ids=producer_ids,
                transactions=txn_apis,
                on_offsets_marker=groups.complete_transaction,
                auto_create_topics=config.auto_create_topics_enable,
                descriptors_free=functools.partial(
                    self.descriptors.admits_logs, config.num_partitions
                ),
                acls_enabled=authorizer is not None,
                kraft_version=self.raft.kraft_version if self.raft is not None else None,
            )
            self.apis[endpoint.name] = apis
            entries = [
                *apis.apis(),
                *group_apis.apis(endpoint.name),
                *txn_apis.apis(),
                *log_admin_apis(replicas),
            ]
            served = self.served[endpoint.name] = ApiTable(guarded(entries, authorizer)).served(
                BROKER
            )
            handle = quotas.enforcing(self._measured(served.handle))
            self._servers.append(
                await self._listen(
                    functools.partial(
                        self._serve_broker, served, handle, self._limits(endpoint.name)
                    ),
                    endpoint.host or None,
                    endpoint.port,
                    **self._tls_of(endpoint.name),
                )
            )
            logger.info(
                "[BrokerServer id=%d] Serving %s://%s:%d",
                config.node_id,
                self._describe(endpoint.name),
                endpoint.host,
                endpoint.port,
            )
        # Both run until close(); a failure of either fails the node, loudly.
        watching = asyncio.get_running_loop().create_task(self._watch_log_dirs(self.logs))
        try:
            await asyncio.wait([reconciling, watching], return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
        for task in (watching, reconciling):
            if task.done() and not task.cancelled():
                task.result()

    async def _run_quorum(self, raft: RaftNode) -> None:
        try:
            await raft.wait()
        except OSError as error:
            self._fatal = error
            if error.errno in (errno.EMFILE, errno.ENFILE):
                raise  # not the disk: kraft.server says how to raise the open-files limit
            raise FatalStorageError(
                f"the metadata log in {self.metadata_dir} failed: {error}"
            ) from error

    def _log_dir_ids(self, config: ServerConfig) -> dict[str, uuid.UUID]:
        """Each log dir's ``directory.id`` (written by ``kraft-server format``; a dir never
        formatted, as the simulator's, has none and is not reported to the controller)."""
        ids = {d: metadata_directory_id(self.runtime.fs, d) for d in config.log_dirs}
        return {d: dir_id for d, dir_id in ids.items() if dir_id is not None}

    async def _watch_log_dirs(self, logs: LogManager) -> None:
        await logs.all_dirs_offline.wait()
        self._fatal = next(iter(logs.offline_dirs.values()))
        failed = "; ".join(f"{d}: {e}" for d, e in logs.offline_dirs.items())
        raise FatalStorageError(f"every log dir has failed ({failed})")

    # ---- listeners --------------------------------------------------------------------------
    def _tls_of(self, listener: str) -> dict[str, Any]:
        """The listen function's ``ssl`` argument for a TLS listener (none for the rest, so
        the simulator's listen is called exactly as before)."""
        security = self.security.listeners.get(listener)
        if security is None or security.tls is None:
            return {}
        return {"ssl": server_context(security.tls)}

    def _describe(self, listener: str) -> str:
        """A listener's name as the log shows it: with its protocol and mechanisms when it
        is not PLAINTEXT (``SASL_SSL(SASL_SSL; SCRAM-SHA-512)``), so the log says what is
        really served."""
        security = self.security.listeners.get(listener)
        if security is None or security.protocol is SecurityProtocol.PLAINTEXT:
            return listener
        mechanisms = f"; {','.join(security.mechanisms)}" if security.mechanisms else ""
        return f"{listener}({security.protocol.name}{mechanisms})"

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        """A user's SCRAM credential from the metadata image (UserScramCredential records)."""
        if self.loader is None:
            return None
        return self.loader.image.scram_credentials.get((user, mechanism))

    def _secured(
        self, listener: str, served: ServedApis, handle: Handler, writer: asyncio.StreamWriter
    ) -> tuple[Authenticated | None, dict[int, tuple[int, int]]]:
        """A connection's ``handle`` (the listener's table, measured) behind the listener's
        authentication, and the versions it decodes (SASL's too on a SASL listener)."""
        security = self.security.listeners[listener]
        authenticated = authenticating(
            handle,
            security,
            writer,
            self.scram_credential,
            self.config.socket_request_max_bytes,
        )
        return authenticated, served_apis(security, served.versions)

    def _limits(self, listener: str) -> NetworkLimits:
        config = self.config
        return NetworkLimits(
            socket_request_max_bytes=config.socket_request_max_bytes,
            connections_max_idle_ms=config.connections_max_idle_ms,
            listener=listener,
        )

    async def _serve_controller(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        listener = self.config.controller_endpoint().name
        with self._tracked(writer, listener):
            served, handle = self._controller_served, self._controller_handle
            assert served is not None and handle is not None
            # Kafka's controller feeds IP quotas to its own socket server's connection
            # quotas (ControllerServer's ClientQuotaMetadataManager), so a connection flood
            # at the controller port is held like one at a broker's.
            if await self._over_connection_rate(writer, listener, self._controller_quotas):
                writer.transport.abort()
                return
            authenticated, versions = self._secured(listener, served, handle, writer)
            if authenticated is None:
                writer.transport.abort()
                return
            await serve_connection(
                reader,
                writer,
                authenticated.handle,
                versions,
                limits=self._limits(listener),
                budget=self._budgets["controller"],
                frame_limit=authenticated.frame_limit,
            )

    def _controller_entries(self) -> list[Api]:
        """The controller listener's APIs: the quorum's RPCs, the controller's APIs, and
        DescribeCluster for admin clients bootstrapped from controllers (KIP-919)."""
        assert self.raft is not None and self.controller is not None
        describe = self._describe_controllers
        api_versions = self._controller_api_versions
        return [
            Api(ApiKey.API_VERSIONS, API_VERSIONS.versions, api_versions, CONTROLLER, ()),
            *self.raft.apis(),
            *self.controller.apis(),
            Api(ApiKey.DESCRIBE_CLUSTER, (1, 1), describe, CONTROLLER, (CLUSTER_DESCRIBE,)),
            envelope_api(self._forwarded_table),
        ]

    def _forwarded_table(self) -> ServedApis:
        """The controller listener's table, which handles the requests brokers forward in
        Envelopes as their clients (broker/envelope.py)."""
        served = self._controller_served
        assert served is not None  # built before the listener opens
        return served

    def _controller_table(self, entries: list[Api]) -> ServedApis:
        """The controller listener's table: ``entries`` behind the authorizer."""
        return ApiTable(guarded(entries, self._authorizer())).served(CONTROLLER)

    async def _controller_api_versions(self, request: ApiRequest) -> object:
        """ApiVersions on the controller listener: its APIs and, from v3 (KIP-584), the
        supported and finalized features as this controller's metadata image has them,
        with kraft.version from the quorum's log, as Kafka's controller answers
        (``kafka-features --bootstrap-controller describe`` reads them here)."""
        response = request.apis.api_versions_response(request.api_version)
        if request.api_version < 3 or self.loader is None or self.raft is None:
            return response
        return with_features(response, self.loader.image, self.raft.kraft_version())

    def _authorizer(self) -> RequestAuthorizer | None:
        """The authorizer over this node's metadata image, when authorizer.class.name is
        set (docs/acls.md); None serves every request unchecked."""
        settings = self.config.authorizer()
        if settings is None:
            return None
        loader = self.loader
        assert loader is not None
        return RequestAuthorizer(
            settings,
            lambda: loader.image,
            auto_create_topics=self.config.auto_create_topics_enable,
            bugs=self.bugs,
        )

    async def _describe_controllers(self, request: ApiRequest) -> object:
        assert self.raft is not None
        return describe_controllers_response(
            request.body, self.cluster_id, self.raft.leader_id, self.raft.voter_addresses()
        )

    async def _serve_broker(
        self,
        served: ServedApis,
        handle: Handler,
        limits: NetworkLimits,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        if not self.descriptors.admits(1):
            # At the descriptor reserve: a client connection would eat into what the node
            # needs for itself. Closed at once; the client retries (Kafka's Acceptor stops
            # accepting when out of descriptors).
            _limited.log(
                "connection-reserve",
                logging.WARNING,
                "[SocketServer listener=%s] Closing new connections: %d descriptors are open "
                "of %d, %d kept in reserve (open.files.reserve)",
                limits.listener,
                self.descriptors.in_use(),
                self.runtime.fs.descriptor_limit(),
                self.descriptors.reserve,
            )
            writer.transport.abort()
            return
        with self._tracked(writer, limits.listener):
            if await self._over_connection_rate(writer, limits.listener, self.quotas):
                writer.transport.abort()
                return
            authenticated, versions = self._secured(limits.listener, served, handle, writer)
            if authenticated is None:
                writer.transport.abort()
                return
            await serve_connection(
                reader,
                writer,
                authenticated.handle,
                versions,
                limits=limits,
                budget=self._budgets["broker"],
                frame_limit=authenticated.frame_limit,
            )

    async def _over_connection_rate(
        self, writer: asyncio.StreamWriter, listener: str, quotas: QuotaManager | None
    ) -> bool:
        """Whether the client's IP is over its ``connection_creation_rate`` quota (as
        ``quotas``, the listener's node role's, count it); if so the connection is held for
        the throttle time first (broker/quotas.py), then refused."""
        peer = writer.get_extra_info("peername")
        if quotas is None or not isinstance(peer, tuple) or not peer:
            return False
        delay_s = quotas.admit_connection(str(peer[0]), asyncio.get_running_loop().time())
        if delay_s <= 0:
            return False
        _limited.log(
            f"connection-rate/{listener}",
            logging.INFO,
            "[SocketServer listener=%s] Closing connection from %s: over its IP's "
            "connection_creation_rate quota",
            listener,
            peer[0],
        )
        await asyncio.sleep(delay_s)
        return True

    def _measured(self, handle: Handler) -> Handler:
        """``handle``, counted and timed by the request metrics when there are metrics."""
        return handle if self.metrics is None else self.metrics.requests.instrument(handle)

    @contextlib.contextmanager
    def _tracked(self, writer: asyncio.StreamWriter, listener: str) -> Iterator[None]:
        """Count a served connection as open (``close`` aborts it) while its handler runs."""
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = writer
        network = self.metrics.network if self.metrics is not None else None
        if network is not None:
            network.opened(listener)
        try:
            yield
        finally:
            self._connections.pop(task, None)
            if network is not None:
                network.closed(listener)

    # ---- run and stop ---------------------------------------------------------------------
    async def wait(self) -> None:
        """Until a fatal error in the quorum loop or the broker's start-up (re-raised)."""
        await asyncio.gather(*self._tasks)

    async def shutdown(self) -> None:
        """Controlled shutdown: a broker first moves its leadership away, a leading
        controller hands the quorum over with EndQuorumEpoch; then everything closes."""
        if self.lifecycle is not None and self.lifecycle.state is BrokerState.RUNNING:
            await self.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S)
        if self.raft is not None and self.raft.core is not None and self.raft.role is Role.LEADER:
            await self.raft.resign()
            await asyncio.sleep(0.05)  # let EndQuorumEpoch reach the peers' sockets
        await self.close()

    async def close(self) -> None:
        """Stop everything; safe to call again."""
        if self._closed:
            return
        self._closed = True
        for server in self._servers:
            server.close()
        handlers = list(self._connections.items())
        for _, writer in handlers:
            writer.transport.abort()  # the handler reads EOF and returns
        if handlers:
            # Bounded: a handler inside a long-polled Fetch returns only when its wait ends;
            # the loop's own end cancels what is left.
            await asyncio.wait([task for task, _ in handlers], timeout=CONNECTIONS_CLOSE_S)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for apis in self.apis.values():
            await apis.close()
        if self._group_apis is not None:
            await self._group_apis.close()
        if self.transactions is not None:
            await self.transactions.close()
        if self.groups is not None:
            await self.groups.close()
        broker_epoch = -1
        if self.lifecycle is not None:
            broker_epoch = self.lifecycle.broker_epoch  # the clean shutdown marker keeps it
            await self.lifecycle.close()
        if self.replicas is not None:
            await self.replicas.close()
        if self.logs is not None:
            await self.logs.shutdown(broker_epoch)
        if self._channel is not None:
            await self._channel.close()
        if self._internal_channel is not None:
            await self._internal_channel.close()
        if self._forwarding_channel is not None:
            await self._forwarding_channel.close()
        if self.controller is not None:
            await self.controller.close()
        if self.loader is not None:
            await self.loader.close()
        if self.raft is not None and self.raft.core is not None:
            try:
                await self.raft.close()
            except OSError:
                if self._fatal is None:
                    raise  # otherwise: the failure already reported, re-raised by its loop
        if self.log is not None:
            if isinstance(self._fatal, OSError):
                # A disk failed: flushing now could only fail again, noisily, and is not
                # needed (Raft fsyncs what it acknowledges before it counts).
                self.log.storage.take_offline(self._fatal)
            await self.log.close()


def _connector(security: ClientSecurity) -> Connector | None:
    """A connector for a secured peer listener; None for PLAINTEXT (the plain
    asyncio.open_connection, which the simulator's network serves)."""
    if security.protocol is SecurityProtocol.PLAINTEXT:
        return None
    return Connector(security)
