"""auto.leader.rebalance.enable: the controller gives partitions back to their preferred
leader (first replica) when it is usable and in the ISR, and only then."""

from __future__ import annotations

from metadata.controller.election import preferred_leader_changes
from metadata.records import BrokerRegistrationChange, FenceBroker
from tests.metadata.controller.support import brokers, build, context, with_topic


def test_preferred_leaders_come_back_only_when_usable_and_in_sync() -> None:
    image = with_topic(
        brokers(1, 2, 3),
        "t",
        ((1, 2, 3), (1, 2, 3), 2),  # 0: preferred 1 in sync and usable: moves back
        ((2, 3, 1), (3, 1), 3),  # 1: preferred 2 out of the ISR: stays
        ((3, 1, 2), (3, 1, 2), 3),  # 2: already led by its preferred replica
        ((1, 3, 2), (1, 3), 3),  # 3: preferred 1 usable and in sync: moves back
    )
    changes = preferred_leader_changes(context(image), limit=10)
    assert [(c.partition_id, c.leader, c.isr) for c in changes] == [(0, 1, None), (3, 1, None)]
    assert [c.partition_id for c in preferred_leader_changes(context(image), limit=1)] == [0]
    fenced = build(FenceBroker(1, 101), image=image)
    assert preferred_leader_changes(context(fenced), limit=10) == []
    leaving = build(BrokerRegistrationChange(1, 101, in_controlled_shutdown=True), image=image)
    assert preferred_leader_changes(context(leaving), limit=10) == []
