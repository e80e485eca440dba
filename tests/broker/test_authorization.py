"""broker/authorization.py: each request authorized against its entry's checks, for the
principal and address its connection carries; the refusal beside the grant, through the
wire codec (a client's view)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import types
import uuid
from typing import Any, get_args, get_origin

import pytest
from kio.schema.errors import ErrorCode

from broker.authorization import RequestAuthorizer, guarded
from broker.forwarding import FORWARDED_APIS
from broker.group.apis import GroupApis
from broker.kafka_apis import KafkaApis
from broker.log_admin import log_admin_apis
from broker.txn.apis import TxnApis
from metadata.authorizer import AclBinding, AuthorizerConfig, PatternType, Permission
from metadata.controller.context import ControllerConfig
from metadata.controller.quorum_controller import QuorumController
from metadata.image import MetadataImage
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import (
    BROKER,
    CLUSTER_ACTION,
    CONTROLLER,
    GROUP_READ,
    TOPIC_READ,
    TOPIC_WRITE,
    TRANSACTIONAL_ID_WRITE,
    AclOperation,
    Api,
    ApiRequest,
    ResourceType,
    ServedApis,
)
from protocol.entities import make, request_module, response_module
from protocol.principal import CLIENT_HOST, PRINCIPAL
from tests.broker.fakes import ORDERS_ID, FakeController, cluster_image

ALICE, BOB = "User:alice", "User:bob"
Op = AclOperation


def acl(
    name: str,
    operation: AclOperation,
    principal: str = ALICE,
    permission: Permission = Permission.ALLOW,
    resource_type: ResourceType = ResourceType.TOPIC,
    host: str = "*",
) -> AclBinding:
    return AclBinding(
        resource_type, name, PatternType.LITERAL, principal, host, operation, permission
    )


def image_with(*acls: AclBinding) -> MetadataImage:
    return dataclasses.replace(
        cluster_image(), acls={uuid.UUID(int=i + 1): a for i, a in enumerate(acls)}
    )


def ask(
    entries: list[Api],
    image: MetadataImage,
    api_key: int,
    version: int,
    values: dict[str, object],
    principal: str = ALICE,
    host: str = "/10.0.0.1",
    config: AuthorizerConfig | None = None,
    auto_create: bool = False,
) -> Any:
    """The answer to one request on a guarded table, from ``principal`` at ``host``, as a
    client decodes it (None: the connection is closed)."""
    authorizer = RequestAuthorizer(
        config or AuthorizerConfig(), lambda: image, auto_create_topics=auto_create
    )
    served = ServedApis(BROKER, guarded(entries, authorizer))
    module: Any = request_module(api_key, version)
    request_class = next(getattr(module, n) for n in dir(module) if n.endswith("Request"))
    header = wire.RequestHeader(api_key, version, 5, "client")

    async def connection() -> object | None:
        PRINCIPAL.set(principal)  # as the listener's authentication sets it
        CLIENT_HOST.set(host)  # as the connection loop sets it
        return await served.handle(header, make(request_class, values))

    response = asyncio.run(connection())
    if response is None:
        return None
    _, decoded = wire.decode_response(api_key, version, wire.encode_response(header, response)[4:])
    return decoded


def kafka_apis(image: MetadataImage, auto_create: bool = False) -> tuple[list[Api], FakeController]:
    controller = FakeController(image)
    apis = KafkaApis(
        1,
        "cluster-a",
        "PLAINTEXT",
        lambda: controller.image,
        controller,
        random.Random(0),
        auto_create_topics=auto_create,
        acls_enabled=True,
    )
    return apis.apis(), controller


def as_controller(entries: list[Api]) -> list[Api]:
    """The forwarded APIs' entries as the controller's listener serves them: the same
    declared checks (test_forwarded_apis_declare_the_controllers_checks), made there on the
    request a broker forwards in an Envelope."""
    return [
        dataclasses.replace(api, listeners=CONTROLLER)
        for api in entries
        if api.key in FORWARDED_APIS
    ]


# ---- Metadata --------------------------------------------------------------------------------
def metadata(names: list[str] | None, version: int = 12) -> dict[str, object]:
    module: Any = request_module(ApiKey.METADATA, version)
    topics = (
        None
        if names is None
        else tuple(make(module.MetadataRequestTopic, {"name": n}) for n in names)
    )
    return {"topics": topics, "allow_auto_topic_creation": True}


def test_metadata_lists_only_the_topics_the_principal_may_describe() -> None:
    image = image_with(acl("orders", Op.READ))  # READ implies DESCRIBE
    entries, _ = kafka_apis(image)
    listed = ask(entries, image, ApiKey.METADATA, 12, metadata(None))
    assert [t.name for t in listed.topics] == ["orders"]
    stranger = ask(entries, image, ApiKey.METADATA, 12, metadata(None), principal=BOB)
    assert stranger.topics == ()
    everyone = AuthorizerConfig(allow_everyone_if_no_acl_found=True)
    seen = ask(entries, image, ApiKey.METADATA, 12, metadata(None), BOB, config=everyone)
    assert [t.name for t in seen.topics] == ["audit"]  # orders has ACLs: not bob's


def test_named_topics_without_describe_are_authorization_failures_existing_or_not() -> None:
    image = image_with(acl("orders", Op.DESCRIBE))
    entries, _ = kafka_apis(image)
    response = ask(entries, image, ApiKey.METADATA, 12, metadata(["orders", "audit", "nope"]))
    codes = {t.name: int(t.error_code) for t in response.topics}
    assert codes == {
        "orders": 0,
        "audit": ErrorCode.topic_authorization_failed,
        "nope": ErrorCode.topic_authorization_failed,
    }


def test_auto_creation_needs_create_on_the_cluster_or_topic() -> None:
    image = image_with(acl("*", Op.DESCRIBE))
    entries, controller = kafka_apis(image, auto_create=True)
    refused = ask(entries, image, ApiKey.METADATA, 12, metadata(["fresh"]), auto_create=True)
    assert [int(t.error_code) for t in refused.topics] == [ErrorCode.topic_authorization_failed]
    assert controller.requests == []
    image = image_with(acl("*", Op.DESCRIBE), acl("fresh", Op.CREATE))
    entries, controller = kafka_apis(image, auto_create=True)
    ask(entries, image, ApiKey.METADATA, 12, metadata(["fresh"]), auto_create=True)
    assert [t.name for r in controller.requests for t in r.topics] == ["fresh"]


def test_super_users_see_everything() -> None:
    image = image_with()
    entries, _ = kafka_apis(image)
    config = AuthorizerConfig(super_users=frozenset({ALICE}))
    listed = ask(entries, image, ApiKey.METADATA, 12, metadata(None), config=config)
    assert sorted(t.name for t in listed.topics) == ["audit", "orders"]


# ---- CreateTopics and configs (forwarded) ----------------------------------------------------
def create_topics(*names: str) -> dict[str, object]:
    module: Any = request_module(ApiKey.CREATE_TOPICS, 7)
    topics = tuple(
        make(module.CreatableTopic, {"name": n, "num_partitions": 1, "replication_factor": 1})
        for n in names
    )
    return {"topics": topics, "timeout_ms": 1000}


def test_the_broker_forwards_create_topics_unchecked_as_the_client() -> None:
    """Kafka's KRaft brokers leave a forwarded request's authorization to the controller:
    the broker forwards all of it, with the client's principal and address in the
    Envelope, and passes the controller's answer back."""
    image = image_with(acl("a", Op.CREATE))
    entries, controller = kafka_apis(image)
    ask(entries, image, ApiKey.CREATE_TOPICS, 7, create_topics("a", "b"), principal=BOB)
    assert [t.name for r in controller.requests for t in r.topics] == ["a", "b"]
    [forwarded] = controller.envelopes
    assert (forwarded.principal, forwarded.client_host) == (BOB, "10.0.0.1")
    assert forwarded.header.client_id == "client"


