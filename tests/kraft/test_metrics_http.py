"""``metrics.listener``: the key's parsing, the /metrics endpoint's HTTP behaviour and bounds,
and a real kraft-server serving Kafka-named metrics that follow what clients did (and
serving none when the key is absent)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from kraft.config import ConfigError, Endpoint, config_from_properties
from kraft.metrics_http import MAX_CONNECTIONS, MAX_HEAD_BYTES, MetricsServer
from tests.kraft.inprocess import format_node
from tests.kraft.procs import KRAFT_SERVER, free_port, single_node, wait_until

BASE = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.quorum.voters": "1@localhost:9093",
    "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
    "log.dirs": "./data",
}


def test_metrics_listener_is_off_when_absent_or_empty_and_parsed_when_set() -> None:
    assert config_from_properties(BASE).metrics_listener is None
    assert config_from_properties(BASE | {"metrics.listener": " "}).metrics_listener is None
    found = config_from_properties(BASE | {"metrics.listener": "http://127.0.0.9:9404"})
    assert found.metrics_listener == Endpoint("HTTP", "127.0.0.9", 9404)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("https://localhost:9404", "is not http://host:port"),
        ("http://localhost:1,http://localhost:2", "is not http://host:port"),
        ("http://localhost", "is not NAME://host:port"),
        ("http://localhost:9092", "port 9092 is the PLAINTEXT listener's"),
        ("http://:9093", "port 9093 is the CONTROLLER listener's"),
    ],
)
def test_a_bad_or_clashing_metrics_listener_is_one_line_naming_the_key(
    value: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=f"metrics.listener: .*{message}"):
        config_from_properties(BASE | {"metrics.listener": value})


async def _exchange(port: int, data: bytes) -> bytes:
    """What the endpoint answers ``data`` with; b"" when it closes (or resets) unanswered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5)
    except ConnectionResetError:
        return b""
    finally:
        writer.close()


def test_the_endpoint_answers_get_and_head_on_metrics_and_refuses_the_rest() -> None:
    renders = []

    def render() -> bytes:
        renders.append(1)
        return b"kafka_x 1.0\n"

    async def run() -> None:
        server = MetricsServer(render)
        _, port = await server.start("127.0.0.1", 0)
        try:
            ok = await _exchange(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
            assert f"Content-Type: {CONTENT_TYPE_LATEST}\r\n".encode() in ok
            assert ok.endswith(b"\r\n\r\nkafka_x 1.0\n")
            head = await _exchange(port, b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")
            assert b"Content-Length: 12\r\n" in head
            missing = await _exchange(port, b"GET / HTTP/1.1\r\n\r\n")
            assert missing.startswith(b"HTTP/1.1 404 ")
            post = await _exchange(port, b"POST /metrics HTTP/1.1\r\n\r\n")
            assert post.startswith(b"HTTP/1.1 405 ") and b"Allow: GET, HEAD" in post
            garbage = await _exchange(port, b"\x00\x00\x00\x10kafka\r\n\r\n")
            assert garbage.startswith(b"HTTP/1.1 400 ")
            # A head larger than the bound is not read: the connection just closes.
            assert (
                await _exchange(port, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES)
                == b""
            )
            assert len(renders) == 2  # only the two good requests rendered anything
        finally:
            await server.close()

    asyncio.run(run())


def test_a_failing_render_is_a_500_and_the_endpoint_goes_on() -> None:
    calls = []

    def render() -> bytes:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a collector bug")
        return b"kafka_x 2.0\n"

    async def run() -> None:
        server = MetricsServer(render)
        _, port = await server.start("127.0.0.1", 0)
        try:
            failed = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert failed.startswith(b"HTTP/1.1 500 ")
            ok = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert ok.startswith(b"HTTP/1.1 200 ") and ok.endswith(b"kafka_x 2.0\n")
        finally:
            await server.close()

    asyncio.run(run())


def test_connections_beyond_the_limit_are_closed_at_once_and_close_ends_idle_ones() -> None:
    async def run() -> None:
        server = MetricsServer(lambda: b"")
        _, port = await server.start("127.0.0.1", 0)
        try:
            idle = [
                await asyncio.open_connection("127.0.0.1", port) for _ in range(MAX_CONNECTIONS)
            ]
            await asyncio.sleep(0)  # let the server accept them
            for _ in range(50):  # bounded: until all are being handled
                if len(server._handlers) == MAX_CONNECTIONS:
                    break
                await asyncio.sleep(0.01)
            assert len(server._handlers) == MAX_CONNECTIONS
            refused = await _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
            assert refused == b""
            for _, writer in idle:
                writer.close()
        finally:
            await server.close()
        assert not server._handlers

    asyncio.run(run())


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_real_server_serves_kafka_named_metrics_that_follow_its_clients(tmp_path: Path) -> None:
    port = free_port()
    procs, bootstrap = single_node(
        tmp_path, {"metrics.listener": f"http://127.0.0.1:{port}", "log.dirs": str(tmp_path / "d")}
    )
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        for i in range(30):
            producer.produce("seen", f"r{i}".encode())
        assert producer.flush(30) == 0
        consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
        )
        consumer.assign([TopicPartition("seen", 0, 0)])
        read: list[object] = []

        def consumed() -> bool:
            read.extend(m for m in consumer.consume(30, 0.2) if m.error() is None)
            return len(read) >= 30

        wait_until(consumed, "the consumer reads the 30 records")
        consumer.close()
        samples = scrape(port)
        topic = (("topic", "seen"),)
        assert samples[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == 30
        assert samples[("kafka_server_brokertopicmetrics_bytesout_total", topic)] > 0
        assert samples[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
        assert samples[("kafka_server_kafkaserver_brokerstate", ())] == 3  # RUNNING
        assert samples[("kafka_server_replicamanager_leadercount", ())] == 1
        assert (
            samples[("kafka_log_log_logendoffset", (("partition", "0"), ("topic", "seen")))] == 30
        )
        assert samples[("process_open_fds", ())] > 0  # the real process's own collector
        fetches = sum(
            value
            for (name, labels), value in samples.items()
            if name == "kafka_network_requestmetrics_requests_total"
            and ("request", "FetchConsumer") in labels
        )
        assert fetches >= 1
    finally:
        procs.cleanup()
    assert "Serving metrics on http://127.0.0.1:" in procs.log(1)


def test_a_taken_metrics_port_stops_start_up_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        path, _ = format_node(tmp_path, metrics_listener=f"http://127.0.0.1:{port}")
        started = subprocess.run(
            [KRAFT_SERVER, "start", str(path)], capture_output=True, text=True, timeout=60
        )
    assert started.returncode == 1
    last = started.stderr.strip().splitlines()[-1]
    assert last.startswith(f"kraft-server start: [Errno 98] metrics.listener 127.0.0.1:{port}: ")
    assert "Traceback" not in started.stderr


def test_a_server_without_the_key_serves_no_metrics(tmp_path: Path) -> None:
    procs, _ = single_node(tmp_path, {"log.dirs": str(tmp_path / "d")})
    procs.cleanup()
    assert "Serving metrics" not in procs.log(1)
