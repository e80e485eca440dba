"""Scenarios the simulator can run, by name, with the planted bugs each understands."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sim.run import RunConfig, RunResult
from sim.scenarios import echo, kafka, kafka_txn, metadata, raft


@dataclass(frozen=True, slots=True)
class Scenario:
    """A named workload plus its checkers."""

    name: str
    summary: str
    run: Callable[[RunConfig], RunResult]
    bugs: dict[str, str]
    faults: tuple[str, ...] = ()  # its own faults, beyond the nemesis's (part of ``all``)
    opt_in_faults: tuple[str, ...] = ()  # its own faults that run only when named


SCENARIOS: dict[str, Scenario] = {
    "echo": Scenario(
        "echo",
        "nodes echo messages over simulated TCP and log them to the simulated disk",
        echo.run_echo,
        echo.BUGS,
    ),
    "raft": Scenario(
        "raft",
        "a KRaft quorum (--voters, --observers) proposing records under faults",
        raft.run_raft,
        raft.SCENARIO_BUGS,
        raft.FAULTS,
        raft.OPT_IN_FAULTS,
    ),
    "metadata": Scenario(
        "metadata",
        "controllers (--controllers) and brokers (--brokers) serving admin clients under faults",
        metadata.run_metadata,
        metadata.BUGS,
        metadata.FAULTS,
    ),
    "kafka": Scenario(
        "kafka",
        "controllers, brokers replicating a topic (--partitions, --rf), producers (--acks, "
        "--idempotent) and consumers under faults, with Jepsen's Kafka checks",
        kafka.run_kafka,
        kafka.BUGS,
        kafka.FAULTS,
        (*kafka.LIFECYCLE_FAULTS, *kafka.DATA_PLANE_FAULTS, *kafka_txn.TXN_FAULTS),
    ),
}
