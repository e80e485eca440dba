"""The controller works on a big CreateTopics or DeleteTopics a slice of topics at a time.

On main, a CreateTopics with validate_only naming 200,000 topics was one step of the
controller's loop (44 s of CPU on a loaded host: the quorum failed over four times), and a
DeleteTopics of 200,000 names 27 s. Now TOPICS_PER_SLICE topics are worked on per turn of
the loop, each slice's records proposed before the next, and the answer is the one a
single pass gives: every name answered, in order, duplicates and the record budget counted
over the whole request.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from metadata.controller.context import MAX_RECORDS_PER_USER_OP
from metadata.controller.topics import TOPICS_PER_SLICE
from tests.metadata.controller.support import request_module, roundtrip
from tests.metadata.controller.test_quorum_controller import Controller, run

NAMES = 20_000
MISSING = 100_000  # names DeleteTopics looks up: ~5 us each
STEP_CPU_BOUND_S = 0.25  # one slice: ~0.05 s of CPU on an idle core, 5x for a loaded host


async def longest_step(work: Any) -> tuple[float, Any]:
    """(the longest CPU time the loop went without running a probe while ``work`` ran,
    its result)."""
    longest = 0.0
    done = False

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


def creatable(module: Any, name: str) -> Any:
    return module.CreatableTopic(
        name=name, num_partitions=1, replication_factor=1, assignments=(), configs=()
    )


def test_a_create_topics_of_20000_names_is_worked_on_in_slices(tmp_path: Path) -> None:
    module = request_module(19, 7)
    names = [f"t{i}" for i in range(NAMES)] + ["t7"]  # one duplicate, far from its first
    request = module.CreateTopicsRequest(
        topics=tuple(creatable(module, n) for n in names), validate_only=True
    )

    async def scenario() -> tuple[float, Any, int]:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        hold, response = await longest_step(node.controller.handle(19, 7, request))
        topics = len(node.image.topics.by_name)
        await node.stop()
        return hold, roundtrip(response), topics

    hold, response, topics = run(scenario())
    assert hold < STEP_CPU_BOUND_S, f"a controller step took {hold * 1000:.0f} ms of CPU"
    assert NAMES > 10 * TOPICS_PER_SLICE and topics == 0  # validate_only wrote nothing
    codes = [(r.name, r.error_code) for r in response.topics]
    assert [name for name, _ in codes] == names
    assert codes[7] == ("t7", ErrorCode.invalid_request) == codes[-1]
    ok = sum(code == ErrorCode.none for _, code in codes)
    assert ok == MAX_RECORDS_PER_USER_OP // 2  # two records a topic, then POLICY_VIOLATION
    assert codes[ok + 1][1] == ErrorCode.policy_violation


def test_a_delete_topics_in_slices_removes_each_topic_once_and_answers_every_name(
    tmp_path: Path,
) -> None:
    created = 3 * TOPICS_PER_SLICE
    create_module = request_module(19, 7)
    create = create_module.CreateTopicsRequest(
        topics=tuple(creatable(create_module, f"d{i}") for i in range(created))
    )
    module = request_module(20, 6)

    async def scenario() -> tuple[float, Any, int]:
        node = Controller(tmp_path)
        await node.start()
        await node.heartbeat(1, await node.register(1), offset=node.image.offset)
        await node.call(19, 7, create)
        first_id = node.image.topics.by_name["d0"]
        wanted = [module.DeleteTopicState(name=f"d{i}", topic_id=None) for i in range(created)]
        wanted += [module.DeleteTopicState(name=f"m{i}", topic_id=None) for i in range(MISSING)]
        # The first topic again, by id, in a later slice: removed once, answered twice.
        wanted.append(module.DeleteTopicState(name=None, topic_id=first_id))
        request = module.DeleteTopicsRequest(topics=tuple(wanted), timeout=timedelta(seconds=30))
        hold, response = await longest_step(node.controller.handle(20, 6, request))
        left = len(node.image.topics.by_name)
        await node.stop()
        return hold, roundtrip(response), left

    hold, response, left = run(scenario())
    assert hold < STEP_CPU_BOUND_S, f"a controller step took {hold * 1000:.0f} ms of CPU"
    assert left == 0
    codes = [r.error_code for r in response.responses]
    assert len(codes) == created + MISSING + 1
    assert codes[:created] == [ErrorCode.none] * created
    assert set(codes[created:-1]) == {ErrorCode.unknown_topic_or_partition}
    assert codes[-1] == ErrorCode.none and response.responses[-1].name == "d0"
    assert response.responses[-1].topic_id != uuid.UUID(int=0)
