"""``--quotas``: a client held to a producer_byte_rate quota that ignores its throttle times,
held back all the same by every broker's mute (KIP-219); ``quota-exceeded`` if one is not."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from sim.analysis.kafka import QUOTA_EXCEEDED, QuotaChecker
from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka
from sim.scenarios.kafka_quotas import RATE, VALUE_BYTES

S = 1_000_000  # us


def config(tmp_path: Path, bug: str | None = None) -> RunConfig:
    return RunConfig(
        "kafka",
        2,
        duration_s=8,
        faults=FAULTS + KAFKA_FAULTS,
        bug=bug,
        quotas=True,
        trace_path=str(tmp_path / "trace.jsonl"),
    )


def test_the_lane_is_throttled_and_held_to_the_quota_under_faults(tmp_path: Path) -> None:
    first = run_kafka(config(tmp_path))
    assert first.ok, first.summary()
    answers = [
        e
        for e in map(json.loads, (tmp_path / "trace.jsonl").read_text().splitlines())
        if e["kind"] == "quota-answer"
    ]
    accepted = sum(e["bytes"] for e in answers if e["error"] == "NONE")
    throttled = [e for e in answers if e["throttle_ms"] > 0]
    assert throttled, "the lane never went over its quota"
    assert first.stats["quota_bytes"] == accepted
    assert first.stats["quota_throttled"] == len(throttled)
    # Over the whole run, within twice the quota plus one window (the check is per connection).
    assert accepted <= 2 * RATE * (8 + 4) + 2 * VALUE_BYTES * 2
    second = run_kafka(replace(config(tmp_path), trace_path=None))
    assert second.digest == first.digest


def test_a_broker_that_does_not_mute_a_throttled_client_fails_the_run(tmp_path: Path) -> None:
    result = run_kafka(config(tmp_path, "throttle-without-mute"))
    assert not result.ok
    assert result.violation is not None and result.violation.startswith(QUOTA_EXCEEDED + ": ")


def test_the_check_allows_the_quota_and_a_window_per_connection() -> None:
    check = QuotaChecker(1000.0, 4.0)  # 1,000 bytes/s measured over 4 s
    # One second after the first request: 2 * 1000 * (1 + 4) + 2 * 1000 = 12,000 bytes.
    for _ in range(12):
        assert check.answered("n4", "a", 0, 1000, "NONE", S) is None
    # Answers that are not NONE were not accepted: they count towards nothing.
    assert check.answered("n4", "a", 0, 50_000, "NOT_LEADER_OR_FOLLOWER", S) is None
    found = check.answered("n4", "a", 0, 1000, "NONE", S)
    assert found is not None and found.check == QUOTA_EXCEEDED
    assert check.answered("n4", "a", 0, 1000, "NONE", S) is None  # once a connection
    # A new connection (or broker, after a restart or a leader change) counts from its start.
    assert check.answered("n4", "b", S, 1000, "NONE", S) is None
    assert check.answered("n5", "a", S, 1000, "NONE", S) is None
    # Later, the quota has let more through: 2 * 1000 * (11 + 4) + 2000 = 32,000 bytes.
    assert check.answered("n4", "b", S, 30_000, "NONE", 11 * S) is None
    assert [v.check for v in check.violations] == [QUOTA_EXCEEDED]
