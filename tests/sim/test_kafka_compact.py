"""The kafka scenario with a compacted topic (``--compact``): every broker's log cleaner
merges and swaps the topic's segments under every fault, the Kafka checks find nothing lost
(its keys are unique, so compaction may remove nothing), and the same seed still gives the
same digest."""

from __future__ import annotations

from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka


def test_a_compacted_topic_keeps_every_write_and_the_run_deterministic() -> None:
    config = RunConfig("kafka", 2, duration_s=8, faults=FAULTS + KAFKA_FAULTS, compact=True)
    first, second = run_kafka(config), run_kafka(config)
    assert first.ok, first.summary()
    assert first.stats["sends"] > 0 and first.stats["polls"] > 0
    assert first.stats["segments_cleaned"] > 0  # the cleaner really ran
    assert first.digest == second.digest
