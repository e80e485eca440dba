"""A real Prometheus server (Debian's ``prometheus`` package; scripts/test.sh installs it)
scrapes a real 3+3 cluster of kraft-server processes on 127.0.0.x, and PromQL over its HTTP
API sees what the cluster did: the records produced (bytes and messages in), exactly one
active controller, and under-replicated partitions once a broker is stopped.

Everything waits on conditions with a bounded deadline: Prometheus scrapes every second,
so each answer arrives within a few scrapes."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.kraft.procs import Processes, free_port, port_open, wait_until
from tests.kraft.test_replication import BROKERS, DEADLINE_S, bootstrap, cluster_nodes

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
TOPIC = "scraped"
RECORDS = 200


def metrics_targets(nodes: dict[int, dict[str, str]]) -> list[str]:
    return [props["metrics.listener"].removeprefix("http://") for props in nodes.values()]


@pytest.fixture(scope="module")
def scraped_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Processes, dict, str]]:
    """The 3+3 cluster, and a Prometheus scraping every node's /metrics each second; (the
    processes, the Kafka ports, Prometheus's base URL)."""
    root = tmp_path_factory.mktemp("prometheus")
    nodes, ports = cluster_nodes(root)
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {"job_name": "kraft", "static_configs": [{"targets": metrics_targets(nodes)}]}
        ],
    }
    (root / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    web = f"127.0.0.1:{free_port()}"
    procs = Processes(root, nodes)
    prometheus = None
    try:
        for node in nodes:
            procs.start(node)
        with open(root / "prometheus.log", "w") as log:
            prometheus = subprocess.Popen(
                [
                    PROMETHEUS,
                    f"--config.file={root / 'prometheus.yml'}",
                    f"--storage.tsdb.path={root / 'tsdb'}",
                    f"--web.listen-address={web}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        for node in BROKERS:
            wait_until(lambda n=node: port_open(*ports[n]), f"broker {node} serves", DEADLINE_S)
        yield procs, ports, f"http://{web}"
    finally:
        if prometheus is not None:
            prometheus.kill()
            prometheus.wait()
        procs.cleanup()


def dashboard_queries() -> list[str]:
    """Every PromQL expression of docs/grafana-dashboard.json, its variables as match-all."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    expressions = [t["expr"] for p in panels for t in p.get("targets", ())]
    return [re.sub(r"\$(instance|topic|partition)", ".*", e) for e in expressions]


def query(base: str, promql: str) -> list[tuple[dict[str, str], float]]:
    """An instant PromQL query: (labels, value) of each series; [] while Prometheus is not
    up yet."""
    url = f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
    except OSError:
        return []
    assert body["status"] == "success", body
    return [(item["metric"], float(item["value"][1])) for item in body["data"]["result"]]


def scalar(base: str, promql: str) -> float | None:
    found = query(base, promql)
    return found[0][1] if found else None


def test_prometheus_scrapes_bytes_in_the_active_controller_and_under_replication(
    scraped_cluster: tuple[Processes, dict, str],
) -> None:
    procs, ports, base = scraped_cluster
    wait_until(
        lambda: scalar(base, 'count(up{job="kraft"} == 1)') == 6,
        "Prometheus scrapes all six nodes",
        DEADLINE_S,
    )
    assert wait_until(
        lambda: scalar(base, "sum(kafka_controller_kafkacontroller_activecontrollercount)") == 1,
        "one active controller",
        DEADLINE_S,
    )
    servers = bootstrap(ports)
    admin = AdminClient({"bootstrap.servers": servers})
    admin.create_topics([NewTopic(TOPIC, 3, 3)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": servers, "acks": "all", "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(TOPIC, f"record-{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0

    messages = f'sum(kafka_server_brokertopicmetrics_messagesin_total{{topic="{TOPIC}"}})'
    wait_until(lambda: scalar(base, messages) == RECORDS, "messages in", DEADLINE_S)
    bytes_in = f'sum(kafka_server_brokertopicmetrics_bytesin_total{{topic="{TOPIC}"}})'
    assert (scalar(base, bytes_in) or 0) > RECORDS * len(b"record-0")
    assert scalar(base, "sum(kafka_server_replicamanager_underreplicatedpartitions)") == 0
    leaders = scalar(base, "sum(kafka_server_replicamanager_leadercount)")
    assert leaders is not None and leaders >= 3  # the topic's three, maybe __consumer_offsets

    # The dashboard's queries are valid PromQL over metrics that exist.
    for expression in dashboard_queries():
        query(base, expression)  # asserts Prometheus accepted it
        for name in re.findall(r"\b(?:kafka|process)_[a-z_]+", expression):
            assert scalar(base, f"count({name})"), f"{name} (in {expression}) has no series"

    stopped = BROKERS[-1]
    procs.signal(stopped, signal.SIGTERM)  # controlled shutdown: it leaves every ISR
    procs.procs[stopped].wait(timeout=DEADLINE_S)
    # Each of the topic's partitions had a replica on the stopped broker: all three leaders
    # (on the two brokers left) report their partition under-replicated.
    wait_until(
        lambda: scalar(base, "sum(kafka_server_replicamanager_underreplicatedpartitions)") == 3,
        "under-replicated partitions after a broker stopped",
        DEADLINE_S,
    )
    assert scalar(base, "sum(kafka_controller_kafkacontroller_activecontrollercount)") == 1
    wait_until(
        lambda: scalar(base, 'count(up{job="kraft"} == 0)') == 1,
        "Prometheus sees the stopped broker down",
        DEADLINE_S,
    )
