"""The broker's counters (broker/metrics.py): what counts as a message in, a failed produce
or fetch (Kafka's rules), error codes found anywhere in a response, and the samples a
scrape renders under the JMX exporter's names."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.metrics import BrokerTopicMetrics, RequestMetrics, count_errors
from log.batch import encode_batch
from log.records import Record
from protocol import wire
from protocol.entities import make, request_module, response_module
from protocol.server import NO_RESPONSE


class _Families:
    """A registry around ``families()`` producers, rendered and parsed as a scrape is."""

    def __init__(self, *sources: object) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._sources = sources
        self.registry.register(self)  # type: ignore[arg-type]

    def collect(self):  # type: ignore[no-untyped-def]
        for source in self._sources:
            yield from source.families()  # type: ignore[attr-defined]

    def samples(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = generate_latest(self.registry).decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }


def batch(count: int) -> bytes:
    return encode_batch([Record(None, b"v" * 10, 0)] * count)


def test_messages_and_bytes_in_count_appended_batches_per_topic_and_in_total() -> None:
    topics = BrokerTopicMetrics()
    a, b = batch(3), batch(5)
    topics.produced("a", a, ErrorCode.none)
    topics.produced("b", b, ErrorCode.none)
    # acks=all that timed out waiting for replicas: appended all the same.
    topics.produced("b", b, ErrorCode.request_timed_out)
    samples = _Families(topics).samples()
    messages = "kafka_server_brokertopicmetrics_messagesin_total"
    assert samples[(messages, (("topic", "a"),))] == 3
    assert samples[(messages, (("topic", "b"),))] == 10
    assert samples[(messages, ())] == 13
    bytes_in = "kafka_server_brokertopicmetrics_bytesin_total"
    assert samples[(bytes_in, ())] == len(a) + 2 * len(b)
    assert samples[("kafka_server_brokertopicmetrics_totalproducerequests_total", ())] == 3


def test_failed_produce_and_fetch_follow_kafkas_rules() -> None:
    topics = BrokerTopicMetrics()
    # Validation failures and NOT_ENOUGH_REPLICAS count as failed, as in Kafka...
    topics.produced("t", batch(1), ErrorCode.invalid_record)
    topics.produced("t", batch(1), ErrorCode.not_enough_replicas)
    # ... a leadership change or a too-large batch do not, nor do they count messages in.
    topics.produced("t", batch(1), ErrorCode.not_leader_or_follower)
    topics.produced("t", batch(1), ErrorCode.message_too_large)
    # An unknown topic is not counted at all: clients cannot grow the topic map.
    topics.produced("nope", batch(1), ErrorCode.unknown_topic_or_partition)
    topics.fetched("t", 0, ErrorCode.offset_out_of_range, follower=False)
    topics.fetched("t", 0, ErrorCode.corrupt_message, follower=False)
    topics.fetched("t", 100, ErrorCode.none, follower=False)
    topics.fetched("t", 40, ErrorCode.none, follower=True)
    topics.fetched(None, 0, ErrorCode.unknown_topic_id, follower=False)
    samples = _Families(topics).samples()
    t = (("topic", "t"),)
    assert samples[("kafka_server_brokertopicmetrics_failedproducerequests_total", t)] == 2
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", t)] == 0
    assert samples[("kafka_server_brokertopicmetrics_totalproducerequests_total", t)] == 4
    assert samples[("kafka_server_brokertopicmetrics_failedfetchrequests_total", t)] == 1
    assert samples[("kafka_server_brokertopicmetrics_bytesout_total", t)] == 100
    assert samples[("kafka_server_brokertopicmetrics_replicationbytesout_total", ())] == 40
    assert not any(labels == (("topic", "nope"),) for _, labels in samples)


def test_a_deleted_topics_counters_are_dropped() -> None:
    topics = BrokerTopicMetrics()
    topics.produced("kept", batch(1), ErrorCode.none)
    topics.produced("gone", batch(2), ErrorCode.none)
    topics.retain({"kept"}.__contains__)
    samples = _Families(topics).samples()
    assert samples[("kafka_server_brokertopicmetrics_messagesin_total", ())] == 1
    assert ("kafka_server_brokertopicmetrics_messagesin_total", (("topic", "gone"),)) not in (
        samples
    )


def produce_response(codes: list[int]) -> object:
    module = response_module(0, 9)
    partitions = tuple(
        make(
            module.PartitionProduceResponse,
            {"index": i, "error_code": code, "base_offset": 0, "record_errors": ()},
        )
        for i, code in enumerate(codes)
    )
    return make(
        module.ProduceResponse,
        {
            "responses": (
                make(module.TopicProduceResponse, {"name": "t", "partition_responses": partitions}),
            ),
            "throttle_time": timedelta(0),
        },
    )


def test_error_counts_walk_every_nested_entity() -> None:
    counts: dict[int, int] = {}
    count_errors(produce_response([0, 6, 6, 0, 0]), counts)
    assert counts == {0: 3, 6: 2}


def test_requests_are_named_as_kafka_names_them_with_times_and_error_codes() -> None:
    requests = RequestMetrics(lambda: asyncio.get_running_loop().time())
    topics = BrokerTopicMetrics(requests.errors_of("Produce"))
    answer = produce_response([0, ErrorCode.not_leader_or_follower])
    fetch = request_module(1, 12)
    fetched = make(
        response_module(1, 12).FetchResponse,
        {
            "throttle_time": timedelta(0),
            "error_code": ErrorCode.fetch_session_id_not_found,
            "session_id": 0,
            "responses": (),
        },
    )

    async def handle(header: wire.RequestHeader, request: Any) -> object | None:
        if header.api_key == 0:
            # The data plane counts each partition's code as it answers (data_plane.py).
            topics.produced("t", batch(1), ErrorCode.none)
            topics.produced("t", batch(1), ErrorCode.not_leader_or_follower)
            await asyncio.sleep(0.02)
            return answer
        return fetched if request.replica_id < 0 else NO_RESPONSE

    async def run() -> None:
        measured = requests.instrument(handle)
        produce = wire.RequestHeader(0, 9, 1, "c")
        produce_module = request_module(0, 9)
        request = make(
            produce_module.ProduceRequest,
            {
                "transactional_id": None,
                "acks": 1,
                "timeout": timedelta(seconds=1),
                "topic_data": (),
            },
        )
        assert await measured(produce, request) is answer
        for replica_id in (-1, -1, 3):
            request = make(
                fetch.FetchRequest,
                {
                    "replica_id": replica_id,
                    "max_wait": timedelta(0),
                    "min_bytes": 1,
                    "topics": (),
                    "forgotten_topics_data": (),
                    "rack_id": "",
                },
            )
            await measured(wire.RequestHeader(1, 12, 2, "c"), request)

    asyncio.run(run())
    samples = _Families(requests).samples()
    requests_total = "kafka_network_requestmetrics_requests_total"
    assert samples[(requests_total, (("request", "Produce"), ("version", "9")))] == 1
    assert samples[(requests_total, (("request", "FetchConsumer"), ("version", "12")))] == 2
    assert samples[(requests_total, (("request", "FetchFollower"), ("version", "12")))] == 1
    errors = "kafka_network_requestmetrics_errors_total"
    assert samples[(errors, (("error", "NONE"), ("request", "Produce")))] == 1
    assert samples[(errors, (("error", "NOT_LEADER_OR_FOLLOWER"), ("request", "Produce")))] == 1
    not_found = (("error", "FETCH_SESSION_ID_NOT_FOUND"), ("request", "FetchConsumer"))
    assert samples[(errors, not_found)] == 2
    assert not any(labels == (("request", "Metadata"),) for _, labels in samples)
    total = "kafka_network_requestmetrics_totaltimems"
    produce = (("request", "Produce"),)
    assert samples[(total + "_count", produce)] == 1
    assert samples[(total + "_sum", produce)] >= 20
    assert samples[(total + "_bucket", (("le", "10.0"), *produce))] == 0
    assert samples[(total + "_bucket", (("le", "+Inf"), *produce))] == 1
