"""Client quotas against a real node: a producer_byte_rate set through AlterClientQuotas
(forwarded to the controller, a ClientQuota record) holds a confluent-kafka (librdkafka)
producer to it, and the client is told so through throttle_time_ms (its throttle_cb);
Kafka's own kafka-configs sets and describes user and client quotas."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from broker.client import KafkaConnection
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module
from tests.kafka_tools import ROOT
from tests.kraft.procs import Processes, free_port, port_open, single_node, wait_until
from tests.kraft.secured import (
    ADD_SCRAM,
    ADMIN,
    ADMIN_PASSWORD,
    ALICE,
    ALICE_PASSWORD,
    Certs,
    ScramFormat,
    make_ca,
    sasl_ssl_props,
    scram_jaas,
)
from tests.kraft.wire_client import connect

QUOTA_BYTES_PER_S = 100 * 1024
# A new client's first burst is averaged over ten seconds (Kafka's Rate pads the window),
# and the sliding window then lets a client burst whenever a sample leaves it, every 11 s:
# the rate is held over whole quota windows, so it is measured over three of them after the
# first has passed.
WARM_UP_S = 12.0
MEASURE_S = 33.0
VALUE = b"q" * 1000
TOPIC = "quota"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("quotas")
    procs, bootstrap = single_node(root, {"log.dirs": str(root / "logs")})
    try:
        yield bootstrap
    finally:
        procs.cleanup()


async def _request(bootstrap: str, request: object) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    connection = await connect(host, int(port))
    try:
        return await connection.request(request, 30.0)
    finally:
        await connection.close()


def alter(bootstrap: str, entity: list[tuple[str, str | None]], key: str, value: float) -> Any:
    module: Any = request_module(ApiKey.ALTER_CLIENT_QUOTAS, 1)
    entry = make(
        module.EntryData,
        {
            "entity": tuple(
                make(module.EntityData, {"entity_type": t, "entity_name": n}) for t, n in entity
            ),
            "ops": (make(module.OpData, {"key": key, "value": value, "remove": False}),),
        },
    )
    request = make(module.AlterClientQuotasRequest, {"entries": (entry,), "validate_only": False})
    return asyncio.run(_request(bootstrap, request))


def describe(bootstrap: str, client_id: str) -> dict[str, float]:
    """The quotas DescribeClientQuotas lists for exactly this client id."""
    module: Any = request_module(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1)
    component = make(
        module.ComponentData, {"entity_type": "client-id", "match_type": 0, "match": client_id}
    )
    request = make(module.DescribeClientQuotasRequest, {"components": (component,), "strict": True})
    response = asyncio.run(_request(bootstrap, request))
    assert response.error_code == ErrorCode.none
    return {v.key: v.value for entry in response.entries for v in entry.values}


def produce_for(
    bootstrap: str,
    client_id: str,
    seconds: float,
    skip_s: float = 0.0,
    security: dict[str, str] | None = None,
    flush_s: float = 60.0,
) -> tuple[float, list[float]]:
    """Produce as fast as the producer is let for ``skip_s`` then ``seconds``; the bytes per
    second acknowledged during the last ``seconds``, and the throttle times reported."""
    throttles: list[float] = []
    acked = [0]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            **(security or {}),
            "linger.ms": 5,
            "batch.size": 16384,  # the Java producer's default: requests of about 16 KB
            "max.in.flight.requests.per.connection": 5,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    measuring = [False]

    def delivered(error: object, _message: object) -> None:
        assert error is None, error
        if measuring[0]:
            acked[0] += len(VALUE)

    start = time.monotonic()
    begin = start + skip_s
    end = begin + seconds
    while (now := time.monotonic()) < end:
        measuring[0] = now >= begin
        try:
            producer.produce(TOPIC, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
            continue
        if len(producer) > 5000:
            producer.poll(0.05)
        else:
            producer.poll(0)
    measuring[0] = False  # what is still queued is not counted
    producer.flush(flush_s)
    return acked[0] / seconds, throttles


def test_a_client_id_quota_holds_a_producer_to_its_byte_rate(node: str) -> None:
    bootstrap = node
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic("quota", 1, 1)]).values():
        future.result(30)
    response = alter(
        bootstrap, [("client-id", "throttled")], "producer_byte_rate", QUOTA_BYTES_PER_S
    )
    assert [e.error_code for e in response.entries] == [ErrorCode.none]
    wait_until(
        lambda: describe(bootstrap, "throttled") == {"producer_byte_rate": QUOTA_BYTES_PER_S},
        "the broker's image has the quota",
    )
    # Another client id has no quota: the same producer is never throttled. (How much faster
    # it runs depends on the machine: printed, not asserted.)
    free_rate, free_throttles = produce_for(bootstrap, "free", 3.0)
    assert free_rate > 0 and not free_throttles
    rate, throttles = produce_for(bootstrap, "throttled", MEASURE_S, skip_s=WARM_UP_S)
    print(
        f"unthrottled {free_rate / 1024:.0f} KiB/s; throttled {rate / 1024:.1f} KiB/s, "
        f"{len(throttles)} throttle events, max {max(throttles, default=0):.3f} s"
    )
    assert abs(rate - QUOTA_BYTES_PER_S) <= 0.1 * QUOTA_BYTES_PER_S
    assert throttles and max(throttles) > 0


def test_a_refused_quota_gets_kafkas_error(node: str) -> None:
    response = alter(node, [("client-id", "x")], "producer_byte_rate", 1.5)
    [entry] = response.entries
    assert entry.error_code == ErrorCode.invalid_request
    assert entry.error_message == "Configuration producer_byte_rate must be a Long value"
    response = alter(node, [("user", "u"), ("ip", "1.2.3.4")], "producer_byte_rate", 1.0)
    assert response.entries[0].error_code == ErrorCode.invalid_request
    assert describe(node, "x") == {}


def _ensure_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if TOPIC not in admin.list_topics(timeout=30).topics:
        for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
            future.result(30)


def test_a_request_percentage_quota_throttles_a_producer_a_window_at_most(node: str) -> None:
    """request_percentage (Kafka's ClientRequestQuotaManager): the thread time of a client's
    requests, as a percentage of one thread, over the sampled window. 0.01% (a tenth of a
    millisecond of the loop's CPU a second) is far below what a producer sending as fast as
    it can costs: librdkafka is told throttle times, each at most one quota window (1 s), as
    Kafka bounds request-time throttles, and the mute holds its rate far below a free one."""
    _ensure_topic(node)
    response = alter(node, [("client-id", "busy")], "request_percentage", 0.01)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]
    wait_until(
        lambda: describe(node, "busy") == {"request_percentage": 0.01},
        "the broker's image has the quota",
    )
    free_rate, free_throttles = produce_for(node, "not-busy", 3.0)
    assert not free_throttles
    # What is still queued when it stops would take minutes at this pace: not waited for.
    rate, throttles = produce_for(node, "busy", 6.0, skip_s=2.0, flush_s=1.0)
    print(
        f"request_percentage 0.01: {rate / 1024:.1f} KiB/s against {free_rate / 1024:.0f} "
        f"KiB/s free; {len(throttles)} throttle events, max {max(throttles, default=0):.3f} s"
    )
    assert throttles and 0 < max(throttles) <= 1.0
    assert rate < free_rate / 5


async def _create_topics(
    bootstrap: str, client_id: str, version: int, topics: list[tuple[str, int]]
) -> list[tuple[Any, float]]:
    """One CreateTopics request per item of ``topics`` on one connection, each sent as soon
    as the previous is answered: the responses and how long each took."""
    host, port = bootstrap.rsplit(":", 1)
    connection = KafkaConnection(client_id)
    await connection.connect(host, int(port), 10.0)
    module: Any = request_module(ApiKey.CREATE_TOPICS, version)
    answers = []
    loop = asyncio.get_running_loop()
    try:
        for name, partitions in topics:
            topic = make(
                module.CreatableTopic,
                {"name": name, "num_partitions": partitions, "replication_factor": 1},
            )
            request = make(
                module.CreateTopicsRequest,
                {"topics": (topic,), "timeout": timedelta(seconds=10)},
            )
            sent = loop.time()
            response = await connection.request(request, 30.0)
            answers.append((response, loop.time() - sent))
    finally:
        await connection.close()
    return answers


def test_a_controller_mutation_rate_refuses_then_throttles_topic_creation(node: str) -> None:
    """KIP-599 with Kafka's token bucket: 2 partitions/s, a burst of 20. CreateTopics v7
    creates 15 and then 10 partitions (the bucket had 5 left, so the topic goes through and
    takes it to -5); the next topic is refused THROTTLING_QUOTA_EXCEEDED with the time the
    bucket needs to get back to zero, and the connection's next request waits that long (the
    mute); after it the same topic is created."""
    response = alter(node, [("client-id", "mutator")], "controller_mutation_rate", 2.0)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]
    wait_until(
        lambda: describe(node, "mutator") == {"controller_mutation_rate": 2.0},
        "the broker's image has the quota",
    )
    answers = asyncio.run(
        _create_topics(
            node,
            "mutator",
            7,
            [("mut-1", 15), ("mut-2", 10), ("mut-3", 1), ("mut-3", 1)],
        )
    )
    codes = [response.topics[0].error_code for response, _ in answers]
    throttles = [response.throttle_time.total_seconds() for response, _ in answers]
    took = [seconds for _, seconds in answers]
    print(f"codes {codes} throttles {throttles} took {[round(t, 2) for t in took]}")
    assert codes[:2] == [ErrorCode.none, ErrorCode.none]
    assert throttles[:2] == [0.0, 0.0]
    assert codes[2] == ErrorCode.throttling_quota_exceeded
    assert answers[2][0].topics[0].error_message == "The throttling quota has been exceeded."
    assert 1.5 <= throttles[2] <= 2.5  # 5 tokens at 2/s, less what refilled meanwhile
    assert took[3] >= throttles[2] - 0.05  # read only after the mute
    assert codes[3] == ErrorCode.none


def test_librdkafka_creating_past_the_mutation_rate_is_throttled(node: str) -> None:
    """librdkafka's CreateTopics (before v6) is permissive, as in Kafka: the topic is created
    and the client is told the throttle time through its throttle_cb."""
    response = alter(node, [("client-id", "rdkafka-mutator")], "controller_mutation_rate", 2.0)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]
    wait_until(
        lambda: describe(node, "rdkafka-mutator") == {"controller_mutation_rate": 2.0},
        "the broker's image has the quota",
    )
    throttles: list[float] = []
    admin = AdminClient(
        {
            "bootstrap.servers": node,
            "client.id": "rdkafka-mutator",
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    for future in admin.create_topics([NewTopic("rdkafka-mut", 30, 1)]).values():
        future.result(30)  # created: 30 partitions against a burst of 20
    deadline = time.monotonic() + 10
    while not throttles and time.monotonic() < deadline:
        admin.poll(0.1)
    print(f"librdkafka throttle times {throttles}")
    assert throttles and 4.0 <= max(throttles) <= 5.0  # 10 tokens of debt at 2/s


async def _fetch_bytes(bootstrap: str, client_id: str, topic: str) -> int:
    """The records bytes one Fetch (v11, 50 MiB allowed in all and per partition) from
    offset 0 of ``topic``-0 brings back."""
    host, port = bootstrap.rsplit(":", 1)
    connection = KafkaConnection(client_id)
    await connection.connect(host, int(port), 10.0)
    module: Any = request_module(ApiKey.FETCH, 11)
    partition = make(
        module.FetchPartition,
        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 50 << 20},
    )
    request = make(
        module.FetchRequest,
        {
            "replica_id": -1,
            "max_wait": timedelta(milliseconds=100),
            "min_bytes": 1,
            "max_bytes": 50 << 20,
            "topics": (make(module.FetchTopic, {"topic": topic, "partitions": (partition,)}),),
        },
    )
    try:
        response: Any = await connection.request(request, 30.0)
    finally:
        await connection.close()
    [answer] = response.responses[0].partitions
    assert answer.error_code == ErrorCode.none
    return len(answer.records or b"")


def test_a_consumer_under_its_quota_fetches_at_most_a_quota_window(node: str) -> None:
    """Kafka bounds a consumer's Fetch to what its consumer_byte_rate allows over the quota
    window (getMaxValueInQuotaWindow): at 10,000 B/s, 100,000 bytes (plus the batch that
    crosses the bound: a fetch always returns whole batches), where a consumer without a
    quota gets the whole 1 MB backlog at once."""
    topic = "fetch-bound"
    admin = AdminClient({"bootstrap.servers": node})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": node, "linger.ms": 5, "batch.size": 16384})
    for _ in range(1000):
        producer.produce(topic, VALUE, partition=0)
    assert producer.flush(30) == 0
    response = alter(node, [("client-id", "slow-consumer")], "consumer_byte_rate", 10_000)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]
    wait_until(
        lambda: describe(node, "slow-consumer") == {"consumer_byte_rate": 10_000},
        "the broker's image has the quota",
    )
    bounded = asyncio.run(_fetch_bytes(node, "slow-consumer", topic))
    free = asyncio.run(_fetch_bytes(node, "free-consumer", topic))
    print(f"one fetch: {bounded} bytes under the quota, {free} without")
    assert 0 < bounded <= 100_000 + 20_000
    assert free > 1_000_000


def kafka_configs(bootstrap: str, *args: str) -> str:
    """Kafka's own kafka-configs (scripts/kafka-dist.sh assembles Kafka 4.1.0's jars)."""
    result = subprocess.run(
        [
            "bash",
            str(ROOT / "scripts" / "kafka-dist.sh"),
            "configs",
            "--bootstrap-server",
            bootstrap,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return result.stdout


def test_kafka_configs_sets_and_describes_user_and_client_quotas(node: str) -> None:
    """``kafka-configs --entity-type users/clients`` (AlterClientQuotas and
    DescribeClientQuotas from the Java Admin client), defaults included."""
    kafka_configs(
        node,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )
    kafka_configs(
        node,
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "request_percentage=50",
    )
    kafka_configs(
        node,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-default",
        "--add-config",
        "producer_byte_rate=4096",
    )
    described = kafka_configs(
        node, "--describe", "--entity-type", "users", "--entity-name", "alice"
    )
    assert "Quota configs for user-principal 'alice' are" in described
    assert (
        "producer_byte_rate=1048576.0" in described and "consumer_byte_rate=2097152.0" in described
    )
    both = kafka_configs(
        node,
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
    )
    assert "request_percentage=50.0" in both
    defaults = kafka_configs(node, "--describe", "--entity-type", "clients", "--entity-default")
    assert "producer_byte_rate=4096.0" in defaults
    kafka_configs(
        node,
        "--alter",
        "--entity-type",
        "clients",
        "--entity-default",
        "--delete-config",
        "producer_byte_rate",
    )
    gone = kafka_configs(node, "--describe", "--entity-type", "clients", "--entity-default")
    assert "producer_byte_rate" not in gone


@pytest.fixture(scope="module")
def sasl_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Certs]]:
    """One combined node whose listeners are SASL_SSL with SCRAM-SHA-512 users admin and
    alice (tests/kraft/secured.py)."""
    root = tmp_path_factory.mktemp("quotas-sasl")
    certs = make_ca(root / "certs")
    broker_port, controller_port = free_port(), free_port()
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"SASL_SSL://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "SASL_SSL",
        "log.dirs": str(root / "logs"),
        **sasl_ssl_props(
            certs.identity("node1", ips=("127.0.0.1",)), certs, ["SASL_SSL", "CONTROLLER"]
        ),
    }
    procs = Processes(root, {1: props}, program=ScramFormat(scram=ADD_SCRAM))
    try:
        procs.start(1)
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the SASL_SSL listener opens")
        yield f"127.0.0.1:{broker_port}", certs
    finally:
        procs.cleanup()


def _sasl(certs: Certs, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(certs.ca),
    }


def test_a_user_quota_holds_a_sasl_producer_to_its_byte_rate(
    sasl_node: tuple[str, Certs], tmp_path: Path
) -> None:
    """The issue's figure: 100 KB/s on user alice (logged in with SCRAM-SHA-512 over
    SASL_SSL), set by kafka-configs --entity-type users with --command-config; admin, another
    user, is not held."""
    bootstrap, certs = sasl_node
    admin_conf = _sasl(certs, ADMIN, ADMIN_PASSWORD)
    admin = AdminClient({"bootstrap.servers": bootstrap, **admin_conf})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(30)
    command_config = tmp_path / "admin.properties"
    command_config.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.jaas.config={scram_jaas(ADMIN, ADMIN_PASSWORD)}\n"
        "ssl.truststore.type=PEM\n"
        f"ssl.truststore.location={certs.ca}\n"
    )
    kafka_configs(
        bootstrap,
        "--command-config",
        str(command_config),
        "--alter",
        "--entity-type",
        "users",
        "--entity-name",
        ALICE,
        "--add-config",
        f"producer_byte_rate={QUOTA_BYTES_PER_S}",
    )
    described = kafka_configs(
        bootstrap,
        "--command-config",
        str(command_config),
        "--describe",
        "--entity-type",
        "users",
        "--entity-name",
        ALICE,
    )
    assert f"producer_byte_rate={float(QUOTA_BYTES_PER_S)}" in described
    free_rate, free_throttles = produce_for(bootstrap, "app", 3.0, security=admin_conf)
    assert free_rate > 5 * QUOTA_BYTES_PER_S and not free_throttles
    alice = _sasl(certs, ALICE, ALICE_PASSWORD)
    rate, throttles = produce_for(bootstrap, "app", MEASURE_S, skip_s=WARM_UP_S, security=alice)
    print(
        f"SASL_SSL: admin {free_rate / 1024:.0f} KiB/s; alice {rate / 1024:.1f} KiB/s, "
        f"{len(throttles)} throttle events, max {max(throttles, default=0):.3f} s"
    )
    assert abs(rate - QUOTA_BYTES_PER_S) <= 0.1 * QUOTA_BYTES_PER_S
    assert throttles and max(throttles) > 0


async def _describe_cluster_until_throttled(
    address: str, client_id: str, most: int
) -> tuple[list[float], float]:
    """DescribeCluster on one connection to a controller, each sent when the previous is
    answered, until one is throttled (at most ``most``): the throttle times, and how long the
    request after the first throttled answer took (0 if none was throttled)."""
    host, port = address.rsplit(":", 1)
    connection = KafkaConnection(client_id)
    await connection.connect(host, int(port), 10.0)
    request = DescribeClusterRequest(
        include_cluster_authorized_operations=False, endpoint_type=i8(2)
    )
    loop = asyncio.get_running_loop()
    throttles: list[float] = []
    try:
        for _ in range(most):
            response = await connection.request(request, 30.0)
            assert response.error_code == ErrorCode.none
            throttles.append(response.throttle_time.total_seconds())
            if throttles[-1] > 0:
                sent = loop.time()
                await connection.request(request, 30.0)
                return throttles, loop.time() - sent
    finally:
        await connection.close()
    return throttles, 0.0


@pytest.fixture(scope="module")
def controller_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A node of its own, for clients of its controller listener: (broker, controller)."""
    root = tmp_path_factory.mktemp("controller-quotas")
    procs, bootstrap = single_node(root, {"log.dirs": str(root / "logs")})
    try:
        yield bootstrap, procs.nodes[1]["controller.quorum.voters"].split("@")[1]
    finally:
        procs.cleanup()


