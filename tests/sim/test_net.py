"""Simulated TCP through asyncio streams: order, partitions, resets, refusals, crashes."""

from __future__ import annotations

import asyncio

import pytest

from log.runtime import Runtime
from sim.world import World


async def upper_server(rt: Runtime) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write(line.upper())
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, None, 9000)
    async with server:
        await server.serve_forever()


def run_client(world: World, client) -> object:  # type: ignore[no-untyped-def]
    world.add_process("server").start(upper_server)
    process = world.add_process("client")

    async def driver() -> object:
        return await process.start(client)

    return world.run(driver())


def test_bytes_arrive_in_order_with_latency(world: World) -> None:
    async def client(rt: Runtime) -> list[bytes]:
        reader, writer = await asyncio.open_connection("server", 9000)
        for i in range(200):
            writer.write(f"m{i}\n".encode())
        await writer.drain()
        lines = [await reader.readline() for _ in range(200)]
        assert asyncio.get_running_loop().time() > 0
        writer.close()
        await writer.wait_closed()
        return lines

    assert run_client(world, client) == [f"M{i}\n".encode() for i in range(200)]


def test_connect_to_a_host_without_listener_is_refused(world: World) -> None:
    async def client(rt: Runtime) -> str:
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("server", 9999)
        return "refused"

    assert run_client(world, client) == "refused"


def test_refuse_fault_refuses_then_allows(world: World) -> None:
    world.network.refuse("server", 2)

    async def client(rt: Runtime) -> int:
        failures = 0
        while True:
            try:
                _reader, writer = await asyncio.open_connection("server", 9000)
            except ConnectionRefusedError:
                failures += 1
                continue
            writer.close()
            return failures

    assert run_client(world, client) == 2


def test_partition_holds_bytes_and_heal_delivers_them(world: World) -> None:
    async def client(rt: Runtime) -> tuple[bool, bytes, float]:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("server", 9000)
        world.network.partition(["client"], ["server"])
        loop.call_later(5, world.network.heal)
        writer.write(b"held\n")
        timed_out = False
        try:
            await asyncio.wait_for(reader.readline(), 2)
        except TimeoutError:
            timed_out = True
        line = await reader.readline()
        return timed_out, line, loop.time()

    timed_out, line, when = run_client(world, client)  # type: ignore[misc]
    assert timed_out
    assert line == b"HELD\n"
    assert 5 <= when < 5.1


def test_long_partition_resets_a_connection_with_pending_bytes(world: World) -> None:
    async def client(rt: Runtime) -> str:
        reader, writer = await asyncio.open_connection("server", 9000)
        world.network.isolate("server")
        writer.write(b"never\n")
        with pytest.raises(TimeoutError):
            await reader.readline()
        return f"reset after {asyncio.get_running_loop().time():.0f}s"

    assert run_client(world, client) == "reset after 30s"


def test_connect_across_a_partition_retries_until_heal(world: World) -> None:
    async def client(rt: Runtime) -> float:
        loop = asyncio.get_running_loop()
        world.network.partition(["client"], ["server"])
        loop.call_later(2.5, world.network.heal)
        _reader, writer = await asyncio.open_connection("server", 9000)
        writer.close()
        return loop.time()

    # SYN retries at 1 s then 2 s later: the third SYN (t~3 s) gets through.
    assert 3 <= run_client(world, client) < 3.1  # type: ignore[operator]


def test_one_way_partition_blocks_only_one_direction(world: World) -> None:
    async def client(rt: Runtime) -> bytes:
        reader, writer = await asyncio.open_connection("server", 9000)
        world.network.block("server", "client")
        writer.write(b"ping\n")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readline(), 3)
        world.network.heal()
        return await reader.readline()

    assert run_client(world, client) == b"PING\n"


def test_reset_fault_surfaces_as_connection_reset(world: World) -> None:
    async def client(rt: Runtime) -> str:
        reader, _writer = await asyncio.open_connection("server", 9000)
        assert world.network.reset("client", "server") == 1
        with pytest.raises(ConnectionResetError):
            await reader.readline()
        return "reset"

    assert run_client(world, client) == "reset"


def test_server_crash_resets_clients_and_restart_listens_again(world: World) -> None:
    server = world.add_process("server")
    server.start(upper_server)
    process = world.add_process("client")

    async def client(rt: Runtime) -> bytes:
        reader, writer = await asyncio.open_connection("server", 9000)
        server.crash()
        with pytest.raises(ConnectionResetError):
            await reader.readline()
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection("server", 9000)
        server.restart()
        await asyncio.sleep(0.1)
        reader, writer = await asyncio.open_connection("server", 9000)
        writer.write(b"again\n")
        return await reader.readline()

    async def driver() -> bytes:
        return await process.start(client)

    assert world.run(driver()) == b"AGAIN\n"


def test_paused_server_answers_after_resume(world: World) -> None:
    server = world.add_process("server")
    server.start(upper_server)
    process = world.add_process("client")

    async def client(rt: Runtime) -> float:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("server", 9000)
        server.pause()
        loop.call_later(4, server.resume)
        writer.write(b"x\n")
        assert await reader.readline() == b"X\n"
        return loop.time()

    async def driver() -> float:
        return await process.start(client)

    assert 4 <= world.run(driver()) < 4.1


def test_slow_link_adds_latency(world: World) -> None:
    world.network.slow("client", "server", 0.5, 0.0)

    async def client(rt: Runtime) -> float:
        loop = asyncio.get_running_loop()
        reader, writer = await asyncio.open_connection("server", 9000)
        start = loop.time()
        writer.write(b"x\n")
        await reader.readline()
        return loop.time() - start

    assert 0.5 <= run_client(world, client) < 0.6  # type: ignore[operator]


def test_address_in_use_and_foreign_bind_fail(world: World) -> None:
    async def node(rt: Runtime) -> str:
        await asyncio.start_server(lambda r, w: None, None, 9000)
        with pytest.raises(OSError, match="in use"):
            await asyncio.start_server(lambda r, w: None, None, 9000)
        with pytest.raises(OSError, match="cannot bind"):
            await asyncio.start_server(lambda r, w: None, "elsewhere", 9001)
        return "ok"

    process = world.add_process("n1")

    async def driver() -> str:
        return await process.start(node)

    assert world.run(driver()) == "ok"
