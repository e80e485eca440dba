"""A listening socket whose accept loop backs off when the process is out of descriptors.

asyncio's own accept loop (3.11) meets EMFILE/ENFILE by logging a traceback and scheduling a
retry in 1 s, but keeps calling accept() for the rest of its backlog-sized loop: a hundred
tracebacks and a hundred retries per second for as long as descriptors are short (issue 12
counted 1,073,262 errors in 3 minutes). Kafka's Acceptor instead stops accepting for a while
and logs the condition. This one does the same: on EMFILE, ENFILE, ENOBUFS or ENOMEM it stops
watching the socket for ``ACCEPT_BACKOFF_S`` (pending connections wait in the kernel's
backlog meanwhile), and logs one line per minute with a count of what it skipped.

It serves a real process only (kraft/server.py passes ``start_acceptor`` to KraftNode); the
simulator's listeners are asyncio.start_server on its simulated network.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from asyncio import sslproto
from collections.abc import Awaitable, Callable

from log.rate_limited_log import RateLimitedLog

logger = logging.getLogger("broker.acceptor")
_limited = RateLimitedLog(logger)
ACCEPT_BACKOFF_S = 1.0
# Connections taken per readiness event before yielding to the rest of the loop.
ACCEPTS_PER_WAKEUP = 64
TLS_HANDSHAKE_S = 10  # a client that does not finish its TLS handshake by then is dropped
_STREAM_LIMIT = 2**16  # asyncio.open_connection's default reader buffer limit
OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

ConnectionHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class _AlertingTlsProtocol(sslproto.SSLProtocol):
    """asyncio's TLS protocol, but a refused handshake sends its alert before the close.

    asyncio drops the connection at once when the handshake fails, with OpenSSL's alert
    still in its outgoing buffer. Under TLS 1.3 the server checks the client certificate
    after the client has finished its side of the handshake, so a client refused for a
    missing or untrusted certificate then sees only a reset: the Java client takes that for
    a broken connection and retries until its timeout ("Timed out waiting for a node
    assignment"). Kafka flushes the alert (SslTransportLayer.handshakeFailure), so the
    client reads ``certificate_required`` and fails at once with SslAuthenticationException.
    This is what ``loop.start_tls`` builds, plus that flush. asyncio.sslproto is CPython's
    and typeshed omits its internals (``_outgoing``, ``_get_app_transport``), hence the
    getattr; tests/broker/test_network_tls.py fails if either changes.
    """

    def _on_handshake_complete(self, handshake_exc: BaseException | None) -> None:
        transport = self._transport
        if handshake_exc is not None and isinstance(transport, asyncio.WriteTransport):
            outgoing: ssl.MemoryBIO = getattr(self, "_outgoing")  # noqa: B009
            alert = outgoing.read()
            if alert:
                transport.write(alert)
        super()._on_handshake_complete(handshake_exc)

    def app_transport(self) -> asyncio.Transport:
        """The TLS transport the stream writer writes through (made with the protocol, as
        loop.start_tls takes it)."""
        transport: asyncio.Transport = getattr(self, "_get_app_transport")()  # noqa: B009
        return transport


class Acceptor:
    """One listening socket feeding ``handler`` with stream pairs; ``close`` stops it."""

    def __init__(
        self,
        sock: socket.socket,
        handler: ConnectionHandler,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._sock = sock
        self._handler = handler
        self._ssl = ssl_context  # a TLS listener: the handshake runs before the handler
        self._loop = asyncio.get_running_loop()
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False
        self._tasks: set[asyncio.Task] = set()
        self.sockets = [sock]
        self._watch()

    def _watch(self) -> None:
        self._retry = None
        if not self._closed:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(ACCEPTS_PER_WAKEUP):
            try:
                conn, _address = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing more waiting
            except OSError as error:
                if error.errno not in OUT_OF_RESOURCES:
                    raise
                self._loop.remove_reader(self._sock.fileno())
                self._retry = self._loop.call_later(ACCEPT_BACKOFF_S, self._watch)
                _limited.log(
                    f"accept/{self._sock.getsockname()}",
                    logging.ERROR,
                    "[SocketServer] Out of %s while accepting on %s: not accepting for "
                    "%.0f s; raise the open-files limit (ulimit -n) or close connections",
                    "file descriptors"
                    if error.errno in (errno.EMFILE, errno.ENFILE)
                    else "socket memory",
                    self._sock.getsockname(),
                    ACCEPT_BACKOFF_S,
                )
                return
            conn.setblocking(False)
            task = self._loop.create_task(self._serve(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _serve(self, conn: socket.socket) -> None:
        try:
            if self._ssl is None:
                reader, writer = await asyncio.open_connection(sock=conn)
            else:
                reader = asyncio.StreamReader(limit=_STREAM_LIMIT)
                protocol = asyncio.StreamReaderProtocol(reader)
                handshake: asyncio.Future[None] = self._loop.create_future()
                tls = _AlertingTlsProtocol(
                    self._loop,
                    protocol,
                    self._ssl,
                    handshake,
                    server_side=True,
                    ssl_handshake_timeout=TLS_HANDSHAKE_S,
                )
                app_transport = tls.app_transport()
                raw, _ = await self._loop.connect_accepted_socket(lambda: tls, conn)
                try:
                    await handshake
                except BaseException:
                    raw.abort()  # a no-op when the failed handshake has closed it already
                    raise
                writer = asyncio.StreamWriter(app_transport, protocol, reader, self._loop)
        except (OSError, ssl.SSLError, TimeoutError):
            # A failed TLS handshake (no or a wrong client certificate, not TLS at all) ends
            # here, before any request is read; counted in the log, once a minute.
            _limited.log(
                f"tls/{self._sock.getsockname()}",
                logging.INFO,
                "[SocketServer] Failed TLS handshake on %s; connection closed",
                self._sock.getsockname(),
            )
            conn.close()
            return
        await self._handler(reader, writer)

    def close(self) -> None:
        """Stop accepting and close the listening socket (open connections are not touched,
        as with asyncio's Server.close)."""
        if self._closed:
            return
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
        else:
            self._loop.remove_reader(self._sock.fileno())
        self._sock.close()


async def start_acceptor(
    handler: ConnectionHandler,
    host: str | None,
    port: int,
    *,
    backlog: int = 100,
    ssl: ssl.SSLContext | None = None,
) -> Acceptor:
    """Listen on ``host:port`` (all interfaces when host is None) like asyncio.start_server
    (``ssl`` as there: a TLS listener), with the out-of-descriptors backoff."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    family, kind, proto, _name, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError as error:
        sock.close()
        # asyncio.start_server's wording, which names the address an operator must free.
        reason = (error.strerror or str(error)).lower()
        raise OSError(
            error.errno, f"error while attempting to bind on address {address!r}: {reason}"
        ) from None
    return Acceptor(sock, handler, ssl)
