"""The simulated network: TCP-like connections between simulated processes, with faults.

What a connection guarantees, as TCP does: bytes written on one side arrive at the other in
order, each write after a seeded latency (never overtaking an earlier one). What the network
can do to it (docs/simulation.md):
- latency and jitter, globally or per directed link (``slow``);
- partitions: any set of directed links cut (``block``), symmetric group splits
  (``partition``), ``isolate``, ``bridge``. Bytes sent across a cut wait, as TCP
  retransmits; if the cut heals within ``retransmit_timeout_s`` they arrive and the
  connection carries on, otherwise both ends get ``TimeoutError`` (ETIMEDOUT) and the
  connection is gone. A connect across a cut retries its SYN for ``connect_timeout_s``
  then fails with ETIMEDOUT;
- stalls: a cut of one link for a bounded time (``stall``), healed automatically;
- resets of every connection between two hosts (``reset``), and refused connects
  (``refuse``) on top of the ECONNREFUSED a host without a listener gives;
- a crashed process: its listeners vanish and its peers get ECONNRESET after one latency.
What it does not do (yet): lose or duplicate bytes inside a live connection, reorder writes,
or apply flow control (writes buffer without limit).
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import random
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim.loop import CURRENT, SimLoop

if TYPE_CHECKING:
    from sim.process import SimProcess
    from sim.trace import Trace

_LOCAL_NAMES = ("localhost", "127.0.0.1", "::1", "0.0.0.0", "", None)
_SYN_RETRY_S = (1.0, 2.0, 4.0, 8.0, 16.0)


@dataclass(slots=True)
class _Pipe:
    """One direction of a connection: what has been sent and not yet delivered."""

    src: SimTransport
    dst: SimTransport
    queue: deque[tuple[float, str, bytes]] = field(default_factory=deque)
    last_at: float = 0.0
    timer: asyncio.TimerHandle | None = None
    stalled_since: float | None = None


class SimTransport(asyncio.Transport):
    """One end of a simulated connection, owned by one process incarnation."""

    def __init__(
        self,
        net: SimNetwork,
        conn_id: int,
        process: SimProcess,
        context: contextvars.Context,
        sockname: tuple[str, int],
        peername: tuple[str, int],
    ) -> None:
        super().__init__()
        self._net = net
        self.conn_id = conn_id
        self.process = process
        self.incarnation = process.incarnation
        self.context = context
        self.sockname = sockname
        self.peername = peername
        self.protocol: asyncio.BaseProtocol | None = None
        self.out: _Pipe | None = None
        self.closing = False
        self.lost = False
        self.reading_paused = False

    # ---- asyncio.Transport ---------------------------------------------------------------
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peername, "sockname": self.sockname}.get(name, default)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        if self.closing:
            return
        self.closing = True
        self._net._send(self, "fin", b"")
        self._net._lose_soon(self, None)

    def abort(self) -> None:
        if self.lost:
            return
        self.closing = True
        self._net._abort(self)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self.protocol is not None
        return self.protocol

    def is_reading(self) -> bool:
        return not self.reading_paused and not self.closing

    def pause_reading(self) -> None:
        self.reading_paused = True

    def resume_reading(self) -> None:
        if self.reading_paused:
            self.reading_paused = False
            peer_out = self.out.dst.out if self.out is not None else None
            if peer_out is not None:
                self._net._schedule_pump(peer_out)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closing or not data:
            return
        self._net._send(self, "data", bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def write_eof(self) -> None:
        if not self.closing:
            self._net._send(self, "fin", b"")

    def can_write_eof(self) -> bool:
        return True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return (0, 0)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        return None


class _SockInfo:
    """Stands in for ``server.sockets[i]`` so callers can read the bound address."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._address = address

    def getsockname(self) -> tuple[str, int]:
        return self._address


