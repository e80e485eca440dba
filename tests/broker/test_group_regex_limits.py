"""KIP-848 subscription regexes cannot hold the broker's loop (issue 22).

On main, a ConsumerGroupHeartbeat subscribing to `(d{0,1000})` repeated 100 times (valid
RE2) held the loop 52 s: every heartbeat compiled the pattern (0.2 s) and
matched it against every topic name there (0.1 s each), all in one step. Now RE2's
max_mem bounds the compiled program (the pattern is refused with INVALID_REGULAR_EXPRESSION,
as Kafka refuses a pattern it cannot use), and the regexes a group subscribes to are
resolved a few names at a time between turns of the loop, once per set of topic names.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.group.consumer_coordinator import SubscriptionRegexes, TopicsView
from broker.group.consumer_group import ConsumerGroup, ConsumerGroupLimits, Heartbeat
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.records import Partition, Topic

# Both valid RE2 under the 1000-character limit: 10.9 s to compile the first, 0.14 s the
# second and then 0.07 s per name matched, without a bound on the program.
HOSTILE = ("d{0,1000}" * 100, "(d{0,1000})" * 90)
# The slowest kind of pattern RE2's limit still lets in: ~5 ms per 249-character name.
SLOW_BUT_LEGAL = "(d{0,1000})" * 10
SLICE_CPU_BOUND_S = 0.05  # the loop-slice target of issue 22


def image_of(names: list[str]) -> MetadataImage:
    delta = MetadataDelta(EMPTY)
    for index, name in enumerate(names):
        topic_id = uuid.UUID(int=index + 1)
        delta.replay(Topic(name, topic_id))
        delta.replay(Partition(topic_id, 0, (1,), (1,), 1))
    return delta.apply(2 * len(names), 1)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_regex_over_re2s_program_limit_is_refused_at_once(hostile: str) -> None:
    names = ["d" * (200 + i) for i in range(40)]
    topics = {name: (uuid.UUID(int=i + 1), 1) for i, name in enumerate(names)}
    group = ConsumerGroup("g", ConsumerGroupLimits())
    request = Heartbeat("m", 0, "c", "h", rebalance_timeout_ms=1, subscribed_topic_regex=hostile)
    started = time.thread_time()
    result = group.heartbeat(request, topics)
    spent = time.thread_time() - started
    assert result.error is ErrorCode.invalid_regular_expression
    assert "pattern too large" in (result.message or "")
    assert spent < 0.5, f"{spent:.2f} s of CPU for a refused regex"
    assert not group.members


def test_regexes_are_resolved_in_slices_and_once_per_set_of_topic_names() -> None:
    names = [f"t-{i}-" + "d" * 200 for i in range(200)] + ["d" * 240, "__internal"]
    image = image_of(names)
    regexes = SubscriptionRegexes()

    async def run() -> tuple[float, int]:
        loop = asyncio.get_running_loop()
        longest = 0.0
        done = False

        async def probe() -> None:
            nonlocal longest
            last = time.thread_time()
            while not done:
                await asyncio.sleep(0)
                now = time.thread_time()
                longest, last = max(longest, now - last), now

        task = loop.create_task(probe())
        await asyncio.sleep(0)
        await regexes.resolve([SLOW_BUT_LEGAL, "t-1.*", "__.*"], image)
        done = True
        await task
        return longest, len(regexes.matching("t-1.*", image))

    longest, ones = asyncio.run(run())
    assert longest < SLICE_CPU_BOUND_S, f"a resolution step took {longest * 1000:.0f} ms of CPU"
    assert ones == 111  # t-1, t-10..t-19, t-100..t-199
    assert regexes.matching(SLOW_BUT_LEGAL, image) == {"d" * 240}
    assert regexes.matching("__.*", image) == frozenset()  # never internal topics
    # Answered from what was resolved: no matching at heartbeat time.
    started = time.thread_time()
    view = TopicsView(image, regexes)
    for _ in range(100):
        view.matching(SLOW_BUT_LEGAL)
    assert time.thread_time() - started < 0.05