def test_create_topics_creates_only_what_the_principal_may_create() -> None:
    image = image_with(acl("a", Op.CREATE))
    entries, controller = kafka_apis(image)
    entries = as_controller(entries)
    response = ask(entries, image, ApiKey.CREATE_TOPICS, 7, create_topics("a", "b"))
    codes = {t.name: int(t.error_code) for t in response.topics}
    assert codes == {"a": 0, "b": ErrorCode.topic_authorization_failed}
    assert [t.name for r in controller.requests for t in r.topics] == ["a"]
    cluster = image_with(acl("kafka-cluster", Op.CREATE, resource_type=ResourceType.CLUSTER))
    entries, controller = kafka_apis(cluster)
    response = ask(as_controller(entries), cluster, ApiKey.CREATE_TOPICS, 7, create_topics("c"))
    assert [int(t.error_code) for t in response.topics] == [0]
    entries, controller = kafka_apis(image)
    response = ask(
        as_controller(entries), image, ApiKey.CREATE_TOPICS, 7, create_topics("b"), principal=BOB
    )
    assert [int(t.error_code) for t in response.topics] == [ErrorCode.topic_authorization_failed]
    assert controller.requests == []


def test_forwarded_apis_declare_the_controllers_checks() -> None:
    """What a broker entry of a forwarded API declares is what the controller checks."""
    stub: Any = types.SimpleNamespace(add_listener=lambda _: None, add_publisher=lambda _: None)
    controller = QuorumController(stub, stub, stub, ControllerConfig(1, "c")).apis()
    checks = {api.key: api.authorization for api in controller if api.key in FORWARDED_APIS}
    entries, _ = kafka_apis(image_with())
    declared = {api.key: api.authorization for api in entries if api.key in FORWARDED_APIS}
    assert declared == checks
    assert set(checks) == FORWARDED_APIS


def test_alter_configs_needs_alter_configs_on_the_topic_or_cluster() -> None:
    image = image_with(acl("orders", Op.ALTER_CONFIGS))
    entries, controller = kafka_apis(image)
    module: Any = request_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)
    resources = tuple(
        make(module.AlterConfigsResource, {"resource_type": t, "resource_name": n, "configs": ()})
        for t, n in ((2, "orders"), (2, "audit"), (4, ""))
    )
    controller.canned = make(
        response_module(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1).IncrementalAlterConfigsResponse,
        {"responses": ()},
    )
    response = ask(
        as_controller(entries), image, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": resources}
    )
    codes = sorted((r.resource_name, int(r.error_code)) for r in response.responses)
    assert codes == [
        ("", ErrorCode.cluster_authorization_failed),
        ("audit", ErrorCode.topic_authorization_failed),
    ]
    assert [r.resource_name for q in controller.requests for r in q.resources] == ["orders"]


