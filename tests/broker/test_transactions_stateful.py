"""Hypothesis stateful test: a replica's transactions against a model that is a list of
batches.

Rules append transactional and plain batches and commit or abort markers (as the leader
stamped them, through the follower path every replica shares), move the high watermark,
truncate (the producer state is rebuilt), and close and reopen the log, maybe without its
``.txnindex`` files (the producer state and the missing entries are rebuilt from the
batches), or from a producer snapshot (``<offset>.snapshot``, Kafka's format). After every step:
- the last stable offset is the model's: the least of the high watermark and the first
  offsets of transactions still open or whose marker is not below the high watermark;
- the open transactions and the indexed aborted transactions are the model's;
- a read_committed consumer reading from the log start up to the LSO, fetch by fetch (tiny
  segments, so fetches stop at segment ends), with each answer's aborted transactions,
  sees exactly the model's committed and non-transactional records below the LSO.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.partition import Partition
from broker.producer_snapshot import latest_snapshot, write_snapshot
from broker.producer_state import ProducerState
from log.batch import encode_batch
from log.config import LogConfig
from log.end_txn_marker import EndTransactionMarker, encode_marker_batch
from log.log import Log
from log.records import Record
from log.runtime import Runtime
from log.txn_index import TXN_INDEX_SUFFIX, AbortedTxn
from sim.disk import SimDisk
from tests.broker.read_committed import committed_values

DIR = "/data/t-0"
NOW_MS = 1_700_000_000_000
CONFIG = LogConfig(segment_bytes=420, file_delete_delay_ms=0)  # about four batches each
PRODUCERS = (1, 2, 3)


class FakeClock:
    def now_ms(self) -> int:
        return NOW_MS


@dataclass(frozen=True, slots=True)
class ModelBatch:
    offset: int
    producer_id: int
    kind: str  # "txn", "plain", "commit", "abort"
    value: bytes


class TransactionsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        fs = SimDisk(random.Random(0)).fs()
        fs.mkdir("/data")
        self.runtime = Runtime(fs, FakeClock(), random.Random(0))
        log = self.run(Log.open(self.runtime, DIR, CONFIG))
        self.partition = Partition("t", 0, uuid.UUID(int=1), log, ProducerState.from_log(log), 1)
        self.batches: list[ModelBatch] = []
        self.sequences = dict.fromkeys(PRODUCERS, 0)
        self.high_watermark = 0
        self.counter = 0
        self.forgotten: set[int] = set()  # markers a snapshot start took as replicated

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self.run(self.partition.log.close())
        finally:
            self.loop.close()

    # ---- the model ----------------------------------------------------------------------
    def _transactions(self) -> tuple[dict[int, int], list[tuple[int, int, int, bool, int]]]:
        """(producer -> first offset of its open transaction, closed transactions as
        (producer, first offset, marker offset, aborted, LSO when it closed))."""
        open_txns: dict[int, int] = {}
        closed = []
        for batch in self.batches:
            if batch.kind == "txn":
                open_txns.setdefault(batch.producer_id, batch.offset)
            elif batch.kind in ("commit", "abort") and batch.producer_id in open_txns:
                first = open_txns.pop(batch.producer_id)
                stable = min(open_txns.values(), default=batch.offset + 1)
                closed.append(
                    (batch.producer_id, first, batch.offset, batch.kind == "abort", stable)
                )
        return open_txns, closed

    def _model_lso(self) -> int:
        open_txns, closed = self._transactions()
        firsts = list(open_txns.values())
        firsts += [
            first
            for _, first, last, _, _ in closed
            if last >= self.high_watermark and last not in self.forgotten
        ]
        return min([self.high_watermark, *firsts])

    def _committed_below(self, bound: int) -> list[tuple[int, bytes | None]]:
        _, closed = self._transactions()
        aborted = {
            (p, o) for p, first, last, is_abort, _ in closed if is_abort for o in range(first, last)
        }
        return [
            (b.offset, b.value)
            for b in self.batches
            if b.offset < bound
            and b.kind in ("txn", "plain")
            and (b.producer_id, b.offset) not in aborted
        ]

    # ---- rules --------------------------------------------------------------------------
    def _append(self, data: bytes, producer_id: int, kind: str, value: bytes) -> None:
        offset = self.partition.log.log_end_offset
        stamped = bytearray(data)
        stamped[0:8] = offset.to_bytes(8, "big")
        self.partition.append_as_follower(bytes(stamped), NOW_MS)
        self.batches.append(ModelBatch(offset, producer_id, kind, value))

    @rule(producer_id=st.sampled_from(PRODUCERS), transactional=st.booleans())
    def produce(self, producer_id: int, transactional: bool) -> None:
        open_txns, _ = self._transactions()
        if producer_id in open_txns and not transactional:
            transactional = True  # the leader refuses plain batches inside a transaction
        self.counter += 1
        value = f"v{self.counter}".encode()
        sequence = self.sequences[producer_id]
        self.sequences[producer_id] += 1
        data = encode_batch(
            [Record(None, value, NOW_MS)],
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence,
            is_transactional=transactional,
        )
        self._append(data, producer_id, "txn" if transactional else "plain", value)

    @rule(producer_id=st.sampled_from(PRODUCERS), commit=st.booleans())
    def end_transaction(self, producer_id: int, commit: bool) -> None:
        data = encode_marker_batch(producer_id, 0, EndTransactionMarker(commit, 0), NOW_MS)
        self._append(data, producer_id, "commit" if commit else "abort", b"")

    @rule(steps=st.integers(1, 6))
    def advance_high_watermark(self, steps: int) -> None:
        end = self.partition.log.log_end_offset
        self.high_watermark = min(end, self.high_watermark + steps)
        self.partition.follower_high_watermark(self.high_watermark)

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        to = data.draw(st.integers(0, len(self.batches) - 1))
        self.run(self.partition.truncate_to(to))
        del self.batches[to:]
        self.forgotten = set()  # the state is rebuilt from the log
        self.high_watermark = min(self.high_watermark, to)
        self.partition.follower_high_watermark(self.high_watermark)

    @rule(lose_txn_indexes=st.booleans(), snapshot=st.booleans())
    def reopen(self, lose_txn_indexes: bool, snapshot: bool) -> None:
        fs = self.runtime.fs
        old = self.partition
        if snapshot:  # a clean shutdown's producer snapshot, read back at the start
            entries = old.producers.snapshot_entries()
            self.run(write_snapshot(fs, DIR, old.log.log_end_offset, entries))
            lose_txn_indexes = False  # a clean shutdown flushed them
        self.run(old.log.close())
        if lose_txn_indexes:  # as a crash that kept the log's data but not these writes
            for name in fs.list_dir(DIR):
                if name.endswith(TXN_INDEX_SUFFIX):
                    fs.remove(f"{DIR}/{name}")
        log = self.run(Log.open(self.runtime, DIR, CONFIG, had_clean_shutdown=True))
        taken = latest_snapshot(fs, DIR, log.log_end_offset) if snapshot else None
        assert (taken is not None) == snapshot
        producers = ProducerState.from_log(log, high_watermark=self.high_watermark, snapshot=taken)
        self.partition = Partition("t", 0, uuid.UUID(int=1), log, producers, 1)
        self.partition.follower_high_watermark(self.high_watermark)
        # Kafka's snapshot keeps open transactions, not closed ones whose marker is not
        # replicated yet: those count as stable after such a start (as in Kafka).
        _, closed = self._transactions()
        self.forgotten = (
            {last for _, _, last, _, _ in closed if last >= self.high_watermark}
            if snapshot
            else set()
        )

    # ---- invariants ---------------------------------------------------------------------
    @invariant()
    def stable_offset_and_open_transactions_match(self) -> None:
        open_txns, closed = self._transactions()
        assert self.partition.producers.open_transactions == open_txns
        assert self.partition.last_stable_offset == self._model_lso()
        aborted = [AbortedTxn(p, f, last, s) for p, f, last, is_abort, s in closed if is_abort]
        assert self.partition.log.aborted_txns() == aborted

    @invariant()
    def read_committed_sees_exactly_the_committed_records(self) -> None:
        lso = self.partition.last_stable_offset
        seen: list[tuple[int, bytes | None]] = []
        offset = 0
        log = self.partition.log
        while offset < lso:  # bounded: each fetch moves past at least one batch
            data = log.read(offset, 1 << 20, max_offset=lso)
            records = bytes(data.records)
            assert records, (offset, lso)
            found = log.collect_aborted_txns(offset, data.next_offset)
            seen += committed_values(records, [(t.producer_id, t.first_offset) for t in found])
            offset = data.next_offset
        assert seen == self._committed_below(lso)


TransactionsMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTransactions = TransactionsMachine.TestCase
