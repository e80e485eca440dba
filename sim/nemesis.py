"""The nemesis: injects the faults a scenario asks for, on a seeded schedule, then heals.

Fault names (``--faults all|none|a,b,c``):
  partition  a random split of the nodes into two sides
  oneway     one directed link cut
  isolate    one node cut off from all others
  isolate-leader  the node the scenario says leads cut off from all others
  bridge     two sides that only a middle node can reach
  slow       extra latency and jitter on a node's links
  stall      a link that holds its bytes for a while, then releases them
  reset      every connection between two nodes reset
  refuse     the next connects to a node refused
  crash      a node loses power (unsynced disk state lost or torn), restarts later
  crash-quorum  a majority of the nodes, or (one time in three) all of them, lose power at
             once (a correlated power failure), restart later
  pause      a node stops (SIGSTOP) and resumes later
  fsync      a node's next fsyncs fail with EIO
  enospc     a node's writes fail with ENOSPC for a while
  skew       a node's wall clock jumps by up to +-10 s
Each fault is undone after a random hold; ``heal_all`` ends every fault at once (the heal
phase every run ends with).

A scenario may name faults that run on a schedule of their own (``separate``, each with a
weight): their times, holds and targets come from another random stream, so adding them to
a scenario's ``all`` leaves every older fault where it was, seed for seed (pinned seeds stay
comparable).
"""

from __future__ import annotations

import asyncio
import errno
import random
from collections.abc import Callable, Mapping

from sim.world import World

FAULTS: tuple[str, ...] = (
    "partition",
    "oneway",
    "isolate",
    "isolate-leader",
    "bridge",
    "slow",
    "stall",
    "reset",
    "refuse",
    "crash",
    "crash-quorum",
    "pause",
    "fsync",
    "enospc",
    "skew",
)


# Faults between nodes need that many targets; with fewer they do nothing (a one-node
# cluster has no link to cut), so every fault handles every cluster size.
MIN_TARGETS = {"partition": 2, "oneway": 2, "stall": 2, "reset": 2, "bridge": 3}


def parse_faults(
    spec: str, extra: tuple[str, ...] = (), opt_in: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """``all``, ``none`` or a comma list of fault names (``all`` among them stands for every
    fault of ``all``); ValueError names an unknown one. ``extra`` are a scenario's own faults
    (``Nemesis(custom=...)``), part of its ``all``; ``opt_in`` ones only run when named."""
    every = FAULTS + extra
    known = every + opt_in
    if spec == "all":
        return every
    if spec in ("none", ""):
        return ()
    names: list[str] = []
    for name in (name.strip() for name in spec.split(",")):
        for fault in every if name == "all" else (name,) if name else ():
            if fault not in names:
                names.append(fault)
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"unknown fault {unknown[0]!r}; choose from {', '.join(known)}")
    return tuple(names)