def test_describe_configs_needs_describe_configs_implied_by_alter_configs() -> None:
    image = image_with(acl("orders", Op.ALTER_CONFIGS))
    entries, _ = kafka_apis(image)
    module: Any = request_module(ApiKey.DESCRIBE_CONFIGS, 4)
    resources = tuple(
        make(module.DescribeConfigsResource, {"resource_type": 2, "resource_name": n})
        for n in ("orders", "audit")
    )
    response = ask(entries, image, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": resources})
    codes = {r.resource_name: int(r.error_code) for r in response.results}
    assert codes == {"orders": 0, "audit": ErrorCode.topic_authorization_failed}


# ---- cluster actions and the ACL APIs --------------------------------------------------------
def test_cluster_apis_need_their_cluster_operation() -> None:
    image = image_with(acl("kafka-cluster", Op.DESCRIBE, resource_type=ResourceType.CLUSTER))
    entries, _ = kafka_apis(image)
    values = {"include_cluster_authorized_operations": False}
    assert int(ask(entries, image, ApiKey.DESCRIBE_CLUSTER, 0, values).error_code) == 0
    refused = ask(entries, image, ApiKey.DESCRIBE_CLUSTER, 0, values, principal=BOB)
    assert int(refused.error_code) == ErrorCode.cluster_authorization_failed
    described = ask(entries, image, ApiKey.DESCRIBE_ACLS, 3, acl_filter())
    assert int(described.error_code) == 0 and len(described.resources) == 1
    refused = ask(entries, image, ApiKey.DESCRIBE_ACLS, 3, acl_filter(), principal=BOB)
    assert int(refused.error_code) == ErrorCode.cluster_authorization_failed
    module: Any = request_module(ApiKey.CREATE_ACLS, 3)
    creation = make(module.AclCreation, {"resource_type": 2, "resource_name": "t"})
    created = ask(as_controller(entries), image, ApiKey.CREATE_ACLS, 3, {"creations": (creation,)})
    assert [int(r.error_code) for r in created.results] == [ErrorCode.cluster_authorization_failed]


def acl_filter() -> dict[str, object]:
    return {
        "resource_type_filter": 1,
        "pattern_type_filter": 1,
        "operation": 1,
        "permission_type": 1,
    }


# ---- Produce, Fetch and groups (handlers stubbed: what reaches them is asserted) -------------
class Recorder:
    """A handler that records the request it gets and answers success for all of it."""

    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def produce(self, request: ApiRequest) -> object:
        self.seen.append(request)
        module: Any = response_module(ApiKey.PRODUCE, request.api_version)
        responses = tuple(
            make(
                module.TopicProduceResponse,
                {
                    "name": t.name,
                    "partition_responses": tuple(
                        make(
                            module.PartitionProduceResponse,
                            {"index": p.index, "log_append_time": None},
                        )
                        for p in t.partition_data
                    ),
                },
            )
            for t in request.body.topic_data
        )
        return make(module.ProduceResponse, {"responses": responses})

    async def fetch(self, request: ApiRequest) -> object:
        self.seen.append(request)
        module: Any = response_module(ApiKey.FETCH, request.api_version)
        return make(module.FetchResponse, {"responses": ()})

    async def join(self, request: ApiRequest) -> object:
        self.seen.append(request)
        module: Any = response_module(ApiKey.JOIN_GROUP, request.api_version)
        return make(module.JoinGroupResponse, {"member_id": "m"})


def produce(topics: list[str], acks: int = -1, transactional_id: str | None = None) -> Any:
    module: Any = request_module(ApiKey.PRODUCE, 9)
    data = tuple(
        make(
            module.TopicProduceData,
            {"name": n, "partition_data": (make(module.PartitionProduceData, {"index": 0}),)},
        )
        for n in topics
    )
    return {
        "topic_data": data,
        "acks": acks,
        "timeout_ms": 1000,
        "transactional_id": transactional_id,
    }


def produce_entry(recorder: Recorder) -> list[Api]:
    return [
        Api(ApiKey.PRODUCE, (3, 9), recorder.produce, BROKER, (TOPIC_WRITE, TRANSACTIONAL_ID_WRITE))
    ]


def produce_codes(response: Any) -> dict[str, int]:
    return {t.name: int(p.error_code) for t in response.responses for p in t.partition_responses}


def test_produce_needs_write_on_each_topic() -> None:
    image = image_with(acl("orders", Op.WRITE), acl("audit", Op.WRITE, permission=Permission.DENY))
    recorder = Recorder()
    response = ask(produce_entry(recorder), image, ApiKey.PRODUCE, 9, produce(["orders", "audit"]))
    assert produce_codes(response) == {"orders": 0, "audit": ErrorCode.topic_authorization_failed}
    assert [t.name for t in recorder.seen[0].body.topic_data] == ["orders"]
    assert (recorder.seen[0].principal, recorder.seen[0].client_host) == (ALICE, "10.0.0.1")
    refused = ask(produce_entry(recorder), image, ApiKey.PRODUCE, 9, produce(["orders"]), BOB)
    assert produce_codes(refused) == {"orders": ErrorCode.topic_authorization_failed}
    assert len(recorder.seen) == 1  # bob's produce never reached the log


def test_produce_honours_the_acl_host() -> None:
    image = image_with(acl("orders", Op.WRITE, host="10.0.0.1"))
    recorder = Recorder()
    here = ask(produce_entry(recorder), image, ApiKey.PRODUCE, 9, produce(["orders"]))
    assert produce_codes(here) == {"orders": 0}
    there = ask(
        produce_entry(recorder), image, ApiKey.PRODUCE, 9, produce(["orders"]), host="/10.0.0.2"
    )
    assert produce_codes(there) == {"orders": ErrorCode.topic_authorization_failed}


def test_a_transactional_produce_needs_write_on_its_transactional_id() -> None:
    image = image_with(acl("orders", Op.WRITE))
    recorder = Recorder()
    values = produce(["orders"], transactional_id="tx")
    response = ask(produce_entry(recorder), image, ApiKey.PRODUCE, 9, values)
    assert produce_codes(response) == {"orders": ErrorCode.transactional_id_authorization_failed}
    image = image_with(
        acl("orders", Op.WRITE), acl("tx", Op.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID)
    )
    assert produce_codes(ask(produce_entry(recorder), image, ApiKey.PRODUCE, 9, values)) == {
        "orders": 0
    }


def test_a_refused_acks_zero_produce_closes_the_connection() -> None:
    recorder = Recorder()
    image = image_with()
    assert ask(produce_entry(recorder), image, ApiKey.PRODUCE, 9, produce(["orders"], 0)) is None
    assert recorder.seen == []


def fetch(replica_id: int = -1) -> dict[str, object]:
    module: Any = request_module(ApiKey.FETCH, 13)
    partition = make(module.FetchPartition, {"partition": 0, "fetch_offset": 0})
    topic = make(module.FetchTopic, {"topic_id": ORDERS_ID, "partitions": (partition,)})
    return {"replica_id": replica_id, "max_wait": 0, "topics": (topic,), "session_epoch": -1}


def test_fetch_needs_read_for_consumers_and_cluster_action_for_followers() -> None:
    recorder = Recorder()
    entries = [Api(ApiKey.FETCH, (4, 13), recorder.fetch, BROKER, (CLUSTER_ACTION, TOPIC_READ))]
    image = image_with(acl("orders", Op.READ))
    allowed = ask(entries, image, ApiKey.FETCH, 13, fetch())
    assert allowed.responses == () and len(recorder.seen[0].body.topics) == 1
    refused = ask(entries, image, ApiKey.FETCH, 13, fetch(), principal=BOB)
    assert [int(p.error_code) for t in refused.responses for p in t.partitions] == [
        ErrorCode.topic_authorization_failed
    ]
    assert recorder.seen[1].body.topics == ()
    follower = ask(entries, image, ApiKey.FETCH, 13, fetch(replica_id=2))
    assert [int(p.error_code) for t in follower.responses for p in t.partitions] == [
        ErrorCode.topic_authorization_failed
    ]
    image = image_with(acl("kafka-cluster", Op.CLUSTER_ACTION, resource_type=ResourceType.CLUSTER))
    follower = ask(entries, image, ApiKey.FETCH, 13, fetch(replica_id=2))
    assert len(recorder.seen[-1].body.topics) == 1 and follower.responses == ()


def test_join_group_needs_read_on_the_group() -> None:
    recorder = Recorder()
    entries = [Api(ApiKey.JOIN_GROUP, (0, 9), recorder.join, BROKER, (GROUP_READ,))]
    values = {"group_id": "g", "session_timeout_ms": 1000, "protocol_type": "consumer"}
    image = image_with(acl("g", Op.READ, resource_type=ResourceType.GROUP))
    assert int(ask(entries, image, ApiKey.JOIN_GROUP, 9, values).error_code) == 0
    refused = ask(entries, image, ApiKey.JOIN_GROUP, 9, values, principal=BOB)
    assert int(refused.error_code) == ErrorCode.group_authorization_failed
    assert len(recorder.seen) == 1


# ---- the tables ------------------------------------------------------------------------------
@pytest.mark.parametrize("table", ["broker", "controller"])
def test_every_entry_with_declared_checks_is_checked(table: str) -> None:
    stub: Any = types.SimpleNamespace(add_listener=lambda _: None, add_publisher=lambda _: None)
    every = every_entry()
    controller_keys = {
        api.key for api in QuorumController(stub, stub, stub, ControllerConfig(1, "c")).apis()
    }
    entries = [api for api in every if (api.key in controller_keys) == (table == "controller")]
    assert len(entries) > 10
    authorizer = RequestAuthorizer(AuthorizerConfig(), MetadataImage)
    wrapped = guarded(entries, authorizer)  # raises for an entry with no check
    for before, after in zip(entries, wrapped, strict=True):
        unchecked = not before.authorization or (
            before.key in FORWARDED_APIS and before.listeners == BROKER  # the controller checks
        )
        assert (after.handler is before.handler) == unchecked, before.key.name


@pytest.mark.parametrize("api_key", [ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS])
def test_without_an_authorizer_the_acl_apis_are_security_disabled(api_key: ApiKey) -> None:
    controller = FakeController(cluster_image())
    apis = KafkaApis(1, "c", "PLAINTEXT", lambda: controller.image, controller, random.Random(0))
    module: Any = request_module(api_key, 3)
    values: dict[str, object] = acl_filter()
    if api_key == ApiKey.CREATE_ACLS:
        values = {"creations": (make(module.AclCreation, {"resource_name": "t"}),)}
    elif api_key == ApiKey.DELETE_ACLS:
        values = {"filters": (make(module.DeleteAclsFilter, acl_filter()),)}
    header = wire.RequestHeader(api_key, 3, 5, "client")
    request_class = next(getattr(module, n) for n in dir(module) if n.endswith("Request"))
    served = ServedApis(BROKER, guarded(apis.apis(), None))
    response: Any = asyncio.run(served.handle(header, make(request_class, values)))
    items = getattr(response, "results", getattr(response, "filter_results", (response,)))
    assert [int(i.error_code) for i in items] == [ErrorCode.security_disabled]
    assert controller.requests == []


# ---- groups, coordinators, offsets, transactions ---------------------------------------------
def stub(api_key: ApiKey, version: int, reply: dict[str, object], seen: list[Any]) -> Any:
    """A handler that records what reaches it and answers ``reply`` (the response's
    values), echoing the request's items where the test says so."""

    async def handle(request: ApiRequest) -> object:
        seen.append(request.body)
        module: Any = response_module(api_key, version)
        name = type(request.body).__name__.removesuffix("Request") + "Response"
        values = {k: v(request.body) if callable(v) else v for k, v in reply.items()}
        return make(getattr(module, name), values)

    return handle


def group(name: str, operation: AclOperation, principal: str = ALICE) -> AclBinding:
    return acl(name, operation, principal, resource_type=ResourceType.GROUP)


def test_describe_and_delete_groups_refuse_each_group_alone() -> None:
    seen: list[Any] = []
    module: Any = response_module(ApiKey.DESCRIBE_GROUPS, 5)
    described = stub(
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": lambda b: tuple(make(module.DescribedGroup, {"group_id": g}) for g in b.groups)},
        seen,
    )
    entries = [Api(ApiKey.DESCRIBE_GROUPS, (0, 5), described, BROKER, (GROUP_READ,))]
    image = image_with(group("mine", Op.DESCRIBE))
    response = ask(entries, image, ApiKey.DESCRIBE_GROUPS, 5, {"groups": ("mine", "theirs")})
    codes = {g.group_id: int(g.error_code) for g in response.groups}
    assert codes == {"mine": 0, "theirs": ErrorCode.group_authorization_failed}
    assert seen[0].groups == ("mine",)
    deleted_module: Any = response_module(ApiKey.DELETE_GROUPS, 2)
    deleter = stub(
        ApiKey.DELETE_GROUPS,
        2,
        {
            "results": lambda b: tuple(
                make(deleted_module.DeletableGroupResult, {"group_id": g}) for g in b.groups_names
            )
        },
        seen,
    )
    entries = [Api(ApiKey.DELETE_GROUPS, (0, 2), deleter, BROKER, (GROUP_READ,))]
    image = image_with(group("mine", Op.DESCRIBE), group("gone", Op.DELETE))
    response = ask(entries, image, ApiKey.DELETE_GROUPS, 2, {"groups_names": ("mine", "gone")})
    codes = {r.group_id: int(r.error_code) for r in response.results}
    assert codes == {"gone": 0, "mine": ErrorCode.group_authorization_failed}


def test_list_groups_shows_only_describable_groups_without_cluster_describe() -> None:
    module: Any = response_module(ApiKey.LIST_GROUPS, 5)
    listed = tuple(make(module.ListedGroup, {"group_id": g}) for g in ("mine", "theirs"))
    handler = stub(ApiKey.LIST_GROUPS, 5, {"groups": listed}, [])
    entries = [Api(ApiKey.LIST_GROUPS, (0, 5), handler, BROKER, (GROUP_READ,))]
    image = image_with(
        group("mine", Op.READ),
        acl("kafka-cluster", Op.DESCRIBE, BOB, resource_type=ResourceType.CLUSTER),
    )
    alice = ask(entries, image, ApiKey.LIST_GROUPS, 5, {})
    assert [g.group_id for g in alice.groups] == ["mine"]
    bob = ask(entries, image, ApiKey.LIST_GROUPS, 5, {}, principal=BOB)
    assert [g.group_id for g in bob.groups] == ["mine", "theirs"]


def test_find_coordinator_needs_describe_on_the_group_or_transactional_id() -> None:
    seen: list[Any] = []
    module: Any = response_module(ApiKey.FIND_COORDINATOR, 4)
    handler = stub(
        ApiKey.FIND_COORDINATOR,
        4,
        {
            "coordinators": lambda b: tuple(
                make(module.Coordinator, {"key": k, "node_id": 1, "host": "h", "port": 1})
                for k in b.coordinator_keys
            )
        },
        seen,
    )
    entries = [Api(ApiKey.FIND_COORDINATOR, (0, 6), handler, BROKER, (GROUP_READ,))]
    image = image_with(group("mine", Op.DESCRIBE))
    values = {"key_type": 0, "coordinator_keys": ("mine", "theirs")}
    response = ask(entries, image, ApiKey.FIND_COORDINATOR, 4, values)
    codes = {c.key: int(c.error_code) for c in response.coordinators}
    assert codes == {"mine": 0, "theirs": ErrorCode.group_authorization_failed}
    txn = ask(
        entries, image, ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ("tx",)}
    )
    assert [int(c.error_code) for c in txn.coordinators] == [
        ErrorCode.transactional_id_authorization_failed
    ]
    old_handler = stub(ApiKey.FIND_COORDINATOR, 3, {"node_id": 1}, seen)
    entries = [Api(ApiKey.FIND_COORDINATOR, (0, 6), old_handler, BROKER, (GROUP_READ,))]
    refused = ask(entries, image, ApiKey.FIND_COORDINATOR, 3, {"key": "theirs", "key_type": 0})
    assert int(refused.error_code) == ErrorCode.group_authorization_failed


