"""The API table: what a listener serves, one entry per API key.

Each entry (``Api``) says, for one API key, the versions served, the handler, the listeners
it is served on and the authorization Kafka's KafkaApis/ControllerApis require for it. The
entries live where their handlers do (broker/kafka_apis.py, broker/group/apis.py,
metadata/controller/quorum_controller.py, raft/driver.py) and kraft/node.py composes them
into one ``ApiTable`` per node; ``ApiTable.served(listener)`` is what a connection of that
listener reads: the versions it decodes against, the handler it dispatches to, the
ApiVersions answer it gives. A key the listener does not serve has no entry, and its
request closes the connection (as Kafka does).

Authorization is data here (resource type and operation, Kafka's ResourceType and
AclOperation codes): the checks an authorizer makes for the API, on the resources the
request names (a topic's name, a group id) or on the cluster. Where Kafka picks one check by
the request (a follower's Fetch needs CLUSTER_ACTION on the cluster, a consumer's READ on
each topic), every check the API may make is listed. broker/authorization.py enforces them
when an authorizer is configured.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.principal import ANONYMOUS, CLIENT_HOST, PRINCIPAL


class ResourceType(enum.IntEnum):
    """Kafka's ResourceType codes (what an ACL protects)."""

    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(enum.IntEnum):
    """Kafka's AclOperation codes (what an ACL allows)."""

    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


@dataclass(frozen=True, slots=True)
class Action:
    """One authorization check: ``operation`` on a resource of ``resource_type`` (Kafka's
    authorizer Action, without the resource name, which comes from the request)."""

    resource_type: ResourceType
    operation: AclOperation


# The checks the tables use, named as Kafka's KafkaApis reads them.
CLUSTER_ACTION = Action(ResourceType.CLUSTER, AclOperation.CLUSTER_ACTION)
CLUSTER_ALTER = Action(ResourceType.CLUSTER, AclOperation.ALTER)
CLUSTER_ALTER_CONFIGS = Action(ResourceType.CLUSTER, AclOperation.ALTER_CONFIGS)
CLUSTER_CREATE = Action(ResourceType.CLUSTER, AclOperation.CREATE)
CLUSTER_DESCRIBE = Action(ResourceType.CLUSTER, AclOperation.DESCRIBE)
CLUSTER_DESCRIBE_CONFIGS = Action(ResourceType.CLUSTER, AclOperation.DESCRIBE_CONFIGS)
CLUSTER_IDEMPOTENT_WRITE = Action(ResourceType.CLUSTER, AclOperation.IDEMPOTENT_WRITE)
GROUP_DELETE = Action(ResourceType.GROUP, AclOperation.DELETE)
GROUP_DESCRIBE = Action(ResourceType.GROUP, AclOperation.DESCRIBE)
GROUP_READ = Action(ResourceType.GROUP, AclOperation.READ)
TOPIC_ALTER = Action(ResourceType.TOPIC, AclOperation.ALTER)
TOPIC_ALTER_CONFIGS = Action(ResourceType.TOPIC, AclOperation.ALTER_CONFIGS)
TOPIC_CREATE = Action(ResourceType.TOPIC, AclOperation.CREATE)
TOPIC_DELETE = Action(ResourceType.TOPIC, AclOperation.DELETE)
TOPIC_DESCRIBE = Action(ResourceType.TOPIC, AclOperation.DESCRIBE)
TOPIC_DESCRIBE_CONFIGS = Action(ResourceType.TOPIC, AclOperation.DESCRIBE_CONFIGS)
TOPIC_READ = Action(ResourceType.TOPIC, AclOperation.READ)
TOPIC_WRITE = Action(ResourceType.TOPIC, AclOperation.WRITE)
TRANSACTIONAL_ID_DESCRIBE = Action(ResourceType.TRANSACTIONAL_ID, AclOperation.DESCRIBE)
TRANSACTIONAL_ID_WRITE = Action(ResourceType.TRANSACTIONAL_ID, AclOperation.WRITE)
NONE: tuple[Action, ...] = ()  # ApiVersions: answered before any authentication
# Checks of APIs served on both planes (a broker forwards them; the controller answers).
CREATE_TOPICS_AUTHORIZATION = (CLUSTER_CREATE, TOPIC_CREATE, TOPIC_DESCRIBE_CONFIGS)
ALTER_CONFIGS_AUTHORIZATION = (CLUSTER_ALTER_CONFIGS, TOPIC_ALTER_CONFIGS)


class Listeners(enum.Flag):
    """The listeners an API is served on (Kafka's ApiMessageType.ListenerType)."""

    BROKER = enum.auto()  # the client listeners (listeners= other than the controller's)
    CONTROLLER = enum.auto()  # controller.listener.names: the quorum and controller APIs
    BOTH = BROKER | CONTROLLER


