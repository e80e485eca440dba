"""Issue 22 item 3 on a real node with an open-files limit of 500: creating topics until the
descriptors are gone used to end in EMFILE on a checkpoint write taken for a disk failure
("Stopping: every log dir has failed") and a node that never started again. Now new
partition logs stop short of the reserve (the rest wait, one line a minute), client
connections stop at it, nothing goes offline, the node restarts, and deleting topics lets
the waiting partitions open."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.errors import ErrorCode

from broker.client import ConnectionClosed, KafkaConnection
from jepsen.processes import Processes
from protocol.entities import make, request_module
from tests.kraft.procs import free_port, port_open, wait_until
from tests.kraft.wire_client import connect, produce

LIMIT = 500
RESERVE = 60
TOPICS = 200  # one partition each, three descriptors each: more than the limit allows


async def create_topics(connection: KafkaConnection, names: list[str]) -> list[ErrorCode]:
    module: Any = request_module(19, 7)
    topics = tuple(
        make(module.CreatableTopic, {"name": n, "num_partitions": 1, "replication_factor": 1})
        for n in names
    )
    request = make(module.CreateTopicsRequest, {"topics": topics, "timeout": timedelta(seconds=30)})
    response: Any = await connection.request(request, 60.0)
    return [t.error_code for t in response.topics]


async def delete_topics(connection: KafkaConnection, names: list[str]) -> list[ErrorCode]:
    module: Any = request_module(20, 6)
    topics = tuple(make(module.DeleteTopicState, {"name": n}) for n in names)
    request = make(module.DeleteTopicsRequest, {"topics": topics, "timeout": timedelta(seconds=30)})
    response: Any = await connection.request(request, 60.0)
    return [t.error_code for t in response.responses]


async def served(port: int) -> KafkaConnection | None:
    """A new connection to ``port`` if the node answers ApiVersions on it; None if the node
    closed it instead (at the descriptor reserve)."""
    connection = KafkaConnection("reserve-probe")
    await connection.connect("127.0.0.1", port, 10.0)
    try:
        await connection.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1"), 10.0
        )
    except ConnectionClosed:
        await connection.close()
        return None
    return connection


def test_topics_past_the_descriptor_limit_wait_and_the_node_survives(tmp_path: Path) -> None:
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
            "open.files.reserve": str(RESERVE),
        }
    }
    limit = {"nofile": LIMIT}
    procs = Processes(
        tmp_path, nodes, wrap=lambda _node, argv: ["prlimit", f"--nofile={limit['nofile']}", *argv]
    )
    names = [f"t{i:03d}" for i in range(TOPICS)]
    try:
        procs.start(1)
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener opens")

        async def fill() -> list[bool]:
            connection = await connect("127.0.0.1", broker_port)
            try:
                for start in range(0, TOPICS, 50):
                    codes = await create_topics(connection, names[start : start + 50])
                    assert codes == [ErrorCode.none] * len(codes)
                await asyncio.to_thread(
                    wait_until,
                    lambda: "wait for file descriptors" in procs.log(1),
                    "partitions wait for descriptors",
                )
                # Connections are taken until the reserve: the last ones are closed at once.
                # Partitions stopped half a reserve early: that much is left for
                # connections (an operator's among them), then they are refused too.
                held: list[KafkaConnection] = []
                refused = False
                while not refused and len(held) < LIMIT:
                    probe = await served(broker_port)
                    refused = probe is None
                    if probe is not None:
                        held.append(probe)
                for probe in held:
                    await probe.close()
                return [refused, RESERVE // 2 - 5 <= len(held) <= RESERVE // 2 + 5]
            finally:
                await connection.close()

        assert asyncio.run(fill()) == [True, True]
        assert procs.alive(1)
        log = procs.log(1)
        assert "Closing new connections" in log
        assert "Traceback" not in log and "offline" not in log and "has failed" not in log

        procs.kill(1)
        procs.start(1)  # on main every restart ended "out of file descriptors"
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener reopens")

        async def drain() -> ErrorCode:
            connection = await connect("127.0.0.1", broker_port)
            try:
                codes = await delete_topics(connection, names[:100])
                assert codes == [ErrorCode.none] * 100
                # The last topic's partition waited for descriptors; now it opens.
                error, _offset = await produce(connection, names[-1], [b"v"])
                return error
            finally:
                await connection.close()

        assert asyncio.run(drain()) == ErrorCode.none
        assert procs.alive(1)
        log = procs.log(1)
        assert "Traceback" not in log and "out of file descriptors (" not in log

        # 100 logs of three files each, and a limit of 250: more files than descriptors.
        # Idle files are closed as the node runs into its reserve (log/lazy_files.py).
        assert procs.stop_all() == {1: 0}
        limit["nofile"] = 250
        procs.start(1)
        wait_until(lambda: port_open("127.0.0.1", broker_port), "the broker listener reopens")

        async def after() -> list[ErrorCode]:
            connection = await connect("127.0.0.1", broker_port)
            try:
                return [(await produce(connection, n, [b"w"]))[0] for n in names[100::33]]
            finally:
                await connection.close()

        assert asyncio.run(after()) == [ErrorCode.none] * 4
        assert procs.alive(1)
        assert "Traceback" not in procs.log(1)
    finally:
        procs.cleanup()
