"""Fetch answers whose records are file regions: sent by sendfile(2) byte for byte as kio
encodes them, in request order; a region that can no longer be sent whole closes its
connection and the listener goes on serving."""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.client import ConnectionClosed
from log.fs import FileHandle, FileRegion, RealFileSystem
from log.rate_limited_log import RateLimitedLog
from protocol import server as network
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.entities import make, request_module, response_module
from protocol.server import SENDFILE_MIN_BYTES
from tests.broker.test_network import connected, serving

VERSION = 12
SUPPORTED = {ApiKey.FETCH: (VERSION, VERSION)}
BIG = 3 * SENDFILE_MIN_BYTES + 17  # sent by sendfile
SMALL = 1000  # read and written with the bytes around it


def fetch_request(partitions: int) -> Any:
    module = request_module(ApiKey.FETCH, VERSION)
    wanted = tuple(
        make(module.FetchPartition, {"partition": p, "partition_max_bytes": 1 << 30})
        for p in range(partitions)
    )
    return make(
        module.FetchRequest,
        {
            "replica_id": -1,
            "max_wait": timedelta(0),
            "max_bytes": 1 << 30,
            "topics": (make(module.FetchTopic, {"topic": "t", "partitions": wanted}),),
        },
    )


def fetch_response(records: list[bytes | FileRegion]) -> Any:
    module = response_module(ApiKey.FETCH, VERSION)
    partitions = tuple(
        make(
            module.PartitionData,
            {"partition_index": p, "error_code": ErrorCode.none, "records": data},
        )
        for p, data in enumerate(records)
    )
    topic = make(module.FetchableTopicResponse, {"topic": "t", "partitions": partitions})
    return make(module.FetchResponse, {"responses": (topic,), "error_code": ErrorCode.none})


class Segment:
    """A file of known bytes and the regions a fetch of it answers with."""

    def __init__(self, path: Path, sizes: list[int]) -> None:
        self.handle: FileHandle = RealFileSystem().open(str(path))
        self.regions: list[FileRegion] = []
        self.expected: list[bytes] = []
        for i, size in enumerate(sizes):
            data = bytes((i * 7 + j) % 251 for j in range(size))
            self.regions.append(FileRegion(self.handle, self.handle.append(data), size))
            self.expected.append(data)


def records_of(response: Any) -> list[bytes]:
    return [bytes(p.records) for p in response.responses[0].partitions]


def test_regions_are_sent_byte_exact_in_request_order_even_after_the_file_is_removed(
    tmp_path: Path,
) -> None:
    """Pipelined fetches, each answering with a big (sendfile) and a small (read) region:
    every answer is kio's encoding of the same bytes, in request order, though the file's
    name is gone before the first is sent (the open file is held, as in Kafka)."""
    segments = [Segment(tmp_path / f"{i}.log", [BIG + i, SMALL + i]) for i in range(4)]
    answers = iter(segments)

    async def handle(_header: wire.RequestHeader, _request: object) -> object:
        segment = next(answers)
        os.remove(segment.handle.path)  # retention deletes the segment: still served
        return fetch_response([*segment.regions])

    async def run() -> list[Any]:
        async with serving(handle, SUPPORTED) as port:
            connection = await connected(port)
            try:
                pending = [connection.request(fetch_request(2), timeout_s=10) for _ in segments]
                return list(await asyncio.gather(*pending))
            finally:
                await connection.close()

    responses = asyncio.run(run())
    assert [records_of(r) for r in responses] == [s.expected for s in segments]


@pytest.mark.parametrize("cut", ["truncated", "closed"])
def test_a_region_that_cannot_be_sent_whole_closes_the_connection_and_the_next_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, cut: str
) -> None:
    """The first answer's segment is truncated as its sendfile starts (follower truncation
    under the fetch), or closed before it (the segment deleted and its handle released):
    the promised length cannot be met, so that connection is closed rather than framed
    wrong, once logged; a fetch on a new connection is then answered whole."""
    segment = Segment(tmp_path / "0.log", [SMALL, BIG])
    real_sendfile = asyncio.BaseEventLoop.sendfile
    sends: list[int] = []

    async def cut_while_sending(loop: Any, transport: Any, file: Any, *args: Any) -> int:
        sends.append(len(sends))
        if cut == "truncated" and len(sends) == 1:
            segment.handle.truncate(segment.regions[1].position + BIG // 2)
        return await real_sendfile(loop, transport, file, *args)

    monkeypatch.setattr(asyncio.BaseEventLoop, "sendfile", cut_while_sending)
    monkeypatch.setattr(network, "_limited", RateLimitedLog(network.logger))  # none yet
    served: list[int] = []

    async def handle(_header: wire.RequestHeader, _request: object) -> object:
        served.append(len(served))
        if len(served) == 1:
            if cut == "closed":
                segment.handle.close()
            return fetch_response(segment.regions)
        fresh = Segment(tmp_path / f"{len(served)}.log", [SMALL, BIG])
        return fetch_response(fresh.regions)

    async def run() -> tuple[BaseException | None, list[bytes]]:
        async with serving(handle, SUPPORTED) as port:
            first = await connected(port)
            try:
                await first.request(fetch_request(2), timeout_s=10)
                failure = None
            except (ConnectionClosed, OSError) as error:
                failure = error
            finally:
                await first.close()
            second = await connected(port)
            try:
                return failure, records_of(await second.request(fetch_request(2), timeout_s=10))
            finally:
                await second.close()

    with caplog.at_level(logging.WARNING, logger="protocol.server"):
        failure, records = asyncio.run(run())
    assert failure is not None
    assert records == Segment(tmp_path / "again.log", [SMALL, BIG]).expected
    lines = [r.getMessage() for r in caplog.records if "promised in a fetch" in r.getMessage()]
    assert len(lines) == 1 and "0.log" in lines[0]
