"""How long one turn of the event loop runs on the paths that work in slices (issue 22), in
CPU seconds of this thread, beside the same work with its slicing disabled in the same run
(the slice constant raised past the work's size, so the whole of it is one turn):

1. the controller: a CreateTopics (validate_only) of 20,001 names and a DeleteTopics of 750
   topics and 100,000 missing names, TOPICS_PER_SLICE names a turn;
2. the log cleaner: one pass over a compacted log holding a zstd batch of 400,000 records,
   YIELD_EVERY_RECORDS keys scanned, mapped or looked up a turn;
3. the produce validator (its Python path: kraft_native validates a batch in one call): a
   zstd batch of 1,000,000 records, WALK_SLICE_RECORDS records walked a turn;
4. KIP-848 regexes: resolving three regexes (one of the slowest kind RE2's program limit
   lets in) over 201 topic names, REGEX_MATCH_SLICE names a turn; a heartbeat refusing a
   pattern over the limit, beside compiling that pattern with no limit; and a heartbeat's
   regex answered from what was resolved, beside matching it then.

The tests (tests/log/test_cleaner_limits.py, test_validator_slices.py,
tests/metadata/controller/test_controller_slices.py, tests/broker/test_group_regex_limits.py)
assert the work units per turn; these are the CPU figures, which depend on the machine.

Run: PYTHONPATH=. .venv/bin/python bench/bench_slices.py   (about a minute)
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import re2

import log.cleaner
import metadata.controller.topics
from broker.group import consumer_coordinator, consumer_group
from broker.group.consumer_coordinator import SubscriptionRegexes, TopicsView
from broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupLimits,
    Heartbeat,
    compile_regex,
    match_names,
)
from log import validator
from log.batch import encode_batch
from log.compression import Compression
from log.config import LogConfig
from log.records import Record
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.records import Partition, Topic
from tests.log.test_cleaner import open_log
from tests.metadata.controller.support import request_module
from tests.metadata.controller.test_quorum_controller import Controller

T = TypeVar("T")
ROUNDS = 3  # each figure is the best of this many runs, sliced and unsliced interleaved
UNSLICED = 1 << 40
NOW_MS = 1_767_225_600_000
HOSTILE = ("d{0,1000}" * 100, "(d{0,1000})" * 90)  # over RE2's program limit
SLOW_BUT_LEGAL = "(d{0,1000})" * 10


async def longest_turn(work: Awaitable[T]) -> tuple[float, T]:
    """(the most CPU one turn of the loop took while ``work`` ran, its result): a probe
    wakes each turn and reads this thread's CPU clock."""
    longest, done = 0.0, False

    async def probe() -> None:
        nonlocal longest
        last = time.thread_time()
        while not done:
            await asyncio.sleep(0)
            now = time.thread_time()
            longest, last = max(longest, now - last), now

    task = asyncio.get_running_loop().create_task(probe())
    await asyncio.sleep(0)
    try:
        result = await work
    finally:
        done = True
        await task
    return longest, result


@contextlib.contextmanager
def patched(module: ModuleType, name: str, value: object) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


Measure = Callable[[], Awaitable[float]]


def compare(label: str, measure: Measure, module: ModuleType, constant: str) -> None:
    """One row: ``measure`` with its slicing and with ``module.constant`` raised past the
    work, best of ROUNDS each, interleaved so both see the same load."""
    sliced = whole = float("inf")
    for _ in range(ROUNDS):
        sliced = min(sliced, asyncio.run(measure()))
        with patched(module, constant, UNSLICED):
            whole = min(whole, asyncio.run(measure()))
    figures = f"{sliced * 1000:>7.1f} ms   unsliced {whole * 1000:>7.1f} ms"
    print(f"  {label:<44} {figures}   x{sliced / whole:.3f}")


def creatable(module: Any, name: str) -> Any:
    return module.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )


async def started_controller(directory: Path) -> Controller:
    node = Controller(directory)
    await node.start()
    await node.heartbeat(1, await node.register(1), offset=node.image.offset)
    return node


def bench_controller() -> None:
    create_module, delete_module = request_module(19, 7), request_module(20, 6)
    names = [f"t{i}" for i in range(20_000)] + ["t7"]
    create = create_module.CreateTopicsRequest(
        topics=tuple(creatable(create_module, n) for n in names), validate_only=True
    )

    async def creating() -> float:
        with tempfile.TemporaryDirectory() as directory:
            node = await started_controller(Path(directory))
            longest, _ = await longest_turn(node.controller.handle(19, 7, create))
            await node.stop()
        return longest

    existing = 750
    made = create_module.CreateTopicsRequest(
        topics=tuple(creatable(create_module, f"d{i}") for i in range(existing))
    )
    wanted = [delete_module.DeleteTopicState(name=f"d{i}", topic_id=None) for i in range(existing)]
    wanted += [delete_module.DeleteTopicState(name=f"m{i}", topic_id=None) for i in range(100_000)]
    delete = delete_module.DeleteTopicsRequest(topics=tuple(wanted), timeout=timedelta(seconds=30))

    async def deleting() -> float:
        with tempfile.TemporaryDirectory() as directory:
            node = await started_controller(Path(directory))
            await node.call(19, 7, made)
            longest, _ = await longest_turn(node.controller.handle(20, 6, delete))
            assert not node.image.topics.by_name
            await node.stop()
        return longest

    print(f"controller, {metadata.controller.topics.TOPICS_PER_SLICE} names a turn")
    module = metadata.controller.topics
    compare("CreateTopics of 20,001 names (validate_only)", creating, module, "TOPICS_PER_SLICE")
    compare("DeleteTopics of 750 topics + 100,000 missing", deleting, module, "TOPICS_PER_SLICE")


