"""broker/quotas.py: Kafka's sampled rate and throttle time, the order in which quota
entities apply, and KIP-219's enforcement (throttle_time_ms in the response, the channel
muted after it is sent)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import timedelta
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from broker.authorization import RequestAuthorizer
from broker.client import KafkaConnection
from broker.quotas import (
    QuotaConfig,
    QuotaManager,
    Rate,
    controller_quota_exempt,
    forwarding_client_id,
    resolve,
    user_of,
)
from broker.security import PRINCIPAL
from metadata.authorizer import AuthorizerConfig
from metadata.image import MetadataImage, QuotaEntity
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import api_versions_response
from protocol.entities import make, request_module, response_module
from protocol.server import CHANNEL, Channel, serve_connection

CONFIG = QuotaConfig()  # quota.window.num 11, quota.window.size.seconds 1


def test_a_first_burst_is_averaged_over_ten_windows() -> None:
    """Kafka's Rate.windowSize: fewer than window_num - 1 whole windows count as that many."""
    rate = Rate(CONFIG, 0.0)
    rate.record(1000.0, 0.0)
    assert rate.measure(0.0) == 100.0
    assert rate.throttle_s(100.0, 0.0) == 0.0
    # 50/s allowed: 100/s is the bound's worth of excess, over a 10 s window: 10 s
    # (QuotaUtils.throttleTime: (rate - bound) / bound * window).
    assert rate.throttle_s(50.0, 0.0) == 10.0
    rate.record(1000.0, 0.5)  # the same sample; the span is now 10.5 s
    assert rate.measure(0.5) == 2000.0 / 10.5


def test_samples_older_than_the_whole_window_are_forgotten() -> None:
    rate = Rate(CONFIG, 0.0)
    rate.record(1000.0, 0.0)
    for second in range(1, 11):
        rate.record(10.0, float(second))
    assert rate.measure(10.5) == 1100.0 / 10.5
    assert rate.measure(11.0) == 100.0 / 10.0  # the first sample is 11 s old: reset


@settings(max_examples=150, deadline=None)
@given(
    bound=st.sampled_from([1e3, 1e5, 1e6]),
    size=st.sampled_from([0.001, 0.01, 0.1, 0.5, 1.0]),
    gap_s=st.sampled_from([0.0001, 0.001]),
    start_s=st.floats(11.0, 30.0),
)
@example(bound=1e3, size=0.01, gap_s=0.0001, start_s=11.21875)
def test_a_greedy_client_that_waits_its_throttle_times_is_held_within_10_percent(
    bound: float, size: float, gap_s: float, start_s: float
) -> None:
    """A client sending as fast as it can (at least twice the quota), each request waiting
    out the previous throttle: over nine quota windows after the first, its rate is within
    1/11 + 1/99 of the quota, about 10%: the span the rate divides by swings between 10 and
    11 s (1/11), and a throttle time (at most one 1 s window) can fall across the start of
    the 99 s measured, taking up to a second's sends from it (1/99). Hypothesis found the
    second term: from 11.21875 s the client waited out a throttle into the measurement and
    averaged 899.2/s of 1,000."""
    value = bound * size
    if value / gap_s < 2 * bound:
        return  # not a greedy client: it could never reach the quota
    rate = Rate(CONFIG, 0.0)
    now_s, total = 0.0, 0.0
    end_s = start_s + 99.0
    while now_s < end_s:
        rate.record(value, now_s)
        if now_s >= start_s:
            total += value
        now_s += max(rate.throttle_s(bound, now_s), gap_s)
    assert abs(total / 99.0 - bound) <= (1 / 11 + 1 / 99) * bound


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 1e6)), max_size=40))
def test_throttled_exactly_when_over_the_bound(records: list[tuple[float, float]]) -> None:
    rate = Rate(CONFIG, 0.0)
    now_s = 0.0
    for step_s, value in records:
        now_s += step_s
        rate.record(value, now_s)
        measured = rate.measure(now_s)
        throttle = rate.throttle_s(50_000.0, now_s)
        assert (throttle > 0) == (measured > 50_000.0)
        assert throttle >= 0


