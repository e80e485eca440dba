"""The transaction coordinator's settings, under Kafka's own broker keys and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

TXN_TOPIC = "__transaction_state"


@dataclass(frozen=True, slots=True)
class TransactionCoordinatorConfig:
    transaction_state_log_num_partitions: int = 50
    # Kafka's default; as for __consumer_offsets, a cluster with fewer brokers cannot create
    # the topic and FindCoordinator answers COORDINATOR_NOT_AVAILABLE (the single-node
    # config sets 1).
    transaction_state_log_replication_factor: int = 3
    transaction_state_log_min_isr: int = 2
    transaction_state_log_segment_bytes: int = 104_857_600
    transaction_state_log_load_buffer_size: int = 5_242_880
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    # How long one append to __transaction_state may wait for the ISR (Kafka uses the
    # request timeout of the producer; a fixed bound here, as offsets.commit.timeout.ms).
    transaction_state_log_write_timeout_ms: int = 5000
    # Backoff between rounds of WriteTxnMarkers to a leader that did not take them yet.
    transaction_marker_retry_backoff_ms: int = 100
    # How long EndTxn waits for the markers and the Complete state before it answers
    # (kraft-py's own; 0 answers once the Prepare state is written, as Kafka does).
    transaction_end_wait_for_markers_ms: int = 5000

    @classmethod
    def from_properties(cls, props: Mapping[str, Any]) -> TransactionCoordinatorConfig:
        """From Kafka keys (``transaction.max.timeout.ms`` ...); others are ignored. A value
        that is not a positive integer is a ValueError naming the key."""
        values: dict[str, Any] = {}
        for item in fields(cls):
            key = item.name.replace("_", ".")
            if key in props:
                try:
                    value = int(props[key])
                except ValueError:
                    raise ValueError(f"{key}: not an integer: {props[key]!r}") from None
                floor = 0 if item.name == "transaction_end_wait_for_markers_ms" else 1
                if value < floor:
                    raise ValueError(f"{key}: must be at least {floor}, got {value}")
                values[item.name] = value
        return cls(**values)


KEYS = frozenset(item.name.replace("_", ".") for item in fields(TransactionCoordinatorConfig))
