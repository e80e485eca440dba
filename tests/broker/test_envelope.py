"""broker/envelope.py: brokers forward clients' admin requests in Envelopes to a controller
table that authorizes the envelope as the broker's CLUSTER_ACTION and the inner request as
the client, and charges the client's controller_mutation_rate there: one budget whichever
broker the request reaches. Every hop goes through the wire codec, as on a socket."""

from __future__ import annotations

import asyncio
import random
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.envelope.v0.response import EnvelopeResponse
from kio.schema.errors import ErrorCode

from broker.authorization import RequestAuthorizer, guarded
from broker.controller_channel import is_not_controller
from broker.envelope import envelope_api
from broker.kafka_apis import KafkaApis
from broker.mutation_quota import THROTTLED_MESSAGE
from broker.quotas import QuotaConfig, QuotaManager, controller_quota_exempt
from metadata.authorizer import AclBinding, AuthorizerConfig, PatternType, Permission
from metadata.image import MetadataImage
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import (
    BROKER,
    CONTROLLER,
    CREATE_TOPICS_AUTHORIZATION,
    AclOperation,
    Api,
    ApiRequest,
    ResourceType,
    ServedApis,
)
from protocol.entities import make, request_module, response_module
from protocol.envelope import envelope_request
from protocol.principal import CLIENT_HOST, PRINCIPAL
from tests.broker.fakes import cluster_image

BROKER_PRINCIPAL, ALICE, MALLORY = "User:broker", "User:alice", "User:mallory"


def allow(principal: str, operation: AclOperation, resource: ResourceType, name: str) -> AclBinding:
    return AclBinding(
        resource, name, PatternType.LITERAL, principal, "*", operation, Permission.ALLOW
    )


def image(quota: float | None = None) -> MetadataImage:
    acls = (
        allow(BROKER_PRINCIPAL, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, "kafka-cluster"),
        allow(ALICE, AclOperation.CREATE, ResourceType.TOPIC, "a"),
    )
    quotas = {} if quota is None else {(("client-id", "app"),): {"controller_mutation_rate": quota}}
    return MetadataImage(
        acls={uuid.UUID(int=i + 1): acl for i, acl in enumerate(acls)},
        client_quotas=quotas,
        topics=cluster_image().topics,
    )


class ControllerTable:
    """A controller listener's table: the Envelope entry and a CreateTopics that records
    what reaches it (as whom) and creates it, behind the authorizer and the mutation quota,
    as kraft/node.py assembles it."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.created: list[tuple[str, str, str]] = []  # (topic, principal, host)
        authorizer = RequestAuthorizer(AuthorizerConfig(), lambda: self.image)
        quotas = QuotaManager(lambda: self.image, QuotaConfig())
        entries = [
            Api(
                ApiKey.CREATE_TOPICS, (2, 7), self._create, CONTROLLER, CREATE_TOPICS_AUTHORIZATION
            ),
            envelope_api(lambda: self.served),
        ]
        charged = quotas.charging_mutations(entries, controller_quota_exempt(authorizer), 1)
        self.served = ServedApis(CONTROLLER, guarded(charged, authorizer))

    async def _create(self, request: ApiRequest) -> object:
        module: Any = response_module(ApiKey.CREATE_TOPICS, request.api_version)
        for topic in request.body.topics:
            self.created.append((topic.name, request.principal, request.client_host))
        results = tuple(
            make(module.CreatableTopicResult, {"name": t.name, "num_partitions": t.num_partitions})
            for t in request.body.topics
        )
        return make(module.CreateTopicsResponse, {"topics": results})

    async def send_as(self, principal: str, envelope: EnvelopeRequest) -> EnvelopeResponse:
        """The controller's answer to ``envelope`` from a connection of ``principal``."""
        header = wire.RequestHeader(ApiKey.ENVELOPE, 0, 3, "broker-4-forwarding")
        _, decoded = wire.decode_request(wire.encode_request(header, envelope)[4:])
        PRINCIPAL.set(principal)
        CLIENT_HOST.set("/10.9.9.9")  # the broker's address, not the client's
        answer = await self.served.handle(header, decoded)
        _, body = wire.decode_response(ApiKey.ENVELOPE, 0, wire.encode_response(header, answer)[4:])
        assert isinstance(body, EnvelopeResponse)
        return body