BROKER = Listeners.BROKER
CONTROLLER = Listeners.CONTROLLER


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """One decoded request as a handler receives it: its header, its body (the kio entity
    of ``header.api_version``, which the connection checked is one the entry serves) and the
    listener's served table (ApiVersions answers from it), and who sent it from where
    (the connection's principal and address: protocol/principal.py)."""

    header: wire.RequestHeader
    body: Any
    apis: ServedApis
    principal: str = ANONYMOUS  # "User:alice": who the connection authenticated as
    client_host: str = ""  # the client's address ("127.0.0.1"), as ACL hosts name it

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str:
        return self.header.client_id or ""


# The response entity, None to close the connection, or the network's NO_RESPONSE.
ApiHandler = Callable[[ApiRequest], Awaitable[object | None]]


@dataclass(frozen=True, slots=True)
class Api:
    """One API key's entry: served versions (min, max), handler, listeners, authorization."""

    key: ApiKey
    versions: tuple[int, int]
    handler: ApiHandler
    listeners: Listeners
    authorization: tuple[Action, ...]

    def __post_init__(self) -> None:
        low, high = self.versions
        assert 0 <= low <= high, f"{self.key.name}: versions {self.versions}"


class ServedApis:
    """What one listener serves: the versions its connections decode against (``versions``)
    and the dispatch of a decoded request to its entry's handler (``handle``)."""

    __slots__ = ("_entries", "listener", "versions")

    def __init__(self, listener: Listeners, entries: Iterable[Api]) -> None:
        self.listener = listener
        self._entries: dict[int, Api] = {}
        for api in entries:
            assert api.key not in self._entries, f"{api.key.name} registered twice on {listener}"
            self._entries[api.key] = api
        self.versions: Mapping[int, tuple[int, int]] = {
            key: api.versions for key, api in sorted(self._entries.items())
        }

    def __contains__(self, key: int) -> bool:
        return key in self._entries

    def __getitem__(self, key: int) -> Api:
        return self._entries[key]

    def __iter__(self) -> Any:
        return iter(self._entries.values())

    async def handle(self, header: wire.RequestHeader, body: object) -> object | None:
        """The entry's answer to a decoded request; None (close the connection) for an API
        this listener does not serve."""
        api = self._entries.get(header.api_key)
        if api is None:
            return None
        host = CLIENT_HOST.get().removeprefix("/")
        return await api.handler(ApiRequest(header, body, self, PRINCIPAL.get(), host))

    def api_versions_response(self, version: int, error_code: int = 0) -> object:
        """The ApiVersionsResponse (of ``version``) listing what this listener serves."""
        return api_versions_response(version, self.versions, error_code)


class ApiTable:
    """A node's API entries, for every listener; ``served`` gives one listener's."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[Api]) -> None:
        self._entries = tuple(entries)
        for listener in (BROKER, CONTROLLER):
            self.served(listener)  # checks no key is registered twice on a listener

    def served(self, listener: Listeners) -> ServedApis:
        """The entries served on ``listener`` (BROKER or CONTROLLER)."""
        return ServedApis(listener, (api for api in self._entries if listener in api.listeners))


def api_versions_response(
    version: int, versions: Mapping[int, tuple[int, int]], error_code: int = 0
) -> object:
    """ApiVersionsResponse (of ``version``) listing ``versions``: api key -> (min, max).
    With UNSUPPORTED_VERSION and version 0 it is KIP-511's answer to an ApiVersions request
    of a version not served: the client reads it as v0 and retries with a listed one."""
    module: Any = response_module(ApiKey.API_VERSIONS, version)
    keys = tuple(
        make(module.ApiVersion, {"api_key": key, "min_version": low, "max_version": high})
        for key, (low, high) in sorted(versions.items())
    )
    values = {"error_code": ErrorCode(error_code), "api_keys": keys}
    return make(module.ApiVersionsResponse, values)


async def answer_api_versions(request: ApiRequest) -> object:
    """ApiVersions from the listener's own table (a controller listener's handler)."""
    return request.apis.api_versions_response(request.api_version)


API_VERSIONS_VERSIONS = (0, 4)  # ApiVersions v0-4 on every listener (kio's newest is 4)
# ApiVersions answered from the listener's table alone (a broker's adds its features).
API_VERSIONS = Api(
    ApiKey.API_VERSIONS, API_VERSIONS_VERSIONS, answer_api_versions, CONTROLLER, NONE
)


__all__ = [
    "API_VERSIONS",
    "BROKER",
    "CONTROLLER",
    "AclOperation",
    "Action",
    "Api",
    "ApiHandler",
    "ApiRequest",
    "ApiTable",
    "Listeners",
    "ResourceType",
    "ServedApis",
    "answer_api_versions",
    "api_versions_response",
]