def test_a_request_percentage_quota_holds_a_client_of_the_controller_listener(
    controller_node: tuple[str, str],
) -> None:
    """Kafka's controller applies request quotas as its brokers do (ControllerApis answers
    through sendResponseMaybeThrottle): a client bootstrapped from the controller under
    request_percentage=0.01 is told a throttle time of at most one window and its
    connection's next request waits that long; another client id is not throttled."""
    bootstrap, controller = controller_node
    response = alter(bootstrap, [("client-id", "busy-admin")], "request_percentage", 0.01)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]
    wait_until(
        lambda: describe(bootstrap, "busy-admin") == {"request_percentage": 0.01},
        "the image has the quota",
    )
    free, _ = asyncio.run(_describe_cluster_until_throttled(controller, "free-admin", 100))
    throttles, next_took_s = asyncio.run(
        _describe_cluster_until_throttled(controller, "busy-admin", 2000)
    )
    print(
        f"controller listener: throttled after {len(throttles)} DescribeCluster requests, "
        f"{throttles[-1]:.3f} s; the next answered after {next_took_s:.3f} s"
    )
    assert free == [0.0] * 100
    assert 0 < throttles[-1] <= 1.0
    assert next_took_s >= throttles[-1] - 0.05


def test_the_controller_charges_its_own_clients_topic_creation(
    controller_node: tuple[str, str],
) -> None:
    """CreateTopics sent to the controller directly is charged to controller_mutation_rate
    as Kafka's controller charges it: the broker test's sequence, on the controller
    listener, with the same answers. What a broker forwards comes in an Envelope and is
    charged there too, as the client
    (test_a_controller_mutation_rate_refuses_then_throttles_topic_creation)."""
    bootstrap, controller = controller_node
    response = alter(bootstrap, [("client-id", "c-mutator")], "controller_mutation_rate", 2.0)
    assert [e.error_code for e in response.entries] == [ErrorCode.none]
    wait_until(
        lambda: describe(bootstrap, "c-mutator") == {"controller_mutation_rate": 2.0},
        "the image has the quota",
    )
    answers = asyncio.run(
        _create_topics(
            controller, "c-mutator", 7, [("cm-1", 15), ("cm-2", 10), ("cm-3", 1), ("cm-3", 1)]
        )
    )
    codes = [response.topics[0].error_code for response, _ in answers]
    throttles = [response.throttle_time.total_seconds() for response, _ in answers]
    took = [seconds for _, seconds in answers]
    print(f"controller: codes {codes} throttles {throttles} took {[round(t, 2) for t in took]}")
    assert codes[:2] == [ErrorCode.none, ErrorCode.none]
    assert throttles[:2] == [0.0, 0.0]
    assert codes[2] == ErrorCode.throttling_quota_exceeded
    assert answers[2][0].topics[0].error_message == "The throttling quota has been exceeded."
    assert 1.5 <= throttles[2] <= 2.5
    assert took[3] >= throttles[2] - 0.05
    assert codes[3] == ErrorCode.none