def test_list_offsets_needs_describe_on_each_topic() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.LIST_OFFSETS, 7, {"topics": ()}, seen)
    entries = [Api(ApiKey.LIST_OFFSETS, (1, 7), handler, BROKER, (TOPIC_READ,))]
    module: Any = request_module(ApiKey.LIST_OFFSETS, 7)
    topics = tuple(
        make(
            module.ListOffsetsTopic,
            {"name": n, "partitions": (make(module.ListOffsetsPartition, {"partition_index": 0}),)},
        )
        for n in ("orders", "audit")
    )
    image = image_with(acl("orders", Op.READ))
    response = ask(entries, image, ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "topics": topics})
    assert [(t.name, [int(p.error_code) for p in t.partitions]) for t in response.topics] == [
        ("audit", [ErrorCode.topic_authorization_failed])
    ]
    assert [t.name for t in seen[0].topics] == ["orders"]


def test_offset_for_leader_epoch_needs_cluster_action_from_a_follower() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"topics": ()}, seen)
    entries = [Api(ApiKey.OFFSET_FOR_LEADER_EPOCH, (2, 4), handler, BROKER, (TOPIC_READ,))]
    module: Any = request_module(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4)
    partition = make(module.OffsetForLeaderPartition, {"partition": 0})
    topics = (make(module.OffsetForLeaderTopic, {"topic": "orders", "partitions": (partition,)}),)
    image = image_with(acl("orders", Op.DESCRIBE))
    client = ask(
        entries, image, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": -1, "topics": topics}
    )
    assert client.topics == () and len(seen) == 1
    follower = ask(
        entries, image, ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {"replica_id": 2, "topics": topics}
    )
    assert [int(p.error_code) for t in follower.topics for p in t.partitions] == [
        ErrorCode.cluster_authorization_failed
    ]
    assert len(seen) == 1


