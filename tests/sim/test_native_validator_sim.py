"""The simulator gives the same run whichever validator the brokers use: kraft_native is
deterministic code like the rest of a node, so a seed replays identically with it and with
the Python specification (KRAFT_NATIVE=0)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import log.validator as validator
from sim.nemesis import FAULTS
from sim.run import RunConfig
from sim.scenarios.kafka import FAULTS as KAFKA_FAULTS
from sim.scenarios.kafka import run_kafka


def counting(calls: list[str], name: str, function: Callable[..., object]) -> Callable[..., object]:
    def wrapper(*args: object, **kwargs: object) -> object:
        calls.append(name)
        return function(*args, **kwargs)

    return wrapper


def test_a_seed_replays_identically_with_the_native_and_the_python_validator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = RunConfig(
        "kafka", 5, duration_s=6, faults=FAULTS + KAFKA_FAULTS, idempotent=True, compact=True
    )
    calls: list[str] = []
    for name in ("validate_records_native", "validate_records_python"):
        monkeypatch.setattr(validator, name, counting(calls, name, getattr(validator, name)))
    monkeypatch.setattr(validator, "_dispatch", validator._choose({}))
    native = run_kafka(config)
    native_calls = len(calls)
    monkeypatch.setattr(validator, "_dispatch", validator._choose({"KRAFT_NATIVE": "0"}))
    python = run_kafka(config)
    assert native.ok, native.summary()
    assert native.stats["sends"] > 0
    assert set(calls[:native_calls]) == {"validate_records_native"}
    assert set(calls[native_calls:]) == {"validate_records_python"}
    assert native.digest == python.digest
