"""The cluster of a fault run: the shipped layout (config/cluster) placed on a backend's
hosts, formatted and started as real kraft-server processes (or Apache Kafka's, with the
same node ids, roles and addresses: jepsen/servers.py), each start, kill, pause and
clock change recorded in the trace.

The layout's loopback addresses 127.0.0.<id> become the hosts' addresses, its voters the
controllers chosen (``--nodes N+M``: the first N controllers and first M brokers of the
layout), its log dirs the run's directory. What the simulator's kafka scenario adds to every
node is added here too (replica.lag.time.max.ms, replication factor, partitions), so a real
run and a simulated one check the same cluster.
"""

from __future__ import annotations

import glob
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jepsen.backend import Backend
from jepsen.history import Recorder
from jepsen.processes import Processes
from jepsen.servers import KRAFT_PY, NodeProgram
from kraft.planted import PLANTED_BUGS_ENV
from kraft.properties import parse_properties
from sim.scenarios.kafka import REPLICA_LAG_TIME_MAX_MS

LAYOUT = Path(__file__).resolve().parent.parent / "config" / "cluster"
LOOPBACK = re.compile(r"127\.0\.0\.(\d+)")
LIBFAKETIME = (
    "/usr/lib/*/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
    "/usr/local/lib/faketime/libfaketimeMT.so.1",
)


class LayoutError(ValueError):
    """The layout cannot give the nodes asked for: one line for the CLI."""


def node_name(node: int) -> str:
    """A node's name in the trace: ``n<id>``, as in the simulator (checks parse it)."""
    return f"n{node}"


def libfaketime() -> str:
    """The multi-threaded libfaketime (Debian package ``faketime``)."""
    for pattern in LIBFAKETIME:
        found = sorted(glob.glob(pattern))
        if found:
            return found[0]
    raise LayoutError("clock faults need libfaketime: apt-get install faketime")


def _layout(directory: Path, role: str) -> dict[int, dict[str, str]]:
    found = {}
    for path in sorted(directory.glob(f"{role}-*.properties")):
        props = parse_properties(path.read_text(), str(path))
        found[int(props["node.id"])] = props
    return dict(sorted(found.items()))


def choose(directory: Path, controllers: int, brokers: int) -> dict[int, dict[str, str]]:
    """The first ``controllers`` controllers and ``brokers`` brokers of the layout in
    ``directory`` (node id -> properties), their voters only the controllers chosen."""
    every_controller = _layout(directory, "controller")
    every_broker = _layout(directory, "broker")
    chosen = list(every_controller)[:controllers]
    if len(chosen) < controllers or len(every_broker) < brokers or controllers < 1:
        raise LayoutError(
            f"{directory} has {len(every_controller)} controllers and {len(every_broker)} "
            f"brokers: not enough for {controllers}+{brokers}"
        )
    nodes = {n: every_controller[n] for n in chosen}
    nodes.update({n: every_broker[n] for n in list(every_broker)[:brokers]})
    for props in nodes.values():
        voters = props["controller.quorum.voters"].split(",")
        props["controller.quorum.voters"] = ",".join(
            v for v in voters if int(v.split("@")[0]) in chosen
        )
    return nodes


def place(
    nodes: dict[int, dict[str, str]],
    address: Callable[[int], str],
    data: Path,
    partitions: int,
) -> dict[int, dict[str, str]]:
    """The chosen nodes' properties at their hosts' addresses, with data dirs under
    ``data`` and the kafka scenario's settings."""
    brokers = sum("broker" in props["process.roles"] for props in nodes.values())
    placed = {}
    for node, chosen in nodes.items():
        props = {
            key: LOOPBACK.sub(lambda m: address(int(m.group(1))), value)
            for key, value in chosen.items()
        }
        props["log.dirs"] = str(data / f"data-{node_name(node)}")
        props["default.replication.factor"] = str(min(3, brokers))
        props["num.partitions"] = str(partitions)
        props["replica.lag.time.max.ms"] = str(REPLICA_LAG_TIME_MAX_MS)
        props["unclean.leader.election.enable"] = "false"
        placed[node] = props
    return placed


def _endpoint(props: dict[str, str], listener: str) -> tuple[str, int] | None:
    for entry in props.get("listeners", "").split(","):
        name, _, rest = entry.partition("://")
        if name == listener:
            host, _, port = rest.rpartition(":")
            return host, int(port)
    return None


@dataclass(frozen=True, slots=True)
class ClockMode:
    """How a node's clock is faked: its offset file; whether the monotonic clock (asyncio's
    timers) moves with the wall clock, or only the wall clock (what NTP steps do)."""

    lib: str
    fake_monotonic: bool


