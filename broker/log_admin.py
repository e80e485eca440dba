"""The log-dir admin APIs: DescribeLogDirs (``kafka-log-dirs --describe``),
AlterReplicaLogDirs (``kafka-reassign-partitions`` with ``log_dirs``) and DeleteRecords
(``kafka-delete-records``), in and out of the ReplicaManager and LogManager.

DescribeLogDirs lists every log dir of this broker with the partitions it holds (size, and
how far the replica's log end is behind the high watermark it knows); a failed dir answers
KAFKA_STORAGE_ERROR with no partitions, as Kafka's. Volume sizes are not known through the
filesystem seam, so total and usable bytes are -1, Kafka's "unknown". A replica being
moved to another dir is listed twice, as Kafka lists it: in its dir, and in the dir it is
copied into with ``isFuture`` set and, as offset lag, how far the copy is behind it.

AlterReplicaLogDirs (ALTER on the cluster; refused, every partition is answered
CLUSTER_AUTHORIZATION_FAILED) begins those moves; broker/log_dir_mover.py says how.

DeleteRecords raises a partition's log start offset on its leader (a record below it is
never served again, its whole segments are deleted); the followers raise theirs when their
next fetch response carries it. The low watermark answered is the leader's new log start
offset: unlike Kafka, the answer does not wait for every follower to have moved its own
(Kafka's DelayedDeleteRecords), so it is an acks=1 kind of answer.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey
from protocol.api_table import (
    BROKER,
    CLUSTER_ALTER,
    CLUSTER_DESCRIBE,
    TOPIC_DELETE,
    Api,
    ApiRequest,
)
from protocol.entities import make, response_module
from protocol.turns import Turns

UNKNOWN_VOLUME_BYTES = -1


def log_admin_apis(replicas: ReplicaManager) -> list[Api]:
    """Their entries in a broker listener's API table (authorization as Kafka's)."""

    async def delete(request: ApiRequest) -> object:
        return await delete_records(replicas, request.body, request.api_version)

    async def describe(request: ApiRequest) -> object:
        return describe_log_dirs(replicas, request.body, request.api_version)

    async def alter(request: ApiRequest) -> object:
        return await alter_replica_log_dirs(replicas, request.body, request.api_version)

    return [
        Api(ApiKey.DELETE_RECORDS, (0, 2), delete, BROKER, (TOPIC_DELETE,)),
        Api(ApiKey.DESCRIBE_LOG_DIRS, (1, 4), describe, BROKER, (CLUSTER_DESCRIBE,)),
        Api(ApiKey.ALTER_REPLICA_LOG_DIRS, (1, 2), alter, BROKER, (CLUSTER_ALTER,)),
    ]


async def alter_replica_log_dirs(
    replicas: ReplicaManager, request: Any, api_version: int
) -> object:
    module: Any = response_module(ApiKey.ALTER_REPLICA_LOG_DIRS, api_version)
    by_topic: dict[str, list[object]] = {}
    turns = Turns()  # a request may name every partition of the broker
    for wanted in request.dirs:
        for topic in wanted.topics:
            for index in topic.partitions:
                await turns.tick()
                error = await replicas.alter_replica_log_dir(topic.name, index, wanted.path)
                by_topic.setdefault(topic.name, []).append(
                    make(
                        module.AlterReplicaLogDirPartitionResult,
                        {"partition_index": index, "error_code": error},
                    )
                )
    return make(
        module.AlterReplicaLogDirsResponse,
        {
            "throttle_time": timedelta(0),
            "results": tuple(
                make(
                    module.AlterReplicaLogDirTopicResult,
                    {"topic_name": name, "partitions": tuple(partitions)},
                )
                for name, partitions in by_topic.items()
            ),
        },
    )


async def delete_records(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module: Any = response_module(ApiKey.DELETE_RECORDS, api_version)
    topics = []
    turns = Turns()  # a request may name 200,000 partitions: a slice of them a turn
    for topic in request.topics:
        answers = []
        for wanted in topic.partitions:
            await turns.tick()
            error, low_watermark = await replicas.delete_records(
                topic.name, wanted.partition_index, wanted.offset
            )
            answers.append(
                make(
                    module.DeleteRecordsPartitionResult,
                    {
                        "partition_index": wanted.partition_index,
                        "low_watermark": low_watermark,
                        "error_code": error,
                    },
                )
            )
        topics.append(
            make(
                module.DeleteRecordsTopicResult, {"name": topic.name, "partitions": tuple(answers)}
            )
        )
        await turns.tick()
    return make(
        module.DeleteRecordsResponse, {"throttle_time": timedelta(0), "topics": tuple(topics)}
    )


def describe_log_dirs(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    module: Any = response_module(ApiKey.DESCRIBE_LOG_DIRS, api_version)
    logs = replicas.logs
    wanted = (
        None
        if request.topics is None
        else {(topic.topic, index) for topic in request.topics for index in topic.partitions}
    )
    by_dir: dict[str, dict[str, list[object]]] = {log_dir: {} for log_dir in logs.log_dirs}
    for (topic, index), log in logs.all_logs():
        log_dir = logs.log_dir_of(topic, index)
        if wanted is not None and (topic, index) not in wanted:
            continue
        if log_dir is None or log_dir not in by_dir or log_dir in logs.offline_dirs:
            continue
        high_watermark = replicas.high_watermark_of((topic, index))
        lag = 0 if high_watermark is None else max(0, high_watermark - log.log_end_offset)
        by_dir[log_dir].setdefault(topic, []).append(
            make(
                module.DescribeLogDirsPartition,
                {
                    "partition_index": index,
                    "partition_size": log.size,
                    "offset_lag": lag,
                    "is_future_key": False,
                },
            )
        )
    for (topic, index), future in logs.future_logs():
        if wanted is not None and (topic, index) not in wanted:
            continue
        if future.log_dir not in by_dir or future.log_dir in logs.offline_dirs:
            continue
        # Kafka's lag of a future replica: how far it is behind the replica it copies.
        lag = max(0, future.source.log_end_offset - future.log.log_end_offset)
        by_dir[future.log_dir].setdefault(topic, []).append(
            make(
                module.DescribeLogDirsPartition,
                {
                    "partition_index": index,
                    "partition_size": future.log.size,
                    "offset_lag": lag,
                    "is_future_key": True,
                },
            )
        )
    results = tuple(
        make(
            module.DescribeLogDirsResult,
            {
                "error_code": (
                    ErrorCode.kafka_storage_error
                    if log_dir in logs.offline_dirs
                    else ErrorCode.none
                ),
                "log_dir": log_dir,
                "topics": tuple(
                    make(module.DescribeLogDirsTopic, {"name": name, "partitions": tuple(parts)})
                    for name, parts in sorted(topics.items())
                ),
                "total_bytes": UNKNOWN_VOLUME_BYTES,
                "usable_bytes": UNKNOWN_VOLUME_BYTES,
            },
        )
        for log_dir, topics in by_dir.items()
    )
    return make(
        module.DescribeLogDirsResponse,
        {"throttle_time": timedelta(0), "error_code": ErrorCode.none, "results": results},
    )
