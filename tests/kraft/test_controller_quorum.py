"""Three real kraft-server controller processes on 127.0.0.1-3: they elect a leader, commit
records (the leader's NoOp heartbeat records), survive SIGKILL of the leader with nothing
committed lost, and a restarted node recovers from its disk and catches up."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kraft.quorum_tool import QuorumStatus, describe_quorum
from log.batch import decode_batch, iter_batches
from log.runtime import real_runtime
from raft.disk_log import DiskLog

BIN = Path(sys.executable).parent
DEADLINE_S = 30.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.procs: dict[int, subprocess.Popen] = {}
        voters = ",".join(f"{i}@127.0.0.{i}:{self.port}" for i in (1, 2, 3))
        for i in (1, 2, 3):
            (root / f"c{i}.properties").write_text(
                "process.roles=controller\n"
                f"node.id={i}\n"
                f"controller.quorum.voters={voters}\n"
                f"listeners=CONTROLLER://127.0.0.{i}:{self.port}\n"
                "controller.listener.names=CONTROLLER\n"
                f"log.dirs={root / f'data{i}'}\n"
            )
        cluster_id = subprocess.run(
            [str(BIN / "kraft-server"), "random-uuid"], capture_output=True, text=True, check=True
        ).stdout.strip()
        for i in (1, 2, 3):
            subprocess.run(
                [
                    str(BIN / "kraft-server"),
                    "format",
                    "-t",
                    cluster_id,
                    "-c",
                    str(root / f"c{i}.properties"),
                ],
                check=True,
                capture_output=True,
            )

    def start(self, node: int) -> None:
        log = open(self.root / f"node{node}.log", "a")  # noqa: SIM115
        self.procs[node] = subprocess.Popen(
            [str(BIN / "kraft-server"), "start", str(self.root / f"c{node}.properties")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def status(self, nodes: list[int]) -> QuorumStatus | None:
        """The leader's DescribeQuorum answer, asking the given nodes in turn."""
        for node in nodes:
            try:
                status = asyncio.run(describe_quorum(f"127.0.0.{node}", self.port, 1.0))
            except (OSError, TimeoutError):
                continue
            if status.error_code == 0:
                return status
        return None

    def wait_for(self, nodes: list[int], condition: Callable[[QuorumStatus], bool]) -> QuorumStatus:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            status = self.status(nodes)
            if status is not None and condition(status):
                return status
            time.sleep(0.1)  # polling a real cluster for a condition, bounded by the deadline
        raise AssertionError(f"condition not reached within {DEADLINE_S}s: {self.status(nodes)}")

    def stop_all(self) -> dict[int, int]:
        codes = {}
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for node, proc in self.procs.items():
            codes[node] = proc.wait(timeout=20)
        return codes


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
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    for proc in c.procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_three_controllers_fail_over_and_recover(cluster: Cluster) -> None:
    for node in (1, 2, 3):
        cluster.start(node)
    first = cluster.wait_for([1, 2, 3], lambda s: s.leader_id > 0 and s.high_watermark >= 5)
    old_leader, old_epoch, old_hw = first.leader_id, first.leader_epoch, first.high_watermark

    cluster.procs[old_leader].send_signal(signal.SIGKILL)
    cluster.procs[old_leader].wait()
    survivors = [n for n in (1, 2, 3) if n != old_leader]
    second = cluster.wait_for(
        survivors,
        lambda s: (
            s.leader_id in survivors
            and s.leader_epoch > old_epoch
            and s.high_watermark > old_hw + 3
        ),
    )

    cluster.start(old_leader)
    third = cluster.wait_for(
        survivors,
        lambda s: (
            s.high_watermark > second.high_watermark
            and all(v.log_end_offset >= second.high_watermark for v in s.voters)
        ),
    )
    assert cluster.stop_all() == {1: 0, 2: 0, 3: 0}

    logs = {
        n: committed_records(cluster.root / f"data{n}", third.high_watermark) for n in (1, 2, 3)
    }
    assert len(logs[1]) == third.high_watermark
    assert logs[1] == logs[2] == logs[3]
    epochs = [epoch for _, epoch, _ in logs[old_leader]]
    assert old_epoch in epochs and second.leader_epoch in epochs


def test_start_refuses_an_unformatted_or_locked_dir(cluster: Cluster) -> None:
    unformatted = cluster.root / "c9.properties"
    unformatted.write_text((cluster.root / "c1.properties").read_text().replace("data1", "data9"))
    result = subprocess.run(
        [str(BIN / "kraft-server"), "start", str(unformatted)], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert "is not formatted: run kraft-server format first" in result.stderr
    cluster.start(1)
    deadline = time.monotonic() + DEADLINE_S
    while not (cluster.root / "data1" / "__cluster_metadata-0").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    second = subprocess.run(
        [str(BIN / "kraft-server"), "start", str(cluster.root / "c1.properties")],
        capture_output=True,
        text=True,
    )
    assert second.returncode == 1
    assert "locked by another kraft-server process" in second.stderr
    assert os.path.exists(cluster.root / "data1" / "meta.properties")
