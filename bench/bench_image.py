"""What one metadata change costs as the cluster grows (issue 22), in CPU milliseconds of this
thread at 1,000, 10,000 and 100,000 topics of one partition each (brokers 1-3 hold every
replica, broker 1 leads every partition, broker 4 holds nothing), each beside its baseline in
the same run:

1. a broker after one committed batch (one ISR change): its replica changes
   (``local_changes``) and its ISR metrics (``BrokerMetricsPublisher.on_image``), visiting the
   topics the batch touched, beside comparing every topic (what both did before: the same
   images with the topics' link to their predecessor cut, which is also the path a loaded
   snapshot takes);
2. the controller answering a heartbeat from a broker that leads nothing (every heartbeat of
   such a broker asks whether it leads anything), beside that question answered by walking
   every partition, as it was; and the same for a broker in no ISR leaving, a broker
   returning while every partition has a leader, and the preferred-leader check of a
   balanced cluster, each of which walked every partition to find nothing to do;
3. a CreateTopics of one new topic, beside rebuilding the topic-name collision map from every
   existing name, which it did first;
4. a full garbage collection with the image alive, beside the same collection after
   ``gc.freeze()``, which ``kraft-server start`` calls once the node has started;
5. the records of one CreateTopics of a 7,000-partition topic encoded (the controller, in
   the turn that proposes them) and decoded (every node that replays them), beside the codec
   as it was: every value walked in Python before msgpack packed it, and every value decoded
   by the checked path, which builds each value's error location in case it is wrong;
6. for the record, what still grows with the cluster: one batch's replay and apply (the
   image's topic map is copied when a partition changes), and one walk of every partition
   in name order (a broker leaving while in some ISR, a broker returning while some
   partition is offline, the preferred-leader check of an imbalanced cluster).

Run: PYTHONPATH=. .venv/bin/python bench/bench_image.py   (about a minute)
"""

from __future__ import annotations

import dataclasses
import gc
import time
import uuid
from collections.abc import Callable

import msgpack

from broker.metrics import BrokerMetricsPublisher, BrokerTopicMetrics
from metadata import records
from metadata.controller.cluster import broker_heartbeat
from metadata.controller.election import (
    broker_leaving,
    broker_returning,
    partitions,
    preferred_leader_changes,
)
from metadata.controller.topics import create_topics
from metadata.delta import MetadataDelta, local_changes
from metadata.image import MetadataImage, collision_key
from metadata.records import Partition, PartitionChange, Topic, decode_record, encode_record
from tests.metadata.controller.support import brokers, build, context, request_module
from tests.metadata.test_records import _reference_value

SIZES = (1_000, 10_000, 100_000)
ROUNDS = 5  # each figure is the best of this many


