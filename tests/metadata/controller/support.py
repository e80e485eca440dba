"""Shared builders for the controller tests: images from records, requests of any version,
and a wire round trip that proves a response encodes as Kafka bytes."""

from __future__ import annotations

import io
import random
import types
import uuid
from typing import Any

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from metadata.controller.context import ControllerConfig, ControllerContext, ControllerResult
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.records import (
    Listener,
    MetadataRecord,
    Partition,
    RegisterBroker,
    Topic,
    UnfenceBroker,
)

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def config(**overrides: Any) -> ControllerConfig:
    return ControllerConfig(node_id=1, cluster_id=CLUSTER_ID, **overrides)


def build(*records: MetadataRecord, image: MetadataImage = EMPTY) -> MetadataImage:
    """``image`` with ``records`` replayed (each record one offset further)."""
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply(image.offset + len(records), 1)


def apply(image: MetadataImage, result: ControllerResult) -> MetadataImage:
    return build(*result.records, image=image)


def brokers(*ids: int, racks: dict[int, str] | None = None) -> MetadataImage:
    """An image with the given brokers registered (epoch = 100 + id) and unfenced."""
    records: list[MetadataRecord] = []
    for broker_id in ids:
        listeners = (Listener("PLAINTEXT", "localhost", 9090 + broker_id),)
        rack = (racks or {}).get(broker_id)
        incarnation = uuid.UUID(int=broker_id)
        records.append(RegisterBroker(broker_id, incarnation, 100 + broker_id, listeners, (), rack))
        records.append(UnfenceBroker(broker_id, 100 + broker_id))
    return build(*records)


def with_topic(
    image: MetadataImage,
    name: str,
    *partitions: tuple[tuple[int, ...], tuple[int, ...], int],
    topic_id: uuid.UUID | None = None,
) -> MetadataImage:
    """``image`` plus a topic whose partitions are (replicas, isr, leader)."""
    topic_id = topic_id or uuid.UUID(int=len(image.topics.by_id) + 1000)
    records: list[MetadataRecord] = [Topic(name, topic_id)]
    records.extend(
        Partition(topic_id, index, replicas, isr, leader)
        for index, (replicas, isr, leader) in enumerate(partitions)
    )
    return build(*records, image=image)


def context(image: MetadataImage, seed: int = 7, **overrides: Any) -> ControllerContext:
    bugs = overrides.pop("bugs", frozenset())
    return ControllerContext(image, config(**overrides), random.Random(seed), bugs)


def request_module(api_key: int, api_version: int) -> types.ModuleType:
    return load_payload_module(api_key, api_version, EntityType.request)


def roundtrip(entity: Any) -> Any:
    """``entity`` written as Kafka bytes and read back (fails if it does not encode)."""
    entity_type = type(entity)
    buffer = io.BytesIO()
    entity_writer(entity_type)(buffer, entity)
    decoded, _ = entity_reader(entity_type)(memoryview(buffer.getvalue()), 0)
    return decoded


def controller_versions() -> dict[int, tuple[int, int]]:
    """The versions the controller listener's table serves for the controller's APIs, from a
    QuorumController that is built (its entries are) but never started."""
    from metadata.controller.quorum_controller import QuorumController

    stub: Any = types.SimpleNamespace(add_listener=lambda _: None, add_publisher=lambda _: None)
    controller = QuorumController(stub, stub, stub, ControllerConfig(1, CLUSTER_ID))
    return dict(controller.served.versions)
