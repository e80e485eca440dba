"""Real node processes described by property dicts: formatted with one cluster id, started,
signalled. kraft-server by default, or Apache Kafka (jepsen/servers.py). Used by the
end-to-end tests (tests/kraft/procs.py, on loopback) and by kraft-jepsen (each node wrapped
into its own network namespace and clock)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from jepsen.servers import KRAFT_PY, KRAFT_SERVER, NodeProgram
from kraft.quorum_tool import QuorumStatus, describe_quorum

__all__ = ["KRAFT_SERVER", "Processes", "wait_until"]
DEADLINE_S = 40.0
T = TypeVar("T")
# How a node's command line is wrapped (a namespace, say) and what environment it gets.
Wrap = Callable[[int, list[str]], list[str]]
Environ = Callable[[int], Mapping[str, str] | None]


def wait_until(condition: Callable[[], T | None], what: str, deadline_s: float = DEADLINE_S) -> T:
    """Poll a real cluster for a condition, bounded by a deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within {deadline_s}s")
        time.sleep(0.1)


class Processes:
    """Nodes described by property dicts, formatted with one cluster id.

    ``program`` is what runs (kraft-server unless told), ``wrap`` turns a node's start
    command line into the one to run (it must exec the server in place, as ``ip netns exec``
    does, so signals reach it), ``environ`` gives its environment (None: this process's)."""

    def __init__(
        self,
        root: Path,
        nodes: dict[int, dict[str, str]],
        *,
        wrap: Wrap = lambda _node, argv: argv,
        environ: Environ = lambda _node: None,
        program: NodeProgram = KRAFT_PY,
    ) -> None:
        self.root = root
        self.nodes = nodes
        self.procs: dict[int, subprocess.Popen] = {}
        self.program = program
        self._wrap = wrap
        self._environ = environ
        cluster_id = program.random_uuid()
        formats = []
        for node, props in nodes.items():
            props.setdefault("log.dirs", str(root / f"data{node}"))
            self.config(node).write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            argv = program.format_argv(cluster_id, self.config(node))
            # All at once: each is a Python (or JVM) start-up, seconds on a busy machine.
            formats.append(
                (argv, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
            )
        for argv, proc in formats:
            out, err = proc.communicate()
            if proc.returncode != 0:
                raise subprocess.CalledProcessError(proc.returncode, argv, out, err)

    def config(self, node: int) -> Path:
        return self.root / f"node{node}.properties"

    def log(self, node: int) -> str:
        return (self.root / f"node{node}.log").read_text()

    def start(self, node: int, cwd: Path | None = None) -> None:
        out = open(self.root / f"node{node}.log", "a")  # noqa: SIM115
        environ = self._environ(node)
        self.procs[node] = subprocess.Popen(
            self._wrap(node, self.program.start_argv(self.config(node))),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=None if environ is None else dict(environ),
        )
        out.close()  # the child holds its own descriptor

    def alive(self, node: int) -> bool:
        proc = self.procs.get(node)
        return proc is not None and proc.poll() is None

    def signal(self, node: int, signum: int) -> None:
        """Send ``signum`` to a running node (nothing if it is not running)."""
        if self.alive(node):
            self.procs[node].send_signal(signum)

    def kill(self, node: int) -> None:
        self.procs[node].send_signal(signal.SIGKILL)
        self.procs[node].wait()

    def quorum(self, controllers: dict[int, tuple[str, int]]) -> QuorumStatus | None:
        """The leader's DescribeQuorum answer, asking each controller in turn."""
        for host, port in controllers.values():
            try:
                status = asyncio.run(describe_quorum(host, port, 1.0))
            except (OSError, TimeoutError):
                continue
            if status.error_code == 0:
                return status
        return None

    def stop_all(self) -> dict[int, int]:
        """SIGTERM everything (controlled shutdown); the exit codes."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return {node: proc.wait(timeout=30) for node, proc in self.procs.items()}

    def cleanup(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