def test_init_producer_id_needs_the_transactional_id_or_idempotent_write() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.INIT_PRODUCER_ID, 4, {"producer_id": 7}, seen)
    entries = [Api(ApiKey.INIT_PRODUCER_ID, (0, 4), handler, BROKER, (TRANSACTIONAL_ID_WRITE,))]
    values = {
        "transactional_id": None,
        "transaction_timeout_ms": 1000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    image = image_with(acl("orders", Op.WRITE))  # WRITE on some topic: idempotence allowed
    assert int(ask(entries, image, ApiKey.INIT_PRODUCER_ID, 4, values).error_code) == 0
    refused = ask(entries, image, ApiKey.INIT_PRODUCER_ID, 4, values, principal=BOB)
    assert int(refused.error_code) == ErrorCode.cluster_authorization_failed
    denied_everywhere = image_with(
        acl("orders", Op.WRITE), acl("*", Op.WRITE, permission=Permission.DENY)
    )
    refused = ask(entries, denied_everywhere, ApiKey.INIT_PRODUCER_ID, 4, values)
    assert int(refused.error_code) == ErrorCode.cluster_authorization_failed
    transactional = values | {"transactional_id": "tx"}
    refused = ask(entries, image, ApiKey.INIT_PRODUCER_ID, 4, transactional)
    assert int(refused.error_code) == ErrorCode.transactional_id_authorization_failed
    image = image_with(acl("tx", Op.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID))
    assert int(ask(entries, image, ApiKey.INIT_PRODUCER_ID, 4, transactional).error_code) == 0
    assert len(seen) == 2


def test_end_txn_needs_write_on_the_transactional_id() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.END_TXN, 3, {}, seen)
    entries = [Api(ApiKey.END_TXN, (0, 3), handler, BROKER, (TRANSACTIONAL_ID_WRITE,))]
    values = {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "committed": True}
    image = image_with(acl("tx", Op.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID))
    assert int(ask(entries, image, ApiKey.END_TXN, 3, values).error_code) == 0
    refused = ask(entries, image, ApiKey.END_TXN, 3, values, principal=BOB)
    assert int(refused.error_code) == ErrorCode.transactional_id_authorization_failed
    assert len(seen) == 1


