"""Offset commits and rebalances of a real single node, against its own produce round trip.

Run: ``.venv/bin/python bench/bench_groups.py [--commits N] [--members M]``.

Starts the README's default layout (one combined broker+controller, offsets topic with
replication factor 1) in a temporary dir, then:
1. commit: one librdkafka consumer of a group commits ``--commits`` offsets synchronously,
   one after another (each an OffsetCommit answered once its __consumer_offsets record is
   appended and under the high watermark); commits/s;
2. baseline: ``--commits`` one-record produces with acks=all, each waited for before the
   next: the same round trip, append and high-watermark wait without the coordinator;
3. rebalance: ``--members`` consumers join one group of a topic with as many partitions,
   one after another; the time until every one of them holds a partition.
The ratio says what the group coordinator costs on top of a partition append.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.kraft.procs import single_node

DEADLINE_S = 60.0
PROPS = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "50",
    "group.initial.rebalance.delay.ms": "0",
}


def commits(bootstrap: str, count: int) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-commits", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("bench", 0, 0)])
    consumer.commit(offsets=[TopicPartition("bench", 0, 0)], asynchronous=False)  # warm up
    start = time.perf_counter()
    for offset in range(1, count + 1):
        consumer.commit(offsets=[TopicPartition("bench", 0, offset)], asynchronous=False)
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def produces(bootstrap: str, count: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    producer.produce("bench", b"warm-up")
    producer.flush(DEADLINE_S)
    start = time.perf_counter()
    for _ in range(count):
        producer.produce("bench", b"x" * 40)
        if producer.flush(DEADLINE_S) != 0:
            raise RuntimeError("a produce was not delivered")
    return time.perf_counter() - start


CLASSIC_MEMBER = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 200}


def rebalance(
    bootstrap: str,
    members: int,
    topic: str = "spread",
    member_config: dict[str, object] = CLASSIC_MEMBER,
) -> float:
    """``members`` consumers subscribe to a new topic of as many partitions, in a group of
    the topic's name: seconds until every one holds a partition."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, members, 1)]).values():
        future.result(DEADLINE_S)
    consumers = [
        Consumer({"bootstrap.servers": bootstrap, "group.id": topic, **member_config})
        for _ in range(members)
    ]
    start = time.perf_counter()
    deadline = start + DEADLINE_S
    for c in consumers:
        c.subscribe([topic])
    while time.perf_counter() < deadline:
        for c in consumers:
            c.poll(0.01)
        if all(c.assignment() for c in consumers):
            break
    elapsed = time.perf_counter() - start
    for c in consumers:
        c.close()
    if elapsed >= DEADLINE_S:
        raise RuntimeError("the members did not all get partitions")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--members", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-groups-") as tmp:
        procs, bootstrap = single_node(Path(tmp), PROPS)
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for future in admin.create_topics([NewTopic("bench", 1, 1)]).values():
                future.result(DEADLINE_S)
            del admin
            commit_s = commits(bootstrap, args.commits)
            produce_s = produces(bootstrap, args.commits)
            rebalance_s = rebalance(bootstrap, args.members)
        finally:
            procs.stop_all()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.commits} of each")
    print(f"{'synchronous offset commits':40} {args.commits / commit_s:8.0f} /s")
    print(f"{'baseline: acks=all one-record produces':40} {args.commits / produce_s:8.0f} /s")
    print(f"commit / baseline: {produce_s / commit_s:.2f}x")
    print(f"{args.members} members joining one group: all assigned in {rebalance_s * 1000:.0f} ms")


if __name__ == "__main__":
    main()
