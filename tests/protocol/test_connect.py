"""The client side of a secured connection against servers that misbehave during the SASL
login: every failure is a SaslError (an OSError, which every caller retries)."""

from __future__ import annotations

import asyncio
import struct

import pytest

from protocol.connect import Connector
from protocol.sasl import SaslError
from protocol.security import ClientSecurity, SaslCredentials, SecurityProtocol

PLAIN_LOGIN = ClientSecurity(
    SecurityProtocol.SASL_PLAINTEXT, sasl=SaslCredentials("PLAIN", "u", "p")
)


async def _against(answer: bytes) -> None:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        await reader.readexactly(size)
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await asyncio.wait_for(Connector(PLAIN_LOGIN).open("127.0.0.1", port, "t"), 10)
    finally:
        server.close()


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"", "closed the connection during the SASL login"),
        (struct.pack(">i", 3) + b"\x00\x01\x02", "unreadable answer"),
        # A well-formed SaslHandshake v1 answer to another correlation id.
        (struct.pack(">iihi", 10, 5, 0, 0), "correlation id 5"),
        # UNSUPPORTED_SASL_MECHANISM (33) with no mechanisms offered.
        (struct.pack(">iihi", 10, -1000, 33, 0), "SaslHandshake for PLAIN failed"),
    ],
)
def test_a_misbehaving_server_is_a_sasl_error(answer: bytes, message: str) -> None:
    with pytest.raises(SaslError, match=message):
        asyncio.run(_against(answer))
    assert issubclass(SaslError, OSError)