# ---- the controller listener -----------------------------------------------------------------
def test_a_stranger_on_the_controller_listener_cannot_vote_or_heartbeat() -> None:
    """Issue 29's forged Votes and BrokerHeartbeats: CLUSTER_ACTION on the cluster is needed
    (a broker's or controller's principal is a super user or holds it)."""
    seen: list[Any] = []

    async def quorum(request: ApiRequest) -> object:
        seen.append(request.body)
        module: Any = response_module(request.header.api_key, request.api_version)
        name = type(request.body).__name__.removesuffix("Request") + "Response"
        return make(getattr(module, name), {})

    entries = [
        Api(ApiKey.VOTE, (0, 2), quorum, BROKER, (CLUSTER_ACTION,)),
        Api(ApiKey.BROKER_HEARTBEAT, (0, 2), quorum, BROKER, (CLUSTER_ACTION,)),
    ]
    image = image_with(
        acl("kafka-cluster", Op.CLUSTER_ACTION, "User:broker", resource_type=ResourceType.CLUSTER)
    )
    vote = ask(entries, image, ApiKey.VOTE, 1, {"topics": ()}, principal="User:mallory")
    assert int(vote.error_code) == ErrorCode.cluster_authorization_failed
    heartbeat = {"broker_id": 1, "broker_epoch": 1, "current_metadata_offset": 0}
    forged = ask(entries, image, ApiKey.BROKER_HEARTBEAT, 2, heartbeat, principal="User:mallory")
    assert int(forged.error_code) == ErrorCode.cluster_authorization_failed
    assert seen == []
    real = ask(entries, image, ApiKey.BROKER_HEARTBEAT, 2, heartbeat, principal="User:broker")
    assert int(real.error_code) == 0 and len(seen) == 1


def committed(module: Any, topic_entity: str, partition_entity: str, names: list[str]) -> Any:
    return tuple(
        make(
            getattr(module, topic_entity),
            {
                "name": n,
                "partitions": (
                    make(
                        getattr(module, partition_entity),
                        {"partition_index": 0, "committed_offset": 42, "metadata": "m"},
                    ),
                ),
            },
        )
        for n in names
    )


def test_offset_fetch_needs_describe_on_the_group_and_its_topics() -> None:
    seen: list[Any] = []
    module: Any = response_module(ApiKey.OFFSET_FETCH, 7)
    stored = committed(
        module, "OffsetFetchResponseTopic", "OffsetFetchResponsePartition", ["orders", "audit"]
    )
    handler = stub(ApiKey.OFFSET_FETCH, 7, {"topics": stored}, seen)
    entries = [Api(ApiKey.OFFSET_FETCH, (1, 9), handler, BROKER, (GROUP_READ,))]
    image = image_with(group("g", Op.DESCRIBE), acl("orders", Op.READ))
    every = ask(entries, image, ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": None})
    assert [(t.name, t.partitions[0].committed_offset) for t in every.topics] == [("orders", 42)]
    request: Any = request_module(ApiKey.OFFSET_FETCH, 7)
    named = tuple(
        make(request.OffsetFetchRequestTopic, {"name": n, "partition_indexes": (0,)})
        for n in ("orders", "audit")
    )
    response = ask(entries, image, ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": named})
    assert [
        (t.name, int(t.partitions[0].error_code), t.partitions[0].committed_offset)
        for t in response.topics
    ] == [
        ("orders", 0, 42),
        ("audit", ErrorCode.topic_authorization_failed, -1),
    ]
    refused = ask(entries, image, ApiKey.OFFSET_FETCH, 7, {"group_id": "g", "topics": None}, BOB)
    assert int(refused.error_code) == ErrorCode.group_authorization_failed
    assert len(seen) == 2


def test_offset_fetch_of_several_groups_refuses_each_group_alone() -> None:
    seen: list[Any] = []
    module: Any = response_module(ApiKey.OFFSET_FETCH, 9)
    stored = committed(
        module, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions", ["orders"]
    )
    handler = stub(
        ApiKey.OFFSET_FETCH,
        9,
        {
            "groups": lambda b: tuple(
                make(module.OffsetFetchResponseGroup, {"group_id": g.group_id, "topics": stored})
                for g in b.groups
            )
        },
        seen,
    )
    entries = [Api(ApiKey.OFFSET_FETCH, (1, 9), handler, BROKER, (GROUP_READ,))]
    request: Any = request_module(ApiKey.OFFSET_FETCH, 9)
    groups = tuple(
        make(request.OffsetFetchRequestGroup, {"group_id": g, "member_epoch": -1, "topics": None})
        for g in ("mine", "theirs")
    )
    image = image_with(group("mine", Op.DESCRIBE))  # no ACL on the topic: left out
    response = ask(entries, image, ApiKey.OFFSET_FETCH, 9, {"groups": groups})
    assert [(g.group_id, int(g.error_code), len(g.topics)) for g in response.groups] == [
        ("mine", 0, 0),
        ("theirs", ErrorCode.group_authorization_failed, 0),
    ]
    assert [g.group_id for g in seen[0].groups] == ["mine"]


def commit_topics(
    api_key: ApiKey, version: int, entity: str, partition: str, names: list[str]
) -> Any:
    module: Any = request_module(api_key, version)
    return tuple(
        make(
            getattr(module, entity),
            {
                "name": n,
                "partitions": (
                    make(getattr(module, partition), {"partition_index": 0, "committed_offset": 1}),
                ),
            },
        )
        for n in names
    )


def commit_codes(response: Any) -> dict[str, int]:
    return {t.name: int(p.error_code) for t in response.topics for p in t.partitions}


def test_offset_commit_needs_read_on_the_group_and_each_topic() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.OFFSET_COMMIT, 9, {"topics": ()}, seen)
    entries = [Api(ApiKey.OFFSET_COMMIT, (2, 9), handler, BROKER, (GROUP_READ, TOPIC_READ))]
    topics = commit_topics(
        ApiKey.OFFSET_COMMIT, 9, "OffsetCommitRequestTopic", "OffsetCommitRequestPartition",
        ["orders", "audit"],
    )  # fmt: skip
    values = {
        "group_id": "g",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "topics": topics,
    }
    image = image_with(group("g", Op.READ), acl("orders", Op.READ))
    response = ask(entries, image, ApiKey.OFFSET_COMMIT, 9, values)
    assert commit_codes(response) == {"audit": ErrorCode.topic_authorization_failed}
    assert [t.name for t in seen[0].topics] == ["orders"]
    refused = ask(entries, image, ApiKey.OFFSET_COMMIT, 9, values, principal=BOB)
    assert commit_codes(refused) == {
        "orders": ErrorCode.group_authorization_failed,
        "audit": ErrorCode.group_authorization_failed,
    }
    assert len(seen) == 1


def test_txn_offset_commit_needs_the_transactional_id_first() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.TXN_OFFSET_COMMIT, 3, {"topics": ()}, seen)
    entries = [Api(ApiKey.TXN_OFFSET_COMMIT, (0, 3), handler, BROKER, (TRANSACTIONAL_ID_WRITE,))]
    topics = commit_topics(
        ApiKey.TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestTopic",
        "TxnOffsetCommitRequestPartition", ["orders"],
    )  # fmt: skip
    values = {"transactional_id": "tx", "group_id": "g", "producer_id": 1, "topics": topics}
    image = image_with(group("g", Op.READ), acl("orders", Op.READ))
    refused = ask(entries, image, ApiKey.TXN_OFFSET_COMMIT, 3, values)
    assert commit_codes(refused) == {"orders": ErrorCode.transactional_id_authorization_failed}
    image = image_with(
        group("g", Op.READ),
        acl("orders", Op.READ),
        acl("tx", Op.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID),
    )
    assert commit_codes(ask(entries, image, ApiKey.TXN_OFFSET_COMMIT, 3, values)) == {}
    assert len(seen) == 1


