"""Kafka's own Java group tools against one node: kafka-console-consumer --group,
kafka-consumer-groups --describe/--reset-offsets/--delete, ConsumerPerformance, and Kafka's
OffsetsMessageFormatter reading ``__consumer_offsets`` (our records are Kafka's format)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node, wait_until
from tests.kraft.test_group_clients import GROUP_PROPS, consumer, create_topic

pytestmark = pytest.mark.usefixtures("kafka_tools")


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs, address = single_node(tmp_path_factory.mktemp("data"), GROUP_PROPS)
    try:
        yield address
    finally:
        procs.cleanup()


def console_consume(
    bootstrap: str, topic: str, group: str, count: int, timeout_ms: int = 20_000
) -> list[int]:
    out = tools.run(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", topic,
        "--group", group, "--from-beginning", "--max-messages", str(count),
        "--timeout-ms", str(timeout_ms),
    )  # fmt: skip
    return sorted(int(line) for line in out.stdout.split())


def groups_tool(bootstrap: str, *args: str) -> str:
    return tools.run("consumer-groups", "--bootstrap-server", bootstrap, *args).stdout


def described_offsets(bootstrap: str, group: str) -> dict[int, int]:
    """partition -> CURRENT-OFFSET from kafka-consumer-groups --describe."""
    out = groups_tool(bootstrap, "--describe", "--group", group)
    rows = [line.split() for line in out.splitlines() if line.startswith(group + " ")]
    return {int(row[2]): int(row[3]) for row in rows}


def test_console_consumer_commits_and_the_groups_tool_describes_resets_and_deletes(
    bootstrap: str,
) -> None:
    create_topic(bootstrap, "java-group", 2, 10)
    assert console_consume(bootstrap, "java-group", "jg", 10) == list(range(10))
    assert described_offsets(bootstrap, "jg") == {0: 5, 1: 5}
    assert "jg" in groups_tool(bootstrap, "--list").split()
    # Resumes from the commit: nothing left, the consumer times out empty.
    assert console_consume(bootstrap, "java-group", "jg", 1, timeout_ms=3000) == []
    groups_tool(
        bootstrap, "--reset-offsets", "--group", "jg", "--topic", "java-group",
        "--to-earliest", "--execute",
    )  # fmt: skip
    assert described_offsets(bootstrap, "jg") == {0: 0, 1: 0}
    assert console_consume(bootstrap, "java-group", "jg", 10) == list(range(10))
    assert "successful" in groups_tool(bootstrap, "--delete", "--group", "jg")
    assert "jg" not in groups_tool(bootstrap, "--list").split()


def test_the_groups_tool_describes_live_members_with_their_host_and_assignment(
    bootstrap: str,
) -> None:
    create_topic(bootstrap, "java-live", 3, 0)
    member: Consumer = consumer(bootstrap, "live", **{"client.id": "live-client"})
    member.subscribe(["java-live"])
    try:
        wait_until(lambda: member.poll(0.1) or len(member.assignment()) == 3, "assigned")
        out = groups_tool(bootstrap, "--describe", "--group", "live", "--members", "--verbose")
        row = next(line.split() for line in out.splitlines() if "live-client" in line)
        # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT
        assert row[2] == "/127.0.0.1" and row[4] == "3"
        state = groups_tool(bootstrap, "--describe", "--group", "live", "--state")
        assert "Stable" in state and "range" in state
        # A group with members cannot be deleted.
        result = tools.run("consumer-groups", "--bootstrap-server", bootstrap, "--delete",
                           "--group", "live", check=False)  # fmt: skip
        assert "GroupNotEmptyException" in result.stdout + result.stderr
    finally:
        member.close()


def test_consumer_performance_consumes_through_a_group(bootstrap: str) -> None:
    create_topic(bootstrap, "java-perf", 2, 200)
    out = tools.run(
        "consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", "java-perf",
        "--messages", "200", "--group", "perf",
    ).stdout  # fmt: skip
    header, values = out.strip().splitlines()[-2:]
    fields = dict(zip((h.strip() for h in header.split(",")), values.split(","), strict=True))
    assert int(fields["data.consumed.in.nMsg"]) == 200


def test_kafkas_formatter_reads_our_offset_commit_records(bootstrap: str) -> None:
    create_topic(bootstrap, "java-format", 1, 3)
    assert console_consume(bootstrap, "java-format", "formatted", 3) == [0, 1, 2]
    out = tools.run(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", "__consumer_offsets",
        "--formatter", "org.apache.kafka.tools.consumer.OffsetsMessageFormatter",
        "--from-beginning", "--timeout-ms", "5000",
        "--consumer-property", "exclude.internal.topics=false",
    ).stdout  # fmt: skip
    decoder = json.JSONDecoder()
    records, pos = [], 0
    while (pos := out.find("{", pos)) >= 0:  # the formatter prints JSON objects back to back
        record, pos = decoder.raw_decode(out, pos)
        records.append(record)
    ours = [r for r in records if r["key"]["data"]["group"] == "formatted"]
    assert [(r["key"]["data"]["topic"], r["value"]["data"]["offset"]) for r in ours] == [
        ("java-format", 3)
    ]
    described = tools.run(
        "topics", "--bootstrap-server", bootstrap, "--describe", "--topic", "__consumer_offsets"
    ).stdout
    assert "cleanup.policy=compact" in described and "PartitionCount: 5" in described
