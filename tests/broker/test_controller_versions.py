"""The broker only sends the controller versions the controller serves.

A forwarded request keeps the version the client chose, so every version a broker advertises
for a forwarded API must be one the QuorumController accepts; likewise the lifecycle manager's
registration and heartbeat versions.
"""

from __future__ import annotations

from collections.abc import Mapping
from random import Random

from broker import forwarding, lifecycle
from broker.kafka_apis import KafkaApis
from metadata.image import MetadataImage
from protocol.api_keys import ApiKey
from protocol.api_table import BROKER, ServedApis
from tests.broker.fakes import FakeController
from tests.metadata.controller.support import CLUSTER_ID, controller_versions


def within(version_range: tuple[int, int], served: tuple[int, int]) -> bool:
    return served[0] <= version_range[0] and version_range[1] <= served[1]


def broker_versions() -> Mapping[int, tuple[int, int]]:
    """What a broker listener's table serves for KafkaApis' own entries."""
    apis = KafkaApis(
        1, CLUSTER_ID, "PLAINTEXT", MetadataImage, FakeController(MetadataImage()), Random(0)
    )
    return ServedApis(BROKER, apis.apis()).versions


def test_forwarded_versions_are_served_by_the_controller() -> None:
    advertised, served = broker_versions(), controller_versions()
    for api_key in forwarding.FORWARDED_APIS:
        assert within(advertised[api_key], served[api_key]), api_key


def test_lifecycle_versions_are_served_by_the_controller() -> None:
    served = controller_versions()
    registration = (lifecycle.REGISTRATION_VERSION,) * 2
    heartbeat = (lifecycle.HEARTBEAT_VERSION,) * 2
    assert within(registration, served[ApiKey.BROKER_REGISTRATION])
    assert within(heartbeat, served[ApiKey.BROKER_HEARTBEAT])