class Nemesis:
    """Applies faults to the named processes of a world until told to stop."""

    def __init__(
        self,
        world: World,
        targets: list[str],
        faults: tuple[str, ...],
        *,
        interval_s: tuple[float, float] = (1.0, 4.0),
        hold_s: tuple[float, float] = (0.5, 6.0),
        leader: Callable[[], str | None] | None = None,
        custom: Mapping[str, Callable[[Nemesis, float], None]] | None = None,
        supervise: bool = False,
        separate: Mapping[str, int] | None = None,
        separate_interval_s: tuple[float, float] = (3.0, 8.0),
    ) -> None:
        self.world = world
        self.targets = targets
        self.faults = faults
        self.interval_s = interval_s
        self.hold_s = hold_s
        self.rng: random.Random = world.random("nemesis")
        # The stream of the faults on their own schedule (their custom code draws from it).
        self.separate_rng: random.Random = world.random("nemesis/separate")
        self.separate = dict(separate or {})  # fault -> weight
        self.separate_interval_s = separate_interval_s
        self.injected = 0
        self._leader = leader
        self.custom = dict(custom or {})
        # Restart a node that exited on its own (a disk error halts it, as Kafka halts) at
        # the next step, as systemd's Restart=on-failure would; otherwise it stays down
        # until the heal and the rest of the run has one node fewer to fault.
        self.supervise = supervise
        self._down: list[str] = []
        self._healed = False

    @property
    def healed(self) -> bool:
        """Whether ``heal_all`` ran: a fault's delayed step does nothing after it."""
        return self._healed

    async def run(self, until_s: float) -> None:
        """Inject faults until virtual time ``until_s``."""
        loop = self.world.loop
        if not self.faults:
            await asyncio.sleep(max(0.0, until_s - loop.time()))
            return
        mixed = tuple(f for f in self.faults if f not in self.separate)
        own = tuple(f for f in self.faults if f in self.separate)
        if not own:  # in this task, as before there were separate faults
            await self._schedule(mixed, self.rng, self.interval_s, until_s)
            return
        weights = tuple(self.separate[f] for f in own)
        await asyncio.gather(
            self._schedule(mixed, self.rng, self.interval_s, until_s),
            self._schedule(own, self.separate_rng, self.separate_interval_s, until_s, weights),
        )

    async def _schedule(
        self,
        faults: tuple[str, ...],
        rng: random.Random,
        interval_s: tuple[float, float],
        until_s: float,
        weights: tuple[int, ...] | None = None,
    ) -> None:
        loop = self.world.loop
        while faults and loop.time() < until_s:
            await asyncio.sleep(rng.uniform(*interval_s))
            if loop.time() >= until_s:
                break
            if self.supervise:
                self._restart_exited()
            fault = rng.choice(faults) if weights is None else rng.choices(faults, weights)[0]
            hold = rng.uniform(*self.hold_s)
            if len(self.targets) < MIN_TARGETS.get(fault, 1):
                continue
            self.injected += 1
            self._inject(fault, min(hold, max(0.0, until_s - loop.time())))

    def _restart_exited(self) -> None:
        for name in self.targets:
            if not self.world.processes[name].alive and name not in self._down:
                self.world.processes[name].restart()

    def _alive(self) -> list[str]:
        procs = self.world.processes
        return [name for name in self.targets if procs[name].alive and not procs[name].paused]

    def _later(self, delay_s: float, callback, *args) -> None:  # type: ignore[no-untyped-def]
        self.world.loop.call_later(delay_s, callback, *args)

    def _inject(self, fault: str, hold_s: float) -> None:
        net = self.world.network
        rng = self.rng
        nodes = list(self.targets)
        trace = self.world.trace
        if fault in self.custom:
            self.custom[fault](self, hold_s)
            return
        # Each network fault undoes only its own cuts, so overlapping faults compose
        # (a node isolated while the leader is cut off too, say).
        if fault == "partition":
            rng.shuffle(nodes)
            cut = rng.randint(1, len(nodes) - 1)
            self._later(hold_s, net.restore, net.partition(nodes[:cut], nodes[cut:]))
        elif fault == "oneway":
            src, dst = rng.sample(nodes, 2)
            trace.event("oneway", src=src, dst=dst)
            self._later(hold_s, net.restore, net.block(src, dst))
        elif fault == "isolate":
            self._later(hold_s, net.restore, net.isolate(rng.choice(nodes)))
        elif fault == "isolate-leader":
            leader = self._leader() if self._leader is not None else None
            if leader is not None:
                self._later(hold_s, net.restore, net.isolate(leader))
        elif fault == "bridge":
            rng.shuffle(nodes)
            middle = nodes[0]
            rest = nodes[1:]
            cut = rng.randint(1, len(rest) - 1)
            self._later(hold_s, net.restore, net.bridge(rest[:cut], middle, rest[cut:]))
        elif fault == "slow":
            node = rng.choice(nodes)
            extra, jitter = rng.uniform(0.005, 0.2), rng.uniform(0.0, 0.1)
            links = [(node, o) for o in nodes if o != node] + [
                (o, node) for o in nodes if o != node
            ]
            for src, dst in links:
                net.slow(src, dst, extra, jitter)
            trace.event("slow", node=node, extra_us=int(extra * 1e6))
            self._later(hold_s, self._unslow, links)
        elif fault == "stall":
            src, dst = rng.sample(nodes, 2)
            net.stall(src, dst, hold_s)
        elif fault == "reset":
            a, b = rng.sample(nodes, 2)
            net.reset(a, b)
        elif fault == "refuse":
            node = rng.choice(nodes)
            count = rng.randint(1, 5)
            net.refuse(node, count)
            trace.event("refuse", node=node, count=count)
        elif fault == "crash":
            alive = self._alive()
            if alive:
                self.crash_for(rng.choice(alive), hold_s)
        elif fault == "crash-quorum":
            alive = self._alive()
            rng.shuffle(alive)
            count = len(alive) if rng.random() < 1 / 3 else len(nodes) // 2 + 1
            for node in alive[:count]:
                self.world.processes[node].crash()
                self._down.append(node)
                self._later(rng.uniform(0.1, hold_s), self._restart, node)
        elif fault == "pause":
            alive = self._alive()
            if alive:
                self.pause_for(rng.choice(alive), hold_s)
        elif fault == "fsync":
            node = rng.choice(nodes)
            count = rng.randint(1, 3)
            self.world.processes[node].disk.fail_fsyncs(count)
            trace.event("fsync-fail", node=node, count=count)
        elif fault == "enospc":
            node = rng.choice(nodes)
            self.world.processes[node].disk.fail_writes(errno.ENOSPC)
            trace.event("enospc", node=node)
            self._later(hold_s, self._disk_ok, node)
        elif fault == "skew":
            node = rng.choice(nodes)
            self.world.processes[node].skew_clock(rng.randint(-10_000, 10_000))

    def stall_crash(self, quorum: list[str], hold_s: float, rng: random.Random) -> None:
        """A brown-out: the disks of a majority of ``quorum`` (the leader's first, if it is
        one of them) stall, every fsync hanging for ``hold_s``; then every node loses power.
        The stalled come back first and the others 3-6 s later, so the next leader comes
        from nodes whose writes of the last ``hold_s`` were never durable."""
        alive = [name for name in self._alive() if name in quorum]
        if not alive:
            return
        leader = self._leader() if self._leader is not None else None
        rng.shuffle(alive)
        if leader in alive:
            alive.remove(leader)
            alive.insert(0, leader)
        stalled = alive[: len(quorum) // 2 + 1]
        until_s = self.world.loop.time() + hold_s
        for node in stalled:
            self.world.processes[node].disk.stall_fsyncs(until_s)
        self.world.trace.event("fsync-stall", nodes=sorted(stalled), hold_us=int(hold_s * 1e6))
        self._later(hold_s, self._brown_out, stalled, rng)

    def _brown_out(self, stalled: list[str], rng: random.Random) -> None:
        """The end of a stall-crash: every node loses power; the stalled come back first."""
        if self._healed:
            return
        for node in self.targets:
            process = self.world.processes[node]
            if not process.alive:
                continue
            process.crash()
            self._down.append(node)
            first = node in stalled
            delay = rng.uniform(0.1, 0.5) if first else rng.uniform(3.0, 6.0)
            self._later(delay, self._restart, node)

    def crash_for(self, node: str, hold_s: float) -> None:
        """Cut ``node``'s power now; it restarts after ``hold_s``."""
        self.world.processes[node].crash()
        self._down.append(node)
        self._later(hold_s, self._restart, node)

    def down_for(self, node: str, hold_s: float) -> None:
        """``node`` has exited (a graceful shutdown): it restarts after ``hold_s``, or at
        once in the heal phase; supervision leaves it alone meanwhile."""
        if self._healed:
            self._restart(node)
            return
        self._down.append(node)
        self._later(hold_s, self._restart, node)

    def pause_for(self, node: str, hold_s: float) -> None:
        """SIGSTOP ``node`` now; it resumes after ``hold_s``."""
        self.world.processes[node].pause()
        self._later(hold_s, self._resume, node)

    def _unslow(self, links: list[tuple[str, str]]) -> None:
        for src, dst in links:
            self.world.network.unslow(src, dst)

    def _restart(self, node: str) -> None:
        process = self.world.processes[node]
        if node in self._down:
            self._down.remove(node)
        if not process.alive:
            process.restart()

    def _resume(self, node: str) -> None:
        process = self.world.processes[node]
        if process.alive and process.paused:
            process.resume()

    def _disk_ok(self, node: str) -> None:
        self.world.processes[node].disk.fail_writes(None)

    def heal_all(self) -> None:
        """End every fault now: links healed, nodes resumed and restarted, disks healthy."""
        self._healed = True
        self.world.network.heal()
        for name in self.targets:
            process = self.world.processes[name]
            process.disk.fail_writes(None)
            process.disk.fail_fsyncs(0)
            process.disk.stall_fsyncs(0.0)
            if process.alive and process.paused:
                process.resume()
            if not process.alive:
                process.restart()
            if process.skew_ms:
                process.skew_clock(0)
        self._down.clear()
        self.world.trace.event("heal-all")
