"""The metadata scenario's admin client: one Kafka admin request per operation, one topic each.

The workload speaks the Kafka protocol to brokers exactly as a real admin client does (the
broker forwards to the active controller), so the simulator exercises the same path as
kafka-python or librdkafka. Each call returns a Kafka error name ("NONE" on success), which
the history records and the topic model reads (sim/analysis/models.py).
"""

from __future__ import annotations

import datetime

from kio.schema.alter_client_quotas.v1.request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from kio.schema.alter_partition_reassignments.v0.request import (
    AlterPartitionReassignmentsRequest,
    ReassignablePartition,
    ReassignableTopic,
)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.create_partitions.v3.request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import f64, i8, i16, i32, i32Timedelta

from broker.client import KafkaConnection

TOPIC_RESOURCE = 2
GROUP_RESOURCE = 3
BROKER_RESOURCE = 4
LITERAL = 3
SET = 0
_TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=5))


def error_name(code: int) -> str:
    """A Kafka error code by its protocol name (``NONE``, ``TOPIC_ALREADY_EXISTS``...), as
    the metadata scenario's history records it."""
    return ErrorCode(code).name.upper()


async def create_topic(
    conn: KafkaConnection, topic: str, partitions: int, replication: int, timeout_s: float
) -> str:
    request = CreateTopicsRequest(
        topics=(
            CreatableTopic(
                name=TopicName(topic),
                num_partitions=i32(partitions),
                replication_factor=i16(replication),
                assignments=(),
                configs=(),
            ),
        ),
        timeout=_TIMEOUT,
        validate_only=False,
    )
    response = await conn.request(request, timeout_s)
    return error_name(response.topics[0].error_code)  # type: ignore[attr-defined]


async def delete_topic(conn: KafkaConnection, topic: str, timeout_s: float) -> str:
    request = DeleteTopicsRequest(
        topics=(DeleteTopicState(name=TopicName(topic), topic_id=None),), timeout=_TIMEOUT
    )
    response = await conn.request(request, timeout_s)
    return error_name(response.responses[0].error_code)  # type: ignore[attr-defined]


async def create_partitions(conn: KafkaConnection, topic: str, count: int, timeout_s: float) -> str:
    request = CreatePartitionsRequest(
        topics=(CreatePartitionsTopic(name=TopicName(topic), count=i32(count), assignments=None),),
        timeout=_TIMEOUT,
        validate_only=False,
    )
    response = await conn.request(request, timeout_s)
    return error_name(response.results[0].error_code)  # type: ignore[attr-defined]


async def alter_topic_config(
    conn: KafkaConnection, topic: str, key: str, value: str, timeout_s: float
) -> str:
    return await alter_config(conn, TOPIC_RESOURCE, topic, key, value, timeout_s)


async def alter_config(
    conn: KafkaConnection, resource_type: int, name: str, key: str, value: str, timeout_s: float
) -> str:
    """IncrementalAlterConfigs SET of one key of one resource (a topic or a broker)."""
    request = IncrementalAlterConfigsRequest(
        resources=(
            AlterConfigsResource(
                resource_type=i8(resource_type),
                resource_name=name,
                configs=(AlterableConfig(name=key, config_operation=i8(SET), value=value),),
            ),
        ),
        validate_only=False,
    )
    response = await conn.request(request, timeout_s)
    return error_name(response.responses[0].error_code)  # type: ignore[attr-defined]


async def reassign_partition(
    conn: KafkaConnection, topic: str, partition: int, replicas: list[int], timeout_s: float
) -> str:
    """AlterPartitionReassignments of one partition to ``replicas`` (KIP-455)."""
    target = ReassignablePartition(
        partition_index=i32(partition), replicas=tuple(BrokerId(r) for r in replicas)
    )
    request = AlterPartitionReassignmentsRequest(
        timeout=_TIMEOUT,
        topics=(ReassignableTopic(name=TopicName(topic), partitions=(target,)),),
    )
    response = await conn.request(request, timeout_s)
    if response.error_code != ErrorCode.none:  # type: ignore[attr-defined]
        return error_name(response.error_code)  # type: ignore[attr-defined]
    return error_name(response.responses[0].partitions[0].error_code)  # type: ignore[attr-defined]


async def create_acls(
    conn: KafkaConnection,
    bindings: tuple[tuple[int, str, str, int, int], ...],
    timeout_s: float,
) -> str:
    """CreateAcls of literal bindings (resource type, resource name, principal, operation,
    permission), any host: the first error of any of them, else NONE."""
    request = CreateAclsRequest(
        creations=tuple(
            AclCreation(
                resource_type=i8(resource_type),
                resource_name=name,
                resource_pattern_type=i8(LITERAL),
                principal=principal,
                host="*",
                operation=i8(operation),
                permission_type=i8(permission),
            )
            for resource_type, name, principal, operation, permission in bindings
        )
    )
    response = await conn.request(request, timeout_s)
    errors = [error_name(r.error_code) for r in response.results]  # type: ignore[attr-defined]
    return next((e for e in errors if e != "NONE"), "NONE")


async def set_client_quota(
    conn: KafkaConnection, client_id: str, key: str, value: float, timeout_s: float
) -> str:
    """AlterClientQuotas setting quota ``key`` of the client id ``client_id``: its error."""
    request = AlterClientQuotasRequest(
        entries=(
            EntryData(
                entity=(EntityData(entity_type="client-id", entity_name=client_id),),
                ops=(OpData(key=key, value=f64(value), remove=False),),
            ),
        ),
        validate_only=False,
    )
    response = await conn.request(request, timeout_s)
    return error_name(response.entries[0].error_code)  # type: ignore[attr-defined]
