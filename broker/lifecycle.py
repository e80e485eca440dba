"""The broker's side of its registration with the controller (Kafka's BrokerLifecycleManager).

A broker registers (the controller records it fenced and answers its broker epoch, the offset
of that registration record), then heartbeats. Its state follows Kafka's broker state machine:

    NOT_RUNNING -> STARTING            start(): registering, replaying the metadata log
    STARTING -> RECOVERY               a heartbeat answer says the broker has caught up
    RECOVERY -> RUNNING                a heartbeat answer says it is no longer fenced
    RUNNING -> PENDING_CONTROLLED_SHUTDOWN   controlled_shutdown(): heartbeats ask to shut down
    PENDING_CONTROLLED_SHUTDOWN -> SHUTTING_DOWN   the controller moved leadership away
    any -> SHUTTING_DOWN -> NOT_RUNNING      close()

The broker asks to stay fenced (want_fence) until it has replayed its own registration record:
before that its image is older than what the controller registered, and it must not be given
partitions it cannot yet see. A heartbeat refused with STALE_BROKER_EPOCH or
BROKER_ID_NOT_REGISTERED means the controller no longer knows this registration (it was
fenced and replaced, or unregistered): the broker registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker.controller_channel import ControllerSender
from broker.log_dirs import LogDirReport
from log.runtime import Runtime
from metadata.records import (
    ELR_FEATURE,
    METADATA_VERSION_FEATURE,
    TRANSACTION_VERSION_FEATURE,
    FeatureRange,
    Listener,
)
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module

logger = logging.getLogger("broker.lifecycle")

REGISTRATION_VERSION = 4  # Kafka 3.9/4.0's newest
HEARTBEAT_VERSION = 1  # v1 carries OfflineLogDirs (KIP-858)
ASSIGN_VERSION = 0
# kraft-py's only metadata.version so far (kraft/bootstrap.py formats clusters at 1).
SUPPORTED_FEATURES = (
    FeatureRange(METADATA_VERSION_FEATURE, 1, 1),
    FeatureRange(ELR_FEATURE, 0, 1),  # KIP-966: both with and without ELR
    FeatureRange(TRANSACTION_VERSION_FEATURE, 0, 2),  # KIP-890 part 2: TV1 and TV2 clients
)
# Kafka heartbeats again 10 ms after an answer while STARTING (to start quickly when there is
# nothing to recover) and 50 ms after the first answer during controlled shutdown.
STARTING_HEARTBEAT_S = 0.01
FIRST_SHUTDOWN_HEARTBEAT_S = 0.05
BACKOFF_MIN_S = 0.1


class BrokerState(enum.IntEnum):
    """Kafka's BrokerState ids, as reported in metrics and logs."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


_LEGAL: dict[BrokerState, frozenset[BrokerState]] = {
    BrokerState.NOT_RUNNING: frozenset({BrokerState.STARTING}),
    BrokerState.STARTING: frozenset({BrokerState.RECOVERY, BrokerState.SHUTTING_DOWN}),
    BrokerState.RECOVERY: frozenset({BrokerState.RUNNING, BrokerState.SHUTTING_DOWN}),
    BrokerState.RUNNING: frozenset(
        {BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN}
    ),
    BrokerState.PENDING_CONTROLLED_SHUTDOWN: frozenset({BrokerState.SHUTTING_DOWN}),
    BrokerState.SHUTTING_DOWN: frozenset({BrokerState.NOT_RUNNING}),
}