ORDER: list[QuotaEntity] = [
    (("client-id", "app"), ("user", "alice")),
    (("client-id", None), ("user", "alice")),
    (("user", "alice"),),
    (("client-id", "app"), ("user", None)),
    (("client-id", None), ("user", None)),
    (("user", None),),
    (("client-id", "app"),),
    (("client-id", None),),
]
SENSORS = [
    ("alice", "app"),
    ("alice", "app"),  # a user's default client quota: each client id its own rate
    ("alice", ""),  # a user quota: all the user's clients share one
    ("alice", "app"),
    ("alice", "app"),
    ("alice", ""),
    ("", "app"),
    ("", "app"),
]


def test_the_most_specific_entity_with_the_key_applies_in_kafkas_order() -> None:
    quotas: dict[QuotaEntity, dict[str, float]] = {
        entity: {"producer_byte_rate": float(i + 1)} for i, entity in enumerate(ORDER)
    }
    quotas[(("user", "bob"),)] = {"producer_byte_rate": 99.0}  # another user: never applies
    for i, sensor in enumerate(SENSORS):
        resolved = resolve(quotas, "producer_byte_rate", "alice", "app")
        assert resolved is not None
        assert (resolved.bound, resolved.sensor) == (float(i + 1), sensor)
        del quotas[ORDER[i]]
    assert resolve(quotas, "producer_byte_rate", "alice", "app") is None


def test_each_key_resolves_on_its_own() -> None:
    quotas: dict[QuotaEntity, dict[str, float]] = {
        (("user", "alice"),): {"consumer_byte_rate": 5.0},
        (("client-id", None),): {"producer_byte_rate": 7.0},
    }
    produce = resolve(quotas, "producer_byte_rate", "alice", "app")
    consume = resolve(quotas, "consumer_byte_rate", "alice", "app")
    assert produce is not None and consume is not None
    assert (produce.bound, consume.bound) == (7.0, 5.0)
    assert user_of("User:alice") == "alice"


def _image(quotas: dict[QuotaEntity, dict[str, float]]) -> MetadataImage:
    return MetadataImage(client_quotas=quotas)


def _produce_response(version: int = 9) -> Any:
    module: Any = response_module(ApiKey.PRODUCE, version)
    return make(module.ProduceResponse, {"responses": (), "throttle_time": timedelta(0)})


def _header(api_key: int, client_id: str) -> wire.RequestHeader:
    return wire.RequestHeader(api_key, 9, 1, client_id)


def test_a_produce_over_its_quota_is_answered_with_a_throttle_time_and_mutes_its_channel() -> None:
    async def run() -> tuple[list[Any], list[float], int]:
        quotas = QuotaManager(
            lambda: _image({(("client-id", "app"),): {"producer_byte_rate": 1000.0}}), CONFIG
        )

        async def handle(_header: wire.RequestHeader, _request: object) -> object:
            return _produce_response()

        enforcing = quotas.enforcing(handle)
        channel = Channel()
        CHANNEL.set(channel)
        PRINCIPAL.set("User:ANONYMOUS")
        loop = asyncio.get_running_loop()
        responses, mutes = [], []
        for _ in range(3):
            channel.request_bytes = 6000  # 6000 bytes over the padded 10 s: 600/s, within
            responses.append(await enforcing(_header(ApiKey.PRODUCE, "app"), object()))
            mutes.append(channel.muted_until_s - loop.time())
        other = await enforcing(_header(ApiKey.PRODUCE, "other"), object())
        responses.append(other)
        return responses, mutes, quotas.sensors

    responses, mutes, sensors = asyncio.run(run())
    throttles = [r.throttle_time for r in responses]
    # 12000 bytes: 1200/s, 20% over 1000/s for 10 s: 2 s; 18000: 8 s.
    assert throttles[0] == timedelta(0)
    assert abs(throttles[1].total_seconds() - 2.0) < 0.01
    assert abs(throttles[2].total_seconds() - 8.0) < 0.01
    assert throttles[3] == timedelta(0)  # another client id has no quota
    assert mutes[0] <= 0 and abs(mutes[1] - 2.0) < 0.05 and abs(mutes[2] - 8.0) < 0.05
    assert sensors == 1


