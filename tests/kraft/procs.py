"""Real kraft-server processes on 127.0.0.x loopback addresses, for end-to-end tests."""

from __future__ import annotations

import socket
from pathlib import Path

from jepsen.processes import KRAFT_SERVER, Processes, wait_until
from jepsen.servers import KRAFT_PY, NodeProgram

__all__ = ["KRAFT_SERVER", "Processes", "free_port", "port_open", "single_node", "wait_until"]


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


def single_node(
    root: Path, extra: dict[str, str] | None = None, *, program: NodeProgram = KRAFT_PY
) -> tuple[Processes, str]:
    """The README's default layout (one combined broker+controller) on free ports, started
    and serving, with ``extra`` properties; (its processes, the bootstrap address). The
    caller cleans up. ``program`` runs it: kraft-server, or Apache Kafka to compare with."""
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
    procs = Processes(root, nodes, program=program)
    procs.start(1)
    try:
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener opens")
    except BaseException:
        procs.cleanup()
        raise
    return procs, f"127.0.0.1:{broker_port}"