def best_ms(operation: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.thread_time()
        operation()
        best = min(best, time.thread_time() - started)
    return best * 1000


def cluster(topics: int) -> MetadataImage:
    image = brokers(1, 2, 3, 4)
    records: list[Topic | Partition] = []
    for index in range(topics):
        topic_id = uuid.UUID(int=index + 1000)
        records += [
            Topic(f"topic-{index}", topic_id),
            Partition(topic_id, 0, (1, 2, 3), (1, 2, 3), 1),
        ]
    return build(*records, image=image)


def line(label: str, now: float, before: float) -> None:
    ratio = before / now if now > 0 else float("inf")
    print(f"  {label:<46} {now:9.3f} ms   before {before:9.3f} ms   {ratio:9.0f}x less")


def bench(topics: int) -> None:
    print(f"{topics:,} topics")
    image = cluster(topics)
    delta = MetadataDelta(image)
    delta.replay(PartitionChange(uuid.UUID(int=1000 + topics // 2), 0, isr=(1, 2)))
    after = delta.apply(image.offset + 1, 1)
    stranger = dataclasses.replace(image, topics=dataclasses.replace(image.topics))
    assert local_changes(image, after, 1) == local_changes(stranger, after, 1)

    def publish(before: MetadataImage) -> None:
        BrokerMetricsPublisher(1, BrokerTopicMetrics()).on_image(before, after, False)

    line(
        "broker: replica changes after one batch",
        best_ms(lambda: local_changes(image, after, 1)),
        best_ms(lambda: local_changes(stranger, after, 1)),
    )
    line(
        "broker: ISR metrics after one batch",
        best_ms(lambda: publish(image)),
        best_ms(lambda: publish(stranger)),
    )

    heartbeat_module = request_module(63, 2)
    heartbeat = heartbeat_module.BrokerHeartbeatRequest(
        broker_id=4,
        broker_epoch=104,
        current_metadata_offset=image.offset,
        want_fence=False,
        want_shut_down=False,
    )
    ctx = context(image)
    assert not broker_heartbeat(ctx, image, heartbeat, 2).records
    line(
        "controller: heartbeat of a broker leading none",
        best_ms(lambda: broker_heartbeat(ctx, image, heartbeat, 2)),
        best_ms(lambda: [any(p.leader == 4 for _, _, p in partitions(image)) for _ in (1, 2)]),
    )

    walk = best_ms(lambda: any(p.leader == 4 and 4 in p.isr for _, _, p in partitions(image)))
    for label, operation in (
        ("controller: broker in no ISR leaving", lambda: broker_leaving(ctx, 4)),
        ("controller: broker returning, none offline", lambda: broker_returning(ctx, 4)),
        ("controller: preferred-leader check, balanced", lambda: preferred_leader_changes(ctx, 9)),
    ):
        assert not operation()
        line(label, best_ms(operation), walk)

    create_module = request_module(19, 7)
    create = create_module.CreateTopicsRequest(
        topics=(
            create_module.CreatableTopic(
                name="new.topic", num_partitions=1, replication_factor=3, assignments=(), configs=()
            ),
        )
    )
    created = best_ms(lambda: create_topics(context(image), create, 7))
    rebuild = best_ms(lambda: {collision_key(name): name for name in image.topics.by_name})
    line("controller: CreateTopics of one topic", created, created + rebuild)

    collect = best_ms(gc.collect)
    gc.freeze()
    frozen = best_ms(gc.collect)
    gc.unfreeze()
    line("a full garbage collection", frozen, collect)

    def one_batch() -> None:
        delta = MetadataDelta(image)
        delta.replay(PartitionChange(uuid.UUID(int=1000), 0, isr=(1, 2)))
        delta.apply(image.offset + 1, 1)

    print(f"  {'still growing: one batch replayed and applied':<46} {best_ms(one_batch):9.3f} ms")
    print(f"  {'still growing: a walk of every partition':<46} {walk:9.3f} ms")


def bench_codec() -> None:
    module = request_module(19, 7)
    big = module.CreatableTopic(
        name="big", num_partitions=7000, replication_factor=3, assignments=(), configs=()
    )
    request = module.CreateTopicsRequest(topics=(big,))
    made = create_topics(context(brokers(1, 2, 3)), request, 7).records
    values = [encode_record(record) for record in made]

    def encode_as_before() -> None:
        for record in made:
            fields = {
                f.name: _reference_value(getattr(record, f.name))
                for f in dataclasses.fields(record)  # type: ignore[arg-type]
                if f.name not in ("log_dirs", "directories") or getattr(record, f.name) != f.default
            }
            msgpack.packb({"type": record.TYPE, "version": record.VERSION, **fields})

    print(f"the {len(made):,} records of a 7,000-partition CreateTopics")
    line(
        "encoded (the controller's turn)",
        best_ms(lambda: [encode_record(record) for record in made]),
        best_ms(encode_as_before),
    )
    line(
        "decoded (every node's replay)",
        best_ms(lambda: [decode_record(value, 0) for value in values]),
        best_ms(lambda: [records._decode_record(msgpack.unpackb(value)) for value in values]),
    )


def main() -> None:
    for topics in SIZES:
        bench(topics)
    bench_codec()


if __name__ == "__main__":
    main()
