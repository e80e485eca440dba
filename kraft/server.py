"""``kraft-server start``: one process, wired from server.properties.

The node (kraft/node.py) runs whatever ``process.roles`` asks for. This module adds what only
a real process has: the directory lock, signal handling and the exit code. SIGTERM and SIGINT
both mean controlled shutdown: a broker moves its partition leadership away before it stops,
a leading controller hands the quorum over with EndQuorumEpoch.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import resource
import signal

from prometheus_client import ProcessCollector

from broker.acceptor import start_acceptor
from kraft.config import ServerConfig
from kraft.metrics import NodeMetrics
from kraft.metrics_http import PATH, MetricsServer
from kraft.node import FatalStorageError, KraftNode
from kraft.planted import PLANTED_BUGS_ENV, planted_bugs
from kraft.storage import check_and_lock
from log.runtime import Runtime, real_runtime

logger = logging.getLogger("kraft.server")
# What the soft open-files limit is raised to when the hard limit is unlimited: Linux refuses
# more than fs.nr_open, whose default is 2^20.
MAX_OPEN_FILES = 1 << 20
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)
# Below this many open files a node cannot run at all: its standard streams, event loop,
# listeners, metadata log and lock, a checkpoint being written, and its broker's own
# connection to its controller (both ends) already take about twenty. With fewer, start-up
# could end anywhere: a failed checkpoint (one line, exit 1) or, depending on which step ran
# out first, an acceptor refusing the broker's registration for ever (a node that neither
# serves nor exits). So it is refused before anything starts.
MIN_OPEN_FILES = 32


def raise_open_files_limit() -> tuple[int, int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit, as a JVM does at start-up (every
    segment, index and connection is a descriptor); (soft before, soft after, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft, hard
        return soft, target, hard
    return soft, soft, hard


def out_of_descriptors_message(error: OSError) -> str:
    """The one line an operator gets when start-up (or a running node) runs out of fds."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return (
        f"out of file descriptors ({error.strerror}; open-files limit soft {soft}, hard "
        f"{hard}): raise it (ulimit -n, LimitNOFILE=) or close other descriptors"
    )


def _descriptors_outside_the_seam(runtime: Runtime) -> int:
    """What the process holds besides the filesystem seam's files: standard streams, the
    event loop's, the executor's; counted once (listing them costs milliseconds per
    thousand). 0 where the kernel does not list them."""
    try:
        held = len(os.listdir("/proc/self/fd")) - 1  # the listing's own descriptor
    except OSError:
        return 0
    return max(0, held - runtime.fs.open_descriptors())


def freeze_start_up_heap() -> int:
    """Move every object alive once the node has started (the metadata image loaded from its
    snapshot and log, the open logs' state, imported modules) out of the reach of the cyclic
    garbage collector; how many. A full collection walks every tracked object and holds the
    loop for all of it (107 ms with a 100,000-topic image, bench/bench_image.py); those
    objects are long-lived, acyclic records freed by reference counting when an image
    replaces them, so only what was made since start-up is walked."""
    gc.collect()  # garbage cycles from start-up must not be frozen with the rest
    gc.freeze()
    return gc.get_freeze_count()


async def serve(config: ServerConfig, runtime: Runtime | None = None) -> int:
    """Run until SIGTERM/SIGINT; the process exit code."""
    runtime = runtime or real_runtime()
    before, after, hard = raise_open_files_limit()
    logger.info(
        "[KafkaRaftServer nodeId=%d] Open files limit: soft %d -> %d (hard %s)",
        config.node_id,
        before,
        after,
        "unlimited" if hard == resource.RLIM_INFINITY else hard,
    )
    if after != resource.RLIM_INFINITY and after < MIN_OPEN_FILES:
        raise OSError(errno.EMFILE, f"a node needs at least {MIN_OPEN_FILES} open files to start")
    bugs = planted_bugs(os.environ)
    if bugs:
        logger.warning(
            "[KafkaRaftServer nodeId=%d] %s plants bugs %s: this node is broken on purpose",
            config.node_id,
            PLANTED_BUGS_ENV,
            ",".join(sorted(bugs)),
        )
    cluster_id = check_and_lock(runtime.fs, config)
    metrics = NodeMetrics() if config.metrics_listener is not None else None
    if metrics is not None:
        ProcessCollector(registry=metrics.registry)  # process_cpu_seconds_total, fds, memory
    node = KraftNode(
        runtime,
        config,
        cluster_id,
        bugs=bugs,
        listen=start_acceptor,
        metrics=metrics,
        descriptor_baseline=_descriptors_outside_the_seam(runtime),
    )
    metrics_server = MetricsServer(metrics.exposition) if metrics is not None else None
    logger.info(
        "[KafkaRaftServer nodeId=%d] Starting %s of cluster %s",
        config.node_id,
        "+".join(sorted(config.process_roles)),
        cluster_id,
    )
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        await node.start()
        frozen = freeze_start_up_heap()
        logger.info(
            "[KafkaRaftServer nodeId=%d] %d start-up objects left out of full garbage collections",
            config.node_id,
            frozen,
        )
        if metrics_server is not None and config.metrics_listener is not None:
            wanted = config.metrics_listener
            try:
                host, port = await metrics_server.start(wanted.host, wanted.port)
            except OSError as error:  # one line naming the key, as a Kafka listener's would
                raise OSError(
                    error.errno, f"metrics.listener {wanted.host}:{wanted.port}: {error.strerror}"
                ) from error
            logger.info(
                "[KafkaRaftServer nodeId=%d] Serving metrics on http://%s:%d%s",
                config.node_id,
                host,
                port,
                PATH,
            )
        running = loop.create_task(node.wait())
        stopping = loop.create_task(stop.wait())
        await asyncio.wait([running, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if running.done():
            try:
                running.result()  # a dead quorum loop or broker start-up is fatal: re-raise it
            except FatalStorageError as error:
                # A full or failing disk: one line for the operator, no traceback, and no
                # controlled shutdown (it would need the metadata log); close what is open.
                logger.error("[KafkaRaftServer nodeId=%d] Stopping: %s", config.node_id, error)
                return 1
        logger.info("[KafkaRaftServer nodeId=%d] Shutting down", config.node_id)
        await node.shutdown()
    finally:
        gc.unfreeze()  # (a process that serves again, as the tests do, starts from scratch)
        if metrics_server is not None:
            await metrics_server.close()
        await node.close()
    logger.info("[KafkaRaftServer nodeId=%d] Shut down completed", config.node_id)
    return 0
