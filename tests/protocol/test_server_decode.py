"""protocol/server.py decodes a big request across many turns of the loop (issue 22).

A probe task yields at every turn of the loop and counts its turns; the handler notes the
count when the request reaches it. A request of more than SLICE_UNITS array elements
reaches it hundreds of turns later (its walk and its reading, SLICE_UNITS elements a turn),
however few bytes it has; a smaller one in the turn it was read; both equal the one-shot
decode, and a malformed big one closes its connection, as a malformed small one does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest

from protocol import wire
from protocol.entities import make, request_module
from protocol.incremental import SLICE_UNITS
from protocol.server import serve_connection
from tests.kraft.big_requests import big_request

SUPPORTED = {1: (4, 12), 18: (0, 3)}


@pytest.fixture
def decode_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The units of each step of every request the server decodes (wire.decode_request_steps
    watched)."""
    units: list[int] = []
    real = wire.decode_request_steps

    def watched(*args: Any, **kwargs: Any) -> Generator[int, None, Any]:
        steps = real(*args, **kwargs)
        while True:
            try:
                units.append(next(steps))
            except StopIteration as done:
                return done.value
            yield units[-1]

    monkeypatch.setattr(wire, "decode_request_steps", watched)
    return units


async def serve_and_count(frame: bytes) -> tuple[list[tuple[int, object]], int, bytes]:
    """Send ``frame`` to a listener; ([(turns when handled, request)], turns, answer)."""
    turns = 0
    handled: list[tuple[int, object]] = []

    async def probe() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    async def handle(header: wire.RequestHeader, request: object) -> object:
        handled.append((turns, request))
        module: Any = request_module(18, 3)
        return make(module.ApiVersionsResponse, {}) if header.api_key == 18 else None

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await serve_connection(reader, writer, handle, SUPPORTED)

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    task = asyncio.get_running_loop().create_task(probe())
    try:
        writer.write(frame)
        answer = await asyncio.wait_for(reader.read(), 30)  # handle closes the connection
    finally:
        task.cancel()
        writer.close()
        server.close()
    return handled, turns, answer


def fetch_frame(partitions: int) -> bytes:
    request = big_request(1, 12, partitions, "deep")
    return wire.encode_request(wire.RequestHeader(1, 12, 7, "slices"), request)


def test_a_big_fetch_reaches_its_handler_hundreds_of_turns_later_and_equals_kios_reading(
    decode_steps: list[int],
) -> None:
    frame = fetch_frame(20_000)
    handled, _turns, _answer = asyncio.run(serve_and_count(frame))
    ((turns_at_handle, request),) = handled
    assert request == wire.decode_request(frame[4:])[1]
    # 20,000 partitions walked, then read: a step (and a turn) per SLICE_UNITS of each.
    assert len(decode_steps) >= 2 * 20_000 // (SLICE_UNITS + 1)
    assert max(decode_steps) <= SLICE_UNITS + 1
    assert turns_at_handle >= len(decode_steps)


def test_a_request_of_few_bytes_and_many_elements_is_decoded_in_slices_too(
    decode_steps: list[int],
) -> None:
    """1,800 partitions in 60 KB: bytes do not say how much decoding is; elements do."""
    frame = fetch_frame(1_800)
    assert len(frame) < 64 * 1024
    handled, _turns, _answer = asyncio.run(serve_and_count(frame))
    ((_turns_at_handle, request),) = handled
    assert request == wire.decode_request(frame[4:])[1]
    assert len(decode_steps) >= 5  # the attempt, then 1,800 walked and read, 2 slices each


def test_a_small_request_is_decoded_in_the_turn_it_is_read(decode_steps: list[int]) -> None:
    frame = fetch_frame(200)
    handled, _turns, _answer = asyncio.run(serve_and_count(frame))
    ((_turns_at_handle, request),) = handled
    assert request == wire.decode_request(frame[4:])[1]
    assert decode_steps == []  # one step: no yield


def test_a_malformed_big_request_closes_its_connection_unhandled() -> None:
    frame = bytearray(fetch_frame(20_000))
    frame[-200:] = b"\xff" * 200  # the last partitions' varints and lengths run off the end
    handled, _turns, answer = asyncio.run(serve_and_count(bytes(frame)))
    assert handled == []
    assert answer == b""
