"""What one simulated run is given and what it reports.

Every scenario takes a RunConfig and returns a RunResult whose ``summary`` is the one line the
CLI prints: ``seed=N ok ... digest=HEX speed=Xx``, ``seed=N VIOLATION <invariant>: <detail>``
or ``seed=N UNKNOWN <check>: <why>``.

Outcomes: ``ok``; ``violation`` (an invariant broke); ``crashed`` (code under test, or the
simulator itself, died of an unexpected exception: the ``crashed`` violation kind, with its
traceback in ``detail``); ``unknown`` (no invariant broke, but a check could not decide, e.g.
a linearizability search out of budget). Only ``ok`` passes; ``--allow-unknown`` lets
``unknown`` pass too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OUTCOMES = ("ok", "violation", "unknown", "crashed")
CRASHED = "crashed"


@dataclass(frozen=True, slots=True)
class RunConfig:
    """One run: scenario, seed, size, fault mix, optional planted bug, optional traces.

    ``trace_path`` is a JSON-lines file; ``trace_dir`` a Parquet trace directory
    (sim/tracefmt.py) that many runs share.
    """

    scenario: str
    seed: int
    duration_s: float = 30.0
    faults: tuple[str, ...] = ()
    bug: str | None = None
    nodes: int = 6
    voters: int = 3
    observers: int = 0
    controllers: int = 3
    brokers: int = 3
    # The kafka scenario's topic and clients.
    partitions: int = 3
    rf: int = 3
    acks: str = "all"
    idempotent: bool = False
    # The topic is compacted (unique record keys, so nothing may go) with 1 s segments,
    # and every broker's log cleaner merges and swaps them under the faults.
    compact: bool = False
    # Each produced batch is compressed with a codec drawn per batch (gzip, snappy, lz4,
    # zstd), as producers with compression.type set send them.
    compression: bool = False
    # Each broker's open-files limit (None: the simulated disk's default, 2^20).
    descriptor_limit: int | None = None
    # Now and then a random partition is reassigned (KIP-455) to random brokers.
    reassign: bool = False
    # Every node runs Kafka's StandardAuthorizer with no ACLs and
    # allow.everyone.if.no.acl.found=true: every request passes through its checks.
    authorizer: bool = False
    # Transactional lanes and read_committed consumers beside the plain workload
    # (sim/scenarios/kafka_txn.py).
    transactions: bool = False
    # An unmodified aiokafka producer and group consumers beside the workload
    # (sim/scenarios/kafka_aiokafka.py, on virtual time through sim/foreign.py).
    aiokafka: bool = False
    # KIP-848 consumer-protocol group members beside the workload
    # (sim/scenarios/kafka_consumer.py).
    consumer_protocol: bool = False
    # With authorizer: ACLs that deny, and a lane that keeps asking for what they deny
    # (sim/scenarios/kafka_acls.py).
    acls: bool = False
    # A client held to a byte-rate quota, and a lane that ignores its throttles
    # (sim/scenarios/kafka_quotas.py).
    quotas: bool = False
    trace_path: str | None = None
    trace_dir: str | None = None


@dataclass(slots=True)
class RunResult:
    """The verdict of one run and the figures that describe it."""

    seed: int
    violation: str | None
    digest: str
    virtual_s: float
    wall_s: float
    stats: dict[str, int] = field(default_factory=dict)
    # Why a check could not decide (only when there is no violation).
    unknown: str | None = None
    # The traceback of a crash, for the terminal (never in the trace: it names paths).
    detail: str | None = None

    @property
    def outcome(self) -> str:
        """One of OUTCOMES."""
        if self.violation is not None:
            return CRASHED if self.violation.startswith(f"{CRASHED}:") else "violation"
        return "ok" if self.unknown is None else "unknown"

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def speed(self) -> float:
        """Virtual seconds simulated per wall-clock second."""
        return self.virtual_s / self.wall_s if self.wall_s > 0 else float("inf")

    def summary(self) -> str:
        if self.violation is not None:
            return f"seed={self.seed} VIOLATION {self.violation} digest={self.digest}"
        if self.unknown is not None:
            return f"seed={self.seed} UNKNOWN {self.unknown} digest={self.digest}"
        figures = " ".join(f"{key}={value}" for key, value in self.stats.items())
        return f"seed={self.seed} ok {figures} digest={self.digest} speed={self.speed:.0f}x"
