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
from tests.kraft.procs import Processes, port_open, single_node, wait_until
from tests.kraft.test_group_clients import GROUP_PROPS, create_topic, produce

pytestmark = pytest.mark.usefixtures("kafka_tools")
CONSUMER_PROTOCOL = ("--consumer-property", "group.protocol=consumer")
# The consumer protocol's session timeout is the broker's (KIP-848), not the client's: long
# enough for a static member's new JVM to start on a loaded machine before its partitions
# are given away, short enough for a SIGKILLed member to be fenced within a wait.
PROPS = {**GROUP_PROPS, "group.consumer.session.timeout.ms": "15000"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, str]]:
    procs, address = single_node(tmp_path_factory.mktemp("data"), PROPS)
    try:
        yield procs, address
    finally:
        procs.cleanup()


@pytest.fixture(scope="module")
def bootstrap(node: tuple[Processes, str]) -> str:
    return node[1]


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


def java_member(bootstrap: str, topic: str, group: str, *extra: str) -> subprocess.Popen[bytes]:
    """A console consumer left running as a group member (stopped by a signal)."""
    command = [
        "bash", str(tools.SCRIPT), "console-consumer", "--bootstrap-server", bootstrap,
        "--topic", topic, "--group", group, *CONSUMER_PROTOCOL, *extra,
    ]  # fmt: skip
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(member: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGTERM) -> None:
    """SIGTERM closes the consumer (it leaves the group); SIGKILL leaves it to time out.
    The launcher execs java, so the signal reaches the JVM itself."""
    if member.poll() is None:
        member.send_signal(sig)
        member.wait(60)


def assignment(bootstrap: str, group: str) -> list[int]:
    """Partitions per member, sorted (kafka-consumer-groups --describe --members)."""
    out = groups_tool(bootstrap, "--describe", "--group", group, "--members")
    # GROUP CONSUMER-ID [GROUP-INSTANCE-ID] HOST CLIENT-ID #PARTITIONS (the instance id
    # column is there when a member is static, blank for the others)
    return sorted(int(r[-1]) for r in rows(out, group))


def group_state(bootstrap: str, group: str) -> list[str]:
    """GROUP COORDINATOR (ID) ASSIGNMENT-STRATEGY STATE GROUP-EPOCH TARGET-EPOCH #MEMBERS
    (the epochs are shown with --verbose only)."""
    out = groups_tool(bootstrap, "--describe", "--group", group, "--state", "--verbose")
    return rows(out, group)[0]


def test_java_consumers_split_a_topic_and_rebalance_on_leave_death_and_new_partitions(
    bootstrap: str,
) -> None:
    create_topic(bootstrap, "kip848-split", 3, 0)
    members = [java_member(bootstrap, "kip848-split", "split848") for _ in range(3)]
    try:
        wait_until(lambda: assignment(bootstrap, "split848") == [1, 1, 1], "three members")
        state = group_state(bootstrap, "split848")
        assert state[3:5] == ["uniform", "Stable"] and state[-1] == "3"
        stop(members[2])  # leaves (member epoch -1): the others take its partition at once
        wait_until(lambda: assignment(bootstrap, "split848") == [1, 2], "two members")
        stop(members[1], signal.SIGKILL)  # silent: fenced after the session timeout (15 s)
        wait_until(lambda: assignment(bootstrap, "split848") == [3], "the survivor holds all")
        tools.run(
            "topics", "--bootstrap-server", bootstrap, "--alter", "--topic", "kip848-split",
            "--partitions", "5",
        )  # fmt: skip
        wait_until(lambda: assignment(bootstrap, "split848") == [5], "the new partitions")
    finally:
        for member in members:
            stop(member)


