"""A real single node against forged quorum RPCs, a poisoned quorum-state, too few file
descriptors and a connection flood: it refuses, keeps serving and restarts, or stops with
one line (issue 12, items 2 and 7)."""

from __future__ import annotations

import asyncio
import resource
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from broker.client import KafkaConnection
from kraft.config import ConfigError, config_from_properties
from kraft.storage import read_meta
from log.fs import RealFileSystem
from raft import codec
from raft.messages import BeginQuorumEpochRequest, Errors, VoteRequest
from tests.kraft.procs import KRAFT_SERVER, Processes, port_open, single_node, wait_until
from tests.kraft.test_config import BASE

INT32_MAX = 2**31 - 1
API_VERSIONS = ApiVersionsRequest(client_software_name="t", client_software_version="1")


def _controller(procs: Processes) -> tuple[str, int]:
    props = procs.nodes[1]
    host, port = props["controller.quorum.voters"].split("@")[1].rsplit(":", 1)
    return host, int(port)


def _cluster_id(procs: Processes) -> str:
    meta = read_meta(RealFileSystem(), procs.nodes[1]["log.dirs"])
    assert meta is not None
    return meta["cluster.id"]


async def _forged(host: str, port: int, cluster_id: str) -> list[int]:
    """Partition error codes of a forged Vote and a BeginQuorumEpoch from a non-voter."""
    codes = []
    bodies = [
        (VoteRequest(INT32_MAX, 1, 0, 0, False), 1),  # the node's own id, the int32 maximum
        (VoteRequest(5, 7, 0, 0, False), 7),
        (BeginQuorumEpochRequest(9, 7), 7),
    ]
    for body, src in bodies:
        connection = KafkaConnection("forger")
        await connection.connect(host, port, timeout_s=5)
        try:
            _key, _version, entity = codec.encode_raft_request(
                body, cluster_id=cluster_id, src_id=src, dst_id=1
            )
            response = await connection.request(entity, timeout_s=5)
            codes.append(int(response.topics[0].partitions[0].error_code))  # type: ignore[attr-defined]
        finally:
            await connection.close()
    return codes


def test_forged_quorum_rpcs_are_refused_and_the_node_serves_and_restarts(tmp_path: Path) -> None:
    procs, bootstrap = single_node(tmp_path)
    try:
        host, port = _controller(procs)
        before = wait_until(lambda: procs.quorum({1: (host, port)}), "a leader")
        codes = asyncio.run(_forged(host, port, _cluster_id(procs)))
        assert codes == [
            Errors.INVALID_REQUEST,
            Errors.INCONSISTENT_VOTER_SET,
            Errors.INCONSISTENT_VOTER_SET,
        ]
        after = procs.quorum({1: (host, port)})
        assert after is not None and after.leader_epoch == before.leader_epoch
        assert after.leader_id == 1
        assert procs.stop_all() == {1: 0}
        procs.start(1)
        broker_host, broker_port = bootstrap.rsplit(":", 1)
        wait_until(lambda: port_open(broker_host, int(broker_port)), "the restarted broker")
        restarted = wait_until(lambda: procs.quorum({1: (host, port)}), "a leader again")
        assert restarted.leader_epoch > before.leader_epoch
        assert "Traceback" not in procs.log(1)
    finally:
        procs.cleanup()


def _stopped_node(tmp_path: Path) -> Processes:
    procs, _bootstrap = single_node(tmp_path)
    assert procs.stop_all() == {1: 0}
    return procs


def _start(procs: Processes, nofile: int | None = None) -> subprocess.CompletedProcess:
    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    return subprocess.run(
        [KRAFT_SERVER, "start", str(procs.config(1))],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
        check=False,
    )


def _error_line(stderr: str) -> str:
    """The one error line kraft-server ends with (log lines come before it on stderr)."""
    errors = [line for line in stderr.splitlines() if line.startswith("kraft-server start: ")]
    assert len(errors) == 1 and stderr.strip().splitlines()[-1] == errors[0], stderr
    return errors[0]


def test_a_poisoned_quorum_state_stops_start_up_with_one_line(tmp_path: Path) -> None:
    procs = _stopped_node(tmp_path)
    state = Path(procs.nodes[1]["log.dirs"]) / "__cluster_metadata-0" / "quorum-state"
    state.write_text(
        f'{{"data_version": 1, "leaderEpoch": {INT32_MAX}, "leaderId": -1, "votedId": 1}}'
    )
    result = _start(procs)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    line = _error_line(result.stderr)
    assert f"leaderEpoch {INT32_MAX}" in line


def test_too_few_file_descriptors_is_one_line_and_exit_1(tmp_path: Path) -> None:
    procs = _stopped_node(tmp_path)
    result = _start(procs, nofile=12)
    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    line = _error_line(result.stderr)
    assert "out of file descriptors" in line and "soft 12, hard 12" in line


def test_a_connection_flood_past_the_fd_limit_logs_once_and_the_node_recovers(
    tmp_path: Path,
) -> None:
    procs = _stopped_node(tmp_path)
    props = procs.nodes[1]
    config = config_from_properties(props)
    broker = config.broker_endpoints()[0]
    log_path = tmp_path / "flood.log"
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [KRAFT_SERVER, "start", str(procs.config(1))],
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (48, 48)),
        )
    flood: list[socket.socket] = []
    try:
        wait_until(lambda: port_open(broker.host, broker.port), "the broker listener opens")
        assert "soft 48 -> 48 (hard 48)" in log_path.read_text()
        # More than the 48 descriptors, fewer than those plus the listen backlog (100).
        for _ in range(110):
            flood.append(socket.create_connection((broker.host, broker.port), timeout=5))
        wait_until(lambda: "Out of file descriptors" in log_path.read_text(), "the EMFILE line")
        # Several 1 s backoff periods of exhaustion: still that one line (once a minute).
        time.sleep(3)
        assert log_path.read_text().count("Out of file descriptors") == 1
        assert proc.poll() is None
        for sock in flood:
            sock.close()
        flood.clear()

        async def api_versions() -> object:
            connection = KafkaConnection("after-flood")
            await connection.connect(broker.host, broker.port, timeout_s=5)
            try:
                return await connection.request(API_VERSIONS, timeout_s=5)
            finally:
                await connection.close()

        response = wait_until(lambda: _attempt(api_versions), "served again after the flood")
        assert response.error_code == 0  # type: ignore[attr-defined]
    finally:
        for sock in flood:
            sock.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    assert "Traceback" not in log_path.read_text()


def _attempt(request: object) -> object | None:
    try:
        return asyncio.run(request())  # type: ignore[operator]
    except (OSError, TimeoutError):
        return None


def test_network_limit_keys_take_kafkas_names_and_refuse_a_zero_budget() -> None:
    config = config_from_properties(
        BASE
        | {
            "socket.request.max.bytes": "1048576",
            "queued.max.request.bytes": "-1",
            "connections.max.idle.ms": "30000",
        }
    )
    assert config.socket_request_max_bytes == 1_048_576
    assert config.queued_max_request_bytes == -1  # Kafka's "no limit"
    assert config.connections_max_idle_ms == 30_000
    defaults = config_from_properties(BASE)
    assert defaults.queued_max_request_bytes == defaults.socket_request_max_bytes == 104_857_600
    with pytest.raises(ConfigError, match=r"queued\.max\.request\.bytes"):
        config_from_properties(BASE | {"queued.max.request.bytes": "0"})
