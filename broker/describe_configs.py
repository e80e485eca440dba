"""DescribeConfigs answers, read from one published MetadataImage and the config definitions.

Every described config says where its value comes from, in Kafka's ConfigSource ids. A topic
config is the topic's override (TOPIC_CONFIG, Kafka's DYNAMIC_TOPIC_CONFIG), else the
cluster-wide dynamic default of its broker synonym (DYNAMIC_DEFAULT_BROKER_CONFIG, e.g.
log.retention.ms for retention.ms), else the definition's default (DEFAULT_CONFIG). A broker
config is the broker's own dynamic value (DYNAMIC_BROKER_CONFIG), else the cluster-wide one
set on broker "", else the default. The layers and their order come from
metadata.config_defs.config_layers, the one resolution every reader of configs uses. With
synonyms requested, each entry lists every source that has a value, winner first, as Kafka's
brokers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.config_defs import (
    BROKER_DYNAMIC_CONFIGS,
    CLUSTER_DEFAULT,
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigLayer,
    ConfigSource,
    ConfigType,
    config_layers,
    config_sources,
)
from metadata.image import MetadataImage
from metadata.records import BROKER_RESOURCE, TOPIC_RESOURCE
from metadata.topic_names import topic_name_error
from protocol.api_keys import ApiKey
from protocol.entities import make, response_module
from protocol.turns import Turns

UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."


async def describe_configs_response(image: MetadataImage, request: Any, node_id: int) -> object:
    """The DescribeConfigsResponse (of the request's version) for ``request``, answered by
    broker ``node_id`` (which describes its own broker configs and the cluster defaults).
    A slice of resources a turn of the loop, each weighed by the configs it answers (a
    topic's every config is a few dozen entries, an unknown topic's error one)."""
    module: Any = response_module(ApiKey.DESCRIBE_CONFIGS, int(request.__version__))
    turns = Turns()
    results = []
    for item in request.resources:
        result = _describe(module, image, request, item, node_id)
        results.append(result)
        await turns.tick(1 + len(result.configs))
    return make(
        module.DescribeConfigsResponse, {"throttle_time": timedelta(0), "results": tuple(results)}
    )


def _describe(module: Any, image: MetadataImage, request: Any, item: Any, node_id: int) -> Any:
    """One resource's result: its configs, or an error code and Kafka's message."""
    kind, name = int(item.resource_type), item.resource_name
    only_set = False
    if kind == TOPIC_RESOURCE:
        problem = topic_name_error(name)
        if problem is not None:
            return _error(module, item, ErrorCode.invalid_topic_exception, problem)
        if image.topics.get(name) is None:
            return _error(module, item, ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE)
        layers = config_layers(image.configs, topic=name)
        definitions = TOPIC_CONFIGS
    elif kind == BROKER_RESOURCE:
        definitions = BROKER_DYNAMIC_CONFIGS
        if name == CLUSTER_DEFAULT:
            layers, only_set = config_layers(image.configs), True  # Kafka lists what is set
        elif name == str(node_id):
            layers = config_layers(image.configs, broker=node_id)
        else:
            message = (
                f"Unexpected broker id, expected {node_id} or empty string, but received {name}"
            )
            return _error(module, item, ErrorCode.invalid_request, message)
    else:
        return _error(module, item, ErrorCode.invalid_request, f"Unsupported resource type: {kind}")
    wanted = set(item.configuration_keys or ())
    entries = (
        _entry(module, request, definition, layers)
        for config_name, definition in sorted(definitions.items())
        if not wanted or config_name in wanted
    )
    configs = tuple(
        e for e in entries if not only_set or e.config_source != ConfigSource.DEFAULT_CONFIG
    )
    values = {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": item.resource_type,
        "resource_name": name,
        "configs": configs,
    }
    return make(module.DescribeConfigsResult, values)


def _entry(module: Any, request: Any, definition: ConfigDef, layers: Sequence[ConfigLayer]) -> Any:
    """One config: its effective value and source, synonyms and docs when asked for."""
    sources = config_sources(definition, layers)
    sensitive = definition.type is ConfigType.PASSWORD
    value: str | None = None
    source = ConfigSource.DEFAULT_CONFIG
    if sources:
        _, value, source = sources[0]
    synonyms = tuple(
        make(
            module.DescribeConfigsSynonym,
            {"name": key, "value": None if sensitive else v, "source": s},
        )
        for key, v, s in sources
    )
    include_doc = getattr(request, "include_documentation", False)
    entry: dict[str, object] = {
        "name": definition.name,
        "value": None if sensitive else value,
        "read_only": False,
        "config_source": source,
        "is_sensitive": sensitive,
        "synonyms": synonyms if request.include_synonyms else (),
        "config_type": int(definition.type),
        "documentation": definition.doc if include_doc else None,
    }
    return make(module.DescribeConfigsResourceResult, entry)


def _error(module: Any, item: Any, code: ErrorCode, message: str) -> Any:
    values = {
        "error_code": code,
        "error_message": message,
        "resource_type": item.resource_type,
        "resource_name": item.resource_name,
        "configs": (),
    }
    return make(module.DescribeConfigsResult, values)
