"""``kraft-server start``: one process, wired from server.properties.

What runs today is the controller side: the Raft quorum on the controller listener, the
metadata log on disk, and the active controller's NoOp heartbeat record (KIP-835). The broker
side (Kafka listener, metadata replay, partitions) arrives with issue #6; a node configured as
broker,controller says so in its log and serves the quorum.

Shutdown (SIGTERM or SIGINT) is graceful: a leader hands leadership over with
EndQuorumEpoch before the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from kraft.config import ServerConfig
from kraft.storage import check_and_lock
from log.records import Record
from log.runtime import Runtime, real_runtime
from metadata.records import NoOp, encode_record
from raft.core import Event, NotLeaderError, RaftConfig, Role, RoleChanged, Truncated
from raft.disk_log import DiskLog
from raft.driver import CommittedBatch, RaftNode, RaftNodeConfig
from raft.snapshot import SnapshotId

logger = logging.getLogger("kraft.server")
METADATA_PARTITION_DIR = "__cluster_metadata-0"


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


async def _heartbeat_records(node: RaftNode, runtime: Runtime, interval_ms: int) -> None:
    """The active controller appends a NoOp record when idle (KIP-835)."""
    if interval_ms <= 0:
        return
    value = encode_record(NoOp())
    while True:
        await asyncio.sleep(interval_ms / 1000)
        if node.role is Role.LEADER:
            with contextlib.suppress(NotLeaderError):
                node.propose([Record(None, value, runtime.clock.now_ms())])


async def serve(config: ServerConfig, runtime: Runtime | None = None) -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    runtime = runtime or real_runtime()
    cluster_id = check_and_lock(runtime.fs, config)
    metadata_dir = os.path.join(config.metadata_dir, METADATA_PARTITION_DIR)
    log = await DiskLog.open(runtime, metadata_dir)
    raft_config = RaftConfig(
        election_timeout_ms=config.election_timeout_ms,
        fetch_timeout_ms=config.fetch_timeout_ms,
        election_backoff_max_ms=config.election_backoff_max_ms,
        request_timeout_ms=config.request_timeout_ms,
    )
    node = RaftNode(
        runtime,
        RaftNodeConfig(
            node_id=config.node_id,
            voters=config.controller_quorum_voters,
            cluster_id=cluster_id,
            metadata_dir=metadata_dir,
            raft=raft_config,
        ),
        log,
    )
    node.add_listener(_RoleLogger(config.node_id))
    await node.start()
    endpoint = config.controller_endpoint()
    server = await asyncio.start_server(node.serve, endpoint.host or None, endpoint.port)
    logger.info(
        "[KafkaRaftServer nodeId=%d] Quorum member of cluster %s serving %s://%s:%d; "
        "metadata log at %s (end offset %d)",
        config.node_id,
        cluster_id,
        endpoint.name,
        endpoint.host,
        endpoint.port,
        metadata_dir,
        log.end_offset(),
    )
    if "broker" in config.process_roles:
        logger.warning(
            "[KafkaRaftServer nodeId=%d] The broker role is not available yet (issue #6): "
            "serving the controller quorum only",
            config.node_id,
        )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    heartbeat = loop.create_task(_heartbeat_records(node, runtime, config.max_idle_interval_ms))
    running = loop.create_task(node.wait())
    stopping = loop.create_task(stop.wait())
    try:
        await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
        if running.done():
            running.result()  # a dead quorum loop is fatal: re-raise it
        logger.info("[KafkaRaftServer nodeId=%d] Shutting down", config.node_id)
        if node.role is Role.LEADER:
            await node.resign()
            await asyncio.sleep(0.05)  # let EndQuorumEpoch reach the peers' sockets
    finally:
        for task in (heartbeat, stopping, running):
            task.cancel()
        server.close()
        await node.close()
        await log.close()
    logger.info("[KafkaRaftServer nodeId=%d] Shut down completed", config.node_id)
    return 0
