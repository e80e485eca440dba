"""DescribeProducers (API 61, v0): a partition replica's active producers (KIP-664).

What ``kafka-transactions describe-producers`` prints, and what its ``abort`` and
``find-hanging`` commands start from: per producer, its epoch, last sequence, last
timestamp, the epoch of the coordinator that wrote its last marker, and the first offset of
its open transaction (-1: none). An operator finds a hanging transaction (one the
coordinator forgot, holding the LSO) by that offset and aborts it with a WriteTxnMarkers
built from these fields. Errors per partition, as Kafka's: UNKNOWN_TOPIC_OR_PARTITION,
NOT_LEADER_OR_FOLLOWER (no replica here). Any replica answers, leader or follower, as
Kafka's: ``find-hanging --broker-id`` asks one broker about all the partitions it holds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.replica_manager import ReplicaManager
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import Turns


async def describe_producers(replicas: ReplicaManager, request: Any, api_version: int) -> object:
    """Each named partition's producers, a slice of partitions a turn of the loop."""
    module: Any = response_module(ApiKey.DESCRIBE_PRODUCERS, api_version)
    topics = []
    turns = Turns()
    for topic in request.topics:
        partitions = []
        for index in topic.partition_indexes:
            await turns.tick()
            found = replicas.active_producers(topic.name, index)
            error = found if isinstance(found, ErrorCode) else ErrorCode.none
            producers = () if isinstance(found, ErrorCode) else found
            partitions.append(
                make(
                    module.PartitionResponse,
                    {
                        "partition_index": index,
                        "error_code": error,
                        "error_message": None,
                        "active_producers": tuple(
                            make(
                                module.ProducerState,
                                {
                                    "producer_id": p.producer_id,
                                    "producer_epoch": p.epoch,
                                    "last_sequence": p.last_sequence,
                                    "last_timestamp": p.timestamp,
                                    "coordinator_epoch": p.coordinator_epoch,
                                    "current_txn_start_offset": p.current_txn_first_offset,
                                },
                            )
                            for p in producers
                        ),
                    },
                )
            )
        topics.append(
            make(module.TopicResponse, {"name": topic.name, "partitions": tuple(partitions)})
        )
        await turns.tick()
    return make(
        module.DescribeProducersResponse, {"throttle_time": timedelta(0), "topics": tuple(topics)}
    )
