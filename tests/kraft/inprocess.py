"""A single combined node run inside the test's own process (KraftNode or ``serve`` on the
real runtime), for tests that measure its event loop or swap its filesystem seam."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.kraft.procs import KRAFT_SERVER, free_port

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def format_node(root: Path, **extra: str) -> tuple[Path, int]:
    """A formatted single combined node's server.properties (plus ``extra`` keys, written
    with dots for underscores); (its path, the broker port)."""
    broker_port, controller_port = free_port(), free_port()
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(root / "data"),
    }
    props |= {key.replace("_", "."): value for key, value in extra.items()}
    path = root / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    subprocess.run(
        [KRAFT_SERVER, "format", "-t", CLUSTER_ID, "-c", str(path)], check=True, capture_output=True
    )
    return path, broker_port
