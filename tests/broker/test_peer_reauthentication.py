"""KIP-368 on this node's own connections to its peers: a broker's KafkaConnection
(controller channel, replica fetchers, transaction markers) and a quorum member's raft
PeerConnection log in again on the same connection before the session the listener gave
them ends, so a listener with connections.max.reauth.ms never has to close them."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest

from broker.client import KafkaConnection
from broker.security import authenticating, served_apis
from kraft.scram_args import parse_add_scram
from protocol import wire
from protocol.api_keys import ApiKey
from protocol.api_table import api_versions_response
from protocol.connect import Connector
from protocol.sasl import ScramCredential
from protocol.security import ClientSecurity, ListenerSecurity, SaslCredentials, SecurityProtocol
from protocol.server import serve_connection
from raft import codec
from raft.messages import BeginQuorumEpochRequest, BeginQuorumEpochResponse, Response
from raft.transport import PeerConnection

# Re-authentication comes at 90% of the lifetime: 100 ms before the server's deadline, so a
# loaded machine's stalled loop does not make the server close the session first.
LIFETIME_MS = 1000
RUN_S = 3.2  # past three session lifetimes
API_VERSIONS_ONLY = {ApiKey.API_VERSIONS: (0, 3)}


SCRAM = parse_add_scram("SCRAM-SHA-512=[name=peer,password=peer-pw]")


def _listener() -> ListenerSecurity:
    return ListenerSecurity(
        name="CONTROLLER",
        protocol=SecurityProtocol.SASL_PLAINTEXT,
        mechanisms=("PLAIN", "SCRAM-SHA-512"),
        plain_users={"peer": "peer-pw"},
        max_reauth_ms=LIFETIME_MS,
    )


def _scram(user: str, mechanism: str) -> ScramCredential | None:
    if (user, mechanism) != ("peer", "SCRAM-SHA-512"):
        return None
    return ScramCredential(SCRAM.salt, SCRAM.stored_key, SCRAM.server_key, SCRAM.iterations)


def _connector(password: str = "peer-pw", mechanism: str = "PLAIN") -> Connector:
    return Connector(
        ClientSecurity(
            SecurityProtocol.SASL_PLAINTEXT, sasl=SaslCredentials(mechanism, "peer", password)
        )
    )


class Server:
    """A SASL_PLAINTEXT listener as a node serves it (broker/security.py's authenticating in
    front of the handler), counting connections, handshakes and closes of expired sessions."""

    def __init__(self, handle: Any, versions: dict[int, tuple[int, int]]) -> None:
        self.handle = handle
        self.versions = served_apis(_listener(), versions)
        self.connections = 0
        self.handshakes = 0
        self.closed_expired = 0

    async def on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        authenticated = authenticating(self.handle, _listener(), writer, _scram, 1 << 20)
        assert authenticated is not None

        async def watching(header: wire.RequestHeader, request: object) -> object | None:
            if header.api_key == ApiKey.SASL_HANDSHAKE:
                self.handshakes += 1
            response = await authenticated.handle(header, request)
            if response is None:
                self.closed_expired += 1  # anything else closing is a test failure too
            return response

        await serve_connection(reader, writer, watching, self.versions)


async def _api_versions(header: wire.RequestHeader, _request: object) -> object:
    return api_versions_response(header.api_version, API_VERSIONS_ONLY)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_kafka_connection_reauthenticates_before_its_session_ends(mechanism: str) -> None:
    async def run() -> tuple[Server, int, int, bool]:
        server = Server(_api_versions, API_VERSIONS_ONLY)
        listening = await asyncio.start_server(server.on_connection, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        connection = KafkaConnection("broker-2-fetcher", connector=_connector(mechanism=mechanism))
        answered = 0
        try:
            await connection.connect("127.0.0.1", port, 5)
            loop = asyncio.get_running_loop()
            end = loop.time() + RUN_S
            request = ApiVersionsRequest(client_software_name="t", client_software_version="1")
            while loop.time() < end:
                # Several in flight at once, so a re-authentication has to wait for answers.
                await asyncio.gather(*(connection.request(request, 5) for _ in range(3)))
                answered += 3
                await asyncio.sleep(0.02)
            return server, answered, connection.reauthentications, connection.closed
        finally:
            await connection.close()
            listening.close()

    server, answered, reauthentications, closed = asyncio.run(run())
    assert not closed and server.connections == 1 and server.closed_expired == 0
    # A login at 0 and one every 0.9 x 1 s: three re-authentications in 3.2 s.
    assert reauthentications >= 3 and server.handshakes == reauthentications + 1
    assert answered > 30


def test_a_refused_reauthentication_closes_the_kafka_connection() -> None:
    """The password changed on the server between the login and the re-authentication: the
    connection is closed, as Kafka's client closes it, and its requests fail."""

    async def run() -> bool:
        server = Server(_api_versions, API_VERSIONS_ONLY)
        listening = await asyncio.start_server(server.on_connection, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        connector = _connector()
        connection = KafkaConnection("c", connector=connector)
        try:
            await connection.connect("127.0.0.1", port, 5)
            connector.security = ClientSecurity(
                SecurityProtocol.SASL_PLAINTEXT, sasl=SaslCredentials("PLAIN", "peer", "old")
            )
            await asyncio.sleep(LIFETIME_MS / 1000 + 0.3)  # past the re-authentication
            return connection.closed
        finally:
            await connection.close()
            listening.close()

    assert asyncio.run(run())


def test_a_raft_peer_connection_reauthenticates_before_its_session_ends() -> None:
    async def begin_quorum_epoch(header: wire.RequestHeader, request: object) -> object:
        if header.api_key == ApiKey.API_VERSIONS:
            return await _api_versions(header, request)
        return codec.encode_raft_response(
            BeginQuorumEpochResponse(0, 5, 1),
            api_key=header.api_key,
            api_version=header.api_version,
        )

    async def run() -> tuple[Server, list[Response], int]:
        server = Server(
            begin_quorum_epoch,
            {
                **API_VERSIONS_ONLY,
                ApiKey.BEGIN_QUORUM_EPOCH: codec.API_VERSIONS[ApiKey.BEGIN_QUORUM_EPOCH],
            },
        )
        listening = await asyncio.start_server(server.on_connection, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        answers: list[Response] = []
        peer = PeerConnection(
            2,
            ("127.0.0.1", port),
            deliver=lambda _peer, _cid, body: answers.append(body),
            rng=random.Random(0),
            client_id="raft-client-1",
            connector=_connector(),
        )
        peer.start()
        try:
            loop = asyncio.get_running_loop()
            end = loop.time() + RUN_S
            correlation_id = 0
            while loop.time() < end:
                peer.send(
                    correlation_id,
                    BeginQuorumEpochRequest(5, 1),
                    cluster_id="c",
                    src_id=1,
                    timeout_s=2,
                )
                correlation_id += 1
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.1)
            return server, answers, peer.reauthentications
        finally:
            await peer.close()
            listening.close()

    server, answers, reauthentications = asyncio.run(run())
    assert server.connections == 1 and server.closed_expired == 0
    assert reauthentications >= 3 and server.handshakes == reauthentications + 1
    assert len(answers) > 30
    assert all(isinstance(a, BeginQuorumEpochResponse) for a in answers[:-3])
