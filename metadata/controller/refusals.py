"""Whole-request refusals (NOT_CONTROLLER above all) in each API's own shape.

APIs with a top-level error code carry it there; the admin APIs report errors per resource,
so a refusal names every resource of the request with the same error, as Kafka's
ControllerApis does when the controller moved.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller import client_quotas
from metadata.controller.acls import acl_error_response
from metadata.controller.reassignment import error_response
from metadata.controller.scram import refuse_alter
from protocol.api_keys import ApiKey
from protocol.entities import has_field, make, response_module

Refusal = Callable[[Any, Any, ErrorCode], object]


def refuses(api_key: int) -> bool:
    """Whether ``refusal`` knows the shape of ``api_key``'s response."""
    return api_key in _REFUSALS


def refusal(api_key: int, api_version: int, request: Any, code: ErrorCode) -> object:
    """A response refusing all of ``request`` with ``code``."""
    module = response_module(api_key, api_version)
    return _REFUSALS[api_key](module, request, code)


def _create_topics(module: Any, request: Any, code: ErrorCode) -> object:
    topics = tuple(
        make(module.CreatableTopicResult, {"name": t.name, "error_code": code})
        for t in request.topics
    )
    return make(module.CreateTopicsResponse, {"topics": topics})


def _delete_topics(module: Any, request: Any, code: ErrorCode) -> object:
    if hasattr(request, "topic_names"):
        wanted = [(name, None) for name in request.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    results = tuple(
        make(module.DeletableTopicResult, {"name": name, "topic_id": topic_id, "error_code": code})
        for name, topic_id in wanted
    )
    return make(module.DeleteTopicsResponse, {"responses": results})


def _create_partitions(module: Any, request: Any, code: ErrorCode) -> object:
    results = tuple(
        make(module.CreatePartitionsTopicResult, {"name": t.name, "error_code": code})
        for t in request.topics
    )
    return make(module.CreatePartitionsResponse, {"results": results})


def _alter_configs(module: Any, request: Any, code: ErrorCode) -> object:
    results = tuple(
        make(
            module.AlterConfigsResourceResponse,
            {
                "error_code": code,
                "resource_type": r.resource_type,
                "resource_name": r.resource_name,
            },
        )
        for r in request.resources
    )
    response_type = getattr(module, "AlterConfigsResponse", None)
    if response_type is None:
        response_type = module.IncrementalAlterConfigsResponse
    return make(response_type, {"responses": results})


def _elect_leaders(module: Any, request: Any, code: ErrorCode) -> object:
    if has_field(module.ElectLeadersResponse, "error_code"):
        return make(module.ElectLeadersResponse, {"error_code": code})
    results = tuple(  # v0 has no top-level error code: refuse each partition
        make(
            module.ReplicaElectionResult,
            {
                "topic": t.topic,
                "partition_result": tuple(
                    make(module.PartitionResult, {"partition_id": p, "error_code": code})
                    for p in t.partitions
                ),
            },
        )
        for t in request.topic_partitions or ()
    )
    return make(module.ElectLeadersResponse, {"replica_election_results": results})


def _reassignments(_module: Any, request: Any, code: ErrorCode) -> object:
    return error_response(request, code, None)


def _update_features(module: Any, request: Any, code: ErrorCode) -> object:
    results = tuple(
        make(module.UpdatableFeatureResult, {"feature": u.feature, "error_code": code})
        for u in request.feature_updates
    )
    return make(module.UpdateFeaturesResponse, {"error_code": code, "results": results})


def _top_level(response_name: str) -> Refusal:
    def refuse(module: Any, _request: Any, code: ErrorCode) -> object:
        return make(getattr(module, response_name), {"error_code": code})

    return refuse


def _acls(api_key: int) -> Refusal:
    def refuse(module: Any, request: Any, code: ErrorCode) -> object:
        version = int(request.__version__)
        return acl_error_response(api_key, version, request, code, None)

    return refuse


_REFUSALS: dict[int, Refusal] = {
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.ALTER_CONFIGS: _alter_configs,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _alter_configs,
    ApiKey.ELECT_LEADERS: _elect_leaders,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _reassignments,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _reassignments,
    ApiKey.ALTER_PARTITION: _top_level("AlterPartitionResponse"),
    ApiKey.ALLOCATE_PRODUCER_IDS: _top_level("AllocateProducerIdsResponse"),
    ApiKey.BROKER_REGISTRATION: _top_level("BrokerRegistrationResponse"),
    ApiKey.BROKER_HEARTBEAT: _top_level("BrokerHeartbeatResponse"),
    ApiKey.UNREGISTER_BROKER: _top_level("UnregisterBrokerResponse"),
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: _top_level("AssignReplicasToDirsResponse"),
    ApiKey.UPDATE_FEATURES: _update_features,
    ApiKey.CREATE_ACLS: _acls(ApiKey.CREATE_ACLS),
    ApiKey.DELETE_ACLS: _acls(ApiKey.DELETE_ACLS),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: refuse_alter,
    ApiKey.ALTER_CLIENT_QUOTAS: client_quotas.refuse_alter,
}
