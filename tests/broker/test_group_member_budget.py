"""group.coordinator.member.metadata.max.bytes bounds what members keep (issue 22).

On main, 120 JoinGroups of 1 MiB metadata parked in a rebalance took RSS from 73 to 875 MB
(200 such members), and 200 KIP-848 members subscribing to 3,900 topic names each +229 MB:
nothing bounded member metadata across groups. Now a member that would take the total past
the budget is refused with GROUP_MAX_SIZE_REACHED, and what leaves gives its bytes back.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker.group.classic import JoinRequest
from broker.group.consumer_group import Heartbeat
from broker.group.member_budget import protocols_bytes, subscription_bytes
from tests.broker.test_group_coordinator import Clock, Partitions, run, started

MIB = 1 << 20


def join_request(metadata: bytes) -> JoinRequest:
    return JoinRequest(
        "", None, "c", "/h", 30_000, 300_000, "consumer", (("range", metadata),), False, True
    )


def test_classic_joins_parked_in_a_rebalance_are_bounded_across_groups() -> None:
    async def body() -> None:
        coordinator = await started(
            Partitions(),
            Clock(),
            group_coordinator_member_metadata_max_bytes=3 * MIB,
            group_initial_rebalance_delay_ms=600_000,  # every join parks
        )
        big = b"m" * MIB
        parked = [
            asyncio.ensure_future(coordinator.join(f"g{i}", join_request(big))) for i in range(2)
        ]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in parked)  # in PreparingRebalance
        assert coordinator.member_budget.used_bytes == 2 * protocols_bytes((("range", big),))
        refused = await asyncio.wait_for(coordinator.join("g2", join_request(big)), 5)
        assert refused.error is ErrorCode.group_max_size_reached
        # A small member still fits beside them; the refused one kept nothing.
        small = asyncio.ensure_future(coordinator.join("g3", join_request(b"s" * 100)))
        await asyncio.sleep(0.05)
        assert not small.done()
        assert coordinator.member_budget.used_bytes < 3 * MIB
        await coordinator.close()
        for task in [*parked, small]:
            task.cancel()

    run(body())


def test_kip848_subscriptions_are_bounded_across_groups_and_freed_on_leaving() -> None:
    names = tuple(f"topic-{i:05d}" for i in range(3900))
    per_member = subscription_bytes(names, None)

    async def body() -> None:
        coordinator = await started(
            Partitions(), Clock(), group_coordinator_member_metadata_max_bytes=3 * per_member
        )
        consumer = coordinator.consumer

        def joining(member: str) -> Heartbeat:
            return Heartbeat(
                member, 0, "c", "/h", rebalance_timeout_ms=30_000, subscribed_topic_names=names
            )

        for i in range(3):
            result = await consumer.heartbeat(f"cg{i}", joining(f"m{i}"))
            assert result.error is ErrorCode.none, result
        assert coordinator.member_budget.used_bytes == 3 * per_member
        refused = await consumer.heartbeat("cg3", joining("m3"))
        assert refused.error is ErrorCode.group_max_size_reached
        assert "group.coordinator.member.metadata.max.bytes" in (refused.message or "")
        left = await consumer.heartbeat("cg0", Heartbeat("m0", -1, "c", "/h"))
        assert left.error is ErrorCode.none
        assert coordinator.member_budget.used_bytes == 2 * per_member
        joined = await consumer.heartbeat("cg3", joining("m3"))
        assert joined.error is ErrorCode.none
        await coordinator.close()

    run(body())