def test_a_follower_fetch_is_never_throttled_and_a_consumer_fetch_counts_its_records() -> None:
    module: Any = response_module(ApiKey.FETCH, 13)

    def fetch_response(records: bytes) -> Any:
        partition = make(
            module.PartitionData,
            {
                "partition_index": 0,
                "error_code": 0,
                "high_watermark": 0,
                "records": records,
            },
        )
        topic = make(
            module.FetchableTopicResponse,
            {"topic_id": uuid.UUID(int=1), "partitions": (partition,)},
        )
        return make(
            module.FetchResponse,
            {
                "throttle_time": timedelta(0),
                "error_code": 0,
                "session_id": 0,
                "responses": (topic,),
            },
        )

    class Request:
        def __init__(self, replica_id: int) -> None:
            self.replica_id = replica_id

    async def run() -> tuple[timedelta, timedelta]:
        quotas = QuotaManager(
            lambda: _image({(("client-id", None),): {"consumer_byte_rate": 100.0}}), CONFIG
        )

        async def handle(_header: wire.RequestHeader, _request: object) -> object:
            return fetch_response(b"x" * 2000)  # 200/s over 10 s: twice the quota

        enforcing = quotas.enforcing(handle)
        CHANNEL.set(Channel())
        follower = await enforcing(_header(ApiKey.FETCH, "broker-2"), Request(2))
        consumer = await enforcing(_header(ApiKey.FETCH, "c"), Request(-1))
        return follower.throttle_time, consumer.throttle_time  # type: ignore[attr-defined]

    follower, consumer = asyncio.run(run())
    assert follower == timedelta(0)
    assert abs(consumer.total_seconds() - 10.0) < 0.01


def test_a_muted_connection_reads_its_next_request_only_after_the_mute() -> None:
    """KIP-219: the throttled response goes out at once; the request the client sent right
    after it is not read until the throttle time has passed."""
    mute_s = 0.3

    async def run() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        handled: list[float] = []

        async def handle(header: wire.RequestHeader, _request: object) -> object:
            handled.append(loop.time())
            channel = CHANNEL.get()
            assert channel is not None
            if len(handled) == 1:
                channel.mute_until(loop.time() + mute_s)
            return api_versions_response(header.api_version, {ApiKey.API_VERSIONS: (0, 3)})

        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve_connection(reader, writer, handle, {ApiKey.API_VERSIONS: (0, 3)})

        server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        connection = KafkaConnection("test")
        try:
            await connection.connect("127.0.0.1", server.sockets[0].getsockname()[1], 5)
            request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
            sent = loop.time()
            first = asyncio.ensure_future(connection.request(request, 5))
            second = asyncio.ensure_future(connection.request(request, 5))
            await first
            first_answered = loop.time()
            await second
        finally:
            await connection.close()
            server.close()
        return first_answered - sent, handled[1] - handled[0], len(handled)

    first_latency, between, count = asyncio.run(run())
    assert count == 2
    assert first_latency < mute_s  # the throttled response itself is not delayed
    assert between >= mute_s


def test_rates_idle_for_the_whole_window_are_forgotten() -> None:
    quotas = QuotaManager(
        lambda: _image({(("client-id", None),): {"producer_byte_rate": 10.0}}), CONFIG
    )
    for i in range(50):
        quotas.record("producer_byte_rate", "u", f"client-{i}", 1.0, 0.0)
    assert quotas.sensors == 50
    quotas.record("producer_byte_rate", "u", "late", 1.0, 12.0)
    assert quotas.sensors == 1


