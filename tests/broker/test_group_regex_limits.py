"""KIP-848 subscription regexes cannot hold the broker's loop (issue 22).

On main, a ConsumerGroupHeartbeat subscribing to `(d{0,1000})` repeated 100 times (valid
RE2) held the loop 52 s: every heartbeat compiled the pattern (0.2 s) and
matched it against every topic name there (0.1 s each), all in one step. Now RE2's
max_mem bounds the compiled program (the pattern is refused with INVALID_REGULAR_EXPRESSION,
as Kafka refuses a pattern it cannot use), and the regexes a group subscribes to are
resolved a few names at a time between turns of the loop, once per set of topic names.
The tests count compiles and names matched, per turn of the loop (the CPU a turn takes is
printed by bench/bench_slices.py).
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter

import pytest
from kio.schema.errors import ErrorCode

from broker.group import consumer_coordinator, consumer_group
from broker.group.consumer_coordinator import REGEX_MATCH_SLICE, SubscriptionRegexes, TopicsView
from broker.group.consumer_group import ConsumerGroup, ConsumerGroupLimits, Heartbeat
from metadata.delta import MetadataDelta
from metadata.image import EMPTY, MetadataImage
from metadata.records import Partition, Topic
from tests.loop_turns import busy, counting, most, work_per_turn

# Both valid RE2 under the 1000-character limit: 10.9 s to compile the first, 0.14 s the
# second and then 0.07 s per name matched, without a bound on the program.
HOSTILE = ("d{0,1000}" * 100, "(d{0,1000})" * 90)
# The slowest kind of pattern RE2's limit still lets in: ~5 ms per 249-character name.
SLOW_BUT_LEGAL = "(d{0,1000})" * 10


def count_regex_work(monkeypatch: pytest.MonkeyPatch, tally: Counter[str]) -> None:
    """Patterns compiled count in tally["compiled"], names matched in tally["matched"]."""
    for module in (consumer_group, consumer_coordinator):
        compiled = counting(tally, "compiled", lambda _regex: 1, module.compile_regex)
        matched = counting(tally, "matched", lambda _pattern, names: len(names), module.match_names)
        monkeypatch.setattr(module, "compile_regex", compiled)
        monkeypatch.setattr(module, "match_names", matched)


def image_of(names: list[str]) -> MetadataImage:
    delta = MetadataDelta(EMPTY)
    for index, name in enumerate(names):
        topic_id = uuid.UUID(int=index + 1)
        delta.replay(Topic(name, topic_id))
        delta.replay(Partition(topic_id, 0, (1,), (1,), 1))
    return delta.apply(2 * len(names), 1)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_regex_over_re2s_program_limit_is_refused_at_once(
    hostile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["d" * (200 + i) for i in range(40)]
    topics = {name: (uuid.UUID(int=i + 1), 1) for i, name in enumerate(names)}
    group = ConsumerGroup("g", ConsumerGroupLimits())
    request = Heartbeat("m", 0, "c", "h", rebalance_timeout_ms=1, subscribed_topic_regex=hostile)
    tally: Counter[str] = Counter()
    count_regex_work(monkeypatch, tally)
    result = group.heartbeat(request, topics)
    assert result.error is ErrorCode.invalid_regular_expression
    # RE2's program limit: its compiler stopped once the program outgrew max_mem.
    assert "pattern too large" in (result.message or "")
    assert tally == {"compiled": 1}  # one attempt, and no name matched
    assert not group.members


def test_regexes_are_resolved_in_slices_and_once_per_set_of_topic_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    names = [f"t-{i}-" + "d" * 200 for i in range(200)] + ["d" * 240, "__internal"]
    image = image_of(names)
    regexes = SubscriptionRegexes()
    wanted = [SLOW_BUT_LEGAL, "t-1.*", "__.*"]
    tally: Counter[str] = Counter()
    count_regex_work(monkeypatch, tally)

    async def run() -> list[Counter[str]]:
        turns, _ = await work_per_turn(regexes.resolve(wanted, image), tally)
        return turns

    turns = asyncio.run(run())
    # Each regex compiled in a turn of its own, then matched against every name, at most
    # REGEX_MATCH_SLICE names a turn.
    assert tally == {"compiled": len(wanted), "matched": len(wanted) * len(names)}
    assert most(turns, "compiled") == 1
    assert not any(turn["compiled"] and turn["matched"] for turn in turns)
    assert most(turns, "matched") == REGEX_MATCH_SLICE
    slices = -(-len(names) // REGEX_MATCH_SLICE)
    assert busy(turns, "matched") == len(wanted) * slices > 10
    assert len(regexes.matching("t-1.*", image)) == 111  # t-1, t-10..t-19, t-100..t-199
    assert regexes.matching(SLOW_BUT_LEGAL, image) == {"d" * 240}
    assert regexes.matching("__.*", image) == frozenset()  # never internal topics
    # Answered from what was resolved: nothing compiled or matched at heartbeat time.
    resolved = tally.copy()
    view = TopicsView(image, regexes)
    for _ in range(100):
        assert view.matching(SLOW_BUT_LEGAL) == {"d" * 240}
    assert tally == resolved
