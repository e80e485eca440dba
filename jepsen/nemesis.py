"""The nemesis of a real run: one fault at a time on a schedule drawn from the seed, each
held for a while and undone, every change written to the trace with its time.

Faults (``--nemesis partition,kill,pause,clock,netem,depose-controller``, or ``all``):
  partition  iptables DROP rules in the nodes' namespaces, one of: halves (a random split
             into two sides), isolate-leader (the last seen leader of a random log, the
             metadata quorum's or a partition's, cut off from every node), one-way (one
             node stops hearing another), bridge (two sides only a middle node reaches)
  kill       SIGKILL a node (half the time a leader), restarted when the hold ends
  pause      SIGSTOP a node, SIGCONT when the hold ends
  clock      a node's clock jumps by up to +-60 s (libfaketime), back when the hold ends
  netem      delay, jitter and loss on a node's link (tc netem; without sch_netem a tbf
             rate limit and random iptables drops: jepsen/netns.py)
  depose-controller
             the active controller cut off from the other controllers only (the metadata
             scenario's fault): brokers still forward it admin requests until it resigns
The harness's clients are never cut off: rules name only the nodes' addresses.

The schedule (which fault, which node, how long) is a function of the seed; a target named
by role ("the leader") resolves to whichever node that is at the time.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from jepsen.backend import Backend
from jepsen.cluster import Cluster, node_name
from jepsen.history import Recorder
from jepsen.watch import METADATA_LOG, LeaderWatch
from sim.scenarios.metadata import DEPOSE_MIN_S

NEMESES = ("partition", "kill", "pause", "clock", "netem", "depose-controller")
PARTITIONS = ("halves", "isolate-leader", "one-way", "bridge")
INTERVAL_S = (1.0, 4.0)  # quiet time between two faults
# How long a fault lasts: up to past broker.session.timeout.ms (9 s), so a cut-off or paused
# leader is fenced and replaced, and a cut follower leaves the ISR.
HOLD_S = (3.0, 12.0)
CLOCK_JUMP_S = 60.0


def parse_nemeses(spec: str) -> tuple[str, ...]:
    """``all``, ``none`` or a comma list of NEMESES; ValueError names an unknown one."""
    if spec == "all":
        return NEMESES
    names = tuple(name.strip() for name in spec.split(",") if name.strip() and spec != "none")
    unknown = [name for name in names if name not in NEMESES]
    if unknown:
        raise ValueError(f"unknown nemesis {unknown[0]!r}; choose from {', '.join(NEMESES)}")
    return names


@dataclass(slots=True)
class Nemesis:
    """Injects faults until ``stop``; ``heal`` ends whatever is in force."""

    cluster: Cluster
    backend: Backend
    recorder: Recorder
    watch: LeaderWatch
    kinds: tuple[str, ...]
    seed: int
    stop: threading.Event = field(default_factory=threading.Event)
    injected: int = 0

    def run(self) -> None:
        rng = random.Random(f"nemesis-{self.seed}")
        while self.kinds and not self.stop.wait(rng.uniform(*INTERVAL_S)):
            self.cluster.reap()
            kind = rng.choice(self.kinds)
            hold = rng.uniform(*HOLD_S)
            if kind == "depose-controller":  # long enough for the others to elect a leader
                hold = max(hold, DEPOSE_MIN_S)
            undo = self._inject(kind, rng)
            self.injected += 1
            self.stop.wait(hold)
            undo()

    def _nodes(self) -> list[int]:
        return sorted(self.cluster.props)

    def _leader(self, rng: random.Random) -> int | None:
        logs = sorted(self.watch.leaders)
        pick = rng.random()  # drawn even when nothing is known, to keep the schedule
        return self.watch.leaders[logs[int(pick * len(logs))]][0] if logs else None

    def _inject(self, kind: str, rng: random.Random) -> Callable[[], None]:
        nodes = self._nodes()
        if kind == "partition":
            return self._partition(rng.choice(PARTITIONS), nodes, rng)
        if kind == "depose-controller":
            return self._depose()
        node = rng.choice(nodes)
        if kind == "kill":
            leader = self._leader(rng)
            node = leader if rng.random() < 0.5 and leader is not None else node
            self.cluster.kill(node)
            return lambda: self.cluster.start(node)
        if kind == "pause":
            self.cluster.pause(node)
            return lambda: self.cluster.resume(node)
        if kind == "clock":
            self.cluster.set_clock(node, rng.uniform(-CLOCK_JUMP_S, CLOCK_JUMP_S))
            return lambda: self.cluster.set_clock(node, 0.0)
        assert kind == "netem", kind
        delay_ms, jitter_ms, loss = rng.randint(5, 200), rng.randint(0, 100), rng.randint(0, 10)
        applied = self.backend.slow(node, delay_ms, jitter_ms, loss)
        self.recorder.event("slow", node_name(node), **applied)
        return self._heal_network

    def _partition(self, shape: str, nodes: list[int], rng: random.Random) -> Callable[[], None]:
        rng.shuffle(nodes)
        if shape == "one-way":
            src, dst = nodes[0], nodes[1]
            self.backend.drop_from(dst, [src])
            self.recorder.event("oneway", src=node_name(src), dst=node_name(dst))
            return self._heal_network
        if shape == "isolate-leader":
            leader = self._leader(rng)
            if leader is not None:
                nodes.remove(leader)
                nodes.insert(0, leader)
            groups = [nodes[:1], nodes[1:]]
        elif shape == "bridge":
            middle, rest = nodes[0], nodes[1:]
            cut = len(rest) // 2
            groups = [rest[:cut], rest[cut:]]
            self._cut(groups)
            named = [[node_name(n) for n in group] for group in groups]
            self.recorder.event("partition", groups=named, bridge=node_name(middle))
            return self._heal_network
        else:
            groups = [nodes[: len(nodes) // 2], nodes[len(nodes) // 2 :]]
        self._cut(groups)
        self.recorder.event("partition", groups=[[node_name(n) for n in g] for g in groups])
        return self._heal_network

    def _depose(self) -> Callable[[], None]:
        """Cut the active controller (the quorum's last seen leader) from the other
        controllers only: brokers still reach it and forward it requests until check
        quorum makes it resign, the window in which a controller that answers before its
        records commit loses acknowledged changes to the others' new leader."""
        active = self.watch.leaders.get(METADATA_LOG, (self.cluster.controllers[0], -1))[0]
        others = [c for c in self.cluster.controllers if c != active]
        if not others:
            return lambda: None  # a sole controller has no one to be cut from
        groups = [[active], others]
        self._cut(groups)
        named = [[node_name(n) for n in group] for group in groups]
        self.recorder.event("partition", groups=named, depose=node_name(active))
        return self._heal_network

    def _cut(self, groups: list[list[int]]) -> None:
        """Two sides that do not hear each other."""
        left, right = groups
        for node in left:
            self.backend.drop_from(node, right)
        for node in right:
            self.backend.drop_from(node, left)

    def _heal_network(self) -> None:
        self.backend.heal()
        self.recorder.event("heal")

    def heal(self) -> None:
        """End every fault: network healed, every node resumed, running, on real time."""
        self.backend.heal()
        self.cluster.heal()
        self.recorder.event("heal-all")
