"""broker/mutation_quota.py: KIP-599's controller mutation quota, as the controller charges
it (the admin requests brokers forward in Envelopes, and its own clients'): Kafka's token
bucket, strict versions refusing a topic with THROTTLING_QUOTA_EXCEEDED once the bucket is
below zero, older versions only throttled, and the permits of a topic the controller's
handler refuses given back."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from broker.mutation_quota import THROTTLED_MESSAGE, TokenBucket, forward_charged
from broker.quotas import QuotaConfig, QuotaManager
from metadata.image import MetadataImage, PartitionRegistration, TopicImage, TopicsImage
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import ApiRequest, ApiTable
from protocol.entities import make, request_module, response_module

CONFIG = QuotaConfig()  # burst: (11 - 1) x 1 s x quota
EXISTING_ID = uuid.UUID(int=7)


def _image(quota: float) -> MetadataImage:
    partition = PartitionRegistration((1,), (1,), 1, 0, 0)
    topic = TopicImage("existing", EXISTING_ID, {i: partition for i in range(30)})
    return MetadataImage(
        topics=TopicsImage({EXISTING_ID: topic}, {"existing": EXISTING_ID}),
        client_quotas={(("client-id", "app"),): {"controller_mutation_rate": quota}},
    )


def _create(version: int, *topics: tuple[str, int]) -> Any:
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


class Controller:
    """Answers every forwarded topic with success, or ``errors[name]``."""

    def __init__(self, errors: dict[str, ErrorCode] | None = None) -> None:
        self.errors = errors or {}
        self.forwarded: list[list[str]] = []

    async def __call__(self, body: Any) -> object:
        names = [t.name for t in body.topics]
        self.forwarded.append(names)
        version = int(body.__version__)
        module: Any = response_module(ApiKey.CREATE_TOPICS, version)
        results = tuple(
            make(
                module.CreatableTopicResult,
                {"name": name, "error_code": self.errors.get(name, ErrorCode.none)},
            )
            for name in names
        )
        return make(module.CreateTopicsResponse, {"topics": results})


def _run(image: MetadataImage, controller: Controller, bodies: list[Any]) -> list[Any]:
    async def run() -> list[Any]:
        quotas = QuotaManager(lambda: image, CONFIG)
        responses = []
        for body in bodies:
            version = int(body.__version__)
            header = wire.RequestHeader(ApiKey.CREATE_TOPICS, version, 1, "app")
            quota = quotas.mutation_quota("ANONYMOUS", "app", ApiKey.CREATE_TOPICS, version, 0.0)
            assert quota is not None
            request = ApiRequest(header, body, ApiTable([]).served(0))  # type: ignore[arg-type]
            responses.append(await forward_charged(request, quota, image, 1, controller))
        return responses

    return asyncio.run(run())


def test_the_token_bucket_refills_at_the_quota_up_to_its_burst() -> None:
    bucket = TokenBucket(100.0, 0.0)
    bucket.record(150.0, 10.0, 100.0, 0.0)
    assert bucket.tokens == -50.0
    assert bucket.measure(10.0, 100.0, 2.0) == -30.0
    assert bucket.measure(10.0, 100.0, 60.0) == 100.0  # never above the burst
    assert bucket.full_at_s == 15.0  # 150 tokens at 10 a second after the record


def test_strict_create_topics_refuses_a_topic_once_the_bucket_is_below_zero() -> None:
    """10 partitions/s: a burst of 100. The first request takes 60; the next topic of 50
    finds 40 left and goes through (Kafka checks before charging), taking the bucket to
    -10; the topic after it is refused with THROTTLING_QUOTA_EXCEEDED and is not forwarded,
    and the response says when the bucket is back at zero: 10 tokens at 10/s, 1 s. A topic
    that exists already costs nothing (the controller refuses it)."""
    controller = Controller()
    first, second = _run(
        _image(10.0),
        controller,
        [_create(7, ("a", 60)), _create(7, ("b", 50), ("existing", 5), ("c", 10))],
    )
    assert [(t.name, t.error_code) for t in first.topics] == [("a", ErrorCode.none)]
    assert first.throttle_time == timedelta(0)
    assert controller.forwarded == [["a"], ["b", "existing"]]
    assert {t.name: t.error_code for t in second.topics} == {
        "b": ErrorCode.none,
        "existing": ErrorCode.none,
        "c": ErrorCode.throttling_quota_exceeded,
    }
    [refused] = [t for t in second.topics if t.name == "c"]
    assert refused.error_message == THROTTLED_MESSAGE
    assert second.throttle_time == timedelta(seconds=1)


def test_a_topic_the_controller_refuses_gets_its_permits_back() -> None:
    """Kafka charges only the topics it creates: "bad" is refused by the controller and its
    100 permits are given back, so after "good" takes 60 there are 40 left and "next" goes
    through; had "bad" been charged, "good" would have taken the bucket to -60 and "next"
    would be refused."""
    responses = _run(
        _image(10.0),
        Controller({"bad": ErrorCode.invalid_replication_factor}),
        [_create(7, ("bad", 100)), _create(7, ("good", 60)), _create(7, ("next", 50))],
    )
    assert [r.topics[0].error_code for r in responses] == [
        ErrorCode.invalid_replication_factor,
        ErrorCode.none,
        ErrorCode.none,
    ]


def test_permissive_versions_forward_everything_and_only_throttle() -> None:
    """CreateTopics v5 has no THROTTLING_QUOTA_EXCEEDED: everything is created and the
    response carries the time until the bucket is back at zero (150 - 100 = 50 tokens at
    10/s: 5 s)."""
    controller = Controller()
    [response] = _run(_image(10.0), controller, [_create(5, ("a", 100), ("b", 50))])
    assert controller.forwarded == [["a", "b"]]
    assert [t.error_code for t in response.topics] == [ErrorCode.none, ErrorCode.none]
    assert response.throttle_time == timedelta(seconds=5)


def test_no_quota_no_charge_and_other_clients_have_their_own() -> None:
    image = _image(1.0)
    quotas = QuotaManager(lambda: image, CONFIG)
    assert quotas.mutation_quota("u", "other", ApiKey.CREATE_TOPICS, 7, 0.0) is None
    quota = quotas.mutation_quota("u", "app", ApiKey.DELETE_TOPICS, 5, 0.0)
    assert quota is not None and quota.strict
    assert quota.admit(30)  # the burst is 10: the first topic still goes through
    assert not quota.admit(1) and quota.throttle_s == 20.0
    legacy = quotas.mutation_quota("u", "app", ApiKey.DELETE_TOPICS, 4, 0.0)
    assert legacy is not None and not legacy.strict and legacy.admit(1)
