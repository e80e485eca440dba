"""Authorization of every request, as Kafka's KafkaApis and ControllerApis do it.

``guarded(entries, authorizer)`` wraps a node's API table entries (kraft/node.py) so each
request is authorized before its handler runs, for the principal and address the
connection carries (ApiRequest.principal, ApiRequest.client_host), against the checks
declared on its entry (protocol/api_table.py):

- An API whose checks are all on the cluster (ElectLeaders, reassignments, UpdateFeatures,
  DescribeCluster, the ACL APIs, the quorum and controller APIs) needs any one of them;
  refused, it is answered CLUSTER_AUTHORIZATION_FAILED in the API's own shape.
- Produce needs WRITE on each topic (TOPIC_AUTHORIZATION_FAILED for that topic's
  partitions) and, with a transactional id, WRITE on it (every partition
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an acks=0 produce that is refused anything closes
  the connection, as Kafka does.
- Fetch: a follower (replica id >= 0) needs CLUSTER_ACTION, a consumer READ on each topic;
  refused partitions get TOPIC_AUTHORIZATION_FAILED.
- Metadata lists only topics the principal may DESCRIBE; a named topic it may not is
  answered TOPIC_AUTHORIZATION_FAILED whether or not it exists (so existence does not
  leak), as is a missing topic auto-creation would create without CREATE on the cluster or
  the topic.
- CreateTopics (CREATE on the cluster or the topic), DeleteTopics (DELETE), CreatePartitions
  (ALTER), AlterConfigs and IncrementalAlterConfigs (ALTER_CONFIGS on the topic, or on the
  cluster for a broker resource), DescribeConfigs (DESCRIBE_CONFIGS), per item: the refused
  items are answered with the error, the others handled (forwarded) as usual.
- JoinGroup, SyncGroup, Heartbeat, LeaveGroup and ConsumerGroupHeartbeat need READ on the
  group (GROUP_AUTHORIZATION_FAILED); OffsetCommit READ on the group (every partition
  GROUP_AUTHORIZATION_FAILED) and READ on each topic; OffsetFetch DESCRIBE on the group and
  on each topic (TOPIC_AUTHORIZATION_FAILED if named, else left out); DescribeGroups DESCRIBE and
  DeleteGroups DELETE on each group; ListGroups lists every group with DESCRIBE on the
  cluster, else only the groups the principal may DESCRIBE; FindCoordinator DESCRIBE on the
  group or transactional id; ConsumerGroupDescribe DESCRIBE on each group; OffsetDelete
  DELETE on the group and READ on each topic.
- ListOffsets and a client's OffsetForLeaderEpoch need DESCRIBE on each topic (a
  follower's OffsetForLeaderEpoch CLUSTER_ACTION); DescribeTopicPartitions describes only
  what the principal may DESCRIBE.
- InitProducerId with a transactional id, EndTxn, AddOffsetsToTxn, AddPartitionsToTxn and
  TxnOffsetCommit need WRITE on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
  AddOffsetsToTxn and TxnOffsetCommit also READ on the group, AddPartitionsToTxn WRITE and
  TxnOffsetCommit READ on each topic; a broker's AddPartitionsToTxn v4 CLUSTER_ACTION); an
  idempotent InitProducerId needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
  (Authorizer.authorize_any), else CLUSTER_AUTHORIZATION_FAILED. DescribeTransactions needs
  DESCRIBE on each transactional id; ListTransactions lists only those.
- DeleteRecords needs DELETE and DescribeProducers READ on each topic
  (TOPIC_AUTHORIZATION_FAILED for its partitions); DescribeLogDirs DESCRIBE on the cluster;
  AlterReplicaLogDirs ALTER on the cluster (every partition CLUSTER_AUTHORIZATION_FAILED).

Every entry that declares checks gets one (an entry without raises when the table is
built, so a new API cannot be served unchecked by mistake). What is not done (the topics
inside DescribeTransactions and ConsumerGroupDescribe answers are not filtered,
DescribeTopicPartitions' authorized operations are not filled in) is in docs/acls.md.
Metadata, DescribeCluster, DescribeGroups and ConsumerGroupDescribe fill in the authorized
operations a request asks for (``authorized_operations``).

The admin requests a broker forwards (broker/forwarding.py's FORWARDED_APIS) are authorized
in one place, the active controller, as Kafka's KRaft brokers leave them to ControllerApis:
the broker forwards them unchecked in an Envelope (broker/envelope.py), the controller
checks the Envelope as a CLUSTER_ACTION of the broker's principal and then the inner request,
with its entry's checks (the same as the broker entry declares), for the client's principal
and address. A client of the controller listener (``--bootstrap-controller``) gets the same
checks. The broker checks what it answers itself, auto-creation's CREATE included (its
CreateTopics then goes to the controller as the broker's own request).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.forwarding import FORWARDED_APIS
from metadata.authorizer import CLUSTER_NAME, AclBinding, Authorizer, AuthorizerConfig
from metadata.controller.refusals import refusal, refuses
from metadata.image import MetadataImage
from protocol.api_keys import ApiKey
from protocol.api_table import (
    CONTROLLER,
    AclOperation,
    Api,
    ApiHandler,
    ApiRequest,
    ResourceType,
)
from protocol.entities import has_field, make, response_module
from protocol.server import NO_RESPONSE

Op = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID
TOPIC_CONFIG_RESOURCE = 2  # ConfigResource.Type


# Entries declaring resource checks not made yet: served as without an authorizer.
class RequestAuthorizer:
    """The authorizer over the latest image's ACLs (rebuilt when they change), with the
    node's ``super.users`` and ``allow.everyone.if.no.acl.found``."""

    __slots__ = ("_acls", "_authorizer", "_bugs", "_config", "_image", "auto_create_topics")

    def __init__(
        self,
        config: AuthorizerConfig,
        image: Callable[[], MetadataImage],
        *,
        auto_create_topics: bool = False,
        bugs: frozenset[str] = frozenset(),
    ) -> None:
        self._config = config
        self._image = image
        self._bugs = bugs
        self._acls: Mapping[uuid.UUID, AclBinding] | None = None
        self._authorizer = Authorizer((), config, bugs)
        self.auto_create_topics = auto_create_topics

    def image(self) -> MetadataImage:
        return self._image()

    def current(self) -> Authorizer:
        acls = self._image().acls
        if acls is not self._acls:  # an image shares its ACL map until one changes
            self._authorizer = Authorizer(acls.values(), self._config, self._bugs)
            self._acls = acls
        return self._authorizer

    def allows(
        self, request: ApiRequest, resource_type: ResourceType, name: str, operation: Op
    ) -> bool:
        return self.current().authorize(
            request.principal, request.client_host, resource_type, name, operation
        )

    def cluster(self, request: ApiRequest, operation: Op) -> bool:
        return self.allows(request, CLUSTER, CLUSTER_NAME, operation)


