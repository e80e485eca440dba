"""Group consumers of real clients against one node: librdkafka (confluent-kafka, kcat) and
kafka-python subscribe, consume, commit, close and resume from the committed offset with no
re-delivery; two members split a topic and rebalance when one leaves or dies; a static member
rejoins without a rebalance; committed offsets survive a SIGKILL of the node.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

from tests.kraft.procs import Processes, port_open, single_node, wait_until

KCAT = shutil.which("kcat") or "kcat"  # scripts/test.sh installs it
DEADLINE_S = 30.0
# Small timeouts keep the suite quick: members die in 2 s instead of 45 s.
GROUP_PROPS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "5",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
}
SESSION_MS = 2000
MAX_POLL_MS = 10_000


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Processes, str]]:
    procs, bootstrap = single_node(tmp_path_factory.mktemp("data"), GROUP_PROPS)
    try:
        yield procs, bootstrap
    finally:
        procs.cleanup()


def create_topic(bootstrap: str, name: str, partitions: int, records: int) -> None:
    """A topic with ``records`` values "0".."records-1", spread round-robin by key."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(DEADLINE_S)
    produce(bootstrap, name, partitions, range(records))


def produce(bootstrap: str, topic: str, partitions: int, values: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in values:
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(DEADLINE_S) == 0


def consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 200,
            # Also the rebalance timeout: a member that stops polling holds a rebalance
            # up for this long.
            "max.poll.interval.ms": MAX_POLL_MS,
            **extra,
        }
    )


def poll_values(c: Consumer, count: int) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        message = c.poll(0.2)
        if message is None:
            continue
        assert message.error() is None, message.error()
        got.append(int(message.value()))
    return got


def poll_until_split(consumers: list[Consumer], partitions: int) -> list[set[int]]:
    """Poll every consumer until each holds some of the partitions and together they hold
    each exactly once; their assignments (which member gets more is the assignor's call)."""

    def split() -> list[set[int]] | None:
        for c in consumers:
            c.poll(0.1)
        now = [{tp.partition for tp in c.assignment()} for c in consumers]
        together = sorted(p for a in now for p in a)
        return now if all(now) and together == list(range(partitions)) else None

    return wait_until(split, f"{len(consumers)} members split {partitions} partitions")


def test_librdkafka_resumes_from_its_committed_offset_without_redelivery(
    node: tuple[Processes, str],
) -> None:
    _, bootstrap = node
    create_topic(bootstrap, "rd-resume", 1, 20)
    first = consumer(bootstrap, "rd-group")
    first.subscribe(["rd-resume"])
    assert poll_values(first, 12) == list(range(12))
    committed = first.commit(asynchronous=False)
    assert [(tp.partition, tp.offset, tp.error) for tp in committed] == [(0, 12, None)]
    first.close()
    second = consumer(bootstrap, "rd-group")
    second.subscribe(["rd-resume"])
    assert poll_values(second, 8) == list(range(12, 20))
    assert second.poll(0.5) is None  # nothing re-delivered, nothing more
    assert [tp.offset for tp in second.committed([TopicPartition("rd-resume", 0)])] == [12]
    second.close()