def test_add_partitions_to_txn_adds_nothing_if_any_topic_is_refused() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {}, seen)
    entries = [
        Api(ApiKey.ADD_PARTITIONS_TO_TXN, (0, 4), handler, BROKER, (TRANSACTIONAL_ID_WRITE,))
    ]
    module: Any = request_module(ApiKey.ADD_PARTITIONS_TO_TXN, 3)
    topics = tuple(
        make(module.AddPartitionsToTxnTopic, {"name": n, "partitions": (0,)})
        for n in ("orders", "audit")
    )
    values = {
        "v3_and_below_transactional_id": "tx",
        "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": topics,
    }
    txn = acl("tx", Op.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID)
    image = image_with(txn, acl("orders", Op.WRITE))
    response = ask(entries, image, ApiKey.ADD_PARTITIONS_TO_TXN, 3, values)
    codes = {
        t.name: int(p.partition_error_code)
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }
    assert codes == {
        "orders": ErrorCode.operation_not_attempted,
        "audit": ErrorCode.topic_authorization_failed,
    }
    assert seen == []
    image = image_with(txn, acl("orders", Op.WRITE), acl("audit", Op.WRITE))
    ask(entries, image, ApiKey.ADD_PARTITIONS_TO_TXN, 3, values)
    assert len(seen) == 1


def test_offset_delete_needs_delete_on_the_group_and_read_on_each_topic() -> None:
    seen: list[Any] = []
    handler = stub(ApiKey.OFFSET_DELETE, 0, {"topics": ()}, seen)
    entries = [Api(ApiKey.OFFSET_DELETE, (0, 0), handler, BROKER, (GROUP_READ, TOPIC_READ))]
    module: Any = request_module(ApiKey.OFFSET_DELETE, 0)
    topics = tuple(
        make(
            module.OffsetDeleteRequestTopic,
            {
                "name": n,
                "partitions": (make(module.OffsetDeleteRequestPartition, {"partition_index": 0}),),
            },
        )
        for n in ("orders", "audit")
    )
    image = image_with(group("g", Op.DELETE), acl("orders", Op.READ))
    response = ask(entries, image, ApiKey.OFFSET_DELETE, 0, {"group_id": "g", "topics": topics})
    assert int(response.error_code) == 0
    assert commit_codes(response) == {"audit": ErrorCode.topic_authorization_failed}
    assert [t.name for t in seen[0].topics] == ["orders"]
    refused = ask(entries, image, ApiKey.OFFSET_DELETE, 0, {"group_id": "g", "topics": topics}, BOB)
    assert int(refused.error_code) == ErrorCode.group_authorization_failed
    assert len(seen) == 1


def test_transactions_are_described_and_listed_only_with_describe() -> None:
    seen: list[Any] = []
    described: Any = response_module(ApiKey.DESCRIBE_TRANSACTIONS, 0)
    handler = stub(
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        {
            "transaction_states": lambda b: tuple(
                make(described.TransactionState, {"transactional_id": t})
                for t in b.transactional_ids
            )
        },
        seen,
    )
    listed: Any = response_module(ApiKey.LIST_TRANSACTIONS, 1)
    states = tuple(
        make(listed.TransactionState, {"transactional_id": t, "transaction_state": "Ongoing"})
        for t in ("tx", "other")
    )
    lister = stub(ApiKey.LIST_TRANSACTIONS, 1, {"transaction_states": states}, seen)
    entries = [
        Api(ApiKey.DESCRIBE_TRANSACTIONS, (0, 0), handler, BROKER, (TRANSACTIONAL_ID_WRITE,)),
        Api(ApiKey.LIST_TRANSACTIONS, (0, 1), lister, BROKER, (TRANSACTIONAL_ID_WRITE,)),
    ]
    image = image_with(acl("tx", Op.DESCRIBE, resource_type=ResourceType.TRANSACTIONAL_ID))
    response = ask(
        entries, image, ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": ("tx", "other")}
    )
    codes = {t.transactional_id: int(t.error_code) for t in response.transaction_states}
    assert codes == {"tx": 0, "other": ErrorCode.transactional_id_authorization_failed}
    assert seen[0].transactional_ids == ("tx",)
    values = {"state_filters": (), "producer_id_filters": (), "duration_filter": -1}
    response = ask(entries, image, ApiKey.LIST_TRANSACTIONS, 1, values)
    assert [t.transactional_id for t in response.transaction_states] == ["tx"]


def test_consumer_group_describe_refuses_each_group_alone() -> None:
    seen: list[Any] = []
    module: Any = response_module(ApiKey.CONSUMER_GROUP_DESCRIBE, 1)
    handler = stub(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        1,
        {
            "groups": lambda b: tuple(
                make(module.DescribedGroup, {"group_id": g}) for g in b.group_ids
            )
        },
        seen,
    )
    entries = [Api(ApiKey.CONSUMER_GROUP_DESCRIBE, (0, 1), handler, BROKER, (GROUP_READ,))]
    image = image_with(group("mine", Op.DESCRIBE))
    values = {"group_ids": ("mine", "theirs"), "include_authorized_operations": False}
    response = ask(entries, image, ApiKey.CONSUMER_GROUP_DESCRIBE, 1, values)
    codes = {g.group_id: int(g.error_code) for g in response.groups}
    assert codes == {"mine": 0, "theirs": ErrorCode.group_authorization_failed}
    assert seen[0].group_ids == ("mine",)


