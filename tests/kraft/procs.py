"""Real kraft-server processes on 127.0.0.x loopback addresses, for end-to-end tests."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kraft.quorum_tool import QuorumStatus, describe_quorum

BIN = Path(sys.executable).parent
KRAFT_SERVER = str(BIN / "kraft-server")
DEADLINE_S = 40.0
T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


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
    """kraft-server nodes described by property dicts, formatted with one cluster id."""

    def __init__(self, root: Path, nodes: dict[int, dict[str, str]]) -> None:
        self.root = root
        self.nodes = nodes
        self.procs: dict[int, subprocess.Popen] = {}
        cluster_id = subprocess.run(
            [KRAFT_SERVER, "random-uuid"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for node, props in nodes.items():
            props.setdefault("log.dirs", str(root / f"data{node}"))
            self.config(node).write_text("".join(f"{k}={v}\n" for k, v in props.items()))
            subprocess.run(
                [KRAFT_SERVER, "format", "-t", cluster_id, "-c", str(self.config(node))],
                check=True,
                capture_output=True,
            )

    def config(self, node: int) -> Path:
        return self.root / f"node{node}.properties"

    def log(self, node: int) -> str:
        return (self.root / f"node{node}.log").read_text()

    def start(self, node: int, cwd: Path | None = None) -> None:
        out = open(self.root / f"node{node}.log", "a")  # noqa: SIM115
        self.procs[node] = subprocess.Popen(
            [KRAFT_SERVER, "start", str(self.config(node))],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
        )

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


def single_node(root: Path, extra: dict[str, str] | None = None) -> tuple[Processes, str]:
    """The README's default layout (one combined broker+controller) on free ports, started
    and serving, with ``extra`` properties; (its processes, the bootstrap address). The
    caller cleans up."""
    broker_port, controller_port = free_port(), free_port()
    nodes = {
        1: {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}"
            ),
            "controller.listener.names": "CONTROLLER",
            **(extra or {}),
        }
    }
    procs = Processes(root, nodes)
    procs.start(1)
    try:
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener opens")
    except BaseException:
        procs.cleanup()
        raise
    return procs, f"127.0.0.1:{broker_port}"
