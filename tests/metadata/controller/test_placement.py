"""Replica placement: distinct brokers, racks spread, leaders striped, reproducible."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata.controller.placement import PlacementError, place_replicas
from metadata.image import BrokerRegistration


def registration(broker_id: int, rack: str | None = None) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id, uuid.UUID(int=broker_id), broker_id, (), (), rack, False, False
    )


@settings(max_examples=150, deadline=None)
@given(
    racks=st.lists(st.sampled_from(["a", "b", "c", None]), min_size=1, max_size=9),
    num_partitions=st.integers(1, 40),
    data=st.data(),
    seed=st.integers(0, 2**32),
)
def test_placement_spreads_replicas_racks_and_leaders(
    racks: list[str | None], num_partitions: int, data: st.DataObject, seed: int
) -> None:
    brokers = [registration(i + 1, rack) for i, rack in enumerate(racks)]
    replication_factor = data.draw(st.integers(1, len(brokers)))
    placement = place_replicas(brokers, num_partitions, replication_factor, random.Random(seed))
    assert len(placement) == num_partitions
    rack_of = {b.broker_id: b.rack or "" for b in brokers}
    all_racks = set(rack_of.values())
    for replicas in placement:
        assert len(replicas) == replication_factor
        assert len(set(replicas)) == replication_factor
        assert set(replicas) <= set(rack_of)
        # Every rack gets a replica before any rack gets a second one.
        assert len({rack_of[r] for r in replicas}) == min(replication_factor, len(all_racks))
    leaders = Counter(replicas[0] for replicas in placement)
    assert max(leaders.values()) - min(leaders.get(b.broker_id, 0) for b in brokers) <= 1
    # Same seed, same placement.
    assert placement == place_replicas(
        brokers, num_partitions, replication_factor, random.Random(seed)
    )


def test_replication_factor_above_broker_count_is_refused_with_kafkas_words() -> None:
    with pytest.raises(PlacementError) as error:
        place_replicas([registration(1)], 1, 3, random.Random(0))
    assert str(error.value) == (
        "The target replication factor of 3 cannot be reached because only 1 broker(s) are "
        "registered."
    )
    with pytest.raises(PlacementError, match="All brokers are currently fenced"):
        place_replicas([], 1, 1, random.Random(0))


def test_added_partitions_continue_the_leader_stripe() -> None:
    brokers = [registration(i) for i in (1, 2, 3)]
    first = place_replicas(brokers, 3, 2, random.Random(5))
    more = place_replicas(brokers, 3, 2, random.Random(5), start_partition=3)
    assert sorted(r[0] for r in first) == [1, 2, 3]
    assert sorted(r[0] for r in more) == [1, 2, 3]


def test_per_core_brokers_sharing_their_hosts_rack_get_replicas_on_different_hosts() -> None:
    """The per-core layout (config/per-core): two broker processes per host, broker.rack =
    the host. A partition's replicas land on as many hosts as its replication factor allows,
    and leaders still stripe over every process, so every core leads partitions."""
    hosts = {1: "host-a", 2: "host-a", 3: "host-b", 4: "host-b", 5: "host-c", 6: "host-c"}
    brokers = [registration(broker_id, host) for broker_id, host in hosts.items()]
    for replication_factor, distinct_hosts in ((2, 2), (3, 3), (4, 3)):
        placement = place_replicas(brokers, 12, replication_factor, random.Random(7))
        for replicas in placement:
            assert len({hosts[r] for r in replicas}) == distinct_hosts, replicas
        assert Counter(replicas[0] for replicas in placement) == dict.fromkeys(hosts, 2)