def test_kafka_python_resumes_from_its_committed_offset_without_redelivery(
    node: tuple[Processes, str],
) -> None:
    _, bootstrap = node
    create_topic(bootstrap, "kp-resume", 1, 20)

    def read(count: int) -> list[int]:
        c = KafkaConsumer(
            "kp-resume",
            bootstrap_servers=bootstrap,
            group_id="kp-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=3000,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        got = []
        for message in c:
            got.append(int(message.value))
            if len(got) == count:
                break
        c.commit()
        c.close()
        return got

    assert read(5) == list(range(5))
    assert read(100) == list(range(5, 20))  # the rest, then the iterator times out


def test_aiokafka_resumes_from_its_committed_offset_without_redelivery(
    node: tuple[Processes, str],
) -> None:
    _, bootstrap = node
    create_topic(bootstrap, "aio-resume", 2, 20)

    async def read(count: int) -> list[int]:
        c = AIOKafkaConsumer(
            "aio-resume",
            bootstrap_servers=bootstrap,
            group_id="aio-group",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )
        await c.start()
        got: list[int] = []
        try:
            while len(got) < count:  # bounded by the wait_for around it
                batches = await c.getmany(timeout_ms=500, max_records=count - len(got))
                got += [int(m.value) for messages in batches.values() for m in messages]
            await c.commit()
        finally:
            await c.stop()
        return got

    first = asyncio.run(asyncio.wait_for(read(8), DEADLINE_S))
    rest = asyncio.run(asyncio.wait_for(read(12), DEADLINE_S))
    # Any re-delivery of the first 8 would show up twice here.
    assert sorted(first + rest) == list(range(20))


def test_two_members_split_a_topic_and_one_takes_over_when_the_other_leaves(
    node: tuple[Processes, str],
) -> None:
    _, bootstrap = node
    create_topic(bootstrap, "split", 3, 0)
    a, b = consumer(bootstrap, "split-group"), consumer(bootstrap, "split-group")
    a.subscribe(["split"])
    poll_until_split([a], 3)
    b.subscribe(["split"])
    assert sorted(len(x) for x in poll_until_split([a, b], 3)) == [1, 2]
    b.close()  # LeaveGroup
    poll_until_split([a], 3)
    a.close()


def test_a_member_that_dies_is_replaced_after_its_session_timeout(
    node: tuple[Processes, str],
) -> None:
    _, bootstrap = node
    create_topic(bootstrap, "dies", 3, 0)
    survivor = consumer(bootstrap, "dies-group")
    survivor.subscribe(["dies"])
    poll_until_split([survivor], 3)
    script = textwrap.dedent(
        f"""
        from confluent_kafka import Consumer
        c = Consumer({{"bootstrap.servers": "{bootstrap}", "group.id": "dies-group",
                       "session.timeout.ms": {SESSION_MS}, "heartbeat.interval.ms": 200,
                       "max.poll.interval.ms": {MAX_POLL_MS}}})
        c.subscribe(["dies"])
        while True:
            c.poll(0.1)
        """
    )
    doomed = subprocess.Popen([sys.executable, "-c", script])
    try:
        wait_until(
            lambda: survivor.poll(0.1) or 0 < len(survivor.assignment()) < 3,
            "the second member takes some partitions",
        )
        doomed.kill()  # no LeaveGroup: only the session timeout tells the coordinator
        doomed.wait()
        poll_until_split([survivor], 3)
    finally:
        doomed.kill()
        doomed.wait()
        survivor.close()


def test_a_static_member_rejoins_without_a_rebalance(node: tuple[Processes, str]) -> None:
    procs, bootstrap = node
    create_topic(bootstrap, "static", 2, 0)
    rebalances: list[str] = []
    steady = consumer(bootstrap, "static-group", **{"group.instance.id": "steady"})
    steady.subscribe(["static"], on_assign=lambda c, ps: rebalances.append("assign"))
    poll_until_split([steady], 2)
    bouncing = consumer(bootstrap, "static-group", **{"group.instance.id": "bouncing"})
    bouncing.subscribe(["static"])
    poll_until_split([steady, bouncing], 2)
    count = len(rebalances)
    transitions = procs.log(1).count("Group static-group:")
    bouncing.close()  # a static member sends no LeaveGroup
    back = consumer(bootstrap, "static-group", **{"group.instance.id": "bouncing"})
    back.subscribe(["static"])
    poll_until_split([steady, back], 2)
    for _ in range(10):  # the steady member keeps polling: it sees no new assignment
        steady.poll(0.1)
    assert len(rebalances) == count
    # The coordinator logs every state or generation change: there was none.
    assert procs.log(1).count("Group static-group:") == transitions
    back.close()
    steady.close()


def test_kcat_balanced_consumer_commits_and_resumes(node: tuple[Processes, str]) -> None:
    _, bootstrap = node
    create_topic(bootstrap, "kcat-group", 2, 10)

    def kcat(count: int) -> list[int]:
        out = subprocess.run(
            # (-o would override the committed offsets: kcat assigns it to every partition.)
            [KCAT, "-b", bootstrap, "-G", "kcat-g", "-X", "auto.offset.reset=earliest",
             "-c", str(count), "-q", "-X", "session.timeout.ms=6000", "-f", "%s\\n",
             "kcat-group"],
            capture_output=True, text=True, timeout=DEADLINE_S, check=True,
        )  # fmt: skip
        return sorted(int(line) for line in out.stdout.split())

    assert kcat(10) == list(range(10))
    produce(bootstrap, "kcat-group", 2, range(10, 14))
    assert kcat(4) == [10, 11, 12, 13]


def test_committed_offsets_survive_a_sigkill_of_the_node(node: tuple[Processes, str]) -> None:
    procs, bootstrap = node
    create_topic(bootstrap, "durable", 1, 5)
    c = consumer(bootstrap, "durable-group")
    c.subscribe(["durable"])
    assert poll_values(c, 5) == list(range(5))
    c.commit(asynchronous=False)
    c.close()
    procs.kill(1)
    procs.start(1)
    host, port = bootstrap.split(":")
    wait_until(lambda: port_open(host, int(port)), "the broker listener reopens")
    again = consumer(bootstrap, "durable-group")

    def committed() -> int | None:
        found = again.committed([TopicPartition("durable", 0)], timeout=5)
        return found[0].offset if found[0].error is None and found[0].offset >= 0 else None

    assert wait_until(committed, "the committed offset is readable again") == 5
    again.close()
