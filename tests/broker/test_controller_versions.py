"""The broker only sends the controller versions the controller serves.

A forwarded request keeps the version the client chose, so every version a broker advertises
for a forwarded API must be one the QuorumController accepts; likewise the lifecycle manager's
registration and heartbeat versions.
"""

from __future__ import annotations

from broker import forwarding, lifecycle
from broker.kafka_apis import KafkaApis
from metadata.controller.quorum_controller import QuorumController
from protocol.api_keys import ApiKey


def within(version_range: tuple[int, int], served: tuple[int, int]) -> bool:
    return served[0] <= version_range[0] and version_range[1] <= served[1]


def test_forwarded_versions_are_served_by_the_controller() -> None:
    for api_key in forwarding.FORWARDED_APIS:
        advertised = KafkaApis.SUPPORTED_APIS[api_key]
        assert within(advertised, QuorumController.SUPPORTED_APIS[api_key]), api_key


def test_lifecycle_versions_are_served_by_the_controller() -> None:
    served = QuorumController.SUPPORTED_APIS
    registration = (lifecycle.REGISTRATION_VERSION,) * 2
    heartbeat = (lifecycle.HEARTBEAT_VERSION,) * 2
    assert within(registration, served[ApiKey.BROKER_REGISTRATION])
    assert within(heartbeat, served[ApiKey.BROKER_HEARTBEAT])
