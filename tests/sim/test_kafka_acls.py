"""``--acls``: ACLs that deny a topic and a group, set and applied by every broker before the
first fault, and a lane that keeps asking for what they deny; ``acl-bypassed`` if a broker
ever grants it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from metadata.authorizer import Authorizer
from sim.analysis.kafka import ACL_BYPASSED, check_acl_answer
from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka

KRAFT_SIM = str(Path(sys.executable).parent / "kraft-sim")


def config(tmp_path: Path) -> RunConfig:
    return RunConfig(
        "kafka",
        2,
        duration_s=8,
        faults=FAULTS + KAFKA_FAULTS,
        authorizer=True,
        acls=True,
        trace_path=str(tmp_path / "trace.jsonl"),
    )


def test_every_denied_request_is_refused_under_faults(tmp_path: Path) -> None:
    first = run_kafka(config(tmp_path))
    assert first.ok, first.summary()
    answers = Counter(
        (e["api"], e["error"])
        for e in map(json.loads, (tmp_path / "trace.jsonl").read_text().splitlines())
        if e["kind"] == "acl-answer"
    )
    for api, refusal in (
        ("produce", "TOPIC_AUTHORIZATION_FAILED"),
        ("fetch", "TOPIC_AUTHORIZATION_FAILED"),
        ("offset-commit", "GROUP_AUTHORIZATION_FAILED"),
    ):
        assert answers[(api, refusal)] > 0, answers
    assert first.stats["acl_refusals"] == sum(
        n for (_, error), n in answers.items() if error.endswith("_AUTHORIZATION_FAILED")
    )
    second = run_kafka(replace(config(tmp_path), trace_path=None))
    assert second.digest == first.digest


def test_a_broker_that_grants_what_an_acl_denies_fails_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check is live: with every authorization granted, the lane's first answer from a
    broker is a success, and the run fails on it."""
    monkeypatch.setattr(Authorizer, "authorize", lambda *_args: True)
    result = run_kafka(replace(config(tmp_path), trace_path=None))
    assert not result.ok
    assert result.violation is not None
    assert result.violation.startswith(ACL_BYPASSED + ": "), result.violation


def test_only_a_success_is_a_bypass() -> None:
    assert check_acl_answer("n4", "produce", "t-0", "TOPIC_AUTHORIZATION_FAILED", 1) is None
    assert check_acl_answer("n4", "produce", "t-0", "NOT_LEADER_OR_FOLLOWER", 1) is None
    found = check_acl_answer("n4", "fetch", "t-0", "NONE", 7)
    assert found is not None and (found.check, found.time_us) == (ACL_BYPASSED, 7)


def test_acls_need_the_authorizer() -> None:
    result = subprocess.run(
        [KRAFT_SIM, "run", "--scenario", "kafka", "--acls", "--seed", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "kraft-sim: --acls needs --scenario kafka and --authorizer"
