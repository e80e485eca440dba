"""The KIP-848 consumer group protocol against one real node: the Java client through Kafka's
own CLI tools with ``group.protocol=consumer``, and librdkafka (confluent-kafka 2.16,
librdkafka 2.16, whose KIP-848 consumer is generally available) with the same setting."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from tests import kafka_tools as tools
from tests.kafka_tools import kafka_tools  # noqa: F401  (pytest fixture: installs once)
from tests.kraft.procs import single_node, wait_until
from tests.kraft.test_group_clients import GROUP_PROPS, create_topic, produce

pytestmark = pytest.mark.usefixtures("kafka_tools")
CONSUMER_PROTOCOL = ("--consumer-property", "group.protocol=consumer")
# The consumer protocol's session timeout is the broker's (KIP-848), not the client's.
PROPS = {**GROUP_PROPS, "group.consumer.session.timeout.ms": "6000"}


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    procs, address = single_node(tmp_path_factory.mktemp("data"), PROPS)
    try:
        yield address
    finally:
        procs.cleanup()


def groups_tool(bootstrap: str, *args: str) -> str:
    return tools.run("consumer-groups", "--bootstrap-server", bootstrap, *args).stdout


def rows(out: str, group: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines() if line.startswith(group + " ")]


def test_java_console_consumer_joins_commits_and_resumes_without_redelivery(
    bootstrap: str,
) -> None:
    create_topic(bootstrap, "kip848-java", 3, 9)

    def consume(count: int, timeout_ms: int) -> list[int]:
        out = tools.run(
            "console-consumer", "--bootstrap-server", bootstrap, "--topic", "kip848-java",
            "--group", "java848", "--from-beginning", "--max-messages", str(count),
            "--timeout-ms", str(timeout_ms), *CONSUMER_PROTOCOL,
        )  # fmt: skip
        return sorted(int(line) for line in out.stdout.split())

    assert consume(9, 30_000) == list(range(9))
    described = rows(groups_tool(bootstrap, "--describe", "--group", "java848"), "java848")
    assert {int(r[2]): int(r[3]) for r in described} == {0: 3, 1: 3, 2: 3}
    listed = groups_tool(bootstrap, "--list", "--type")
    assert ["java848", "Consumer"] in [line.split() for line in listed.splitlines()]
    produce(bootstrap, "kip848-java", 3, range(9, 12))
    assert consume(3, 30_000) == [9, 10, 11]  # only the records after the commit


def test_two_java_consumers_split_a_topic_and_rebalance_when_one_leaves(bootstrap: str) -> None:
    create_topic(bootstrap, "kip848-split", 3, 0)
    command = [
        "bash", str(tools.SCRIPT), "console-consumer", "--bootstrap-server", bootstrap,
        "--topic", "kip848-split", "--group", "split848", *CONSUMER_PROTOCOL,
    ]  # fmt: skip
    members = [
        subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]
    try:

        def assignment() -> list[int]:
            out = groups_tool(bootstrap, "--describe", "--group", "split848", "--members")
            # GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS
            return sorted(int(r[4]) for r in rows(out, "split848"))

        wait_until(lambda: assignment() == [1, 2], "two members splitting three partitions")
        state = rows(groups_tool(bootstrap, "--describe", "--group", "split848", "--state"),
                     "split848")  # fmt: skip
        # GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE GROUP-EPOCH TARGET-EPOCH #MEMBERS
        assert state[0][3:5] == ["uniform", "Stable"] and state[0][-1] == "2"
        members[1].send_signal(signal.SIGTERM)  # closes the consumer: it leaves (epoch -1)
        members[1].wait(60)
        wait_until(lambda: assignment() == [3], "the remaining member holding all three")
    finally:
        for member in members:
            if member.poll() is None:
                member.send_signal(signal.SIGTERM)
                member.wait(60)


def test_librdkafka_consumer_protocol_commits_and_resumes_without_redelivery(
    bootstrap: str,
) -> None:
    create_topic(bootstrap, "kip848-rd", 3, 9)

    def consume(count: int) -> list[int]:
        member = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "rd848",
                "group.protocol": "consumer",
                "group.remote.assignor": "range",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        member.subscribe(["kip848-rd"])
        got: list[int] = []
        try:

            def poll() -> bool:
                message = member.poll(0.2)
                if message is not None and message.error() is None:
                    got.append(int(message.value()))
                return len(got) >= count

            wait_until(poll, f"{count} records")
            member.commit(asynchronous=False)
        finally:
            member.close()
        return sorted(got)

    assert consume(9) == list(range(9))
    state = rows(groups_tool(bootstrap, "--describe", "--group", "rd848", "--state"), "rd848")
    assert state[0][4] == "Empty"  # the member left on close
    produce(bootstrap, "kip848-rd", 3, range(9, 12))
    assert consume(3) == [9, 10, 11]