class Cluster:
    """The nodes of one run on ``backend``'s hosts."""

    def __init__(
        self,
        root: Path,
        backend: Backend,
        recorder: Recorder,
        props: dict[int, dict[str, str]],
        *,
        bug: str | None = None,
        clock: ClockMode | None = None,
        program: NodeProgram = KRAFT_PY,
    ) -> None:
        self.root = root
        self.recorder = recorder
        self.props = props
        self.bug = bug
        self.clock = clock
        self.incarnation: dict[int, int] = dict.fromkeys(props, 0)
        self.paused: set[int] = set()
        self.down: set[int] = set()  # killed, or found dead: not running on purpose or not
        self.controllers = [n for n, p in props.items() if "controller" in p["process.roles"]]
        self.brokers = [n for n, p in props.items() if "broker" in p["process.roles"]]
        for node in props:
            self.clock_file(node).write_text("+0\n")
        self.procs = Processes(
            root, props, wrap=backend.wrap, environ=self._environ, program=program
        )

    def clock_file(self, node: int) -> Path:
        return self.root / f"clock-{node_name(node)}"

    def _environ(self, node: int) -> dict[str, str]:
        environ = dict(os.environ)
        if self.bug is not None:
            environ[PLANTED_BUGS_ENV] = self.bug
        if self.clock is not None:
            environ.update(
                LD_PRELOAD=self.clock.lib,
                FAKETIME_TIMESTAMP_FILE=str(self.clock_file(node)),
                FAKETIME_NO_CACHE="1",
                FAKETIME_DONT_FAKE_MONOTONIC="0" if self.clock.fake_monotonic else "1",
            )
        return environ

    def broker_endpoints(self) -> list[tuple[str, int]]:
        return [e for b in self.brokers if (e := _endpoint(self.props[b], "PLAINTEXT"))]

    @property
    def bootstrap(self) -> str:
        """The brokers' client endpoints, for a client's bootstrap.servers."""
        return ",".join(f"{host}:{port}" for host, port in self.broker_endpoints())

    def controller_endpoints(self) -> list[tuple[str, int]]:
        return [e for c in self.controllers if (e := _endpoint(self.props[c], "CONTROLLER"))]

    def alive(self, node: int) -> bool:
        return self.procs.alive(node)

    def start(self, node: int) -> None:
        self.procs.start(node)
        self.down.discard(node)
        self.incarnation[node] += 1
        self.recorder.event("start", node_name(node), incarnation=self.incarnation[node])

    def kill(self, node: int) -> None:
        """SIGKILL: the process dies, its page cache (written, unsynced data) survives."""
        self.reap()
        self.paused.discard(node)
        self.procs.kill(node)
        self.down.add(node)
        self.recorder.event("kill", node_name(node))

    def pause(self, node: int) -> None:
        self.procs.signal(node, signal.SIGSTOP)
        self.paused.add(node)
        self.recorder.event("pause", node_name(node))

    def resume(self, node: int) -> None:
        self.procs.signal(node, signal.SIGCONT)
        self.paused.discard(node)
        self.recorder.event("resume", node_name(node))

    def set_clock(self, node: int, offset_s: float) -> None:
        """Move a node's clock ``offset_s`` from the real one (0: back to real time); with
        no clock mode (the program cannot run under libfaketime: the run recorded why) the
        nemesis keeps its schedule and nothing moves."""
        if self.clock is None:
            self.recorder.event("clock-skipped", node_name(node), skew_ms=round(offset_s * 1000))
            return
        self.clock_file(node).write_text(f"{offset_s:+.3f}\n")
        self.recorder.event("clock-skew", node_name(node), skew_ms=round(offset_s * 1000))

    def reap(self) -> None:
        """Record every node that exited on its own since the last look (``process-failed``,
        which kraft-analyze's crash-free check reports): no fault the nemesis injects may
        make a node exit."""
        for node, proc in sorted(self.procs.procs.items()):
            code = proc.poll()
            if code is not None and node not in self.down:
                self.down.add(node)
                lines = self.procs.log(node).strip().splitlines()
                last = lines[-1] if lines else ""
                error = f"exit code {code}: {last}"
                self.recorder.event("process-failed", node_name(node), error=error)

    def heal(self) -> None:
        """Every node running, unpaused, on real time."""
        self.reap()
        for node in sorted(self.paused):
            self.resume(node)
        for node in self.props:
            if self.clock is not None and float(self.clock_file(node).read_text()) != 0.0:
                self.set_clock(node, 0.0)
            if not self.alive(node):
                self.start(node)

    def close(self) -> None:
        """Kill every node (SIGCONT first, so a paused one dies too)."""
        for node in self.props:
            self.procs.signal(node, signal.SIGCONT)
        self.procs.cleanup()
