"""The runtime scenario: nodes that echo messages to each other and log them durably.

It exercises every part of the simulated runtime with plain asyncio code (streams, timeouts,
tasks, the filesystem seam) and checks what the runtime promises:
- echo: a reply is exactly the request it answers (bytes arrive intact and in order);
- durability: after a restart, a node's log holds every record it fsynced before the crash,
  as a clean prefix (a torn tail is detected by CRC and cut off, never read as data);
- liveness: once faults heal, within 10 virtual seconds every node completes an echo and
  answers one.
Planted bugs (``--bug``) prove the checks can fail. Each changes what the node does, never
what the checker expects: ``ack-before-fsync`` acknowledges a sync point at once and leaves
the fsync to a background flusher (every second, like a log.flush.interval.ms); ``skip-dir-
fsync`` never makes the log's name durable.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

import crc32c

from log.fs import FileSystem
from log.runtime import Runtime
from sim.harness import ScenarioRun
from sim.nemesis import Nemesis
from sim.process import SimProcess
from sim.run import RunConfig, RunResult
from sim.trace import Trace

PORT = 7000
LOG_PATH = "/data/echo.log"
RECORD = struct.Struct(">QI4x")
SYNC_EVERY = 5
HEAL_BOUND_S = 10.0
FLUSH_INTERVAL_S = 1.0  # the ack-before-fsync bug's background flusher
BUGS = {
    "ack-before-fsync": "a node acknowledges records durable and fsyncs them later",
    "skip-dir-fsync": "a node never fsyncs the directory that holds its log",
}


@dataclass(slots=True)
class Shared:
    """What the checker knows across incarnations (the simulator's memory, not a node's):
    ``synced`` is what each node acknowledged durable, the promise the checker holds it to."""

    bug: str | None
    synced: dict[str, int] = field(default_factory=dict)
    served_after: dict[str, int] = field(default_factory=dict)
    ok_after: dict[str, int] = field(default_factory=dict)
    heal_time: float | None = None
    violation: str | None = None
    ops: int = 0
    ops_ok: int = 0

    def fail(self, message: str) -> None:
        if self.violation is None:
            self.violation = message


def _encode(seq: int) -> bytes:
    raw = struct.pack(">Q", seq)
    return RECORD.pack(seq, crc32c.crc32c(raw))


def _recover(fs: FileSystem) -> int:
    """Count the valid records at the head of the log and cut anything after them."""
    if not fs.exists(LOG_PATH):
        return 0
    handle = fs.open(LOG_PATH)
    data = handle.pread(0, handle.size())
    count = 0
    for position in range(0, len(data) - RECORD.size + 1, RECORD.size):
        seq, crc = RECORD.unpack_from(data, position)
        if seq != count + 1 or crc != crc32c.crc32c(struct.pack(">Q", seq)):
            break
        count += 1
    handle.truncate(count * RECORD.size)
    handle.close()
    return count


async def _node(
    runtime: Runtime, process: SimProcess, peers: list[str], shared: Shared, trace: Trace
) -> None:
    loop = asyncio.get_running_loop()
    fs, rng, name = runtime.fs, runtime.rng, process.name
    fs.mkdir("/data")
    recovered = _recover(fs)
    if recovered < shared.synced.get(name, 0):
        shared.fail(
            f"durability: {name} recovered {recovered} records, "
            f"but {shared.synced[name]} were acknowledged durable"
        )
    # What this node had acknowledged as durable before it went down: the trace carries it
    # so the trace analysis can re-derive the durability verdict on its own.
    synced_before = shared.synced.get(name, 0)
    log = fs.open(LOG_PATH)
    await log.fsync()
    if shared.bug != "skip-dir-fsync":
        await fs.fsync_dir("/data")
        await fs.fsync_dir("/")
    shared.synced[name] = recovered
    trace.event("recovered", node=name, records=recovered, synced=synced_before)
    written = recovered

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                writer.write(name.encode() + b"|" + line)
                await writer.drain()
                if shared.heal_time is not None and loop.time() >= shared.heal_time:
                    shared.served_after[name] = shared.served_after.get(name, 0) + 1
        except OSError:
            pass
        finally:
            writer.transport.abort()

    await asyncio.start_server(serve, None, PORT)
    conns: dict[str, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
    seq = 0
    next_flush = loop.time() + FLUSH_INTERVAL_S
    while True:
        await asyncio.sleep(rng.uniform(0.05, 0.2))
        peer = rng.choice(peers)
        seq += 1
        request = f"{name}.{process.incarnation}.{seq}\n".encode()
        shared.ops += 1
        trace.event("op", node=name, type="invoke", f="echo", key=peer, value=seq)
        try:
            if peer not in conns:
                conns[peer] = await asyncio.wait_for(asyncio.open_connection(peer, PORT), 2.0)
            reader, writer = conns[peer]
            writer.write(request)
            await writer.drain()
            reply = await asyncio.wait_for(reader.readline(), 1.0)
            if not reply:
                raise ConnectionResetError("connection closed")
        except OSError as error:
            trace.event(
                "op",
                node=name,
                type="fail",
                f="echo",
                key=peer,
                value=seq,
                error=type(error).__name__,
            )
            stale = conns.pop(peer, None)
            if stale is not None:
                stale[1].transport.abort()
            continue
        if reply != peer.encode() + b"|" + request:
            # The history records what came back, so the analysis sees the mismatch too.
            trace.event(
                "op",
                node=name,
                type="ok",
                f="echo",
                key=peer,
                value=reply.decode(errors="replace").rstrip("\n"),
            )
            shared.fail(f"echo: {name} sent {request!r} to {peer} and got {reply!r}")
            return
        shared.ops_ok += 1
        trace.event("op", node=name, type="ok", f="echo", key=peer, value=seq)
        if shared.heal_time is not None and loop.time() >= shared.heal_time:
            shared.ok_after[name] = shared.ok_after.get(name, 0) + 1
        try:
            log.append(_encode(written + 1))
            written += 1
            if shared.bug == "ack-before-fsync" and loop.time() >= next_flush:
                next_flush = loop.time() + FLUSH_INTERVAL_S
                await log.fsync()
            if written % SYNC_EVERY == 0:
                if shared.bug != "ack-before-fsync":
                    await log.fsync()
                shared.synced[name] = written  # the acknowledgement
        except OSError as error:
            # A failed append changed nothing; a failed fsync left the records unsynced, so
            # they are not counted durable and the next fsync covers them again.
            trace.event("disk-error", node=name, error=error.strerror or str(error))


def run_echo(config: RunConfig) -> RunResult:
    """Run the echo scenario once and judge it."""
    run = ScenarioRun(config, BUGS)
    world = run.world
    shared = Shared(bug=config.bug)
    names = [f"n{i}" for i in range(1, config.nodes + 1)]
    for name in names:
        process = world.add_process(name)
        peers = [other for other in names if other != name]
        process.start(lambda rt, p=process, peers=peers: _node(rt, p, peers, shared, world.trace))
    nemesis = Nemesis(world, names, config.faults)

    async def drive() -> None:
        await nemesis.run(config.duration_s)
        nemesis.heal_all()
        shared.heal_time = world.loop.time()
        deadline = shared.heal_time + HEAL_BOUND_S
        while world.loop.time() < deadline and shared.violation is None:
            if all(shared.ok_after.get(n) and shared.served_after.get(n) for n in names):
                return
            await asyncio.sleep(0.1)
        if shared.violation is None:
            stuck = [
                n for n in names if not (shared.ok_after.get(n) and shared.served_after.get(n))
            ]
            shared.fail(
                f"liveness: {','.join(stuck)} made no progress within "
                f"{HEAL_BOUND_S:.0f}s of healing"
            )

    return run.finish(
        drive(),
        lambda: shared.violation,
        shared.fail,
        lambda: {
            "ops": shared.ops,
            "ok": shared.ops_ok,
            "faults": nemesis.injected,
            "deliveries": world.network.deliveries,
        },
    )
