"""Each invariant of the metadata scenario fires on a crafted image sequence (or quorum
state) that breaks it, and stays quiet on the nearest honest one."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import pytest

from log.runtime import Runtime
from metadata.image import (
    BrokerRegistration,
    ClusterImage,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
    TopicsImage,
)
from metadata.records import NO_LEADER
from raft.core import HighWatermarkAdvanced, Role, RoleChanged
from sim.run import RunConfig
from sim.scenarios.metadata import Cluster, Op
from sim.scenarios.metadata_checks import Checker, ImageWatcher, LeaderWatcher
from sim.world import World
from tests.sim.fakes import Process

TOPIC_ID = uuid.UUID(int=7)
BROKERS = (4, 5, 6)


def image(
    offset: int,
    leader: int = 4,
    isr: tuple[int, ...] = (4, 5),
    fenced: frozenset[int] = frozenset(),
    registered: tuple[int, ...] = BROKERS,
    replicas: tuple[int, ...] = (4, 5, 6),
) -> MetadataImage:
    brokers = {
        b: BrokerRegistration(b, uuid.UUID(int=b), 1, (), (), None, b in fenced, False)
        for b in registered
    }
    partition = PartitionRegistration(replicas, isr, leader, offset, offset)
    topic = TopicImage("t0", TOPIC_ID, {0: partition})
    return MetadataImage(
        offset=offset,
        cluster=ClusterImage(brokers),
        topics=TopicsImage({TOPIC_ID: topic}, {"t0": TOPIC_ID}),
    )


@pytest.fixture
def checker(world: World) -> Checker:
    return Checker(world.trace)


def watcher(checker: Checker, name: str = "n4") -> ImageWatcher:
    return ImageWatcher(checker, Process(name), 1)  # type: ignore[arg-type]


def kind(checker: Checker) -> str | None:
    return None if checker.violation is None else checker.violation.split(":")[0]


def test_honest_images_raise_nothing(checker: Checker) -> None:
    n4, n5 = watcher(checker, "n4"), watcher(checker, "n5")
    first, second = image(10), image(11, leader=5, isr=(5,))
    for w in (n4, n5):
        w.on_image(MetadataImage(), first, True)
        w.on_image(first, second, False)
    assert checker.violation is None


def test_applied_monotone_fires_when_a_node_goes_back(checker: Checker) -> None:
    n4 = watcher(checker)
    n4.on_image(MetadataImage(), image(10), True)
    n4.on_image(image(10), image(8), False)
    assert kind(checker) == "applied-monotone"


def test_image_agreement_fires_on_two_images_at_one_offset(checker: Checker) -> None:
    watcher(checker, "n4").on_image(MetadataImage(), image(10), True)
    watcher(checker, "n5").on_image(MetadataImage(), image(10, leader=5), True)
    assert kind(checker) == "image-agreement"


def test_leader_in_isr_fires_on_a_leader_outside_its_isr(checker: Checker) -> None:
    watcher(checker).on_image(MetadataImage(), image(10, leader=6, isr=(4, 5)), True)
    assert kind(checker) == "leader-in-isr"


def test_leader_from_isr_fires_on_a_leader_from_outside_the_previous_isr(
    checker: Checker,
) -> None:
    n4 = watcher(checker)
    n4.on_image(MetadataImage(), image(10, leader=4, isr=(4, 5)), True)
    n4.on_image(image(10, leader=4, isr=(4, 5)), image(11, leader=6, isr=(6,)), False)
    assert kind(checker) == "leader-from-isr"


def test_a_completed_reassignment_may_hand_leadership_to_a_replica_it_just_added(
    checker: Checker,
) -> None:
    """Moving (4, 5) to (6, 5): leader 4's AlterPartition puts 6 in the ISR, which completes
    the move in the same record and makes 6 (the first target replica) the leader."""
    n4 = watcher(checker)
    moving = image(10, leader=4, isr=(4, 5), replicas=(6, 5, 4))
    n4.on_image(MetadataImage(), moving, True)
    n4.on_image(moving, image(11, leader=6, isr=(5, 6), replicas=(6, 5)), False)
    assert checker.violation is None


def test_an_eligible_leader_replica_may_lead_after_the_isr_empties(checker: Checker) -> None:
    """KIP-966: a leader from the previous ELR is clean, one from neither ISR nor ELR not."""
    n4 = watcher(checker)
    partition = PartitionRegistration((4, 5, 6), (), NO_LEADER, 10, 10, elr=(5,))
    with_elr = MetadataImage(
        offset=10,
        cluster=image(10).cluster,
        topics=TopicsImage(
            {TOPIC_ID: TopicImage("t0", TOPIC_ID, {0: partition})}, {"t0": TOPIC_ID}
        ),
    )
    n4.on_image(MetadataImage(), with_elr, True)
    n4.on_image(with_elr, image(11, leader=5, isr=(5,)), False)
    assert checker.violation is None
    n4.on_image(with_elr, image(12, leader=6, isr=(6,)), False)
    assert kind(checker) == "leader-from-isr"


def test_leader_from_isr_does_not_compare_across_a_snapshot(checker: Checker) -> None:
    n4 = watcher(checker)
    n4.on_image(image(10, leader=4, isr=(4, 5)), image(11, leader=6, isr=(6,)), True)
    assert checker.violation is None


@pytest.mark.parametrize(
    "leader_state",
    [{"fenced": frozenset({4})}, {"registered": (5, 6)}],
    ids=["fenced", "unregistered"],
)
def test_fenced_leader_fires_on_a_partition_led_by_a_fenced_broker(
    checker: Checker, leader_state: dict
) -> None:
    watcher(checker).on_image(MetadataImage(), image(10, **leader_state), True)
    assert kind(checker) == "fenced-leader"


def test_shutdown_leader_fires_on_a_broker_let_go_while_it_still_leads(
    checker: Checker,
) -> None:
    # Broker 4 (epoch 1) stopped after its controlled shutdown with the log committed to 12.
    checker.expect_leads_nothing(4, 1, 12)
    n5 = watcher(checker, "n5")
    n5.on_image(MetadataImage(), image(11, leader=4), True)  # not yet that far: not judged
    assert checker.violation is None
    n5.on_image(image(11, leader=4), image(12, leader=4), False)
    assert kind(checker) == "shutdown-leader"


def test_shutdown_leader_passes_a_moved_leadership_or_a_new_registration(
    checker: Checker,
) -> None:
    checker.expect_leads_nothing(4, 1, 12)  # its leadership moved to 5
    checker.expect_leads_nothing(5, 0, 12)  # 5 leads, but as a later registration (epoch 1)
    watcher(checker, "n6").on_image(MetadataImage(), image(13, leader=5, isr=(5,)), True)
    assert checker.violation is None and checker.stopped == []


def test_a_dead_incarnation_reports_nothing(checker: Checker) -> None:
    n4 = watcher(checker)
    n4.on_image(MetadataImage(), image(10), True)
    n4.process.alive = False
    n4.on_image(image(10), image(8, leader=6), False)
    assert checker.violation is None


@pytest.mark.parametrize(
    ("offset", "unfenced_by", "fires"),
    [
        (12, (False, 10), False),  # asked to be unfenced, having replayed its registration
        (12, None, False),  # unfenced by an earlier incarnation's heartbeat
        (12, (True, 10), True),  # the heartbeat still asked to stay fenced
        (12, (False, 9), True),  # the heartbeat reported an offset before its registration
        (10, (False, 10), True),  # serving at (not past) its registration
    ],
)
def test_unfenced_early_fires_on_a_broker_unfenced_or_serving_too_soon(
    checker: Checker, offset: int, unfenced_by: tuple[bool, int] | None, fires: bool
) -> None:
    checker.check_serving("n4", 10, offset, unfenced_by)
    assert kind(checker) == ("unfenced-early" if fires else None)


@dataclass(slots=True)
class Raft:
    role: Role
    epoch: int
    core: object = field(default_factory=object)


@dataclass(slots=True)
class Node:
    raft: Raft


async def _idle(runtime: Runtime) -> None:
    await asyncio.Event().wait()


@pytest.mark.parametrize("resigns", [False, True])
def test_check_quorum_fires_on_a_stale_controller_leading_beside_a_new_one(
    resigns: bool,
) -> None:
    """Without check quorum a cut-off leader keeps leading (the no-check-quorum bug)."""
    with World(seed=1) as world:
        checker = Checker(world.trace)
        cluster = Cluster(world, RunConfig("metadata", 1), checker, ["n1", "n2", "n3"], [])
        for name in cluster.controllers:
            world.add_process(name).start(_idle)
        stale, fresh = Node(Raft(Role.LEADER, 1)), Node(Raft(Role.LEADER, 2))
        cluster.nodes = {"n1": stale, "n2": fresh, "n3": Node(Raft(Role.FOLLOWER, 2))}  # type: ignore[dict-item]

        async def drive() -> None:
            watching = asyncio.ensure_future(cluster.watch_leaders())
            await asyncio.sleep(1.0)
            if resigns:
                stale.raft.role = Role.RESIGNED
            await asyncio.sleep(2.0)
            watching.cancel()

        world.run(drive())
        assert kind(checker) == (None if resigns else "check-quorum")


def _history(final_partitions: int | None) -> list[Op]:
    """Two lanes race to create t0 (one wins), a third deletes it with unknown outcome,
    then the final read."""
    ops = [
        Op("client:0", "create", "t0", 3, 0, 1, "ok", None, None, 40, 4),
        Op("client:1", "create", "t0", 2, 10, 2, "fail", None, "TOPIC_ALREADY_EXISTS", 50, 5),
        Op("client:2", "delete", "t0", None, 20, 3, "info", None, "REQUEST_TIMED_OUT", 60, 6),
    ]
    ops.append(Op("final", "read", "t0", None, 100, 7, "ok", final_partitions, None, 100, 8))
    return ops


def _judge(history: list[Op], max_steps: int | None = None) -> Checker:
    with World(seed=1) as world:
        checker = Checker(world.trace)
        cluster = Cluster(world, RunConfig("metadata", 1), checker, ["n1"], ["n2"])
        cluster.history = history
        if max_steps is None:
            cluster.check_linearizable()
        else:
            cluster.check_linearizable(max_steps)
        return checker


@pytest.mark.parametrize("final", [3, None])  # the delete took effect, or did not
def test_a_linearizable_topic_history_passes(final: int | None) -> None:
    checker = _judge(_history(final))
    assert checker.violation is None and checker.unknown is None


def test_a_lost_acknowledged_create_is_a_linearizability_violation() -> None:
    checker = _judge(_history(1))  # no operation ever made 1 partition
    assert kind(checker) == "linearizability" and checker.unknown is None


@pytest.mark.parametrize(("final", "fires"), [(7, False), (None, True)])
def test_a_lost_acknowledged_broker_config_change_is_a_linearizability_violation(
    final: int | None, fires: bool
) -> None:
    key = "broker:1001"
    history = [
        Op("client:c", "alter-broker-config", key, 7, 0, 1, "ok", None, None, 40, 2),
        Op("final", "read-broker-config", key, None, 100, 3, "ok", final, None, 100, 4),
    ]
    checker = _judge(history)
    assert kind(checker) == ("linearizability" if fires else None)
    assert not fires or (checker.violation or "").startswith(f"linearizability: config {key}:")


def test_a_search_out_of_budget_is_unknown_never_a_pass() -> None:
    checker = _judge(_history(3), max_steps=2)
    assert checker.violation is None
    assert (checker.unknown or "").startswith("linearizability: topic t0 undecided after")


class EpochLog:
    """A controller's metadata log as the leader watcher reads it: the epoch of each entry."""

    def __init__(self, *epochs: int) -> None:
        self.epochs = epochs

    def epoch_for_offset(self, offset: int) -> int:
        return self.epochs[offset]


