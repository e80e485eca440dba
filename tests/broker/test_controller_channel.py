"""broker/controller_channel.py: finding the active controller among the voters."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
from kio.schema.create_topics.v7 import request as create_request
from kio.schema.create_topics.v7 import response as create_response
from kio.schema.elect_leaders.v0 import response as elect_v0
from kio.schema.elect_leaders.v2 import response as elect_v2
from kio.schema.errors import ErrorCode

from broker.controller_channel import ControllerChannel, is_not_controller
from broker.forwarding import forwarded_error_response
from protocol import wire
from protocol.entities import make
from protocol.server import serve_connection

SUPPORTED = {19: (2, 7)}


def create_topics(*names: str) -> Any:
    topics = tuple(
        make(
            create_request.CreatableTopic, {"name": n, "num_partitions": 1, "replication_factor": 1}
        )
        for n in names
    )
    return make(create_request.CreateTopicsRequest, {"topics": topics})


def answer(request: Any, code: ErrorCode) -> Any:
    return forwarded_error_response(request, code, None)


class FakeVoter:
    """A voter that answers CreateTopics as the active controller or with NOT_CONTROLLER."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.requests = 0

    async def handle(self, _header: wire.RequestHeader, request: object) -> object | None:
        self.requests += 1
        return answer(request, ErrorCode.none if self.active else ErrorCode.not_controller)


@asynccontextmanager
async def voters(*roles: str) -> AsyncIterator[tuple[dict[int, tuple[str, int]], list[FakeVoter]]]:
    """Voters 1.. with roles "active", "standby" (answers NOT_CONTROLLER) or "dead"."""
    async with AsyncExitStack() as stack:
        addresses: dict[int, tuple[str, int]] = {}
        fakes = []
        for node_id, role in enumerate(roles, start=1):
            fake = FakeVoter(role == "active")
            fakes.append(fake)

            async def on_connection(reader: Any, writer: Any, fake: FakeVoter = fake) -> None:
                await serve_connection(reader, writer, fake.handle, SUPPORTED)

            server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            if role == "dead":
                server.close()
                await server.wait_closed()
            else:
                stack.callback(server.close)
            addresses[node_id] = ("127.0.0.1", port)
        yield addresses, fakes


@pytest.mark.parametrize("seed", range(4))
def test_send_finds_the_active_controller_and_sticks_to_it(seed: int) -> None:
    async def run() -> None:
        async with voters("dead", "standby", "active") as (addresses, fakes):
            channel = ControllerChannel(addresses, "broker-9", random.Random(seed))
            response: Any = await channel.send(create_topics("a"), timeout_s=10)
            assert [t.error_code for t in response.topics] == [ErrorCode.none]
            assert channel.controller_id == 3
            asked = fakes[2].requests
            await channel.send(create_topics("b"), timeout_s=10)
            assert fakes[2].requests == asked + 1
            assert fakes[1].requests <= 1  # asked at most once, before the active one answered
            await channel.close()

    asyncio.run(run())


def test_only_not_controller_answers_until_the_deadline_are_passed_on() -> None:
    async def run() -> Any:
        async with voters("standby", "standby") as (addresses, fakes):
            channel = ControllerChannel(addresses, "broker-9", random.Random(1))
            response = await channel.send(create_topics("a", "b"), timeout_s=0.3)
            await channel.close()
            assert fakes[0].requests + fakes[1].requests >= 2
            return response

    response = asyncio.run(run())
    assert [t.error_code for t in response.topics] == [ErrorCode.not_controller] * 2


def test_no_reachable_voter_is_a_timeout() -> None:
    async def run() -> None:
        async with voters("dead", "dead") as (addresses, _fakes):
            channel = ControllerChannel(addresses, "broker-9", random.Random(1))
            loop = asyncio.get_running_loop()
            started = loop.time()
            with pytest.raises(TimeoutError):
                await channel.send(create_topics("a"), timeout_s=0.3)
            assert loop.time() - started < 2
            await channel.close()

    asyncio.run(run())


def test_not_controller_is_read_from_the_top_level_or_from_every_item() -> None:
    request = create_topics("a", "b")
    assert is_not_controller(answer(request, ErrorCode.not_controller))
    assert not is_not_controller(answer(request, ErrorCode.none))
    mixed = make(
        create_response.CreateTopicsResponse,
        {
            "topics": (
                make(
                    create_response.CreatableTopicResult,
                    {"name": "a", "error_code": ErrorCode.not_controller},
                ),
                make(
                    create_response.CreatableTopicResult,
                    {"name": "b", "error_code": ErrorCode.none},
                ),
            )
        },
    )
    assert not is_not_controller(mixed)
    assert not is_not_controller(answer(create_topics(), ErrorCode.not_controller))  # no items
    top = make(elect_v2.ElectLeadersResponse, {"error_code": ErrorCode.not_controller})
    assert is_not_controller(top)
    nested = make(
        elect_v0.ElectLeadersResponse,
        {
            "replica_election_results": (
                make(
                    elect_v0.ReplicaElectionResult,
                    {
                        "topic": "a",
                        "partition_result": (
                            make(
                                elect_v0.PartitionResult,
                                {"partition_id": 0, "error_code": ErrorCode.not_controller},
                            ),
                        ),
                    },
                ),
            )
        },
    )
    assert is_not_controller(nested)