def test_a_static_java_member_comes_back_to_its_partitions_without_a_rebalance(
    bootstrap: str,
) -> None:
    create_topic(bootstrap, "kip848-static", 3, 0)
    static = ("--consumer-property", "group.instance.id=static-1")
    first = java_member(bootstrap, "kip848-static", "static848", *static)
    other = java_member(bootstrap, "kip848-static", "static848")
    again = None
    try:
        wait_until(lambda: assignment(bootstrap, "static848") == [1, 2], "two members")
        epoch = group_state(bootstrap, "static848")[5]
        stop(first)  # a static member's close leaves with epoch -2: its partitions wait
        again = java_member(bootstrap, "kip848-static", "static848", *static)
        wait_until(
            lambda: (
                group_state(bootstrap, "static848")[4] == "Stable"
                and assignment(bootstrap, "static848") == [1, 2]
            ),
            "the static member back",
        )
        assert group_state(bootstrap, "static848")[5] == epoch  # no rebalance
    finally:
        for member in (first, other, again):
            if member is not None:
                stop(member)


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


def test_two_librdkafka_members_split_by_range_and_rebalance_when_one_leaves(
    bootstrap: str,
) -> None:
    create_topic(bootstrap, "kip848-range", 3, 0)
    members = [
        Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "range848",
                "group.protocol": "consumer",
                "group.remote.assignor": "range",
            }
        )
        for _ in range(2)
    ]
    try:
        for member in members:
            member.subscribe(["kip848-range"])

        def held(among: list[Consumer]) -> list[list[int]]:
            for member in among:
                member.poll(0.05)
            return sorted(sorted(tp.partition for tp in m.assignment()) for m in among)

        # range: contiguous ranges over the members sorted by id, the first one larger
        wait_until(lambda: held(members) == [[0, 1], [2]], "a range split")
        state = group_state(bootstrap, "range848")
        assert state[3:5] == ["range", "Stable"]
        members.pop().close()  # leaves (epoch -1)
        wait_until(lambda: held(members) == [[0, 1, 2]], "the survivor holding all three")
    finally:
        for member in members:
            member.close()


def test_a_live_member_keeps_its_epoch_and_partitions_across_a_node_restart(
    node: tuple[Processes, str],
) -> None:
    """The group comes back from its records: the member's next heartbeat, at the epoch
    it had, is accepted, and it goes on consuming without rejoining."""
    procs, bootstrap = node
    create_topic(bootstrap, "kip848-restart", 3, 3)
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": "restart848",
        "group.protocol": "consumer",
        "auto.offset.reset": "earliest",
    }
    member = Consumer(config)
    member.subscribe(["kip848-restart"])
    got: list[int] = []

    def consumed(count: int) -> bool:
        message = member.poll(0.1)
        if message is not None and message.error() is None:
            got.append(int(message.value()))
        return len(got) >= count

    def passing_joined() -> bool:
        # The first member must poll too: librdkafka revokes (and so frees partitions for
        # the newcomer) only in poll, as the consumer protocol's revoke-first rule needs.
        consumed(0)
        return passing.poll(0.1) is not None or bool(passing.assignment())

    try:
        # A second member that comes and goes takes the group epoch to 3, so a group that
        # came back empty (epoch 1) would show.
        passing = Consumer({**config, "enable.auto.commit": False})  # it must not move offsets
        try:
            passing.subscribe(["kip848-restart"])
            wait_until(passing_joined, "the passing member joined")
        finally:
            # Closed even when the wait fails: a leaked client retries a dead node every
            # 50 ms for the rest of the session and starves later tests of the GIL.
            passing.close()
        wait_until(lambda: consumed(3), "the first records")
        before = group_state(bootstrap, "restart848")
        procs.kill(1)
        procs.start(1)
        host, port = bootstrap.split(":")
        wait_until(lambda: port_open(host, int(port)), "the broker listener reopens")
        produce(bootstrap, "kip848-restart", 3, range(3, 6))
        wait_until(lambda: consumed(6), "the records after the restart")
        assert set(got) == set(range(6))
        after = group_state(bootstrap, "restart848")
        # The group epoch did not start again: the group was loaded from its records.
        assert after[4] == "Stable" and int(after[5]) >= int(before[5]) >= 3
    finally:
        member.close()
