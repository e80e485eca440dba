"""Opening a connection to a peer's listener as its security protocol asks: TCP, then TLS
(SSL, SASL_SSL), then the SASL login (SASL_PLAINTEXT, SASL_SSL) before the caller's first
request. The raft transport, the broker's controller channel and its replica fetchers all
connect through here; a PLAINTEXT peer is asyncio.open_connection exactly as before, so the
simulator's network serves it unchanged.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from protocol import wire
from protocol.sasl import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, SaslClient, SaslError
from protocol.security import PLAINTEXT_CLIENT, ClientSecurity
from protocol.tls import client_context

# The correlation ids of the login's own requests: negative, so no answer to them can be
# taken for a caller's request (whose ids count up from 0).
_LOGIN_CORRELATION_ID = -1000


class Connector:
    """Opens connections to one kind of peer listener; the TLS context is built once."""

    def __init__(self, security: ClientSecurity = PLAINTEXT_CLIENT) -> None:
        self.security = security
        self._context: ssl.SSLContext | None = (
            client_context(security.tls)
            if security.protocol.uses_tls and security.tls is not None
            else None
        )

    async def open(
        self, host: str, port: int, client_id: str | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection ready for requests; OSError (SaslError included) when the peer
        cannot be reached or refuses the login. The caller bounds the time."""
        reader, writer, _lifetime_s = await self.open_session(host, port, client_id)
        return reader, writer

    async def open_session(
        self, host: str, port: int, client_id: str | None
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, float | None]:
        """``open``, and the SASL session's lifetime in seconds (KIP-368's
        session_lifetime_ms): the connection must re-authenticate within it
        (``reauthenticate``). None: no SASL, or sessions do not expire."""
        if self._context is None:
            reader, writer = await asyncio.open_connection(host, port)
        else:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=self._context, server_hostname=host
            )
        lifetime_s = None
        if self.security.sasl is not None:
            try:
                lifetime_s = await login(reader, writer, SaslClient(self.security.sasl), client_id)
            except BaseException:
                writer.transport.abort()
                raise
        return reader, writer, lifetime_s

    async def reauthenticate(self, call: Call) -> float | None:
        """Log in again on an open connection (KIP-368), through ``call``, which sends one
        request on it and returns its answer (the connection sends nothing else
        meanwhile); the new session's lifetime. SaslError when the server refuses."""
        assert self.security.sasl is not None
        return await authenticate(SaslClient(self.security.sasl), call)


# A request sent on a connection and its answer.
Call = Callable[[object], Awaitable[object]]
# When a client re-authenticates, as a fraction of the session lifetime: Kafka's clients pick
# at random between 85% and 95%; the middle is taken here (node code draws no unseeded
# randomness, and a node has few peer connections to spread out).
REAUTHENTICATE_AT = 0.9


async def authenticate(client: SaslClient, call: Call) -> float | None:
    """The SASL exchange (SaslHandshake v1, then SaslAuthenticate until done), one request
    at a time through ``call``; the session lifetime in seconds, None when it does not
    expire. SaslError if the server refuses."""
    response = await call(client.handshake_request())
    client.check_handshake(response)
    request: object | None = client.first_request()
    while request is not None:
        response = await call(request)
        request = client.next_request(response)
    if not client.done:
        raise SaslError("the SASL exchange ended before the server accepted")
    lifetime_ms = client.session_lifetime_ms
    return lifetime_ms / 1000 if lifetime_ms > 0 else None


async def login(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    client: SaslClient,
    client_id: str | None,
) -> float | None:
    """Run the SASL exchange on a new connection before any other request; the session
    lifetime (seconds, None: no expiry). SaslError if the server refuses, OSError if the
    connection fails."""
    steps = itertools.count()

    async def call(request: object) -> object:
        return await _call(reader, writer, request, client_id, next(steps))

    return await authenticate(client, call)


async def _call(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    request: object,
    client_id: str | None,
    step: int,
) -> object:
    body: Any = request
    api_key, version = int(body.__api_key__), int(body.__version__)
    assert api_key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY)
    correlation_id = _LOGIN_CORRELATION_ID - step
    header = wire.RequestHeader(api_key, version, correlation_id, client_id)
    writer.write(wire.encode_request(header, request))
    await writer.drain()
    try:
        frame = await wire.read_frame(reader)
        answered, response = wire.decode_response(api_key, version, frame)
    except asyncio.IncompleteReadError:
        raise SaslError("the server closed the connection during the SASL login") from None
    except (wire.FrameError, ValueError) as error:
        # An OSError like every other failed connect: the callers retry those, and an
        # exception of another kind would end a raft peer's connection loop for good.
        raise SaslError(f"an unreadable answer during the SASL login: {error}") from None
    if answered != correlation_id:
        raise SaslError(f"the SASL login got an answer to correlation id {answered}")
    return response