Check = Callable[[RequestAuthorizer, ApiHandler, ApiRequest], Any]
# The operations an ``authorized_operations`` field reports per resource type (Kafka's
# AclEntry.supportedOperations, ALL excluded).
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[Op, ...]] = {
    ResourceType.TOPIC: (
        Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER, Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE),
    ResourceType.CLUSTER: (
        Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE,
        Op.ALTER, Op.DESCRIBE,
    ),
}  # fmt: skip


def authorized_operations(
    authz: RequestAuthorizer, request: ApiRequest, resource_type: ResourceType, name: str
) -> int:
    """Kafka's 32-bit field of the operations ``request``'s principal may do on the
    resource: bit ``code`` set for each allowed operation."""
    return sum(
        1 << int(op)
        for op in SUPPORTED_OPERATIONS[resource_type]
        if authz.allows(request, resource_type, name, op)
    )


def guarded(entries: Iterable[Api], authorizer: RequestAuthorizer | None) -> list[Api]:
    """``entries`` with their handlers behind authorization (unchanged without an
    authorizer, for entries that declare no checks: ApiVersions, and for the admin APIs a
    broker forwards: the controller checks those, see the module's docstring)."""
    if authorizer is None:
        return list(entries)
    result = []
    for api in entries:
        check = None if _forwarded_by_broker(api) else _check_for(api)
        if check is None:
            result.append(api)
        else:
            result.append(dataclasses.replace(api, handler=_wrap(check, authorizer, api.handler)))
    return result


def _forwarded_by_broker(api: Api) -> bool:
    """A broker listener's entry of an API it forwards to the controller in an Envelope;
    its declared checks are the controller entry's, made there."""
    return api.key in FORWARDED_APIS and CONTROLLER not in api.listeners


def _wrap(check: Check, authorizer: RequestAuthorizer, handler: ApiHandler) -> ApiHandler:
    async def handle(request: ApiRequest) -> object | None:
        return await check(authorizer, handler, request)

    return handle


def _check_for(api: Api) -> Check | None:
    if not api.authorization:
        return None
    if all(action.resource_type == CLUSTER for action in api.authorization):
        # (the quorum's Fetch among them: CLUSTER_ACTION only, unlike the data plane's)
        shaped = _CLUSTER_REFUSALS.get(api.key)
        if shaped is not None:
            return shaped
        return _cluster_check(tuple(action.operation for action in api.authorization))
    specific = _CHECKS.get(api.key)
    if specific is not None:
        return specific
    raise AssertionError(f"{api.key.name}: no authorization check for {api.authorization}")


def _cluster_check(operations: tuple[Op, ...]) -> Check:
    async def check(authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest) -> Any:
        if any(authz.cluster(request, op) for op in operations):
            return await handler(request)
        return whole_refusal(request, ErrorCode.cluster_authorization_failed)

    return check


def whole_refusal(request: ApiRequest, code: ErrorCode) -> object | None:
    """``request`` refused as a whole with ``code``, in its API's shape; None (close the
    connection) for an API whose response has nowhere to say it."""
    key, version = request.header.api_key, request.api_version
    if refuses(key):
        return refusal(key, version, request.body, code)
    module: Any = response_module(key, version)
    name = type(request.body).__name__.removesuffix("Request") + "Response"
    entity = getattr(module, name, None)
    if entity is None or not has_field(entity, "error_code"):
        return None
    return make(entity, {"error_code": code})


@dataclass(frozen=True, slots=True)
class _Single:
    """Checks on the one resource each named field of the request names, in order; the
    first refused answers the whole request with its error."""

    checks: tuple[tuple[str, ResourceType, Op, ErrorCode], ...]

    async def __call__(
        self, authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
    ) -> Any:
        for field, resource_type, operation, code in self.checks:
            if not authz.allows(request, resource_type, getattr(request.body, field), operation):
                return whole_refusal(request, code)
        return await handler(request)


_GROUP_READ = ("group_id", GROUP, Op.READ, ErrorCode.group_authorization_failed)
_TXN_WRITE = (
    "transactional_id",
    TRANSACTIONAL_ID,
    Op.WRITE,
    ErrorCode.transactional_id_authorization_failed,
)


