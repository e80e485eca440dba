"""protocol/fast_writer.py writes exactly kio's bytes, for every API, version and direction."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_entity_schema, load_payload_module
from kio.serial import entity_writer as kio_entity_writer
from kio.static.constants import EntityType

from protocol.entities import make
from protocol.fast_writer import entity_writer
from protocol.wire import RequestHeader, response_parts
from tests.protocol.test_wire import SCHEMAS, any_entity


def kio_bytes(entity: Any) -> bytes:
    buffer = io.BytesIO()
    kio_entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def fast_bytes(entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(SCHEMAS).flatmap(any_entity))
def test_any_entity_of_any_schema_is_kios_bytes(case: tuple[EntityType, Any]) -> None:
    _, entity = case
    assert fast_bytes(entity) == kio_bytes(entity)


def test_tagged_fields_set_or_default_are_kios_bytes() -> None:
    """Produce v10+ answers carry tagged fields (current_leader, node_endpoints): at their
    defaults the fast path writes the empty section; set, kio writes the entity."""
    module: Any = load_payload_module(0, 11, EntityType.response)
    partition = make(module.PartitionProduceResponse, {"index": 0, "base_offset": 5})
    topic = make(module.TopicProduceResponse, {"name": "t", "partition_responses": (partition,)})
    body = make(module.ProduceResponse, {"responses": (topic,)})
    leader = make(module.LeaderIdAndEpoch, {"leader_id": 2, "leader_epoch": 7})
    led = dataclasses.replace(partition, current_leader=leader)
    endpoint = make(module.NodeEndpoint, {"node_id": 2, "host": "h", "port": 9092})
    variants = [
        body,
        dataclasses.replace(topic, partition_responses=(led,)),
        dataclasses.replace(body, node_endpoints=(endpoint,)),
    ]
    for entity in variants:
        assert fast_bytes(entity) == kio_bytes(entity)
    assert fast_bytes(body).endswith(b"\x00")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from([s for s in SCHEMAS if s[2] is EntityType.response]).flatmap(any_entity),
    st.integers(-(2**31), 2**31 - 1),
)
def test_a_response_head_is_kios_response_header(case: tuple[EntityType, Any], cid: int) -> None:
    _, entity = case
    header = RequestHeader(entity.__api_key__, entity.__version__, cid, "t")
    flexible = type(entity).__flexible__ and entity.__api_key__ != 18
    module = "response_header.v1" if flexible else "response_header.v0"
    header_type = __import__(f"kio.schema.{module}.header", fromlist=["x"]).ResponseHeader
    expected = kio_bytes(header_type(correlation_id=cid)) + kio_bytes(entity)
    parts = [part for piece in response_parts(header, entity, 1000) for part in piece]
    assert b"".join(parts) == expected  # type: ignore[arg-type]


def test_every_schema_has_a_writer_and_its_empty_entity_is_kios_bytes() -> None:
    """Every kio schema, not only the ones hypothesis drew: the writer builds, and the
    entity of protocol zero values (what ``make`` gives for no values) encodes as kio's."""
    for schema in SCHEMAS:
        entity = make(load_entity_schema(*schema), {})
        assert fast_bytes(entity) == kio_bytes(entity), schema
