"""``--compression``: the kafka scenario's producers compress each batch with a codec drawn
per batch, and the run is judged as a plain one."""

from __future__ import annotations

from dataclasses import replace

from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import run_kafka


def test_compressed_batches_are_judged_like_plain_ones() -> None:
    """Compressed batches are acknowledged, read back by the consumers' fetches (the final
    reads find every acknowledged value, else ``lost`` fails the run) and the run is as
    reproducible as a plain one; the codecs drawn change it."""
    config = RunConfig("kafka", 3, duration_s=6, faults=FAULTS, compression=True)
    first = run_kafka(config)
    assert first.ok, first.summary()
    assert first.stats["sends"] > 0 and first.stats["polls"] > 0
    assert run_kafka(config).digest == first.digest
    assert run_kafka(replace(config, compression=False)).digest != first.digest