class BrokerLifecycleManager:
    """Registers the broker, heartbeats, and walks it through Kafka's broker states."""

    def __init__(
        self,
        runtime: Runtime,
        node_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        listeners: tuple[Listener, ...],
        rack: str | None,
        channel: ControllerSender,
        metadata_offset: Callable[[], int],
        heartbeat_interval_ms: int = 2000,
        *,
        request_timeout_ms: int = 4500,
        features: tuple[FeatureRange, ...] = SUPPORTED_FEATURES,
        previous_broker_epoch: int = -1,
        log_dirs: LogDirReport | None = None,
    ) -> None:
        """``metadata_offset`` is the offset of the broker's published image (the next
        metadata offset to replay); heartbeats report the last replayed one, one less, as
        Kafka's do. ``request_timeout_ms`` bounds each registration or heartbeat request
        (Kafka: half of broker.session.timeout.ms). ``previous_broker_epoch`` is the epoch
        the last clean shutdown recorded (-1: none), sent with the first registration.
        ``log_dirs`` says which dirs to register, report offline and assign replicas to
        (KIP-858); None registers none."""
        self.runtime = runtime
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.incarnation_id = incarnation_id
        self.listeners = listeners
        self.rack = rack
        self.features = features
        self._channel = channel
        self._metadata_offset = metadata_offset
        self._log_dirs = log_dirs
        self._heartbeat_interval_s = heartbeat_interval_ms / 1000
        self._request_timeout_s = request_timeout_ms / 1000
        self._prefix = f"[BrokerLifecycleManager id={node_id}]"
        self._state = BrokerState.NOT_RUNNING
        self._reached = {state: asyncio.Event() for state in BrokerState}
        self._reached[BrokerState.NOT_RUNNING].set()
        self._stopped = asyncio.Event()
        self._wake = asyncio.Event()
        self._broker_epoch = -1  # -1: not registered
        self._previous_broker_epoch = previous_broker_epoch
        self._failures = 0
        self._shutdown_answers = 0
        self._task: asyncio.Task[None] | None = None
        # (want_fence, reported offset) of the heartbeat whose answer first said "unfenced"
        # for the current registration: the controller must only unfence a broker that
        # asked for it (want_fence false) having replayed its registration. The simulator
        # holds the controller to that.
        self.unfenced_by: tuple[bool, int] | None = None

    # ---- state ------------------------------------------------------------------------------
    @property
    def state(self) -> BrokerState:
        return self._state

    @property
    def broker_epoch(self) -> int:
        """The epoch of the current registration, -1 while unregistered."""
        return self._broker_epoch

    async def wait_for_state(self, state: BrokerState) -> None:
        """Return once the broker has been in ``state`` (at once if it already has been);
        RuntimeError if it stops first, or the heartbeat loop's own error if it failed."""
        reached = self._reached[state]
        if reached.is_set():
            return
        waiters = [asyncio.ensure_future(event.wait()) for event in (reached, self._stopped)]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if reached.is_set():
            return
        task = self._task
        if task is not None and task.done() and not task.cancelled() and task.exception():
            raise RuntimeError(f"{self._prefix} heartbeat loop failed") from task.exception()
        raise RuntimeError(f"{self._prefix} stopped in {self._state.name} before {state.name}")

    def _transition(self, new: BrokerState, reason: str = "") -> None:
        old = self._state
        assert new in _LEGAL[old], f"illegal broker state transition {old.name} -> {new.name}"
        self._state = new
        self._reached[new].set()
        lead = f"{self._prefix} {reason} " if reason else f"{self._prefix} "
        logger.info("%sTransitioning from %s to %s.", lead, old.name, new.name)

    # ---- lifecycle --------------------------------------------------------------------------
    async def start(self) -> None:
        """Begin registering and heartbeating in the background (state STARTING)."""
        assert self._state is BrokerState.NOT_RUNNING and self._task is None, "start once"
        self._transition(BrokerState.STARTING)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Ask the controller to move this broker's leadership away, then SHUTTING_DOWN.

        Only a RUNNING broker can lead anything; from any other state this goes straight to
        SHUTTING_DOWN, as Kafka does. Without the controller's approval within
        ``timeout_s`` the broker shuts down anyway (clients then see leaders fail).
        """
        if self._state is BrokerState.RUNNING:
            self._transition(
                BrokerState.PENDING_CONTROLLED_SHUTDOWN, "Beginning controlled shutdown."
            )
            self._wake.set()
            try:
                async with asyncio.timeout(timeout_s):
                    await self._reached[BrokerState.SHUTTING_DOWN].wait()
            except TimeoutError:
                logger.warning(
                    "%s Timed out after %ss waiting for the controller to approve controlled "
                    "shutdown.",
                    self._prefix,
                    timeout_s,
                )
        elif self._state in (BrokerState.STARTING, BrokerState.RECOVERY):
            logger.info(
                "%s Skipping controlled shutdown because we are in state %s.",
                self._prefix,
                self._state.name,
            )
        if self._state not in (BrokerState.SHUTTING_DOWN, BrokerState.NOT_RUNNING):
            self._transition(BrokerState.SHUTTING_DOWN)
        await self._stop_task()

    async def close(self) -> None:
        """Stop heartbeating: NOT_RUNNING. Safe to call more than once."""
        await self._stop_task()
        if self._state is BrokerState.NOT_RUNNING:
            return
        if self._state is not BrokerState.SHUTTING_DOWN:
            self._transition(BrokerState.SHUTTING_DOWN)
        self._transition(BrokerState.NOT_RUNNING)

    async def _stop_task(self) -> None:
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        # Also when the task was cancelled before it ever ran its own ``finally``.
        self._stopped.set()

    # ---- the heartbeat loop -------------------------------------------------------------------
    def _shutting_down(self) -> bool:
        """Whether shutdown began; a call, so the loop reads the state afresh after each
        await (a type checker would otherwise keep what the loop's condition saw)."""
        return self._state is BrokerState.SHUTTING_DOWN

    async def _run(self) -> None:
        try:
            while self._state not in (BrokerState.SHUTTING_DOWN, BrokerState.NOT_RUNNING):
                if self._broker_epoch < 0:
                    delay_s = await self._register()
                else:
                    delay_s = await self._heartbeat()
                if self._shutting_down():
                    return
                await self._pause(delay_s)
        finally:
            self._stopped.set()

    async def _pause(self, delay_s: float) -> None:
        """Sleep until the next request is due, or until controlled shutdown wants it now."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay_s):
                await self._wake.wait()
        self._wake.clear()

    def _after_failure_s(self) -> float:
        """Jittered exponential backoff, at most one heartbeat interval."""
        self._failures += 1
        backoff_s = min(
            BACKOFF_MIN_S * 2 ** min(self._failures - 1, 16), self._heartbeat_interval_s
        )
        return backoff_s * (0.8 + 0.4 * self.runtime.rng.random())

    async def _register(self) -> float:
        """One registration attempt; the delay before the next request."""
        module: Any = request_module(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION)
        listeners = tuple(
            make(
                module.Listener,
                {
                    "name": item.name,
                    "host": item.host,
                    "port": item.port,
                    "security_protocol": item.security_protocol,
                },
            )
            for item in self.listeners
        )
        features = tuple(
            make(
                module.Feature,
                {
                    "name": item.name,
                    "min_supported_version": item.min_version,
                    "max_supported_version": item.max_version,
                },
            )
            for item in self.features
        )
        request = make(
            module.BrokerRegistrationRequest,
            {
                "broker_id": self.node_id,
                "cluster_id": self.cluster_id,
                "incarnation_id": self.incarnation_id,
                "listeners": listeners,
                "features": features,
                "rack": self.rack,
                "previous_broker_epoch": self._previous_broker_epoch,
                "log_dirs": () if self._log_dirs is None else self._log_dirs.online(),
            },
        )
        try:
            response: Any = await self._channel.send(request, self._request_timeout_s)
        except OSError as error:
            logger.info("%s Unable to register the broker: %r", self._prefix, error)
            return self._after_failure_s()
        if response.error_code != ErrorCode.none:
            logger.info(
                "%s Unable to register broker %d because the controller returned error %s",
                self._prefix,
                self.node_id,
                ErrorCode(response.error_code).name.upper(),
            )
            return self._after_failure_s()
        self._failures = 0
        self._broker_epoch = int(response.broker_epoch)
        self.unfenced_by = None
        logger.info(
            "%s Successfully registered broker %d with broker epoch %d",
            self._prefix,
            self.node_id,
            self._broker_epoch,
        )
        return 0.0

    async def _heartbeat(self) -> float:
        """One heartbeat; acts on its answer and returns the delay before the next one."""
        last_replayed = self._metadata_offset() - 1
        module: Any = request_module(ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION)
        request = make(
            module.BrokerHeartbeatRequest,
            {
                "broker_id": self.node_id,
                "broker_epoch": self._broker_epoch,
                "current_metadata_offset": last_replayed,
                "want_fence": last_replayed < self._broker_epoch,
                "want_shut_down": self._state is BrokerState.PENDING_CONTROLLED_SHUTDOWN,
                "offline_log_dirs": () if self._log_dirs is None else self._log_dirs.offline(),
            },
        )
        try:
            response: Any = await self._channel.send(request, self._request_timeout_s)
        except OSError as error:
            logger.warning("%s Heartbeat failed: %r", self._prefix, error)
            return self._after_failure_s()
        code = ErrorCode(response.error_code)
        if code in (ErrorCode.stale_broker_epoch, ErrorCode.broker_id_not_registered):
            logger.warning(
                "%s The controller refused broker epoch %d with %s; registering again.",
                self._prefix,
                self._broker_epoch,
                code.name.upper(),
            )
            self._previous_broker_epoch, self._broker_epoch = self._broker_epoch, -1
            self.unfenced_by = None
            return 0.0
        if code != ErrorCode.none:
            logger.warning(
                "%s Broker %d sent a heartbeat request but received error %s.",
                self._prefix,
                self.node_id,
                code.name.upper(),
            )
            return self._after_failure_s()
        self._failures = 0
        if not response.is_fenced and self.unfenced_by is None:
            self.unfenced_by = (bool(request.want_fence), last_replayed)
        await self._assign_replicas_to_dirs()
        return self._on_heartbeat_answer(response)

    def log_dir_failed(self) -> None:
        """A log dir went offline: heartbeat now, so the controller moves its leaderships
        at once rather than a heartbeat interval later (Kafka's
        propagateDirectoryFailure)."""
        self._wake.set()

    def replica_moved(self) -> None:
        """A replica moved to another of this broker's log dirs (AlterReplicaLogDirs):
        heartbeat now, so the AssignReplicasToDirs that follows the heartbeat tells the
        controller its new dir at once rather than a heartbeat interval later."""
        self._wake.set()

    async def _assign_replicas_to_dirs(self) -> None:
        """Tell the controller where replicas it has not placed are (KIP-858); what fails
        is sent again after the next heartbeat, since it is still missing from the image."""
        pending = [] if self._log_dirs is None else self._log_dirs.pending()
        if not pending:
            return
        module: Any = request_module(ApiKey.ASSIGN_REPLICAS_TO_DIRS, ASSIGN_VERSION)
        by_dir: dict[uuid.UUID, dict[uuid.UUID, list[int]]] = {}
        for item in pending:
            by_dir.setdefault(item.directory, {}).setdefault(item.topic_id, []).append(
                item.partition
            )
        request = make(
            module.AssignReplicasToDirsRequest,
            {
                "broker_id": self.node_id,
                "broker_epoch": self._broker_epoch,
                "directories": tuple(
                    make(
                        module.DirectoryData,
                        {
                            "id_": dir_id,
                            "topics": tuple(
                                make(
                                    module.TopicData,
                                    {
                                        "topic_id": topic_id,
                                        "partitions": tuple(
                                            make(module.PartitionData, {"partition_index": p})
                                            for p in indexes
                                        ),
                                    },
                                )
                                for topic_id, indexes in topics.items()
                            ),
                        },
                    )
                    for dir_id, topics in by_dir.items()
                ),
            },
        )
        try:
            response: Any = await self._channel.send(request, self._request_timeout_s)
        except OSError as error:
            logger.info("%s Unable to assign replicas to log dirs: %r", self._prefix, error)
            return
        refused = [
            (p.partition_index, ErrorCode(p.error_code).name.upper())
            for d in response.directories
            for t in d.topics
            for p in t.partitions
            if p.error_code != ErrorCode.none
        ]
        if response.error_code != ErrorCode.none or refused:
            logger.info(
                "%s The controller refused %d log dir assignment(s): %s %s",
                self._prefix,
                len(refused),
                ErrorCode(response.error_code).name.upper(),
                refused[:10],
            )

    def _on_heartbeat_answer(self, response: Any) -> float:
        """Kafka's state moves on a successful heartbeat; the delay before the next one."""
        state = self._state
        if state is BrokerState.STARTING:
            if response.is_caught_up:
                self._transition(BrokerState.RECOVERY, "The broker has caught up.")
            return STARTING_HEARTBEAT_S
        if state is BrokerState.RECOVERY and not response.is_fenced:
            self._transition(BrokerState.RUNNING, "The broker has been unfenced.")
        elif state is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if response.should_shut_down:
                self._transition(
                    BrokerState.SHUTTING_DOWN,
                    "The controller has asked us to exit controlled shutdown.",
                )
                return 0.0
            self._shutdown_answers += 1
            if self._shutdown_answers == 1:
                return FIRST_SHUTDOWN_HEARTBEAT_S
        return self._heartbeat_interval_s
