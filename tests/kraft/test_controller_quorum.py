"""Three real kraft-server controller processes on 127.0.0.1-3: they elect a leader, commit
records (the leader's NoOp heartbeat records), survive SIGKILL of the leader with nothing
committed lost, and a restarted node recovers from its disk and catches up."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraft.quorum_tool import QuorumStatus
from log.batch import decode_batch, iter_batches
from log.runtime import real_runtime
from raft.disk_log import DiskLog

from .procs import KRAFT_SERVER, Processes, free_port, wait_until

NODES = (1, 2, 3)


class Quorum(Processes):
    """Three controller-only nodes sharing one port on 127.0.0.1-3."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        voters = ",".join(f"{i}@127.0.0.{i}:{self.port}" for i in NODES)
        super().__init__(
            root,
            {
                i: {
                    "process.roles": "controller",
                    "node.id": str(i),
                    "controller.quorum.voters": voters,
                    "listeners": f"CONTROLLER://127.0.0.{i}:{self.port}",
                    "controller.listener.names": "CONTROLLER",
                }
                for i in NODES
            },
        )

    def wait_for(self, nodes: list[int], condition: Callable[[QuorumStatus], bool]) -> QuorumStatus:
        """Until the leader's DescribeQuorum answer, asked of ``nodes``, meets ``condition``."""
        controllers = {n: (f"127.0.0.{n}", self.port) for n in nodes}

        def met() -> QuorumStatus | None:
            status = self.quorum(controllers)
            return status if status is not None and condition(status) else None

        return wait_until(met, f"quorum condition on {nodes}")


def committed_records(data_dir: Path, high_watermark: int) -> list[tuple[int, int, bytes]]:
    """(offset, epoch, value) of every record below ``high_watermark`` in a node's log."""

    async def read() -> list[tuple[int, int, bytes]]:
        log = await DiskLog.open(real_runtime(), str(data_dir / "__cluster_metadata-0"))
        data = log.read(0, 1 << 30)
        await log.close()
        out = []
        for position, _ in iter_batches(data):
            header, records = decode_batch(data, position)
            for record in records:
                offset = header.base_offset + (record.offset_delta or 0)
                if offset < high_watermark:
                    out.append((offset, header.partition_leader_epoch, record.value or b""))
        return out

    return asyncio.run(read())


@pytest.fixture
def quorum(tmp_path: Path) -> Iterator[Quorum]:
    processes = Quorum(tmp_path)
    yield processes
    processes.cleanup()


def test_three_controllers_fail_over_and_recover(quorum: Quorum) -> None:
    for node in NODES:
        quorum.start(node)
    first = quorum.wait_for([1, 2, 3], lambda s: s.leader_id > 0 and s.high_watermark >= 5)
    old_leader, old_epoch, old_hw = first.leader_id, first.leader_epoch, first.high_watermark

    quorum.kill(old_leader)
    survivors = [n for n in NODES if n != old_leader]
    second = quorum.wait_for(
        survivors,
        lambda s: (
            s.leader_id in survivors
            and s.leader_epoch > old_epoch
            and s.high_watermark > old_hw + 3
        ),
    )

    quorum.start(old_leader)
    third = quorum.wait_for(
        survivors,
        lambda s: (
            s.high_watermark > second.high_watermark
            and all(v.log_end_offset >= second.high_watermark for v in s.voters)
        ),
    )
    assert quorum.stop_all() == {1: 0, 2: 0, 3: 0}

    logs = {n: committed_records(quorum.root / f"data{n}", third.high_watermark) for n in NODES}
    assert len(logs[1]) == third.high_watermark
    assert logs[1] == logs[2] == logs[3]
    epochs = [epoch for _, epoch, _ in logs[old_leader]]
    assert old_epoch in epochs and second.leader_epoch in epochs


def test_start_refuses_an_unformatted_or_locked_dir(quorum: Quorum) -> None:
    unformatted = quorum.root / "node9.properties"
    unformatted.write_text(quorum.config(1).read_text().replace("data1", "data9"))
    result = subprocess.run(
        [KRAFT_SERVER, "start", str(unformatted)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "is not formatted: run kraft-server format first" in result.stderr
    quorum.start(1)
    metadata_dir = quorum.root / "data1" / "__cluster_metadata-0"
    wait_until(metadata_dir.exists, "node 1 opened its metadata log")
    second = subprocess.run(
        [KRAFT_SERVER, "start", str(quorum.config(1))], capture_output=True, text=True
    )
    assert second.returncode == 1
    assert "locked by another kraft-server process" in second.stderr
    assert os.path.exists(quorum.root / "data1" / "meta.properties")