def test_an_ip_over_its_connection_creation_rate_is_refused_and_not_counted() -> None:
    quotas_by_entity: dict[QuotaEntity, dict[str, float]] = {
        (("ip", None),): {"connection_creation_rate": 2.0},
        (("ip", "10.0.0.9"),): {"connection_creation_rate": 100.0},
    }
    quotas = QuotaManager(lambda: _image(quotas_by_entity), CONFIG)
    # Two a second, averaged over the first ten seconds: 20 at once, then refusals.
    assert [quotas.admit_connection("10.0.0.1", 0.0) for _ in range(20)] == [0.0] * 20
    refused = [quotas.admit_connection("10.0.0.1", 0.0) for _ in range(5)]
    assert all(0 < delay <= CONFIG.window_size_s for delay in refused)
    # Refusals are not counted: as soon as the rate allows one more, one more is admitted.
    assert quotas.admit_connection("10.0.0.1", 0.49) > 0  # 21 over 10.49 s: above 2/s
    assert quotas.admit_connection("10.0.0.1", 0.5) == 0.0  # 21 over 10.5 s: 2/s exactly
    # Its own quota for one IP, the default for the others; none without a quota.
    assert [quotas.admit_connection("10.0.0.9", 0.0) for _ in range(50)] == [0.0] * 50
    assert quotas.admit_connection("10.0.0.2", 0.0) == 0.0
    assert QuotaManager(lambda: _image({}), CONFIG).admit_connection("10.0.0.1", 0.0) == 0.0


class _BusyClock:
    """A stand-in for the loop thread's CPU clock: advanced by hand, as work is done."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _api_versions_response() -> Any:
    return api_versions_response(3, {ApiKey.API_VERSIONS: (0, 3)})


def test_request_percentage_counts_the_handlers_own_steps_not_its_waits() -> None:
    """Kafka's ClientRequestQuotaManager: a request's thread time as a percentage of one
    second, measured by the sampled rate; over the quota the response carries the throttle
    time, at most one quota window, and the channel is muted for it. Time the handler spends
    waiting (another task works meanwhile) is not the request's."""

    async def run(percentage: float, wait_work_s: float) -> tuple[list[float], list[float]]:
        busy = _BusyClock()
        quotas = QuotaManager(
            lambda: _image({(("client-id", "app"),): {"request_percentage": percentage}}),
            CONFIG,
            busy,
        )
        loop = asyncio.get_running_loop()

        async def other_task(done: asyncio.Event) -> None:
            busy.now_s += wait_work_s  # someone else's work while the handler waits
            done.set()

        async def handle(_header: wire.RequestHeader, _request: object) -> object:
            busy.now_s += 0.3
            done = asyncio.Event()
            other = loop.create_task(other_task(done))
            await done.wait()
            await other
            busy.now_s += 0.2
            return _api_versions_response()

        enforcing = quotas.enforcing(handle)
        channel = Channel()
        CHANNEL.set(channel)
        PRINCIPAL.set("User:ANONYMOUS")
        throttles, mutes = [], []
        for _ in range(4):
            channel.muted_until_s = 0.0
            response: Any = await enforcing(_header(ApiKey.API_VERSIONS, "app"), object())
            throttles.append(response.throttle_time.total_seconds())
            mutes.append(channel.muted_until_s - loop.time())
        return throttles, mutes

    # 0.5 s of work a request, 50 percent-seconds over the padded 10 s window: 5% per
    # request. Within a 20% quota for four requests; not if the waits were counted (5 s
    # of the other task's work each).
    throttles, mutes = asyncio.run(run(20.0, 5.0))
    assert throttles == [0.0] * 4 and all(m <= 0 for m in mutes)
    # Under 12%: the third request brings it to 15%, (15 - 12) / 12 x 10 s = 2.5 s, bounded
    # by the 1 s window; muted that long.
    throttles, mutes = asyncio.run(run(12.0, 0.0))
    assert throttles[:2] == [0.0, 0.0]
    assert throttles[2:] == [1.0, 1.0]
    assert all(abs(m - 1.0) < 0.05 for m in mutes[2:])


