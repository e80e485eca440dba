"""Issue 22 item 7, the operator's way out of an exhausted epoch, on a real node:
`kraft-server quorum-state` shows a stopped node's epoch beside its metadata log's, and
`--reset-epoch N` (N at least the log's last epoch) lets a node stuck at the last epoch,
2^31-2, elect again. A running node is refused, and so is an N below its log."""

from __future__ import annotations

import subprocess
from pathlib import Path

from raft.messages import MAX_EPOCH
from raft.quorum_state import QuorumState
from tests.kraft.procs import KRAFT_SERVER, port_open, single_node, wait_until


def quorum_state(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KRAFT_SERVER, "quorum-state", "-c", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_an_exhausted_epoch_is_reset_and_the_node_elects_again(tmp_path: Path) -> None:
    procs, bootstrap = single_node(tmp_path)
    try:
        config = procs.config(1)
        running = quorum_state(config)
        assert running.returncode == 1 and "locked by another kraft-server" in running.stderr
        procs.kill(1)
        shown = quorum_state(config)
        assert shown.returncode == 0, shown.stderr
        state_file = tmp_path / "data1" / "__cluster_metadata-0" / "quorum-state"
        assert shown.stdout.startswith(f"{state_file}: epoch ")
        last_epoch = int(shown.stdout.rpartition("last epoch ")[2])
        assert last_epoch >= 1  # the node was elected at least once
        # Exhausted: what forged Votes left on main. A sole voter at MAX_EPOCH never elects.
        state_file.write_bytes(QuorumState(leader_epoch=MAX_EPOCH, voted_id=2).encode())

        below = quorum_state(config, "--reset-epoch", str(last_epoch - 1))
        assert below.returncode == 1 and "Traceback" not in below.stderr
        assert f"--reset-epoch {last_epoch - 1} is outside [{last_epoch}, " in below.stderr
        reset = quorum_state(config, "--reset-epoch", str(last_epoch))
        assert reset.returncode == 0, reset.stderr
        assert f"epoch {MAX_EPOCH}, leader -1, voted 2;" in reset.stdout
        assert f"to {state_file}: epoch {last_epoch}, leader -1, voted -1;" in reset.stdout

        procs.start(1)
        port = int(bootstrap.rpartition(":")[2])
        wait_until(lambda: port_open("127.0.0.1", port), "the broker listener reopens")
        voters = procs.nodes[1]["controller.quorum.voters"]
        controller = ("127.0.0.1", int(voters.rpartition(":")[2]))
        status = procs.quorum({1: controller})
        assert status is not None and status.leader_id == 1
        assert last_epoch < status.leader_epoch < MAX_EPOCH
    finally:
        procs.cleanup()
