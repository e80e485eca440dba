"""Answers a broker gives in the controller's place when a forwarded request gets no answer.

The admin APIs a broker forwards (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs, ElectLeaders, Alter/ListPartitionReassignments) report errors per
item (the last two also at the top level, which clients read first), so "the controller did not
answer in time" has to be spelled out for every topic or resource of the request, as Kafka's
``AbstractRequest.getErrorResponse`` does. The response has the request's version.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller import reassignment, scram
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module

FORWARDED_APIS = frozenset(
    {
        ApiKey.CREATE_TOPICS,
        ApiKey.DELETE_TOPICS,
        ApiKey.ALTER_CONFIGS,
        ApiKey.CREATE_PARTITIONS,
        ApiKey.ELECT_LEADERS,
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        ApiKey.UPDATE_FEATURES,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    }
)


def forwarded_error_response(request: object, error_code: int, message: str | None) -> object:
    """The response to ``request`` (a forwarded API) failing every item with ``error_code``."""
    body: Any = request
    api_key, version = int(body.__api_key__), int(body.__version__)
    module: Any = response_module(api_key, version)
    error = {"error_code": ErrorCode(error_code), "error_message": message}
    if api_key == ApiKey.CREATE_TOPICS:
        topics = tuple(
            make(module.CreatableTopicResult, error | {"name": t.name}) for t in body.topics
        )
        return make(module.CreateTopicsResponse, {"topics": topics})
    if api_key == ApiKey.DELETE_TOPICS:
        if hasattr(body, "topics"):  # v6+: by name or by id
            named = [{"name": t.name, "topic_id": t.topic_id} for t in body.topics]
        else:
            named = [{"name": name} for name in body.topic_names]
        results = tuple(make(module.DeletableTopicResult, error | n) for n in named)
        return make(module.DeleteTopicsResponse, {"responses": results})
    if api_key == ApiKey.CREATE_PARTITIONS:
        results = tuple(
            make(module.CreatePartitionsTopicResult, error | {"name": t.name}) for t in body.topics
        )
        return make(module.CreatePartitionsResponse, {"results": results})
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        responses = tuple(
            make(
                module.AlterConfigsResourceResponse,
                error | {"resource_type": r.resource_type, "resource_name": r.resource_name},
            )
            for r in body.resources
        )
        top = (
            "AlterConfigsResponse"
            if api_key == ApiKey.ALTER_CONFIGS
            else "IncrementalAlterConfigsResponse"
        )
        return make(getattr(module, top), {"responses": responses})
    if api_key == ApiKey.ELECT_LEADERS:
        results = tuple(
            make(
                module.ReplicaElectionResult,
                {
                    "topic": t.topic,
                    "partition_result": tuple(
                        make(module.PartitionResult, error | {"partition_id": p})
                        for p in t.partitions
                    ),
                },
            )
            for t in body.topic_partitions or ()
        )
        values = {"error_code": ErrorCode(error_code), "replica_election_results": results}
        return make(module.ElectLeadersResponse, values)
    if api_key in (ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS):
        return reassignment.error_response(body, ErrorCode(error_code), message)
    if api_key == ApiKey.UPDATE_FEATURES:
        results = tuple(
            make(module.UpdatableFeatureResult, error | {"feature": u.feature})
            for u in body.feature_updates
        )
        return make(module.UpdateFeaturesResponse, error | {"results": results})
    if api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        return scram.refuse_alter(module, body, ErrorCode(error_code), message)
    raise ValueError(f"api {api_key} is not forwarded to the controller")