class SimServer(asyncio.AbstractServer):
    """A listening socket on a simulated host."""

    def __init__(
        self,
        net: SimNetwork,
        process: SimProcess,
        factory: Callable[[], asyncio.BaseProtocol],
        address: tuple[str, int],
        context: contextvars.Context,
        serving: bool,
    ) -> None:
        self._net = net
        self.process = process
        self.incarnation = process.incarnation
        self.factory = factory
        self.address = address
        self.context = context
        self._serving = serving
        self._closed = False
        self._forever: asyncio.Future | None = None

    @property
    def sockets(self) -> tuple[_SockInfo, ...]:
        return () if self._closed else (_SockInfo(self.address),)

    def accepting(self) -> bool:
        return self._serving and not self._closed and self.process.alive

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._net._unlisten(self)
            if self._forever is not None and not self._forever.done():
                self._forever.cancel()

    async def wait_closed(self) -> None:
        return None

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._net.loop

    def is_serving(self) -> bool:
        return self._serving and not self._closed

    async def start_serving(self) -> None:
        self._serving = True

    async def serve_forever(self) -> None:
        self._serving = True
        self._forever = self._net.loop.create_future()
        try:
            await self._forever
        finally:
            self.close()


class SimNetwork:
    """Every simulated connection and listener, and the faults applied to them."""

    def __init__(self, loop: SimLoop, rng: random.Random, trace: Trace) -> None:
        self.loop = loop
        self._rng = rng
        self._trace = trace
        # Network-internal callbacks run in a context owned by no process, so a paused
        # sender cannot hold back bytes it already handed to the network.
        self._context = contextvars.Context()
        self.base_latency_s = 0.0002
        self.jitter_s = 0.0008
        self.retransmit_timeout_s = 30.0
        self.connect_timeout_s = 31.0
        self._slow: dict[tuple[str, str], tuple[float, float]] = {}
        self._cut: set[tuple[str, str]] = set()
        self._refusing: dict[str, int] = {}
        self._listeners: dict[tuple[str, int], SimServer] = {}
        self._conns: dict[int, tuple[SimTransport, SimTransport]] = {}
        self._next_conn = 1
        self._next_port: dict[str, int] = {}
        self.hosts: list[str] = []
        self.bytes_delivered = 0
        self.deliveries = 0

    # ---- topology and faults --------------------------------------------------------------
    def add_host(self, host: str) -> None:
        self.hosts.append(host)

    def reachable(self, src: str, dst: str) -> bool:
        return (src, dst) not in self._cut

    def block(self, src: str, dst: str) -> list[tuple[str, str]]:
        """Cut the directed link src -> dst (a one-way partition); the cuts it added."""
        if (src, dst) in self._cut:
            return []
        self._cut.add((src, dst))
        return [(src, dst)]

    def partition(self, *groups: Iterable[str]) -> list[tuple[str, str]]:
        """Cut every link between hosts of different groups, both ways; the cuts it added
        (``restore`` them to end just this partition while others go on)."""
        sets = [list(g) for g in groups]
        added = []
        for i, group in enumerate(sets):
            for other in sets[i + 1 :]:
                for a in group:
                    for b in other:
                        added += self.block(a, b) + self.block(b, a)
        self._trace.event("partition", groups=[sorted(g) for g in sets])
        return added

    def isolate(self, host: str) -> list[tuple[str, str]]:
        """Cut a host off from every other host."""
        return self.partition([host], [h for h in self.hosts if h != host])

    def bridge(
        self, left: Iterable[str], middle: str, right: Iterable[str]
    ) -> list[tuple[str, str]]:
        """Cut ``left`` from ``right``; ``middle`` still talks to both."""
        return self.partition(list(left), list(right))

    def restore(self, cuts: list[tuple[str, str]]) -> None:
        """Undo the given cuts (one partition ending) and let waiting bytes flow."""
        for cut in cuts:
            self._cut.discard(cut)
        self._trace.event("restore", links=len(cuts))
        self._repump()

    def _repump(self) -> None:
        for a, b in self._conns.values():
            for tr in (a, b):
                if tr.out is not None and tr.out.queue:
                    self._schedule_pump(tr.out)

    def heal(self) -> None:
        """Remove every cut and let waiting bytes flow."""
        self._cut.clear()
        self._slow.clear()
        self._trace.event("heal")
        self._repump()

    def slow(self, src: str, dst: str, extra_s: float, jitter_s: float) -> None:
        """Add latency (plus uniform jitter) to the directed link src -> dst."""
        self._slow[(src, dst)] = (extra_s, jitter_s)

    def unslow(self, src: str, dst: str) -> None:
        self._slow.pop((src, dst), None)

    def stall(self, src: str, dst: str, duration_s: float) -> None:
        """Hold every byte on src -> dst for ``duration_s``, then let them through."""
        self._cut.add((src, dst))
        self._trace.event("stall", src=src, dst=dst, duration_us=int(duration_s * 1e6))
        self.loop.call_later(duration_s, self._end_stall, src, dst, context=self._context)

    def _end_stall(self, src: str, dst: str) -> None:
        self._cut.discard((src, dst))
        self._repump()

    def refuse(self, host: str, count: int) -> None:
        """Refuse the next ``count`` connects to ``host``."""
        self._refusing[host] = count

    def reset(self, a: str, b: str) -> int:
        """Reset every connection between hosts a and b; returns how many."""
        victims = [
            conn_id
            for conn_id, (x, y) in self._conns.items()
            if {x.sockname[0], y.sockname[0]} == {a, b}
        ]
        for conn_id in victims:
            self._kill(conn_id, ConnectionResetError(errno.ECONNRESET, "simulated reset"))
        self._trace.event("reset", a=a, b=b, connections=len(victims))
        return len(victims)

    def process_crashed(self, process: SimProcess) -> None:
        """Drop a crashed process's listeners; its peers see a reset."""
        for key, server in list(self._listeners.items()):
            if server.process is process:
                del self._listeners[key]
        for conn_id, (a, b) in list(self._conns.items()):
            for mine, peer in ((a, b), (b, a)):
                if mine.process is process and not mine.lost:
                    mine.lost = mine.closing = True
                    self._conns.pop(conn_id, None)
                    error = ConnectionResetError(errno.ECONNRESET, "peer crashed")
                    self.loop.call_later(
                        self._latency(mine.sockname[0], peer.sockname[0]),
                        self._lose,
                        peer,
                        error,
                        context=self._context,
                    )

    # ---- listening and connecting ---------------------------------------------------------
    def _caller(self) -> SimProcess:
        owner = CURRENT.get()
        if owner is None:
            raise RuntimeError("network calls must come from a simulated process")
        process, incarnation = owner
        if not process.alive or process.incarnation != incarnation:
            raise ConnectionAbortedError(errno.ECONNABORTED, "process is not running")
        return process

    def _resolve(self, host: str | None, process: SimProcess) -> str:
        return process.name if host in _LOCAL_NAMES else str(host)

    def listen(
        self,
        factory: Callable[[], asyncio.BaseProtocol],
        host: Any,
        port: int,
        *,
        start_serving: bool = True,
    ) -> SimServer:
        process = self._caller()
        if isinstance(host, (list, tuple)):
            host = host[0] if host else None
        host = self._resolve(host, process)
        if host != process.name:
            raise OSError(errno.EADDRNOTAVAIL, f"{process.name} cannot bind {host}")
        if port == 0:
            port = self._next_port.get(host, 40000)
            self._next_port[host] = port + 1
        if (host, port) in self._listeners:
            raise OSError(errno.EADDRINUSE, f"address already in use: {host}:{port}")
        server = SimServer(
            self, process, factory, (host, port), contextvars.copy_context(), start_serving
        )
        self._listeners[(host, port)] = server
        return server

    def _unlisten(self, server: SimServer) -> None:
        if self._listeners.get(server.address) is server:
            del self._listeners[server.address]

    async def connect(
        self, factory: Callable[[], asyncio.BaseProtocol], host: str | None, port: int | None
    ) -> tuple[SimTransport, asyncio.BaseProtocol]:
        process = self._caller()
        dst_host = self._resolve(host, process)
        future: asyncio.Future = self.loop.create_future()
        src_port = self._next_port.get(process.name, 40000)
        self._next_port[process.name] = src_port + 1
        attempt = (process, process.incarnation, contextvars.copy_context(), factory, future)
        self.loop.call_later(
            self._latency(process.name, dst_host),
            self._syn,
            attempt,
            (process.name, src_port),
            (dst_host, int(port or 0)),
            0,
            context=self._context,
        )
        return await future

    def _syn(self, attempt: tuple, src: tuple[str, int], dst: tuple[str, int], tries: int) -> None:
        process, incarnation, context, factory, future = attempt
        if future.done() or process.incarnation != incarnation:
            return
        if not (self.reachable(src[0], dst[0]) and self.reachable(dst[0], src[0])):
            if tries >= len(_SYN_RETRY_S):
                future.set_exception(TimeoutError(errno.ETIMEDOUT, f"connect to {dst} timed out"))
                return
            self.loop.call_later(
                _SYN_RETRY_S[tries], self._syn, attempt, src, dst, tries + 1, context=self._context
            )
            return
        server = self._listeners.get(dst)
        if server is None or not server.accepting() or self._refusing.get(dst[0], 0) > 0:
            if dst[0] in self._refusing and self._refusing[dst[0]] > 0:
                self._refusing[dst[0]] -= 1
            self.loop.call_later(
                self._latency(dst[0], src[0]), self._refused, future, dst, context=self._context
            )
            return
        conn_id = self._next_conn
        self._next_conn += 1
        client = SimTransport(self, conn_id, process, context, src, dst)
        server_side = SimTransport(self, conn_id, server.process, server.context.copy(), dst, src)
        client.out = _Pipe(client, server_side)
        server_side.out = _Pipe(server_side, client)
        self._conns[conn_id] = (client, server_side)
        self.loop.call_soon(
            self._accept,
            server,
            server_side,
            client,
            factory,
            future,
            context=server_side.context,
        )

    def _refused(self, future: asyncio.Future, dst: tuple[str, int]) -> None:
        if not future.done():
            future.set_exception(
                ConnectionRefusedError(errno.ECONNREFUSED, f"connection refused: {dst}")
            )

    def _accept(
        self,
        server: SimServer,
        server_side: SimTransport,
        client: SimTransport,
        factory: Callable[[], asyncio.BaseProtocol],
        future: asyncio.Future,
    ) -> None:
        if not server.accepting() or server_side.incarnation != server.process.incarnation:
            self._conns.pop(client.conn_id, None)
            self._refused(future, server.address)
            return
        protocol = server.factory()
        server_side.protocol = protocol
        protocol.connection_made(server_side)
        established_at = self.loop.time() + self._latency(server.address[0], client.sockname[0])
        assert server_side.out is not None
        # Bytes the server writes straight away must not overtake the handshake.
        server_side.out.last_at = established_at
        self.loop.call_at(
            established_at, self._established, client, factory, future, context=client.context
        )

    def _established(
        self,
        client: SimTransport,
        factory: Callable[[], asyncio.BaseProtocol],
        future: asyncio.Future,
    ) -> None:
        if future.done() or client.lost:
            # The caller gave up (timeout, cancellation, crash): the server sees a reset.
            self._kill(client.conn_id, ConnectionResetError(errno.ECONNRESET, "connect aborted"))
            return
        protocol = factory()
        client.protocol = protocol
        protocol.connection_made(client)
        future.set_result((client, protocol))
        self._trace.event(
            "connect", src=client.sockname[0], dst=client.peername[0], conn=client.conn_id
        )

    # ---- moving bytes -------------------------------------------------------------------
    def _latency(self, src: str, dst: str) -> float:
        latency = self.base_latency_s + self._rng.random() * self.jitter_s
        extra = self._slow.get((src, dst))
        if extra is not None:
            latency += extra[0] + self._rng.random() * extra[1]
        return latency

    def _send(self, tr: SimTransport, kind: str, data: bytes) -> None:
        pipe = tr.out
        if pipe is None or tr.lost or tr.conn_id not in self._conns:
            return
        at = max(self.loop.time() + self._latency(tr.sockname[0], tr.peername[0]), pipe.last_at)
        pipe.last_at = at
        pipe.queue.append((at, kind, data))
        if pipe.timer is None:
            pipe.timer = self.loop.call_at(at, self._pump, pipe, context=self._context)

    def _schedule_pump(self, pipe: _Pipe) -> None:
        if pipe.timer is None and pipe.queue:
            at = max(self.loop.time(), pipe.queue[0][0])
            pipe.timer = self.loop.call_at(at, self._pump, pipe, context=self._context)

    def _pump(self, pipe: _Pipe) -> None:
        pipe.timer = None
        src, dst = pipe.src, pipe.dst
        if dst.lost or pipe.src.conn_id not in self._conns:
            pipe.queue.clear()
            return
        now = self.loop.time()
        while pipe.queue and pipe.queue[0][0] <= now:
            if not self.reachable(src.sockname[0], dst.sockname[0]):
                if pipe.stalled_since is None:
                    pipe.stalled_since = now
                    self.loop.call_later(
                        self.retransmit_timeout_s,
                        self._check_stall,
                        pipe,
                        now,
                        context=self._context,
                    )
                return
            if dst.reading_paused:
                return
            pipe.stalled_since = None
            _, kind, data = pipe.queue.popleft()
            self.deliveries += 1
            self.bytes_delivered += len(data)
            self._trace.mix(src.conn_id, kind, len(data))
            if kind == "data":
                self.loop.call_soon(self._data, dst, data, context=dst.context)
            else:
                self.loop.call_soon(self._eof, dst, context=dst.context)
        if pipe.queue:
            pipe.timer = self.loop.call_at(
                max(now, pipe.queue[0][0]), self._pump, pipe, context=self._context
            )

    def _check_stall(self, pipe: _Pipe, since: float) -> None:
        if pipe.stalled_since == since and pipe.queue:
            self._kill(pipe.src.conn_id, TimeoutError(errno.ETIMEDOUT, "retransmission timed out"))

    def _data(self, tr: SimTransport, data: bytes) -> None:
        if tr.closing or tr.lost or tr.protocol is None:
            return
        tr.protocol.data_received(data)  # type: ignore[attr-defined]

    def _eof(self, tr: SimTransport) -> None:
        if tr.closing or tr.lost or tr.protocol is None:
            return
        keep_open = tr.protocol.eof_received()  # type: ignore[attr-defined]
        if not keep_open:
            tr.close()

    def _lose_soon(self, tr: SimTransport, error: Exception | None) -> None:
        self.loop.call_soon(self._lose, tr, error, context=self._context)

    def _lose(self, tr: SimTransport, error: Exception | None) -> None:
        if tr.lost:
            return
        tr.lost = tr.closing = True
        if tr.out is not None:
            peer = tr.out.dst
            if peer.lost and tr.conn_id in self._conns:
                del self._conns[tr.conn_id]
        if tr.protocol is not None:
            self.loop.call_soon(tr.protocol.connection_lost, error, context=tr.context)

    def _abort(self, tr: SimTransport) -> None:
        if tr.out is not None:
            tr.out.queue.clear()
            peer = tr.out.dst
            self.loop.call_later(
                self._latency(tr.sockname[0], peer.sockname[0]),
                self._lose,
                peer,
                ConnectionResetError(errno.ECONNRESET, "connection reset by peer"),
                context=self._context,
            )
        self._lose(tr, None)

    def _kill(self, conn_id: int, error: Exception) -> None:
        pair = self._conns.pop(conn_id, None)
        if pair is None:
            return
        for tr in pair:
            if tr.out is not None:
                tr.out.queue.clear()
            self._lose(tr, error)
