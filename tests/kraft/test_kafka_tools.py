"""Kafka's own Java CLI tools, installed by scripts/kafka-tools.sh, against a single node."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("data"))
    try:
        yield bootstrap
    finally:
        procs.cleanup()


@pytest.mark.usefixtures("kafka_tools")
def test_java_topic_command_creates_and_lists_and_describes_a_topic(single: str) -> None:
    tools.run(
        "topics", "--bootstrap-server", single, "--create", "--topic", "java-made",
        "--partitions", "2", "--replication-factor", "1",
    )  # fmt: skip
    listed = tools.run("topics", "--bootstrap-server", single, "--list")
    assert "java-made" in listed.stdout.split()
    described = tools.run(
        "topics", "--bootstrap-server", single, "--describe", "--topic", "java-made"
    )
    assert "PartitionCount: 2" in described.stdout