class Channel:
    """A broker's controller channel to ``table``, logged in as ``principal``."""

    def __init__(self, table: ControllerTable, principal: str = BROKER_PRINCIPAL) -> None:
        self.table = table
        self.principal = principal

    async def send(self, request: Any, timeout_s: float) -> object:
        async def connection() -> EnvelopeResponse:  # the channel's own context
            return await self.table.send_as(self.principal, request)

        return await asyncio.get_running_loop().create_task(connection())


def create_topics(*topics: tuple[str, int], version: int = 7) -> Any:
    module: Any = request_module(ApiKey.CREATE_TOPICS, version)
    return make(
        module.CreateTopicsRequest,
        {
            "topics": tuple(
                make(
                    module.CreatableTopic,
                    {"name": name, "num_partitions": count, "replication_factor": 1},
                )
                for name, count in topics
            ),
            "timeout": timedelta(seconds=5),
        },
    )


def broker(channel: Channel) -> ServedApis:
    """A broker listener's table (behind its own authorizer) forwarding to ``channel``."""
    apis = KafkaApis(4, "c", "PLAINTEXT", lambda: channel.table.image, channel, random.Random(0))
    authorizer = RequestAuthorizer(AuthorizerConfig(), lambda: channel.table.image)
    return ServedApis(BROKER, guarded(apis.apis(), authorizer))


async def ask(served: ServedApis, body: Any, principal: str = ALICE, client: str = "app") -> Any:
    """A client's request to a broker listener, as the client decodes the answer."""
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, int(body.__version__), 11, client)

    async def connection() -> object:
        PRINCIPAL.set(principal)
        CLIENT_HOST.set("/10.0.0.1")
        return await served.handle(header, body)

    answer = await asyncio.get_running_loop().create_task(connection())
    frame = wire.encode_response(header, answer)[4:]
    return wire.decode_response(ApiKey.CREATE_TOPICS, int(body.__version__), frame)[1]


def codes(response: Any) -> dict[str, int]:
    return {t.name: int(t.error_code) for t in response.topics}


# ---- the controller's end ------------------------------------------------------------------
def test_an_envelope_from_a_principal_without_cluster_action_is_refused() -> None:
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, "app")
    envelope = envelope_request(header, create_topics(("a", 1)), ALICE, "10.0.0.1")

    async def run() -> tuple[ControllerTable, list[EnvelopeResponse]]:
        table = ControllerTable(image())
        # Alice may create "a" herself, but not send an envelope for anyone.
        answers = [await table.send_as(p, envelope) for p in (MALLORY, ALICE)]
        return table, answers

    table, answers = asyncio.run(run())
    for answer in answers:
        assert int(answer.error_code) == ErrorCode.cluster_authorization_failed
        assert answer.response_data is None
    assert table.created == []


def test_the_inner_request_is_authorized_and_handled_as_the_forwarded_client() -> None:
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, "app")
    envelope = envelope_request(header, create_topics(("a", 1), ("b", 1)), ALICE, "10.0.0.1")

    async def run() -> tuple[ControllerTable, EnvelopeResponse]:
        table = ControllerTable(image())
        return table, await table.send_as(BROKER_PRINCIPAL, envelope)

    table, answer = asyncio.run(run())
    assert int(answer.error_code) == ErrorCode.none
    assert answer.response_data is not None
    correlation_id, inner = wire.decode_response(ApiKey.CREATE_TOPICS, 7, answer.response_data)
    assert correlation_id == 1
    # The broker's principal holds CLUSTER_ACTION only; Alice may create "a", not "b": the
    # decision is made for her, at her address, not for the broker.
    assert codes(inner) == {"a": 0, "b": ErrorCode.topic_authorization_failed}
    assert table.created == [("a", ALICE, "10.0.0.1")]


