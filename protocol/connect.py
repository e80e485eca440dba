"""Opening a connection to a peer's listener as its security protocol asks: TCP, then TLS
(SSL, SASL_SSL), then the SASL login (SASL_PLAINTEXT, SASL_SSL) before the caller's first
request. The raft transport, the broker's controller channel and its replica fetchers all
connect through here; a PLAINTEXT peer is asyncio.open_connection exactly as before, so the
simulator's network serves it unchanged.
"""

from __future__ import annotations

import asyncio
import ssl
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
        if self._context is None:
            reader, writer = await asyncio.open_connection(host, port)
        else:
            reader, writer = await asyncio.open_connection(
                host, port, ssl=self._context, server_hostname=host
            )
        if self.security.sasl is not None:
            try:
                await login(reader, writer, SaslClient(self.security.sasl), client_id)
            except BaseException:
                writer.transport.abort()
                raise
        return reader, writer


async def login(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    client: SaslClient,
    client_id: str | None,
) -> None:
    """Run the SASL exchange (SaslHandshake v1, then SaslAuthenticate until done), one
    request at a time; SaslError if the server refuses, OSError if the connection fails."""
    response = await _call(reader, writer, client.handshake_request(), client_id, 0)
    client.check_handshake(response)
    request: object | None = client.first_request()
    step = 1
    while request is not None:
        response = await _call(reader, writer, request, client_id, step)
        request = client.next_request(response)
        step += 1
    if not client.done:
        raise SaslError("the SASL exchange ended before the server accepted")


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
