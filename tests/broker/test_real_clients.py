"""Real Kafka admin clients against a broker listener (protocol/server.py + KafkaApis).

The listener runs on its own event loop thread at 127.0.0.1 with a hand-built image; brokers
1 and 2 both advertise that listener, so whichever broker a client picks it reaches this one.
A fake controller answers forwarded CreateTopics and DeleteTopics by editing the image, which
the next Metadata request then shows.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from broker.kafka_apis import KafkaApis
from protocol.server import serve_connection
from tests.broker.fakes import LISTENER, FakeController, cluster_image, served

TIMEOUT_S = 20


class Listener:
    """A KafkaApis listener served from a background event loop."""

    def __init__(self) -> None:
        self.controller = FakeController(cluster_image())
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.port = 0

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self._ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        controller = self.controller
        apis = KafkaApis(
            1, "cluster-real", LISTENER, lambda: controller.image, controller, random.Random(3)
        )
        table = served(apis)

        async def on_connection(reader: Any, writer: Any) -> None:
            await serve_connection(reader, writer, table.handle, table.versions)

        self.server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        controller.image = cluster_image(self.port)

    def __enter__(self) -> Listener:
        self._thread.start()
        assert self._ready.wait(TIMEOUT_S)
        return self

    async def _stop(self) -> None:
        """Close the server and end every connection handler before the loop stops, so
        none is left to be collected (and warn) after the loop is gone."""
        self.server.close()
        handlers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def __exit__(self, *_exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(TIMEOUT_S)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(TIMEOUT_S)
        self.loop.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    with Listener() as running:
        yield running


@pytest.fixture
def kafka_python(listener: Listener) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(
        bootstrap_servers=f"127.0.0.1:{listener.port}",
        client_id="kafka-python-test",
        request_timeout_ms=TIMEOUT_S * 1000,
    )
    yield client
    client.close()


def test_kafka_python_lists_and_describes_topics(kafka_python: KafkaAdminClient) -> None:
    assert sorted(kafka_python.list_topics()) == ["audit", "orders"]
    (orders,) = kafka_python.describe_topics(["orders"])
    assert (orders["name"], orders["error_code"], orders["is_internal"]) == ("orders", 0, False)
    partitions = sorted(orders["partitions"], key=lambda p: p["partition_index"])
    assert [
        (p["partition_index"], p["leader_id"], p["replica_nodes"], p["isr_nodes"])
        for p in partitions
    ] == [(0, 1, [1, 2], [1, 2]), (1, -1, [3, 2], [3])]
    assert [p["error_code"] for p in partitions] == [0, 5]  # LEADER_NOT_AVAILABLE
    assert partitions[1]["offline_replicas"] == [3]


def test_kafka_python_describes_the_cluster(kafka_python: KafkaAdminClient) -> None:
    cluster = kafka_python.describe_cluster()
    assert cluster["cluster_id"] == "cluster-real"
    assert sorted(b["broker_id"] for b in cluster["brokers"]) == [1, 2]
    assert cluster["controller_id"] in (1, 2)


def test_kafka_python_describes_topic_and_broker_configs(
    listener: Listener, kafka_python: KafkaAdminClient
) -> None:
    described = kafka_python.describe_configs(
        [
            ConfigResource(ConfigResourceType.TOPIC, "audit"),
            ConfigResource(ConfigResourceType.BROKER, "1"),
        ],
        config_filter="all",
    )
    audit = described["topic"]["audit"]
    assert audit["retention.ms"]["value"] == "1000"
    assert audit["retention.ms"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    assert audit["cleanup.policy"]["config_source"] == "DEFAULT_CONFIG"
    broker = described["broker"]["1"]
    assert broker["log.retention.ms"]["value"] == "5000"
    assert broker["log.retention.ms"]["config_source"] == "DYNAMIC_BROKER_CONFIG"


def test_kafka_python_creates_and_deletes_a_topic_through_the_controller(
    listener: Listener, kafka_python: KafkaAdminClient
) -> None:
    kafka_python.create_topics([NewTopic("fresh", num_partitions=2, replication_factor=1)])
    assert "fresh" in kafka_python.list_topics()
    assert [int(r.__api_key__) for r in listener.controller.requests] == [19]
    kafka_python.delete_topics(["fresh"])
    assert "fresh" not in kafka_python.list_topics()


def test_confluent_kafka_lists_topics_and_brokers(listener: Listener) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{listener.port}"})
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert metadata.cluster_id == "cluster-real"
    assert sorted(metadata.brokers) == [1, 2]
    assert metadata.controller_id in (1, 2)
    assert sorted(metadata.topics) == ["audit", "orders"]
    orders = metadata.topics["orders"]
    assert sorted(orders.partitions) == [0, 1]
    assert orders.partitions[0].leader == 1
    assert orders.partitions[0].replicas == [1, 2]


def test_confluent_kafka_creates_a_topic_through_the_controller(listener: Listener) -> None:
    from confluent_kafka.admin import NewTopic as ConfluentNewTopic

    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{listener.port}"})
    futures = admin.create_topics([ConfluentNewTopic("made-by-librdkafka", 3, 1)])
    futures["made-by-librdkafka"].result(timeout=TIMEOUT_S)
    metadata = admin.list_topics(timeout=TIMEOUT_S)
    assert sorted(metadata.topics["made-by-librdkafka"].partitions) == [0, 1, 2]