def test_request_percentage_exempts_cluster_actions_and_other_clients() -> None:
    class Fetch:
        def __init__(self, replica_id: int) -> None:
            self.replica_id = replica_id

    async def run() -> dict[str, float]:
        busy = _BusyClock()
        quotas = QuotaManager(
            lambda: _image({(("client-id", None),): {"request_percentage": 1.0}}),
            CONFIG,
            busy,
        )

        async def handle(header: wire.RequestHeader, _request: object) -> object:
            busy.now_s += 1.0  # 10% of the padded window: ten times the quota
            if header.api_key == ApiKey.FETCH:
                return make(
                    response_module(ApiKey.FETCH, 13).FetchResponse,
                    {
                        "throttle_time": timedelta(0),
                        "error_code": 0,
                        "session_id": 0,
                        "responses": (),
                    },
                )
            return _api_versions_response()

        enforcing = quotas.enforcing(handle)
        CHANNEL.set(Channel())
        PRINCIPAL.set("User:ANONYMOUS")
        seen = {}
        for name, header, request in [
            ("follower", _header(ApiKey.FETCH, "broker-2"), Fetch(2)),
            ("follower again", _header(ApiKey.FETCH, "broker-2"), Fetch(2)),
            ("consumer", _header(ApiKey.FETCH, "c"), Fetch(-1)),
            ("metadata", _header(ApiKey.API_VERSIONS, "m"), object()),
        ]:
            response: Any = await enforcing(header, request)
            seen[name] = response.throttle_time.total_seconds()
        return seen

    seen = asyncio.run(run())
    assert seen == {"follower": 0.0, "follower again": 0.0, "consumer": 1.0, "metadata": 1.0}


def test_a_throttle_time_the_handler_set_mutes_the_channel() -> None:
    """A forwarded admin request's throttle time (the controller mutation quota) is the
    client's: the channel is muted for it as for the broker's own quotas."""

    async def run() -> float:
        quotas = QuotaManager(lambda: _image({}), CONFIG)

        async def handle(_header: wire.RequestHeader, _request: object) -> object:
            return dataclasses.replace(_api_versions_response(), throttle_time=timedelta(seconds=3))

        channel = Channel()
        CHANNEL.set(channel)
        await quotas.enforcing(handle)(_header(ApiKey.API_VERSIONS, "c"), object())
        return channel.muted_until_s - asyncio.get_running_loop().time()

    assert abs(asyncio.run(run()) - 3.0) < 0.05


def test_request_percentage_also_charges_decoding_and_writing() -> None:
    """Kafka charges a request quota with the network thread's time too: once a client is
    timed, its connection times decoding each request and encoding and writing each answer,
    and that is charged with its next request. A clock that moves 1 ms per reading makes
    every timed step cost 1 ms: the first request is charged its handler's one step; the
    second also the first answer's encoding and writing and its own decoding."""
    charged: list[float] = []

    class Recording(QuotaManager):
        def _record(self, key: str, quota: Any, value: float, now_s: float) -> float:
            if key == "request_percentage":
                charged.append(value)
            return super()._record(key, quota, value, now_s)

    class SteppingClock:
        def __init__(self) -> None:
            self.now_s = 0.0

        def __call__(self) -> float:
            self.now_s += 0.001
            return self.now_s

    async def run() -> None:
        quotas = Recording(
            lambda: _image({(("client-id", "test"),): {"request_percentage": 1000.0}}),
            CONFIG,
            SteppingClock(),
        )

        async def handle(header: wire.RequestHeader, _request: object) -> object:
            return api_versions_response(header.api_version, {ApiKey.API_VERSIONS: (0, 3)})

        enforcing = quotas.enforcing(handle)

        async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve_connection(reader, writer, enforcing, {ApiKey.API_VERSIONS: (0, 3)})

        server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
        connection = KafkaConnection("test")
        try:
            await connection.connect("127.0.0.1", server.sockets[0].getsockname()[1], 5)
            request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
            for _ in range(2):
                await connection.request(request, 5)
        finally:
            await connection.close()
            server.close()

    asyncio.run(run())
    # Percent-seconds: 1 ms is 0.1. The handler is one step; decoding at least one more, and
    # encoding and writing the first answer at least one.
    assert len(charged) == 2
    assert abs(charged[0] - 0.1) < 1e-6
    assert charged[1] >= 0.3 - 1e-6


