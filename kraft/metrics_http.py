"""``metrics.listener=http://HOST:PORT``: Prometheus's scrape endpoint, ``GET /metrics``.

A few lines of HTTP/1.1 on the node's own asyncio loop, so rendering reads the node's state
between its steps, never concurrently with them (prometheus_client's own server runs in a
thread, which node state must never see). Only the real process serves it (kraft/server.py);
the simulator's nodes build the same samples without a socket. Each connection is bounded:
a request head of at most MAX_HEAD_BYTES read within READ_TIMEOUT_S, at most
MAX_CONNECTIONS at once, one response, then the connection closes.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import traceback
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST

from log.rate_limited_log import RateLimitedLog

MAX_HEAD_BYTES = 8192
READ_TIMEOUT_S = 10.0
MAX_CONNECTIONS = 16
PATH = "/metrics"
logger = logging.getLogger("kraft.metrics_http")
_limited = RateLimitedLog(logger)


class MetricsServer:
    """The endpoint; ``start`` binds it, ``close`` stops it and its connections."""

    def __init__(self, render: Callable[[], bytes]) -> None:
        self._render = render
        self._server: asyncio.Server | None = None
        self._handlers: dict[asyncio.Task[None], asyncio.StreamWriter] = {}

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Bind ``host:port`` (an empty host: every interface); the bound address."""
        self._server = await asyncio.start_server(
            functools.partial(MetricsServer._serve, self), host or None, port, limit=MAX_HEAD_BYTES
        )
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def close(self) -> None:
        """Stop listening and end every connection (aborted, so each handler returns: a
        handler cancelled instead is reported by asyncio 3.11 as a traceback)."""
        if self._server is not None:
            self._server.close()
        handlers = list(self._handlers.items())
        for _, writer in handlers:
            writer.transport.abort()
        if handlers:
            await asyncio.wait([task for task, _ in handlers])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._handlers) >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        self._handlers[task] = writer
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            writer.write(self._respond(head))
            await writer.drain()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the scraper went away, stalled, or sent a head we will not read
        finally:
            self._handlers.pop(task, None)
            writer.close()

    def _respond(self, head: bytes) -> bytes:
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return _response(400, "Bad Request", b"not an HTTP/1.x request\n")
        method, target = parts[0], parts[1].split("?", 1)[0]
        if target != PATH:
            return _response(404, "Not Found", f"metrics are at {PATH}\n".encode())
        if method not in ("GET", "HEAD"):
            return _response(405, "Method Not Allowed", b"GET or HEAD\n", "Allow: GET, HEAD\r\n")
        try:
            body = self._render()
        except Exception:  # a collector's bug: this scrape fails, loudly; the node goes on
            _limited.log(
                "render", logging.ERROR, "Rendering /metrics failed\n%s", traceback.format_exc()
            )
            return _response(500, "Internal Server Error", b"rendering the metrics failed\n")
        return _response(200, "OK", body, content_type=CONTENT_TYPE_LATEST, head=method == "HEAD")


def _response(
    status: int,
    reason: str,
    body: bytes,
    extra: str = "",
    *,
    content_type: str = "text/plain; charset=utf-8",
    head: bool = False,
) -> bytes:
    lines = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n{extra}\r\n"
    )
    return lines.encode("latin-1") + (b"" if head else body)