async def _init_producer_id(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """A transactional producer needs WRITE on its transactional id; an idempotent one
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (Kafka's KafkaApis)."""
    txn = request.body.transactional_id
    if txn is not None:
        if authz.allows(request, TRANSACTIONAL_ID, txn, Op.WRITE):
            return await handler(request)
        return whole_refusal(request, ErrorCode.transactional_id_authorization_failed)
    if authz.cluster(request, Op.IDEMPOTENT_WRITE) or authz.current().authorize_any(
        request.principal, request.client_host, TOPIC, Op.WRITE
    ):
        return await handler(request)
    return whole_refusal(request, ErrorCode.cluster_authorization_failed)


async def _find_coordinator(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """DESCRIBE on the group (key type 0) or transactional id (1) whose coordinator is
    asked for; v4+ ask for several keys, each refused alone."""
    if hasattr(request.body, "coordinator_keys"):
        return await _FIND_COORDINATORS(authz, handler, request)
    code = _coordinator_denial(authz, request, request.body.key)
    return await handler(request) if code is None else whole_refusal(request, code)


def _coordinator_denial(
    authz: RequestAuthorizer, request: ApiRequest, key: Any
) -> ErrorCode | None:
    if int(getattr(request.body, "key_type", 0)) == 1:  # v0 names groups only
        if authz.allows(request, TRANSACTIONAL_ID, key, Op.DESCRIBE):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if authz.allows(request, GROUP, key, Op.DESCRIBE):
        return None
    return ErrorCode.group_authorization_failed


async def _list_groups(authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest) -> Any:
    """DESCRIBE on the cluster lists every group; otherwise only the groups the principal
    may DESCRIBE are listed."""
    response: Any = await handler(request)
    if response is None or authz.cluster(request, Op.DESCRIBE):
        return response
    visible = tuple(
        g for g in response.groups if authz.allows(request, GROUP, g.group_id, Op.DESCRIBE)
    )
    return dataclasses.replace(response, groups=visible)


async def _describe_topic_partitions(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """Only topics the principal may DESCRIBE are described; a named one it may not is
    answered TOPIC_AUTHORIZATION_FAILED."""
    response: Any = await handler(request)
    if response is None:
        return None
    module: Any = response_module(ApiKey.DESCRIBE_TOPIC_PARTITIONS, request.api_version)
    named = {t.name for t in request.body.topics}
    topics = []
    for topic in response.topics:
        if topic.name is None or authz.allows(request, TOPIC, topic.name, Op.DESCRIBE):
            topics.append(topic)
        elif topic.name in named:
            values = {
                "error_code": ErrorCode.topic_authorization_failed,
                "name": topic.name,
                "topic_id": None,
                "is_internal": False,
                "partitions": (),
            }
            topics.append(make(module.DescribeTopicPartitionsResponseTopic, values))
    return dataclasses.replace(response, topics=tuple(topics))


# ---- Produce ---------------------------------------------------------------------------------
async def _produce(authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest) -> Any:
    body = request.body
    txn = body.transactional_id
    if txn is not None and not authz.allows(request, TRANSACTIONAL_ID, txn, Op.WRITE):
        denied, allowed = list(body.topic_data), list[Any]()
        code = ErrorCode.transactional_id_authorization_failed
    else:
        allowed, denied = _split(
            body.topic_data, lambda t: authz.allows(request, TOPIC, t.name, Op.WRITE)
        )
        code = ErrorCode.topic_authorization_failed
    if not denied:
        return await handler(request)
    if body.acks == 0:
        return None  # Kafka closes an acks=0 producer's connection on any error
    module: Any = response_module(ApiKey.PRODUCE, request.api_version)
    errors = tuple(
        make(
            module.TopicProduceResponse,
            {
                "name": topic.name,
                "partition_responses": tuple(
                    make(
                        module.PartitionProduceResponse,
                        {
                            "index": p.index,
                            "error_code": code,
                            "base_offset": -1,
                            "log_append_time": None,  # -1 on the wire
                            "log_start_offset": -1,
                        },
                    )
                    for p in topic.partition_data
                ),
            },
        )
        for topic in denied
    )
    if not allowed:
        return make(module.ProduceResponse, {"responses": errors})
    response: Any = await handler(_narrowed(request, topic_data=tuple(allowed)))
    if response is None or response is NO_RESPONSE:
        return response
    return dataclasses.replace(response, responses=(*response.responses, *errors))


# ---- Fetch -----------------------------------------------------------------------------------
async def _fetch(authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest) -> Any:
    body = request.body
    image = authz.image()
    if body.replica_id >= 0:
        if authz.cluster(request, Op.CLUSTER_ACTION):
            return await handler(request)
        allowed, denied = list[Any](), list(body.topics)
    else:

        def readable(topic: Any) -> bool:
            name = _fetch_topic_name(topic, image)
            return name is None or authz.allows(request, TOPIC, name, Op.READ)

        allowed, denied = _split(body.topics, readable)
    if not denied:
        return await handler(request)
    module: Any = response_module(ApiKey.FETCH, request.api_version)
    errors = tuple(
        make(
            module.FetchableTopicResponse,
            {
                "topic": getattr(topic, "topic", ""),
                "topic_id": getattr(topic, "topic_id", uuid.UUID(int=0)),
                "partitions": tuple(
                    make(
                        module.PartitionData,
                        {
                            "partition_index": p.partition,
                            "error_code": ErrorCode.topic_authorization_failed,
                            "high_watermark": -1,
                            "last_stable_offset": -1,
                            "log_start_offset": -1,
                            "preferred_read_replica": -1,
                            "records": None,
                        },
                    )
                    for p in topic.partitions
                ),
            },
        )
        for topic in denied
    )
    response: Any = await handler(_narrowed(request, topics=tuple(allowed)))
    if response is None:
        return None
    return dataclasses.replace(response, responses=(*response.responses, *errors))


def _fetch_topic_name(topic: Any, image: MetadataImage) -> str | None:
    name = getattr(topic, "topic", None)
    if name:
        return str(name)
    found = image.topics.by_id.get(getattr(topic, "topic_id", uuid.UUID(int=0)))
    return None if found is None else found.name  # an unknown id: the handler says so


# ---- Metadata --------------------------------------------------------------------------------
async def _metadata(authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest) -> Any:
    """The topics checked, then the authorized operations filled in where asked for."""
    response: Any = await _metadata_topics(authz, handler, request)
    if response is None:
        return None
    body = request.body
    if getattr(body, "include_topic_authorized_operations", False):
        topics = tuple(
            t
            if t.name is None or int(t.error_code)
            else dataclasses.replace(
                t, topic_authorized_operations=authorized_operations(authz, request, TOPIC, t.name)
            )
            for t in response.topics
        )
        response = dataclasses.replace(response, topics=topics)
    if getattr(body, "include_cluster_authorized_operations", False):
        operations = authorized_operations(authz, request, CLUSTER, CLUSTER_NAME)
        response = dataclasses.replace(response, cluster_authorized_operations=operations)
    return response


async def _metadata_topics(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    body = request.body
    image = authz.image()
    version = request.api_version
    module: Any = response_module(ApiKey.METADATA, version)
    all_topics = body.topics is None or (version == 0 and not body.topics)
    if all_topics:
        response: Any = await handler(request)
        if response is None:
            return None
        visible = tuple(
            t
            for t in response.topics
            if t.name is None or authz.allows(request, TOPIC, t.name, Op.DESCRIBE)
        )
        return dataclasses.replace(response, topics=visible)
    may_create = authz.auto_create_topics and getattr(body, "allow_auto_topic_creation", True)
    kept, errors = [], []
    for item in body.topics:
        name = item.name
        topic_id = getattr(item, "topic_id", None)
        if name is None and topic_id is not None:
            found = image.topics.by_id.get(topic_id)
            name = None if found is None else found.name
        if name is None:
            kept.append(item)  # an unknown id: the handler answers UNKNOWN_TOPIC_ID
            continue
        denied = not authz.allows(request, TOPIC, name, Op.DESCRIBE)
        if not denied and may_create and image.topics.get(name) is None:
            denied = not (
                authz.cluster(request, Op.CREATE) or authz.allows(request, TOPIC, name, Op.CREATE)
            )
        if denied:
            values: dict[str, object] = {
                "error_code": ErrorCode.topic_authorization_failed,
                "name": item.name,
                "is_internal": False,
                "partitions": (),
            }
            if topic_id is not None:
                values["topic_id"] = topic_id
            errors.append(make(module.MetadataResponseTopic, values))
        else:
            kept.append(item)
    if not errors:
        return await handler(request)
    if version == 0 and not kept:
        # v0's empty list means every topic: ask for none by answering from an empty set.
        response = await handler(request)
        if response is None:
            return None
        return dataclasses.replace(response, topics=tuple(errors))
    response = await handler(_narrowed(request, topics=tuple(kept)))
    if response is None:
        return None
    return dataclasses.replace(response, topics=(*response.topics, *errors))


# ---- per-item admin requests -----------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _PerItem:
    """An admin request authorized item by item: ``denial`` gives the error of a refused
    item (None: allowed); refused items are answered by ``errors`` (their response items),
    the rest handled as usual and the two lists joined."""

    request_field: str
    response_field: str
    denial: Callable[[RequestAuthorizer, ApiRequest, Any], ErrorCode | None]
    errors: Callable[[ApiRequest, list[Any], ErrorCode], tuple[Any, ...]] | None = None

    async def __call__(
        self, authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
    ) -> Any:
        field = self.request_field
        if field == "topics" and not hasattr(request.body, "topics"):
            field = "topic_names"  # DeleteTopics before v6
        items = tuple(getattr(request.body, field))
        refused: dict[ErrorCode, list[Any]] = {}
        allowed = []
        for item in items:
            code = self.denial(authz, request, item)
            if code is None:
                allowed.append(item)
            else:
                refused.setdefault(code, []).append(item)
        if not refused:
            return await handler(request)
        errors: list[Any] = []
        for code, denied in refused.items():
            errors.extend(self._errors(request, field, denied, code))
        if allowed:
            response: Any = await handler(_narrowed(request, **{field: tuple(allowed)}))
        else:
            response = self._empty(request, field)
        if response is None:
            return None
        joined = (*getattr(response, self.response_field), *errors)
        return dataclasses.replace(response, **{self.response_field: joined})

    def _errors(
        self, request: ApiRequest, field: str, denied: list[Any], code: ErrorCode
    ) -> tuple[Any, ...]:
        if self.errors is not None:
            return self.errors(request, denied, code)
        body = dataclasses.replace(request.body, **{field: tuple(denied)})
        response = refusal(request.header.api_key, request.api_version, body, code)
        return tuple(getattr(response, self.response_field))

    def _empty(self, request: ApiRequest, field: str) -> Any:
        body = dataclasses.replace(request.body, **{field: ()})
        if self.errors is not None:
            key = request.header.api_key
            module: Any = response_module(key, request.api_version)
            name = type(request.body).__name__.removesuffix("Request") + "Response"
            return make(getattr(module, name), {self.response_field: ()})
        return refusal(request.header.api_key, request.api_version, body, ErrorCode.none)


def _create_denial(authz: RequestAuthorizer, request: ApiRequest, item: Any) -> ErrorCode | None:
    if authz.cluster(request, Op.CREATE) or authz.allows(request, TOPIC, item.name, Op.CREATE):
        return None
    return ErrorCode.topic_authorization_failed


def _topic_denial(
    operation: Op,
) -> Callable[[RequestAuthorizer, ApiRequest, Any], ErrorCode | None]:
    def denial(authz: RequestAuthorizer, request: ApiRequest, item: Any) -> ErrorCode | None:
        if isinstance(item, str):
            name: str | None = item
        else:
            name = item.name
            if name is None:
                found = authz.image().topics.by_id.get(item.topic_id)
                name = None if found is None else found.name
        if name is None or authz.allows(request, TOPIC, name, operation):
            return None  # an unknown id: the controller answers UNKNOWN_TOPIC_ID
        return ErrorCode.topic_authorization_failed

    return denial


def _config_denial(
    topic_op: Op, cluster_op: Op
) -> Callable[[RequestAuthorizer, ApiRequest, Any], ErrorCode | None]:
    def denial(authz: RequestAuthorizer, request: ApiRequest, item: Any) -> ErrorCode | None:
        if int(item.resource_type) == TOPIC_CONFIG_RESOURCE:
            if authz.allows(request, TOPIC, item.resource_name, topic_op):
                return None
            return ErrorCode.topic_authorization_failed
        if authz.cluster(request, cluster_op):
            return None
        return ErrorCode.cluster_authorization_failed

    return denial


def _describe_configs_errors(
    request: ApiRequest, denied: list[Any], code: ErrorCode
) -> tuple[Any, ...]:
    module: Any = response_module(ApiKey.DESCRIBE_CONFIGS, request.api_version)
    return tuple(
        make(
            module.DescribeConfigsResult,
            {
                "error_code": code,
                "error_message": None,
                "resource_type": item.resource_type,
                "resource_name": item.resource_name,
                "configs": (),
            },
        )
        for item in denied
    )


def _simple_denial(
    resource_type: ResourceType, operation: Op, code: ErrorCode, name: Callable[[Any], str]
) -> Callable[[RequestAuthorizer, ApiRequest, Any], ErrorCode | None]:
    def denial(authz: RequestAuthorizer, request: ApiRequest, item: Any) -> ErrorCode | None:
        return None if authz.allows(request, resource_type, name(item), operation) else code

    return denial


def _items_refused(
    api_key: int, entity: str, values: Callable[[Any, ErrorCode], dict[str, object]]
) -> Callable[[ApiRequest, list[Any], ErrorCode], tuple[Any, ...]]:
    """The response items of refused request items: ``entity`` of ``api_key``'s response
    module, built from ``values(item, code)``."""

    def errors(request: ApiRequest, denied: list[Any], code: ErrorCode) -> tuple[Any, ...]:
        module: Any = response_module(api_key, request.api_version)
        return tuple(make(getattr(module, entity), values(item, code)) for item in denied)

    return errors


def _partitions_refused(
    api_key: int, topic_entity: str, partition_entity: str, topic_field: str, index_field: str
) -> Callable[[ApiRequest, list[Any], ErrorCode], tuple[Any, ...]]:
    """Refused topics answered with ``code`` for each partition they name."""

    def errors(request: ApiRequest, denied: list[Any], code: ErrorCode) -> tuple[Any, ...]:
        module: Any = response_module(api_key, request.api_version)
        return tuple(
            make(
                getattr(module, topic_entity),
                {
                    topic_field: getattr(topic, topic_field),
                    "partitions": tuple(
                        make(
                            getattr(module, partition_entity),
                            {
                                index_field: getattr(p, _request_index(p)),
                                "error_code": code,
                                "timestamp": -1,
                                "offset": -1,
                                "leader_epoch": -1,
                                "end_offset": -1,
                                "low_watermark": -1,
                            },
                        )
                        for p in topic.partitions
                    ),
                },
            )
            for topic in denied
        )

    return errors


def _request_index(partition: Any) -> str:
    return "partition_index" if hasattr(partition, "partition_index") else "partition"


def _leader_epoch_denial(
    authz: RequestAuthorizer, request: ApiRequest, item: Any
) -> ErrorCode | None:
    """A follower's OffsetForLeaderEpoch needs CLUSTER_ACTION, a client's DESCRIBE on the
    topic."""
    if getattr(request.body, "replica_id", -1) >= 0:  # v3+ says who asks
        if authz.cluster(request, Op.CLUSTER_ACTION):
            return None
        return ErrorCode.cluster_authorization_failed
    if authz.allows(request, TOPIC, item.topic, Op.DESCRIBE):
        return None
    return ErrorCode.topic_authorization_failed


_FIND_COORDINATORS = _PerItem(
    "coordinator_keys",
    "coordinators",
    _coordinator_denial,
    _items_refused(
        ApiKey.FIND_COORDINATOR,
        "Coordinator",
        lambda key, code: {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": code},
    ),
)


# ---- OffsetCommit, TxnOffsetCommit ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Commit:
    """OffsetCommit (READ on the group, then on each topic) and TxnOffsetCommit (WRITE on
    the transactional id first): a refused whole request answers every partition with its
    error, a refused topic its own partitions with TOPIC_AUTHORIZATION_FAILED."""

    api_key: int
    prefix: str  # the response entities' names: "OffsetCommit" or "TxnOffsetCommit"
    whole: tuple[tuple[str, ResourceType, Op, ErrorCode], ...]

    async def __call__(
        self, authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
    ) -> Any:
        body = request.body
        refusal_code = next(
            (
                code
                for field, kind, op, code in self.whole
                if not authz.allows(request, kind, getattr(body, field), op)
            ),
            None,
        )
        if refusal_code is not None:
            allowed, denied = list[Any](), list(body.topics)
            code = refusal_code
        else:
            allowed, denied = _split(
                body.topics, lambda t: authz.allows(request, TOPIC, t.name, Op.READ)
            )
            code = ErrorCode.topic_authorization_failed
        if not denied:
            return await handler(request)
        module: Any = response_module(self.api_key, request.api_version)
        errors = tuple(
            make(
                getattr(module, f"{self.prefix}ResponseTopic"),
                {
                    "name": topic.name,
                    "partitions": tuple(
                        make(
                            getattr(module, f"{self.prefix}ResponsePartition"),
                            {"partition_index": p.partition_index, "error_code": code},
                        )
                        for p in topic.partitions
                    ),
                },
            )
            for topic in denied
        )
        if not allowed:
            return make(getattr(module, f"{self.prefix}Response"), {"topics": errors})
        response: Any = await handler(_narrowed(request, topics=tuple(allowed)))
        if response is None:
            return None
        return dataclasses.replace(response, topics=(*response.topics, *errors))


_TOPIC_READS = _Commit(ApiKey.OFFSET_DELETE, "OffsetDelete", ())


async def _offset_delete(authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest) -> Any:
    """DELETE on the group (GROUP_AUTHORIZATION_FAILED for the request), READ on each topic
    (TOPIC_AUTHORIZATION_FAILED for its partitions)."""
    if not authz.allows(request, GROUP, request.body.group_id, Op.DELETE):
        return whole_refusal(request, ErrorCode.group_authorization_failed)
    return await _TOPIC_READS(authz, handler, request)


async def _list_transactions(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """Only the transactional ids the principal may DESCRIBE are listed."""
    response: Any = await handler(request)
    if response is None:
        return None
    visible = tuple(
        t
        for t in response.transaction_states
        if authz.allows(request, TRANSACTIONAL_ID, t.transactional_id, Op.DESCRIBE)
    )
    return dataclasses.replace(response, transaction_states=visible)


async def _describe_cluster(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """DESCRIBE on the cluster; the cluster's authorized operations where asked for."""
    if not authz.cluster(request, Op.DESCRIBE):
        return whole_refusal(request, ErrorCode.cluster_authorization_failed)
    response: Any = await handler(request)
    if response is None or not request.body.include_cluster_authorized_operations:
        return response
    operations = authorized_operations(authz, request, CLUSTER, CLUSTER_NAME)
    return dataclasses.replace(response, cluster_authorized_operations=operations)


@dataclass(frozen=True, slots=True)
class _GroupOperations:
    """A group-describing check, then each described group's authorized operations where
    the request asks for them (DescribeGroups v3+, ConsumerGroupDescribe)."""

    check: Check

    async def __call__(
        self, authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
    ) -> Any:
        response: Any = await self.check(authz, handler, request)
        if response is None or not getattr(request.body, "include_authorized_operations", False):
            return response
        groups = tuple(
            g
            if int(g.error_code)
            else dataclasses.replace(
                g, authorized_operations=authorized_operations(authz, request, GROUP, g.group_id)
            )
            for g in response.groups
        )
        return dataclasses.replace(response, groups=groups)


async def _describe_log_dirs(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """DESCRIBE on the cluster; refused, no log dir is described (and v3+ says
    CLUSTER_AUTHORIZATION_FAILED), as Kafka answers."""
    if authz.cluster(request, Op.DESCRIBE):
        return await handler(request)
    module: Any = response_module(ApiKey.DESCRIBE_LOG_DIRS, request.api_version)
    values = {"error_code": ErrorCode.cluster_authorization_failed, "results": ()}
    return make(module.DescribeLogDirsResponse, values)


async def _alter_replica_log_dirs(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """ALTER on the cluster; refused, every partition is answered
    CLUSTER_AUTHORIZATION_FAILED, as Kafka's handleAlterReplicaLogDirsRequest does."""
    if authz.cluster(request, Op.ALTER):
        return await handler(request)
    module: Any = response_module(ApiKey.ALTER_REPLICA_LOG_DIRS, request.api_version)
    code = ErrorCode.cluster_authorization_failed
    by_topic: dict[str, list[Any]] = {}
    for wanted in request.body.dirs:
        for topic in wanted.topics:
            by_topic.setdefault(topic.name, []).extend(
                make(
                    module.AlterReplicaLogDirPartitionResult,
                    {"partition_index": index, "error_code": code},
                )
                for index in topic.partitions
            )
    results = tuple(
        make(
            module.AlterReplicaLogDirTopicResult,
            {"topic_name": name, "partitions": tuple(partitions)},
        )
        for name, partitions in by_topic.items()
    )
    return make(
        module.AlterReplicaLogDirsResponse, {"throttle_time": timedelta(0), "results": results}
    )


async def _write_txn_markers(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """CLUSTER_ACTION (the transaction coordinator's markers); refused, every partition of
    every marker is answered CLUSTER_AUTHORIZATION_FAILED."""
    if authz.cluster(request, Op.CLUSTER_ACTION):
        return await handler(request)
    module: Any = response_module(ApiKey.WRITE_TXN_MARKERS, request.api_version)
    code = ErrorCode.cluster_authorization_failed
    markers = tuple(
        make(
            module.WritableTxnMarkerResult,
            {
                "producer_id": marker.producer_id,
                "topics": tuple(
                    make(
                        module.WritableTxnMarkerTopicResult,
                        {
                            "name": topic.name,
                            "partitions": tuple(
                                make(
                                    module.WritableTxnMarkerPartitionResult,
                                    {"partition_index": p, "error_code": code},
                                )
                                for p in topic.partition_indexes
                            ),
                        },
                    )
                    for topic in marker.topics
                ),
            },
        )
        for marker in request.body.markers
    )
    return make(module.WriteTxnMarkersResponse, {"markers": markers})


# ---- AddPartitionsToTxn ----------------------------------------------------------------------
async def _add_partitions_to_txn(
    authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest
) -> Any:
    """v0-3 (a client's): WRITE on the transactional id, else every partition
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED; WRITE on each topic, else its partitions
    TOPIC_AUTHORIZATION_FAILED and the others OPERATION_NOT_ATTEMPTED (nothing is added).
    v4+ (a broker's batch): CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED."""
    body = request.body
    if request.api_version >= 4:
        if authz.cluster(request, Op.CLUSTER_ACTION):
            return await handler(request)
        return whole_refusal(request, ErrorCode.cluster_authorization_failed)
    topics = body.v3_and_below_topics
    if not authz.allows(request, TRANSACTIONAL_ID, body.v3_and_below_transactional_id, Op.WRITE):
        codes = {t.name: ErrorCode.transactional_id_authorization_failed for t in topics}
    else:
        refused = {t.name for t in topics if not authz.allows(request, TOPIC, t.name, Op.WRITE)}
        if not refused:
            return await handler(request)
        codes = {
            t.name: ErrorCode.topic_authorization_failed
            if t.name in refused
            else ErrorCode.operation_not_attempted
            for t in topics
        }
    module: Any = response_module(ApiKey.ADD_PARTITIONS_TO_TXN, request.api_version)
    results = tuple(
        make(
            module.AddPartitionsToTxnTopicResult,
            {
                "name": t.name,
                "results_by_partition": tuple(
                    make(
                        module.AddPartitionsToTxnPartitionResult,
                        {"partition_index": p, "partition_error_code": codes[t.name]},
                    )
                    for p in t.partitions
                ),
            },
        )
        for t in topics
    )
    return make(module.AddPartitionsToTxnResponse, {"results_by_topic_v3_and_below": results})


# ---- OffsetFetch -----------------------------------------------------------------------------
async def _offset_fetch(authz: RequestAuthorizer, handler: ApiHandler, request: ApiRequest) -> Any:
    """DESCRIBE on each group (GROUP_AUTHORIZATION_FAILED) and on each topic: asked for by
    name, a topic it may not DESCRIBE is answered TOPIC_AUTHORIZATION_FAILED for each
    partition; asked for all, it is left out (Kafka's handleOffsetFetchRequest)."""
    body = request.body
    if not hasattr(body, "groups"):  # v1-7: one group
        if authz.allows(request, GROUP, body.group_id, Op.DESCRIBE):
            response: Any = await handler(request)
            if response is None:
                return None
            topics = _fetched_topics(authz, request, response.topics, body.topics is None)
            return dataclasses.replace(response, topics=topics)
        if request.api_version >= 2:
            return whole_refusal(request, ErrorCode.group_authorization_failed)
        module: Any = response_module(ApiKey.OFFSET_FETCH, request.api_version)
        refused = tuple(
            make(
                module.OffsetFetchResponseTopic,
                {
                    "name": t.name,
                    "partitions": tuple(
                        _refused_offset(
                            module.OffsetFetchResponsePartition,
                            p,
                            ErrorCode.group_authorization_failed,
                        )
                        for p in t.partition_indexes
                    ),
                },
            )
            for t in body.topics
        )
        return make(module.OffsetFetchResponse, {"topics": refused})
    allowed, denied = _split(
        body.groups, lambda g: authz.allows(request, GROUP, g.group_id, Op.DESCRIBE)
    )
    module = response_module(ApiKey.OFFSET_FETCH, request.api_version)
    errors = tuple(
        make(
            module.OffsetFetchResponseGroup,
            {
                "group_id": g.group_id,
                "topics": (),
                "error_code": ErrorCode.group_authorization_failed,
            },
        )
        for g in denied
    )
    if not allowed:
        return make(module.OffsetFetchResponse, {"groups": errors})
    response = await handler(_narrowed(request, groups=tuple(allowed)) if denied else request)
    if response is None:
        return None
    asked_all = {g.group_id: g.topics is None for g in allowed}
    groups = tuple(
        dataclasses.replace(
            g,
            topics=_fetched_topics(authz, request, g.topics, asked_all.get(g.group_id, False)),
        )
        for g in response.groups
    )
    return dataclasses.replace(response, groups=(*groups, *errors))


def _fetched_topics(
    authz: RequestAuthorizer, request: ApiRequest, topics: Iterable[Any], asked_all: bool
) -> tuple[Any, ...]:
    kept = []
    for topic in topics:
        if authz.allows(request, TOPIC, topic.name, Op.DESCRIBE):
            kept.append(topic)
        elif not asked_all:
            partitions = tuple(
                dataclasses.replace(
                    p,
                    committed_offset=-1,
                    metadata="",
                    error_code=ErrorCode.topic_authorization_failed,
                )
                for p in topic.partitions
            )
            kept.append(dataclasses.replace(topic, partitions=partitions))
    return tuple(kept)


def _refused_offset(entity: Any, partition_index: int, code: ErrorCode) -> Any:
    values = {
        "partition_index": partition_index,
        "committed_offset": -1,
        "committed_leader_epoch": -1,
        "metadata": "",
        "error_code": code,
    }
    return make(entity, values)


# ---- helpers ---------------------------------------------------------------------------------
def _split(items: Iterable[Any], keep: Callable[[Any], bool]) -> tuple[list[Any], list[Any]]:
    kept: list[Any] = []
    dropped: list[Any] = []
    for item in items:
        (kept if keep(item) else dropped).append(item)
    return kept, dropped


def _narrowed(request: ApiRequest, **fields: object) -> ApiRequest:
    return dataclasses.replace(request, body=dataclasses.replace(request.body, **fields))


_CHECKS: dict[int, Check] = {
    ApiKey.JOIN_GROUP: _Single((_GROUP_READ,)),
    ApiKey.SYNC_GROUP: _Single((_GROUP_READ,)),
    ApiKey.HEARTBEAT: _Single((_GROUP_READ,)),
    ApiKey.LEAVE_GROUP: _Single((_GROUP_READ,)),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _Single((_GROUP_READ,)),
    ApiKey.END_TXN: _Single((_TXN_WRITE,)),
    ApiKey.ADD_OFFSETS_TO_TXN: _Single((_TXN_WRITE, _GROUP_READ)),
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: _describe_topic_partitions,
    ApiKey.DESCRIBE_GROUPS: _GroupOperations(
        _PerItem(
            "groups",
            "groups",
            _simple_denial(GROUP, Op.DESCRIBE, ErrorCode.group_authorization_failed, str),
            _items_refused(
                ApiKey.DESCRIBE_GROUPS,
                "DescribedGroup",
                lambda group, code: {"error_code": code, "group_id": group},
            ),
        )
    ),
    ApiKey.DELETE_GROUPS: _PerItem(
        "groups_names",
        "results",
        _simple_denial(GROUP, Op.DELETE, ErrorCode.group_authorization_failed, str),
        _items_refused(
            ApiKey.DELETE_GROUPS,
            "DeletableGroupResult",
            lambda group, code: {"error_code": code, "group_id": group},
        ),
    ),
    ApiKey.LIST_OFFSETS: _PerItem(
        "topics",
        "topics",
        _simple_denial(TOPIC, Op.DESCRIBE, ErrorCode.topic_authorization_failed, lambda t: t.name),
        _partitions_refused(
            ApiKey.LIST_OFFSETS,
            "ListOffsetsTopicResponse",
            "ListOffsetsPartitionResponse",
            "name",
            "partition_index",
        ),
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _PerItem(
        "topics",
        "topics",
        _leader_epoch_denial,
        _partitions_refused(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            "OffsetForLeaderTopicResult",
            "EpochEndOffset",
            "topic",
            "partition",
        ),
    ),
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _Commit(ApiKey.OFFSET_COMMIT, "OffsetCommit", (_GROUP_READ,)),
    ApiKey.TXN_OFFSET_COMMIT: _Commit(
        ApiKey.TXN_OFFSET_COMMIT, "TxnOffsetCommit", (_TXN_WRITE, _GROUP_READ)
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.DELETE_RECORDS: _PerItem(
        "topics",
        "topics",
        _simple_denial(TOPIC, Op.DELETE, ErrorCode.topic_authorization_failed, lambda t: t.name),
        _partitions_refused(
            ApiKey.DELETE_RECORDS,
            "DeleteRecordsTopicResult",
            "DeleteRecordsPartitionResult",
            "name",
            "partition_index",
        ),
    ),
    ApiKey.DESCRIBE_PRODUCERS: _PerItem(
        "topics",
        "topics",
        _simple_denial(TOPIC, Op.READ, ErrorCode.topic_authorization_failed, lambda t: t.name),
        _items_refused(
            ApiKey.DESCRIBE_PRODUCERS,
            "TopicResponse",
            lambda topic, code: {
                "name": topic.name,
                "partitions": tuple(
                    make(
                        response_module(ApiKey.DESCRIBE_PRODUCERS, 0).PartitionResponse,  # v0 only
                        {"partition_index": p, "error_code": code},
                    )
                    for p in topic.partition_indexes
                ),
            },
        ),
    ),
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
    ApiKey.DESCRIBE_TRANSACTIONS: _PerItem(
        "transactional_ids",
        "transaction_states",
        _simple_denial(
            TRANSACTIONAL_ID, Op.DESCRIBE, ErrorCode.transactional_id_authorization_failed, str
        ),
        _items_refused(
            ApiKey.DESCRIBE_TRANSACTIONS,
            "TransactionState",
            lambda txn, code: {"error_code": code, "transactional_id": txn},
        ),
    ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: _GroupOperations(
        _PerItem(
            "group_ids",
            "groups",
            _simple_denial(GROUP, Op.DESCRIBE, ErrorCode.group_authorization_failed, str),
            _items_refused(
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                "DescribedGroup",
                lambda group, code: {"error_code": code, "group_id": group},
            ),
        )
    ),
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.CREATE_TOPICS: _PerItem("topics", "topics", _create_denial),
    ApiKey.DELETE_TOPICS: _PerItem("topics", "responses", _topic_denial(Op.DELETE)),
    ApiKey.CREATE_PARTITIONS: _PerItem("topics", "results", _topic_denial(Op.ALTER)),
    ApiKey.ALTER_CONFIGS: _PerItem(
        "resources", "responses", _config_denial(Op.ALTER_CONFIGS, Op.ALTER_CONFIGS)
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _PerItem(
        "resources", "responses", _config_denial(Op.ALTER_CONFIGS, Op.ALTER_CONFIGS)
    ),
    ApiKey.DESCRIBE_CONFIGS: _PerItem(
        "resources",
        "results",
        _config_denial(Op.DESCRIBE_CONFIGS, Op.DESCRIBE_CONFIGS),
        _describe_configs_errors,
    ),
}
# Cluster-only APIs whose check is more than a cluster check: a refusal of their own shape
# (no top-level error code), or authorized operations to fill in.
_CLUSTER_REFUSALS: dict[int, Check] = {
    ApiKey.DESCRIBE_CLUSTER: _describe_cluster,
    ApiKey.DESCRIBE_LOG_DIRS: _describe_log_dirs,
    ApiKey.ALTER_REPLICA_LOG_DIRS: _alter_replica_log_dirs,
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
}
