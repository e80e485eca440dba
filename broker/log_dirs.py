"""What a broker tells the controller about its log dirs (KIP-858, JBOD in KRaft).

Each formatted log dir has a ``directory.id`` (meta.properties). The broker registers the ids
of its online dirs, names its failed ones in every heartbeat (OfflineLogDirs) and, when it has
more than one dir, tells the controller which dir holds each of its replicas
(AssignReplicasToDirs), so that a failed dir's leaderships can move without fencing the
broker. With a single dir there is nothing to say: its failure stops the broker, which is
then fenced like any broker that went away (metadata/directories.py reads the unassigned
replica as online meanwhile).

Assignments are not queued: each round compares the logs this broker holds with the dirs the
published image records for them and sends the difference, so one that was lost (a controller
failover, a timeout) is simply sent again, and one the image already shows is never resent.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping

from log.manager import LogManager
from metadata.directories import directory_of
from metadata.image import MetadataImage

# At most this many replicas per AssignReplicasToDirs request (Kafka's AssignmentsManager
# sends at most 2250, what fits a request); the rest go in the next round.
MAX_ASSIGNMENTS_PER_REQUEST = 2250


@dataclasses.dataclass(frozen=True, slots=True)
class Assignment:
    """One replica of this broker and the dir that holds it."""

    directory: uuid.UUID
    topic_id: uuid.UUID
    partition: int


class LogDirReport:
    """The log dir ids this broker reports, read from the log manager as it is now."""

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        dir_ids: Mapping[str, uuid.UUID],
        image: Callable[[], MetadataImage],
    ) -> None:
        """``dir_ids`` maps each log dir path to its ``directory.id`` (dirs without one, never
        formatted, are not reported); ``image`` is the broker's published metadata image."""
        self.node_id = node_id
        self.logs = logs
        self.dir_ids = dict(dir_ids)
        self._image = image

    def online(self) -> tuple[uuid.UUID, ...]:
        """The ids of the dirs still serving (BrokerRegistrationRequest LogDirs)."""
        return tuple(self.dir_ids[d] for d in self.logs.live_log_dirs if d in self.dir_ids)

    def offline(self) -> tuple[uuid.UUID, ...]:
        """The ids of the dirs that failed since start (BrokerHeartbeatRequest
        OfflineLogDirs); none once every dir has failed, since the node then stops rather
        than report (as Kafka's broker halts) and is fenced like any broker that left."""
        logs = self.logs
        if not logs.live_log_dirs:
            return ()
        return tuple(
            self.dir_ids[d] for d in logs.log_dirs if d in logs.offline_dirs and d in self.dir_ids
        )

    def pending(self) -> list[Assignment]:
        """This broker's replicas whose dir the image does not record yet, in (topic,
        partition) order, at most MAX_ASSIGNMENTS_PER_REQUEST; replicas in a failed dir too,
        so the controller learns where they were and moves their leaderships."""
        if len(self.dir_ids) < 2:
            return []
        image = self._image()
        pending = []
        for (topic_name, index), _ in self.logs.all_logs():
            log_dir = self.logs.log_dir_of(topic_name, index)
            topic = image.topics.get(topic_name)
            partition = None if topic is None else topic.partitions.get(index)
            if log_dir not in self.dir_ids or topic is None or partition is None:
                continue
            directory = self.dir_ids[log_dir]
            if (
                self.node_id in partition.replicas
                and directory_of(partition, self.node_id) != directory
            ):
                pending.append(Assignment(directory, topic.topic_id, index))
                if len(pending) >= MAX_ASSIGNMENTS_PER_REQUEST:
                    break
        return pending
