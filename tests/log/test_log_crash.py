"""Crash safety on the simulated disk: random appends, flushes, truncations, checkpoints and
failing fsyncs, with power cuts at random moments (also in the middle of a flush or a
truncation), each followed by a restart through LogManager's unclean-shutdown recovery.

After every restart:
- the log is a contiguous run of what was appended (a prefix of the history, from its log
  start offset), byte for byte;
- it holds every offset below the target of every flush that completed before the crash;
- every batch a read returns passes validate_batch (CRC), and the epoch cache names each
  batch's leader epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import random
import selectors
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import pytest

from log.batch import encode_batch, iter_batches, validate_batch
from log.config import LogConfig, LogManagerConfig
from log.log import Log
from log.manager import LogManager
from log.records import Record
from log.runtime import Runtime
from sim.disk import SimDisk

TOPIC, PARTITION = "crash", 0
CONFIG = LogConfig(segment_bytes=2000, index_interval_bytes=120, file_delete_delay_ms=1000)
MANAGER_CONFIG = LogManagerConfig()
SEEDS = 150
OPERATIONS = 40


class _VirtualSelector(selectors.DefaultSelector):
    loop: VirtualTimeLoop

    def select(self, timeout: float | None = None):  # type: ignore[override]
        if timeout is None:
            raise RuntimeError("virtual loop would block forever")
        self.loop.virtual_now += max(0.0, timeout)
        return super().select(0)


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """Timers and sleeps run in virtual time, so fsync latency costs no wall time."""

    def __init__(self) -> None:
        self.virtual_now = 0.0
        selector = _VirtualSelector()
        selector.loop = self
        super().__init__(selector)

    def time(self) -> float:
        return self.virtual_now


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def now_ms(self) -> int:
        self.now += 1
        return self.now


@dataclass(frozen=True, slots=True)
class Appended:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class CrashRun:
    """One seeded run; ``history`` is what the log must be a prefix of."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.disk = SimDisk(random.Random(seed + 1_000_000), fsync_latency_s=(0.001, 0.001))
        self.clock = Clock()
        self.history: list[Appended] = []
        self.durable_offset = 0
        self.epoch = 0
        self.restarts = 0
        self.manager: LogManager
        self.log: Log

    def runtime(self) -> Runtime:
        return Runtime(self.disk.fs(), self.clock, random.Random(self.rng.random()))

    async def start(self) -> None:
        self.manager = LogManager(self.runtime(), ["/data"], CONFIG, manager_config=MANAGER_CONFIG)
        await self.manager.load_logs()
        self.log = await self.manager.get_or_create_log(TOPIC, PARTITION)

    async def run(self) -> None:
        await self.start()
        for _ in range(OPERATIONS):  # bounded by construction
            await self.step()
        await self.crash_and_check(None)

    async def step(self) -> None:
        rng = self.rng
        choice = rng.random()
        if not self.log.is_online:
            await self.crash_and_check(None)
        elif choice < 0.45:
            self.append()
        elif choice < 0.65:
            await self.interruptible(self.flush(), crash=rng.random() < 0.3)
        elif choice < 0.72:
            await self.interruptible(self.truncate(), crash=rng.random() < 0.3)
        elif choice < 0.78:
            await self.interruptible(
                self.manager.checkpoint_log_recovery_offsets(), crash=rng.random() < 0.3
            )
        elif choice < 0.83:
            self.disk.fail_fsyncs(1)
            try:
                await self.log.flush()
            except OSError as exc:
                assert exc.errno == errno.EIO
            self.disk.fail_fsyncs(0)
        elif choice < 0.90:
            await self.manager.shutdown()
            await self.start()
            self.check()
        else:
            await self.crash_and_check(None)

    def append(self) -> None:
        rng = self.rng
        if rng.random() < 0.2:
            self.epoch += 1
        batches = [
            encode_batch(
                [Record(b"k", rng.randbytes(rng.randrange(150)), self.clock.now_ms())]
                * rng.randint(1, 3)
            )
            for _ in range(rng.randint(1, 3))
        ]
        data = bytearray(b"".join(batches))
        self.log.append_as_leader(data, self.epoch)
        for position, header in iter_batches(data):
            self.history.append(
                Appended(
                    header.base_offset,
                    header.last_offset,
                    self.epoch,
                    bytes(data[position : position + header.size]),
                )
            )

    async def flush(self) -> None:
        target = self.rng.randint(0, self.log.log_end_offset + 2)
        await self.log.flush(target)
        self.durable_offset = max(self.durable_offset, min(target, self.log.log_end_offset))

    async def truncate(self) -> None:
        target = self.rng.randint(max(0, self.log.log_end_offset - 20), self.log.log_end_offset)
        kept = [b for b in self.history if b.last_offset < target]
        # A target inside a batch removes the whole batch, so the log may end below target.
        self.durable_offset = min(self.durable_offset, kept[-1].last_offset + 1 if kept else 0)
        if await self.log.truncate_to(target):
            self.history = kept

    async def interruptible(self, work: Coroutine[Any, Any, Any], *, crash: bool) -> None:
        """Run ``work``; when ``crash``, cut the power after a random slice of virtual time."""
        task = asyncio.ensure_future(work)
        if not crash:
            await task
            return
        await asyncio.sleep(self.rng.uniform(0, 0.006))
        await self.crash_and_check(task)

    async def crash_and_check(self, in_flight: asyncio.Future[Any] | None) -> None:
        self.disk.crash()
        self.restarts += 1
        if in_flight is not None:
            # The old incarnation's task dies on its stale handles (or had finished).
            with contextlib.suppress(OSError):
                await in_flight
        await self.start()
        assert self.manager.recovered_from_unclean_shutdown
        self.check()

    def check(self) -> None:
        log = self.log
        start, end = log.log_start_offset, log.log_end_offset
        assert end >= self.durable_offset, (end, self.durable_offset, self.restarts)
        got: list[tuple[int, bytes]] = []
        offset = start
        while offset < end:  # bounded: every read returns at least one batch
            result = log.read(offset, 5000)
            records = bytes(result.records)
            assert len(records) > 0, (offset, end)
            for position, header in iter_batches(records):
                validate_batch(records, position)
                got.append((header.base_offset, records[position : position + header.size]))
            offset = result.next_offset
        assert offset == end
        expected = [b for b in self.history if b.last_offset >= start and b.base_offset < end]
        assert got == [(b.base_offset, b.data) for b in expected], self.restarts
        assert not expected or expected[-1].last_offset + 1 == end
        cache = log.leader_epoch_cache
        for batch in expected:
            if batch.base_offset >= start:
                assert cache.epoch_for_offset(batch.base_offset) == batch.epoch
        # What survived is now the history; the rest is lost, as a power cut may do.
        self.history = [b for b in self.history if b.last_offset < end]
        self.durable_offset = min(self.durable_offset, end)


def _run_virtual(coro: Coroutine[Any, Any, Any]) -> Any:
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.mark.parametrize("chunk", range(5))
def test_log_survives_random_crashes_as_a_prefix_with_every_flushed_batch(chunk: int) -> None:
    restarts = 0
    for seed in range(chunk * SEEDS // 5, (chunk + 1) * SEEDS // 5):
        run = CrashRun(seed)
        _run_virtual(run.run())
        restarts += run.restarts
    assert restarts > SEEDS // 5  # crashes did happen


def test_crash_runs_are_deterministic() -> None:
    def fingerprint(seed: int) -> tuple[int, int, int]:
        run = CrashRun(seed)
        _run_virtual(run.run())
        return run.restarts, run.log.log_end_offset, run.disk.fsyncs

    assert fingerprint(11) == fingerprint(11)
