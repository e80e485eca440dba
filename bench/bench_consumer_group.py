"""KIP-848 against the classic protocol on a real node, and the consumer group core's costs.

Run: ``.venv/bin/python bench/bench_consumer_group.py [--members M] [--rounds R]``.

1. rebalance: ``--members`` librdkafka consumers subscribe to one group of a topic with as
   many partitions; the time until every one holds a partition, first with the classic
   protocol (the baseline: JoinGroup/SyncGroup, client-side assignor), then with
   ``group.protocol=consumer`` (heartbeats, server-side uniform assignor), in the same run;
2. core (no I/O): steady heartbeats per second through ``ConsumerGroup.heartbeat`` + apply
   for a 100-member group, and one ``uniform`` assignment of 1000 partitions to 100 members
   that all held nothing before and to 100 members after one left (sticky).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench_groups import PROPS as GROUP_PROPS
from bench_groups import rebalance

from broker.group.assignors import MemberSpec, uniform
from broker.group.consumer_group import ConsumerGroup, ConsumerGroupLimits, Heartbeat
from tests.kraft.procs import single_node

PROPS = {
    **GROUP_PROPS,
    # The classic members heartbeat every 200 ms (client setting); KIP-848 members at the
    # broker's interval: the same 200 ms, so the protocols, not the intervals, are compared.
    "group.consumer.heartbeat.interval.ms": "200",
}
CONSUMER_MEMBER: dict[str, object] = {"group.protocol": "consumer"}


def heartbeats_per_s(members: int, rounds: int) -> float:
    topic = uuid.UUID(int=1)
    topics = {"t": (topic, 1000)}
    group = ConsumerGroup("g", ConsumerGroupLimits())
    epochs: dict[str, int] = {}
    for i in range(members):
        join = Heartbeat(
            f"m{i}", 0, "c", "h", rebalance_timeout_ms=1, subscribed_topic_names=("t",)
        )
        result = group.heartbeat(join, topics)
        group.apply(result, 0.0)
    for _ in range(3):  # settle: revocations acknowledged, everyone at the target epoch
        for i in range(members):
            member = group.members[f"m{i}"]
            owned = member.assigned
            result = group.heartbeat(Heartbeat(member.member_id, member.member_epoch, "c", "h",
                                               owned=owned), topics)  # fmt: skip
            group.apply(result, 0.0)
            epochs[member.member_id] = result.member_epoch
    start = time.perf_counter()
    for _ in range(rounds):
        for member_id, epoch in epochs.items():
            result = group.heartbeat(Heartbeat(member_id, epoch, "c", "h"), topics)
            group.apply(result, 1.0)
    return rounds * members / (time.perf_counter() - start)


def assignment_ms() -> tuple[float, float]:
    topic = uuid.UUID(int=1)
    members = {f"m{i:03}": MemberSpec(frozenset({topic}), frozenset()) for i in range(100)}
    start = time.perf_counter()
    first = uniform(members, {topic: 1000})
    fresh = time.perf_counter() - start
    after = {m: MemberSpec(frozenset({topic}), first[m]) for m in sorted(members)[1:]}
    start = time.perf_counter()
    second = uniform(after, {topic: 1000})
    sticky = time.perf_counter() - start
    moved = sum(len(second[m] - first[m]) for m in after)
    assert moved == len(first["m000"]), moved  # only the leaver's partitions move
    return fresh * 1000, sticky * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-kip848-") as tmp:
        procs, bootstrap = single_node(Path(tmp), PROPS)
        try:
            rebalance(bootstrap, 1, "warm-up")  # creates __consumer_offsets
            classic_s = rebalance(bootstrap, args.members, "spread-classic")
            consumer_s = rebalance(bootstrap, args.members, "spread-consumer", CONSUMER_MEMBER)
        finally:
            procs.stop_all()
    rate = heartbeats_per_s(100, args.rounds)
    fresh_ms, sticky_ms = assignment_ms()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; {args.members} members")
    print(f"{'baseline: classic protocol, all assigned in':46} {classic_s * 1000:7.0f} ms")
    print(f"{'consumer protocol (KIP-848), all assigned in':46} {consumer_s * 1000:7.0f} ms")
    print(f"consumer / classic: {consumer_s / classic_s:.2f}x")
    print(f"{'steady heartbeats, 100-member group, no I/O':46} {rate:7.0f} /s")
    print(f"{'uniform: 1000 partitions to 100 new members':46} {fresh_ms:7.1f} ms")
    print(f"{'uniform: the same after one member left':46} {sticky_ms:7.1f} ms")


if __name__ == "__main__":
    main()