def test_nested_and_unreadable_envelopes_are_invalid_requests() -> None:
    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, "app")
    good = envelope_request(header, create_topics(("a", 1)), ALICE, "10.0.0.1")
    nested = envelope_request(
        wire.RequestHeader(ApiKey.ENVELOPE, 0, 2, "b"), good, BROKER_PRINCIPAL, "10.0.0.2"
    )
    garbled = EnvelopeRequest(
        request_data=good.request_data[:9],
        request_principal=good.request_principal,
        client_host_address=good.client_host_address,
    )
    bad_principal = EnvelopeRequest(
        request_data=good.request_data,
        request_principal=b"\x00\x07",
        client_host_address=good.client_host_address,
    )

    async def run() -> tuple[ControllerTable, list[int]]:
        table = ControllerTable(image())
        envelopes = (nested, garbled, bad_principal, good)
        answers = [await table.send_as(BROKER_PRINCIPAL, e) for e in envelopes]
        return table, [int(a.error_code) for a in answers]

    table, answers = asyncio.run(run())
    assert answers == [
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
        ErrorCode.principal_deserialization_failure,
        ErrorCode.none,
    ]
    assert table.created == [("a", ALICE, "10.0.0.1")]  # the good one only


# ---- both ends -------------------------------------------------------------------------------
def test_a_clients_mutation_quota_is_one_budget_across_brokers() -> None:
    """2 partitions/s (a burst of 20): 25 partitions through broker A leave the bucket 5
    in debt, so broker B refuses the client's next topic, as the same controller charges
    both; a broker charging on its own would have let B's through from a full bucket."""

    async def run() -> tuple[ControllerTable, Any, Any, Any]:
        table = ControllerTable(image(quota=2.0))
        broker_a, broker_b = broker(Channel(table)), broker(Channel(table))
        first = await ask(broker_a, create_topics(("a", 25)))
        second = await ask(broker_b, create_topics(("a", 1)))
        other_client = await ask(broker_b, create_topics(("a", 1)), client="other")
        return table, first, second, other_client

    table, first, second, other_client = asyncio.run(run())
    assert codes(first) == {"a": 0} and first.throttle_time == timedelta(0)
    assert codes(second) == {"a": ErrorCode.throttling_quota_exceeded}
    assert second.topics[0].error_message == THROTTLED_MESSAGE
    assert timedelta(seconds=2) <= second.throttle_time <= timedelta(seconds=3)
    assert codes(other_client) == {"a": 0}  # another client id: a budget of its own
    assert [name for name, _, _ in table.created] == ["a", "a"]


def test_the_client_sees_an_error_when_the_controller_refuses_the_envelope() -> None:
    async def run() -> tuple[ControllerTable, Any]:
        table = ControllerTable(image())
        served = broker(Channel(table, principal=MALLORY))  # a broker without CLUSTER_ACTION
        return table, await ask(served, create_topics(("a", 1)))

    table, response = asyncio.run(run())
    assert codes(response) == {"a": ErrorCode.unknown_server_error}
    assert table.created == []


def test_an_envelope_not_controller_is_not_controller_for_the_client() -> None:
    class NotController(Channel):
        async def send(self, request: Any, timeout_s: float) -> object:
            return EnvelopeResponse(response_data=None, error_code=ErrorCode.not_controller)

    async def run() -> Any:
        served = broker(NotController(ControllerTable(image())))
        return await ask(served, create_topics(("a", 1), ("b", 2)))

    response = asyncio.run(run())
    assert codes(response) == {"a": ErrorCode.not_controller, "b": ErrorCode.not_controller}


def test_an_inactive_controller_says_not_controller_on_the_envelope() -> None:
    """A controller that is not the active one answers every topic NOT_CONTROLLER; the
    envelope says so too, so the broker's channel moves on to the next voter."""

    class Inactive(ControllerTable):
        async def _create(self, request: ApiRequest) -> object:
            module: Any = response_module(ApiKey.CREATE_TOPICS, request.api_version)
            results = tuple(
                make(
                    module.CreatableTopicResult,
                    {"name": t.name, "error_code": ErrorCode.not_controller},
                )
                for t in request.body.topics
            )
            return make(module.CreateTopicsResponse, {"topics": results})

    header = wire.RequestHeader(ApiKey.CREATE_TOPICS, 7, 1, "app")
    envelope = envelope_request(header, create_topics(("a", 1)), ALICE, "10.0.0.1")

    async def run() -> EnvelopeResponse:
        return await Inactive(image()).send_as(BROKER_PRINCIPAL, envelope)

    answer = asyncio.run(run())
    assert int(answer.error_code) == ErrorCode.not_controller
    assert is_not_controller(answer)
    assert answer.response_data is not None
    _, inner = wire.decode_response(ApiKey.CREATE_TOPICS, 7, answer.response_data)
    assert codes(inner) == {"a": ErrorCode.not_controller}
