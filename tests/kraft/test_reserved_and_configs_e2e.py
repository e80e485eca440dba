"""Issue 12 items 1 and 3 end to end: a real admin client cannot create __cluster_metadata
or produce to it, and topics with cleanup.policy=compact or segment.index.bytes=4 (which on
main passed the controller and then killed every broker's reconciler, on every restart)
take records and survive a SIGKILL and restart."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourceType,
)
from confluent_kafka.admin import NewTopic as CNewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from broker.client import KafkaConnection
from protocol.entities import make, request_module
from tests.kraft.procs import port_open, single_node, wait_until

CONFIGS = {
    "compacted": {"cleanup.policy": "compact"},
    "both": {"cleanup.policy": "compact,delete"},
    "tiny-index": {"segment.index.bytes": "4", "index.interval.bytes": "0"},
}


def create_errors(admin: AdminClient, topics: list[CNewTopic]) -> dict[str, int | None]:
    errors: dict[str, int | None] = {}
    for name, future in admin.create_topics(topics, request_timeout=30).items():
        try:
            future.result()
            errors[name] = None
        except KafkaException as error:
            errors[name] = error.args[0].code()
    return errors


def round_trip(bootstrap: str, topic: str, values: list[bytes], total: int) -> list[bytes]:
    """Produce ``values``, then read the partition from offset 0 until ``total`` records."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for value in values:
        producer.produce(topic, key=b"k", value=value)
    assert producer.flush(30) == 0
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        partition = KafkaTopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, 0)
        got: list[bytes] = []
        wait_until(
            lambda: (
                got.extend(r.value for rs in consumer.poll(1000).values() for r in rs)
                or len(got) >= total
            ),
            f"{topic} read back",
        )
        return got
    finally:
        consumer.close()


def test_reserved_names_refused_and_compact_or_tiny_index_topics_survive_restart(
    tmp_path: Path,
) -> None:
    procs, bootstrap = single_node(tmp_path)
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        errors = create_errors(
            admin,
            [
                CNewTopic("__cluster_metadata", 1, 1),
                CNewTopic("__consumer_offsets", 1, 1),
                *(CNewTopic(name, 1, 1, config=config) for name, config in CONFIGS.items()),
            ],
        )
        assert errors == {
            "__cluster_metadata": KafkaError.INVALID_REQUEST,
            "__consumer_offsets": KafkaError.TOPIC_AUTHORIZATION_FAILED,
            **dict.fromkeys(CONFIGS),
        }
        for name in CONFIGS:
            assert round_trip(bootstrap, name, [b"a", b"b", b"c"], 3) == [b"a", b"b", b"c"]
        metadata_log = sorted(
            p.name for p in (tmp_path / "data1" / "__cluster_metadata-0").iterdir()
        )

        procs.kill(1)
        procs.start(1)
        port = int(bootstrap.rpartition(":")[2])
        wait_until(lambda: port_open("127.0.0.1", port), "the broker listener reopens")
        for name in CONFIGS:
            assert round_trip(bootstrap, name, [b"d"], 4) == [b"a", b"b", b"c", b"d"]
        log = procs.log(1)
        assert "Traceback" not in log and "is offline" not in log
        names = {p.name for p in (tmp_path / "data1" / "__cluster_metadata-0").iterdir()}
        assert set(metadata_log) <= names  # the metadata log's own files, nothing else
        assert "partition.metadata" not in names  # no partition log was ever made there
    finally:
        procs.cleanup()


def test_internal_topics_are_the_brokers_alone(tmp_path: Path) -> None:
    """Issue 22 item 4 on a real node: a group works (the broker creates __consumer_offsets
    through its internal-topics channel); no admin request deletes it, repartitions it or
    makes it unsafe; a name colliding with it is refused; and the client id the broker used
    on main no longer creates internal topics on the controller listener."""
    procs, bootstrap = single_node(
        tmp_path, {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "3"}
    )
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        assert create_errors(admin, [CNewTopic("t", 1, 1)]) == {"t": None}
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"})
        try:  # the first commit makes the broker create __consumer_offsets
            consumer.commit(offsets=[TopicPartition("t", 0, 7)], asynchronous=False)
            (committed,) = consumer.committed([TopicPartition("t", 0)], timeout=30)
            assert committed.offset == 7
        finally:
            consumer.close()
        (deleted,) = admin.delete_topics(["__consumer_offsets"], request_timeout=30).values()
        assert error_code(deleted) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        grown = admin.create_partitions([NewPartitions("__consumer_offsets", 6)])
        assert error_code(next(iter(grown.values()))) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        resource = ConfigResource(
            ResourceType.TOPIC,
            "__consumer_offsets",
            incremental_configs=[
                ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)
            ],
        )
        (altered,) = admin.incremental_alter_configs([resource]).values()
        assert error_code(altered) == KafkaError.INVALID_CONFIG
        assert create_errors(admin, [CNewTopic("__consumer.offsets", 1, 1)]) == {
            "__consumer.offsets": KafkaError.TOPIC_EXCEPTION
        }
        voters = procs.nodes[1]["controller.quorum.voters"]
        controller_port = int(voters.rpartition(":")[2])
        code = asyncio.run(create_as("kraft-broker-internal-topics", controller_port))
        assert code == ErrorCode.topic_authorization_failed
        assert "Traceback" not in procs.log(1)
    finally:
        procs.cleanup()


def error_code(future: Any) -> int | None:
    try:
        future.result()
    except KafkaException as error:
        return int(error.args[0].code())
    return None


async def create_as(client_id: str, port: int) -> ErrorCode:
    """CreateTopics of __transaction_state sent to the controller listener as ``client_id``."""
    connection = KafkaConnection(client_id)
    await connection.connect("127.0.0.1", port, 10.0)
    try:
        module: Any = request_module(19, 7)
        topic = make(
            module.CreatableTopic,
            {"name": "__transaction_state", "num_partitions": 1, "replication_factor": 1},
        )
        request = make(
            module.CreateTopicsRequest, {"topics": (topic,), "timeout": timedelta(seconds=10)}
        )
        response: Any = await connection.request(request, 10.0)
        return ErrorCode(response.topics[0].error_code)
    finally:
        await connection.close()