@pytest.mark.parametrize(("epochs", "fires"), [((1, 1, 2), False), ((1, 1, 1, 2), True)])
def test_commit_own_epoch_fires_on_a_controller_committing_only_older_entries(
    checker: Checker, epochs: tuple[int, ...], fires: bool
) -> None:
    log = EpochLog(*epochs)
    leader = LeaderWatcher(checker, Process("n1"), 1, lambda: log)  # type: ignore[arg-type]
    leader.handle_event(HighWatermarkAdvanced(2))  # a follower's high watermark: not checked
    leader.handle_event(RoleChanged(Role.LEADER, 2, 1))
    leader.handle_event(HighWatermarkAdvanced(3))
    assert kind(checker) == ("commit-own-epoch" if fires else None)


class FakeNode:
    """A KraftNode whose graceful shutdown takes ``delay_s``."""

    stopped: list[FakeNode] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.lifecycle = None
        self.lifecycle_ready = None
        self.delay_s = 0.5

    async def start(self) -> None:
        pass

    async def wait(self) -> None:
        await asyncio.Event().wait()

    async def shutdown(self) -> None:
        FakeNode.stopped.append(self)
        await asyncio.sleep(self.delay_s)


@pytest.mark.parametrize("built", [False, True])
def test_a_sigterm_right_after_a_restart_never_runs_the_dead_incarnations_shutdown(
    monkeypatch: pytest.MonkeyPatch, built: bool
) -> None:
    """Seed 19 (metadata, all faults): supervision restarted a broker and the same nemesis
    step sent it SIGTERM before its new ``main`` ran, so the shutdown that ran was the dead
    incarnation's node's (a controlled shutdown its cancelled heartbeat loop could never
    finish: the broker's 30 s timeout) while the new incarnation served on: a
    controlled-shutdown violation. A SIGTERM then is like one before the first start: none.
    Once the new node is built, SIGTERM stops it as usual."""
    import sim.scenarios.metadata as metadata
    from sim.nemesis import Nemesis

    monkeypatch.setattr(metadata, "KraftNode", FakeNode)
    FakeNode.stopped = []
    with World(seed=1) as world:
        checker = Checker(world.trace)
        cluster = Cluster(world, RunConfig("metadata", 1), checker, ["n1"], ["n4"])
        process = world.add_process("n4")
        process.start(lambda runtime: cluster.main(runtime, process))
        nemesis = Nemesis(world, ["n4"], ("skew",))

        async def drive() -> None:
            await asyncio.sleep(1.0)
            dead = cluster.nodes["n4"]
            assert isinstance(dead, FakeNode)
            dead.delay_s = 30.0  # the dead incarnation's controlled shutdown never finishes
            process.crash()
            await asyncio.sleep(1.0)
            process.restart()
            if built:
                await asyncio.sleep(0.1)  # the new incarnation's main has built its node
            cluster.terminate(nemesis, "n4", 60.0)
            await asyncio.sleep(25.0)
            assert dead not in FakeNode.stopped

        world.run(drive())
        assert process.incarnation == 2 and process.alive is not built
        assert [id(node) for node in FakeNode.stopped] == (
            [id(cluster.nodes["n4"])] if built else []
        )
        assert checker.violation is None