def test_a_consumer_fetch_asks_for_at_most_its_quota_window() -> None:
    """Kafka's getMaxValueInQuotaWindow: a consumer under consumer_byte_rate B has its
    Fetch max_bytes (and min_bytes) bounded by B x (quota.window.num - 1) x window seconds;
    a follower's fetch and a consumer without a quota are untouched."""
    module: Any = request_module(ApiKey.FETCH, 13)

    def fetch(replica_id: int) -> Any:
        return make(
            module.FetchRequest,
            {
                "replica_id": replica_id,
                "max_wait": timedelta(milliseconds=500),
                "min_bytes": 1 << 20,
                "max_bytes": 50 << 20,
                "topics": (),
            },
        )

    async def run() -> list[tuple[int, int]]:
        quotas = QuotaManager(
            lambda: _image({(("client-id", "slow"),): {"consumer_byte_rate": 1000.0}}), CONFIG
        )
        seen: list[tuple[int, int]] = []

        async def handle(_header: wire.RequestHeader, request: Any) -> object:
            seen.append((request.max_bytes, request.min_bytes))
            return _api_versions_response()

        enforcing = quotas.enforcing(handle)
        CHANNEL.set(Channel())
        PRINCIPAL.set("User:ANONYMOUS")
        await enforcing(_header(ApiKey.FETCH, "slow"), fetch(-1))
        await enforcing(_header(ApiKey.FETCH, "slow"), fetch(3))
        await enforcing(_header(ApiKey.FETCH, "free"), fetch(-1))
        return seen

    assert asyncio.run(run()) == [
        (10_000, 10_000),  # 1000 B/s x 10 windows of 1 s
        (50 << 20, 1 << 20),
        (50 << 20, 1 << 20),
    ]


def test_on_the_controller_listener_quorum_rpcs_and_forwarded_requests_are_not_charged() -> None:
    """Kafka's ControllerApis throttles every response but the quorum's RPCs and
    AlterPartition, and never a forwarded request. A broker's forwarding connection is
    known by its client id, believed only from a principal allowed CLUSTER_ACTION when an
    authorizer is set."""

    async def run(authorizer: RequestAuthorizer | None, principal: str) -> dict[str, float]:
        busy = _BusyClock()
        image = _image({(("client-id", None),): {"request_percentage": 1.0}})
        quotas = QuotaManager(lambda: image, CONFIG, busy)

        async def handle(_header: wire.RequestHeader, _request: object) -> object:
            busy.now_s += 1.0  # 10% of the padded window: ten times the quota
            return _api_versions_response()

        enforcing = quotas.enforcing(handle, controller_quota_exempt(authorizer))
        CHANNEL.set(Channel())
        PRINCIPAL.set(principal)
        seen = {}
        for name, header in [
            ("vote", _header(ApiKey.VOTE, "controller-2")),
            ("raft fetch", _header(ApiKey.FETCH, "broker-4")),
            ("alter partition", _header(ApiKey.ALTER_PARTITION, "broker-4")),
            ("forwarded", _header(ApiKey.CREATE_TOPICS, forwarding_client_id(4))),
            ("heartbeat", _header(ApiKey.BROKER_HEARTBEAT, "broker-4")),
            ("direct admin", _header(ApiKey.DESCRIBE_CLUSTER, "admin")),
        ]:
            response: Any = await enforcing(header, object())
            seen[name] = response.throttle_time.total_seconds()
        return seen

    charged = {"heartbeat": 1.0, "direct admin": 1.0}
    exempt = {"vote": 0.0, "raft fetch": 0.0, "alter partition": 0.0, "forwarded": 0.0}
    assert asyncio.run(run(None, "User:ANONYMOUS")) == {**exempt, **charged}
    authorizer = RequestAuthorizer(
        AuthorizerConfig(super_users=frozenset({"User:broker"})), lambda: MetadataImage()
    )
    assert asyncio.run(run(authorizer, "User:broker")) == {**exempt, **charged}
    # A client naming itself as a forwarding connection is charged all the same.
    assert asyncio.run(run(authorizer, "User:mallory")) == {
        **exempt,
        "forwarded": 1.0,
        **charged,
    }
