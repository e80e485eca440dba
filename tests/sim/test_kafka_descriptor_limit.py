"""The kafka scenario with brokers under an open-files limit (``--descriptor-limit``) and a
compacted topic whose segments roll every second: the brokers close idle segment files and
reopen them on use (log/lazy_files.py) through every fault, crashes and power cuts among
them; the Kafka checks find nothing lost, groups commit, and the run is deterministic."""

from __future__ import annotations

from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka


def test_brokers_under_a_descriptor_limit_close_idle_files_and_lose_nothing() -> None:
    config = RunConfig(
        "kafka",
        7,
        duration_s=10,
        faults=FAULTS + KAFKA_FAULTS,
        compact=True,
        descriptor_limit=200,
    )
    first, second = run_kafka(config), run_kafka(config)
    assert first.ok, first.summary()
    assert first.stats["sends"] > 0 and first.stats["commits"] > 0
    assert first.stats["files_closed"] > 0  # files really were closed and reopened
    assert first.digest == second.digest