def one_of_each(entity_type: Any) -> Any:
    """A valid entity whose every array of entities holds one (recursively built) element
    (the wire fuzzer's template shape)."""
    values: dict[str, object] = {}
    for field in dataclasses.fields(entity_type):
        annotation = field.type
        if get_origin(annotation) is types.UnionType:
            annotation = next(a for a in get_args(annotation) if a is not type(None))
        element = get_args(annotation)[0] if get_origin(annotation) is tuple else None
        if element is not None and dataclasses.is_dataclass(element):
            values[field.name] = (one_of_each(element),)
    return make(entity_type, values)


def every_entry() -> list[Api]:
    stub_: Any = types.SimpleNamespace(add_listener=lambda _: None, add_publisher=lambda _: None)
    apis = KafkaApis(
        1, "c", "PLAINTEXT", MetadataImage, FakeController(MetadataImage()),
        random.Random(0), replicas=stub_, producer_ids=stub_,
    )  # fmt: skip
    controller = QuorumController(stub_, stub_, stub_, ControllerConfig(1, "c"))
    return [
        *apis.apis(),
        *GroupApis(stub_, MetadataImage, stub_).apis("PLAINTEXT"),
        *TxnApis(stub_, stub_, MetadataImage, stub_).apis(),
        *log_admin_apis(stub_),
        *controller.apis(),
    ]


async def zero_answer(request: ApiRequest) -> object:
    """What a handler that found nothing answers: the response with every field zero."""
    module: Any = response_module(request.header.api_key, request.api_version)
    name = type(request.body).__name__.removesuffix("Request") + "Response"
    return make(getattr(module, name), {})


@pytest.mark.parametrize(
    ("api_key", "version"),
    sorted(
        {
            (api.key, v)
            for api in every_entry()
            if api.authorization
            for v in range(api.versions[0], api.versions[1] + 1)
        }
    ),
)
def test_every_refusal_encodes_in_every_version(api_key: ApiKey, version: int) -> None:
    """A stranger's request of every API and version, with one element in every array, is
    answered in a shape its version carries (acks=0 Produce: the connection closes)."""
    entries = [
        dataclasses.replace(api, handler=zero_answer) for api in every_entry() if api.key == api_key
    ]
    module: Any = request_module(api_key, version)
    request_class = next(
        getattr(module, n)
        for n in dir(module)
        if n.endswith("Request") and getattr(getattr(module, n), "__api_key__", None) == api_key
    )
    authorizer = RequestAuthorizer(AuthorizerConfig(), lambda: image_with(acl("x", Op.READ)))
    served = ServedApis(BROKER, guarded(entries[:1], authorizer))
    header = wire.RequestHeader(api_key, version, 5, "client")

    async def connection() -> object | None:
        PRINCIPAL.set("User:stranger")
        return await served.handle(header, one_of_each(request_class))

    response = asyncio.run(connection())
    if response is None:
        assert api_key == ApiKey.PRODUCE  # acks=0 (the zero value): Kafka closes
        return
    wire.decode_response(api_key, version, wire.encode_response(header, response)[4:])


def test_authorized_operations_are_filled_in_where_asked_for() -> None:
    """Kafka's bit field (bit = operation code) of what the principal may do: READ on a
    topic implies DESCRIBE (bits 3 and 8)."""
    image = image_with(
        acl("orders", Op.READ),
        acl("kafka-cluster", Op.DESCRIBE, resource_type=ResourceType.CLUSTER),
        group("g", Op.READ),
    )
    entries, _ = kafka_apis(image)
    asked = metadata(None, version=10) | {
        "include_topic_authorized_operations": True,
        "include_cluster_authorized_operations": True,
    }
    response = ask(entries, image, ApiKey.METADATA, 10, asked)
    assert [(t.name, t.topic_authorized_operations) for t in response.topics] == [
        ("orders", (1 << 3) | (1 << 8))
    ]
    assert response.cluster_authorized_operations == 1 << 8
    not_asked = ask(entries, image, ApiKey.METADATA, 10, metadata(None, version=10))
    assert not_asked.topics[0].topic_authorized_operations != (1 << 3) | (1 << 8)
    values = {"include_cluster_authorized_operations": True}
    cluster = ask(entries, image, ApiKey.DESCRIBE_CLUSTER, 1, values)
    assert cluster.cluster_authorized_operations == 1 << 8
    module: Any = response_module(ApiKey.DESCRIBE_GROUPS, 5)
    handler = stub(
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": lambda b: tuple(make(module.DescribedGroup, {"group_id": g}) for g in b.groups)},
        [],
    )
    groups = [Api(ApiKey.DESCRIBE_GROUPS, (0, 5), handler, BROKER, (GROUP_READ,))]
    described = ask(
        groups,
        image,
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": ("g",), "include_authorized_operations": True},
    )
    assert [g.authorized_operations for g in described.groups] == [(1 << 3) | (1 << 8)]


def test_alter_replica_log_dirs_needs_alter_on_the_cluster() -> None:
    """Refused, every partition is answered CLUSTER_AUTHORIZATION_FAILED and nothing reaches
    the handler; allowed (ALTER on the cluster), the request does."""
    image = image_with(acl("kafka-cluster", Op.ALTER, resource_type=ResourceType.CLUSTER))
    seen: list[Any] = []
    entries = [
        dataclasses.replace(
            api,
            handler=stub(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, {"results": ()}, seen),
        )
        for api in log_admin_apis(None)  # type: ignore[arg-type]
        if api.key == ApiKey.ALTER_REPLICA_LOG_DIRS
    ]
    module: Any = request_module(ApiKey.ALTER_REPLICA_LOG_DIRS, 2)
    topics = (
        make(module.AlterReplicaLogDirTopic, {"name": "orders", "partitions": (0, 1)}),
        make(module.AlterReplicaLogDirTopic, {"name": "other", "partitions": (3,)}),
    )
    values = {"dirs": (make(module.AlterReplicaLogDir, {"path": "/d2", "topics": topics}),)}
    refused = ask(entries, image, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, values, principal=BOB)
    assert [
        (t.topic_name, p.partition_index, int(p.error_code))
        for t in refused.results
        for p in t.partitions
    ] == [
        ("orders", 0, ErrorCode.cluster_authorization_failed),
        ("orders", 1, ErrorCode.cluster_authorization_failed),
        ("other", 3, ErrorCode.cluster_authorization_failed),
    ]
    assert seen == []
    assert ask(entries, image, ApiKey.ALTER_REPLICA_LOG_DIRS, 2, values).results == ()
    assert len(seen) == 1