def bench_cleaner() -> None:
    count = 400_000
    big = encode_batch(
        [Record(i.to_bytes(4, "big"), b"v", 0) for i in range(count)],
        compression=Compression.ZSTD,
    )
    other = encode_batch([Record(b"other", b"w", 0)])

    async def cleaning() -> float:
        clock, log_ = await open_log(3, LogConfig(cleanup_policy=("compact",)))
        log_.append_as_leader(big, 0)
        log_.append_as_leader(other, 0)
        log_.roll()
        await log_.flush()
        clean = log.cleaner.clean_log(log_, 0, now_ms=clock.now, dedupe_buffer_bytes=128 << 20)
        longest, result = await longest_turn(clean)
        assert result is not None and result.records_read == count + 1
        return longest

    print(f"log cleaner, {log.cleaner.YIELD_EVERY_RECORDS} keys a turn")
    compare(
        "a pass over a zstd batch of 400,000 records", cleaning, log.cleaner, "YIELD_EVERY_RECORDS"
    )


def bench_validator() -> None:
    count = 1_000_000
    batch = encode_batch(
        [Record(None, b"", NOW_MS) for _ in range(count)], compression=Compression.ZSTD
    )
    config = LogConfig()

    async def validating() -> float:
        work = validator.validate_records_in_slices(batch, config, NOW_MS)
        longest, _ = await longest_turn(work)
        return longest

    print(f"produce validator (Python), {validator.WALK_SLICE_RECORDS} records a turn")
    with patched(validator, "_dispatch", validator._choose({validator.NATIVE_ENV: "0"})):
        compare("a zstd batch of 1,000,000 records", validating, validator, "WALK_SLICE_RECORDS")


def image_of(names: list[str]) -> MetadataImage:
    delta = MetadataDelta(EMPTY)
    for index, name in enumerate(names):
        topic_id = uuid.UUID(int=index + 1)
        delta.replay(Topic(name, topic_id))
        delta.replay(Partition(topic_id, 0, (1,), (1,), 1))
    return delta.apply(2 * len(names), 1)


def cpu(operation: Callable[[], object], repeat: int = 1) -> float:
    """The least CPU of ROUNDS runs of ``repeat`` calls of ``operation``, per call."""
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.thread_time()
        for _ in range(repeat):
            operation()
        best = min(best, (time.thread_time() - started) / repeat)
    return best


def bench_regexes() -> None:
    # Names the slow pattern matches all through (a name it refuses early costs nothing).
    names = ["d" * (50 + i) for i in range(200)] + ["__internal"]
    image = image_of(names)

    async def resolving() -> float:
        compile_regex.cache_clear()  # every round compiles, as a broker seeing them first
        regexes = SubscriptionRegexes()
        longest, _ = await longest_turn(regexes.resolve([SLOW_BUT_LEGAL, "t-1.*", "__.*"], image))
        return longest

    print(f"KIP-848 regexes, {consumer_coordinator.REGEX_MATCH_SLICE} names a turn")
    compare("3 regexes over 201 names", resolving, consumer_coordinator, "REGEX_MATCH_SLICE")

    topics = {name: (uuid.UUID(int=i + 1), 1) for i, name in enumerate(names[:40])}
    unbounded = re2.Options()
    unbounded.log_errors = False
    unbounded.max_mem = UNSLICED
    for index, hostile in enumerate(HOSTILE):
        request = Heartbeat(
            "m", 0, "c", "h", rebalance_timeout_ms=1, subscribed_topic_regex=hostile
        )
        refused = cpu(
            lambda r=request: ConsumerGroup("g", ConsumerGroupLimits()).heartbeat(r, topics)
        )
        label = f"a heartbeat refusing hostile pattern {index}"
        if index == 0:  # 10.9 s to compile with no limit: left out of the run
            print(f"  {label:<44} {refused * 1000:>7.1f} ms")
            continue
        compiled = cpu(lambda p=hostile: (re2.purge(), re2.compile(p, unbounded)))
        print(
            f"  {label:<44} {refused * 1000:>7.1f} ms   "
            f"compiled with no limit {compiled * 1000:>7.1f} ms   x{refused / compiled:.3f}"
        )
    regexes = SubscriptionRegexes()
    asyncio.run(regexes.resolve([SLOW_BUT_LEGAL], image))
    view = TopicsView(image, regexes)
    answered = cpu(lambda: view.matching(SLOW_BUT_LEGAL), repeat=1000)
    matched = cpu(lambda: match_names(consumer_group.compile_regex(SLOW_BUT_LEGAL), names))
    print(
        f"  {'a heartbeat regex answered from resolution':<44} {answered * 1e6:>7.2f} us"
        f"   matched then {matched * 1000:>7.1f} ms   x{answered / matched:.1e}"
    )


def main() -> None:
    started = time.monotonic()
    print(f"longest turn of the loop, CPU of this thread (best of {ROUNDS}), against unsliced")
    bench_controller()
    bench_cleaner()
    bench_validator()
    bench_regexes()
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
